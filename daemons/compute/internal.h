/* SPDX-License-Identifier: MIT */
/*
 * Private structures of libdsv4engine shared by its files: resident weights
 * per layer, the engine, the session state and per-chunk scratch, and the
 * small math helpers (ops.c) every step uses. Activations are fp32 arrays
 * holding bf16-representable values wherever the reference rounds (spec
 * §16.4); rows of a chunk are contiguous ([n][width]).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "engine.h"
#include "session_layout.h"
#include "expert.h"
#include "kernels.h"
#include "safetensors.h"
#include "threadpool.h"

/* ---- weights ---- */

struct compressor_w {
    int ratio, coff, c;             /* head dim c; coff = 2 for overlapping ratio 4 */
    struct dsv4_bf16_weight wkv, wgate;   /* [coff*c][dim] */
    float *ape;                     /* [ratio][coff*c] */
    float *norm;                    /* [c] */
};

struct layer_w {
    enum dsv4_attn_kind kind;
    int ratio;
    bool hashed;
    float *hc_attn_fn, *hc_attn_base, *hc_attn_scale;
    float *hc_ffn_fn, *hc_ffn_base, *hc_ffn_scale;
    float *attn_norm, *ffn_norm, *q_norm, *kv_norm, *attn_sink;
    struct dsv4_fp8_weight wq_a, wq_b, wkv, wo_a, wo_b;
    struct compressor_w comp;       /* ratio != 0 */
    struct compressor_w icomp;      /* CSA only */
    struct dsv4_fp8_weight iwq_b;   /* CSA only */
    struct dsv4_bf16_weight weights_proj;   /* CSA only */
    struct dsv4_bf16_weight gate;
    float *gate_bias;               /* non-hash layers */
    int32_t *tid2eid;               /* hash layers: [vocab][n_activated] */
    struct dsv4_fp8_weight sh_w1, sh_w2, sh_w3;
};

struct rope_table {
    float *freq;                    /* [rope_head_dim / 2] */
};

/* DSpark drafter weights (dspark spec §3, §10), loaded at open with dsv4_engine_opts.dspark. */
struct dspark_w {
    int stages, block, rank, noise, n_taps;
    const int *taps;
    struct layer_w *st;             /* [stages] ratio-0 blocks mtp.0..S-1 */
    struct dsv4_fp8_weight main_proj;       /* mtp.0: [dim][n_taps*dim] */
    float *main_norm;
    float *norm, *hc_head_fn, *hc_head_base, *hc_head_scale;   /* mtp.S-1 */
    struct dsv4_bf16_weight markov_w1, markov_w2;   /* [vocab][rank] both */
    struct dsv4_bf16_weight conf;   /* [1][dim+rank] */
    dsv4_expert_cache *cache;       /* the stages' routed experts (in-process LRU) */
    struct dsv4_expert_provider experts;
};

struct dsv4_engine {
    struct dsv4_config cfg;
    dsv4_checkpoint *ckpt;
    dsv4_pool *pool;
    size_t rows_par_min;            /* engine_rows splits from this many elements */
    dsv4_expert_cache *cache;       /* NULL with an external provider */
    struct dsv4_expert_provider experts;
    void (*on_layer)(void *ctx);    /* dsv4_engine_opts.on_layer */
    void *on_layer_ctx;
    struct dsv4_bf16_weight embed, head;
    float *norm, *hc_head_fn, *hc_head_base, *hc_head_scale;
    struct layer_w *layers;
    struct rope_table rope_plain, rope_comp;   /* ratio-0 and compressed layers */
    struct dspark_w *dspark;        /* NULL unless opened with .dspark */
    uint64_t expert_budget;         /* in-process expert LRU bytes (the drafter's LRU too) */
    void **allocs;                  /* every weight buffer, freed with the engine */
    size_t n_allocs, cap_allocs;
    uint64_t resident_bytes;        /* their sizes */
    int max_lease;                  /* experts per acquire; 0 = the whole union */
    uint64_t lookahead_asked, lookahead_right;  /* router lookahead: predicted, then chosen */
    uint64_t union_saved;           /* expert leases a step's union saved over per-session */
    /* The scratch of every target forward step (forward.c): one scratch-only session sized
     * for step_rows rows and the largest session context opened so far (sessions hold state
     * only), and the logits of a step's rows when several sessions share it. */
    dsv4_session *step;
    int step_rows;
    float *step_logits;
    size_t step_logits_cap;
};

/* ---- session ---- */

/* Router lookahead runs for decode-sized steps: rows × top-k at most this many ids. */
#define LOOKAHEAD_IDS 64

/* Stored forms: common/session_layout.h (KV rows and indexer keys packed, kvpack.c). */
struct layer_state {
    uint8_t *ring;      /* [ring_cap] packed KV rows, slot = pos mod ring_cap */
    float *cin;         /* [cin_cap][2*coff*c] compressor inputs kvp | score(+ape) */
    uint8_t *rows;      /* [max_rows] packed KV rows: compressed rows (row w at index w) */
    float *icin;        /* CSA: [cin_cap][2*coff*ic] indexer compressor inputs */
    uint8_t *irows;     /* CSA: [max_rows] packed indexer keys */
    int cin_cap, max_rows;
};

/* The scratch arrays, one field per entry of common/session_layout.h's list. */
struct scratch {
#define DSV4_SCRATCH_FIELD(name, type, count) type *name;
    DSV4_SCRATCH_ARRAYS(DSV4_SCRATCH_FIELD)
#undef DSV4_SCRATCH_FIELD
};

struct dsv4_session {
    dsv4_engine *e;
    bool scratch_only;      /* holds scratch, no per-layer state (the step's, the drafter's) */
    int64_t pos, snap, max_ctx;
    int chunk, max_rollback, ring_cap, max_visible;
    bool vis_packed;        /* a step holder: s.vis points at packed KV rows (else fp32) */
    uint64_t state_bytes, scratch_bytes;    /* allocated by dsv4_session_new */
    /* router lookahead for layer la_layer (-1: none): predicted ids per row, ascending */
    int la_layer, la_rows;
    int la_sel[LOOKAHEAD_IDS];
    /* a step holder: the segments of the step in progress (moe counts the union's saving) */
    const struct step_seg *step_seg;
    int n_step_seg;
    struct layer_state *ls;
    struct scratch s;
};

/* One session's rows in a forward step: rows r0..r0+n-1 of the step are its positions
 * pos0..pos0+n-1. The step's scratch holder (`bs` below) is a scratch-only session. */
struct step_seg {
    dsv4_session *s;
    int r0, n;
    int64_t pos0;
};

/* Entries per row of a scratch holder's visible lists (window, ring slack, compressed rows). */
static inline size_t vis_stride(const dsv4_session *bs)
{
    return (size_t)bs->max_visible + (size_t)bs->ring_cap;
}

/* ---- ops.c: helpers shared by the steps ---- */
void engine_track(dsv4_engine *e, void *p, size_t bytes);
/* fn(ctx, begin, end) over rows [0, n) of `width` elements each: split across the pool
 * when that is worth a dispatch, else on the caller. For row-wise work only (each row's
 * result its own), so the bits do not depend on the split. */
void engine_rows(const dsv4_engine *e, int n, size_t width, dsv4_pool_range_fn fn, void *ctx);
/* engine_rows' threshold: 2^15 elements, or DSV4_ROWS_PAR_MIN (tests: 1 splits every
 * job of two rows or more) */
size_t engine_rows_par_min(void);
/* y[n][width] rounded to bf16, rows over the pool */
void round_rows(dsv4_engine *e, float *y, int n, size_t width);
/* y[n][rows] = W x for each of the n rows, split over the pool by output rows. */
void linear_fp8(dsv4_engine *e, const struct dsv4_fp8_weight *w, const float *x, int n, float *y);
/* Rows [begin, end) of W only; y[r*ldy + i] for i in that range (grouped wo_a). */
void linear_fp8_range(dsv4_engine *e, const struct dsv4_fp8_weight *w, uint32_t begin,
                      uint32_t end, const float *x, int n, float *y, size_t ldy);
void linear_fp4(dsv4_engine *e, const struct dsv4_fp4_weight *w, const float *x, int n, float *y);
void linear_bf16(dsv4_engine *e, const struct dsv4_bf16_weight *w, const float *x, int n,
                 float *y);
/* Q(W)(x): FP8 activation fake-quant (block 128) into xq, matvec, bf16 output. */
void qlinear_fp8(dsv4_engine *e, const struct dsv4_fp8_weight *w, const float *x, int n,
                 float *xq, float *y);
void qlinear_fp4(dsv4_engine *e, const struct dsv4_fp4_weight *w, const float *x, int n,
                 float *xq, float *y);
/* qlinear_fp4 of two weights on the same input (an expert's w1 and w3): x is fake-quantised
 * once, not once per weight (when both have one input width) */
void qlinear_fp4_two(dsv4_engine *e, const struct dsv4_fp4_weight *wa,
                     const struct dsv4_fp4_weight *wb, const float *x, int n, float *xq,
                     float *ya, float *yb);
/* qlinear_fp4 (nb = 1) or qlinear_fp4_two (nb = 2) of w[0..nb) into y[0..nb) on the calling
 * thread alone (a worker's expert), same bits */
void qlinear_fp4_here(const struct dsv4_fp4_weight *const *w, int nb, const float *x, int n,
                      float *xq, float *const *y);
/* bf16(w ⊙ x / rms(x)) over n rows of width d; w may be NULL (unweighted, fp32). */
void rmsnorm_rows(float *y, const float *x, const float *w, int n, int d, float eps);
/* rotate the last 2*npairs dims of x (pairs interleaved) at position pos; bf16 result */
void rope_apply(const struct rope_table *t, int npairs, float *x, int64_t pos, bool inverse);
/* rope_apply on H heads stride floats apart (x: the first head's rotated dims), a row's
 * angles found once for all its heads (same bits) */
void rope_row_heads(const struct rope_table *t, int npairs, float *x, int H, size_t stride,
                    int64_t pos, bool inverse);
/* rope_row_heads of rows [0, n) (H·stride floats apart, row r at rpos[r]) over the pool */
void rope_heads(const dsv4_engine *e, const struct rope_table *t, int npairs, float *x, int n,
                int H, size_t stride, const int64_t *rpos, bool inverse);
void rope_table_init(dsv4_engine *e, struct rope_table *t, double base, bool yarn);
void hadamard_inplace(float *x, int n);
/* a·b of fp32 vectors: exact products summed in double over 8 fixed chains (pipelined and
 * vectorisable; a fixed order, so every row and every run gets the same bits), the
 * reference's float64 matmul up to its order. */
double dot_f64(const float *a, const float *b, int n);
float sigmoidf_(float x);

/* ---- session.c ---- */
/* A session holding only scratch (no per-layer KV, compressor or indexer state): the
 * drafter's block forward needs the scratch of `chunk` rows and keeps its own context ring. */
int session_new_scratch(dsv4_engine *e, const struct dsv4_session_opts *opts,
                        dsv4_session **ret, struct dsv4_err *err);
/* Make e->step hold the scratch of a step for sessions up to max_ctx positions and chunk rows. */
int engine_step_reserve(dsv4_engine *e, int64_t max_ctx, int chunk, struct dsv4_err *err);

/* ---- step entry points ---- */
void mhc_pre(const dsv4_engine *e, const float *x, const float *fn, const float *base,
             const float *scale, int n, float *y, float *post, float *comb);
void mhc_post(const dsv4_engine *e, const float *out, float *x, const float *post,
              const float *comb, int n);
void mhc_head(const dsv4_engine *e, const float *x, int n, float *y);
void mhc_head_w(const dsv4_engine *e, const float *fn, const float *base, const float *scale,
                const float *x, int n, float *y);
/* Attention of every segment of a step: shared projections, each session's own state. */
void attention_layer(dsv4_session *bs, const struct step_seg *seg, int n_seg, int layer,
                     const float *a, int n, float *out);
/* K=V rows of a ratio-0/window block: kv_norm(wkv a), RoPE at bs->s.rpos, FP8 QDQ of the nope
 * dims. */
void attention_kv_rows(dsv4_session *bs, const struct layer_w *lw, const struct rope_table *rope,
                       const float *a, int n, float *kv);
/* DSparkAttention: every row sees ring[0..nctx) (slot order) and all n block rows. */
void attention_dspark(dsv4_session *s, const struct layer_w *lw, const float *ring, int nctx,
                      const float *a, int n, int64_t pos0, float *out);
/* Compressor projections of the step's n rows into bs->s.cproj ([n] kvp, then [n] score). */
void compressor_project(dsv4_session *bs, const struct compressor_w *cw, const float *a, int n);
/* Segment g's rows into its compressor input ring; pool every window they complete. */
void compressor_absorb(dsv4_session *bs, const struct step_seg *g, const struct compressor_w *cw,
                       float *cin, int cin_cap, uint8_t *rows, bool indexer, int n,
                       const struct rope_table *rope);

/* ---- kvpack.c: the stored forms of KV rows and indexer keys (common/session_layout.h) ----
 * Pack stores a row the engine produced (bf16 rope dims, FP8-QDQ'd nope dims; an indexer key
 * FP4-QDQ'd) and checks (an assert, with `check` as room for one row) that it unpacks to the
 * same bits; unpack restores the fp32 row. */
void kv_row_pack(const struct dsv4_config *c, const float *row, uint8_t *dst, float *check);
void kv_row_unpack(const struct dsv4_config *c, const uint8_t *src, float *row);
void ikey_pack(const struct dsv4_config *c, const float *key, uint8_t *dst, float *check);
void ikey_unpack(const struct dsv4_config *c, const uint8_t *src, float *key);
/* Indexer queries and head weights of the step's n rows (bs->s.qi, bs->s.wt). */
void indexer_project(dsv4_session *bs, int layer, const float *a, const float *qr, int n);
/* Segment g's rows: top-k compressed rows of its session into bs->s.sel / nsel. */
void indexer_score(dsv4_session *bs, const struct step_seg *g, int layer);
int moe_layer(dsv4_session *s, int layer, const float *f, const int32_t *tokens, int n,
              float *out, struct dsv4_err *err);
int moe_block(dsv4_session *s, const struct layer_w *lw, const struct dsv4_expert_provider *prov,
              int layer, const float *f, const int32_t *tokens, int n, float *out,
              struct dsv4_err *err);
/* Hint the provider with every hash-routed layer's experts for these tokens (decode steps). */
void moe_prefetch_hashed(dsv4_session *s, const int32_t *tokens, int n);
void head_logits(dsv4_session *bs, const float *x, int n, float *logits);
