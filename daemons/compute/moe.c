/* SPDX-License-Identifier: MIT */
/*
 * Mixture of experts (spec §14): sqrt-softplus router with the bias used
 * only for selection (or the token-id hash table in the first layers),
 * routed FP4 experts leased from the provider once per chunk for the union
 * of the rows' choices, the FP8 shared expert, SwiGLU with clamps, routing
 * weight applied before w2, and the fp32 sum in ascending expert id with
 * the shared expert last.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "internal.h"

/* sqrt(softplus(x)), each step in double rounded to fp32 like the reference */
static float sqrt_softplus(float x)
{
    float sp = x > 20.0f ? x : (float)log1p(exp((double)x));
    return (float)sqrt((double)sp);
}

/* h = silu(min(g, L)) * clamp(u, ±L) * w, then bf16 (the input of w2). */
static void swiglu(float *g, const float *u, int n, float limit, float w)
{
    for (int i = 0; i < n; i++) {
        float gg = g[i], uu = u[i];
        if (limit > 0) {
            gg = fminf(gg, limit);
            uu = fminf(fmaxf(uu, -limit), limit);
        }
        float h = (float)((double)gg / (1.0 + exp(-(double)gg))) * uu;
        g[i] = dsv4_bf16_round(w * h);
    }
}

/* an element of swiglu (a double exp) costs about as much as 16 of the other row-wise
 * jobs' elements: an expert's few rows are worth splitting */
#define SWIGLU_COST 16

/* swiglu over rows of g and u (I wide), row i weighted by rw[slot[i]] (slot NULL: 1) */
struct swiglu_job {
    float *g;
    const float *u;
    const float *rw;
    const int *slot;
    int I;
    float limit;
};

static void swiglu_range(void *ctx, unsigned long b, unsigned long e)
{
    const struct swiglu_job *j = ctx;
    for (unsigned long i = b; i < e; i++)
        swiglu(j->g + i * (size_t)j->I, j->u + i * (size_t)j->I, j->I, j->limit,
               j->slot ? j->rw[j->slot[i]] : 1.0f);
}

/* an expert's rows in or out: gather copies input row slot[i] / K to row i of dst,
 * scatter row i of src to output row slot[i] of dst (d floats each) */
struct move_job {
    float *dst;
    const float *src;
    const int *slot;
    int K, d;
    bool gather;
};

static void move_range(void *ctx, unsigned long b, unsigned long e)
{
    const struct move_job *j = ctx;
    const size_t d = (size_t)j->d;
    for (unsigned long i = b; i < e; i++) {
        if (j->gather)
            memcpy(j->dst + i * d, j->src + (size_t)(j->slot[i] / j->K) * d, d * sizeof(float));
        else
            memcpy(j->dst + (size_t)j->slot[i] * d, j->src + i * d, d * sizeof(float));
    }
}

/* out = bf16(routed outputs in choice order + the shared expert's), row by row */
struct moe_sum_job {
    const struct scratch *sc;
    float *out;
    int K, d;
};

static void moe_sum_range(void *ctx, unsigned long b, unsigned long e)
{
    const struct moe_sum_job *j = ctx;
    const struct scratch *sc = j->sc;
    const int K = j->K, d = j->d;
    for (unsigned long r = b; r < e; r++)
        for (int i = 0; i < d; i++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++)
                if (sc->rsel[r * K + k] >= 0)
                    acc += sc->eout[((size_t)r * K + k) * d + i];
            j->out[(size_t)r * d + i] = dsv4_bf16_round(acc + sc->sout[(size_t)r * d + i]);
        }
}

/* sel[0..K) = top-K of sco + bias; a strictly larger value wins, ties → lower id. */
static void topk_biased(const float *sco, const float *bias, int E, int K, int *sel)
{
    for (int k = 0; k < K; k++) {
        int best = -1;
        float bv = -INFINITY;
        for (int i = 0; i < E; i++) {
            bool taken = false;
            for (int j = 0; j < k; j++)
                taken |= sel[j] == i;
            float v = sco[i] + bias[i];
            if (!taken && (best < 0 || v > bv)) {
                best = i;
                bv = v;
            }
        }
        sel[k] = best;
    }
}

static void sort_ids(int *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            int t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
}

/* Distinct ids of v[0..n) (negative ones skipped) into u, ascending; returns the count. */
static int union_ids(const int *v, int n, int *u)
{
    int nu = 0;
    for (int i = 0; i < n; i++) {
        bool seen = v[i] < 0;
        for (int j = 0; j < nu && !seen; j++)
            seen = u[j] == v[i];
        if (!seen)
            u[nu++] = v[i];
    }
    sort_ids(u, nu);
    return nu;
}

void moe_prefetch_hashed(dsv4_session *s, const int32_t *tokens, int n)
{
    dsv4_engine *e = s->e;
    const struct dsv4_config *c = &e->cfg;
    int K = c->n_activated_experts, v[LOOKAHEAD_IDS], u[LOOKAHEAD_IDS];
    if (!e->experts.prefetch || n * K > LOOKAHEAD_IDS)
        return;
    for (int l = 0; l < c->n_layers; l++) {
        const struct layer_w *lw = &e->layers[l];
        if (!lw->hashed)
            continue;
        for (int r = 0; r < n; r++)
            memcpy(v + r * K, lw->tid2eid + (size_t)tokens[r] * K, (size_t)K * sizeof(int));
        int nu = union_ids(v, n * K, u);
        e->experts.prefetch(e->experts.ctx, l, u, nu);
    }
}

/*
 * Router lookahead: predict layer+1's experts from this layer's FFN input f (the residual
 * stream changes little from one layer to the next) with layer+1's own router, and hint the
 * provider, which loads them while this layer's experts and the next attention compute.
 * The prediction is remembered to count how often layer+1 then picks the same experts.
 */
static void lookahead(dsv4_session *s, int layer, const float *f, int n)
{
    dsv4_engine *e = s->e;
    const struct dsv4_config *c = &e->cfg;
    int E = c->n_routed_experts, K = c->n_activated_experts, u[LOOKAHEAD_IDS];
    s->la_layer = -1;
    if (!e->experts.prefetch || layer + 1 >= c->n_layers || n * K > LOOKAHEAD_IDS ||
        e->layers[layer + 1].hashed)
        return;
    const struct layer_w *nw = &e->layers[layer + 1];
    float *sco = s->s.rlogit;       /* free once route() has chosen this layer's experts */
    linear_bf16(e, &nw->gate, f, n, sco);
    for (int r = 0; r < n; r++) {
        float *sr = sco + (size_t)r * E;
        for (int i = 0; i < E; i++)
            sr[i] = sqrt_softplus(sr[i]);
        topk_biased(sr, nw->gate_bias, E, K, s->la_sel + r * K);
    }
    s->la_layer = layer + 1;
    s->la_rows = n;
    int nu = union_ids(s->la_sel, n * K, u);
    e->experts.prefetch(e->experts.ctx, layer + 1, u, nu);
}

/* Router: sel[r][0..k) ascending expert id, wts in the same order. */
static void route(dsv4_session *s, const struct layer_w *lw, const float *f,
                  const int32_t *tokens, int n)
{
    dsv4_engine *e = s->e;
    const struct dsv4_config *c = &e->cfg;
    int E = c->n_routed_experts, K = c->n_activated_experts;
    struct scratch *sc = &s->s;
    linear_bf16(e, &lw->gate, f, n, sc->rlogit);
    for (int r = 0; r < n; r++) {
        float *sco = sc->rlogit + (size_t)r * E;
        int *sel = sc->rsel + (size_t)r * K;
        for (int i = 0; i < E; i++)
            sco[i] = sqrt_softplus(sco[i]);
        if (lw->hashed) {
            memcpy(sel, lw->tid2eid + (size_t)tokens[r] * K, (size_t)K * sizeof(int));
        } else {
                topk_biased(sco, lw->gate_bias, E, K, sel);
        }
        /* ascending id: the order of the reference's expert loop */
        sort_ids(sel, K);
        double sum = 0.0;
        for (int k = 0; k < K; k++)
            sum += sco[sel[k]];
        for (int k = 0; k < K; k++)
            sc->rw[(size_t)r * K + k] = sco[sel[k]] / (float)sum * (float)c->route_scale;
        /* a repeated hash id counts once (the reference's expert loop); its weight stays
         * in the normaliser */
        for (int k = 1, prev = sel[0]; k < K; k++) {
            if (sel[k] == prev)
                sel[k] = -1;
            else
                prev = sel[k];
        }
    }
}

/*
 * The small experts of a lease group (at most DSV4_EP_ROWS rows each), one worker per expert
 * from gather to scatter, taken largest first from a shared counter: a prefill step's experts
 * see about 12 rows each, and running each of their five row-wise steps and three matvecs
 * over the pool cost a barrier and a tail wait apiece, and both workers prepared the same x
 * for their halves of every matvec. Each (row, choice) slot belongs to one expert, so the
 * workers write disjoint rows of eout; every step is the pooled one's operations on the same
 * values, so the bits do not depend on which worker runs which expert.
 */
struct ep_job {
    dsv4_session *s;
    const struct dsv4_expert_weights *const *ew;
    const float *f;
    int nsmall;
    float limit;
    _Atomic int next;
};

static void ep_worker(void *ctx, int worker, int n_workers)
{
    struct ep_job *j = ctx;
    const struct dsv4_config *c = &j->s->e->cfg;
    const struct scratch *sc = &j->s->s;
    const int K = c->n_activated_experts, d = c->dim, I = c->moe_inter_dim;
    float *gx = sc->ep + (size_t)worker * DSV4_EP_TMP(c);
    float *xq = gx + (size_t)DSV4_EP_ROWS * d, *g = xq + (size_t)DSV4_EP_ROWS * DSV4_MAX(d, I);
    float *u = g + (size_t)DSV4_EP_ROWS * I;
    for (;;) {
        const int i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (i >= j->nsmall)
            return;
        const int x = sc->eord[i], m = sc->eoff[x + 1] - sc->eoff[x];
        const int *sl = sc->slot + sc->eoff[x];
        const struct dsv4_expert_weights *w = j->ew[x];
        struct move_job gather = {gx, j->f, sl, K, d, true};
        move_range(&gather, 0, (unsigned long)m);
        const struct dsv4_fp4_weight *w13[2] = {&w->w1, &w->w3};
        float *gu[2] = {g, u};
        qlinear_fp4_here(w13, 2, gx, m, xq, gu);
        struct swiglu_job sj = {g, u, sc->rw, sl, I, j->limit};
        swiglu_range(&sj, 0, (unsigned long)m);
        const struct dsv4_fp4_weight *w2 = &w->w2;
        qlinear_fp4_here(&w2, 1, g, m, xq, &gx);
        struct move_job scatter = {sc->eout, gx, sl, K, d, false};
        move_range(&scatter, 0, (unsigned long)m);
    }
}

/* one expert on its m rows (slots sl), each step over the pool; the scratch's gx, g and u
 * hold n rows */
static void expert_pooled(dsv4_session *s, const struct dsv4_expert_weights *w, const float *f,
                          const int *sl, int m, float limit)
{
    dsv4_engine *e = s->e;
    struct scratch *sc = &s->s;
    const int K = e->cfg.n_activated_experts, d = e->cfg.dim, I = e->cfg.moe_inter_dim;
    struct move_job gather = {sc->gx, f, sl, K, d, true};
    engine_rows(e, m, (size_t)d, move_range, &gather);
    qlinear_fp4_two(e, &w->w1, &w->w3, sc->gx, m, sc->xq, sc->g, sc->u);
    struct swiglu_job sj = {sc->g, sc->u, sc->rw, sl, I, limit};
    engine_rows(e, m, (size_t)I * SWIGLU_COST, swiglu_range, &sj);
    qlinear_fp4(e, &w->w2, sc->g, m, sc->xq, sc->gx);
    struct move_job scatter = {sc->eout, sc->gx, sl, K, d, false};
    engine_rows(e, m, (size_t)d, move_range, &scatter);
}

int moe_layer(dsv4_session *s, int layer, const float *f, const int32_t *tokens, int n,
              float *out, struct dsv4_err *err)
{
    return moe_block(s, &s->e->layers[layer], &s->e->experts, layer, f, tokens, n, out, err);
}

int moe_block(dsv4_session *s, const struct layer_w *lw, const struct dsv4_expert_provider *prov,
              int layer, const float *f, const int32_t *tokens, int n, float *out,
              struct dsv4_err *err)
{
    dsv4_engine *e = s->e;
    const struct dsv4_config *c = &e->cfg;
    struct scratch *sc = &s->s;
    int E = c->n_routed_experts, K = c->n_activated_experts, d = c->dim;
    int I = c->moe_inter_dim;
    float limit = (float)c->swiglu_limit;

    route(s, lw, f, tokens, n);
    if (prov == &e->experts && s->la_layer == layer && s->la_rows == n) {  /* score the lookahead */
        for (int r = 0; r < n; r++)
            for (int k = 0; k < K; k++)
                for (int j = 0; j < K; j++)
                    e->lookahead_right += s->la_sel[r * K + k] == sc->rsel[r * K + j];
        e->lookahead_asked += (uint64_t)n * K;
    }

    /* union of the chunk's experts, ascending */
    int *ids = sc->ids, *slot = sc->slot;
    int nu = 0;
    for (int i = 0; i < E; i++)
        for (int r = 0; r < n * K; r++)
            if (sc->rsel[r] == i) {
                ids[nu++] = i;
                break;
            }
    if (s->n_step_seg > 1 && prov == &e->experts) {    /* what the union saved */
        uint64_t each = 0;
        for (int g = 0; g < s->n_step_seg; g++) {
            const struct step_seg *sg = &s->step_seg[g];
            for (int u = 0; u < nu; u++)
                for (int r = sg->r0 * K; r < (sg->r0 + sg->n) * K; r++)
                    if (sc->rsel[r] == ids[u]) {
                        each++;
                        break;
                    }
        }
        e->union_saved += each - (uint64_t)nu;
    }
    /* Lease the union in groups of at most max_lease (a small cache cannot hold a whole
     * prefill chunk's union); each (row, choice) output lands in its own eout row, so the
     * grouping does not change the sum below. */
    const struct dsv4_expert_weights **ew = sc->ew;
    bool target = prov == &e->experts;  /* the drafter's stages lease from their own cache */
    int group = e->max_lease > 0 ? e->max_lease : DSV4_MAX(nu, 1);
    for (int g0 = 0; g0 < nu; g0 += group) {
        int ng = DSV4_MIN(group, nu - g0);
        int rc = prov->acquire(prov->ctx, layer, ids + g0, ng, ew, err);
        if (rc < 0)
            return rc;
        if (g0 == 0 && target)  /* this layer's first leases are in: hint the next layer's */
            lookahead(s, layer, f, n);
        /* each expert's (row, choice) slots, expert by expert: at most one per row (route
         * leaves an id once per row), so m <= n and the lists fit slot's n·K */
        int *eoff = sc->eoff, *eord = sc->eord, nsmall = 0;
        eoff[0] = 0;
        for (int u = 0; u < ng; u++) {
            int m = eoff[u];
            for (int r = 0; r < n; r++)
                for (int k = 0; k < K; k++)
                    if (sc->rsel[r * K + k] == ids[g0 + u]) {
                        slot[m++] = r * K + k;
                        break;
                    }
            eoff[u + 1] = m;
        }
        for (int u = 0; u < ng; u++) {
            const int m = eoff[u + 1] - eoff[u];
            if (m <= DSV4_EP_ROWS) { /* the small ones, largest first (insertion) */
                int i = nsmall++;
                for (; i > 0 && eoff[eord[i - 1] + 1] - eoff[eord[i - 1]] < m; i--)
                    eord[i] = eord[i - 1];
                eord[i] = u;
                continue;
            }
            expert_pooled(s, ew[u], f, slot + eoff[u], m, limit);
        }
        if (nsmall == 1 && dsv4_pool_size(e->pool) > 1) { /* alone: its steps over the pool */
            expert_pooled(s, ew[eord[0]], f, slot + eoff[eord[0]],
                          eoff[eord[0] + 1] - eoff[eord[0]], limit);
        } else {
            struct ep_job ej = {s, ew, f, nsmall, limit, 0};
            if (dsv4_pool_size(e->pool) == 1)
                ep_worker(&ej, 0, 1);
            else
                dsv4_pool_run(e->pool, ep_worker, &ej);
        }
        prov->release(prov->ctx, layer, ids + g0, ng);
    }

    qlinear_fp8(e, &lw->sh_w1, f, n, sc->xq, sc->g);
    qlinear_fp8(e, &lw->sh_w3, f, n, sc->xq, sc->u);
    struct swiglu_job sj = {sc->g, sc->u, NULL, NULL, I, limit};
    engine_rows(e, n, (size_t)I * SWIGLU_COST, swiglu_range, &sj);
    qlinear_fp8(e, &lw->sh_w2, sc->g, n, sc->xq, sc->sout);

    struct moe_sum_job mj = {sc, out, K, d};
    engine_rows(e, n, (size_t)K * d, moe_sum_range, &mj);
    return 0;
}
