/* SPDX-License-Identifier: MIT */
/*
 * Tokenizer unit checks that need no JS: UTF-8 repair (the vectors are
 * what Node's UTF-8 decoder produces), BPE order on hand-made merges,
 * added-token matching, streaming of a character split over tokens, and
 * malformed tokenizer.json files rejected with the field named.
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

#include "tokenizer.h"
#include "utf8.h"
#include "util.h"

/* GPT-2 byte-level spelling of byte b, as UTF-8. */
static void spell(unsigned b, char *out)
{
    unsigned n = 0, cp = 0;
    for (unsigned x = 0; x <= b; x++) {
        bool printable = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE;
        cp = printable ? x : 256 + n++;
    }
    size_t l = dsv4_utf8_encode(cp, (uint8_t *)out);
    out[l] = 0;
}

/* A tokenizer.json: the 256 byte tokens at ids 0..255 plus `vocab` entries,
 * `merges`, `added` tokens and `pre` as the pre-tokenizer. */
static char *make_json(const char *vocab, const char *merges, const char *added, const char *pre)
{
    size_t cap = 65536, n = 0;
    char *p = dsv4_xmalloc(cap);
    n += (size_t)snprintf(p + n, cap - n, "{\"added_tokens\": [%s], \"pre_tokenizer\": %s, "
                          "\"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
                          "\"vocab\": {", added, pre);
    for (unsigned b = 0; b < 256; b++) {
        char s[8];
        spell(b, s);
        n += (size_t)snprintf(p + n, cap - n, "%s\"%s%s\": %u", b ? ", " : "",
                              (s[0] == '"' || s[0] == '\\') ? "\\" : "", s, b);
    }
    n += (size_t)snprintf(p + n, cap - n, "%s%s}, \"merges\": [%s]}}", vocab[0] ? ", " : "",
                          vocab, merges);
    return p;
}

#define PRE_BL "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}"

static dsv4_tokenizer *load(const char *vocab, const char *merges, const char *added,
                            const char *pre)
{
    char *j = make_json(vocab, merges, added, pre);
    dsv4_tokenizer *t;
    struct dsv4_err err;
    int rc = dsv4_tokenizer_parse(j, strlen(j), NULL, 0, "t.json", &t, &err);
    if (rc)
        fprintf(stderr, "# %s\n", err.msg);
    assert_int_equal(rc, 0);
    free(j);
    return t;
}

static void expect_ids(dsv4_tokenizer *t, const char *text, const uint32_t *want, size_t n)
{
    struct dsv4_ids ids = { 0 };
    dsv4_tokenizer_encode(t, text, strlen(text), false, &ids);
    assert_int_equal(ids.n, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ids.v[i], want[i]);
    dsv4_ids_free(&ids);
}

static void test_utf8_repair(void **state)
{
    (void)state;
    /* Node: Buffer.from([0x61,0xE4,0xB8,0x62,0xED,0xA0,0x80,0xF0,0x9F,0x98,0xC0,0xAF,0xFF])
     * .toString() === "a\uFFFDb" + "\uFFFD".repeat(7) */
    const uint8_t in[] = { 0x61, 0xE4, 0xB8, 0x62, 0xED, 0xA0, 0x80, 0xF0, 0x9F, 0x98, 0xC0, 0xAF, 0xFF };
    uint8_t out[64];
    size_t ol;
    assert_int_equal(dsv4_utf8_repair(in, sizeof(in), true, out, &ol), sizeof(in));
    const char *want = "a\xEF\xBF\xBD" "b" "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
                       "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD";
    assert_int_equal(ol, strlen(want));
    assert_memory_equal(out, want, ol);
    assert_int_equal(dsv4_utf8_valid_prefix(in, sizeof(in)), 1);
    /* Not final: a possible prefix at the end waits; an impossible one does not. */
    const uint8_t cut[] = { 'x', 0xF0, 0x9F, 0x98 };
    assert_int_equal(dsv4_utf8_repair(cut, sizeof(cut), false, out, &ol), 1);
    assert_int_equal(ol, 1);
    const uint8_t bad[] = { 'x', 0xF0, 0x9F, 0x41 };
    assert_int_equal(dsv4_utf8_repair(bad, sizeof(bad), false, out, &ol), 4);
    assert_memory_equal(out, "x\xEF\xBF\xBD" "A", ol);
    const uint8_t ok[] = "h\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x98\x80";
    assert_int_equal(dsv4_utf8_valid_prefix(ok, sizeof(ok) - 1), sizeof(ok) - 1);
    uint32_t cp;
    assert_int_equal(dsv4_utf8_decode(ok + 8, 4, &cp), 4);
    assert_int_equal(cp, 0x1F600);
}

static void test_bpe_order(void **state)
{
    (void)state;
    /* Rank decides, not position: "b c" (rank 0) before "a b" (rank 1). */
    dsv4_tokenizer *t = load("\"bc\": 256, \"ab\": 257, \"aa\": 258", "\"b c\", \"a b\", \"a a\"", "",
                             PRE_BL);
    expect_ids(t, "abc", (const uint32_t[]){ 'a', 256 }, 2);
    expect_ids(t, "ab", (const uint32_t[]){ 257 }, 1);
    /* Same rank: leftmost first. */
    expect_ids(t, "aaa", (const uint32_t[]){ 258, 'a' }, 2);
    expect_ids(t, "aaaa", (const uint32_t[]){ 258, 258 }, 2);
    uint32_t id;
    assert_true(dsv4_tokenizer_find(t, "bc", &id));
    assert_int_equal(id, 256);
    assert_false(dsv4_tokenizer_find(t, "zz", &id));
    assert_int_equal(dsv4_tokenizer_n_ids(t), 259);
    dsv4_tokenizer_free(t);
}

static void test_added_tokens(void **state)
{
    (void)state;
    dsv4_tokenizer *t = load("", "",
                             "{\"id\": 300, \"content\": \"<s>\", \"special\": true}, "
                             "{\"id\": 301, \"content\": \"<s>x\"}, "
                             "{\"id\": 302, \"content\": \"s>\"}",
                             PRE_BL);
    /* Leftmost match first, then the longest at that position. */
    expect_ids(t, "a<s>xs>", (const uint32_t[]){ 'a', 301, 302 }, 3);
    expect_ids(t, "<s<s>", (const uint32_t[]){ '<', 's', 300 }, 3);
    assert_true(dsv4_tokenizer_is_special(t, 300));
    assert_false(dsv4_tokenizer_is_special(t, 301));
    /* Decoding: specials only when asked; unknown ids are errors. */
    char *text;
    size_t len;
    struct dsv4_err err;
    const uint32_t ids[] = { 300, 'h', 'i', 301 };
    assert_int_equal(dsv4_tokenizer_decode(t, ids, 4, false, &text, &len, &err), 0);
    assert_string_equal(text, "hi<s>x");
    free(text);
    assert_int_equal(dsv4_tokenizer_decode(t, ids, 4, true, &text, &len, &err), 0);
    assert_string_equal(text, "<s>hi<s>x");
    free(text);
    const uint32_t bad[] = { 'a', 299 };
    assert_int_equal(dsv4_tokenizer_decode(t, bad, 2, true, &text, &len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "299"));
    dsv4_tokenizer_free(t);
}

static void test_streaming_split_character(void **state)
{
    (void)state;
    dsv4_tokenizer *t = load("", "", "{\"id\": 300, \"content\": \"<s>\", \"special\": true}", PRE_BL);
    struct dsv4_detok d;
    dsv4_detok_init(&d, t, false);
    const char *p;
    size_t l;
    /* 中 = E4 B8 AD arrives one byte token at a time. */
    assert_int_equal(dsv4_detok_feed(&d, 0xE4, &p, &l, NULL), 0);
    assert_int_equal(l, 0);
    assert_int_equal(dsv4_detok_feed(&d, 0xB8, &p, &l, NULL), 0);
    assert_int_equal(l, 0);
    /* A skipped special does not break the character. */
    assert_int_equal(dsv4_detok_feed(&d, 300, &p, &l, NULL), 0);
    assert_int_equal(l, 0);
    assert_int_equal(dsv4_detok_feed(&d, 0xAD, &p, &l, NULL), 0);
    assert_int_equal(l, 3);
    assert_memory_equal(p, "\xE4\xB8\xAD", 3);
    /* An unfinished character at the end becomes U+FFFD on flush. */
    assert_int_equal(dsv4_detok_feed(&d, 0xF0, &p, &l, NULL), 0);
    assert_int_equal(l, 0);
    dsv4_detok_flush(&d, &p, &l);
    assert_int_equal(l, 3);
    assert_memory_equal(p, "\xEF\xBF\xBD", 3);
    assert_int_equal(dsv4_detok_feed(&d, 1000, &p, &l, NULL), -EINVAL);
    dsv4_detok_free(&d);
    /* Rendered, the special ends the byte run: E4 B8 become U+FFFD. */
    dsv4_detok_init(&d, t, true);
    assert_int_equal(dsv4_detok_feed(&d, 0xE4, &p, &l, NULL), 0);
    assert_int_equal(dsv4_detok_feed(&d, 300, &p, &l, NULL), 0);
    assert_int_equal(l, 6);
    assert_memory_equal(p, "\xEF\xBF\xBD<s>", 6);
    dsv4_detok_free(&d);
    dsv4_tokenizer_free(t);
}

static void test_bos(void **state)
{
    (void)state;
    char *j = make_json("", "", "{\"id\": 300, \"content\": \"[B]\"}, {\"id\": 301, \"content\": \"[E]\"}",
                        PRE_BL);
    const char *cfg = "{\"bos_token\": {\"content\": \"[B]\"}, \"eos_token\": \"[E]\"}";
    dsv4_tokenizer *t;
    assert_int_equal(dsv4_tokenizer_parse(j, strlen(j), cfg, strlen(cfg), "t", &t, NULL), 0);
    uint32_t id;
    assert_true(dsv4_tokenizer_bos(t, &id));
    assert_int_equal(id, 300);
    assert_true(dsv4_tokenizer_eos(t, &id));
    assert_int_equal(id, 301);
    expect_ids(t, "", NULL, 0);
    struct dsv4_ids ids = { 0 };
    dsv4_tokenizer_encode(t, "a", 1, true, &ids);
    assert_int_equal(ids.n, 2);
    assert_int_equal(ids.v[0], 300);
    dsv4_ids_free(&ids);
    dsv4_tokenizer_free(t);
    free(j);
}

/* Malformed files: each must fail with -EINVAL and a message naming the field. */
static void test_malformed(void **state)
{
    (void)state;
    static const struct {
        const char *vocab, *merges, *added, *pre, *want;
    } cases[] = {
        { "\"x\": -1", "", "", PRE_BL, "model.vocab['x']" },
        { "\"x\": 1.5", "", "", PRE_BL, "model.vocab['x']" },
        { "\"x\": \"7\"", "", "", PRE_BL, "model.vocab['x']" },
        { "", "\"a\"", "", PRE_BL, "model.merges[0]" },
        { "", "\"a b c\"", "", PRE_BL, "model.merges[0]" },
        { "", "[\"a\"]", "", PRE_BL, "model.merges[0]" },
        { "", "\"a b\"", "", PRE_BL, "model.merges[0]: merged token not in model.vocab" },
        { "", "\"a Ā\"", "", PRE_BL, "model.merges[0]" },
        { "", "", "{\"id\": 3}", PRE_BL, "added_tokens[0].content" },
        { "", "", "{\"id\": -3, \"content\": \"x\"}", PRE_BL, "added_tokens[0].id" },
        { "", "", "{\"id\": 3, \"content\": \"x\", \"special\": 1}", PRE_BL, "added_tokens[0].special" },
        { "", "", "7", PRE_BL, "added_tokens[0]" },
        { "", "", "", "null", "pre_tokenizer" },
        { "", "", "", "{\"type\": \"Whitespace\"}", "pre_tokenizer.type" },
        { "", "", "", "{\"type\": \"Sequence\", \"pretokenizers\": []}", "pre_tokenizer.pretokenizers" },
        { "", "", "", "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}",
          "pre_tokenizer.pattern: bad regex" },
        { "", "", "", "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Removed\"}",
          "pre_tokenizer.behavior" },
        { "", "", "", "{\"type\": \"Sequence\", \"pretokenizers\": [" PRE_BL ", {\"type\": \"Split\", "
          "\"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Isolated\"}]}", "ByteLevel must be the last" },
        { "", "", "", "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
          "{\"Regex\": \"[\\\\S]\"}, \"behavior\": \"Isolated\"}, " PRE_BL "]}", "unsupported regex" },
        { "", "", "", "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
          "{\"Nope\": 1}, \"behavior\": \"Isolated\"}, " PRE_BL "]}", "pretokenizers[0].pattern" },
    };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(cases); i++) {
        char *j = make_json(cases[i].vocab, cases[i].merges, cases[i].added, cases[i].pre);
        dsv4_tokenizer *t = (dsv4_tokenizer *)&t;
        struct dsv4_err err = { "" };
        int rc = dsv4_tokenizer_parse(j, strlen(j), NULL, 0, "t.json", &t, &err);
        if (rc != -EINVAL || !strstr(err.msg, cases[i].want) || t != NULL)
            fprintf(stderr, "# case %zu: rc %d, '%s' (want '%s')\n", i, rc, err.msg, cases[i].want);
        assert_int_equal(rc, -EINVAL);
        assert_null(t);
        assert_non_null(strstr(err.msg, cases[i].want));
        assert_true(strncmp(err.msg, "t.json: ", 8) == 0);
        free(j);
    }
    /* Whole-file problems. */
    static const struct {
        const char *json, *want;
    } files[] = {
        { "", "not valid JSON" },
        { "[1]", "JSON object" },
        { "{\"model\": 3}", "model: expected an object" },
        { "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "model.type" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": []}}", "model.vocab" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"byte_fallback\": true}}", "model.byte_fallback" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}, \"pre_tokenizer\": " PRE_BL "}",
          "no token for byte" },
    };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(files); i++) {
        dsv4_tokenizer *t;
        struct dsv4_err err = { "" };
        assert_int_equal(dsv4_tokenizer_parse(files[i].json, strlen(files[i].json), NULL, 0, "t.json",
                                              &t, &err), -EINVAL);
        if (!strstr(err.msg, files[i].want))
            fprintf(stderr, "# file %zu: '%s' (want '%s')\n", i, err.msg, files[i].want);
        assert_non_null(strstr(err.msg, files[i].want));
    }
    dsv4_tokenizer *t;
    struct dsv4_err err;
    assert_int_equal(dsv4_tokenizer_open_dir("/nonexistent-dir", &t, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/tokenizer.json"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_repair),
        cmocka_unit_test(test_bpe_order),
        cmocka_unit_test(test_added_tokens),
        cmocka_unit_test(test_streaming_split_character),
        cmocka_unit_test(test_bos),
        cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
