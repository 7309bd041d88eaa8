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

struct iq_job {
    const struct rope_table *rope;
    float *q;
    const int64_t *rpos;
    int ih, ihd, R;
};

/* the query heads of rows [b, e): RoPE, Hadamard, FP4 QDQ */
static void iq_heads_range(void *ctx, unsigned long b, unsigned long e)
{
    const struct iq_job *j = ctx;
    for (unsigned long r = b; r < e; r++) {
        float *qr = j->q + r * (size_t)j->ih * j->ihd;
        rope_row_heads(j->rope, j->R / 2, qr + j->ihd - j->R, j->ih, (size_t)j->ihd, j->rpos[r],
                       false);
        for (int h = 0; h < j->ih; h++) {
            hadamard_inplace(qr + (size_t)h * j->ihd, j->ihd);
            dsv4_fp4_qdq(qr + (size_t)h * j->ihd, (size_t)j->ihd, 32);
        }
    }
}

void indexer_project(dsv4_session *bs, int layer, const float *a, const float *qr, int n)
{
    dsv4_engine *e = bs->e;
    const struct dsv4_config *c = &e->cfg;
    const struct layer_w *lw = &e->layers[layer];
    struct scratch *sc = &bs->s;
    int ih = c->index_n_heads, ihd = c->index_head_dim, R = c->rope_head_dim;

    qlinear_fp8(e, &lw->iwq_b, qr, n, sc->xq, sc->qi);
    struct iq_job j = {&e->rope_comp, sc->qi, sc->rpos, ih, ihd, R};
    engine_rows(e, n, (size_t)ih * ihd, iq_heads_range, &j);
    linear_bf16(e, &lw->weights_proj, a, n, sc->wt);
    for (size_t i = 0; i < (size_t)n * ih; i++)
        sc->wt[i] = dsv4_bf16_round(dsv4_bf16_round(sc->wt[i]) * (float)c->index_scale);
}

/* one query row's scoring, split over the pool by keys */
struct score_job {
    const struct dsv4_index_query *iq;
    const uint8_t *keys;
    size_t stride;
    float *out;
    int nrow;
};

static void score_worker(void *ctx, int worker, int n_workers)
{
    const struct score_job *j = ctx;
    unsigned long b, en;
    dsv4_pool_split((unsigned long)j->nrow, 16, worker, n_workers, &b, &en);
    dsv4_index_scores(j->iq, j->keys + b * j->stride, j->stride, en - b, j->out + b);
}

static bool before(const struct scored *a, const struct scored *b)
{
    return a->s > b->s || (a->s == b->s && a->i < b->i);
}

static void swap_scored(struct scored *a, struct scored *b)
{
    struct scored t = *a;
    *a = *b;
    *b = t;
}

/*
 * The k first of t[0..n) in cmp_scored's order, in that order, at t[0..k). Without NaN the
 * order is strict and total (indices differ), so selecting the k first (quickselect, median
 * of three) and sorting only them gives what sorting all n gives; a NaN score sorts all n as
 * before (cmp_scored is no order then, and its result is what the definition means).
 */
static void topk_scored(struct scored *t, int n, int k)
{
    bool nan = false;
    for (int i = 0; i < n && !nan; i++)
        nan = isnan(t[i].s);
    if (nan || k >= n || n < 64) {
        qsort(t, (size_t)n, sizeof(*t), cmp_scored);
        return;
    }
    int lo = 0, hi = n - 1;     /* the k-th first lies in [lo, hi] */
    while (hi - lo > 16) {
        int mid = lo + (hi - lo) / 2;
        if (before(&t[mid], &t[lo]))
            swap_scored(&t[mid], &t[lo]);
        if (before(&t[hi], &t[lo]))
            swap_scored(&t[hi], &t[lo]);
        if (before(&t[hi], &t[mid]))
            swap_scored(&t[hi], &t[mid]);
        struct scored p = t[mid];   /* t[lo] ≤ p ≤ t[hi] in the order */
        int i = lo, j = hi;
        while (i <= j) {
            while (before(&t[i], &p))
                i++;
            while (before(&p, &t[j]))
                j--;
            if (i <= j)
                swap_scored(&t[i++], &t[j--]);
        }
        /* now t[lo..j] ≤ p ≤ t[i..hi], and t[j+1..i-1] == p */
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else {
            hi = k - 1;     /* the pivot is the k-th: t[0..k) are the k first */
            break;
        }
    }
    qsort(t, (size_t)(hi + 1 < n ? hi + 1 : n), sizeof(*t), cmp_scored);
}

void indexer_score(dsv4_session *bs, const struct step_seg *g, int layer)
{
    dsv4_engine *e = bs->e;
    const struct dsv4_config *c = &e->cfg;
    const struct layer_w *lw = &e->layers[layer];
    const struct layer_state *st = &g->s->ls[layer];
    struct scratch *sc = &bs->s;
    int ih = c->index_n_heads, ihd = c->index_head_dim;
    /* the segment's last row sees the most keys */
    int64_t most = (g->pos0 + g->n) / lw->ratio;
    float *scores = dsv4_xmalloc((size_t)DSV4_MAX(most, 1) * sizeof(*scores));
    struct scored *tmp = (struct scored *)sc->iscore;
    for (int i = 0; i < g->n; i++) {
        int r = g->r0 + i;
        int64_t t = g->pos0 + i;
        int nrow = (int)((t + 1) / lw->ratio);
        int k = DSV4_MIN(c->index_topk, nrow);
        int *sel = sc->sel + (size_t)r * bs->max_visible;
        struct dsv4_index_query iq;
        dsv4_index_query_init(&iq, sc->qi + (size_t)r * ih * ihd, sc->wt + (size_t)r * ih, ih,
                              ihd);
        struct score_job job = {&iq, st->irows, dsv4_ikey_row_bytes(c), scores, nrow};
        /* the pool splits the keys when the work pays for a dispatch */
        if (dsv4_pool_size(e->pool) > 1 &&
            (uint64_t)nrow * (uint64_t)ih * (uint64_t)ihd >= (1u << 20))
            dsv4_pool_run(e->pool, score_worker, &job);
        else
            score_worker(&job, 0, 1);
        dsv4_index_query_free(&iq);
        for (int w = 0; w < nrow; w++)
            tmp[w] = (struct scored){scores[w], w};
        topk_scored(tmp, nrow, k);
        for (int j = 0; j < k; j++)
            sel[j] = tmp[j].i;
        sc->nsel[r] = k;
    }
    free(scores);
}
