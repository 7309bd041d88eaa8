/* SPDX-License-Identifier: MIT */
/* OpenAI response bodies and stream chunks (resp.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <cjson/cJSON.h>

#include "resp.h"
#include "util.h"

void sb_sse(struct dsv4_buf *b, const char *event, cJSON *obj)
{
    char *t = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (event) {
        dsv4_buf_append(b, "event: ", 7);
        dsv4_buf_append(b, event, strlen(event));
        dsv4_buf_append(b, "\n", 1);
    }
    dsv4_buf_append(b, "data: ", 6);
    dsv4_buf_append(b, t, strlen(t));
    dsv4_buf_append(b, "\n\n", 2);
    free(t);
}

/* Our own escaping: generated text may hold NUL bytes, which cJSON's C strings cannot. */
cJSON *api_json_strn(const char *p, size_t n)
{
    struct dsv4_buf b = { 0 };
    dsv4_buf_append(&b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        char esc[8];
        if (ch == '"' || ch == '\\') {
            esc[0] = '\\';
            esc[1] = (char)ch;
            dsv4_buf_append(&b, esc, 2);
        } else if (ch == '\n') {
            dsv4_buf_append(&b, "\\n", 2);
        } else if (ch < 0x20) {
            snprintf(esc, sizeof(esc), "\\u%04x", ch);
            dsv4_buf_append(&b, esc, 6);
        } else {
            dsv4_buf_append(&b, (const char *)&p[i], 1);
        }
    }
    dsv4_buf_append(&b, "\"", 1);
    cJSON *j = cJSON_CreateRaw(b.p);
    dsv4_buf_free(&b);
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

static void oai_error_event(struct dsv4_buf *o, const struct api_error *e)
{
    sb_sse(o, NULL, error_obj(e));
    dsv4_buf_append(o, "data: [DONE]\n\n", 14);
}

static cJSON *usage(const struct gen *g)
{
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)g->prompt.n);
    cJSON_AddNumberToObject(u, "completion_tokens", g->n_generated);
    cJSON_AddNumberToObject(u, "total_tokens", (double)g->prompt.n + g->n_generated);
    /* prompt tokens restored from the prefix cache instead of computed */
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens",
                            g->n_cached);
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

/* ---- logprobs ---- */
/* Tokens with logprobs, the final EOS left out (it is not text). */
static uint32_t lp_end(const struct gen *g)
{
    uint32_t n = DSV4_MIN(g->n_lp, g->n_got);
    if (n > 0 && g->ctx->has_eos && (uint32_t)g->got[n - 1] == g->ctx->eos)
        n--;
    return n;
}

/* A token as text (markers spelled out); "" for an id the tokenizer does not know. */
static char *token_text(const struct gen *g, int32_t id, size_t *len)
{
    char *t = NULL;
    uint32_t u = (uint32_t)id;
    if (dsv4_tokenizer_decode(g->ctx->tok, &u, 1, true, &t, len, NULL) < 0) {
        *len = 0;
        return dsv4_xstrdup("");
    }
    return t;
}

static void add_token(cJSON *o, const struct gen *g, int32_t id, double lp)
{
    size_t n;
    char *t = token_text(g, id, &n);
    cJSON_AddItemToObject(o, "token", api_json_strn(t, n));
    cJSON_AddNumberToObject(o, "logprob", lp);
    cJSON *b = cJSON_AddArrayToObject(o, "bytes");
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)t[i]));
    free(t);
}

/* Chat's {"content": [...], "refusal": null} for tokens [from, to). */
static cJSON *chat_logprobs(const struct gen *g, uint32_t from, uint32_t to)
{
    cJSON *o = cJSON_CreateObject(), *c = cJSON_AddArrayToObject(o, "content");
    int k = g->req->top_logprobs;
    for (uint32_t i = from; i < to; i++) {
        cJSON *e = cJSON_CreateObject(), *tops;
        add_token(e, g, g->got[i], g->lp[i]);
        tops = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int j = 0; j < k; j++) {
            cJSON *t = cJSON_CreateObject();
            add_token(t, g, g->top[(size_t)i * k + j].id, g->top[(size_t)i * k + j].logprob);
            cJSON_AddItemToArray(tops, t);
        }
        cJSON_AddItemToArray(c, e);
    }
    cJSON_AddNullToObject(o, "refusal");
    return o;
}

/* The legacy completions shape: tokens, token_logprobs, top_logprobs, text_offset. */
static cJSON *text_logprobs(const struct gen *g, uint32_t from, uint32_t to, size_t *offset)
{
    cJSON *o = cJSON_CreateObject(), *toks = cJSON_AddArrayToObject(o, "tokens"),
          *lps = cJSON_AddArrayToObject(o, "token_logprobs"),
          *tops = cJSON_AddArrayToObject(o, "top_logprobs"),
          *offs = cJSON_AddArrayToObject(o, "text_offset");
    int k = g->req->top_logprobs;
    for (uint32_t i = from; i < to; i++) {
        size_t n;
        char *t = token_text(g, g->got[i], &n);
        cJSON_AddItemToArray(toks, api_json_strn(t, n));
        free(t);
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(g->lp[i]));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)*offset));
        *offset += n;
        cJSON *alt = cJSON_CreateObject();
        for (int j = 0; j < k; j++) {
            char *a = token_text(g, g->top[(size_t)i * k + j].id, &n);
            cJSON_AddNumberToObject(alt, a, g->top[(size_t)i * k + j].logprob);
            free(a);
        }
        cJSON_AddItemToArray(tops, alt);
    }
    return o;
}

/* The logprobs a chunk carries: those that arrived since the last one (NULL: none wanted). */
static cJSON *chunk_logprobs(const struct gen *g, struct api_meta *m, bool chat)
{
    if (!g->req->logprobs)
        return NULL;
    uint32_t to = DSV4_MAX(lp_end(g), m->lp_sent), from = m->lp_sent;
    m->lp_sent = to;
    return chat ? chat_logprobs(g, from, to) : text_logprobs(g, from, to, &m->lp_offset);
}

/* The parsed DSML calls as OpenAI tool_calls (a stream's carry their index). */
static cJSON *tool_calls(const struct gen *g, bool stream)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < g->n_calls; i++) {
        cJSON *c = cJSON_CreateObject(), *f;
        uint64_t x = 0;
        if (getrandom(&x, sizeof(x), 0) != sizeof(x))
            x = dsv4_now_ns() + (uint64_t)i;
        char id[32];
        snprintf(id, sizeof(id), "call_%016llx", (unsigned long long)x);
        if (stream)
            cJSON_AddNumberToObject(c, "index", i);
        cJSON_AddStringToObject(c, "id", id);
        cJSON_AddStringToObject(c, "type", "function");
        f = cJSON_AddObjectToObject(c, "function");
        cJSON_AddStringToObject(f, "name", g->calls[i].name);
        cJSON_AddStringToObject(f, "arguments", g->calls[i].arguments);
        cJSON_AddItemToArray(a, c);
    }
    return a;
}

/* ---- chat ---- */
static cJSON *chat_chunk(const struct api_meta *m, cJSON *delta, const char *finish,
                         cJSON *logprobs)
{
    cJSON *c = envelope(m, "chat.completion.chunk"), *ch = cJSON_AddArrayToObject(c, "choices");
    cJSON *x = cJSON_CreateObject();
    cJSON_AddNumberToObject(x, "index", 0);
    cJSON_AddItemToObject(x, "delta", delta);
    if (logprobs)
        cJSON_AddItemToObject(x, "logprobs", logprobs);
    else
        cJSON_AddNullToObject(x, "logprobs");
    add_null_or(x, "finish_reason", finish);
    cJSON_AddItemToArray(ch, x);
    if (m->req->include_usage)
        cJSON_AddNullToObject(c, "usage");
    return c;
}

static void chat_start(struct dsv4_buf *o, const struct gen *g, struct api_meta *m)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "role", "assistant");
    cJSON_AddStringToObject(d, "content", "");
    sb_sse(o, NULL, chat_chunk(m, d, NULL, NULL));
}

static void chat_piece(struct dsv4_buf *o, const struct gen *g, struct api_meta *m, bool reasoning,
                       const char *p, size_t n)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddItemToObject(d, reasoning ? "reasoning_content" : "content", api_json_strn(p, n));
    sb_sse(o, NULL, chat_chunk(m, d, NULL, chunk_logprobs(g, m, true)));
}

static void chat_finish(struct dsv4_buf *o, const struct gen *g, struct api_meta *m)
{
    if (g->n_calls) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddItemToObject(d, "tool_calls", tool_calls(g, true));
        sb_sse(o, NULL, chat_chunk(m, d, NULL, NULL));
    }
    sb_sse(o, NULL, chat_chunk(m, cJSON_CreateObject(), gen_finish_reason(g),
                               chunk_logprobs(g, m, true)));
    if (m->req->include_usage) {
        cJSON *c = envelope(m, "chat.completion.chunk");
        cJSON_AddArrayToObject(c, "choices");
        cJSON_AddItemToObject(c, "usage", usage(g));
        sb_sse(o, NULL, c);
    }
    dsv4_buf_append(o, "data: [DONE]\n\n", 14);
}

/* All of the text gen_take() releases, by kind. */
static void drain(struct gen *g, struct dsv4_buf *reasoning, struct dsv4_buf *content)
{
    const char *p;
    size_t n;
    bool r;
    while (gen_take(g, &p, &n, &r))
        dsv4_buf_append(r ? reasoning : content, p, n);
    dsv4_buf_append(reasoning, "", 0);
    dsv4_buf_append(content, "", 0);
}

static char *print_delete(cJSON *c)
{
    char *t = cJSON_PrintUnformatted(c);
    cJSON_Delete(c);
    return t;
}

static char *chat_body(struct gen *g, struct api_meta *m)
{
    struct dsv4_buf rs = { 0 }, cs = { 0 };
    drain(g, &rs, &cs);
    cJSON *c = envelope(m, "chat.completion"), *ch = cJSON_AddArrayToObject(c, "choices");
    cJSON *x = cJSON_CreateObject(), *msg = cJSON_AddObjectToObject(x, "message");
    cJSON_AddNumberToObject(x, "index", 0);
    cJSON_AddStringToObject(msg, "role", "assistant");
    if (g->n_calls && cs.len == 0)
        cJSON_AddNullToObject(msg, "content");
    else
        cJSON_AddItemToObject(msg, "content", api_json_strn(cs.p, cs.len));
    if (g->n_calls)
        cJSON_AddItemToObject(msg, "tool_calls", tool_calls(g, false));
    if (m->req->chat.thinking)
        cJSON_AddItemToObject(msg, "reasoning_content", api_json_strn(rs.p, rs.len));
    if (m->req->logprobs)
        cJSON_AddItemToObject(x, "logprobs", chat_logprobs(g, 0, lp_end(g)));
    else
        cJSON_AddNullToObject(x, "logprobs");
    cJSON_AddStringToObject(x, "finish_reason", gen_finish_reason(g));
    cJSON_AddItemToArray(ch, x);
    cJSON_AddItemToObject(c, "usage", usage(g));
    dsv4_buf_free(&rs);
    dsv4_buf_free(&cs);
    return print_delete(c);
}

const struct api_writer api_oai_chat = { chat_start, chat_piece, chat_finish, oai_error_event,
                                         chat_body, api_oai_error_body };

/* ---- completions ---- */
static cJSON *text_chunk(const struct api_meta *m, const char *p, size_t n, const char *finish,
                         cJSON *logprobs)
{
    cJSON *c = envelope(m, "text_completion"), *ch = cJSON_AddArrayToObject(c, "choices");
    cJSON *x = cJSON_CreateObject();
    cJSON_AddItemToObject(x, "text", api_json_strn(p, n));
    cJSON_AddNumberToObject(x, "index", 0);
    if (logprobs)
        cJSON_AddItemToObject(x, "logprobs", logprobs);
    else
        cJSON_AddNullToObject(x, "logprobs");
    add_null_or(x, "finish_reason", finish);
    cJSON_AddItemToArray(ch, x);
    if (m->req->include_usage)
        cJSON_AddNullToObject(c, "usage");
    return c;
}

static void text_start(struct dsv4_buf *o, const struct gen *g, struct api_meta *m)
{
    const struct api_req *r = m->req;
    if (r->echo && r->prompt)
        sb_sse(o, NULL, text_chunk(m, r->prompt, r->prompt_len, NULL, NULL));
}

static void text_piece(struct dsv4_buf *o, const struct gen *g, struct api_meta *m, bool reasoning,
                       const char *p, size_t n)
{
    sb_sse(o, NULL, text_chunk(m, p, n, NULL, chunk_logprobs(g, m, false)));
}

static void text_finish(struct dsv4_buf *o, const struct gen *g, struct api_meta *m)
{
    sb_sse(o, NULL, text_chunk(m, "", 0, gen_finish_reason(g), chunk_logprobs(g, m, false)));
    if (m->req->include_usage) {
        cJSON *c = envelope(m, "text_completion");
        cJSON_AddArrayToObject(c, "choices");
        cJSON_AddItemToObject(c, "usage", usage(g));
        sb_sse(o, NULL, c);
    }
    dsv4_buf_append(o, "data: [DONE]\n\n", 14);
}

static char *text_body(struct gen *g, struct api_meta *m)
{
    struct dsv4_buf rs = { 0 }, cs = { 0 };
    const struct api_req *r = m->req;
    if (r->echo && r->prompt)
        dsv4_buf_append(&cs, r->prompt, r->prompt_len);
    drain(g, &rs, &cs);
    cJSON *c = envelope(m, "text_completion"), *ch = cJSON_AddArrayToObject(c, "choices");
    cJSON *x = cJSON_CreateObject();
    cJSON_AddItemToObject(x, "text", api_json_strn(cs.p, cs.len));
    cJSON_AddNumberToObject(x, "index", 0);
    size_t off = 0;
    if (m->req->logprobs)
        cJSON_AddItemToObject(x, "logprobs", text_logprobs(g, 0, lp_end(g), &off));
    else
        cJSON_AddNullToObject(x, "logprobs");
    cJSON_AddStringToObject(x, "finish_reason", gen_finish_reason(g));
    cJSON_AddItemToArray(ch, x);
    cJSON_AddItemToObject(c, "usage", usage(g));
    dsv4_buf_free(&rs);
    dsv4_buf_free(&cs);
    return print_delete(c);
}

const struct api_writer api_oai_completion = { text_start, text_piece, text_finish,
                                               oai_error_event, text_body, api_oai_error_body };
