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
    struct dsv4_chat_msg msgs[8] = { { 0 } };
    for (size_t i = 0; i < n; i++)
        msgs[i] = (struct dsv4_chat_msg){ .role = m[i].role, .content = m[i].content,
                                          .reasoning = m[i].reasoning };
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
    struct dsv4_chat_msg bad[] = { { .role = "wizard", .content = "x" } };
    struct dsv4_chat_opts o = { 0 };
    char *text;
    size_t len;
    struct dsv4_err err;
    assert_int_equal(dsv4_chat_render(bad, 1, &o, &text, &len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "'wizard'"));
    struct dsv4_chat_msg dev[] = { { .role = "developer", .content = "" } };
    assert_int_equal(dsv4_chat_render(dev, 1, &o, &text, &len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "developer"));
    struct dsv4_chat_msg tl[] = { { .role = "system", .content = "", .tools = "{\"a\": 1}" } };
    assert_int_equal(dsv4_chat_render(tl, 1, &o, &text, &len, &err), -EINVAL);
    struct dsv4_chat_tool_call tc = { "c", "f", "[1, 2]" };
    struct dsv4_chat_msg ta[] = { { .role = "user", .content = "q" },
                                  { .role = "assistant", .tool_calls = &tc, .n_tool_calls = 1 } };
    assert_int_equal(dsv4_chat_render(ta, 2, &o, &text, &len, &err), -EINVAL);
}

/* The official encoder's tool rules (render_tools, encode_arguments_to_dsml, merge_tool_messages,
 * sort_tool_results_by_call_order; tools keep the reasoning), expected texts derived by hand. */
#define DS "｜DSML｜"
#define TOOLS_HEAD                                                                              \
    "\n\n## Tools\n\nYou have access to a set of tools to help answer the user's question. You " \
    "can invoke tools by writing a \"<" DS "tool_calls>\" block like the following:\n\n<" DS      \
    "tool_calls>\n<" DS "invoke name=\"$TOOL_NAME\">\n<" DS "parameter name=\"$PARAMETER_NAME\" " \
    "string=\"true|false\">$PARAMETER_VALUE</" DS "parameter>\n...\n</" DS "invoke>\n<" DS         \
    "invoke name=\"$TOOL_NAME2\">\n...\n</" DS "invoke>\n</" DS "tool_calls>\n\nString "          \
    "parameters should be specified as is and set `string=\"true\"`. For all other types "        \
    "(numbers, booleans, arrays, objects), pass the value in JSON format and set "                 \
    "`string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by <think>), you MUST output "  \
    "your complete reasoning inside <think>...</think> BEFORE any tool calls or final "             \
    "response.\n\nOtherwise, output directly after </think> with tool calls or final "            \
    "response.\n\n### Available Tool Schemas\n\n"
#define TOOLS_TAIL                                                                              \
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "  \
    "tool calls.\n"

static void render_is(const struct dsv4_chat_msg *m, size_t n, struct dsv4_chat_opts o,
                      const char *want)
{
    char *text;
    size_t len;
    struct dsv4_err err;
    assert_int_equal(dsv4_chat_render(m, n, &o, &text, &len, &err), 0);
    if (strcmp(text, want) != 0)
        fprintf(stderr, "# got  %s\n# want %s\n", text, want);
    assert_string_equal(text, want);
    free(text);
}

static void test_tools(void **state)
{
    (void)state;
    static const char tools[] =
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":"
        "\"Weather of a \\\"city\\\"\\n\",\"parameters\":{\"type\":\"object\",\"properties\":"
        "{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\",\"minimum\":1,"
        "\"maximum\":7.5}},\"required\":[\"city\"],\"additionalProperties\":false}}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"now\",\"parameters\":{}}}]";
    static const char schemas[] =
        "{\"name\": \"get_weather\", \"description\": \"Weather of a \\\"city\\\"\\n\", "
        "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, "
        "\"days\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 7.5}}, \"required\": "
        "[\"city\"], \"additionalProperties\": false}}\n{\"name\": \"now\", \"parameters\": {}}";
    struct dsv4_chat_tool_call calls[] = {
        { "c1", "get_weather", "{\"city\": \"Paris\", \"days\": 2, \"opts\": {\"u\": [1, true]}}" },
        { "c2", "now", "{}" },
    };
    const struct dsv4_chat_msg conv[] = {
        { .role = "system", .content = "S", .tools = tools },
        { .role = "user", .content = "Weather in Paris?" },
        { .role = "assistant", .content = "", .reasoning = "need data", .tool_calls = calls,
          .n_tool_calls = 2 },
        { .role = "tool", .content = "12:00", .tool_call_id = "c2" },   /* out of call order */
        { .role = "tool", .content = "18C", .tool_call_id = "c1" },
        { .role = "user", .content = "thanks" },
    };
    const char *dsml = "\n\n<" DS "tool_calls>\n<" DS "invoke name=\"get_weather\">\n<" DS
                       "parameter name=\"city\" string=\"true\">Paris</" DS "parameter>\n<" DS
                       "parameter name=\"days\" string=\"false\">2</" DS "parameter>\n<" DS
                       "parameter name=\"opts\" string=\"false\">{\"u\": [1, true]}</" DS
                       "parameter>\n</" DS "invoke>\n<" DS "invoke name=\"now\">\n\n</" DS
                       "invoke>\n</" DS "tool_calls>";
    char want[8192];
    snprintf(want, sizeof(want),
             B "S" TOOLS_HEAD "%s" TOOLS_TAIL U "Weather in Paris?" A ET "%s" E U
               "<tool_result>18C</tool_result>\n\n<tool_result>12:00</tool_result>\n\nthanks" A ET,
             schemas, dsml);
    render_is(conv, DSV4_ARRAY_SIZE(conv), (struct dsv4_chat_opts){ 0 }, want);
    /* thinking: tools keep every turn's reasoning, every user turn opens <think> */
    snprintf(want, sizeof(want),
             B "S" TOOLS_HEAD "%s" TOOLS_TAIL U "Weather in Paris?" A T "need data" ET "%s" E U
               "<tool_result>18C</tool_result>\n\n<tool_result>12:00</tool_result>\n\nthanks" A T,
             schemas, dsml);
    render_is(conv, DSV4_ARRAY_SIZE(conv), (struct dsv4_chat_opts){ .thinking = true }, want);
    /* developer tools; arguments that are not JSON: one "arguments" parameter */
    struct dsv4_chat_tool_call raw = { NULL, "now", "not json" };
    const struct dsv4_chat_msg dev[] = {
        { .role = "developer", .content = "D", .tools = tools },
        { .role = "assistant", .content = "ok", .tool_calls = &raw, .n_tool_calls = 1 },
    };
    snprintf(want, sizeof(want),
             B U "D" TOOLS_HEAD "%s" TOOLS_TAIL A ET "ok\n\n<" DS "tool_calls>\n<" DS
               "invoke name=\"now\">\n<" DS "parameter name=\"arguments\" string=\"true\">not json</"
               DS "parameter>\n</" DS "invoke>\n</" DS "tool_calls>" E, schemas);
    render_is(dev, 2, (struct dsv4_chat_opts){ 0 }, want);
    /* an empty tools list is none: the reasoning is dropped as usual */
    const struct dsv4_chat_msg none[] = {
        { .role = "system", .content = "S", .tools = "[]" },
        { .role = "user", .content = "a" },
        { .role = "assistant", .content = "b", .reasoning = "r" },
        { .role = "user", .content = "c" },
    };
    render_is(none, 4, (struct dsv4_chat_opts){ .thinking = true },
              B "S" U "a" A ET "b" E U "c" A T);
}

static void test_encode_tiny(void **state)
{
    (void)state;
    dsv4_tokenizer *t;
    struct dsv4_err err;
    assert_int_equal(dsv4_tokenizer_open_dir(tiny_dir, &t, &err), 0);
    struct dsv4_chat_msg m[] = { { .role = "user", .content = "Hello" } };
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
        cmocka_unit_test(test_tools),
        cmocka_unit_test(test_encode_tiny),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
