/* SPDX-License-Identifier: MIT */
/*
 * Number formats and quantised linear kernels: the narrow math API of the
 * engine. Weights stay in their on-disk formats (FP8-E4M3 with E8M0 block
 * scales, packed FP4-E2M1 with per-32 E8M0 scales, BF16); activations are
 * fp32 vectors. Each matvec exists as a scalar reference (the definition) and
 * as AVX2 and AVX-512 twins chosen at run time; DSV4_KERNELS=scalar|avx2|avx512
 * forces one. Batched forms (nx activation rows) give, per row, exactly the
 * bits of the single-row call, whatever nx is.
 */
#pragma once

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* ---- number formats (scalar; see docs/numerics.md) ---- */
float dsv4_e4m3_to_f32(uint8_t b);          /* 0x7F/0xFF → NaN */
uint8_t dsv4_f32_to_e4m3(float x);          /* RNE, saturating to ±448, NaN → 0x7F */
float dsv4_e8m0_to_f32(uint8_t b);          /* 2^(b-127); 0xFF → NaN */
float dsv4_e2m1_to_f32(uint8_t code);       /* low 4 bits; bit 3 = sign */
uint8_t dsv4_f32_to_e2m1(float x);          /* RNE, saturating to ±6 */
/* bf16 conversions inline: the forward rounds most of its activations to bf16, element
 * by element, in a dozen places (a call each was 2.5 % of a prefill's time) */
static inline uint16_t dsv4_f32_to_bf16(float x)  /* RNE; NaN stays NaN */
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if (x != x)
        return (uint16_t)((u >> 16) | 0x0040u); /* quiet, sign and payload top kept */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float dsv4_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}
static inline float dsv4_bf16_round(float x)      /* bf16 RNE, widened back */
{
    return dsv4_bf16_to_f32(dsv4_f32_to_bf16(x));
}
void dsv4_bf16_round_vec(float *x, size_t n);
int dsv4_ceil_log2(float v);                /* for positive normal v, exact (spec §1) */

/* ---- activation fake-quant, in place (spec §16.1) ----
 * Blocks of `block` along x; the last block may be partial. Scales are powers
 * of two rounded up, values E4M3 (resp. E2M1) RNE. */
void dsv4_fp8_qdq(float *x, size_t n, size_t block);
void dsv4_fp4_qdq(float *x, size_t n, size_t block);

/* ---- compact forms of fake-quantised blocks (the session state) ----
 * Pack: x holds blocks of `block` values, each E4M3 (resp. E2M1) codes times a power of two
 * (what dsv4_fp8_qdq / dsv4_fp4_qdq return, NaN blocks included); writes the codes (FP8: one
 * byte each; FP4: two per byte, low nibble = even index, ceil(n/2) bytes) and one E8M0 scale
 * byte per block. Unpack gives x back bit for bit (formats.c says why). Values of any other
 * form do not round-trip: callers that cannot be sure compare. */
void dsv4_fp8_pack(const float *x, size_t n, size_t block, uint8_t *codes, uint8_t *scales);
void dsv4_fp8_unpack(const uint8_t *codes, const uint8_t *scales, size_t n, size_t block,
                     float *x);
void dsv4_fp4_pack(const float *x, size_t n, size_t block, uint8_t *codes, uint8_t *scales);
void dsv4_fp4_unpack(const uint8_t *codes, const uint8_t *scales, size_t n, size_t block,
                     float *x);
/* x[i] = dsv4_bf16_to_f32(h[i]), vectorised */
void dsv4_bf16_unpack(const uint16_t *h, size_t n, float *x);

/* ---- weights in native format ---- */
struct dsv4_fp8_weight {
    const uint8_t *w;       /* [rows][cols] E4M3 */
    const uint8_t *scale;   /* [ceil(rows/block)][ceil(cols/block)] E8M0 */
    uint32_t rows, cols, block; /* block ≥ 1; SIMD twins need block % 16 == 0, else they
                                   run the scalar reference (same bits) */
    bool nan_free;          /* checked by the owner (dsv4_e4m3_has_nan): callers that honour
                               it may use dsv4_matvec_fp8_nanfree (same bits, faster) */
};

struct dsv4_fp4_weight {
    const uint8_t *w;       /* [rows][cols/2], low nibble = even column */
    const uint8_t *scale;   /* [rows][cols/32] E8M0 */
    uint32_t rows, cols;    /* cols is a multiple of 32 */
};

struct dsv4_bf16_weight {
    const uint16_t *w;      /* [rows][cols] */
    uint32_t rows, cols;
};

/*
 * y[r*ldy + i] = Σ_k W[i][k] · x[r*cols + k] for i in [row_begin, row_end),
 * r in [0, nx). fp32 accumulation, no rounding of y (callers round to bf16
 * where the reference does). The caller fake-quantises x when the reference
 * does (dsv4_fp8_qdq with block 128); a power-of-two activation scale folded
 * into x is exact, so this equals the official per-block scaled sum.
 */
void dsv4_matvec_fp8(const struct dsv4_fp8_weight *w, const float *x, size_t nx,
                     float *y, size_t ldy, uint32_t row_begin, uint32_t row_end);
/*
 * dsv4_matvec_fp8 for weights known to hold no NaN E4M3 code (0x7F/0xFF), e.g.
 * checked once at load with dsv4_e4m3_has_nan: the twins then skip their
 * per-block screening for NaN codes (~15 % of the AVX-512 FP8 rate). Same
 * bits as dsv4_matvec_fp8 on such weights; undefined values otherwise.
 */
void dsv4_matvec_fp8_nanfree(const struct dsv4_fp8_weight *w, const float *x, size_t nx,
                             float *y, size_t ldy, uint32_t row_begin, uint32_t row_end);
/* Whether any of the n bytes is an E4M3 NaN code. */
int dsv4_e4m3_has_nan(const uint8_t *p, size_t n);
void dsv4_matvec_fp4(const struct dsv4_fp4_weight *w, const float *x, size_t nx,
                     float *y, size_t ldy, uint32_t row_begin, uint32_t row_end);
void dsv4_matvec_bf16(const struct dsv4_bf16_weight *w, const float *x, size_t nx,
                      float *y, size_t ldy, uint32_t row_begin, uint32_t row_end);

/*
 * a·b of fp32 vectors in double: element i < n − n mod 8 goes to chain i mod 8, the tail
 * to chain 0, each chain adds the exact products in ascending i from +0, and the chains
 * fold as ((c0 + c4) + (c1 + c5)) + ((c2 + c6) + (c3 + c7)). The products of two fp32 are
 * exact in double, so the roundings are the chains' additions only.
 */
double dsv4_dot_f64(const float *a, const float *b, size_t n);
/* out[j] = dsv4_dot_f64(q, k[j], n) for j < nk, same bits, several dots interleaved. */
void dsv4_dot_f64_many(const float *q, const float *const *k, size_t nk, size_t n, double *out);
/* y[i] = y[i] + a·x[i] in double, the product and the sum each rounded (no fused form). */
void dsv4_axpy_f64(double *y, double a, const float *x, size_t n);
/*
 * The attention's two products for nh heads against the same nk keys (fp32 rows of n values),
 * each head's arithmetic its own, so the twins may share a key's loads and conversions
 * between heads:
 * - scores: out[h·nk + j] = dsv4_dot_f64(q + h·ldq, k[j], n), same bits;
 * - P·V: y[h·ldy + i] = Σ_j p[h·ldp + j]·k[j][i] in double, ascending j from +0, each product
 *   and sum rounded (as repeated dsv4_axpy_f64 from y = 0). A product of two fp32 values is
 *   exact in double, so a fused multiply-add gives the same bits.
 */
void dsv4_dot_f64_heads(const float *q, size_t ldq, size_t nh, const float *const *k, size_t nk,
                        size_t n, double *out);
void dsv4_pv_f64_heads(const float *p, size_t ldp, size_t nh, const float *const *k, size_t nk,
                       size_t n, double *y, size_t ldy);

/*
 * Lightning indexer scores (spec §11; docs/numerics.md): a query of nh heads of d values
 * (d a multiple of 32, each 32-block as dsv4_fp4_qdq leaves it, heads d apart) with nh head
 * weights, against nk keys packed by dsv4_fp4_pack with block 32 (d/2 code bytes, then d/32
 * E8M0 bytes), `stride` bytes apart:
 *   out[w] = bf16(float(Σ_h bf16(max(bf16(float(dsv4_dot_f64(q_h, k_w))), 0) · wt_h)))
 * with the head sum in double in ascending h. dsv4_index_query_init prepares a query once (the
 * twins' integer form of it, when it exists) and keeps q and wt by reference; any number of
 * threads may then score keys against it.
 */
struct dsv4_index_query {
    const float *q, *wt;
    int nh, d;
    bool exact_int;     /* the integer form below holds (else every key takes the definition) */
    int qspread;        /* max over heads of (max − min block exponent) */
    int32_t *qi;        /* [d/8 slots][lo, hi][nh]: four doubled E2M1 values (int8) */
    int32_t *qsum12;    /* [d/32][nh]: 12 · Σ of the block's doubled values */
    double *qscale;     /* [d/32][nh]: 2^(e − 128), e the block's E8M0 byte */
};
void dsv4_index_query_init(struct dsv4_index_query *iq, const float *q, const float *wt, int nh,
                           int d);
void dsv4_index_query_free(struct dsv4_index_query *iq);
void dsv4_index_scores(const struct dsv4_index_query *iq, const uint8_t *keys, size_t stride,
                       size_t nk, float *out);

/* Accumulation order, NaN/Inf behaviour and the error bound: docs/numerics.md. The
 * threaded forms (split over a dsv4_pool) are in matvec-mt.h, library
 * libdsv4kernels_mt. */

/* ---- dispatch ---- */
enum dsv4_isa {
    DSV4_ISA_SCALAR,
    DSV4_ISA_AVX2,
    DSV4_ISA_AVX512,
    DSV4_ISA_AVX512BF16, /* AVX-512 with VBMI, VNNI and BF16 (Sapphire Rapids, Zen 4 on) */
    _DSV4_ISA_MAX,
};

struct dsv4_kernel_ops {
    enum dsv4_isa isa;
    const char *name;
    void (*matvec_fp8)(const struct dsv4_fp8_weight *, const float *, size_t, float *, size_t,
                       uint32_t, uint32_t);
    void (*matvec_fp4)(const struct dsv4_fp4_weight *, const float *, size_t, float *, size_t,
                       uint32_t, uint32_t);
    void (*matvec_bf16)(const struct dsv4_bf16_weight *, const float *, size_t, float *, size_t,
                        uint32_t, uint32_t);
    void (*matvec_fp8_nanfree)(const struct dsv4_fp8_weight *, const float *, size_t, float *,
                               size_t, uint32_t, uint32_t);
    double (*dot_f64)(const float *, const float *, size_t);
    void (*dot_f64_many)(const float *, const float *const *, size_t, size_t, double *);
    void (*index_scores)(const struct dsv4_index_query *, const uint8_t *, size_t, size_t,
                         float *);
    void (*axpy_f64)(double *, double, const float *, size_t);
    void (*dot_f64_heads)(const float *, size_t, size_t, const float *const *, size_t, size_t,
                          double *);
    void (*pv_f64_heads)(const float *, size_t, size_t, const float *const *, size_t, size_t,
                         double *, size_t);
    void (*fp8_qdq)(float *, size_t, size_t);
    void (*bf16_round)(float *, size_t);
};

/* The ops of one ISA, or NULL when this CPU (or build) lacks it. */
const struct dsv4_kernel_ops *dsv4_kernel_ops_for(enum dsv4_isa isa);
/* An ISA's name ("scalar", "avx2", "avx512", "avx512bf16"), and the ISA of a name
 * (-1 when unknown), whether or not this CPU runs it. */
const char *dsv4_isa_name(enum dsv4_isa isa);
int dsv4_isa_by_name(const char *name);
/* The ops in use: the best supported ISA, unless DSV4_KERNELS or
 * dsv4_kernels_force chose another. */
const struct dsv4_kernel_ops *dsv4_kernel_ops(void);
/* Returns 0, or -ENOTSUP when the ISA is not available here. */
int dsv4_kernels_force(enum dsv4_isa isa);
