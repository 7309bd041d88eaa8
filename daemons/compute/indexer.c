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

void indexer_score(dsv4_session *bs, const struct step_seg *g, int layer)
{
    dsv4_engine *e = bs->e;
    const struct dsv4_config *c = &e->cfg;
    const struct layer_w *lw = &e->layers[layer];
    const struct layer_state *st = &g->s->ls[layer];
    struct scratch *sc = &bs->s;
    int ih = c->index_n_heads, ihd = c->index_head_dim;
    size_t ikb = dsv4_ikey_row_bytes(c);

    struct scored *tmp = (struct scored *)sc->iscore;
    for (int i = 0; i < g->n; i++) {
        int r = g->r0 + i;
        int64_t t = g->pos0 + i;
        int nrow = (int)((t + 1) / lw->ratio);
        int k = DSV4_MIN(c->index_topk, nrow);
        int *sel = sc->sel + (size_t)r * bs->max_visible;
        const float *wt = sc->wt + (size_t)r * ih;
        for (int w = 0; w < nrow; w++) {
            const float *key = sc->krow;
            ikey_unpack(c, st->irows + (size_t)w * ikb, sc->krow);
            double tot = 0.0;
            for (int h = 0; h < ih; h++) {
                const float *q = sc->qi + ((size_t)r * ih + h) * ihd;
                float dot = dsv4_bf16_round((float)dot_f64(q, key, ihd));
                tot += dsv4_bf16_round(fmaxf(dot, 0.0f) * wt[h]);
            }
            tmp[w].s = dsv4_bf16_round((float)tot);
            tmp[w].i = w;
        }
        qsort(tmp, (size_t)nrow, sizeof(*tmp), cmp_scored);
        for (int j = 0; j < k; j++)
            sel[j] = tmp[j].i;
        sc->nsel[r] = k;
    }
}
