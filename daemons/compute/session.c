/* SPDX-License-Identifier: MIT */
/*
 * Per-sequence state and the forward driver. All state is addressed by
 * absolute position: the raw KV ring has window + max(chunk, max_rollback)
 * slots, the compressor inputs ring coff*ratio + max(chunk, max_rollback)
 * slots, compressed rows are indexed by window number. So nothing is ever
 * evicted that a position within max_rollback of the current one still
 * needs, and a rollback is a change of the position counter: exact, O(1).
 * Everything is allocated once in dsv4_session_new.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "util.h"

static void *zalloc(size_t count, size_t size)
{
    return dsv4_xcalloc(count ? count : 1, size);
}

/* zalloc counted in *bytes (common/plan.c computes the same sums from the config). */
static void *zcount(uint64_t *bytes, size_t count, size_t size)
{
    *bytes += (uint64_t)(count ? count : 1) * size;
    return zalloc(count, size);
}

int dsv4_session_new(dsv4_engine *e, const struct dsv4_session_opts *opts,
                     dsv4_session **ret, struct dsv4_err *err)
{
    const struct dsv4_config *c = &e->cfg;
    struct dsv4_session_opts o = opts ? *opts : (struct dsv4_session_opts){ 0 };
    if (o.max_ctx == 0)
        o.max_ctx = 4096;
    if (o.chunk == 0)
        o.chunk = 64;
    if (o.max_rollback == 0)
        o.max_rollback = 16;
    if (o.max_ctx < 1 || o.chunk < 1 || o.max_rollback < 1 || o.chunk > 4096)
        return dsv4_errf(err, -EINVAL, "session: max_ctx, chunk (≤ 4096) and max_rollback must be positive");

    dsv4_session *s = dsv4_xcalloc(1, sizeof(*s));
    s->e = e;
    s->max_ctx = o.max_ctx;
    s->chunk = o.chunk;
    s->max_rollback = o.max_rollback;
    s->la_layer = -1;
    int slack = DSV4_MAX(o.chunk, o.max_rollback);
    s->ring_cap = c->window + slack;
    int n = o.chunk, L = c->n_layers, D = c->head_dim;
    int max_ratio = 1, max_c = 1, max_csa_rows = 1;
    s->max_visible = 1;
    s->ls = zalloc((size_t)L, sizeof(*s->ls));
    for (int l = 0; l < L; l++) {
        const struct layer_w *lw = &e->layers[l];
        struct layer_state *st = &s->ls[l];
        st->ring = zcount(&s->state_bytes, (size_t)s->ring_cap * D, sizeof(float));
        if (lw->kind == DSV4_ATTN_WINDOW)
            continue;
        int r = lw->ratio;
        st->max_rows = (int)(o.max_ctx / r);
        st->cin_cap = lw->comp.coff * r + slack;
        st->cin = zcount(&s->state_bytes, (size_t)st->cin_cap * 2 * lw->comp.coff * lw->comp.c,
                         sizeof(float));
        st->rows = zcount(&s->state_bytes, (size_t)st->max_rows * D, sizeof(float));
        max_ratio = DSV4_MAX(max_ratio, lw->comp.coff * r);
        max_c = DSV4_MAX(max_c, lw->comp.coff * lw->comp.c);
        if (lw->kind == DSV4_ATTN_CSA) {
            st->icin = zcount(&s->state_bytes,
                              (size_t)st->cin_cap * 2 * lw->icomp.coff * lw->icomp.c,
                              sizeof(float));
            st->irows = zcount(&s->state_bytes, (size_t)st->max_rows * c->index_head_dim,
                               sizeof(float));
            max_c = DSV4_MAX(max_c, lw->icomp.coff * lw->icomp.c);
            max_csa_rows = DSV4_MAX(max_csa_rows, st->max_rows);
            s->max_visible = DSV4_MAX(s->max_visible, DSV4_MIN(c->index_topk, st->max_rows));
        } else {
            s->max_visible = DSV4_MAX(s->max_visible, st->max_rows);
        }
    }

    struct scratch *sc = &s->s;
    int HD = c->n_heads * D, K = c->n_activated_experts, E = c->n_routed_experts;
    int max_in = DSV4_MAX(DSV4_MAX(c->dim, c->q_lora_rank), DSV4_MAX(c->wo_a_in, c->moe_inter_dim));
    max_in = DSV4_MAX(max_in, c->o_groups * c->o_lora_rank);
    int nw = dsv4_pool_size(e->pool);
    sc->x = zcount(&s->scratch_bytes, (size_t)n * c->hc_dim, sizeof(float));
    sc->y = zcount(&s->scratch_bytes, (size_t)n * c->dim, sizeof(float));
    sc->a = zcount(&s->scratch_bytes, (size_t)n * c->dim, sizeof(float));
    sc->xq = zcount(&s->scratch_bytes, (size_t)n * K * max_in, sizeof(float));
    sc->post = zcount(&s->scratch_bytes, (size_t)n * c->hc_mult, sizeof(float));
    sc->comb = zcount(&s->scratch_bytes, (size_t)n * c->hc_mult * c->hc_mult, sizeof(float));
    sc->qa = zcount(&s->scratch_bytes, (size_t)n * c->q_lora_rank, sizeof(float));
    sc->qr = zcount(&s->scratch_bytes, (size_t)n * c->q_lora_rank, sizeof(float));
    sc->q = zcount(&s->scratch_bytes, (size_t)n * HD, sizeof(float));
    sc->o = zcount(&s->scratch_bytes, (size_t)n * HD, sizeof(float));
    sc->kv = zcount(&s->scratch_bytes, (size_t)n * D, sizeof(float));
    sc->low = zcount(&s->scratch_bytes, (size_t)n * c->o_groups * c->o_lora_rank,
                     sizeof(float));
    sc->out = zcount(&s->scratch_bytes, (size_t)n * c->dim, sizeof(float));
    sc->cproj = zcount(&s->scratch_bytes, (size_t)n * 2 * max_c, sizeof(float));
    sc->qi = zcount(&s->scratch_bytes, (size_t)n * c->index_n_heads * c->index_head_dim,
                    sizeof(float));
    sc->wt = zcount(&s->scratch_bytes, (size_t)n * c->index_n_heads, sizeof(float));
    sc->iscore = zcount(&s->scratch_bytes, (size_t)2 * max_csa_rows, sizeof(float));
    sc->sel = zcount(&s->scratch_bytes, (size_t)n * s->max_visible, sizeof(int));
    sc->nsel = zcount(&s->scratch_bytes, (size_t)n, sizeof(int));
    sc->vis = zcount(&s->scratch_bytes, (size_t)n * (s->max_visible + s->ring_cap),
                     sizeof(*sc->vis));
    sc->nvis = zcount(&s->scratch_bytes, (size_t)n, sizeof(int));
    sc->attn_tmp = zcount(&s->scratch_bytes, (size_t)nw * (3 * D + 64), sizeof(float));
    sc->rlogit = zcount(&s->scratch_bytes, (size_t)n * E, sizeof(float));
    sc->rsel = zcount(&s->scratch_bytes, (size_t)n * K, sizeof(int));
    sc->rw = zcount(&s->scratch_bytes, (size_t)n * K, sizeof(float));
    sc->eout = zcount(&s->scratch_bytes, (size_t)n * K * c->dim, sizeof(float));
    sc->ids = zcount(&s->scratch_bytes, (size_t)E, sizeof(int));
    sc->slot = zcount(&s->scratch_bytes, (size_t)n * K, sizeof(int));
    sc->ew = zcount(&s->scratch_bytes, (size_t)E, sizeof(*sc->ew));
    sc->sout = zcount(&s->scratch_bytes, (size_t)n * c->dim, sizeof(float));
    sc->gx = zcount(&s->scratch_bytes, (size_t)n * K * c->dim, sizeof(float));
    sc->g = zcount(&s->scratch_bytes, (size_t)n * K * c->moe_inter_dim, sizeof(float));
    sc->u = zcount(&s->scratch_bytes, (size_t)n * K * c->moe_inter_dim, sizeof(float));
    sc->pooltmp = zcount(&s->scratch_bytes, (size_t)2 * max_ratio, sizeof(float));
    *ret = s;
    return 0;
}

dsv4_session *dsv4_session_free(dsv4_session *s)
{
    if (!s)
        return NULL;
    for (int l = 0; l < s->e->cfg.n_layers; l++) {
        free(s->ls[l].ring);
        free(s->ls[l].cin);
        free(s->ls[l].rows);
        free(s->ls[l].icin);
        free(s->ls[l].irows);
    }
    free(s->ls);
    struct scratch *sc = &s->s;
    void *bufs[] = { sc->x, sc->y, sc->a, sc->xq, sc->post, sc->comb, sc->qa, sc->qr, sc->q,
                     sc->o, sc->kv, sc->low, sc->out, sc->cproj, sc->qi, sc->wt, sc->iscore,
                     sc->sel, sc->nsel, sc->vis, sc->nvis, sc->attn_tmp, sc->rlogit, sc->rsel,
                     sc->rw, sc->eout, sc->ids, sc->slot, sc->ew, sc->sout, sc->gx, sc->g,
                     sc->u, sc->pooltmp };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(bufs); i++)
        free(bufs[i]);
    free(s);
    return NULL;
}

void dsv4_session_reset(dsv4_session *s)
{
    /* Position-addressed state: positions ≥ pos are never read before being written. */
    s->pos = 0;
    s->snap = 0;
}

int64_t dsv4_session_pos(const dsv4_session *s)
{
    return s->pos;
}

void dsv4_session_bytes(const dsv4_session *s, uint64_t *state, uint64_t *scratch)
{
    *state = s->state_bytes;
    *scratch = s->scratch_bytes;
}

void dsv4_session_snapshot(dsv4_session *s)
{
    s->snap = s->pos;
}

int dsv4_session_rollback(dsv4_session *s, int64_t pos, struct dsv4_err *err)
{
    if (pos < s->snap || pos > s->pos || s->pos - pos > s->max_rollback)
        return dsv4_errf(err, -ERANGE,
                         "session: cannot roll back to %lld (position %lld, snapshot %lld, "
                         "max_rollback %d)", (long long)pos, (long long)s->pos,
                         (long long)s->snap, s->max_rollback);
    s->pos = pos;
    return 0;
}

/* hidden[r][i] = bf16(mean of the hc streams of row r) for the capture slot i of layer l */
static void capture_layer(const dsv4_engine *e, const float *x, int n, int l,
                          const struct dsv4_capture *cap, float *hidden)
{
    int d = e->cfg.dim, hc = e->cfg.hc_mult;
    for (int i = 0; i < cap->n_layers; i++) {
        if (cap->layers[i] != l)
            continue;
        for (int r = 0; r < n; r++) {
            const float *xr = x + (size_t)r * hc * d;
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

static int forward_chunk(dsv4_session *s, const int32_t *tokens, int n, float *logits,
                         enum dsv4_logits_mode mode, const struct dsv4_capture *cap,
                         float *hidden, struct dsv4_err *err)
{
    dsv4_engine *e = s->e;
    const struct dsv4_config *c = &e->cfg;
    struct scratch *sc = &s->s;
    int d = c->dim, hc = c->hc_mult;
    float eps = (float)c->norm_eps;
    for (int r = 0; r < n; r++) {
        const uint16_t *row = e->embed.w + (size_t)tokens[r] * d;
        float *x = sc->x + (size_t)r * hc * d;
        for (int j = 0; j < d; j++)
            x[j] = dsv4_bf16_to_f32(row[j]);
        for (int h = 1; h < hc; h++)
            memcpy(x + (size_t)h * d, x, (size_t)d * sizeof(float));
    }
    moe_prefetch_hashed(s, tokens, n);
    for (int l = 0; l < c->n_layers; l++) {
        const struct layer_w *lw = &e->layers[l];
        mhc_pre(e, sc->x, lw->hc_attn_fn, lw->hc_attn_base, lw->hc_attn_scale, n, sc->y,
                sc->post, sc->comb);
        rmsnorm_rows(sc->a, sc->y, lw->attn_norm, n, d, eps);
        attention_layer(s, l, sc->a, n, s->pos, sc->out);
        mhc_post(e, sc->out, sc->x, sc->post, sc->comb, n);
        mhc_pre(e, sc->x, lw->hc_ffn_fn, lw->hc_ffn_base, lw->hc_ffn_scale, n, sc->y, sc->post,
                sc->comb);
        rmsnorm_rows(sc->a, sc->y, lw->ffn_norm, n, d, eps);
        int rc = moe_layer(s, l, sc->a, tokens, n, sc->out, err);
        if (rc < 0)
            return rc;
        mhc_post(e, sc->out, sc->x, sc->post, sc->comb, n);
        if (cap)
            capture_layer(e, sc->x, n, l, cap, hidden);
        if (e->on_layer)
            e->on_layer(e->on_layer_ctx);
    }
    if (mode == DSV4_LOGITS_ALL)
        head_logits(s, sc->x, n, logits);
    else if (mode == DSV4_LOGITS_LAST)
        head_logits(s, sc->x + (size_t)(n - 1) * hc * d, 1, logits);
    s->pos += n;
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
    const struct dsv4_config *c = &s->e->cfg;
    if (cap) {
        if (cap->n_layers < 1 || !cap->hidden)
            return dsv4_errf(err, -EINVAL, "forward: empty capture");
        for (int i = 0; i < cap->n_layers; i++)
            if (cap->layers[i] < 0 || cap->layers[i] >= c->n_layers ||
                (i > 0 && cap->layers[i] <= cap->layers[i - 1]))
                return dsv4_errf(err, -EINVAL,
                                 "forward: capture layers must be ascending in 0..%d",
                                 c->n_layers - 1);
    }
    if (n < 1)
        return dsv4_errf(err, -EINVAL, "forward: no tokens");
    if (s->pos + n > s->max_ctx)
        return dsv4_errf(err, -ERANGE, "forward: position %lld + %d tokens exceeds max_ctx %lld",
                         (long long)s->pos, n, (long long)s->max_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return dsv4_errf(err, -EINVAL, "forward: token %d outside the vocabulary (%d)",
                             tokens[i], c->vocab_size);
    for (int done = 0; done < n;) {
        int m = DSV4_MIN(s->chunk, n - done);
        bool last = done + m == n;
        enum dsv4_logits_mode cm = mode == DSV4_LOGITS_ALL ? mode
                                   : last                  ? mode
                                                           : DSV4_LOGITS_NONE;
        float *lg = mode == DSV4_LOGITS_ALL ? logits + (size_t)done * c->vocab_size : logits;
        float *hid = cap ? cap->hidden + (size_t)done * cap->n_layers * c->dim : NULL;
        int rc = forward_chunk(s, tokens + done, m, lg, cm, cap, hid, err);
        if (rc < 0)
            return rc;
        done += m;
    }
    return 0;
}

void head_logits(dsv4_session *s, const float *x, int n, float *logits)
{
    dsv4_engine *e = s->e;
    const struct dsv4_config *c = &e->cfg;
    mhc_head(e, x, n, s->s.y);
    rmsnorm_rows(s->s.a, s->s.y, e->norm, n, c->dim, (float)c->norm_eps);
    linear_bf16(e, &e->head, s->s.a, n, logits);
}

