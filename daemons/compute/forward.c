/* SPDX-License-Identifier: MIT */
/*
 * The forward driver. A step runs rows of one or several sessions through every layer at
 * once: the embedding, the hyper-connections, every dense projection (attention, compressor,
 * indexer, shared expert, router, head) and the routed experts (the union of all rows' choices,
 * leased once per layer) are computed over all the step's rows, while each session's rows read
 * and write only that session's state (attention_layer's per-segment half). So on a CPU, where
 * a step costs about what reading its weights costs, several conversations pay for one read.
 *
 * Exactness: a row's result does not depend on which rows share its step. Every kernel is
 * row-independent (kernels/matvec-tile.h: each output element of a row is accumulated in one
 * fixed order over the input, whatever the number of rows or their grouping into tiles), the
 * row-wise steps (norms, RoPE, hyper-connections, attention, SwiGLU, the expert sum in
 * ascending id) touch one row at a time, and the routed experts a row sees are its own
 * choices. That is also why chunking a prefill never changes a logit (test-engine), and why a
 * batched step gives each session bitwise its solo logits (test-batch).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "util.h"

int engine_step_reserve(dsv4_engine *e, int64_t max_ctx, int chunk, struct dsv4_err *err)
{
    int rows = DSV4_MAX(chunk, e->step_rows);
    if (e->step && e->step->max_ctx >= max_ctx && e->step->chunk >= rows)
        return 0;
    struct dsv4_session_opts o = { .max_ctx = max_ctx, .chunk = rows, .max_rollback = 1 };
    if (e->step) {
        o.max_ctx = DSV4_MAX(o.max_ctx, e->step->max_ctx);
        o.chunk = DSV4_MAX(o.chunk, e->step->chunk);
    }
    dsv4_session *ns;
    int rc = session_new_scratch(e, &o, &ns, err);
    if (rc < 0)
        return rc;
    dsv4_session_free(e->step);
    e->step = ns;
    return 0;
}

uint64_t dsv4_engine_union_saved(const dsv4_engine *e)
{
    return e->union_saved;
}

uint64_t dsv4_engine_scratch_bytes(const dsv4_engine *e)
{
    return (e->step ? e->step->scratch_bytes : 0) + e->step_logits_cap * sizeof(float);
}

/* One item of a step: a segment plus what the caller wants back from it. */
struct step_item {
    struct step_seg seg;
    const int32_t *tokens;
    enum dsv4_logits_mode mode;     /* for these rows (LAST: the step holds the item's last row) */
    float *logits;
    const struct dsv4_capture *cap;
    float *hidden;                  /* the capture of these rows */
};

/* hidden[r][i] = bf16(mean of the hc streams of step row r0+r) for capture slot i of layer l */
static void capture_layer(const dsv4_engine *e, const float *x, int r0, int n, int l,
                          const struct dsv4_capture *cap, float *hidden)
{
    int d = e->cfg.dim, hc = e->cfg.hc_mult;
    for (int i = 0; i < cap->n_layers; i++) {
        if (cap->layers[i] != l)
            continue;
        for (int r = 0; r < n; r++) {
            const float *xr = x + (size_t)(r0 + r) * hc * d;
            float *h = hidden + ((size_t)r * cap->n_layers + i) * d;
            for (int k = 0; k < d; k++) {
                float acc = xr[k];
                for (int j = 1; j < hc; j++)
                    acc += xr[(size_t)j * d + k];
                h[k] = dsv4_bf16_round(acc / (float)hc);
            }
        }
    }
}

/* Logits of the rows the items want, through one head pass. */
static void step_head(dsv4_engine *e, struct step_item *it, int n_it)
{
    const struct dsv4_config *c = &e->cfg;
    dsv4_session *bs = e->step;
    size_t w = (size_t)c->hc_mult * c->dim, V = (size_t)c->vocab_size;
    if (n_it == 1) {    /* straight into the caller's buffer */
        const struct step_item *t = it;
        if (t->mode == DSV4_LOGITS_ALL)
            head_logits(bs, bs->s.x, t->seg.n, t->logits);
        else if (t->mode == DSV4_LOGITS_LAST)
            head_logits(bs, bs->s.x + (size_t)(t->seg.n - 1) * w, 1, t->logits);
        return;
    }
    /* compact the wanted rows to the front of x (ascending, so memmove never overwrites a
     * row still to be moved), one head pass, then hand each item its rows */
    int k = 0;
    for (int i = 0; i < n_it; i++) {
        const struct step_item *t = &it[i];
        int first = t->mode == DSV4_LOGITS_ALL ? 0 : t->seg.n - 1;
        if (t->mode == DSV4_LOGITS_NONE)
            continue;
        for (int r = first; r < t->seg.n; r++, k++)
            if (k != t->seg.r0 + r)
                memmove(bs->s.x + (size_t)k * w, bs->s.x + (size_t)(t->seg.r0 + r) * w,
                        w * sizeof(float));
    }
    if (k == 0)
        return;
    if ((size_t)k * V > e->step_logits_cap) {
        free(e->step_logits);
        e->step_logits_cap = (size_t)k * V;
        e->step_logits = dsv4_xmalloc(e->step_logits_cap * sizeof(float));
    }
    head_logits(bs, bs->s.x, k, e->step_logits);
    k = 0;
    for (int i = 0; i < n_it; i++) {
        const struct step_item *t = &it[i];
        if (t->mode == DSV4_LOGITS_NONE)
            continue;
        int m = t->mode == DSV4_LOGITS_ALL ? t->seg.n : 1;
        memcpy(t->logits, e->step_logits + (size_t)k * V, (size_t)m * V * sizeof(float));
        k += m;
    }
}

/* One step: items' rows (each ≤ its session's chunk, all ≤ the step scratch's rows). */
static int forward_step(dsv4_engine *e, struct step_item *it, int n_it, struct dsv4_err *err)
{
    const struct dsv4_config *c = &e->cfg;
    dsv4_session *bs = e->step;
    struct scratch *sc = &bs->s;
    int d = c->dim, hc = c->hc_mult;
    float eps = (float)c->norm_eps;
    struct step_seg seg[DSV4_MAX_STEP_SESSIONS];
    int n = 0;
    for (int i = 0; i < n_it; i++) {
        it[i].seg.r0 = n;
        seg[i] = it[i].seg;
        for (int r = 0; r < it[i].seg.n; r++, n++) {
            int32_t tok = it[i].tokens[r];
            const uint16_t *row = e->embed.w + (size_t)tok * d;
            float *x = sc->x + (size_t)n * hc * d;
            for (int j = 0; j < d; j++)
                x[j] = dsv4_bf16_to_f32(row[j]);
            for (int h = 1; h < hc; h++)
                memcpy(x + (size_t)h * d, x, (size_t)d * sizeof(float));
            sc->rpos[n] = it[i].seg.pos0 + r;
            sc->rtok[n] = tok;
        }
    }
    bs->step_seg = seg;
    bs->n_step_seg = n_it;
    moe_prefetch_hashed(bs, sc->rtok, n);
    for (int l = 0; l < c->n_layers; l++) {
        const struct layer_w *lw = &e->layers[l];
        mhc_pre(e, sc->x, lw->hc_attn_fn, lw->hc_attn_base, lw->hc_attn_scale, n, sc->y,
                sc->post, sc->comb);
        rmsnorm_rows(sc->a, sc->y, lw->attn_norm, n, d, eps);
        attention_layer(bs, seg, n_it, l, sc->a, n, sc->out);
        mhc_post(e, sc->out, sc->x, sc->post, sc->comb, n);
        mhc_pre(e, sc->x, lw->hc_ffn_fn, lw->hc_ffn_base, lw->hc_ffn_scale, n, sc->y, sc->post,
                sc->comb);
        rmsnorm_rows(sc->a, sc->y, lw->ffn_norm, n, d, eps);
        int rc = moe_layer(bs, l, sc->a, sc->rtok, n, sc->out, err);
        if (rc < 0)
            return rc;
        mhc_post(e, sc->out, sc->x, sc->post, sc->comb, n);
        for (int i = 0; i < n_it; i++)
            if (it[i].cap)
                capture_layer(e, sc->x, it[i].seg.r0, it[i].seg.n, l, it[i].cap, it[i].hidden);
        if (e->on_layer)
            e->on_layer(e->on_layer_ctx);
    }
    step_head(e, it, n_it);
    for (int i = 0; i < n_it; i++)
        it[i].seg.s->pos += it[i].seg.n;
    return 0;
}

static int check_capture(const struct dsv4_config *c, const struct dsv4_capture *cap,
                         struct dsv4_err *err)
{
    if (cap->n_layers < 1 || !cap->hidden)
        return dsv4_errf(err, -EINVAL, "forward: empty capture");
    for (int i = 0; i < cap->n_layers; i++)
        if (cap->layers[i] < 0 || cap->layers[i] >= c->n_layers ||
            (i > 0 && cap->layers[i] <= cap->layers[i - 1]))
            return dsv4_errf(err, -EINVAL, "forward: capture layers must be ascending in 0..%d",
                             c->n_layers - 1);
    return 0;
}

int dsv4_forward_check(const dsv4_session *s, const int32_t *tokens, int n,
                       struct dsv4_err *err)
{
    const struct dsv4_config *c = &s->e->cfg;
    if (s->scratch_only)
        return dsv4_errf(err, -EINVAL, "forward: not a sequence session");
    if (n < 1)
        return dsv4_errf(err, -EINVAL, "forward: no tokens");
    if (n > s->max_ctx - s->pos)
        return dsv4_errf(err, -ERANGE, "forward: position %lld + %d tokens exceeds max_ctx %lld",
                         (long long)s->pos, n, (long long)s->max_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return dsv4_errf(err, -EINVAL, "forward: token %d outside the vocabulary (%d)",
                             tokens[i], c->vocab_size);
    return 0;
}

int dsv4_session_forward(dsv4_session *s, const int32_t *tokens, int n,
                         enum dsv4_logits_mode mode, float *logits, struct dsv4_err *err)
{
    return dsv4_session_forward_capture(s, tokens, n, mode, logits, NULL, err);
}

int dsv4_session_forward_capture(dsv4_session *s, const int32_t *tokens, int n,
                                 enum dsv4_logits_mode mode, float *logits,
                                 const struct dsv4_capture *cap, struct dsv4_err *err)
{
    dsv4_engine *e = s->e;
    const struct dsv4_config *c = &e->cfg;
    int rc;
    if ((cap && (rc = check_capture(c, cap, err)) < 0) ||
        (rc = dsv4_forward_check(s, tokens, n, err)) < 0)
        return rc;
    for (int done = 0; done < n;) {
        int m = DSV4_MIN(s->chunk, n - done);
        bool last = done + m == n;
        struct step_item t = {
            .seg = { s, 0, m, s->pos },
            .tokens = tokens + done,
            .mode = mode == DSV4_LOGITS_ALL ? mode : last ? mode : DSV4_LOGITS_NONE,
            .logits = mode == DSV4_LOGITS_ALL ? logits + (size_t)done * c->vocab_size : logits,
            .cap = cap,
            .hidden = cap ? cap->hidden + (size_t)done * cap->n_layers * c->dim : NULL,
        };
        if ((rc = forward_step(e, &t, 1, err)) < 0)
            return rc;
        done += m;
    }
    return 0;
}

int dsv4_engine_forward(dsv4_engine *e, const struct dsv4_forward_item *items, int n_items,
                        struct dsv4_err *err)
{
    const struct dsv4_config *c = &e->cfg;
    if (n_items < 1 || n_items > DSV4_MAX_STEP_SESSIONS)
        return dsv4_errf(err, -EINVAL, "forward: %d sessions in one call (1..%d)", n_items,
                         DSV4_MAX_STEP_SESSIONS);
    int order[DSV4_MAX_STEP_SESSIONS], done[DSV4_MAX_STEP_SESSIONS] = { 0 };
    for (int i = 0; i < n_items; i++) {
        const struct dsv4_forward_item *x = &items[i];
        int rc;
        if (x->s->e != e)
            return dsv4_errf(err, -EINVAL, "forward: item %d: a session of another engine", i);
        if ((rc = dsv4_forward_check(x->s, x->tokens, x->n, err)) < 0 ||
            (x->cap && (rc = check_capture(c, x->cap, err)) < 0)) {
            char why[sizeof(err->msg)];
            snprintf(why, sizeof(why), "%s", err->msg);
            return dsv4_errf(err, rc, "item %d: %s", i, why);
        }
        for (int j = 0; j < i; j++)
            if (items[j].s == x->s)
                return dsv4_errf(err, -EINVAL, "forward: items %d and %d name one session", j, i);
        /* shortest first: decode rows fill a step together before a long prefill does */
        int k = i;
        for (; k > 0 && items[order[k - 1]].n > x->n; k--)
            order[k] = order[k - 1];
        order[k] = i;
    }
    for (;;) {
        struct step_item t[DSV4_MAX_STEP_SESSIONS];
        int n_it = 0, room = e->step_rows;      /* ≤ the scratch's rows */
        for (int k = 0; k < n_items && room > 0; k++) {
            int i = order[k];
            const struct dsv4_forward_item *x = &items[i];
            int m = DSV4_MIN(DSV4_MIN(x->n - done[i], x->s->chunk), room);
            if (m <= 0)
                continue;
            bool last = done[i] + m == x->n;
            t[n_it++] = (struct step_item){
                .seg = { x->s, 0, m, x->s->pos },
                .tokens = x->tokens + done[i],
                .mode = x->mode == DSV4_LOGITS_ALL ? x->mode : last ? x->mode : DSV4_LOGITS_NONE,
                .logits = x->mode == DSV4_LOGITS_ALL ? x->logits + (size_t)done[i] * c->vocab_size
                                                     : x->logits,
                .cap = x->cap,
                .hidden = x->cap ? x->cap->hidden : NULL,
            };
            room -= m;
        }
        if (n_it == 0)
            return 0;
        int rc = forward_step(e, t, n_it, err);
        if (rc < 0)
            return rc;
        for (int j = 0; j < n_it; j++) {
            const struct dsv4_forward_item *x = NULL;
            int i = 0;
            for (; i < n_items; i++)
                if (items[i].s == t[j].seg.s) {
                    x = &items[i];
                    break;
                }
            if (x->on_chunk)
                x->on_chunk(x->ctx, t[j].seg.pos0, t[j].seg.n);
            done[i] += t[j].seg.n;
        }
    }
}
