/* SPDX-License-Identifier: MIT */
/*
 * DSpark drafter (dspark.h): weights of mtp.0..S-1, the per-sequence context ring and the
 * block forward. Rounding points follow tools/reference/dspark_ref.py: main_x =
 * main_norm(main_proj(taps)); context rows = the window-KV path of each stage at their own
 * positions; the block runs through the stages with the target's mHC, attention and MoE
 * code; the head side (hc_head, norm, shared LM head, Markov bias, confidence) is fp32 over
 * bf16 values. The scratch of the block forward is a private scratch-only session (no
 * target-layer state: that was ≈ 14 MB of unused rings per Flash session).
 */
#include "dspark.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "util.h"

struct dsv4_drafter {
    dsv4_engine *e;
    const struct dspark_w *w;
    dsv4_session *scr;      /* scratch holder: rows ≤ chunk */
    int chunk, W, D;
    int64_t n;              /* committed positions */
    int64_t valid_from;     /* rows of positions valid_from..n-1 are in the ring */
    float *ring;            /* [stages][W][D], slot = pos mod W */
    float *x;               /* [γ][hc*dim] block streams */
    float *mx;              /* [chunk][dim] main_x rows */
    float *xq;              /* [chunk][n_taps*dim] quantised main_proj input */
    float *h, *hn;          /* [γ][dim] pre-norm hc_head rows, normed */
    float *u;               /* [γ][vocab] base logits */
    float *bias;            /* [vocab] */
    float *cin;             /* [dim+rank] confidence input */
    int32_t *ids;           /* [γ] block ids */
    uint64_t bytes;         /* all of the above and the scratch session (the plan's count) */
};

int dsv4_drafter_new(dsv4_engine *e, dsv4_drafter **ret, struct dsv4_err *err)
{
    if (!e->dspark)
        return dsv4_errf(err, -ENOENT, "dspark: the engine was opened without its drafter "
                         "(struct dsv4_engine_opts .dspark)");
    const struct dsv4_config *c = &e->cfg;
    const struct dspark_w *w = e->dspark;
    dsv4_drafter *d = dsv4_xcalloc(1, sizeof(*d));
    d->e = e;
    d->w = w;
    d->chunk = DSV4_DRAFTER_CHUNK(c); /* (the memory plan counts this: session_layout.h) */
    d->W = c->window;
    d->D = c->head_dim;
    struct dsv4_session_opts so = { .max_ctx = d->chunk, .chunk = d->chunk, .max_rollback = 1 };
    int rc = session_new_scratch(e, &so, &d->scr, err);
    if (rc < 0) {
        free(d);
        return rc;
    }
    int g = w->block, dim = c->dim;
    uint64_t *b = &d->bytes;
    *b = d->scr->scratch_bytes;
#define DALLOC(count, size) (*b += (uint64_t)(count) * (size), dsv4_xcalloc((count), (size)))
    d->ring = DALLOC((size_t)w->stages * d->W * d->D, sizeof(float));
    d->x = DALLOC((size_t)g * c->hc_dim, sizeof(float));
    d->mx = DALLOC((size_t)d->chunk * dim, sizeof(float));
    d->xq = DALLOC((size_t)d->chunk * w->n_taps * dim, sizeof(float));
    d->h = DALLOC((size_t)g * dim, sizeof(float));
    d->hn = DALLOC((size_t)g * dim, sizeof(float));
    d->u = DALLOC((size_t)g * c->vocab_size, sizeof(float));
    d->bias = DALLOC((size_t)c->vocab_size, sizeof(float));
    d->cin = DALLOC((size_t)(dim + w->rank), sizeof(float));
    d->ids = DALLOC((size_t)g, sizeof(int32_t));
#undef DALLOC
    *ret = d;
    return 0;
}

dsv4_drafter *dsv4_drafter_free(dsv4_drafter *d)
{
    if (!d)
        return NULL;
    dsv4_session_free(d->scr);
    void *bufs[] = { d->ring, d->x, d->mx, d->xq, d->h, d->hn, d->u, d->bias, d->cin, d->ids };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(bufs); i++)
        free(bufs[i]);
    free(d);
    return NULL;
}

void dsv4_drafter_reset(dsv4_drafter *d)
{
    d->n = 0;   /* slots are written before they become visible */
    d->valid_from = 0;
}

int dsv4_drafter_skip_to(dsv4_drafter *d, int64_t pos, struct dsv4_err *err)
{
    if (pos < d->n)
        return dsv4_errf(err, -EINVAL, "dspark: skip back to %lld, drafter holds %lld",
                         (long long)pos, (long long)d->n);
    if (pos > d->n)
        d->valid_from = pos;
    d->n = pos;
    return 0;
}

uint64_t dsv4_drafter_bytes(const dsv4_drafter *d)
{
    return d->bytes;
}

int dsv4_drafter_window(const dsv4_drafter *d)
{
    return d->W;
}

int64_t dsv4_drafter_pos(const dsv4_drafter *d)
{
    return d->n;
}

uint64_t dsv4_drafter_state_bytes(const dsv4_drafter *d)
{
    uint64_t state, scratch;
    dsv4_session_bytes(d->scr, &state, &scratch);
    return state + (uint64_t)d->w->stages * d->W * d->D * sizeof(float);
}

int dsv4_drafter_block(const dsv4_drafter *d)
{
    return d->w->block;
}

const int *dsv4_drafter_taps(const dsv4_drafter *d, int *n_taps)
{
    *n_taps = d->w->n_taps;
    return d->w->taps;
}

int dsv4_drafter_commit(dsv4_drafter *d, const float *hidden, int n, int64_t pos,
                        struct dsv4_err *err)
{
    dsv4_engine *e = d->e;
    const struct dsv4_config *c = &e->cfg;
    const struct dspark_w *w = d->w;
    if (pos != d->n || n < 0)
        return dsv4_errf(err, -EINVAL, "dspark: commit of %d rows at %lld, drafter holds %lld",
                         n, (long long)pos, (long long)d->n);
    size_t in = (size_t)w->n_taps * c->dim;
    for (int done = 0; done < n;) {
        int m = DSV4_MIN(d->chunk, n - done);
        int64_t p0 = pos + done;
        qlinear_fp8(e, &w->main_proj, hidden + (size_t)done * in, m, d->xq, d->mx);
        rmsnorm_rows(d->mx, d->mx, w->main_norm, m, c->dim, (float)c->norm_eps);
        float *kv = d->scr->s.kv;
        for (int r = 0; r < m; r++)
            d->scr->s.rpos[r] = p0 + r;
        for (int s = 0; s < w->stages; s++) {
            attention_kv_rows(d->scr, &w->st[s], &e->rope_plain, d->mx, m, kv);
            float *ring = d->ring + (size_t)s * d->W * d->D;
            for (int r = 0; r < m; r++)
                memcpy(ring + (size_t)((p0 + r) % d->W) * d->D, kv + (size_t)r * d->D,
                       (size_t)d->D * sizeof(float));
        }
        done += m;
    }
    d->n += n;
    return 0;
}

int dsv4_drafter_draft(dsv4_drafter *d, int32_t anchor, const int32_t *chain, int32_t *ids,
                       float *conf_logit, float *logits, struct dsv4_err *err)
{
    dsv4_engine *e = d->e;
    const struct dsv4_config *c = &e->cfg;
    const struct dspark_w *w = d->w;
    dsv4_session *scr = d->scr;
    struct scratch *sc = &scr->s;
    int g = w->block, dim = c->dim, hc = c->hc_mult, V = c->vocab_size;
    float eps = (float)c->norm_eps;
    if (d->n < 1)
        return dsv4_errf(err, -EINVAL, "dspark: drafting needs at least one committed row");
    if (d->n - DSV4_MIN((int64_t)d->W, d->n) < d->valid_from)
        return dsv4_errf(err, -EINVAL, "dspark: rows before %lld were skipped; drafting at %lld "
                         "needs the last %d", (long long)d->valid_from, (long long)d->n, d->W);
    if (anchor < 0 || anchor >= V)
        return dsv4_errf(err, -EINVAL, "dspark: anchor %d outside the vocabulary (%d)", anchor,
                         V);
    int64_t P = d->n;
    d->ids[0] = anchor;
    for (int i = 1; i < g; i++)
        d->ids[i] = w->noise;
    for (int r = 0; r < g; r++) {
        const uint16_t *row = e->embed.w + (size_t)d->ids[r] * dim;
        float *x = d->x + (size_t)r * hc * dim;
        for (int j = 0; j < dim; j++)
            x[j] = dsv4_bf16_to_f32(row[j]);
        for (int h = 1; h < hc; h++)
            memcpy(x + (size_t)h * dim, x, (size_t)dim * sizeof(float));
    }
    int nctx = (int)DSV4_MIN((int64_t)d->W, P);
    for (int s = 0; s < w->stages; s++) {
        const struct layer_w *lw = &w->st[s];
        mhc_pre(e, d->x, lw->hc_attn_fn, lw->hc_attn_base, lw->hc_attn_scale, g, sc->y, sc->post,
                sc->comb);
        rmsnorm_rows(sc->a, sc->y, lw->attn_norm, g, dim, eps);
        attention_dspark(scr, lw, d->ring + (size_t)s * d->W * d->D, nctx, sc->a, g, P, sc->out);
        mhc_post(e, sc->out, d->x, sc->post, sc->comb, g);
        mhc_pre(e, d->x, lw->hc_ffn_fn, lw->hc_ffn_base, lw->hc_ffn_scale, g, sc->y, sc->post,
                sc->comb);
        rmsnorm_rows(sc->a, sc->y, lw->ffn_norm, g, dim, eps);
        int rc = moe_block(scr, lw, &w->experts, s, sc->a, d->ids, g, sc->out, err);
        if (rc < 0)
            return rc;
        mhc_post(e, sc->out, d->x, sc->post, sc->comb, g);
    }
    mhc_head_w(e, w->hc_head_fn, w->hc_head_base, w->hc_head_scale, d->x, g, d->h);
    rmsnorm_rows(d->hn, d->h, w->norm, g, dim, eps);
    linear_bf16(e, &e->head, d->hn, g, d->u);   /* one head pass for the whole block */

    int32_t prev = anchor;
    float *emb = d->cin + dim;
    for (int i = 0; i < g; i++) {
        if (i > 0 && chain)
            prev = chain[i - 1];
        const uint16_t *w1 = w->markov_w1.w + (size_t)prev * w->rank;
        for (int k = 0; k < w->rank; k++)
            emb[k] = dsv4_bf16_to_f32(w1[k]);
        linear_bf16(e, &w->markov_w2, emb, 1, d->bias);
        float *z = d->u + (size_t)i * V;
        for (int v = 0; v < V; v++)
            z[v] += d->bias[v];
        memcpy(d->cin, d->h + (size_t)i * dim, (size_t)dim * sizeof(float));
        float cl;
        linear_bf16(e, &w->conf, d->cin, 1, &cl);
        int32_t best = dsv4_argmax(z, V);
        if (ids)
            ids[i] = best;
        if (conf_logit)
            conf_logit[i] = cl;
        if (logits)
            memcpy(logits + (size_t)i * V, z, (size_t)V * sizeof(float));
        prev = best;
    }
    return 0;
}
