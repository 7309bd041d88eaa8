/* SPDX-License-Identifier: MIT */
/*
 * dsv4-compute's command handlers: SESSION_OPEN/CLOSE, FORWARD (collected into batched steps:
 * DSV4_FWD_MORE, compute_run_step), SNAPSHOT, ROLLBACK, DRAFT and PREFIX_RESTORE, each answered
 * ACK / FORWARD_RESULT / DRAFT_RESULT or ERROR; the prefix cache's save after every engine
 * step; the stats page's memory and prefix-cache figures.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "compute.h"
#include "log.h"
#include "plan.h"

void compute_slot_free(struct slot *sl)
{
    free(sl->ids);
    sl->ids = NULL;
    sl->cached = false;
    sl->committed = 0;
    sl->sp = dsv4_spec_free(sl->sp);
    sl->d = dsv4_drafter_free(sl->d);
    sl->s = dsv4_session_free(sl->s);
}

static void reply_to(struct compute *c, const unsigned char *rid, size_t rid_len)
{
    int r = dsv4_zsend(c->router, rid, rid_len, &c->out, 1);
    if (r < 0)
        dsv4_log_rl(DSV4_LOG_WARN, "compute", "reply dropped: %s", zmq_strerror(-r));
}

static void reply(struct compute *c)
{
    int r = dsv4_zsend(c->router, c->in.rid, c->in.rid_len, &c->out, 1);
    if (r < 0)
        dsv4_log_rl(DSV4_LOG_WARN, "compute", "reply dropped: %s", zmq_strerror(-r));
}

static void reply_error(struct compute *c, uint64_t id, int code, const char *text)
{
    dsv4_wire_error(&c->out, id, code, text);
    reply(c);
}

static struct slot *find(struct compute *c, uint64_t id)
{
    for (int i = 0; i < MAX_SESSIONS; i++)
        if (c->slots[i].s && c->slots[i].id == id)
            return &c->slots[i];
    return NULL;
}

static void ack(struct compute *c, uint64_t seq, uint64_t session, int64_t pos)
{
    struct dsv4_msg_ack a = { seq, session, pos };
    dsv4_wire_simple(&c->out, DSV4_MSG_ACK, &a, sizeof(a));
    reply(c);
}

/* Memory figures of the stats page (the plan's categories, docs/ARCHITECTURE.md). The step
 * scratch is shared by every session and counts against the plan's session share. */
void compute_publish_memory(struct compute *c)
{
    uint64_t state = 0, step = dsv4_engine_scratch_bytes(c->e);
    uint64_t scratch = c->logits_cap * sizeof(float) + step;
    for (int i = 0; i < MAX_SESSIONS; i++)
        if (c->slots[i].s) {
            state += c->slots[i].state_bytes;
            scratch += c->slots[i].scratch_bytes;
        }
    c->session_bytes = state + step;
    atomic_store(&c->d.stats->mem_weights_bytes, dsv4_engine_resident_bytes(c->e));
    atomic_store(&c->d.stats->mem_session_bytes, state);
    atomic_store(&c->d.stats->mem_scratch_bytes, scratch);
}

/* How often the router lookahead named the experts the next layer then chose. */
void compute_log_lookahead(struct compute *c)
{
    uint64_t asked, right;
    dsv4_engine_lookahead_stats(c->e, &asked, &right);
    if (asked)
        dsv4_log_info("compute", "lookahead: %llu of %llu predicted experts chosen (%.1f %%)",
                      (unsigned long long)right, (unsigned long long)asked,
                      100.0 * (double)right / (double)asked);
}

static void close_slot(struct compute *c, struct slot *sl)
{
    compute_slot_free(sl);
    atomic_fetch_sub(&c->d.stats->sessions_open, 1);
    compute_publish_memory(c);
}

static void do_open(struct compute *c, const struct dsv4_msg_session_open *m)
{
    struct slot *sl = find(c, m->session);
    if (sl)     /* reopening an id replaces it (a scheduler retrying after a lost ACK) */
        close_slot(c, sl);
    for (int i = 0; !sl && i < MAX_SESSIONS; i++)
        if (!c->slots[i].s)
            sl = &c->slots[i];
    if (!sl) {
        reply_error(c, m->seq, DSV4_WE_BUSY, "all session slots in use");
        return;
    }
    struct dsv4_session_opts o = { .max_ctx = m->max_ctx, .chunk = c->chunk };
    struct dsv4_err err;
    if (c->session_budget) {    /* the plan's share for sessions: states + one step scratch */
        uint64_t st, sc, step = dsv4_engine_scratch_bytes(c->e);
        dsv4_plan_session_bytes(dsv4_engine_config(c->e), m->max_ctx, c->chunk, 0, c->threads,
                                &st, &sc);
        if (st + sc > c->session_budget) {     /* even alone it never fits: not "busy" */
            char t[200];
            snprintf(t, sizeof(t), "too large: a %lld-position session needs %.1f MiB, the "
                     "plan allows %.1f MiB for all sessions", (long long)m->max_ctx,
                     (st + sc) / 1048576.0, c->session_budget / 1048576.0);
            reply_error(c, m->seq, DSV4_WE_TOO_LARGE, t);
            return;
        }
        uint64_t more = st + (sc > step ? sc - step : 0);
        if (c->session_bytes + more > c->session_budget) {
            char t[200];
            snprintf(t, sizeof(t),
                     "session memory budget: %.1f MiB in use, a %lld-position session needs "
                     "%.1f MiB more, the plan allows %.1f MiB",
                     c->session_bytes / 1048576.0, (long long)m->max_ctx, more / 1048576.0,
                     c->session_budget / 1048576.0);
            reply_error(c, m->seq, DSV4_WE_BUSY, t);
            return;
        }
    }
    if (dsv4_session_new(c->e, &o, &sl->s, &err) < 0 ||
        (c->dspark && (dsv4_drafter_new(c->e, &sl->d, &err) < 0 ||
                       dsv4_spec_new(sl->s, sl->d, NULL, NULL, &sl->sp, &err) < 0))) {
        compute_slot_free(sl);
        reply_error(c, m->seq, DSV4_WE_INVALID, err.msg);
        return;
    }
    sl->id = m->session;
    if (c->pc) {
        dsv4_prefix_seq_init(&sl->q, c->pc, sl->s, sl->sp);
        sl->ids = dsv4_xmalloc((size_t)m->max_ctx * sizeof(int32_t));
        sl->max_ctx = m->max_ctx;
        sl->cached = true;
    }
    dsv4_session_bytes(sl->s, &sl->state_bytes, &sl->scratch_bytes);
    atomic_fetch_add(&c->d.stats->sessions_open, 1);
    compute_publish_memory(c);
    ack(c, m->seq, m->session, 0);
}

/* The FORWARD_RESULT of p from its logits (all rows, or the last). */
static void reply_result(struct compute *c, const struct pending *p, const float *logits)
{
    bool all = p->flags & DSV4_FWD_ALL_ROWS;
    uint32_t n = p->n, nr = all ? n : 1, k = DSV4_MIN(p->top_k, (uint32_t)c->vocab);
    struct dsv4_msg_forward_result res = { p->seq, p->sl->id, dsv4_session_pos(p->sl->s), nr, k,
                                           (p->flags & DSV4_FWD_LOGITS) ? (uint32_t)c->vocab : 0,
                                           0 };
    dsv4_wire_begin(&c->out, DSV4_MSG_FORWARD_RESULT);
    dsv4_wire_put(&c->out, &res, sizeof(res));
    for (uint32_t i = 0; i < nr; i++) {
        const float *lg = logits + (size_t)i * c->vocab;
        int32_t target = p->targets[all ? i : n - 1];
        struct dsv4_wire_row row = { dsv4_argmax(lg, c->vocab), target >= 0, 0.0 };
        if (target >= 0)
            row.logprob = DSV4_MIN(0.0, dsv4_log_softmax_at(lg, c->vocab, target));
        dsv4_wire_put(&c->out, &row, sizeof(row));
    }
    for (uint32_t i = 0; i < nr && k; i++) {
        /* ties to the lower id like dsv4_argmax; one softmax pass per row, not per entry */
        const float *lg = logits + (size_t)i * c->vocab;
        int32_t top[DSV4_WIRE_MAX_TOPK];
        double mx, ls;
        dsv4_top_k(lg, c->vocab, (int)k, top);
        dsv4_log_softmax_terms(lg, c->vocab, &mx, &ls);
        for (uint32_t j = 0; j < k; j++) {
            struct dsv4_wire_topk t = { top[j], (float)DSV4_MIN(0.0, (double)lg[top[j]] - mx - ls) };
            dsv4_wire_put(&c->out, &t, sizeof(t));
        }
    }
    if (res.n_logits)
        dsv4_wire_put(&c->out, logits + (size_t)(nr - 1) * c->vocab,
                      (size_t)c->vocab * sizeof(float));
    dsv4_wire_finish(&c->out);
    reply_to(c, p->rid, p->rid_len);
}

/* After each engine step of a pending FORWARD's rows: the drafter's taps, then the blocks of
 * the prefix cache those rows completed (committed rows only: a verify's drafts wait). */
static void after_chunk(void *ctx, int64_t pos, int n)
{
    struct pending *p = ctx;
    if (p->stash)
        p->stash(p->stash_ctx, pos, n);
    int64_t committed = (p->flags & DSV4_FWD_SPECULATIVE) ? p->pos0 + 1 : pos + n;
    struct dsv4_err err;
    p->sl->committed = committed;
    dsv4_prefix_save(&p->sl->q, p->sl->ids, committed, &err);
}

/*
 * Run the pending FORWARDs as one batched engine call (dsv4_engine_forward: every session's
 * rows share the weight reads; each gets bitwise its solo results) and answer each.
 */
void compute_run_step(struct compute *c)
{
    int np = c->n_pend;
    if (np == 0)
        return;
    c->n_pend = 0;
    struct dsv4_forward_item items[MAX_SESSIONS];
    size_t off[MAX_SESSIONS], need = 0;
    uint32_t rows = 0;
    for (int i = 0; i < np; i++) {
        off[i] = need;
        need += (size_t)((c->pend[i].flags & DSV4_FWD_ALL_ROWS) ? c->pend[i].n : 1) * c->vocab;
        rows += c->pend[i].n;
    }
    if (need > c->logits_cap) {
        free(c->logits);
        c->logits = dsv4_xmalloc(need * sizeof(float));
        c->logits_cap = need;
    }
    for (int i = 0; i < np; i++) {
        struct pending *p = &c->pend[i];
        items[i] = (struct dsv4_forward_item){
            .s = p->sl->s, .tokens = p->toks, .n = (int)p->n,
            .mode = (p->flags & DSV4_FWD_ALL_ROWS) ? DSV4_LOGITS_ALL : DSV4_LOGITS_LAST,
            .logits = c->logits + off[i],
        };
        if (p->sl->sp)      /* keep the rows' taps for the session's drafter */
            dsv4_spec_batch_item(p->sl->sp, &items[i]);
        p->stash = items[i].on_chunk;
        p->stash_ctx = items[i].ctx;
        if (p->sl->cached) {    /* the prefix cache stores each block the rows complete */
            memcpy(p->sl->ids + p->pos0, p->toks, p->n * sizeof(int32_t));
            items[i].on_chunk = after_chunk;
            items[i].ctx = p;
        }
    }
    if (c->delay_ms)
        usleep((useconds_t)c->delay_ms * 1000);
    struct dsv4_err err;
    int r = dsv4_engine_forward(c->e, items, np, &err);
    compute_publish_memory(c);      /* the step's logits buffers may have grown */
    compute_publish_prefix(c);
    if (r == 0) {
        atomic_fetch_add_explicit(&c->d.stats->forward_calls, (uint64_t)np, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->d.stats->forward_rows, rows, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->d.stats->steps, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->d.stats->step_sessions, (uint64_t)np, memory_order_relaxed);
        dsv4_count_hist_add(&c->d.stats->step_rows, rows);
        atomic_store(&c->d.stats->experts_union_saved, dsv4_engine_union_saved(c->e));
        atomic_fetch_add_explicit(&c->d.stats->progress, 1, memory_order_relaxed);
        if (++c->forwards % 256 == 0)
            compute_log_lookahead(c);
    }
    for (int i = 0; i < np; i++) {
        struct pending *p = &c->pend[i];
        if (r < 0)
            dsv4_wire_error(&c->out, p->seq, r == -ERANGE ? DSV4_WE_RANGE : DSV4_WE_INTERNAL,
                            err.msg);
        if (r < 0)
            reply_to(c, p->rid, p->rid_len);
        else
            reply_result(c, p, c->logits + off[i]);
        free(p->toks);
        free(p->targets);
    }
}

static void do_forward(struct compute *c, const struct dsv4_msg *msg)
{
    const struct dsv4_msg_forward *m = msg->body;
    const struct dsv4_wire_fwd_in *rows = msg->tail;
    struct slot *sl = find(c, m->session);
    if (!sl) {
        reply_error(c, m->seq, DSV4_WE_NOSESSION, "no such session");
        return;
    }
    for (int i = 0; i < c->n_pend; i++)
        if (c->pend[i].sl == sl)    /* a session's second FORWARD waits for its first */
            compute_run_step(c);
    int64_t pos = dsv4_session_pos(sl->s);
    if (rows[0].pos != pos) {
        char t[96];
        snprintf(t, sizeof(t), "rows start at %lld, session is at %lld", (long long)rows[0].pos,
                 (long long)pos);
        reply_error(c, m->seq, DSV4_WE_RANGE, t);
        return;
    }
    bool all = m->flags & DSV4_FWD_ALL_ROWS;
    uint32_t n = m->n_rows;
    if (all && n > DSV4_WIRE_MAX_ALL_ROWS) {
        reply_error(c, m->seq, DSV4_WE_RANGE, "too many rows with results (max "
                    DSV4_STRINGIFY(DSV4_WIRE_MAX_ALL_ROWS) ")");
        return;
    }
    struct pending *p = &c->pend[c->n_pend];
    *p = (struct pending){ .seq = m->seq, .sl = sl, .pos0 = pos, .n = n, .top_k = m->top_k,
                           .flags = m->flags, .toks = dsv4_xmalloc(n * sizeof(int32_t)),
                           .targets = dsv4_xmalloc(n * sizeof(int32_t)),
                           .rid_len = c->in.rid_len };
    memcpy(p->rid, c->in.rid, c->in.rid_len);
    for (uint32_t i = 0; i < n; i++) {
        p->toks[i] = rows[i].token;
        p->targets[i] = rows[i].target;
    }
    struct dsv4_err err;
    int r = dsv4_forward_check(sl->s, p->toks, (int)n, &err);
    for (uint32_t i = 0; r == 0 && i < n; i++)
        if (rows[i].target >= c->vocab)
            r = dsv4_errf(&err, -EINVAL, "target %d outside the vocabulary", rows[i].target);
    if (r < 0) {
        free(p->toks);
        free(p->targets);
        reply_error(c, m->seq, r == -ERANGE ? DSV4_WE_RANGE : DSV4_WE_INVALID, err.msg);
        return;
    }
    if (++c->n_pend == MAX_SESSIONS || !(m->flags & DSV4_FWD_MORE))
        compute_run_step(c);
}

/* Engine hook, after every layer of a forward: the watchdog sees a long prefill advance. */
void compute_on_layer(void *ctx)
{
    struct compute *c = ctx;
    if (c->layer_delay_ms)
        usleep((useconds_t)c->layer_delay_ms * 1000);
    atomic_fetch_add_explicit(&c->d.stats->progress, 1, memory_order_relaxed);
    dsv4_daemon_heartbeat(&c->d);
}

static void do_draft(struct compute *c, const struct dsv4_msg_draft *m)
{
    struct slot *sl = find(c, m->session);
    if (!sl) {
        reply_error(c, m->seq, DSV4_WE_NOSESSION, "no such session");
        return;
    }
    if (!sl->sp) {
        reply_error(c, m->seq, DSV4_WE_INVALID, "DRAFT: compute runs without --dspark");
        return;
    }
    if (m->pos != dsv4_session_pos(sl->s) || m->anchor >= c->vocab) {
        reply_error(c, m->seq, DSV4_WE_RANGE, "DRAFT: anchor position or id out of range");
        return;
    }
    int32_t ids[DSV4_WIRE_MAX_DRAFT];
    float conf[DSV4_WIRE_MAX_DRAFT];
    struct dsv4_err err;
    uint32_t n = (uint32_t)dsv4_drafter_block(sl->d);
    if (n > DSV4_WIRE_MAX_DRAFT || dsv4_spec_draft(sl->sp, m->anchor, ids, conf, &err) < 0) {
        reply_error(c, m->seq, DSV4_WE_INTERNAL, n > DSV4_WIRE_MAX_DRAFT ? "block too long"
                                                                         : err.msg);
        return;
    }
    struct dsv4_msg_draft_result res = { m->seq, m->session, m->pos, n, 0 };
    dsv4_wire_begin(&c->out, DSV4_MSG_DRAFT_RESULT);
    dsv4_wire_put(&c->out, &res, sizeof(res));
    dsv4_wire_put(&c->out, ids, n * sizeof(int32_t));
    dsv4_wire_put(&c->out, conf, n * sizeof(float));
    dsv4_wire_finish(&c->out);
    reply(c);
}

/* The prefix cache's figures on the stats page. */
void compute_publish_prefix(struct compute *c)
{
    struct dsv4_pcache_stats ps;
    if (!c->pc)
        return;
    dsv4_pcache_get_stats(c->pc, &ps);
    struct dsv4_stats_shm *st = c->d.stats;
    atomic_store(&st->prefix_lookup_tokens, ps.lookup_tokens);
    atomic_store(&st->prefix_hit_tokens, ps.hit_tokens);
    atomic_store(&st->prefix_ram_entries, ps.ram_entries);
    atomic_store(&st->prefix_ram_bytes, ps.ram_bytes);
    atomic_store(&st->prefix_disk_entries, ps.disk_entries);
    atomic_store(&st->prefix_disk_bytes, ps.disk_bytes);
    atomic_store(&st->prefix_evictions, ps.ram_evictions + ps.disk_evictions);
    atomic_store(&st->prefix_bad_files, ps.bad_files);
}

/* PREFIX_RESTORE: the longest cached prefix of the ids into the fresh session. */
static void do_restore(struct compute *c, const struct dsv4_msg_prefix_restore *m,
                       const void *tail)
{
    struct slot *sl = find(c, m->session);
    if (!sl) {
        reply_error(c, m->seq, DSV4_WE_NOSESSION, "no such session");
        return;
    }
    const int32_t *toks = tail;
    int64_t n = DSV4_MIN((int64_t)m->n_tokens, sl->max_ctx), restored = 0;
    for (int64_t i = 0; i < n; i++)     /* the ids a FORWARD would accept */
        if (toks[i] >= c->vocab)
            n = 0;
    if (sl->cached && dsv4_session_pos(sl->s) == 0 && n > 1) {
        struct dsv4_err err;
        if (dsv4_prefix_restore(&sl->q, toks, n, &restored, &err) < 0) {
            dsv4_log_rl(DSV4_LOG_WARN, "compute", "prefix cache: %s", err.msg);
            restored = 0;
        }
        if (restored > 0) {
            memcpy(sl->ids, toks, (size_t)restored * sizeof(int32_t));
            sl->committed = restored;
            dsv4_hist_add(&c->d.stats->prefix_restore, sl->q.ns / 1000);
            dsv4_log_info("compute", "session %llu: restored %lld of %lld tokens from the prefix "
                          "cache (%d blocks, %.1f MiB, %.1f ms)", (unsigned long long)sl->id,
                          (long long)restored, (long long)n, sl->q.blocks,
                          sl->q.bytes / 1048576.0, sl->q.ns / 1e6);
        }
        compute_publish_prefix(c);
    }
    ack(c, m->seq, m->session, dsv4_session_pos(sl->s));
}

void compute_handle(struct compute *c)
{
    struct dsv4_msg m;
    struct dsv4_err err;
    int errc;
    if (dsv4_wire_decode(c->in.buf, c->in.len, &m, &errc, &err)) {
        compute_run_step(c);
        dsv4_daemon_bad_message(&c->d, "scheduler socket", err.msg);
        /* every command to compute starts with its seq: answer that command, so the request
         * it belongs to ends with this error instead of waiting for ever */
        uint64_t seq = 0;
        if (c->in.len >= sizeof(struct dsv4_msg_hdr) + sizeof(seq))
            memcpy(&seq, (const unsigned char *)c->in.buf + sizeof(struct dsv4_msg_hdr),
                   sizeof(seq));
        reply_error(c, seq, errc, err.msg);
        return;
    }
    if (m.type != DSV4_MSG_FORWARD)
        compute_run_step(c);    /* commands apply in arrival order: the step's FORWARDs came first */
    switch (m.type) {
    case DSV4_MSG_SESSION_OPEN:
        do_open(c, m.body);
        break;
    case DSV4_MSG_SESSION_CLOSE: {
        const struct dsv4_msg_session_ref *b = m.body;
        struct slot *sl = find(c, b->session);
        if (sl && sl->cached) { /* the sequence's partial last block, for its next turn */
            struct dsv4_err e2;
            dsv4_prefix_save_end(&sl->q, sl->ids, sl->committed, &e2);
        }
        if (sl)
            close_slot(c, sl);
        ack(c, b->seq, b->session, 0);
        break;
    }
    case DSV4_MSG_FORWARD:
        do_forward(c, &m);
        break;
    case DSV4_MSG_SNAPSHOT: {
        const struct dsv4_msg_session_ref *b = m.body;
        struct slot *sl = find(c, b->session);
        if (!sl) {
            reply_error(c, b->seq, DSV4_WE_NOSESSION, "no such session");
            break;
        }
        dsv4_session_snapshot(sl->s);
        ack(c, b->seq, b->session, dsv4_session_pos(sl->s));
        break;
    }
    case DSV4_MSG_ROLLBACK: {
        const struct dsv4_msg_rollback *b = m.body;
        struct slot *sl = find(c, b->session);
        if (!sl) {
            reply_error(c, b->seq, DSV4_WE_NOSESSION, "no such session");
            break;
        }
        if (dsv4_session_rollback(sl->s, b->pos, &err) < 0) {
            reply_error(c, b->seq, DSV4_WE_RANGE, err.msg);
            break;
        }
        if (sl->sp)
            dsv4_spec_sync(sl->sp);
        if (sl->cached && sl->q.keyed > b->pos)     /* rekey from 0 (blocks stored stay) */
            dsv4_prefix_seq_init(&sl->q, c->pc, sl->s, sl->sp);
        ack(c, b->seq, b->session, dsv4_session_pos(sl->s));
        break;
    }
    case DSV4_MSG_DRAFT:
        do_draft(c, m.body);
        break;
    case DSV4_MSG_PREFIX_RESTORE:
        do_restore(c, m.body, m.tail);
        break;
    default:
        dsv4_daemon_bad_message(&c->d, "scheduler socket", dsv4_wire_type_name(m.type));
        reply_error(c, 0, DSV4_WE_PROTO, "message type not served by compute");
    }
}
