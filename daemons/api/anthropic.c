/* SPDX-License-Identifier: MIT */
/*
 * The Anthropic Messages API (POST /v1/messages) translated onto the same
 * request and generation: `system` becomes a system message, text blocks
 * are joined, `thinking` blocks of earlier assistant turns are their
 * reasoning (dropped by the V4 template as for OpenAI), `thinking:
 * {"type":"enabled"}` turns thinking on. Responses and events follow
 * Anthropic's shapes: a thinking block then a text block, stop_reason
 * end_turn / max_tokens / stop_sequence / tool_use, errors as
 * {"type":"error",...}. Tools: `tools` ({name, description, input_schema})
 * are rendered as the OpenAI path renders function tools, `tool_use` blocks
 * of assistant turns are their tool calls, `tool_result` blocks of user
 * turns their results; the model's DSML calls come back as tool_use blocks.
 * Not supported (400 naming the field): image and document blocks.
 */
#include <math.h>
#include <stdio.h>
#include <sys/random.h>
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
        } else if ((!strcmp(bt, "redacted_thinking") || !strcmp(bt, "tool_use")) && assistant) {
            continue;   /* tool_use: the message's tool calls (assistant_tool_uses) */
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

static struct dsv4_chat_msg *push(struct api_req *r, size_t *cap)
{
    if (r->n_msgs == *cap) {
        *cap = *cap ? 2 * *cap : 8;
        r->msgs = dsv4_xrealloc(r->msgs, *cap * sizeof(*r->msgs));
    }
    struct dsv4_chat_msg *m = &r->msgs[r->n_msgs++];
    memset(m, 0, sizeof(*m));
    return m;
}

/* An assistant turn's tool_use blocks as its tool calls (the input object as arguments). */
static int assistant_tool_uses(struct api_req *r, const cJSON *c, const char *param,
                               struct dsv4_chat_msg *cm, struct api_error *e)
{
    size_t n = 0, k = 0;
    for (const cJSON *b = cJSON_IsArray(c) ? c->child : NULL; b; b = b->next) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "type");
        n += cJSON_IsString(t) && !strcmp(t->valuestring, "tool_use");
    }
    if (!n)
        return 0;
    struct dsv4_chat_tool_call *v = (void *)api_own(r, dsv4_xcalloc(n, sizeof(*v)));
    for (const cJSON *b = c->child; b; b = b->next) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "type");
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "tool_use"))
            continue;
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "id");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(b, "name");
        const cJSON *input = cJSON_GetObjectItemCaseSensitive(b, "input");
        if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsObject(input))
            return api_bad(e, param, "%s: a tool_use block needs string id and name and an "
                                     "object input", param);
        v[k++] = (struct dsv4_chat_tool_call){ id->valuestring, name->valuestring,
                                               api_own(r, cJSON_PrintUnformatted(input)) };
    }
    cm->tool_calls = v;
    cm->n_tool_calls = n;
    return 0;
}

/* A user turn with tool_result blocks: its text runs as user messages, each result a tool
 * message, in order (the template merges them back into one turn). */
static int user_blocks(struct api_req *r, const cJSON *c, const char *param, size_t *cap,
                       struct api_error *e)
{
    struct dsv4_buf text = { 0 };
    bool have_text = false;
    for (const cJSON *b = c->child; b; b = b->next) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "type");
        if (!cJSON_IsObject(b) || !cJSON_IsString(t))
            return dsv4_buf_free(&text), api_bad(e, param, "%s: each block needs a 'type'", param);
        if (!strcmp(t->valuestring, "text")) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(b, "text");
            if (!cJSON_IsString(x))
                return dsv4_buf_free(&text), api_bad(e, param, "%s: a text block needs 'text'", param);
            dsv4_buf_append(&text, x->valuestring, strlen(x->valuestring));
            have_text = true;
            continue;
        }
        if (strcmp(t->valuestring, "tool_result"))
            return dsv4_buf_free(&text), api_bad(e, param, "%s: block type '%.40s' is not supported",
                                           param, t->valuestring);
        if (have_text) {
            struct dsv4_chat_msg *u = push(r, cap);
            u->role = "user";
            u->content = api_own(r, text.p);
            text = (struct dsv4_buf){ 0 };
            have_text = false;
        }
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "tool_use_id");
        struct dsv4_chat_msg *tm = push(r, cap);
        tm->role = "tool";
        tm->tool_call_id = cJSON_IsString(id) ? id->valuestring : NULL;
        const cJSON *rc = cJSON_GetObjectItemCaseSensitive(b, "content");
        if (rc && !cJSON_IsNull(rc) && blocks(r, rc, param, false, &tm->content, NULL, e) < 0)
            return dsv4_buf_free(&text), -1;
    }
    if (have_text) {
        struct dsv4_chat_msg *u = push(r, cap);
        u->role = "user";
        u->content = api_own(r, text.p);
    } else {
        dsv4_buf_free(&text);
    }
    return 0;
}

/* tools [{name, description, input_schema}] as the OpenAI function list the template renders;
 * tool_choice {type: auto|any|tool|none}. NULL: no tools. */
static int tools_json(struct api_req *r, const cJSON *root, const char **out, struct api_error *e)
{
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    const cJSON *tct = cJSON_GetObjectItemCaseSensitive(tc, "type");
    const cJSON *tcn = cJSON_GetObjectItemCaseSensitive(tc, "name");
    *out = NULL;
    if (tc && !cJSON_IsNull(tc) &&
        (!cJSON_IsString(tct) || (strcmp(tct->valuestring, "auto") && strcmp(tct->valuestring, "any") &&
                                  strcmp(tct->valuestring, "none") &&
                                  (strcmp(tct->valuestring, "tool") || !cJSON_IsString(tcn)))))
        return api_bad(e, "tool_choice", "tool_choice: {\"type\": auto|any|none|tool, \"name\"}");
    if (!tools || cJSON_IsNull(tools))
        return 0;
    if (!cJSON_IsArray(tools))
        return api_bad(e, "tools", "tools: must be a list");
    if (cJSON_IsString(tct) && !strcmp(tct->valuestring, "none"))
        return 0;
    const char *only = cJSON_IsString(tct) && !strcmp(tct->valuestring, "tool") ? tcn->valuestring
                                                                                : NULL;
    cJSON *list = cJSON_CreateArray();
    int i = 0;
    for (const cJSON *t = tools->child; t; t = t->next, i++) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
        if (!cJSON_IsString(name) || !name->valuestring[0] || !cJSON_IsObject(schema) ||
            (desc && !cJSON_IsString(desc))) {
            cJSON_Delete(list);
            char param[32];
            snprintf(param, sizeof(param), "tools.%d", i);
            return api_bad(e, param, "%s: {name, description, input_schema} expected", param);
        }
        if (only && strcmp(only, name->valuestring))
            continue;
        cJSON *x = cJSON_CreateObject(), *f;
        cJSON_AddStringToObject(x, "type", "function");
        f = cJSON_AddObjectToObject(x, "function");
        cJSON_AddStringToObject(f, "name", name->valuestring);
        if (desc)
            cJSON_AddStringToObject(f, "description", desc->valuestring);
        cJSON_AddItemToObject(f, "parameters", cJSON_Duplicate(schema, true));
        cJSON_AddItemToArray(list, x);
    }
    if (list->child)
        *out = api_own(r, cJSON_PrintUnformatted(list));
    cJSON_Delete(list);
    if (only && !*out)
        return api_bad(e, "tool_choice", "tool_choice: '%.64s' is not in tools", only);
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
    const char *tools = NULL;
    if (tools_json(r, root, &tools, e) < 0)
        return -1;
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!cJSON_IsArray(msgs) || !msgs->child)
        return api_bad(e, "messages", "messages: Field required (a non-empty list)");
    size_t n = (size_t)cJSON_GetArraySize(msgs);
    if (n > API_MAX_MESSAGES)
        return api_bad(e, "messages", "messages: more than %d entries", API_MAX_MESSAGES);
    size_t cap = 0;
    const cJSON *sys = cJSON_GetObjectItemCaseSensitive(root, "system");
    if ((sys && !cJSON_IsNull(sys)) || tools) {    /* the tools go with the system message */
        struct dsv4_chat_msg *sm = push(r, &cap);
        sm->role = "system";
        sm->tools = tools;
        r->tools = tools != NULL;
        if (sys && !cJSON_IsNull(sys) && blocks(r, sys, "system", false, &sm->content, NULL, e) < 0)
            return -1;
    }
    size_t i = 0;
    for (const cJSON *m = msgs->child; m; m = m->next, i++) {
        char param[64];
        snprintf(param, sizeof(param), "messages.%zu.role", i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role) ||
            (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant")))
            return api_bad(e, param, "%s: must be \"user\" or \"assistant\"", param);
        bool asst = !strcmp(role->valuestring, "assistant");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        snprintf(param, sizeof(param), "messages.%zu.content", i);
        bool results = false;
        for (const cJSON *b = cJSON_IsArray(content) ? content->child : NULL; b; b = b->next) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "type");
            results |= cJSON_IsString(t) && !strcmp(t->valuestring, "tool_result");
        }
        if (!asst && results) {
            if (user_blocks(r, content, param, &cap, e) < 0)
                return -1;
            continue;
        }
        struct dsv4_chat_msg *cm = push(r, &cap);
        cm->role = role->valuestring;
        if (blocks(r, content, param, asst, &cm->content, asst ? &cm->reasoning : NULL, e) < 0 ||
            (asst && assistant_tool_uses(r, content, param, cm, e) < 0))
            return -1;
    }
    return 0;
}

/* ---- responses ---- */
static const char *stop_reason(const struct gen *g)
{
    if (g->n_calls)
        return "tool_use";
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
    /* Anthropic counts cache reads apart: input_tokens are the ones computed */
    cJSON *u = cJSON_CreateObject();
    uint32_t cached = final ? g->n_cached : 0;
    cJSON_AddNumberToObject(u, "input_tokens", (double)g->prompt.n - cached);
    cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
    cJSON_AddNumberToObject(u, "cache_read_input_tokens", cached);
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

static void a_start(struct dsv4_buf *o, const struct gen *g, struct api_meta *m)
{
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", "message_start");
    cJSON_AddItemToObject(ev, "message", message(g, m, false));
    sb_sse(o, "message_start", ev);
    m->block = -1;
}

static void close_block(struct dsv4_buf *o, struct api_meta *m)
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

static void open_block(struct dsv4_buf *o, struct api_meta *m, bool reasoning)
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

static void a_piece(struct dsv4_buf *o, const struct gen *g, struct api_meta *m, bool reasoning,
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

/* A tool_use block for call i: its input is the call's arguments (a JSON object). */
static cJSON *tool_use(const struct gen *g, int i, bool empty_input)
{
    cJSON *b = cJSON_CreateObject();
    uint64_t x = 0;
    if (getrandom(&x, sizeof(x), 0) != sizeof(x))
        x = dsv4_now_ns() + (uint64_t)i;
    char id[32];
    snprintf(id, sizeof(id), "toolu_%016llx", (unsigned long long)x);
    cJSON_AddStringToObject(b, "type", "tool_use");
    cJSON_AddStringToObject(b, "id", id);
    cJSON_AddStringToObject(b, "name", g->calls[i].name);
    cJSON *in = empty_input ? NULL : cJSON_Parse(g->calls[i].arguments);
    cJSON_AddItemToObject(b, "input", cJSON_IsObject(in) ? in : cJSON_CreateObject());
    if (in && !cJSON_IsObject(in))
        cJSON_Delete(in);
    return b;
}

static void a_finish(struct dsv4_buf *o, const struct gen *g, struct api_meta *m)
{
    if (!g->n_calls && (!m->block_open || m->block_reasoning))  /* a text block at least */
        open_block(o, m, false);
    close_block(o, m);
    for (int i = 0; i < g->n_calls; i++) {
        cJSON *ev = cJSON_CreateObject(), *d;
        cJSON_AddStringToObject(ev, "type", "content_block_start");
        cJSON_AddNumberToObject(ev, "index", ++m->block);
        cJSON_AddItemToObject(ev, "content_block", tool_use(g, i, true));
        sb_sse(o, "content_block_start", ev);
        ev = cJSON_CreateObject();
        cJSON_AddStringToObject(ev, "type", "content_block_delta");
        cJSON_AddNumberToObject(ev, "index", m->block);
        d = cJSON_AddObjectToObject(ev, "delta");
        cJSON_AddStringToObject(d, "type", "input_json_delta");
        cJSON_AddStringToObject(d, "partial_json", g->calls[i].arguments);
        sb_sse(o, "content_block_delta", ev);
        ev = cJSON_CreateObject();
        cJSON_AddStringToObject(ev, "type", "content_block_stop");
        cJSON_AddNumberToObject(ev, "index", m->block);
        sb_sse(o, "content_block_stop", ev);
    }
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

static void a_error(struct dsv4_buf *o, const struct api_error *e)
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
    struct dsv4_buf rs = { 0 }, cs = { 0 };
    const char *p;
    size_t n;
    bool r;
    while (gen_take(g, &p, &n, &r))
        dsv4_buf_append(r ? &rs : &cs, p, n);
    cJSON *o = message(g, m, true), *content = cJSON_GetObjectItemCaseSensitive(o, "content");
    if (m->req->chat.thinking) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "thinking");
        cJSON_AddItemToObject(b, "thinking", api_json_strn(rs.p ? rs.p : "", rs.len));
        cJSON_AddStringToObject(b, "signature", "");
        cJSON_AddItemToArray(content, b);
    }
    if (!g->n_calls || cs.len) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "text");
        cJSON_AddItemToObject(b, "text", api_json_strn(cs.p ? cs.p : "", cs.len));
        cJSON_AddItemToArray(content, b);
    }
    for (int i = 0; i < g->n_calls; i++)
        cJSON_AddItemToArray(content, tool_use(g, i, false));
    dsv4_buf_free(&rs);
    dsv4_buf_free(&cs);
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return t;
}

const struct api_writer api_anthropic = { a_start, a_piece, a_finish, a_error, a_body,
                                          a_error_body };
