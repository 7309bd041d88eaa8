/* SPDX-License-Identifier: MIT */
/* The session layout (session_layout.h). */
#include "session_layout.h"

#include <errno.h>

#include "util.h"

/* The compressor's overlap factor: ratio-4 (CSA) layers pool two windows. */
static int coff_of(int ratio)
{
    return ratio == 4 ? 2 : 1;
}

void dsv4_layer_layout(const struct dsv4_config *c, const struct dsv4_session_layout *L, int l,
                       struct dsv4_layer_layout *out)
{
    *out = (struct dsv4_layer_layout){ 0 };
    int D = c->head_dim;
    uint64_t kvb = dsv4_kv_row_bytes(c), f = sizeof(float);
    out->ring = (uint64_t)L->ring_cap * kvb;
    enum dsv4_attn_kind k = c->layer_kind[l];
    if (k == DSV4_ATTN_WINDOW)
        return;
    int r = c->compress_ratios[l], coff = coff_of(r);
    out->max_rows = (int)(L->max_ctx / r);
    /* the compressor inputs of the windows being filled plus the rollback slack: windows are
     * pooled as their last row arrives (compressor.c), so a step's rows need no room here */
    out->cin_cap = coff * r + L->max_rollback;
    out->cin = (uint64_t)out->cin_cap * 2 * coff * D * f;
    out->rows = (uint64_t)out->max_rows * kvb;
    if (k == DSV4_ATTN_CSA) {
        out->icin = (uint64_t)out->cin_cap * 2 * coff * c->index_head_dim * f;
        out->irows = (uint64_t)out->max_rows * dsv4_ikey_row_bytes(c);
    }
}

int dsv4_session_layout(const struct dsv4_config *c, int64_t max_ctx, int chunk,
                        int max_rollback, int n_workers, struct dsv4_session_layout *L,
                        struct dsv4_err *err)
{
    *L = (struct dsv4_session_layout){ 0 };
    L->max_ctx = max_ctx ? max_ctx : DSV4_DEFAULT_MAX_CTX;
    L->chunk = chunk ? chunk : DSV4_DEFAULT_CHUNK;
    L->max_rollback = max_rollback ? max_rollback : DSV4_DEFAULT_MAX_ROLLBACK;
    L->n_workers = n_workers > 0 ? n_workers : 1;
    if (L->max_ctx < 1 || L->max_ctx > INT32_MAX)
        return dsv4_errf(err, -EINVAL, "session: max_ctx %lld out of range [1, %d]",
                         (long long)L->max_ctx, INT32_MAX);
    if (L->chunk < 1 || L->chunk > DSV4_MAX_CHUNK)
        return dsv4_errf(err, -EINVAL, "session: chunk %d out of range [1, %d]", L->chunk,
                         DSV4_MAX_CHUNK);
    if (L->max_rollback < 1 || L->max_rollback > DSV4_MAX_CHUNK)
        return dsv4_errf(err, -EINVAL, "session: max_rollback %d out of range [1, %d]",
                         L->max_rollback, DSV4_MAX_CHUNK);
    L->ring_cap = c->window + DSV4_MAX(L->chunk, L->max_rollback);
    L->max_ratio = L->max_c = L->max_csa_rows = L->max_visible = 1;
    uint64_t st = 0, f = 1;     /* the layer layout counts bytes */
    for (int l = 0; l < c->n_layers; l++) {
        struct dsv4_layer_layout ll;
        dsv4_layer_layout(c, L, l, &ll);
        st += dsv4_layout_bytes(ll.ring, f);
        enum dsv4_attn_kind k = c->layer_kind[l];
        if (k == DSV4_ATTN_WINDOW)
            continue;
        int r = c->compress_ratios[l], coff = coff_of(r);
        st += dsv4_layout_bytes(ll.cin, f) + dsv4_layout_bytes(ll.rows, f);
        L->max_ratio = DSV4_MAX(L->max_ratio, coff * r);
        L->max_c = DSV4_MAX(L->max_c, coff * c->head_dim);
        if (k == DSV4_ATTN_CSA) {
            st += dsv4_layout_bytes(ll.icin, f) + dsv4_layout_bytes(ll.irows, f);
            L->max_c = DSV4_MAX(L->max_c, coff * c->index_head_dim);
            L->max_csa_rows = DSV4_MAX(L->max_csa_rows, ll.max_rows);
            L->max_visible = DSV4_MAX(L->max_visible, DSV4_MIN(c->index_topk, ll.max_rows));
        } else {
            L->max_visible = DSV4_MAX(L->max_visible, ll.max_rows);
        }
    }
    int max_in = DSV4_MAX(DSV4_MAX(c->dim, c->q_lora_rank), DSV4_MAX(c->wo_a_in, c->moe_inter_dim));
    L->max_in = DSV4_MAX(max_in, c->o_groups * c->o_lora_rank);
    uint64_t sc = 0;
#define SUM(name, type, count) sc += dsv4_layout_bytes((count), sizeof(type));
    DSV4_SCRATCH_ARRAYS(SUM)
#undef SUM
    L->state_bytes = st;
    L->scratch_bytes = sc;
    return 0;
}

uint64_t dsv4_dspark_session_bytes(const struct dsv4_config *c, int chunk, int n_workers)
{
    if (c->dspark_stages <= 0)
        return 0;
    const uint64_t g = (uint64_t)DSV4_MAX(c->dspark_block_size, 1), dim = (uint64_t)c->dim,
                   V = (uint64_t)c->vocab_size, taps = (uint64_t)c->dspark_n_target_layers,
                   W = (uint64_t)c->window, dc = (uint64_t)DSV4_DRAFTER_CHUNK(c), f = sizeof(float);
    struct dsv4_session_layout L;
    uint64_t scratch = dsv4_session_layout(c, (int64_t)dc, (int)dc, 1, n_workers, &L, NULL) < 0
                           ? 0 : L.scratch_bytes;
    uint64_t drafter = scratch + f * ((uint64_t)c->dspark_stages * W * (uint64_t)c->head_dim +
                                      g * (uint64_t)c->hc_dim + dc * dim + dc * taps * dim +
                                      2 * g * dim + g * V + V +
                                      dim + (uint64_t)c->dspark_markov_rank) +
                       g * sizeof(int32_t);
    /* speculate.c: γ + 1 verify logits rows; taps of a step (the largest of a verify, a
     * feeding piece, the window and a target step); the tap ring */
    const uint64_t step = (uint64_t)(chunk > 0 ? chunk : DSV4_DEFAULT_CHUNK);
    const uint64_t rows =
        DSV4_MAX(DSV4_MAX(g + 1, (uint64_t)DSV4_SPEC_FEED_ROWS), DSV4_MAX(W, step));
    uint64_t spec = f * ((g + 1) * V + rows * taps * dim +
                         (W + DSV4_SPEC_TAP_SLACK) * taps * dim);
    return drafter + spec;
}
