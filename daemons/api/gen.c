/* SPDX-License-Identifier: MIT */
/* One generation through the scheduler (gen.h). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <zmq.h>

#include "buf.h"
#include "gen.h"
#include "log.h"
#include "util.h"

static uint64_t new_id(void)
{
    uint64_t id = 0;
    while (id == 0)
        if (getrandom(&id, sizeof(id), 0) != sizeof(id))
            id = dsv4_now_ns();
    return id;
}

static bool role_ready(const struct api_ctx *c, int role)
{
    return c->page[role] && atomic_load(&c->page[role]->state) == DSV4_STATE_READY;
}

static int encode(struct gen *g, struct api_error *e)
{
    const struct api_req *r = g->req;
    struct api_ctx *c = g->ctx;
    struct dsv4_err err;
    int rc = 0;
    if (r->kind == API_COMPLETION && !r->prompt) {
        uint32_t n_ids = dsv4_tokenizer_n_ids(c->tok);
        for (size_t i = 0; i < r->n_prompt_ids; i++) {
            if (r->prompt_ids[i] >= n_ids)
                return api_bad(e, "prompt", "'prompt': token id %u is outside the vocabulary "
                                            "(%u ids)", r->prompt_ids[i], n_ids);
            dsv4_ids_push(&g->prompt, r->prompt_ids[i]);
        }
        return 0;
    }
    pthread_mutex_lock(&c->tok_mu);
    if (r->kind == API_COMPLETION)
        rc = dsv4_chat_prompt(c->tok, r->prompt, r->prompt_len, DSV4_PROMPT_RAW_BOS, &g->prompt,
                              &err);
    else
        rc = dsv4_chat_encode(c->tok, r->msgs, r->n_msgs, &r->chat, &g->prompt, &err);
    pthread_mutex_unlock(&c->tok_mu);
    if (rc < 0)
        return api_bad(e, r->kind == API_COMPLETION ? "prompt" : "messages", "%s", err.msg);
    return 0;
}

static void build(struct gen *g)
{
    const struct api_req *r = g->req;
    struct dsv4_msg_generate m = { g->id, r->seed, (float)r->temperature, (float)r->top_p,
                                   r->top_k, g->max_tokens, (uint32_t)g->prompt.n, g->n_got,
                                   (uint32_t)r->n_stop, 0 };
    if (r->logprobs)
        m.flags |= DSV4_GEN_LOGPROBS | ((uint32_t)r->top_logprobs << DSV4_GEN_TOP_SHIFT);
    dsv4_wire_begin(&g->msg, DSV4_MSG_GENERATE);
    dsv4_wire_put(&g->msg, &m, sizeof(m));
    dsv4_wire_put(&g->msg, g->prompt.v, g->prompt.n * 4);
    dsv4_wire_put(&g->msg, g->got, (size_t)g->n_got * 4);
    dsv4_wire_put(&g->msg, r->stop, r->n_stop);
    dsv4_wire_finish(&g->msg);
}

static int submit(struct gen *g)
{
    build(g);
    g->sched_pid = atomic_load(&g->ctx->page[DSV4_ROLE_SCHEDULER]->pid);
    return dsv4_zsend(g->sock, NULL, 0, &g->msg, 0);
}

int gen_begin(struct gen *g, struct api_ctx *c, const struct api_req *r, int client_fd,
              struct api_error *e)
{
    memset(g, 0, sizeof(*g));
    g->ctx = c;
    g->req = r;
    g->client_fd = client_fd;
    g->watch_fd = client_fd >= 0;
    g->stop_index = -1;
    g->cut = SIZE_MAX;
    g->calls_at = SIZE_MAX;
    g->think_end = r->kind == API_COMPLETION || !r->chat.thinking ? 0 : SIZE_MAX;
    for (const char *s = r->stop; s < r->stop + r->n_stop; s += strlen(s) + 1)
        g->max_stop = DSV4_MAX(g->max_stop, strlen(s));
    g->hold = DSV4_MAX(g->max_stop, r->tools ? strlen(DSV4_CHAT_TOOL_CALLS_START) : 0);
    if (encode(g, e) < 0)
        return -1;
    int64_t room = c->n_ctx - (int64_t)g->prompt.n;
    int64_t want = r->max_tokens ? r->max_tokens : DSV4_MIN(room, (int64_t)c->default_max_tokens);
    if (room < 1 || want > room)
        return api_err(e, 400, "invalid_request_error", r->kind == API_COMPLETION ? "prompt" : "messages",
                       "context_length_exceeded",
                       "This model's maximum context length is %lld tokens. However, you requested "
                       "%lld tokens (%zu in the prompt, %lld for the completion).",
                       (long long)c->n_ctx, (long long)g->prompt.n + (want > 0 ? want : 1),
                       g->prompt.n, (long long)(want > 0 ? want : 1));
    g->max_tokens = (int)want;
    for (int role = 0; role < DSV4_ROLE_COUNT; role++) {
        if (role == DSV4_ROLE_FETCHER || role == DSV4_ROLE_API)
            continue;   /* compute waits for a restarted fetcher; we are the api */
        if (!role_ready(c, role)) {
            api_err(e, 503, "server_error", NULL, "unavailable", "the %s daemon is not ready "
                    "(restarting); retry shortly", dsv4_role_name(role));
            e->retry_after = 1;
            return -1;
        }
    }
    g->got = dsv4_xmalloc((size_t)g->max_tokens * sizeof(int32_t));
    if (r->logprobs) {
        g->lp = dsv4_xcalloc((size_t)g->max_tokens, sizeof(float));
        g->top = dsv4_xcalloc((size_t)g->max_tokens * DSV4_MAX(r->top_logprobs, 1),
                              sizeof(*g->top));
    }
    g->id = new_id();
    g->sock = dsv4_zsock(c->zctx, ZMQ_DEALER, NULL);
    int tmo = 5000;
    zmq_setsockopt(g->sock, ZMQ_SNDTIMEO, &tmo, sizeof(tmo));
    if (zmq_connect(g->sock, c->sched_ep) < 0 || submit(g) < 0) {
        api_err(e, 503, "server_error", NULL, "unavailable", "the scheduler is not reachable");
        e->retry_after = 1;
        return -1;
    }
    dsv4_detok_init(&g->dt, c->tok, false);
    g->detok = true;
    g->t_submit = dsv4_now_ns();
    return 0;
}

static void append(struct gen *g, const char *p, size_t n)
{
    DSV4_GROW(g->text, g->cap, g->len + n + 1);
    memcpy(g->text + g->len, p, n);
    size_t old = g->len;
    g->len += n;
    g->text[g->len] = '\0';
    if (g->req->tools && g->calls_at == SIZE_MAX && g->think_end != SIZE_MAX) {
        const size_t ml = strlen(DSV4_CHAT_TOOL_CALLS_START);
        size_t from = DSV4_MAX(g->think_end, old > ml - 1 ? old - (ml - 1) : 0);
        const char *hit = g->len > from ? memmem(g->text + from, g->len - from,
                                                 DSV4_CHAT_TOOL_CALLS_START, ml) : NULL;
        if (hit)
            g->calls_at = (size_t)(hit - g->text);
    }
    if (!g->max_stop || g->cut != SIZE_MAX)
        return;
    /* a stop string ending in the new bytes starts at or after old - (max_stop - 1) */
    size_t from = old > g->max_stop - 1 ? old - (g->max_stop - 1) : 0;
    int i = 0;
    for (const char *s = g->req->stop; s < g->req->stop + g->req->n_stop; s += strlen(s) + 1, i++) {
        const char *hit = memmem(g->text + from, g->len - from, s, strlen(s));
        if (hit && (size_t)(hit - g->text) < g->cut) {
            g->cut = (size_t)(hit - g->text);
            g->stop_index = i;
        }
    }
}

static void on_token(struct gen *g, int32_t v)
{
    g->got[g->n_got++] = v;
    const char *piece;
    size_t n;
    struct dsv4_err err;
    if (g->ctx->has_end_think && (uint32_t)v == g->ctx->end_think && g->think_end == SIZE_MAX) {
        dsv4_detok_flush(&g->dt, &piece, &n);   /* the marker is not text: reasoning ends */
        append(g, piece, n);
        g->think_end = g->len;
        return;
    }
    if (g->req->tools && g->ctx->dsml_special && (uint32_t)v == g->ctx->dsml) {
        dsv4_detok_flush(&g->dt, &piece, &n);   /* the marker is text the parser needs */
        append(g, piece, n);
        append(g, DSV4_CHAT_DSML, strlen(DSV4_CHAT_DSML));
        return;
    }
    if (dsv4_detok_feed(&g->dt, (uint32_t)v, &piece, &n, &err) == 0)
        append(g, piece, n);
}

/* At the end: the DSML block into calls, or (not well-formed) back to being content. */
static void take_calls(struct gen *g)
{
    if (g->calls_at == SIZE_MAX)
        return;
    size_t end = DSV4_MIN(g->len, g->cut);
    if (end > g->calls_at)
        g->n_calls = api_dsml_parse(g->text + g->calls_at, end - g->calls_at, &g->calls);
    if (g->n_calls <= 0) {
        g->n_calls = 0;
        g->calls = NULL;
        g->calls_at = SIZE_MAX;
    }
}

static int fail_from(struct gen *g, const struct dsv4_msg *m, struct api_error *e)
{
    const struct dsv4_msg_error *er = m->body;
    const char *t = m->tail;
    int n = (int)er->text_len;
    g->state = GEN_FAILED;
    switch (er->code) {
    case DSV4_WE_BUSY:
        api_err(e, 429, "rate_limit_error", NULL, "busy", "the server is busy (%.*s); retry shortly",
                n, t);
        e->retry_after = 1;
        break;
    case DSV4_WE_INVALID:
    case DSV4_WE_RANGE:
        api_err(e, 400, "invalid_request_error", NULL, NULL, "%.*s", n, t);
        break;
    case DSV4_WE_TOO_LARGE:
        api_err(e, 400, "invalid_request_error", NULL, "context_length_exceeded", "%.*s", n, t);
        break;
    default:
        api_err(e, 503, "server_error", NULL, "unavailable", "scheduler: %.*s", n, t);
        e->retry_after = 1;
    }
    return -1;
}

/* Has the HTTP client hung up? Data it sends early (a pipelined request) is not a hang-up. */
static bool client_hung_up(struct gen *g)
{
    if (g->client_fd < 0)
        return false;
    struct pollfd p = { g->client_fd, POLLRDHUP, 0 };
    if (poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
        return true;
    if (p.revents & POLLIN)
        g->watch_fd = false;    /* readable but open: stop waking on it, check each round */
    return false;
}

int gen_wait(struct gen *g, int timeout_ms, struct api_error *e)
{
    if (g->state != GEN_RUNNING)
        return 0;
    zmq_pollitem_t it[2] = { { g->sock, 0, ZMQ_POLLIN, 0 }, { NULL, g->client_fd, ZMQ_POLLIN, 0 } };
    zmq_poll(it, g->watch_fd ? 2 : 1, timeout_ms);
    if (client_hung_up(g)) {
        struct dsv4_msg_cancel cm = { g->id };
        struct dsv4_wire_buf b = { 0 };
        dsv4_wire_simple(&b, DSV4_MSG_CANCEL, &cm, sizeof(cm));
        dsv4_zsend(g->sock, NULL, 0, &b, 1);
        dsv4_wire_buf_free(&b);
        g->client_gone = true;
        g->state = GEN_FAILED;
        atomic_fetch_add(&g->ctx->stats->req_cancelled, 1);
        return api_err(e, 499, "client_gone", NULL, NULL, "client closed the connection");
    }
    int changed = 0;
    while (g->state == GEN_RUNNING && dsv4_zrecv(g->sock, &g->in, 0, 1) == 0) {
        struct dsv4_msg m;
        struct dsv4_err err;
        int errc;
        if (dsv4_wire_decode(g->in.buf, g->in.len, &m, &errc, &err) < 0)
            continue;
        if (m.type == DSV4_MSG_PROGRESS) {
            if (((const struct dsv4_msg_progress *)m.body)->req_id == g->id && !g->started)
                changed = g->started = true;
        } else if (m.type == DSV4_MSG_TOKEN_LOGPROBS) {
            const struct dsv4_msg_token_logprobs *l = m.body;
            if (l->req_id != g->id || !g->lp || l->index != g->n_lp ||
                l->index >= (uint32_t)g->max_tokens || l->n_top != (uint32_t)g->req->top_logprobs)
                continue;
            g->lp[l->index] = l->logprob;
            memcpy(g->top + (size_t)l->index * g->req->top_logprobs, m.tail,
                   l->n_top * sizeof(*g->top));
            g->n_lp++;
        } else if (m.type == DSV4_MSG_TOKEN) {
            const struct dsv4_msg_token *t = m.body;
            if (t->req_id != g->id)
                continue;
            for (uint32_t i = 0; i < t->n; i++) {
                int32_t v;
                memcpy(&v, (const char *)m.tail + 4 * i, 4);
                if (t->index + i != g->n_got || g->n_got >= (uint32_t)g->max_tokens)
                    continue;   /* a duplicate after a resubmission */
                on_token(g, v);
            }
            changed = g->started = true;
        } else if (m.type == DSV4_MSG_DONE) {
            const struct dsv4_msg_done *d = m.body;
            if (d->req_id != g->id)
                continue;
            const char *piece;
            size_t n;
            dsv4_detok_flush(&g->dt, &piece, &n);
            append(g, piece, n);
            g->reason = (int)d->reason;
            g->n_generated = g->n_got;
            g->n_cached = d->n_cached;
            take_calls(g);
            g->state = GEN_DONE;
            changed = g->started = true;
            atomic_fetch_add(&g->ctx->stats->generated_tokens, g->n_got);
        } else if (m.type == DSV4_MSG_ERROR) {
            const struct dsv4_msg_error *er = m.body;
            if (er->id == g->id || er->id == 0)
                return fail_from(g, &m, e);
        }
    }
    if (g->state == GEN_RUNNING && !changed) {
        struct api_ctx *c = g->ctx;
        if (dsv4_rundir_supervisor_pid(c->run_dir) == 0) {
            g->state = GEN_FAILED;
            return api_err(e, 503, "server_error", NULL, "unavailable", "the daemon set stopped");
        }
        uint64_t pid = atomic_load(&c->page[DSV4_ROLE_SCHEDULER]->pid);
        if (pid != g->sched_pid && role_ready(c, DSV4_ROLE_SCHEDULER)) {
            dsv4_log_info("api", "scheduler restarted: resubmitting after %u tokens", g->n_got);
            if (submit(g) < 0)
                g->sched_pid = 0;   /* again on the next turn */
        }
    }
    return changed;
}

/* Back to the start of a UTF-8 character. */
static size_t char_start(const char *t, size_t i)
{
    while (i > 0 && ((unsigned char)t[i] & 0xC0) == 0x80)
        i--;
    return i;
}

bool gen_take(struct gen *g, const char **p, size_t *n, bool *reasoning)
{
    size_t end = g->len;
    if (g->cut != SIZE_MAX)
        end = g->cut;
    else if (g->state == GEN_RUNNING && g->hold > 0)    /* may still become a stop or DSML */
        end = char_start(g->text, g->len > g->hold - 1 ? g->len - (g->hold - 1) : 0);
    end = DSV4_MIN(end, g->calls_at);
    if (g->emitted >= end)
        return false;
    bool r = g->emitted < g->think_end;
    size_t stop = r && g->think_end < end ? g->think_end : end;
    *p = g->text + g->emitted;
    *n = stop - g->emitted;
    *reasoning = r;
    g->emitted = stop;
    if (*n == 0)
        return gen_take(g, p, n, reasoning);
    return true;
}

const char *gen_finish_reason(const struct gen *g)
{
    return g->n_calls > 0 ? "tool_calls" : g->reason == DSV4_DONE_LENGTH ? "length" : "stop";
}

void gen_end(struct gen *g)
{
    if (g->sock && g->state == GEN_RUNNING) {
        struct dsv4_msg_cancel cm = { g->id };
        struct dsv4_wire_buf b = { 0 };
        dsv4_wire_simple(&b, DSV4_MSG_CANCEL, &cm, sizeof(cm));
        dsv4_zsend(g->sock, NULL, 0, &b, 1);
        dsv4_wire_buf_free(&b);
    }
    if (g->sock)
        zmq_close(g->sock);
    if (g->detok)
        dsv4_detok_free(&g->dt);
    dsv4_zin_free(&g->in);
    dsv4_wire_buf_free(&g->msg);
    dsv4_ids_free(&g->prompt);
    free(g->got);
    free(g->text);
    free(g->lp);
    free(g->top);
    api_dsml_free(g->calls, g->n_calls);
    memset(g, 0, sizeof(*g));
}
