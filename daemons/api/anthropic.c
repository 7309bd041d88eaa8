/* SPDX-License-Identifier: MIT */
/*
 * The Anthropic Messages API (POST /v1/messages) translated onto the same
 * request and generation: `system` becomes a system message, text blocks
 * are joined, `thinking` blocks of earlier assistant turns are their
 * reasoning (dropped by the V4 template as for OpenAI), `thinking:
 * {"type":"enabled"}` turns thinking on. Responses and events follow
 * Anthropic's shapes: a thinking block then a text block, stop_reason
 * end_turn / max_tokens / stop_sequence, errors as {"type":"error",...}.
 * Not supported (400 naming the field): tool_use/tool_result/image blocks,
 * tools.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "resp.h"
#include "util.h"

#define MAX_STOP_SEQUENCES 16

/* Join a content value (string or block list) into text; thinking blocks into *reasoning. */
static int blocks(struct api_req *r, const cJSON *c, const char *param, bool assistant,
                  const char **text, const char **reasoning, struct api_error *e)
{
    *text = NULL;
    if (reasoning)
        *reasoning = NULL;
    if (cJSON_IsString(c)) {
        *text = c->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(c))
        return api_bad(e, param, "'%s' must be a string or a list of content blocks", param);
    size_t total = 1, rtotal = 1;
    for (const cJSON *b = c->child; b; b = b->next) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "type");
        if (!cJSON_IsObject(b) || !cJSON_IsString(t))
            return api_bad(e, param, "'%s': each block must be an object with a 'type'", param);
        const char *bt = t->valuestring;
        if (!strcmp(bt, "text")) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(b, "text");
            if (!cJSON_IsString(x))
                return api_bad(e, param, "'%s': a text block needs a string 'text'", param);
            total += strlen(x->valuestring);
        } else if (!strcmp(bt, "thinking") && assistant && reasoning) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(b, "thinking");
            if (!cJSON_IsString(x))
                return api_bad(e, param, "'%s': a thinking block needs a string 'thinking'", param);
            rtotal += strlen(x->valuestring);
        } else if (!strcmp(bt, "redacted_thinking") && assistant) {
            continue;
        } else {
            return api_bad(e, param, "'%s': block type '%.40s' is not supported", param, bt);
        }
    }
    char *s = api_own(r, dsv4_xmalloc(total)), *w = s;
    char *rs = api_own(r, dsv4_xmalloc(rtotal)), *rw = rs;
    for (const cJSON *b = c->child; b; b = b->next) {
        const char *bt = cJSON_GetObjectItemCaseSensitive(b, "type")->valuestring;
        bool th = !strcmp(bt, "thinking");
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(b, th ? "thinking" : "text");
        if (strcmp(bt, "text") && !th)
            continue;
        size_t n = strlen(x->valuestring);
        memcpy(th ? rw : w, x->valuestring, n);
        *(th ? &rw : &w) += n;
    }
    *w = '\0';
    *rw = '\0';
    *text = s;
    if (reasoning && rw != rs)
        *reasoning = rs;
    return 0;
}

int api_parse_messages(const char *body, size_t len, struct api_req *r, struct api_error *e)
{
    memset(r, 0, sizeof(*r));
    r->kind = API_MESSAGES;
    cJSON *root = api_parse_root(body, len, r, e);
    if (!root)
        return -1;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsString(model))
        return api_bad(e, "model", "model: Field required (a string)");
    r->model = model->valuestring;
    long long v;
    int k = api_get_int(root, "max_tokens", 1, INT32_MAX, &v, e);
    if (k < 0)
        return -1;
    if (k == 0)
        return api_bad(e, "max_tokens", "max_tokens: Field required (an integer >= 1)");
    r->max_tokens = (int)v;
    r->temperature = 1.0;
    r->top_p = 1.0;
    if (api_get_number(root, "temperature", 0, 1, &r->temperature, e) < 0 ||
        api_get_number(root, "top_p", 0, 1, &r->top_p, e) < 0)
        return -1;
    if (r->top_p == 0)
        return api_bad(e, "top_p", "top_p: must be in (0, 1]");
    if ((k = api_get_int(root, "top_k", 0, INT32_MAX, &v, e)) < 0)
        return -1;
    r->top_k = k ? (int)v : 0;
    if (api_get_bool(root, "stream", &r->stream, e) < 0)
        return -1;
    const cJSON *ss = cJSON_GetObjectItemCaseSensitive(root, "stop_sequences");
    if (ss && !cJSON_IsNull(ss)) {
        if (!cJSON_IsArray(ss))
            return api_bad(e, "stop_sequences", "stop_sequences: must be a list of strings");
        int n = 0;
        for (const cJSON *s = ss->child; s; s = s->next, n++) {
            if (n >= MAX_STOP_SEQUENCES || !cJSON_IsString(s))
                return api_bad(e, "stop_sequences", "stop_sequences: at most %d strings",
                               MAX_STOP_SEQUENCES);
            if (api_add_stop(r, s->valuestring, "stop_sequences", e) < 0)
                return -1;
        }
    }
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(root, "thinking");
    if (th && !cJSON_IsNull(th)) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(th, "type");
        if (!cJSON_IsObject(th) || !cJSON_IsString(t) ||
            (strcmp(t->valuestring, "enabled") && strcmp(t->valuestring, "disabled")))
            return api_bad(e, "thinking", "thinking: {\"type\": \"enabled\"|\"disabled\"}");
        r->chat.thinking = !strcmp(t->valuestring, "enabled");
    }
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    if (tools && !cJSON_IsNull(tools) && !(cJSON_IsArray(tools) && !tools->child))
        return api_bad(e, "tools", "tools: not supported by this server yet");
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!cJSON_IsArray(msgs) || !msgs->child)
        return api_bad(e, "messages", "messages: Field required (a non-empty list)");
    size_t n = (size_t)cJSON_GetArraySize(msgs);
    if (n > API_MAX_MESSAGES)
        return api_bad(e, "messages", "messages: more than %d entries", API_MAX_MESSAGES);
    r->msgs = dsv4_xcalloc(n + 1, sizeof(*r->msgs));
    const cJSON *sys = cJSON_GetObjectItemCaseSensitive(root, "system");
    if (sys && !cJSON_IsNull(sys)) {
        if (blocks(r, sys, "system", false, &r->msgs[0].content, NULL, e) < 0)
            return -1;
        r->msgs[r->n_msgs++].role = "system";
    }
    size_t i = 0;
    for (const cJSON *m = msgs->child; m; m = m->next, i++) {
        char param[64];
        snprintf(param, sizeof(param), "messages.%zu.role", i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role) ||
            (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant")))
            return api_bad(e, param, "%s: must be \"user\" or \"assistant\"", param);
        struct dsv4_chat_msg *cm = &r->msgs[r->n_msgs++];
        cm->role = role->valuestring;
        bool asst = !strcmp(cm->role, "assistant");
        snprintf(param, sizeof(param), "messages.%zu.content", i);
        if (blocks(r, cJSON_GetObjectItemCaseSensitive(m, "content"), param, asst, &cm->content,
                   asst ? &cm->reasoning : NULL, e) < 0)
            return -1;
    }
    return 0;
}

/* ---- responses ---- */
static const char *stop_reason(const struct gen *g)
{
    if (g->reason == DSV4_DONE_LENGTH)
        return "max_tokens";
    return g->stop_index >= 0 ? "stop_sequence" : "end_turn";
}

static const char *stop_sequence(const struct gen *g, const struct api_req *r)
{
    const char *s = r->stop;
    for (int i = 0; g->stop_index >= 0 && i < g->stop_index; i++)
        s += strlen(s) + 1;
    return g->stop_index >= 0 ? s : NULL;
}

static cJSON *usage(const struct gen *g, bool final)
{
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", (double)g->prompt.n);
    cJSON_AddNumberToObject(u, "output_tokens", final ? g->n_generated : 0);
    return u;
}

static cJSON *message(const struct gen *g, const struct api_meta *m, bool final)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", m->id);
    cJSON_AddStringToObject(o, "type", "message");
    cJSON_AddStringToObject(o, "role", "assistant");
    cJSON_AddStringToObject(o, "model", m->model);
    cJSON_AddArrayToObject(o, "content");
    const char *ss = final ? stop_sequence(g, m->req) : NULL;
    if (final)
        cJSON_AddStringToObject(o, "stop_reason", stop_reason(g));
    else
        cJSON_AddNullToObject(o, "stop_reason");
    if (ss)
        cJSON_AddStringToObject(o, "stop_sequence", ss);
    else
        cJSON_AddNullToObject(o, "stop_sequence");
    cJSON_AddItemToObject(o, "usage", usage(g, final));
    return o;
}

static void a_start(struct sbuf *o, const struct gen *g, struct api_meta *m)
{
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", "message_start");
    cJSON_AddItemToObject(ev, "message", message(g, m, false));
    sb_sse(o, "message_start", ev);
    m->block = -1;
}

static void close_block(struct sbuf *o, struct api_meta *m)
{
    if (!m->block_open)
        return;
    cJSON *ev = cJSON_CreateObject();
    if (m->block_reasoning) {   /* we sign nothing: an empty signature */
        cJSON_AddStringToObject(ev, "type", "content_block_delta");
        cJSON_AddNumberToObject(ev, "index", m->block);
        cJSON *d = cJSON_AddObjectToObject(ev, "delta");
        cJSON_AddStringToObject(d, "type", "signature_delta");
        cJSON_AddStringToObject(d, "signature", "");
        sb_sse(o, "content_block_delta", ev);
        ev = cJSON_CreateObject();
    }
    cJSON_AddStringToObject(ev, "type", "content_block_stop");
    cJSON_AddNumberToObject(ev, "index", m->block);
    sb_sse(o, "content_block_stop", ev);
    m->block_open = false;
}

static void open_block(struct sbuf *o, struct api_meta *m, bool reasoning)
{
    if (m->block_open && m->block_reasoning == reasoning)
        return;
    close_block(o, m);
    cJSON *ev = cJSON_CreateObject(), *b;
    cJSON_AddStringToObject(ev, "type", "content_block_start");
    cJSON_AddNumberToObject(ev, "index", ++m->block);
    b = cJSON_AddObjectToObject(ev, "content_block");
    cJSON_AddStringToObject(b, "type", reasoning ? "thinking" : "text");
    cJSON_AddStringToObject(b, reasoning ? "thinking" : "text", "");
    if (reasoning)
        cJSON_AddStringToObject(b, "signature", "");
    sb_sse(o, "content_block_start", ev);
    m->block_open = true;
    m->block_reasoning = reasoning;
}

static void a_piece(struct sbuf *o, const struct gen *g, struct api_meta *m, bool reasoning,
                    const char *p, size_t n)
{
    open_block(o, m, reasoning);
    cJSON *ev = cJSON_CreateObject(), *d;
    cJSON_AddStringToObject(ev, "type", "content_block_delta");
    cJSON_AddNumberToObject(ev, "index", m->block);
    d = cJSON_AddObjectToObject(ev, "delta");
    cJSON_AddStringToObject(d, "type", reasoning ? "thinking_delta" : "text_delta");
    cJSON_AddItemToObject(d, reasoning ? "thinking" : "text", api_json_strn(p, n));
    sb_sse(o, "content_block_delta", ev);
}

static void a_finish(struct sbuf *o, const struct gen *g, struct api_meta *m)
{
    if (!m->block_open || m->block_reasoning)   /* there is always a text block */
        open_block(o, m, false);
    close_block(o, m);
    cJSON *ev = cJSON_CreateObject(), *d;
    cJSON_AddStringToObject(ev, "type", "message_delta");
    d = cJSON_AddObjectToObject(ev, "delta");
    cJSON_AddStringToObject(d, "stop_reason", stop_reason(g));
    const char *ss = stop_sequence(g, m->req);
    if (ss)
        cJSON_AddStringToObject(d, "stop_sequence", ss);
    else
        cJSON_AddNullToObject(d, "stop_sequence");
    cJSON *u = cJSON_AddObjectToObject(ev, "usage");
    cJSON_AddNumberToObject(u, "output_tokens", g->n_generated);
    sb_sse(o, "message_delta", ev);
    ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", "message_stop");
    sb_sse(o, "message_stop", ev);
}

static const char *a_error_type(int status)
{
    switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return "api_error";
    }
}

static cJSON *a_error_obj(const struct api_error *e)
{
    cJSON *o = cJSON_CreateObject(), *er;
    cJSON_AddStringToObject(o, "type", "error");
    er = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(er, "type", a_error_type(e->status));
    cJSON_AddStringToObject(er, "message", e->msg);
    return o;
}

static void a_error(struct sbuf *o, const struct api_error *e)
{
    sb_sse(o, "error", a_error_obj(e));
}

static char *a_error_body(const struct api_error *e)
{
    cJSON *o = a_error_obj(e);
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return t;
}

static char *a_body(struct gen *g, struct api_meta *m)
{
    struct sbuf rs = { 0 }, cs = { 0 };
    const char *p;
    size_t n;
    bool r;
    while (gen_take(g, &p, &n, &r))
        sb_put(r ? &rs : &cs, p, n);
    cJSON *o = message(g, m, true), *content = cJSON_GetObjectItemCaseSensitive(o, "content");
    if (m->req->chat.thinking) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "thinking");
        cJSON_AddItemToObject(b, "thinking", api_json_strn(rs.p ? rs.p : "", rs.n));
        cJSON_AddStringToObject(b, "signature", "");
        cJSON_AddItemToArray(content, b);
    }
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "text");
    cJSON_AddItemToObject(b, "text", api_json_strn(cs.p ? cs.p : "", cs.n));
    cJSON_AddItemToArray(content, b);
    sb_free(&rs);
    sb_free(&cs);
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return t;
}

const struct api_writer api_anthropic = { a_start, a_piece, a_finish, a_error, a_body,
                                          a_error_body };
