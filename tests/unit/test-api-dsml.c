/* SPDX-License-Identifier: MIT */
/*
 * dsv4-api's DSML tool-call parser (daemons/api/dsml.c): what the chat
 * template renders for an assistant's tool calls parses back to the same
 * calls (names, and arguments equal as JSON); the official decoder's
 * grammar is enforced (malformed blocks are refused, never half-read).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat.h"
#include "dsml.h"

#define DS DSV4_CHAT_DSML

static void json_equal(const char *a, const char *b)
{
    cJSON *x = cJSON_Parse(a), *y = cJSON_Parse(b);
    if (!x || !y || !cJSON_Compare(x, y, true))
        fail_msg("JSON differs:\n  %s\n  %s", a, b);
    cJSON_Delete(x);
    cJSON_Delete(y);
}

static void test_roundtrip(void **state)
{
    (void)state;
    struct dsv4_chat_tool_call calls[] = {
        { "a", "get_weather", "{\"city\": \"Paris \\\"nord\\\"\\n\", \"days\": 2, \"o\": {\"u\": [1, "
                              "true, null]}, \"f\": 2.5}" },
        { "b", "now", "{}" },
        { "c", "echo", "{\"text\": \"<b>bold</b> & ünïcode ✓\"}" },
    };
    struct dsv4_chat_msg m[] = { { .role = "user", .content = "q" },
                                 { .role = "assistant", .content = "Sure.", .tool_calls = calls,
                                   .n_tool_calls = 3 } };
    struct dsv4_chat_opts o = { .no_bos = true };
    char *text;
    size_t len;
    struct dsv4_err err;
    assert_int_equal(dsv4_chat_render(m, 2, &o, &text, &len, &err), 0);
    /* the model's output is the assistant part: content, the block, then EOS (not text) */
    const char *start = strstr(text, DSV4_CHAT_TOOL_CALLS_START);
    const char *eos = strstr(text, DSV4_CHAT_EOS);
    assert_non_null(start);
    assert_non_null(eos);
    struct api_tool_call *got;
    int n = api_dsml_parse(start, (size_t)(eos - start), &got);
    assert_int_equal(n, 3);
    for (int i = 0; i < 3; i++) {
        assert_string_equal(got[i].name, calls[i].name);
        json_equal(got[i].arguments, calls[i].arguments);
    }
    api_dsml_free(got, n);
    free(text);
}

static void test_malformed(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "\n\n<" DS "tool_calls>\n</" DS "tool_calls>",                     /* no call */
        "\n\n<" DS "tool_calls>\n<" DS "invoke name=\"f\">\n",                /* cut short */
        "\n\n<" DS "tool_calls>\n<" DS "invoke name=\"f\">\n</" DS "invoke>\n</" DS "tool_calls>x",
        "\n\n<" DS "tool_calls><" DS "invoke name=\"f\">\n</" DS "invoke>\n</" DS "tool_calls>",
        "\n\n<" DS "tool_calls>\n<" DS "invoke nam=\"f\">\n</" DS "invoke>\n</" DS "tool_calls>",
        "\n\n<" DS "tool_calls>\n<" DS "invoke name=\"f\">\n<" DS "parameter name=\"a\" string=\""
        "maybe\">1</" DS "parameter>\n</" DS "invoke>\n</" DS "tool_calls>",
        "\n\n<" DS "tool_calls>\n<" DS "invoke name=\"f\">\n<" DS "parameter name=\"a\" string=\""
        "true\">1</" DS "parameter>\n<" DS "parameter name=\"a\" string=\"true\">2</" DS
        "parameter>\n</" DS "invoke>\n</" DS "tool_calls>",                /* duplicate */
        "\n\n<" DS "tool_calls>\n<" DS "invoke name=\"f\">\n<" DS "parameter name=\"a\" string=\""
        "true\">1</" DS "parameter></" DS "invoke>\n</" DS "tool_calls>",  /* no newline */
        "\n\n<tool_calls>\n",
        "",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct api_tool_call *got = (void *)1;
        if (api_dsml_parse(bad[i], strlen(bad[i]), &got) != -1)
            fail_msg("accepted case %zu", i);
        assert_null(got);
    }
    /* what the model writes for string="false" is kept as written */
    const char *ok = "\n\n<" DS "tool_calls>\n<" DS "invoke name=\"f\">\n<" DS "parameter name=\"n\""
                     " string=\"false\">[1,2]</" DS "parameter>\n<" DS "parameter name=\"s\" "
                     "string=\"true\">a \"q\"</" DS "parameter>\n</" DS "invoke>\n</" DS "tool_calls>";
    struct api_tool_call *got;
    assert_int_equal(api_dsml_parse(ok, strlen(ok), &got), 1);
    assert_string_equal(got[0].arguments, "{\"n\": [1,2], \"s\": \"a \\\"q\\\"\"}");
    api_dsml_free(got, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
