/* SPDX-License-Identifier: MIT */
/* OpenAI response bodies and stream chunks (resp.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "resp.h"
#include "util.h"

void sb_put(struct sbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = dsv4_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void sb_free(struct sbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

void sb_sse(struct sbuf *b, const char *event, cJSON *obj)
{
    char *t = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (event) {
        sb_put(b, "event: ", 7);
        sb_put(b, event, strlen(event));
        sb_put(b, "\n", 1);
    }
    sb_put(b, "data: ", 6);
    sb_put(b, t, strlen(t));
    sb_put(b, "\n\n", 2);
    free(t);
}

/* Our own escaping: generated text may hold NUL bytes, which cJSON's C strings cannot. */
cJSON *api_json_strn(const char *p, size_t n)
{
    struct sbuf b = { 0 };
    sb_put(&b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        char esc[8];
        if (ch == '"' || ch == '\\') {
            esc[0] = '\\';
            esc[1] = (char)ch;
            sb_put(&b, esc, 2);
        } else if (ch == '\n') {
            sb_put(&b, "\\n", 2);
        } else if (ch < 0x20) {
            snprintf(esc, sizeof(esc), "\\u%04x", ch);
            sb_put(&b, esc, 6);
        } else {
            sb_put(&b, (const char *)&p[i], 1);
        }
    }
    sb_put(&b, "\"", 1);
    cJSON *j = cJSON_CreateRaw(b.p);
    sb_free(&b);
    return j;
}

static void add_null_or(cJSON *o, const char *k, const char *v)
{
    if (v && v[0])
        cJSON_AddStringToObject(o, k, v);
    else
        cJSON_AddNullToObject(o, k);
}

static cJSON *error_obj(const struct api_error *e)
{
    cJSON *root = cJSON_CreateObject(), *er = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(er, "message", e->msg);
    cJSON_AddStringToObject(er, "type", e->type);
    add_null_or(er, "param", e->param);
    add_null_or(er, "code", e->code);
    return root;
}

char *api_oai_error_body(const struct api_error *e)
{
    cJSON *o = error_obj(e);
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return t;
}

static void oai_error_event(struct sbuf *o, const struct api_error *e)
{
    sb_sse(o, NULL, error_obj(e));
    sb_put(o, "data: [DONE]\n\n", 14);
}

static cJSON *usage(const struct gen *g)
{
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)g->prompt.n);
    cJSON_AddNumberToObject(u, "completion_tokens", g->n_generated);
    cJSON_AddNumberToObject(u, "total_tokens", (double)g->prompt.n + g->n_generated);
    /* the scheduler does not share prefixes between requests yet */
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens", 0);
    return u;
}

static cJSON *envelope(const struct api_meta *m, const char *object)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "id", m->id);
    cJSON_AddStringToObject(c, "object", object);
    cJSON_AddNumberToObject(c, "created", (double)m->created);
    cJSON_AddStringToObject(c, "model", m->model);
    cJSON_AddStringToObject(c, "system_fingerprint", "dsv4");
    return c;
}

/* ---- chat ---- */
static cJSON *chat_chunk(const struct api_meta *m, cJSON *delta, const char *finish)
{
    cJSON *c = envelope(m, "chat.completion.chunk"), *ch = cJSON_AddArrayToObject(c, "choices");
    cJSON *x = cJSON_CreateObject();
    cJSON_AddNumberToObject(x, "index", 0);
    cJSON_AddItemToObject(x, "delta", delta);
    cJSON_AddNullToObject(x, "logprobs");
    add_null_or(x, "finish_reason", finish);
    cJSON_AddItemToArray(ch, x);
    if (m->req->include_usage)
        cJSON_AddNullToObject(c, "usage");
    return c;
}

static void chat_start(struct sbuf *o, const struct gen *g, struct api_meta *m)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "role", "assistant");
    cJSON_AddStringToObject(d, "content", "");
    sb_sse(o, NULL, chat_chunk(m, d, NULL));
}

static void chat_piece(struct sbuf *o, const struct gen *g, struct api_meta *m, bool reasoning,
                       const char *p, size_t n)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddItemToObject(d, reasoning ? "reasoning_content" : "content", api_json_strn(p, n));
    sb_sse(o, NULL, chat_chunk(m, d, NULL));
}

static void chat_finish(struct sbuf *o, const struct gen *g, struct api_meta *m)
{
    sb_sse(o, NULL, chat_chunk(m, cJSON_CreateObject(), gen_finish_reason(g)));
    if (m->req->include_usage) {
        cJSON *c = envelope(m, "chat.completion.chunk");
        cJSON_AddArrayToObject(c, "choices");
        cJSON_AddItemToObject(c, "usage", usage(g));
        sb_sse(o, NULL, c);
    }
    sb_put(o, "data: [DONE]\n\n", 14);
}

/* All of the text gen_take() releases, by kind. */
static void drain(struct gen *g, struct sbuf *reasoning, struct sbuf *content)
{
    const char *p;
    size_t n;
    bool r;
    while (gen_take(g, &p, &n, &r))
        sb_put(r ? reasoning : content, p, n);
    sb_put(reasoning, "", 0);
    sb_put(content, "", 0);
}

static char *print_delete(cJSON *c)
{
    char *t = cJSON_PrintUnformatted(c);
    cJSON_Delete(c);
    return t;
}

static char *chat_body(struct gen *g, struct api_meta *m)
{
    struct sbuf rs = { 0 }, cs = { 0 };
    drain(g, &rs, &cs);
    cJSON *c = envelope(m, "chat.completion"), *ch = cJSON_AddArrayToObject(c, "choices");
    cJSON *x = cJSON_CreateObject(), *msg = cJSON_AddObjectToObject(x, "message");
    cJSON_AddNumberToObject(x, "index", 0);
    cJSON_AddStringToObject(msg, "role", "assistant");
    cJSON_AddItemToObject(msg, "content", api_json_strn(cs.p, cs.n));
    if (m->req->chat.thinking)
        cJSON_AddItemToObject(msg, "reasoning_content", api_json_strn(rs.p, rs.n));
    cJSON_AddNullToObject(x, "logprobs");
    cJSON_AddStringToObject(x, "finish_reason", gen_finish_reason(g));
    cJSON_AddItemToArray(ch, x);
    cJSON_AddItemToObject(c, "usage", usage(g));
    sb_free(&rs);
    sb_free(&cs);
    return print_delete(c);
}

const struct api_writer api_oai_chat = { chat_start, chat_piece, chat_finish, oai_error_event,
                                         chat_body, api_oai_error_body };

/* ---- completions ---- */
static cJSON *text_chunk(const struct api_meta *m, const char *p, size_t n, const char *finish)
{
    cJSON *c = envelope(m, "text_completion"), *ch = cJSON_AddArrayToObject(c, "choices");
    cJSON *x = cJSON_CreateObject();
    cJSON_AddItemToObject(x, "text", api_json_strn(p, n));
    cJSON_AddNumberToObject(x, "index", 0);
    cJSON_AddNullToObject(x, "logprobs");
    add_null_or(x, "finish_reason", finish);
    cJSON_AddItemToArray(ch, x);
    if (m->req->include_usage)
        cJSON_AddNullToObject(c, "usage");
    return c;
}

static void text_start(struct sbuf *o, const struct gen *g, struct api_meta *m)
{
    const struct api_req *r = m->req;
    if (r->echo && r->prompt)
        sb_sse(o, NULL, text_chunk(m, r->prompt, r->prompt_len, NULL));
}

static void text_piece(struct sbuf *o, const struct gen *g, struct api_meta *m, bool reasoning,
                       const char *p, size_t n)
{
    sb_sse(o, NULL, text_chunk(m, p, n, NULL));
}

static void text_finish(struct sbuf *o, const struct gen *g, struct api_meta *m)
{
    sb_sse(o, NULL, text_chunk(m, "", 0, gen_finish_reason(g)));
    if (m->req->include_usage) {
        cJSON *c = envelope(m, "text_completion");
        cJSON_AddArrayToObject(c, "choices");
        cJSON_AddItemToObject(c, "usage", usage(g));
        sb_sse(o, NULL, c);
    }
    sb_put(o, "data: [DONE]\n\n", 14);
}

static char *text_body(struct gen *g, struct api_meta *m)
{
    struct sbuf rs = { 0 }, cs = { 0 };
    const struct api_req *r = m->req;
    if (r->echo && r->prompt)
        sb_put(&cs, r->prompt, r->prompt_len);
    drain(g, &rs, &cs);
    cJSON *c = envelope(m, "text_completion"), *ch = cJSON_AddArrayToObject(c, "choices");
    cJSON *x = cJSON_CreateObject();
    cJSON_AddItemToObject(x, "text", api_json_strn(cs.p, cs.n));
    cJSON_AddNumberToObject(x, "index", 0);
    cJSON_AddNullToObject(x, "logprobs");
    cJSON_AddStringToObject(x, "finish_reason", gen_finish_reason(g));
    cJSON_AddItemToArray(ch, x);
    cJSON_AddItemToObject(c, "usage", usage(g));
    sb_free(&rs);
    sb_free(&cs);
    return print_delete(c);
}

const struct api_writer api_oai_completion = { text_start, text_piece, text_finish,
                                               oai_error_event, text_body, api_oai_error_body };
