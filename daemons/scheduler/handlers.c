/* SPDX-License-Identifier: MIT */
/*
 * dsv4-scheduler's message handlers (sched.h), apart from the socket loop in main.c so that a
 * test can drive them without a daemon (tests/fuzz/fuzz-scheduler.c): admission and CANCEL
 * from the clients (sched_on_client), compute's answers (sched_on_compute), the supervisor's
 * PEER_RESTARTED (sched_on_peer), the stop conditions and the messages to the clients.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "buf.h"
#include "daemon.h"
#include "log.h"
#include "sampling.h"
#include "sched.h"

/*
 * Send s->out to r's client. The client socket is ZMQ_ROUTER_MANDATORY: once
 * a client's connection is gone (its process died: the kernel closed the
 * ipc socket and libzmq dropped the peer), a send to it fails with
 * EHOSTUNREACH instead of vanishing, and the request is cancelled. -EAGAIN
 * is a live client that is slow to read: the message is dropped, the
 * request goes on.
 */
void to_client(struct sched *s, struct req *r)
{
    int e = dsv4_zsend(s->clients, r->rid, r->rid_len, &s->out, 1);
    r->t_sent = dsv4_now_ns();
    if (e == -EHOSTUNREACH && !r->cancel) {
        dsv4_log_info("scheduler", "req=%llu: client gone, cancelling", (unsigned long long)r->id);
        r->cancel = true;
    } else if (e < 0) {
        dsv4_log_debug("scheduler", "req=%llu: send to client: %s", (unsigned long long)r->id,
                       zmq_strerror(-e));
    }
}

/* The prefill gauges of the stats page: r's catch-up at done/total, or none (r NULL). */
void prefill_gauges(struct sched *s, struct req *r, uint64_t done, uint64_t total)
{
    s->prefilling = r;
    atomic_store(&s->d.stats->prefill_done, r ? done : 0);
    atomic_store(&s->d.stats->prefill_total, r ? total : 0);
}

void send_progress(struct sched *s, struct req *r)
{
    struct dsv4_msg_progress p = { r->id, (uint32_t)DSV4_MIN(r->cpos, (int64_t)r->n_tok), r->n_tok };
    dsv4_wire_simple(&s->out, DSV4_MSG_PROGRESS, &p, sizeof(p));
    to_client(s, r);
}

static void client_error(struct sched *s, const unsigned char *rid, size_t rid_len, uint64_t id,
                         int code, const char *text)
{
    dsv4_wire_error(&s->out, id, code, text);
    dsv4_zsend(s->clients, rid, rid_len, &s->out, 1);
}

static void free_req(struct sched *s, struct req *r)
{
    if (r->opened) {    /* fire and forget: seq 0 never matches an in-flight command */
        struct dsv4_msg_session_ref c = { 0, r->session };
        dsv4_wire_simple(&s->out, DSV4_MSG_SESSION_CLOSE, &c, sizeof(c));
        dsv4_zsend(s->compute, NULL, 0, &s->out, 1);
    }
    if (r->seq)     /* its answer, when it comes, matches no request */
        s->n_inflight--;
    if (s->prefilling == r)
        prefill_gauges(s, NULL, 0, 0);
    free(r->toks);
    free(r->stop);
    if (r->detok_on)
        dsv4_detok_free(&r->detok);
    dsv4_buf_free(&r->text);
    memset(r, 0, sizeof(*r));
}

void finish(struct sched *s, struct req *r, int reason)
{
    uint64_t now = dsv4_now_ns();
    if (r->kind == DSV4_MSG_GENERATE) {
        struct dsv4_msg_done d = { r->id, (uint32_t)reason, r->n_gen, r->n_prompt, r->n_cached };
        dsv4_wire_simple(&s->out, DSV4_MSG_DONE, &d, sizeof(d));
    } else {
        struct dsv4_msg_done d = { r->id, DSV4_DONE_LENGTH, 0, r->n_prompt, 0 };
        dsv4_wire_simple(&s->out, DSV4_MSG_DONE, &d, sizeof(d));
    }
    to_client(s, r);
    atomic_fetch_add(reason == DSV4_DONE_CANCELLED ? &s->d.stats->req_cancelled
                                                   : &s->d.stats->req_ok, 1);
    dsv4_hist_add(&s->d.stats->request, (now - r->t_submit) / 1000);
    free_req(s, r);
}

void fail(struct sched *s, struct req *r, int code, const char *text)
{
    dsv4_log_rl(DSV4_LOG_WARN, "scheduler", "req=%llu: %s", (unsigned long long)r->id, text);
    dsv4_wire_error(&s->out, r->id, code, text);
    to_client(s, r);
    atomic_fetch_add(&s->d.stats->req_error, 1);
    free_req(s, r);
}

/*
 * Does the generated text contain one of the stop strings? The text grows by the new
 * tokens' pieces only (the streaming detokenizer: its pieces concatenate to the full decode),
 * and only the part a new match can touch is searched — the new bytes and max_stop_len - 1
 * before them — so a request costs O(generated text), not O(n²).
 */
static bool hit_stop(struct sched *s, struct req *r)
{
    if (!r->n_stop || !r->max_stop_len || !s->tok)
        return false;       /* no stop strings, or only empty ones (they match nothing) */
    if (!r->detok_on) {
        dsv4_detok_init(&r->detok, s->tok, false);
        r->detok_on = true;
    }
    size_t old = r->text.len;
    for (; r->n_decoded < r->n_gen; r->n_decoded++) {
        const char *piece;
        size_t n;
        if (dsv4_detok_feed(&r->detok, (uint32_t)r->toks[r->n_prompt + r->n_decoded], &piece, &n,
                            NULL) < 0)
            return false;   /* an id outside the vocabulary: no text to match */
        dsv4_buf_append(&r->text, piece, n);
    }
    if (r->text.len == old)
        return false;
    size_t from = old >= r->max_stop_len ? old - (r->max_stop_len - 1) : 0;
    const char *hay = r->text.p + from;
    size_t hay_len = r->text.len - from;
    for (const char *p = r->stop; p < r->stop + r->n_stop; p += strlen(p) + 1)
        if (*p && memmem(hay, hay_len, p, strlen(p)))
            return true;
    return false;
}

/* The stop condition after the last generated token, or -1 to continue. */
static int stop_reason(struct sched *s, struct req *r)
{
    if (r->n_gen > 0 && r->toks[r->n_tok - 1] == s->eos)
        return DSV4_DONE_EOS;
    if (r->n_gen >= r->max_tokens)
        return DSV4_DONE_LENGTH;
    if (r->n_gen > 0 && hit_stop(s, r))
        return DSV4_DONE_STOP;
    return -1;
}

static void admit(struct sched *s, const struct dsv4_msg *m)
{
    uint64_t id = m->type == DSV4_MSG_GENERATE ? ((const struct dsv4_msg_generate *)m->body)->req_id
                                               : ((const struct dsv4_msg_score *)m->body)->req_id;
    for (int i = 0; i < s->n_reqs; i++)     /* a resubmission replaces the old one */
        if (s->reqs[i].state != R_FREE && s->reqs[i].id == id)
            free_req(s, &s->reqs[i]);
    struct req *r = NULL;
    for (int i = 0; i < s->n_reqs && !r; i++)
        if (s->reqs[i].state == R_FREE)
            r = &s->reqs[i];
    if (!r) {
        atomic_fetch_add(&s->d.stats->req_busy, 1);
        client_error(s, s->in.rid, s->in.rid_len, id, DSV4_WE_BUSY, "busy: request queue full");
        return;
    }
    /* a request that can never fit is refused as such (never "busy", never queued) */
    uint64_t need = m->type == DSV4_MSG_GENERATE
                        ? (uint64_t)((const struct dsv4_msg_generate *)m->body)->n_prompt +
                              (uint64_t)((const struct dsv4_msg_generate *)m->body)->max_tokens
                        : ((const struct dsv4_msg_score *)m->body)->n_tokens;
    if (need > (uint64_t)s->max_ctx) {
        char t[200];
        if (m->type == DSV4_MSG_GENERATE)
            snprintf(t, sizeof(t), "too large: prompt %u + max_tokens %d = %llu positions, the "
                     "context is %lld", ((const struct dsv4_msg_generate *)m->body)->n_prompt,
                     ((const struct dsv4_msg_generate *)m->body)->max_tokens,
                     (unsigned long long)need, (long long)s->max_ctx);
        else
            snprintf(t, sizeof(t), "too large: %llu tokens to score, the context is %lld",
                     (unsigned long long)need, (long long)s->max_ctx);
        atomic_fetch_add(&s->d.stats->req_error, 1);
        client_error(s, s->in.rid, s->in.rid_len, id, DSV4_WE_TOO_LARGE, t);
        return;
    }
    memset(r, 0, sizeof(*r));
    r->kind = m->type;
    r->id = id;
    memcpy(r->rid, s->in.rid, s->in.rid_len);
    r->rid_len = s->in.rid_len;
    r->t_submit = r->t_sent = dsv4_now_ns();
    r->session = ++s->next_session;
    r->order = ++s->next_order;
    if (m->type == DSV4_MSG_GENERATE) {
        const struct dsv4_msg_generate *g = m->body;
        if (g->n_stop_bytes && !s->tok) {
            client_error(s, r->rid, r->rid_len, id, DSV4_WE_INVALID,
                         "stop strings need the model's tokenizer");
            return;
        }
        r->n_prompt = g->n_prompt;
        r->n_gen = g->n_done;
        r->n_tok = g->n_prompt + g->n_done;
        r->max_tokens = (uint32_t)g->max_tokens;
        r->toks = dsv4_xmalloc(((size_t)r->n_prompt + r->max_tokens + 1) * sizeof(int32_t));
        memcpy(r->toks, m->tail, (size_t)r->n_tok * 4);
        r->sp = (struct dsv4_sampling){ g->temperature, g->top_p, g->top_k, g->seed };
        if (g->n_stop_bytes) {
            r->stop = dsv4_xmalloc(g->n_stop_bytes);
            memcpy(r->stop, (const char *)m->tail + (size_t)r->n_tok * 4, g->n_stop_bytes);
            r->n_stop = g->n_stop_bytes;
            for (const char *q = r->stop; q < r->stop + r->n_stop; q += strlen(q) + 1)
                r->max_stop_len = DSV4_MAX(r->max_stop_len, (uint32_t)strlen(q));
        }
        r->first_sent = g->n_done > 0;
        r->logprobs = g->flags & DSV4_GEN_LOGPROBS;
        r->n_top = (g->flags & DSV4_GEN_TOP_MASK) >> DSV4_GEN_TOP_SHIFT;
        spec_admit(&r->spec, s->dspark_block, g->temperature == 0.0f,
                   g->flags | (r->logprobs ? DSV4_GEN_NO_DSPARK : 0), &s->dspark_opts);
    } else {
        const struct dsv4_msg_score *sc = m->body;
        r->n_prompt = r->n_tok = sc->n_tokens;
        r->toks = dsv4_xmalloc((size_t)r->n_tok * sizeof(int32_t));
        memcpy(r->toks, m->tail, (size_t)r->n_tok * 4);
    }
    r->state = R_QUEUED;
    atomic_fetch_add(&s->d.stats->prompt_tokens, r->n_prompt);
    dsv4_log_debug("scheduler", "req=%llu admitted (%u prompt tokens, %u done)",
                   (unsigned long long)id, r->n_prompt, r->n_gen);
    int reason = r->kind == DSV4_MSG_GENERATE ? stop_reason(s, r) : -1;
    if (reason >= 0)    /* resumed request that had already finished */
        finish(s, r, reason);
}

void sched_on_client(struct sched *s)
{
    struct dsv4_msg m;
    struct dsv4_err err;
    int errc;
    if (dsv4_wire_decode(s->in.buf, s->in.len, &m, &errc, &err)) {
        dsv4_daemon_bad_message(&s->d, "client", err.msg);
        client_error(s, s->in.rid, s->in.rid_len, 0, errc, err.msg);
        return;
    }
    if (m.type == DSV4_MSG_GENERATE || m.type == DSV4_MSG_SCORE) {
        admit(s, &m);
    } else if (m.type == DSV4_MSG_CANCEL) {
        uint64_t id = ((const struct dsv4_msg_cancel *)m.body)->req_id;
        for (int i = 0; i < s->n_reqs; i++)
            if (s->reqs[i].state != R_FREE && s->reqs[i].id == id)
                s->reqs[i].cancel = true;
    } else {
        dsv4_daemon_bad_message(&s->d, "client", dsv4_wire_type_name(m.type));
        client_error(s, s->in.rid, s->in.rid_len, 0, DSV4_WE_PROTO,
                     "message type not served by the scheduler");
    }
}

/* Emit generated token t; true when it ended the request (r is freed then). */
static bool accept_token(struct sched *s, struct req *r, int32_t t)
{
    r->toks[r->n_tok++] = t;
    uint32_t index = r->n_gen++;
    struct dsv4_msg_token tm = { r->id, index, 1 };
    dsv4_wire_begin(&s->out, DSV4_MSG_TOKEN);
    dsv4_wire_put(&s->out, &tm, sizeof(tm));
    dsv4_wire_put(&s->out, &t, sizeof(t));
    dsv4_wire_finish(&s->out);
    to_client(s, r);
    uint64_t now = dsv4_now_ns();
    if (!r->first_sent)
        dsv4_hist_add(&s->d.stats->ttft, (now - r->t_submit) / 1000);
    else
        dsv4_hist_add(&s->d.stats->per_token, (now - r->t_last) / 1000);
    r->first_sent = true;
    r->t_last = now;
    atomic_fetch_add(&s->d.stats->generated_tokens, 1);
    atomic_fetch_add_explicit(&s->d.stats->progress, 1, memory_order_relaxed);
    int reason = stop_reason(s, r);
    if (reason >= 0)
        finish(s, r, reason);
    return reason >= 0;
}

/* TOKEN_LOGPROBS for token t: log-softmax of the model's logits (in double), top alternatives. */
static void send_logprobs(struct sched *s, struct req *r, int32_t t, const float *logits, int n)
{
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++)
        mx = DSV4_MAX(mx, (double)logits[i]);
    for (int i = 0; i < n; i++)
        sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    struct dsv4_wire_topk top[DSV4_WIRE_MAX_LOGPROBS];
    uint32_t k = 0;
    for (int i = 0; i < n; i++) {     /* insertion into the k best (k <= 20) */
        if (k == r->n_top && (k == 0 || logits[i] <= logits[top[k - 1].id]))
            continue;
        uint32_t j = k < r->n_top ? k++ : k - 1;
        while (j > 0 && logits[top[j - 1].id] < logits[i]) {
            top[j] = top[j - 1];
            j--;
        }
        top[j].id = i;
    }
    for (uint32_t j = 0; j < k; j++)
        top[j].logprob = (float)DSV4_MIN((double)logits[top[j].id] - lse, 0.0);
    struct dsv4_msg_token_logprobs m = { r->id, r->n_gen, t,
                                         (float)DSV4_MIN((double)logits[t] - lse, 0.0), k };
    dsv4_wire_begin(&s->out, DSV4_MSG_TOKEN_LOGPROBS);
    dsv4_wire_put(&s->out, &m, sizeof(m));
    dsv4_wire_put(&s->out, top, k * sizeof(top[0]));
    dsv4_wire_finish(&s->out);
    to_client(s, r);
}

/* Accept the token a plain FORWARD_RESULT decides. */
static void accept(struct sched *s, struct req *r, const struct dsv4_msg_forward_result *res,
                   const struct dsv4_wire_row *rows, const float *logits)
{
    int32_t t = r->sp.temperature == 0.0
                    ? rows[res->n_rows - 1].argmax
                    : dsv4_sample(logits, (int)res->n_logits, &r->sp, r->n_gen);
    if (t < 0 || t >= s->vocab) {   /* argmax -1 (not computed) or past the vocabulary */
        char text[96];
        snprintf(text, sizeof(text), "compute answered token %d (vocabulary %d)", (int)t, s->vocab);
        fail(s, r, DSV4_WE_INTERNAL, text);
        return;
    }
    spec_plain_done(&r->spec);
    if (r->logprobs)
        send_logprobs(s, r, t, logits, (int)res->n_logits);
    accept_token(s, r, t);
}

/* A verify FORWARD's result (spec.h): roll compute back past the accepted rows, emit. */
static void verify_result(struct sched *s, struct req *r, int64_t before,
                          const struct dsv4_msg_forward_result *res,
                          const struct dsv4_wire_row *rows)
{
    int32_t out[DSV4_WIRE_MAX_DRAFT + 1];
    int keep, acc;
    uint32_t L = r->spec.verify_l;
    uint64_t q0 = r->spec.pol.st.quench_events;
    int32_t anchor = r->toks[before];     /* compute held every token but this one */
    uint32_t n_draft = r->spec.n_draft;
    for (uint32_t i = 0; i < res->n_rows && i <= L; i++)
        if (rows[i].argmax < 0 || rows[i].argmax >= s->vocab) {
            char text[96];
            snprintf(text, sizeof(text), "compute answered token %d in row %u (vocabulary %d)",
                     (int)rows[i].argmax, i, s->vocab);
            fail(s, r, DSV4_WE_INTERNAL, text);
            return;
        }
    int n = spec_verify(&r->spec, rows, res->n_rows, s->eos, out, &keep, &acc);
    if (s->trace) {     /* the keys of `dsv4ctl run --dspark-trace`, plus the request */
        fprintf(s->trace, "{\"req\":%llu,\"pos\":%lld,\"index\":%u,\"anchor\":%d,\"drafts\":[",
                (unsigned long long)r->id, (long long)before, r->n_gen, (int)anchor);
        for (uint32_t i = 0; i < n_draft; i++)
            fprintf(s->trace, "%s%d", i ? "," : "", (int)r->spec.ids[i]);
        fprintf(s->trace, "],\"conf\":[");
        for (uint32_t i = 0; i < n_draft; i++)
            fprintf(s->trace, "%s%.6g", i ? "," : "", (double)r->spec.conf[i]);
        fprintf(s->trace, "],\"verified\":%u,\"accepted\":%d,\"out\":[", L, acc);
        for (int i = 0; i < n; i++)
            fprintf(s->trace, "%s%d", i ? "," : "", (int)out[i]);
        fprintf(s->trace, "]}\n");
        fflush(s->trace);
    }
    atomic_fetch_add(&s->d.stats->spec_verify_steps, 1);
    atomic_fetch_add(&s->d.stats->spec_proposed, L);
    atomic_fetch_add(&s->d.stats->spec_accepted, (uint64_t)acc);
    atomic_fetch_add(&s->d.stats->spec_quench, r->spec.pol.st.quench_events - q0);
    r->cpos = before + keep;
    if (r->cpos < res->pos) {   /* fire and forget: ordered before this session's next command */
        struct dsv4_msg_rollback rb = { 0, r->session, r->cpos };
        dsv4_wire_simple(&s->out, DSV4_MSG_ROLLBACK, &rb, sizeof(rb));
        dsv4_zsend(s->compute, NULL, 0, &s->out, 1);
    }
    for (int i = 0; i < n; i++)
        if (accept_token(s, r, out[i]))
            return;     /* finished: r is gone */
}

void sched_on_compute(struct sched *s)
{
    struct dsv4_msg m;
    struct dsv4_err err;
    int errc;
    if (dsv4_wire_decode(s->in.buf, s->in.len, &m, &errc, &err)) {
        dsv4_daemon_bad_message(&s->d, "compute", err.msg);
        return;
    }
    uint64_t seq = m.type == DSV4_MSG_ERROR            ? ((const struct dsv4_msg_error *)m.body)->id
                   : m.type == DSV4_MSG_ACK            ? ((const struct dsv4_msg_ack *)m.body)->seq
                   : m.type == DSV4_MSG_FORWARD_RESULT ? ((const struct dsv4_msg_forward_result *)m.body)->seq
                   : m.type == DSV4_MSG_DRAFT_RESULT
                       ? ((const struct dsv4_msg_draft_result *)m.body)->seq
                                                       : 0;
    struct req *r = NULL;
    for (int i = 0; seq && i < s->n_reqs && !r; i++)
        if (s->reqs[i].state == R_ACTIVE && s->reqs[i].seq == seq)
            r = &s->reqs[i];
    if (!r)
        return;     /* stale (an earlier compute epoch, a finished request) or a close ACK */
    r->seq = 0;
    s->n_inflight--;
    int want = r->cmd == DSV4_MSG_FORWARD ? DSV4_MSG_FORWARD_RESULT
               : r->cmd == DSV4_MSG_DRAFT ? DSV4_MSG_DRAFT_RESULT
                                          : DSV4_MSG_ACK;   /* SESSION_OPEN, PREFIX_RESTORE */
    if (m.type != DSV4_MSG_ERROR && m.type != want) {
        char text[96];
        snprintf(text, sizeof(text), "compute answered %s to %s", dsv4_wire_type_name(m.type),
                 dsv4_wire_type_name(r->cmd));
        fail(s, r, DSV4_WE_INTERNAL, text);
        return;
    }
    if (m.type == DSV4_MSG_FORWARD_RESULT) {
        const struct dsv4_msg_forward_result *res = m.body;
        bool all_rows = r->kind == DSV4_MSG_SCORE;
        if (res->pos != r->cpos + (int64_t)r->fwd_rows || (all_rows && res->n_rows != r->fwd_rows)) {
            char text[160];
            snprintf(text, sizeof(text), "compute answered %u rows at position %lld to a FORWARD "
                     "of %u rows from %lld", res->n_rows, (long long)res->pos, r->fwd_rows,
                     (long long)r->cpos);
            fail(s, r, DSV4_WE_INTERNAL, text);
            return;
        }
    }
    if (m.type == DSV4_MSG_ERROR) {
        const struct dsv4_msg_error *e = m.body;
        if (e->code == DSV4_WE_NOSESSION) {
            r->opened = false;
            spec_reset(&r->spec);
            return;
        }
        char text[DSV4_WIRE_MAX_TEXT + 16];
        snprintf(text, sizeof(text), "compute: %.*s", (int)e->text_len, (const char *)m.tail);
        fail(s, r, e->code, text);
        return;
    }
    if (m.type == DSV4_MSG_ACK && r->cmd == DSV4_MSG_PREFIX_RESTORE) {
        int64_t pos = ((const struct dsv4_msg_ack *)m.body)->pos;
        r->restore_tried = true;
        if (pos < 0 || pos >= (int64_t)r->n_tok)
            pos = 0;    /* at most every token but the last: anything else is ignored */
        r->cpos = pos;
        if (!r->cached_known) {     /* the first prefill's figure (a replay's is not the client's) */
            r->n_cached = (uint32_t)DSV4_MIN(pos, (int64_t)r->n_prompt);
            r->cached_known = true;
        }
        return;
    }
    if (m.type == DSV4_MSG_ACK) {
        r->opened = true;
        r->cpos = 0;
        return;
    }
    if (m.type == DSV4_MSG_DRAFT_RESULT) {
        uint64_t q0 = r->spec.pol.st.quench_events;
        spec_draft_result(&r->spec, m.body, m.tail);
        atomic_fetch_add(&s->d.stats->spec_quench, r->spec.pol.st.quench_events - q0);
        return;
    }
    if (m.type != DSV4_MSG_FORWARD_RESULT)
        return;
    const struct dsv4_msg_forward_result *res = m.body;
    const struct dsv4_wire_row *rows = m.tail;
    const float *logits = (const float *)((const unsigned char *)m.tail +
                                          res->n_rows * sizeof(struct dsv4_wire_row) +
                                          (size_t)res->n_rows * res->top_k * sizeof(struct dsv4_wire_topk));
    int64_t before = r->cpos;
    r->cpos = res->pos;
    atomic_fetch_add_explicit(&s->d.stats->progress, 1, memory_order_relaxed);
    if (r->kind == DSV4_MSG_SCORE) {
        struct dsv4_msg_score_rows sr = { r->id, (uint32_t)before, res->n_rows };
        dsv4_wire_begin(&s->out, DSV4_MSG_SCORE_ROWS);
        dsv4_wire_put(&s->out, &sr, sizeof(sr));
        dsv4_wire_put(&s->out, rows, res->n_rows * sizeof(*rows));
        dsv4_wire_finish(&s->out);
        to_client(s, r);
        if (r->cpos >= r->n_tok)
            finish(s, r, DSV4_DONE_LENGTH);
        return;
    }
    if (r->spec.verify_l) {
        verify_result(s, r, before, res, rows);
        return;
    }
    if (r->cpos < r->n_tok) {   /* still catching up (prefill or replay) */
        prefill_gauges(s, r, (uint64_t)r->cpos, r->n_tok);
        send_progress(s, r);
        return;
    }
    if (s->prefilling == r)
        prefill_gauges(s, NULL, 0, 0);
    if ((r->sp.temperature != 0.0 || r->logprobs) && res->n_logits != (uint32_t)s->vocab) {
        char text[96];
        snprintf(text, sizeof(text), "compute sent %u logits to sample from (vocabulary %d)",
                 res->n_logits, s->vocab);
        fail(s, r, DSV4_WE_INTERNAL, text);
        return;
    }
    accept(s, r, res, rows, logits);
}

void sched_on_peer(void *ctx, int role)
{
    struct sched *s = ctx;
    if (role != DSV4_ROLE_COMPUTE && role != DSV4_ROLE_FETCHER)
        return;
    if (role == DSV4_ROLE_FETCHER)
        return;     /* compute re-maps the cache; sessions are intact */
    s->n_inflight = 0;     /* the answers of the old compute never come */
    for (int i = 0; i < s->n_reqs; i++) {
        struct req *r = &s->reqs[i];
        r->seq = 0;
        if (r->state != R_FREE && r->opened) {
            r->opened = false;
            r->restore_tried = false;   /* the replay restores what it can too */
            spec_reset(&r->spec);
            atomic_fetch_add(&s->d.stats->replayed_tokens, (uint64_t)r->cpos);
        }
    }
}
