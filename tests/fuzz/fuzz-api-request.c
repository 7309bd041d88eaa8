/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for dsv4-api's request parsers (daemons/api/api_req.h). The
 * first byte picks the endpoint (chat completions, completions, Anthropic
 * messages), the rest is the body. An accepted request must satisfy what
 * the generation code relies on (a model, messages with known roles and
 * text, sampling values in range, well-formed stop strings); a refused one
 * must be a 400 naming why. A violation aborts.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_req.h"

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "invariant failed: %s\n", #x); abort(); } } while (0)

static void check_ok(const struct api_req *r)
{
    CHECK(r->model != NULL);
    CHECK(r->temperature >= 0 && r->temperature <= 2 && r->top_p > 0 && r->top_p <= 1);
    CHECK(r->top_k >= 0 && r->max_tokens >= 0);
    CHECK(r->n_stop <= sizeof(r->stop) && (r->n_stop == 0 || r->stop[r->n_stop - 1] == '\0'));
    for (const char *s = r->stop; s < r->stop + r->n_stop; s += strlen(s) + 1)
        CHECK(s[0] != '\0');
    if (r->kind == API_COMPLETION) {
        CHECK((r->prompt != NULL) != (r->n_prompt_ids > 0));
        CHECK(!r->prompt || strlen(r->prompt) == r->prompt_len);
        return;
    }
    CHECK(r->n_msgs >= 1);
    for (size_t i = 0; i < r->n_msgs; i++) {
        const struct dsv4_chat_msg *m = &r->msgs[i];
        CHECK(m->role && (!strcmp(m->role, "system") || !strcmp(m->role, "user") ||
                          !strcmp(m->role, "assistant") || !strcmp(m->role, "developer") ||
                          !strcmp(m->role, "tool")));
        CHECK(!m->n_tool_calls || (m->tool_calls && !strcmp(m->role, "assistant")));
        CHECK(!m->tools || (i == 0 && !strcmp(m->role, "system") && r->tools));
        CHECK(m->content || !strcmp(m->role, "assistant"));
        if (m->content)
            (void)strlen(m->content);
        if (m->reasoning)
            (void)strlen(m->reasoning);
    }
    /* what the template does with it must not fail on a role or crash */
    char *text;
    size_t len;
    struct dsv4_err err;
    int rc = dsv4_chat_render(r->msgs, r->n_msgs, &r->chat, &text, &len, &err);
    CHECK(rc == 0);
    CHECK(strlen(text) <= len);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static int (*const parse[])(const char *, size_t, struct api_req *, struct api_error *) = {
        api_parse_chat, api_parse_completion, api_parse_messages,
    };
    /* a copy of exactly the body: a parser must not read past len */
    size_t n = size - 1;
    char *body = malloc(n ? n : 1);
    memcpy(body, data + 1, n);
    struct api_req r;
    struct api_error e;
    if (parse[data[0] % 3](body, n, &r, &e) == 0) {
        check_ok(&r);
    } else {
        CHECK(e.status == 400 && e.msg[0] != '\0' && strlen(e.param) < sizeof(e.param));
        CHECK(!strcmp(e.type, "invalid_request_error"));
    }
    api_req_free(&r);
    free(body);
    return 0;
}
