/* SPDX-License-Identifier: MIT */
/*
 * Chat template renders against expected strings derived from the official
 * encoder's rules (encoding_dsv4.py: merge_tool_messages,
 * _drop_thinking_messages, render_message, encode_messages), and encoding
 * with the tiny tokenizer (markers found by string).
 *   test-chat TINY_TOKENIZER_DIR
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

#include "chat.h"
#include "tokenizer.h"
#include "util.h"

#define B "<｜begin▁of▁sentence｜>"
#define E "<｜end▁of▁sentence｜>"
#define U "<｜User｜>"
#define A "<｜Assistant｜>"
#define T "<think>"
#define ET "</think>"

static const char *tiny_dir;

struct msg3 {
    const char *role, *content, *reasoning;
};

static void expect(const struct msg3 *m, size_t n, struct dsv4_chat_opts o, const char *want)
{
    struct dsv4_chat_msg msgs[8];
    for (size_t i = 0; i < n; i++)
        msgs[i] = (struct dsv4_chat_msg){ m[i].role, m[i].content, m[i].reasoning };
    char *text;
    size_t len;
    struct dsv4_err err;
    assert_int_equal(dsv4_chat_render(msgs, n, &o, &text, &len, &err), 0);
    if (strcmp(text, want) != 0)
        fprintf(stderr, "# got  %s\n# want %s\n", text, want);
    assert_string_equal(text, want);
    assert_int_equal(len, strlen(want));
    free(text);
}

#define CHAT ((struct dsv4_chat_opts){ 0 })
#define THINK ((struct dsv4_chat_opts){ .thinking = true })

static void test_single_turn(void **state)
{
    (void)state;
    const struct msg3 q[] = { { "user", "Hi", NULL } };
    expect(q, 1, CHAT, B U "Hi" A ET);
    expect(q, 1, THINK, B U "Hi" A T);
    expect(q, 1, (struct dsv4_chat_opts){ .no_bos = true }, U "Hi" A ET);
    const struct msg3 sq[] = { { "system", "Be brief.", NULL }, { "user", "Q", NULL } };
    expect(sq, 2, CHAT, B "Be brief." U "Q" A ET);
    const struct msg3 s[] = { { "system", "S", NULL } };
    expect(s, 1, CHAT, B "S");
    expect(NULL, 0, CHAT, B);
}

static void test_multi_turn(void **state)
{
    (void)state;
    const struct msg3 m[] = {
        { "system", "S", NULL },
        { "user", "Q1", NULL },
        { "assistant", "A1", "R1" },
        { "user", "Q2", NULL },
    };
    /* Earlier reasoning dropped; the earlier turn is closed with </think>. */
    expect(m, 4, THINK, B "S" U "Q1" A ET "A1" E U "Q2" A T);
    /* drop_thinking = false keeps it and opens every turn with <think>. */
    expect(m, 4, ((struct dsv4_chat_opts){ .thinking = true, .keep_reasoning = true }),
           B "S" U "Q1" A T "R1" ET "A1" E U "Q2" A T);
    /* Chat mode never shows reasoning. */
    expect(m, 4, CHAT, B "S" U "Q1" A ET "A1" E U "Q2" A ET);
    /* An assistant answer after the last user message keeps its reasoning. */
    const struct msg3 done[] = { { "user", "Q", NULL }, { "assistant", "Ans", "R" } };
    expect(done, 2, THINK, B U "Q" A T "R" ET "Ans" E);
    expect(done, 2, CHAT, B U "Q" A ET "Ans" E);
    const struct msg3 empty[] = { { "user", "Q", NULL }, { "assistant", NULL, NULL } };
    expect(empty, 2, THINK, B U "Q" A T ET E);
}

static void test_merge_and_drop(void **state)
{
    (void)state;
    /* Consecutive user messages become one, joined by a blank line. */
    const struct msg3 uu[] = { { "user", "a", NULL }, { "user", "b", NULL } };
    expect(uu, 2, CHAT, B U "a\n\nb" A ET);
    /* A developer message before the last user message is dropped in thinking
     * mode (with dropped reasoning), kept otherwise. */
    const struct msg3 dev[] = { { "developer", "D", NULL }, { "assistant", "x", "r" },
                                { "user", "Q", NULL } };
    expect(dev, 3, THINK, B "x" E U "Q" A T);
    expect(dev, 3, CHAT, B U "D" A ET "x" E U "Q" A ET);
    /* latest_reminder after a user turn: the turn is opened first. */
    const struct msg3 rem[] = { { "user", "Q", NULL }, { "latest_reminder", "R", NULL } };
    expect(rem, 2, THINK, B U "Q" A T "<｜latest_reminder｜>R");
    /* Maximum effort preamble: thinking mode only, after BOS. */
    const struct msg3 q[] = { { "user", "Q", NULL } };
    expect(q, 1, ((struct dsv4_chat_opts){ .thinking = true, .effort_max = true }),
           B "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
             "You MUST be very thorough in your thinking and comprehensively decompose the "
             "problem to resolve the root cause, rigorously stress-testing your logic against all "
             "potential paths, edge cases, and adversarial scenarios.\n"
             "Explicitly write out your entire deliberation process, documenting every "
             "intermediate step, considered alternative, and rejected hypothesis to ensure "
             "absolutely no assumption is left unchecked.\n\n" U "Q" A T);
    expect(q, 1, ((struct dsv4_chat_opts){ .effort_max = true }), B U "Q" A ET);
}

static void test_errors(void **state)
{
    (void)state;
    struct dsv4_chat_msg bad[] = { { "tool", "x", NULL } };
    struct dsv4_chat_opts o = { 0 };
    char *text;
    size_t len;
    struct dsv4_err err;
    assert_int_equal(dsv4_chat_render(bad, 1, &o, &text, &len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "'tool'"));
    struct dsv4_chat_msg dev[] = { { "developer", "", NULL } };
    assert_int_equal(dsv4_chat_render(dev, 1, &o, &text, &len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "developer"));
}

static void test_encode_tiny(void **state)
{
    (void)state;
    dsv4_tokenizer *t;
    struct dsv4_err err;
    assert_int_equal(dsv4_tokenizer_open_dir(tiny_dir, &t, &err), 0);
    struct dsv4_chat_msg m[] = { { "user", "Hello", NULL } };
    struct dsv4_chat_opts o = { .thinking = true };
    struct dsv4_ids ids = { 0 };
    assert_int_equal(dsv4_chat_encode(t, m, 1, &o, &ids, &err), 0);
    /* BOS once, markers as single ids found by their strings. */
    uint32_t bos, user, asst, think;
    assert_true(dsv4_tokenizer_find(t, B, &bos));
    assert_true(dsv4_tokenizer_find(t, U, &user));
    assert_true(dsv4_tokenizer_find(t, A, &asst));
    assert_true(dsv4_tokenizer_find(t, T, &think));
    assert_true(ids.n >= 5);
    assert_int_equal(ids.v[0], bos);
    assert_int_equal(ids.v[1], user);
    assert_int_equal(ids.v[ids.n - 2], asst);
    assert_int_equal(ids.v[ids.n - 1], think);
    for (size_t i = 1; i < ids.n; i++)
        assert_int_not_equal(ids.v[i], bos);
    char *text;
    size_t len;
    assert_int_equal(dsv4_tokenizer_decode(t, ids.v, ids.n, true, &text, &len, &err), 0);
    assert_string_equal(text, B U "Hello" A T);
    free(text);
    dsv4_ids_free(&ids);
    dsv4_tokenizer_free(t);

    /* A tokenizer without the markers is refused, naming the missing one. */
    char *j = dsv4_xmalloc(1 << 16);
    size_t n = 0;
    n += (size_t)snprintf(j, 1 << 16, "%s", "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
    for (unsigned b = 0; b < 256; b++) {
        /* The byte-level spelling, computed as in tools/make_tiny_tokenizer.py. */
        unsigned k = 0, cp = 0;
        for (unsigned x = 0; x <= b; x++) {
            bool printable = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE;
            cp = printable ? x : 256 + k++;
        }
        n += (size_t)snprintf(j + n, (1 << 16) - n, "%s\"\\u%04x\": %u", b ? ", " : "", cp, b);
    }
    snprintf(j + n, (1 << 16) - n, "}}, \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
                                   "\"use_regex\": false}}");
    assert_int_equal(dsv4_tokenizer_parse(j, strlen(j), NULL, 0, "bare", &t, &err), 0);
    assert_int_equal(dsv4_chat_encode(t, m, 1, &o, &ids, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "has no token"));
    dsv4_ids_free(&ids);
    dsv4_tokenizer_free(t);
    free(j);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s TINY_TOKENIZER_DIR\n", argv[0]);
        return 2;
    }
    tiny_dir = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_turn),
        cmocka_unit_test(test_multi_turn),
        cmocka_unit_test(test_merge_and_drop),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_encode_tiny),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
