/* SPDX-License-Identifier: MIT */
/*
 * The C tokenizer against the JS reference (@lenml/tokenizers run by node)
 * on a generated corpus: ids identical, decode identical (with and without
 * special tokens; every DECODE_EVERY-th string, the reference's decode is
 * slow), decode(encode(x)) == x after UTF-8 repair, streaming
 * detokenization == one-shot decode and never a broken character.
 *   test-tokenizer-ref MODEL_DIR NODE REF_SCRIPT WORK_PREFIX [--lossy] [check...]
 * A check is "TEXT=ID ID ..." (the ids TEXT must encode to); --lossy skips
 * the round trip (for tokenizers whose added tokens strip white space).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "corpus.h"
#include "tokenizer.h"
#include "utf8.h"
#include "util.h"

#define DECODE_EVERY 4 /* as in ref-tokenize.js */

static const char *model_dir, *node, *ref_script, *prefix;
static char **checks;
static int n_checks;
static bool lossy;
static dsv4_tokenizer *tok;
static struct corpus corpus;

struct ref {
    struct dsv4_ids ids;
    char *dec, *dec_skip;
    size_t dec_len, dec_skip_len;
};
static struct ref *refs;

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 20, n = 0, r;
    char *p = dsv4_xmalloc(cap);
    while ((r = fread(p + n, 1, cap - n, f)) > 0)
        if ((n += r) == cap)
            p = dsv4_xrealloc(p, cap *= 2);
    fclose(f);
    *len = n;
    return p;
}

static uint32_t rd32(const char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static int run_reference(void **state)
{
    (void)state;
    char corpus_path[4096], out_path[4096];
    snprintf(corpus_path, sizeof(corpus_path), "%s-corpus.bin", prefix);
    snprintf(out_path, sizeof(out_path), "%s-ref.bin", prefix);
    FILE *f = fopen(corpus_path, "wb");
    if (!f)
        return -1;
    for (size_t i = 0; i < corpus.n; i++) {
        uint32_t l = (uint32_t)corpus.len[i];
        fwrite(&l, 4, 1, f);
        fwrite(corpus.s[i], 1, corpus.len[i], f);
    }
    if (fclose(f) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        execl(node, node, ref_script, model_dir, corpus_path, out_path, (char *)NULL);
        fprintf(stderr, "exec %s: %s\n", node, strerror(errno));
        _exit(127);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "# the JS reference failed (is tools/npm/node_modules installed? "
                        "run tools/setup-deps.sh)\n");
        return -1;
    }
    size_t len;
    char *p = slurp(out_path, &len), *q = p, *end = p + len;
    if (!p)
        return -1;
    refs = dsv4_xcalloc(corpus.n, sizeof(*refs));
    for (size_t i = 0; i < corpus.n; i++) {
        if (end - q < 4)
            return -1;
        uint32_t n = rd32(q);
        q += 4;
        for (uint32_t k = 0; k < n; k++, q += 4)
            dsv4_ids_push(&refs[i].ids, rd32(q));
        if (i % DECODE_EVERY != 0)
            continue;
        char **dst[2] = { &refs[i].dec, &refs[i].dec_skip };
        size_t *dl[2] = { &refs[i].dec_len, &refs[i].dec_skip_len };
        for (int k = 0; k < 2; k++) {
            uint32_t l = rd32(q);
            q += 4;
            *dst[k] = dsv4_xmalloc(l + 1);
            memcpy(*dst[k], q, l);
            (*dst[k])[l] = 0;
            *dl[k] = l;
            q += l;
        }
    }
    free(p);
    return q == end ? 0 : -1;
}

static int setup(void **state)
{
    struct dsv4_err err;
    if (dsv4_tokenizer_open_dir(model_dir, &tok, &err)) {
        fprintf(stderr, "# %s\n", err.msg);
        return -1;
    }
    corpus_generate(&corpus, 0x5eed0005, 2400);
    return run_reference(state);
}

static int teardown(void **state)
{
    (void)state;
    for (size_t i = 0; refs && i < corpus.n; i++) {
        dsv4_ids_free(&refs[i].ids);
        free(refs[i].dec);
        free(refs[i].dec_skip);
    }
    free(refs);
    corpus_free(&corpus);
    dsv4_tokenizer_free(tok);
    return 0;
}

static void print_escaped(const char *s, size_t n)
{
    fprintf(stderr, "# \"");
    for (size_t i = 0; i < n && i < 200; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\')
            fputc(c, stderr);
        else
            fprintf(stderr, "\\x%02x", c);
    }
    fprintf(stderr, "%s\"\n", n > 200 ? "..." : "");
}

static void test_checks(void **state)
{
    (void)state;
    for (int i = 0; i < n_checks; i++) {
        char *eq = strrchr(checks[i], '=');
        assert_non_null(eq);
        struct dsv4_ids ids = { 0 };
        dsv4_tokenizer_encode(tok, checks[i], (size_t)(eq - checks[i]), false, &ids);
        char got[8192] = "";
        size_t o = 0;
        for (size_t k = 0; k < ids.n && o < sizeof(got) - 16; k++)
            o += (size_t)snprintf(got + o, sizeof(got) - o, k ? " %u" : "%u", ids.v[k]);
        if (strcmp(got, eq + 1) != 0)
            fprintf(stderr, "# check %d: got %s, want %s\n", i, got, eq + 1);
        assert_string_equal(got, eq + 1);
        dsv4_ids_free(&ids);
    }
}

static void test_ids_match_reference(void **state)
{
    (void)state;
    size_t bad = 0, total = 0;
    for (size_t i = 0; i < corpus.n; i++) {
        struct dsv4_ids ids = { 0 };
        dsv4_tokenizer_encode(tok, corpus.s[i], corpus.len[i], false, &ids);
        total += ids.n;
        const struct dsv4_ids *r = &refs[i].ids;
        if (ids.n != r->n || memcmp(ids.v, r->v, ids.n * sizeof(*ids.v)) != 0) {
            if (bad++ < 5) {
                fprintf(stderr, "# string %zu differs (%zu ids, reference %zu):\n", i, ids.n, r->n);
                print_escaped(corpus.s[i], corpus.len[i]);
                size_t k = 0;
                while (k < ids.n && k < r->n && ids.v[k] == r->v[k])
                    k++;
                fprintf(stderr, "# first difference at id %zu: %u vs %u\n", k,
                        k < ids.n ? ids.v[k] : 0, k < r->n ? r->v[k] : 0);
            }
        }
        dsv4_ids_free(&ids);
    }
    fprintf(stderr, "# %zu strings, %zu ids, %zu differ\n", corpus.n, total, bad);
    assert_int_equal(bad, 0);
}

static void test_decode_matches_reference(void **state)
{
    (void)state;
    size_t bad = 0;
    for (size_t i = 0; i < corpus.n; i += DECODE_EVERY) {
        for (int special = 0; special < 2; special++) {
            char *text;
            size_t len;
            struct dsv4_err err;
            assert_int_equal(dsv4_tokenizer_decode(tok, refs[i].ids.v, refs[i].ids.n, special,
                                                   &text, &len, &err), 0);
            const char *want = special ? refs[i].dec : refs[i].dec_skip;
            size_t want_len = special ? refs[i].dec_len : refs[i].dec_skip_len;
            if (len != want_len || memcmp(text, want, len) != 0) {
                if (bad++ < 5) {
                    fprintf(stderr, "# decode (special=%d) of string %zu differs:\n", special, i);
                    print_escaped(text, len);
                    print_escaped(want, want_len);
                }
            }
            free(text);
        }
    }
    assert_int_equal(bad, 0);
}

static void test_round_trip(void **state)
{
    (void)state;
    for (size_t i = 0; i < corpus.n; i++) {
        struct dsv4_ids ids = { 0 };
        dsv4_tokenizer_encode(tok, corpus.s[i], corpus.len[i], false, &ids);
        char *text;
        size_t len, fixed_len;
        assert_int_equal(dsv4_tokenizer_decode(tok, ids.v, ids.n, true, &text, &len, NULL), 0);
        uint8_t *fixed = dsv4_xmalloc(3 * corpus.len[i] + 3);
        dsv4_utf8_repair((const uint8_t *)corpus.s[i], corpus.len[i], true, fixed, &fixed_len);
        if (len != fixed_len || memcmp(text, fixed, len) != 0) {
            fprintf(stderr, "# round trip of string %zu differs\n", i);
            print_escaped(corpus.s[i], corpus.len[i]);
            fail();
        }
        free(fixed);
        free(text);
        dsv4_ids_free(&ids);
    }
}

static void test_streaming(void **state)
{
    (void)state;
    for (size_t i = 0; i < corpus.n; i++) {
        for (int special = 0; special < 2; special++) {
            const struct dsv4_ids *ids = &refs[i].ids;
            struct dsv4_detok d;
            dsv4_detok_init(&d, tok, special);
            char *acc = NULL;
            size_t n = 0, cap = 0;
            for (size_t k = 0; k <= ids->n; k++) {
                const char *p;
                size_t l;
                if (k < ids->n)
                    assert_int_equal(dsv4_detok_feed(&d, ids->v[k], &p, &l, NULL), 0);
                else
                    dsv4_detok_flush(&d, &p, &l);
                /* Every piece is whole characters on its own. */
                assert_int_equal(dsv4_utf8_valid_prefix((const uint8_t *)p, l), l);
                if (n + l + 1 > cap)
                    acc = dsv4_xrealloc(acc, cap = (n + l + 1) * 2);
                memcpy(acc + n, p, l);
                n += l;
            }
            dsv4_detok_free(&d);
            char *want;
            size_t want_len;
            assert_int_equal(dsv4_tokenizer_decode(tok, ids->v, ids->n, special, &want,
                                                   &want_len, NULL), 0);
            assert_int_equal(n, want_len);
            assert_memory_equal(acc ? acc : "", want, n);
            free(want);
            free(acc);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s MODEL_DIR NODE REF_SCRIPT WORK_PREFIX [TEXT=IDS...]\n", argv[0]);
        return 2;
    }
    model_dir = argv[1];
    node = argv[2];
    ref_script = argv[3];
    prefix = argv[4];
    checks = argv + 5;
    n_checks = argc - 5;
    if (n_checks > 0 && strcmp(checks[0], "--lossy") == 0) {
        lossy = true;
        checks++;
        n_checks--;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checks),
        cmocka_unit_test(test_ids_match_reference),
        cmocka_unit_test(test_decode_matches_reference),
        cmocka_unit_test(test_streaming),
        cmocka_unit_test(test_round_trip), /* last: left out with --lossy */
    };
    return _cmocka_run_group_tests("tokenizer-ref", tests, DSV4_ARRAY_SIZE(tests) - lossy, setup,
                                   teardown);
}
