/* SPDX-License-Identifier: MIT */
/*
 * The layout of one engine session, written once: the per-layer state arrays and the scratch
 * arrays with their element counts, derived from the model config and the session options.
 * daemons/compute/session.c allocates and frees from it (its struct scratch is generated from
 * DSV4_SCRATCH_ARRAYS) and common/plan.c budgets from the same byte sums, so the plan cannot
 * drift from what is allocated.
 */
#pragma once

#include <stdint.h>

#include "config.h"
#include "err.h"

/* Session defaults: the one place (dsv4ctl, the daemons, the plan and the engine use them). */
#define DSV4_DEFAULT_MAX_CTX 4096
#define DSV4_DEFAULT_CHUNK 64           /* prefill rows per forward step */
#define DSV4_DEFAULT_MAX_ROLLBACK 16
#define DSV4_MAX_CHUNK 4096
#define DSV4_MAX_PREFILL_CHUNK 512      /* the widest step the plan picks by itself */
#define DSV4_DEFAULT_SESSIONS 4         /* sessions open at once (scheduler --max-active) */

struct dsv4_session_layout {
    int64_t max_ctx;
    int chunk, max_rollback, n_workers;     /* options with defaults filled in */
    int ring_cap;                           /* window + max(chunk, max_rollback) */
    int max_visible, max_ratio, max_c, max_csa_rows, max_in;
    uint64_t state_bytes, scratch_bytes;    /* what dsv4_session_new allocates */
};

/*
 * The stored forms of the session state (docs/numerics.md "Session state"): values the
 * reference has already rounded are kept in that rounded form, so decoding is exact.
 *   KV row (a raw ring slot, a compressed row): rope_head_dim bf16, then the head_dim −
 *     rope_head_dim "nope" dims as E4M3 codes with one E8M0 scale byte per
 *     DSV4_KV_FP8_BLOCK (their FP8 QDQ), padded to an even byte count;
 *   indexer key (CSA): index_head_dim E2M1 codes, two per byte, with one E8M0 scale byte
 *     per DSV4_IDX_FP4_BLOCK (their FP4 QDQ after the Hadamard rotation);
 *   compressor inputs: fp32 (unrounded projections and score + ape sums).
 */
#define DSV4_KV_FP8_BLOCK 64
#define DSV4_IDX_FP4_BLOCK 32

static inline uint64_t dsv4_kv_row_bytes(const struct dsv4_config *c)
{
    uint64_t nope = (uint64_t)(c->head_dim - c->rope_head_dim);
    uint64_t b = 2 * (uint64_t)c->rope_head_dim + nope +
                 (nope + DSV4_KV_FP8_BLOCK - 1) / DSV4_KV_FP8_BLOCK;
    return (b + 1) & ~(uint64_t)1;
}

static inline uint64_t dsv4_ikey_row_bytes(const struct dsv4_config *c)
{
    uint64_t d = (uint64_t)c->index_head_dim;
    return (d + 1) / 2 + (d + DSV4_IDX_FP4_BLOCK - 1) / DSV4_IDX_FP4_BLOCK;
}

/* One layer's state arrays, in bytes (0 = the layer has none). */
struct dsv4_layer_layout {
    int max_rows, cin_cap;
    uint64_t ring, cin, rows, icin, irows;
};

/*
 * X(field, element type, element count): every scratch array of a session. The counts are
 * expressions in `c` (const struct dsv4_config *) and `L` (const struct dsv4_session_layout *)
 * — both must be in scope where the list is expanded. n = L->chunk rows per step.
 */
#define DSV4_SCRATCH_ARRAYS(X)                                                                 \
    X(x, float, (uint64_t)L->chunk * c->hc_dim)               /* [n][hc*dim] streams */       \
    X(y, float, (uint64_t)L->chunk * c->dim)                  /* [n][dim] */                  \
    X(a, float, (uint64_t)L->chunk * c->dim)                  /* [n][dim] */                  \
    X(xq, float, (uint64_t)L->chunk * L->max_in)              /* quantised in */              \
    X(post, float, (uint64_t)L->chunk * c->hc_mult)           /* [n][hc] */                   \
    X(comb, float, (uint64_t)L->chunk * c->hc_mult * c->hc_mult) /* [n][hc*hc] */             \
    X(qa, float, (uint64_t)L->chunk * c->q_lora_rank)         /* [n][q_lora] */               \
    X(qr, float, (uint64_t)L->chunk * c->q_lora_rank)                                         \
    X(q, float, (uint64_t)L->chunk * c->n_heads * c->head_dim) /* [n][H*D] */                 \
    X(o, float, (uint64_t)L->chunk * c->n_heads * c->head_dim)                                \
    X(kv, float, (uint64_t)L->chunk * c->head_dim)            /* [n][D] */                    \
    X(low, float, (uint64_t)L->chunk * c->o_groups * c->o_lora_rank) /* [n][G*o_lora] */      \
    X(out, float, (uint64_t)L->chunk * c->dim)                /* [n][dim] */                  \
    X(cproj, float, (uint64_t)L->chunk * 2 * L->max_c)        /* compressor projections */    \
    X(qi, float, (uint64_t)L->chunk * c->index_n_heads * c->index_head_dim) /* [n][ih*ihd] */ \
    X(wt, float, (uint64_t)L->chunk * c->index_n_heads)       /* [n][ih] */                   \
    X(iscore, float, (uint64_t)2 * L->max_csa_rows)           /* (score, index) pairs */      \
    X(sel, int, (uint64_t)L->chunk * L->max_visible)          /* visible compressed rows */   \
    X(nsel, int, (uint64_t)L->chunk)                                                          \
    X(vis, const void *, (uint64_t)L->chunk * (L->max_visible + L->ring_cap)) /* per query */ \
    X(nvis, int, (uint64_t)L->chunk)                                                          \
    X(attn_tmp, float, (uint64_t)L->n_workers * DSV4_ATTN_TMP(c)) /* per worker */           \
    X(krow, float, 2 * (uint64_t)DSV4_MAX(c->head_dim, c->index_head_dim)) /* row, check */   \
    X(rlogit, float, (uint64_t)L->chunk * c->n_routed_experts) /* [n][n_routed] */            \
    X(rsel, int, (uint64_t)L->chunk * c->n_activated_experts)  /* routed experts per row */   \
    X(rw, float, (uint64_t)L->chunk * c->n_activated_experts)  /* their weights */            \
    X(eout, float, (uint64_t)L->chunk * c->n_activated_experts * c->dim) /* expert outputs */ \
    X(ids, int, (uint64_t)c->n_routed_experts)                /* union of a chunk's experts */ \
    X(slot, int, (uint64_t)L->chunk * c->n_activated_experts) /* (row, choice) gathered */    \
    X(ew, const struct dsv4_expert_weights *, (uint64_t)c->n_routed_experts) /* leased */     \
    X(sout, float, (uint64_t)L->chunk * c->dim)               /* shared expert output */      \
    X(gx, float, (uint64_t)L->chunk * c->dim)   /* one expert's rows (≤ n: ids unique per row) */ \
    X(g, float, (uint64_t)L->chunk * c->moe_inter_dim)                                        \
    X(u, float, (uint64_t)L->chunk * c->moe_inter_dim)                                        \
    X(ep, float, (uint64_t)L->n_workers * DSV4_EP_TMP(c))  /* per worker: a small expert */  \
    X(eoff, int, (uint64_t)c->n_routed_experts + 1)         /* a group's slot lists */       \
    X(eord, int, (uint64_t)c->n_routed_experts)             /* its small experts, largest first */ \
    X(pooltmp, float, (uint64_t)2 * L->max_ratio)             /* pooling temp */          \
    X(rpos, int64_t, (uint64_t)L->chunk)                      /* each row's position */   \
    X(rtok, int32_t, (uint64_t)L->chunk)                      /* each row's token */

struct dsv4_expert_weights;

/* Experts of at most this many rows in a step run one per worker, whole (moe.c); a worker's
 * scratch for one: its rows in, then out (dim), the fake-quant of an input (the wider), and
 * the two hidden halves (moe_inter_dim each). */
#define DSV4_EP_ROWS 32
#define DSV4_EP_TMP(c)                                                                       \
    ((uint64_t)DSV4_EP_ROWS * ((uint64_t)(c)->dim + 2 * (uint64_t)(c)->moe_inter_dim +      \
                               (uint64_t)DSV4_MAX((c)->dim, (c)->moe_inter_dim)))

/* Heads whose scores and P·V attention.c computes together (the heads kernels' groups). */
#define DSV4_ATTN_HG 8
/* Floats of one attention worker's scratch (attention.c attend_heads): for a group of
 * DSV4_ATTN_HG heads the P·V sums (D doubles each) and a block of 64 scores (doubles) and
 * probabilities (floats), the block's 64 unpacked KV rows (64 × D) and, per head, the
 * accumulator (D), running maximum and denominator. */
#define DSV4_ATTN_TMP(c)                                                                     \
    ((2 * DSV4_ATTN_HG + 64) * (uint64_t)(c)->head_dim + 3 * DSV4_ATTN_HG * 64 +             \
     (uint64_t)(c)->n_heads * ((c)->head_dim + 2))

/*
 * Fill *L for config c and the options (0 = default); -EINVAL naming the option when one is
 * out of range. state_bytes and scratch_bytes are the exact sums session.c allocates (a zero
 * count still allocates one element).
 */
int dsv4_session_layout(const struct dsv4_config *c, int64_t max_ctx, int chunk,
                        int max_rollback, int n_workers, struct dsv4_session_layout *L,
                        struct dsv4_err *err);
/* Layer l's state arrays under layout L. */
void dsv4_layer_layout(const struct dsv4_config *c, const struct dsv4_session_layout *L, int l,
                       struct dsv4_layer_layout *out);
/* Bytes of an array of `count` elements of `size` as allocated (zero counts take one). */
static inline uint64_t dsv4_layout_bytes(uint64_t count, uint64_t size)
{
    return (count ? count : 1) * size;
}

/* DSpark (daemons/compute/speculate.c): rows per captured forward while feeding the drafter,
 * and the tap ring's rows beyond the drafter's window (rows a rollback may undo). */
#define DSV4_SPEC_FEED_ROWS 64
#define DSV4_SPEC_TAP_SLACK 128
/* The drafter's own step: rows of its scratch session (daemons/compute/dspark.c). */
#define DSV4_DRAFTER_CHUNK(c) DSV4_MAX((c)->dspark_block_size, 32)

/*
 * Bytes a session's DSpark state holds besides its target session, for target steps of
 * `chunk` rows: the drafter (dspark.c: window ring per stage, block rows, base logits, its
 * scratch session) and the speculation buffers (speculate.c: verify logits, the taps of a
 * step, the tap ring). 0 for a model without a DSpark drafter. The memory plan counts it per
 * session; dsv4_drafter_new and dsv4_spec_new allocate exactly these arrays.
 */
uint64_t dsv4_dspark_session_bytes(const struct dsv4_config *c, int chunk, int n_workers);
