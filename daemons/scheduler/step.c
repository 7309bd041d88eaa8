/* SPDX-License-Identifier: MIT */
/*
 * Continuous batching: the scheduler's step. When compute has answered everything, every
 * active request gets its next command at once: SESSION_OPEN and DRAFT go out as they are
 * made; the FORWARDs (one decode row, a DSpark verify block, or a chunk of prompt) are sent
 * back to back with DSV4_FWD_MORE on all but the last, and compute runs them as one batched
 * step (dsv4_engine_forward), answering each. New requests join at the next step; a finished
 * one leaves.
 *
 * Budget: decode and verify rows always run (they are what keeps the streams flowing). Rows
 * of requests still catching up (a prompt, a replay, scoring) fill what is left of
 * --step-tokens, so a long prompt is admitted in chunks while running streams keep a bounded
 * time between tokens; the first of them in the round's order gets MIN_PREFILL_ROWS even in a
 * full step, so it always progresses, and with nobody decoding a prompt runs in chunks of
 * PREFILL_ROWS. The round's order rotates by one request per step: no starvation.
 */
#include <string.h>
#include <zmq.h>

#include "log.h"
#include "sched.h"

enum cmd { CMD_NONE, CMD_SENT, CMD_FORWARD };

/* The FORWARD of rows cpos.. (n of them) of r into b. */
static void build_forward(struct sched *s, struct req *r, uint64_t seq, uint32_t n,
                          struct dsv4_wire_buf *b)
{
    bool score = r->kind == DSV4_MSG_SCORE;
    bool last = r->cpos + n == r->n_tok;
    struct dsv4_msg_forward f = { seq, r->session, n, 0,
                                  score ? DSV4_FWD_ALL_ROWS
                                        : (last && (r->sp.temperature != 0.0 || r->logprobs)
                                               ? DSV4_FWD_LOGITS : 0),
                                  0 };
    dsv4_wire_begin(b, DSV4_MSG_FORWARD);
    dsv4_wire_put(b, &f, sizeof(f));
    for (uint32_t i = 0; i < n; i++) {
        int64_t p = r->cpos + i;
        struct dsv4_wire_fwd_in row = { r->toks[p], -1, p };
        if (score && p + 1 < r->n_tok)
            row.target = r->toks[p + 1];
        dsv4_wire_put(b, &row, sizeof(row));
    }
    dsv4_wire_finish(b);
    (void)s;
}

static bool send_now(struct sched *s, struct req *r, uint64_t seq, struct dsv4_wire_buf *b)
{
    if (dsv4_zsend(s->compute, NULL, 0, b, 1) < 0) {
        spec_reset(&r->spec);
        return false;   /* compute not connected (restarting): retry on the next step */
    }
    r->seq = seq;
    r->cmd = ((const struct dsv4_msg_hdr *)(const void *)b->p)->type;
    s->n_inflight++;
    return true;
}

/*
 * r's next command when it is caught up or opening: SESSION_OPEN or DRAFT (sent now), a
 * verify or decode FORWARD (into b), or CMD_NONE when it is catching up (the second pass).
 */
static enum cmd next_command(struct sched *s, struct req *r, struct dsv4_wire_buf *b)
{
    uint64_t seq = ++s->seq;
    uint64_t q0 = r->spec.pol.st.quench_events;
    enum cmd c = CMD_NONE;
    if (!r->opened) {
        int64_t ctx = (int64_t)r->n_prompt + (r->kind == DSV4_MSG_GENERATE ? r->max_tokens : 0) + 1;
        struct dsv4_msg_session_open o = { seq, r->session, ctx };
        dsv4_wire_simple(&s->out, DSV4_MSG_SESSION_OPEN, &o, sizeof(o));
        if (r->n_gen > 0)   /* a replay (compute restart) or a resumed request */
            atomic_fetch_add(&s->d.stats->replays, 1);
        c = send_now(s, r, seq, &s->out) ? CMD_SENT : CMD_NONE;
    } else if (r->kind == DSV4_MSG_GENERATE && !r->restore_tried && r->cpos == 0 && r->n_tok > 1) {
        /* the longest cached prefix of the sequence first (compute answers 0 without a cache) */
        struct dsv4_msg_prefix_restore pr = { seq, r->session, r->n_tok, 0 };
        dsv4_wire_begin(&s->out, DSV4_MSG_PREFIX_RESTORE);
        dsv4_wire_put(&s->out, &pr, sizeof(pr));
        dsv4_wire_put(&s->out, r->toks, (size_t)r->n_tok * sizeof(int32_t));
        dsv4_wire_finish(&s->out);
        c = send_now(s, r, seq, &s->out) ? CMD_SENT : CMD_NONE;
    } else if (r->kind == DSV4_MSG_GENERATE && r->cpos > 0 && r->cpos == (int64_t)r->n_tok - 1) {
        if (spec_issue(&r->spec, b, seq, r->session, r->cpos, r->toks[r->n_tok - 1], r->n_gen,
                       r->max_tokens)) {
            const struct dsv4_msg_hdr *h = (const void *)b->p;
            if (h->type == DSV4_MSG_DRAFT)
                c = send_now(s, r, seq, b) ? CMD_SENT : CMD_NONE;
            else
                c = CMD_FORWARD;
        } else {
            build_forward(s, r, seq, 1, b);
            c = CMD_FORWARD;
        }
    }
    atomic_fetch_add(&s->d.stats->spec_quench, r->spec.pol.st.quench_events - q0);
    if (c == CMD_FORWARD) {
        r->seq = seq;
        r->cmd = DSV4_MSG_FORWARD;
        r->fwd_rows = ((const struct dsv4_msg_forward *)(b->p + sizeof(struct dsv4_msg_hdr)))->n_rows;
    }
    return c;
}

void schedule(struct sched *s)
{
    int active = 0, queued = 0;
    uint64_t now = dsv4_now_ns();
    for (int i = 0; i < s->n_reqs; i++) {
        struct req *r = &s->reqs[i];
        if (r->state != R_FREE && !r->cancel && now - r->t_sent > PROBE_NS)
            send_progress(s, r);    /* queued or in a long step: is the client still there? */
        if (r->state != R_FREE && r->cancel && !r->seq)
            finish(s, r, DSV4_DONE_CANCELLED);
        active += r->state == R_ACTIVE;
    }
    while (active < s->max_active) {     /* promote the oldest queued */
        struct req *best = NULL;
        for (int i = 0; i < s->n_reqs; i++)
            if (s->reqs[i].state == R_QUEUED && (!best || s->reqs[i].order < best->order))
                best = &s->reqs[i];
        if (!best)
            break;
        best->state = R_ACTIVE;
        active++;
    }
    for (int i = 0; i < s->n_reqs; i++)
        queued += s->reqs[i].state == R_QUEUED;
    atomic_store(&s->d.stats->queue_depth, (uint64_t)queued);
    atomic_store(&s->d.stats->active, (uint64_t)active);
    if (s->n_inflight > 0 || active == 0)
        return;     /* the step in progress is not over */

    /* the round's order: every slot once, starting one further each step */
    s->rr = (s->rr + 1) % s->n_reqs;
    struct req **fw = s->fw, **catching = s->catching;
    int n_fw = 0, n_catch = 0;
    uint64_t rows = 0;
    for (int k = 0; k < s->n_reqs && n_fw < s->max_active; k++) {
        struct req *r = &s->reqs[(s->rr + k) % s->n_reqs];
        if (r->state != R_ACTIVE || r->cancel || r->seq)
            continue;
        enum cmd c = next_command(s, r, &s->fwd[n_fw]);
        if (c == CMD_FORWARD) {
            rows += ((const struct dsv4_msg_forward *)(s->fwd[n_fw].p +
                                                        sizeof(struct dsv4_msg_hdr)))->n_rows;
            fw[n_fw++] = r;
        } else if (c == CMD_NONE && r->opened && r->cpos < (int64_t)r->n_tok) {
            catching[n_catch++] = r;
        }
    }
    /* requests catching up share what the decode rows left of the step */
    for (int k = 0; k < n_catch && n_fw < s->max_active; k++) {
        struct req *r = catching[k];
        bool score = r->kind == DSV4_MSG_SCORE;
        int64_t want = DSV4_MIN((int64_t)(score ? SCORE_ROWS : s->prefill_rows),
                                (int64_t)r->n_tok - r->cpos);
        int64_t room = n_fw == 0 ? want : (int64_t)s->step_tokens - (int64_t)rows;
        if (k == 0)
            room = DSV4_MAX(room, MIN_PREFILL_ROWS);
        if (room <= 0)  /* the decode and verify rows took the step (more than --step-tokens) */
            break;
        uint32_t n = (uint32_t)DSV4_MIN(want, room);
        if (!score && r->n_tok - r->cpos > 1)
            prefill_gauges(s, r, (uint64_t)r->cpos, r->n_tok);
        uint64_t seq = ++s->seq;
        build_forward(s, r, seq, n, &s->fwd[n_fw]);
        r->seq = seq;
        r->cmd = DSV4_MSG_FORWARD;
        r->fwd_rows = n;
        rows += n;
        fw[n_fw++] = r;
    }
    /* one step: MORE on every FORWARD but the last */
    for (int i = 0; i < n_fw; i++) {
        struct req *r = fw[i];
        struct dsv4_msg_forward *f =
            (struct dsv4_msg_forward *)(s->fwd[i].p + sizeof(struct dsv4_msg_hdr));
        if (i + 1 < n_fw)
            f->flags |= DSV4_FWD_MORE;
        if (dsv4_zsend(s->compute, NULL, 0, &s->fwd[i], 1) < 0) {
            /* compute not connected (restarting): these wait for the next step */
            for (int j = i; j < n_fw; j++) {
                fw[j]->seq = 0;
                spec_reset(&fw[j]->spec);
            }
            if (i > 0)  /* the sent ones must not wait for a FORWARD that never comes */
                dsv4_log_rl(DSV4_LOG_WARN, "scheduler", "step cut short: compute went away");
            break;
        }
        s->n_inflight++;
        if (!r->stepped) {
            r->stepped = true;
            dsv4_hist_add(&s->d.stats->queue_wait, (now - r->t_submit) / 1000);
        }
    }
}
