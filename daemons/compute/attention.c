/* SPDX-License-Identifier: MIT */
/*
 * Attention block of every layer kind (spec §9, §12): LoRA query with the
 * per-head unweighted norm, shared K=V head with FP8 QDQ of the nope dims,
 * the raw window ring, compressed rows (HCA: all visible; CSA: the indexer's
 * choice), sink attention with bf16 probabilities, inverse RoPE and the
 * grouped low-rank output projection. Rows of a chunk are processed
 * together; every query only sees positions ≤ its own.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "internal.h"

/* Per-head q norm in bf16 arithmetic (squares, mean, rsqrt, product). */
static void head_norm_bf16(float *q, int d, float eps)
{
    float ss = 0.0f;
    for (int i = 0; i < d; i++)
        ss += dsv4_bf16_round(q[i] * q[i]);
    float mean = dsv4_bf16_round(ss / (float)d);
    float rs = dsv4_bf16_round(1.0f / sqrtf(dsv4_bf16_round(mean + eps)));
    for (int i = 0; i < d; i++)
        q[i] = dsv4_bf16_round(q[i] * rs);
}

struct attn_job {
    dsv4_session *s;
    const float *sink;
    int n;
    unsigned long unit;         /* (row, head) pairs per grab */
    _Atomic unsigned long next; /* the first pair no worker has taken */
};

/*
 * Heads h0..h1-1 of query row r: online softmax over the index list in blocks of 64 entries
 * (NULL = empty slot). P is rounded to bf16 against the running maximum of its block
 * (errata 4) for P·V, the denominator keeps the fp32 values, and the sink joins the
 * denominator at the end. Block sums are carried in double and rounded once, like the
 * reference's. Every head's arithmetic is its own (the heads of a row only share the list),
 * so the result does not depend on how heads are grouped: the scores and P·V of
 * DSV4_ATTN_HG heads at a time go through the heads kernels, which load each key once for
 * all of them. Packed rows (the session state, s->vis_packed) are unpacked once per block
 * for all the group's heads: the same fp32 rows, bit for bit.
 */
static void attend_heads(dsv4_session *s, int r, int h0, int h1, const float *sink, float *tmp)
{
    const struct dsv4_config *c = &s->e->cfg;
    int D = c->head_dim, nv = s->s.nvis[r], nh = h1 - h0;
    const void **vis = s->s.vis + (size_t)r * vis_stride(s);
    double *pv = (double *)(void *)tmp, *dots = pv + (size_t)DSV4_ATTN_HG * D;
    float *pf = (float *)(void *)(dots + DSV4_ATTN_HG * 64), *blk = pf + DSV4_ATTN_HG * 64;
    float *acc = blk + (size_t)64 * D, *m = acc + (size_t)nh * D, *l = m + nh;
    const float *kk[64];
    float scale = (float)c->attn_scale;
    const float *q0 = s->s.q + ((size_t)r * c->n_heads + h0) * D;
    memset(acc, 0, (size_t)nh * D * sizeof(float));
    for (int i = 0; i < nh; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    for (int b0 = 0; b0 < nv; b0 += 64) {
        int b1 = DSV4_MIN(nv, b0 + 64), nk = 0;
        /* the block's rows that exist, in list order */
        for (int j = b0; j < b1; j++) {
            const float *k = vis[j];
            if (!k)
                continue;
            if (s->vis_packed) {
                kv_row_unpack(c, vis[j], blk + (size_t)nk * D);
                k = blk + (size_t)nk * D;
            }
            kk[nk++] = k;
        }
        if (nk == 0)
            continue;
        for (int g0 = 0; g0 < nh; g0 += DSV4_ATTN_HG) {
            int ng = DSV4_MIN(DSV4_ATTN_HG, nh - g0);
            bool live[DSV4_ATTN_HG];
            double bsum[DSV4_ATTN_HG];
            float alpha[DSV4_ATTN_HG];
            dsv4_dot_f64_heads(q0 + (size_t)g0 * D, (size_t)D, (size_t)ng, kk, (size_t)nk,
                               (size_t)D, dots);
            for (int g = 0; g < ng; g++) {
                int hi = g0 + g;
                float *sc = pf + (size_t)g * nk, bm = m[hi];
                for (int t = 0; t < nk; t++) {
                    sc[t] = (float)dots[(size_t)g * nk + t] * scale;
                    bm = fmaxf(bm, sc[t]);
                }
                live[g] = bm != -INFINITY;
                if (!live[g]) {
                    memset(sc, 0, (size_t)nk * sizeof(float));
                    continue;
                }
                alpha[g] = (float)exp((double)(m[hi] - bm));
                bsum[g] = 0.0;
                for (int t = 0; t < nk; t++) {
                    float p = (float)exp((double)(sc[t] - bm));
                    bsum[g] += p;
                    sc[t] = dsv4_bf16_round(p);
                }
                m[hi] = bm;
            }
            dsv4_pv_f64_heads(pf, (size_t)nk, (size_t)ng, kk, (size_t)nk, (size_t)D, pv,
                              (size_t)D);
            for (int g = 0; g < ng; g++) {
                if (!live[g])
                    continue;
                int hi = g0 + g;
                float *ah = acc + (size_t)hi * D;
                const double *pg = pv + (size_t)g * D;
                l[hi] = l[hi] * alpha[g] + (float)bsum[g];
                for (int k = 0; k < D; k++)
                    ah[k] = ah[k] * alpha[g] + (float)pg[k];
            }
        }
    }
    for (int hi = 0; hi < nh; hi++) {
        int h = h0 + hi;
        float den = l[hi] + (float)exp((double)(sink[h] - m[hi]));
        float *o = s->s.o + ((size_t)r * c->n_heads + h) * D;
        const float *ah = acc + (size_t)hi * D;
        for (int k = 0; k < D; k++)
            o[k] = dsv4_bf16_round(ah[k] / den);
    }
}

/* (row, head) pairs taken a unit at a time from a shared counter, the heads of one row
 * taken together: a row's work grows with its visible positions (later rows of a prompt see
 * more), so equal fixed shares had left one worker waiting for the other (a quarter of the
 * job's time in a 512-row prefill step, 2026-12-05) */
static void attn_worker(void *ctx, int worker, int n_workers)
{
    struct attn_job *j = ctx;
    dsv4_session *s = j->s;
    const unsigned long H = (unsigned long)s->e->cfg.n_heads, total = (unsigned long)j->n * H;
    float *tmp = s->s.attn_tmp + (size_t)worker * DSV4_ATTN_TMP(&s->e->cfg);
    for (;;) {
        const unsigned long b = atomic_fetch_add_explicit(&j->next, j->unit, memory_order_relaxed);
        if (b >= total)
            return;
        const unsigned long en = DSV4_MIN(total, b + j->unit);
        for (unsigned long i = b; i < en;) {
            int r = (int)(i / H), h0 = (int)(i % H);
            int h1 = (int)DSV4_MIN(H, h0 + (en - i));
            attend_heads(s, r, h0, h1, j->sink, tmp);
            i += (unsigned long)(h1 - h0);
        }
    }
}

/*
 * Index list of row r (position t, session `st`'s state) in the official decode layout:
 * `window` slots oldest first (empty slots, NULL, at the end until the window has filled),
 * then the compressed rows (HCA ascending; CSA in the indexer's order). The list lives in
 * the scratch holder bs.
 */
static void build_visible(dsv4_session *bs, const dsv4_session *st_s, int layer, int r, int64_t t)
{
    const struct dsv4_config *c = &bs->e->cfg;
    const struct layer_w *lw = &bs->e->layers[layer];
    const struct layer_state *st = &st_s->ls[layer];
    const void **vis = bs->s.vis + (size_t)r * vis_stride(bs);
    int nv = 0;
    size_t rb = dsv4_kv_row_bytes(c);
    int64_t p0 = t - c->window + 1 < 0 ? 0 : t - c->window + 1;
    for (int64_t p = p0; p < p0 + c->window; p++)
        vis[nv++] = p <= t ? st->ring + (size_t)(p % st_s->ring_cap) * rb : NULL;
    if (lw->kind == DSV4_ATTN_HCA) {
        int64_t nrow = (t + 1) / lw->ratio;
        for (int64_t w = 0; w < nrow; w++)
            vis[nv++] = st->rows + (size_t)w * rb;
    } else if (lw->kind == DSV4_ATTN_CSA) {
        const int *sel = bs->s.sel + (size_t)r * bs->max_visible;
        for (int i = 0; i < bs->s.nsel[r]; i++)
            vis[nv++] = sel[i] < 0 ? NULL : st->rows + (size_t)sel[i] * rb;
    }
    bs->s.nvis[r] = nv;
}

/* q rows: LoRA query, q norm, per-head norm, RoPE at sc->rpos (into sc->q; sc->qr kept). */
struct q_heads_job {
    const struct dsv4_config *c;
    const struct rope_table *rope;
    float *q;
    const int64_t *rpos;
};

/* every head of rows [b, e): the per-head norm, then RoPE */
static void q_heads_range(void *ctx, unsigned long b, unsigned long e)
{
    const struct q_heads_job *j = ctx;
    const int H = j->c->n_heads, D = j->c->head_dim, R = j->c->rope_head_dim;
    for (unsigned long r = b; r < e; r++) {
        float *qr = j->q + (size_t)r * H * D;
        for (int h = 0; h < H; h++)
            head_norm_bf16(qr + (size_t)h * D, D, (float)j->c->norm_eps);
        rope_row_heads(j->rope, R / 2, qr + D - R, H, (size_t)D, j->rpos[r], false);
    }
}

static void project_q(dsv4_session *s, const struct layer_w *lw, const struct rope_table *rope,
                      const float *a, int n)
{
    dsv4_engine *e = s->e;
    const struct dsv4_config *c = &e->cfg;
    struct scratch *sc = &s->s;
    qlinear_fp8(e, &lw->wq_a, a, n, sc->xq, sc->qa);
    rmsnorm_rows(sc->qr, sc->qa, lw->q_norm, n, c->q_lora_rank, (float)c->norm_eps);
    qlinear_fp8(e, &lw->wq_b, sc->qr, n, sc->xq, sc->q);
    struct q_heads_job j = {c, rope, sc->q, sc->rpos};
    engine_rows(e, n, (size_t)c->n_heads * c->head_dim, q_heads_range, &j);
}

void attention_kv_rows(dsv4_session *s, const struct layer_w *lw, const struct rope_table *rope,
                       const float *a, int n, float *kv)
{
    dsv4_engine *e = s->e;
    const struct dsv4_config *c = &e->cfg;
    int D = c->head_dim, R = c->rope_head_dim;
    qlinear_fp8(e, &lw->wkv, a, n, s->s.xq, kv);
    rmsnorm_rows(kv, kv, lw->kv_norm, n, D, (float)c->norm_eps);
    for (int r = 0; r < n; r++) {
        float *k = kv + (size_t)r * D;
        rope_apply(rope, R / 2, k + D - R, s->s.rpos[r], false);
        dsv4_fp8_qdq(k, (size_t)(D - R), 64);
    }
}

/* Sink attention over the visible lists, inverse RoPE, grouped output LoRA. */
static void attend_output(dsv4_session *s, const struct layer_w *lw,
                          const struct rope_table *rope, int n, float *out)
{
    dsv4_engine *e = s->e;
    const struct dsv4_config *c = &e->cfg;
    struct scratch *sc = &s->s;
    int H = c->n_heads, D = c->head_dim, R = c->rope_head_dim;
    const int nw = dsv4_pool_size(e->pool);
    /* about 16 grabs per worker: fine enough to even out, few enough to cost nothing */
    struct attn_job job = {s, lw->attn_sink, n,
                           DSV4_MAX(1ul, (unsigned long)n * H / (16ul * (unsigned long)nw)), 0};
    uint64_t work = 0;
    for (int r = 0; r < n; r++)
        work += (uint64_t)sc->nvis[r] * H * D;
    if (dsv4_pool_size(e->pool) == 1 || work < (1u << 20))
        attn_worker(&job, 0, 1);
    else
        dsv4_pool_run(e->pool, attn_worker, &job);
    rope_heads(e, rope, R / 2, sc->o + D - R, n, H, (size_t)D, sc->rpos, true);

    /* grouped output LoRA: group g reads heads g*H/G.. as one wo_a_in vector; no act-quant */
    int G = c->o_groups, olr = c->o_lora_rank, in = c->wo_a_in;
    for (int g = 0; g < G; g++) {
        for (int r = 0; r < n; r++)
            memcpy(sc->xq + (size_t)r * in, sc->o + (size_t)r * H * D + (size_t)g * in,
                   (size_t)in * sizeof(float));
        linear_fp8_range(e, &lw->wo_a, (uint32_t)(g * olr), (uint32_t)((g + 1) * olr), sc->xq, n,
                         sc->low, (size_t)G * olr);
    }
    round_rows(e, sc->low, n, (size_t)G * olr);
    qlinear_fp8(e, &lw->wo_b, sc->low, n, sc->xq, out);
}

void attention_layer(dsv4_session *bs, const struct step_seg *seg, int n_seg, int layer,
                     const float *a, int n, float *out)
{
    dsv4_engine *e = bs->e;
    const struct dsv4_config *c = &e->cfg;
    const struct layer_w *lw = &e->layers[layer];
    struct scratch *sc = &bs->s;
    int D = c->head_dim;
    const struct rope_table *rope = lw->kind == DSV4_ATTN_WINDOW ? &e->rope_plain : &e->rope_comp;

    /* the projections run over every row of every session at once (weights read once) */
    project_q(bs, lw, rope, a, n);
    attention_kv_rows(bs, lw, rope, a, n, sc->kv);
    size_t rb = dsv4_kv_row_bytes(c);
    for (int i = 0; i < n_seg; i++) {
        const struct step_seg *g = &seg[i];
        struct layer_state *st = &g->s->ls[layer];
        for (int r = 0; r < g->n; r++)
            kv_row_pack(c, sc->kv + (size_t)(g->r0 + r) * D,
                        st->ring + (size_t)((g->pos0 + r) % g->s->ring_cap) * rb, sc->krow);
    }
    if (lw->kind == DSV4_ATTN_CSA) {
        compressor_project(bs, &lw->icomp, a, n);
        for (int i = 0; i < n_seg; i++) {
            struct layer_state *st = &seg[i].s->ls[layer];
            compressor_absorb(bs, &seg[i], &lw->icomp, st->icin, st->cin_cap, st->irows, true, n,
                              rope);
        }
        indexer_project(bs, layer, a, sc->qr, n);
        for (int i = 0; i < n_seg; i++)
            indexer_score(bs, &seg[i], layer);
    }
    if (lw->kind != DSV4_ATTN_WINDOW) {
        compressor_project(bs, &lw->comp, a, n);
        for (int i = 0; i < n_seg; i++) {
            struct layer_state *st = &seg[i].s->ls[layer];
            compressor_absorb(bs, &seg[i], &lw->comp, st->cin, st->cin_cap, st->rows, false, n,
                              rope);
        }
    }
    for (int i = 0; i < n_seg; i++)
        for (int r = 0; r < seg[i].n; r++)
            build_visible(bs, seg[i].s, layer, seg[i].r0 + r, seg[i].pos0 + r);
    bs->vis_packed = true;
    attend_output(bs, lw, rope, n, out);
}

void attention_dspark(dsv4_session *s, const struct layer_w *lw, const float *ring, int nctx,
                      const float *a, int n, int64_t pos0, float *out)
{
    dsv4_engine *e = s->e;
    struct scratch *sc = &s->s;
    int D = e->cfg.head_dim;
    for (int r = 0; r < n; r++)
        sc->rpos[r] = pos0 + r;
    project_q(s, lw, &e->rope_plain, a, n);
    attention_kv_rows(s, lw, &e->rope_plain, a, n, sc->kv);
    /* every block query sees the committed ring slots in slot order, then the whole block */
    for (int r = 0; r < n; r++) {
        const void **vis = sc->vis + (size_t)r * vis_stride(s);
        int nv = 0;
        for (int j = 0; j < nctx; j++)
            vis[nv++] = ring + (size_t)j * D;
        for (int j = 0; j < n; j++)
            vis[nv++] = sc->kv + (size_t)j * D;
        sc->nvis[r] = nv;
    }
    s->vis_packed = false;
    attend_output(s, lw, &e->rope_plain, n, out);
}
