/* SPDX-License-Identifier: MIT */
/*
 * Speculative decoding loop (speculate.h): proposal, one batched verify forward with the
 * drafter's taps captured, acceptance by the caller's choice rule, O(1) rollback, commit of
 * the accepted rows' taps, and the verify-length policy with its quench.
 *
 * Policy (docs/ARCHITECTURE.md "DSpark"): the survival chance of slot i is the proposer's
 * confidence times a calibration (measured accepted ÷ predicted, EMA); a verify of L drafts
 * costs 1 + row_cost·L plain steps, row_cost measured from wall time (which includes the
 * routed experts the extra rows pull in, and the drafting); L maximises (1 + expected accepted)
 * ÷ cost. Quench: when the realised tokens per unit of plain-step time stay below 1 over a few
 * verify steps, speculation is off for Q plain steps (Q doubles per consecutive quench, up to
 * 256), then one probe step that verifies a single draft.
 */
#include "speculate.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "spec_accept.h"
#include "util.h"

#define FEED_ROWS DSV4_SPEC_FEED_ROWS /* rows per captured forward while feeding */
#define MAX_GAMMA DSV4_SPEC_MAX_GAMMA
#define TAP_SLACK DSV4_SPEC_TAP_SLACK /* tap ring beyond the window: rows a rollback may undo */

struct dsv4_spec {
    dsv4_session *s;
    dsv4_drafter *d;
    struct dsv4_proposer p;
    struct dsv4_spec_opts o;
    int gamma, vocab, eos, n_taps, dim;
    const int *taps;
    float *logits;          /* [gamma+1][vocab] */
    float *hidden;          /* [max(gamma+1, FEED_ROWS, W, chunk)][n_taps*dim] */
    float *tap_ring;        /* [cap][n_taps*dim]: taps of fed rows, slot = pos mod cap */
    int hidden_rows;        /* rows `hidden` holds */
    struct dsv4_capture bcap;   /* dsv4_spec_batch_item's */
    int W, cap;
    struct dsv4_spec_policy pol;
    FILE *trace;            /* dsv4_spec_set_trace */
};

void dsv4_spec_set_trace(dsv4_spec *sp, FILE *f)
{
    sp->trace = f;
}

static void trace_step(const dsv4_spec *sp, int64_t P, int64_t index, int32_t anchor, bool drafted,
                       const int32_t *ids, const float *conf, int L, int accepted,
                       const int32_t *out, int n_out)
{
    FILE *f = sp->trace;
    int n = drafted ? sp->gamma : 0;
    fprintf(f, "{\"pos\":%lld,\"index\":%lld,\"anchor\":%d,\"drafts\":[", (long long)P,
            (long long)index, (int)anchor);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s%d", i ? "," : "", (int)ids[i]);
    fprintf(f, "],\"conf\":[");
    for (int i = 0; i < n; i++)
        fprintf(f, "%s%.6g", i ? "," : "", (double)conf[i]);
    fprintf(f, "],\"verified\":%d,\"accepted\":%d,\"out\":[", L, accepted);
    for (int i = 0; i < n_out; i++)
        fprintf(f, "%s%d", i ? "," : "", (int)out[i]);
    fprintf(f, "]}\n");
}

int dsv4_spec_new(dsv4_session *s, dsv4_drafter *d, const struct dsv4_proposer *p,
                  const struct dsv4_spec_opts *o, dsv4_spec **ret, struct dsv4_err *err)
{
    const struct dsv4_config *c = &s->e->cfg;
    dsv4_spec *sp = dsv4_xcalloc(1, sizeof(*sp));
    sp->s = s;
    sp->d = d;
    if (p)
        sp->p = *p;
    if (o)
        sp->o = *o;
    dsv4_spec_policy_init(&sp->pol, o);
    sp->vocab = c->vocab_size;
    sp->eos = c->eos_token_id;
    sp->dim = c->dim;
    sp->gamma = d ? dsv4_drafter_block(d) : c->dspark_block_size > 0 ? c->dspark_block_size : 5;
    if (p && sp->o.fixed_verify > sp->gamma)    /* a test proposer proposes any length */
        sp->gamma = sp->o.fixed_verify;
    if (sp->gamma > MAX_GAMMA || sp->o.fixed_verify < 0) {
        free(sp);
        return dsv4_errf(err, -EINVAL, "speculate: verify length must be in 0..%d", MAX_GAMMA);
    }
    if (d) {
        sp->taps = dsv4_drafter_taps(d, &sp->n_taps);
        if (dsv4_drafter_pos(d) != dsv4_session_pos(s)) {
            free(sp);
            return dsv4_errf(err, -EINVAL, "speculate: drafter at %lld, session at %lld",
                             (long long)dsv4_drafter_pos(d), (long long)dsv4_session_pos(s));
        }
    }
    sp->logits = dsv4_xmalloc((size_t)(sp->gamma + 1) * sp->vocab * sizeof(float));
    if (d) {
        sp->W = dsv4_drafter_window(d);
        sp->cap = sp->W + TAP_SLACK;
        /* a step carries up to the session's chunk rows (stash_chunk) */
        int rows = DSV4_MAX(DSV4_MAX(sp->gamma + 1, FEED_ROWS), DSV4_MAX(sp->W, s->chunk));
        sp->hidden_rows = rows;
        sp->hidden = dsv4_xmalloc((size_t)rows * sp->n_taps * sp->dim * sizeof(float));
        sp->tap_ring = dsv4_xmalloc((size_t)sp->cap * sp->n_taps * sp->dim * sizeof(float));
        /* the memory plan counts what a real drafter's session holds: keep them equal */
        assert(p || dsv4_drafter_bytes(d) +
                            ((size_t)(sp->gamma + 1) * sp->vocab +
                             ((size_t)rows + (size_t)sp->cap) * sp->n_taps * sp->dim) *
                                sizeof(float) ==
                        dsv4_dspark_session_bytes(c, s->chunk, dsv4_pool_size(s->e->pool)));
    }
    *ret = sp;
    return 0;
}

dsv4_spec *dsv4_spec_free(dsv4_spec *sp)
{
    if (!sp)
        return NULL;
    free(sp->logits);
    free(sp->hidden);
    free(sp->tap_ring);
    free(sp);
    return NULL;
}

void dsv4_spec_get_stats(const dsv4_spec *sp, struct dsv4_spec_stats *ret)
{
    *ret = sp->pol.st;
}

/* Forward rows at the session's position with the drafter's taps captured. */
static int forward(dsv4_spec *sp, const int32_t *rows, int n, enum dsv4_logits_mode mode,
                   float *logits, struct dsv4_err *err)
{
    struct dsv4_capture cap = { sp->taps, sp->n_taps, sp->hidden };
    return dsv4_session_forward_capture(sp->s, rows, n, mode, logits, sp->d ? &cap : NULL, err);
}

/* Keep the taps of the first n rows of the last forward (positions pos..) for the drafter. */
static void stash(dsv4_spec *sp, int64_t pos, int n)
{
    size_t w = (size_t)sp->n_taps * sp->dim;
    for (int r = DSV4_MAX(0, n - sp->cap); r < n; r++)
        memcpy(sp->tap_ring + (size_t)((pos + r) % sp->cap) * w, sp->hidden + (size_t)r * w,
               w * sizeof(float));
}

static void stash_chunk(void *ctx, int64_t pos, int n)
{
    stash(ctx, pos, n);
}

void dsv4_spec_batch_item(dsv4_spec *sp, struct dsv4_forward_item *it)
{
    if (!sp->d)
        return;
    /* a step carries at most the session's chunk rows of it: the taps buffer holds them */
    assert(sp->s->chunk <= sp->hidden_rows);
    sp->bcap = (struct dsv4_capture){ sp->taps, sp->n_taps, sp->hidden };
    it->cap = &sp->bcap;
    it->on_chunk = stash_chunk;
    it->ctx = sp;
}

int dsv4_spec_flush(dsv4_spec *sp, struct dsv4_err *err)
{
    if (!sp->d)
        return 0;
    int64_t P = dsv4_session_pos(sp->s), from = dsv4_drafter_pos(sp->d);
    if (from >= P)
        return 0;
    int64_t start = DSV4_MAX(from, P - sp->W);
    int rc = dsv4_drafter_skip_to(sp->d, start, err);
    size_t w = (size_t)sp->n_taps * sp->dim;
    for (int64_t p = start; p < P; p++)
        memcpy(sp->hidden + (size_t)(p - start) * w, sp->tap_ring + (size_t)(p % sp->cap) * w,
               w * sizeof(float));
    return rc < 0 ? rc : dsv4_drafter_commit(sp->d, sp->hidden, (int)(P - start), start, err);
}

int dsv4_spec_feed(dsv4_spec *sp, const int32_t *tokens, int n, float *logits,
                   struct dsv4_err *err)
{
    for (int done = 0; done < n;) {
        int m = DSV4_MIN(FEED_ROWS, n - done);
        int64_t pos = dsv4_session_pos(sp->s);
        bool last = done + m == n;
        int rc = forward(sp, tokens + done, m, last ? DSV4_LOGITS_LAST : DSV4_LOGITS_NONE,
                         last ? logits : NULL, err);
        if (rc < 0)
            return rc;
        if (sp->d)
            stash(sp, pos, m);
        done += m;
    }
    return 0;
}

int dsv4_spec_forward(dsv4_spec *sp, const int32_t *rows, int n, enum dsv4_logits_mode mode,
                      float *logits, struct dsv4_err *err)
{
    int64_t pos = dsv4_session_pos(sp->s);
    int done = 0, rc = 0;
    /* the taps buffer holds FEED_ROWS rows: longer batches go in pieces (same results) */
    while (rc == 0 && done < n) {
        int m = sp->d ? DSV4_MIN(FEED_ROWS, n - done) : n;
        bool last = done + m == n;
        enum dsv4_logits_mode md = mode == DSV4_LOGITS_ALL ? mode : last ? mode : DSV4_LOGITS_NONE;
        float *lg = mode == DSV4_LOGITS_ALL ? logits + (size_t)done * sp->vocab
                    : last                  ? logits
                                            : NULL;
        rc = forward(sp, rows + done, m, md, lg, err);
        if (rc == 0 && sp->d)
            stash(sp, pos + done, m);
        done += m;
    }
    return rc;
}

int dsv4_spec_draft(dsv4_spec *sp, int32_t anchor, int32_t *ids, float *conf,
                    struct dsv4_err *err)
{
    if (!sp->d)
        return dsv4_errf(err, -ENOENT, "speculate: no drafter");
    float cl[MAX_GAMMA];
    int rc = dsv4_spec_flush(sp, err);
    if (rc == 0)
        rc = dsv4_drafter_draft(sp->d, anchor, NULL, ids, cl, NULL, err);
    for (int i = 0; rc == 0 && i < sp->gamma; i++)
        conf[i] = sigmoidf_(cl[i]);
    return rc;
}

void dsv4_spec_sync(dsv4_spec *sp)
{
    /* rows past the session are stale; the tap ring still holds the window before it */
    if (sp->d && dsv4_drafter_pos(sp->d) > dsv4_session_pos(sp->s))
        dsv4_drafter_reset(sp->d);
}

/* The caller's choice rule on row j of the verify forward's logits (spec_accept.h). */
struct row_choice {
    dsv4_spec *sp;
    dsv4_choose_fn choose;
    void *ctx;
    int64_t index;
};

static int32_t row_choice(void *arg, int j)
{
    struct row_choice *r = arg;
    return r->choose(r->ctx, r->sp->logits + (size_t)j * r->sp->vocab, r->sp->vocab,
                     r->index + 1 + j);
}

int dsv4_spec_step(dsv4_spec *sp, int32_t anchor, int64_t index, int max_out,
                   dsv4_choose_fn choose, void *choose_ctx, int32_t *out, struct dsv4_err *err)
{
    dsv4_session *s = sp->s;
    int64_t P = dsv4_session_pos(s);
    if (max_out < 1)
        return dsv4_errf(err, -EINVAL, "speculate: no room for a token");
    int32_t rows[MAX_GAMMA + 1], ids[MAX_GAMMA];
    float conf[MAX_GAMMA];
    int lmax = (int)DSV4_MIN((int64_t)sp->gamma, (int64_t)max_out - 1);
    lmax = DSV4_MIN(lmax, s->max_rollback);
    lmax = (int)DSV4_MAX(0, DSV4_MIN((int64_t)lmax, s->max_ctx - P - 1));
    bool can = !sp->o.off && (sp->p.propose || sp->d) && lmax > 0;
    uint64_t t0 = dsv4_now_ns();
    int L = 0, rc;
    bool drafted = false;
    if (can && dsv4_spec_policy_propose(&sp->pol)) {
        if (sp->p.propose) {
            rc = sp->p.propose(sp->p.ctx, P, index, anchor, sp->gamma, ids, conf, err);
            if (rc == 0 && sp->o.draft_cost && sp->d) {
                int32_t waste[MAX_GAMMA];
                float wc[MAX_GAMMA];
                rc = dsv4_spec_draft(sp, anchor, waste, wc, err);
            }
        } else {
            rc = dsv4_spec_draft(sp, anchor, ids, conf, err);
        }
        if (rc < 0)
            return rc;
        drafted = true;
        L = dsv4_spec_policy_len(&sp->pol, conf, lmax);
    }
    rows[0] = anchor;
    memcpy(rows + 1, ids, (size_t)L * sizeof(int32_t));
    if (L > 0)
        dsv4_session_snapshot(s);
    if ((rc = forward(sp, rows, L + 1, DSV4_LOGITS_ALL, sp->logits, err)) < 0)
        return rc;
    /* accept the longest prefix the target itself would have produced */
    struct row_choice rc_ctx = { sp, choose, choose_ctx, index };
    int keep, accepted;
    int n_out = dsv4_spec_accept(ids, L, sp->eos, row_choice, &rc_ctx, out, &keep, &accepted);
    if (keep < L + 1 && (rc = dsv4_session_rollback(s, P + keep, err)) < 0)
        return rc;
    if (sp->d)
        stash(sp, P, keep);
    double ns = sp->o.rows_as_cost ? 1e6 * (L + 1 + drafted) : (double)(dsv4_now_ns() - t0);
    dsv4_spec_policy_record(&sp->pol, L, conf, accepted, n_out, ns);
    if (sp->trace)
        trace_step(sp, P, index, anchor, drafted, ids, conf, L, accepted, out, n_out);
    return n_out;
}

/* ---- test-only replay proposer ---- */

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static int replay_propose(void *ctx, int64_t pos, int64_t index, int32_t anchor, int gamma,
                          int32_t *ids, float *conf, struct dsv4_err *err)
{
    (void)pos;
    (void)anchor;
    (void)err;
    const struct dsv4_replay_spec *r = ctx;
    for (int i = 0; i < gamma; i++) {
        int64_t t = index + 1 + i;
        int32_t v = t < r->n && r->cont[t] >= 0 ? r->cont[t] : 0;
        bool wrong = r->err_all || (r->agree >= 0 && (int)(mix64((uint64_t)t) % 100) >= r->agree);
        for (int k = 0; !wrong && k < r->n_err; k++)
            wrong = r->err[k] == t;
        ids[i] = wrong ? (v + 1) % r->vocab : v;
        conf[i] = r->conf;
    }
    return 0;
}

struct dsv4_proposer dsv4_replay_proposer(const struct dsv4_replay_spec *r)
{
    return (struct dsv4_proposer){ (void *)(uintptr_t)r, replay_propose };
}

/* ---- accessors for spec_io.c (the prefix cache's drafter state) ---- */

dsv4_session *dsv4_spec_session(const dsv4_spec *sp)
{
    return sp->s;
}

dsv4_drafter *dsv4_spec_drafter(const dsv4_spec *sp)
{
    return sp->d;
}

float *dsv4_spec_tap_ring(const dsv4_spec *sp, int *cap, size_t *width)
{
    *cap = sp->cap;
    *width = sp->d ? (size_t)sp->n_taps * sp->dim : 0;
    return sp->tap_ring;
}
