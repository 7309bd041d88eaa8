/* SPDX-License-Identifier: MIT */
/*
 * Lightning indexer (spec §11): per query, score the visible indexer keys
 * with ReLU'd per-head dot products weighted by a BF16 projection of the
 * attention input, and keep the top-k compressed rows of the main
 * compressor. Query: RoPE, Hadamard, FP4 QDQ. Scores are bf16 like the
 * reference's; ties go to the lower row index. The query projection runs over every row of
 * a step (indexer_project); the scoring reads each session's own keys (indexer_score).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct scored {
    float s;
    int i;
};

static int cmp_scored(const void *pa, const void *pb)
{
    const struct scored *a = pa, *b = pb;
    if (a->s != b->s)
        return a->s > b->s ? -1 : 1;
    return a->i - b->i;
}

void indexer_project(dsv4_session *bs, int layer, const float *a, const float *qr, int n)
{
    dsv4_engine *e = bs->e;
    const struct dsv4_config *c = &e->cfg;
    const struct layer_w *lw = &e->layers[layer];
    struct scratch *sc = &bs->s;
    int ih = c->index_n_heads, ihd = c->index_head_dim, R = c->rope_head_dim;

    qlinear_fp8(e, &lw->iwq_b, qr, n, sc->xq, sc->qi);
    for (int r = 0; r < n; r++)
        for (int h = 0; h < ih; h++) {
            float *q = sc->qi + ((size_t)r * ih + h) * ihd;
            rope_apply(&e->rope_comp, R / 2, q + ihd - R, sc->rpos[r], false);
            hadamard_inplace(q, ihd);
            dsv4_fp4_qdq(q, (size_t)ihd, 32);
        }
    linear_bf16(e, &lw->weights_proj, a, n, sc->wt);
    for (size_t i = 0; i < (size_t)n * ih; i++)
        sc->wt[i] = dsv4_bf16_round(dsv4_bf16_round(sc->wt[i]) * (float)c->index_scale);
}

/* one query row's scoring: its keys [w0, w1) into tmp */
struct score_job {
    dsv4_session *bs;
    const struct layer_state *st;
    const float *const *qh;     /* the row's query heads */
    const float *wt;            /* their weights */
    struct scored *tmp;
    int nrow;
};

/* score of key w: Σ_h bf16(relu(bf16(q_h·k)) · wt_h) in head order, bf16 */
static void score_range(const struct score_job *j, int w0, int w1, float *key, double *dots)
{
    const struct dsv4_config *c = &j->bs->e->cfg;
    int ih = c->index_n_heads, ihd = c->index_head_dim;
    size_t ikb = dsv4_ikey_row_bytes(c);
    for (int w = w0; w < w1; w++) {
        ikey_unpack(c, j->st->irows + (size_t)w * ikb, key);
        /* the key against every head at once: same bits as dot_f64(q_h, key) (the exact
         * products are symmetric and the chains the same), the key loaded once */
        dsv4_dot_f64_many(key, j->qh, (size_t)ih, (size_t)ihd, dots);
        double tot = 0.0;
        for (int h = 0; h < ih; h++) {
            float dot = dsv4_bf16_round((float)dots[h]);
            tot += dsv4_bf16_round(fmaxf(dot, 0.0f) * j->wt[h]);
        }
        j->tmp[w].s = dsv4_bf16_round((float)tot);
        j->tmp[w].i = w;
    }
}

/* per worker: the unpacked key, then the heads' dots (doubles), in its attn_tmp share */
static size_t score_tmp_floats(const struct dsv4_config *c)
{
    return ((size_t)c->index_head_dim + 1) / 2 * 2 + 2 * (size_t)c->index_n_heads;
}

static void score_worker(void *ctx, int worker, int n_workers)
{
    const struct score_job *j = ctx;
    const struct dsv4_config *c = &j->bs->e->cfg;
    unsigned long b, en;
    dsv4_pool_split((unsigned long)j->nrow, 1, worker, n_workers, &b, &en);
    float *key = j->bs->s.attn_tmp + (size_t)worker * DSV4_ATTN_TMP(c);
    double *dots = (double *)(void *)(key + ((size_t)c->index_head_dim + 1) / 2 * 2);
    score_range(j, (int)b, (int)en, key, dots);
}

void indexer_score(dsv4_session *bs, const struct step_seg *g, int layer)
{
    dsv4_engine *e = bs->e;
    const struct dsv4_config *c = &e->cfg;
    const struct layer_w *lw = &e->layers[layer];
    const struct layer_state *st = &g->s->ls[layer];
    struct scratch *sc = &bs->s;
    int ih = c->index_n_heads, ihd = c->index_head_dim;
    const float **qh = dsv4_xmalloc((size_t)DSV4_MAX(ih, 1) * sizeof(*qh));
    /* attn_tmp's per-worker share holds the key and the dots on every real config; the
     * pool splits the keys only when it does (and the work pays for a dispatch) */
    const bool fits = score_tmp_floats(c) <= DSV4_ATTN_TMP(c);

    struct scored *tmp = (struct scored *)sc->iscore;
    for (int i = 0; i < g->n; i++) {
        int r = g->r0 + i;
        int64_t t = g->pos0 + i;
        int nrow = (int)((t + 1) / lw->ratio);
        int k = DSV4_MIN(c->index_topk, nrow);
        int *sel = sc->sel + (size_t)r * bs->max_visible;
        for (int h = 0; h < ih; h++)
            qh[h] = sc->qi + ((size_t)r * ih + h) * ihd;
        struct score_job job = {bs, st, qh, sc->wt + (size_t)r * ih, tmp, nrow};
        if (fits && dsv4_pool_size(e->pool) > 1 &&
            (uint64_t)nrow * (uint64_t)ih * (uint64_t)ihd >= (1u << 20)) {
            dsv4_pool_run(e->pool, score_worker, &job);
        } else if (fits) {
            score_worker(&job, 0, 1);
        } else {
            double *dots = dsv4_xmalloc((size_t)DSV4_MAX(ih, 1) * sizeof(*dots));
            score_range(&job, 0, nrow, sc->krow, dots);
            free(dots);
        }
        qsort(tmp, (size_t)nrow, sizeof(*tmp), cmp_scored);
        for (int j = 0; j < k; j++)
            sel[j] = tmp[j].i;
        sc->nsel[r] = k;
    }
    free(qh);
}
