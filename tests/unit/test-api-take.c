/* SPDX-License-Identifier: MIT */
/*
 * What dsv4-api releases of a generation's text while it runs (gen_take,
 * daemons/api/gen.c): never bytes that a stop string or the DSML tool-call
 * start may still claim, never half a UTF-8 character, reasoning and content
 * as separate runs; and at the end exactly the text before the stop string or
 * the tool calls. The text is set directly (no scheduler).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "gen.h"

struct take {
    char reasoning[256], content[256];
};

static void drain(struct gen *g, struct take *t)
{
    const char *p;
    size_t n;
    bool r;
    while (gen_take(g, &p, &n, &r)) {
        assert_true(n > 0);
        strncat(r ? t->reasoning : t->content, p, n);
    }
}

static void set_text(struct gen *g, const char *s)
{
    free(g->text);
    g->text = strdup(s);
    g->len = strlen(s);
}

static void test_hold_back(void **state)
{
    (void)state;
    struct api_req r = { .stop = "END", .n_stop = 4 };
    struct gen g = { .req = &r, .state = GEN_RUNNING, .cut = SIZE_MAX, .calls_at = SIZE_MAX,
                     .max_stop = 3, .hold = 3, .stop_index = -1 };
    struct take t = { 0 };
    set_text(&g, "hello E");
    drain(&g, &t);
    assert_string_equal(t.content, "hello");    /* " E" may begin "END" */
    set_text(&g, "hello \xc3\xa9t");                /* 2 bytes held: the cut falls in "é" ... */
    drain(&g, &t);
    assert_string_equal(t.content, "hello ");     /* ... and goes back to its first byte */
    set_text(&g, "hello \xc3\xa9t\xc3\xa9");
    drain(&g, &t);
    assert_string_equal(t.content, "hello \xc3\xa9t");
    /* the stop string found at 7: the end is decided */
    set_text(&g, "hello \xc3\xa9t\xc3\xa9" "END and more");
    g.cut = strlen("hello \xc3\xa9t\xc3\xa9");
    drain(&g, &t);
    assert_string_equal(t.content, "hello \xc3\xa9t\xc3\xa9");
    g.state = GEN_DONE;
    drain(&g, &t);
    assert_string_equal(t.content, "hello \xc3\xa9t\xc3\xa9");
    free(g.text);
}

static void test_reasoning_and_calls(void **state)
{
    (void)state;
    struct api_req r = { .tools = true };
    struct gen g = { .req = &r, .state = GEN_RUNNING, .cut = SIZE_MAX, .calls_at = SIZE_MAX,
                     .think_end = SIZE_MAX, .stop_index = -1,
                     .hold = strlen(DSV4_CHAT_TOOL_CALLS_START) };
    struct take t = { 0 };
    set_text(&g, "thinking hard about it");
    drain(&g, &t);
    /* reasoning is held back like content: the hold covers the DSML start */
    assert_true(strlen(t.reasoning) < strlen("thinking hard about it"));
    g.think_end = g.len;    /* </think> */
    set_text(&g, "thinking hard about itThe answer.\n\n<" DSV4_CHAT_DSML "tool_calls>\n...");
    g.calls_at = strlen("thinking hard about itThe answer.");
    drain(&g, &t);
    assert_string_equal(t.reasoning, "thinking hard about it");
    assert_string_equal(t.content, "The answer.");
    g.state = GEN_DONE;     /* the calls parsed: the block is never content */
    drain(&g, &t);
    assert_string_equal(t.content, "The answer.");
    /* not well-formed: gen releases the block as content (calls_at back to none) */
    g.calls_at = SIZE_MAX;
    drain(&g, &t);
    assert_string_equal(t.content, "The answer.\n\n<" DSV4_CHAT_DSML "tool_calls>\n...");
    free(g.text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hold_back),
        cmocka_unit_test(test_reasoning_and_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
