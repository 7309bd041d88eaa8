/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the tokenizer loader. The input is a tokenizer.json; when
 * it is accepted, fixed strings and the input itself are encoded and
 * decoded, and the invariants the engine relies on must hold: every id is
 * below n_ids and decodes, decoded text is valid UTF-8, and streaming
 * detokenization equals one-shot decoding. A rejection must carry a
 * message naming the file. A violation aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"
#include "utf8.h"
#include "util.h"

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "invariant failed: %s\n", #x); abort(); } } while (0)

static void check_text(dsv4_tokenizer *t, const char *s, size_t n)
{
    struct dsv4_ids ids = { 0 };
    dsv4_tokenizer_encode(t, s, n, true, &ids);
    for (size_t i = 0; i < ids.n; i++)
        CHECK(ids.v[i] < dsv4_tokenizer_n_ids(t));
    for (int special = 0; special < 2; special++) {
        char *text;
        size_t len;
        CHECK(dsv4_tokenizer_decode(t, ids.v, ids.n, special, &text, &len, NULL) == 0);
        CHECK(dsv4_utf8_valid_prefix((const uint8_t *)text, len) == len);
        struct dsv4_detok d;
        dsv4_detok_init(&d, t, special);
        size_t off = 0;
        for (size_t i = 0; i <= ids.n; i++) {
            const char *p;
            size_t l;
            if (i < ids.n)
                CHECK(dsv4_detok_feed(&d, ids.v[i], &p, &l, NULL) == 0);
            else
                dsv4_detok_flush(&d, &p, &l);
            CHECK(off + l <= len && memcmp(text + off, p, l) == 0);
            off += l;
        }
        CHECK(off == len);
        dsv4_detok_free(&d);
        free(text);
    }
    dsv4_ids_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsv4_tokenizer *t;
    struct dsv4_err err = { "" };
    int rc = dsv4_tokenizer_parse((const char *)data, size, NULL, 0, "fuzz.json", &t, &err);
    if (rc) {
        CHECK(rc < 0 && t == NULL);
        CHECK(strncmp(err.msg, "fuzz.json: ", 11) == 0);
        return 0;
    }
    static const char *const texts[] = {
        "Hello, world! 1234567 ", "  \r\n\t x", "中文かな한국어 😀👨‍👩‍👧", "\xff\xe4\xb8 \xed\xa0\x80",
        "<｜User｜>hi<think>r</think>", "",
    };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(texts); i++)
        check_text(t, texts[i], strlen(texts[i]));
    check_text(t, (const char *)data, DSV4_MIN(size, (size_t)4096));
    dsv4_tokenizer_free(t);
    return 0;
}
