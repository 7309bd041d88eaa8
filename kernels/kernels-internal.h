/* SPDX-License-Identifier: MIT */
/*
 * What the scalar reference and its SIMD twins share: the per-ISA ops tables
 * and the exact definition of the lane structure every twin reproduces.
 *
 * All matvecs accumulate in DSV4_LANES = 16 fp32 lanes; lane j of a K-block
 * takes the elements whose offset from the block start is ≡ j (mod 16), in
 * ascending order (FP8: each 32-column group's upper element first, the pair
 * order of vdpbf16ps), with fused multiply-adds. The 16 lanes are folded by
 * dsv4_lane_reduce (j + 8, then + 4, + 2, + 1). docs/numerics.md spells the
 * whole order out; because every twin follows it, all twins give the same
 * bits.
 */
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"

#define DSV4_LANES 16

/* E8M0 exponents above this make 2^(e-119) overflow; those blocks take the
 * two-step scale (×256, then ×2^(e-127)). */
#define DSV4_E8M0_FAST_MAX 246

extern const struct dsv4_kernel_ops dsv4_kernel_ops_scalar;
extern const struct dsv4_kernel_ops dsv4_kernel_ops_avx2;
extern const struct dsv4_kernel_ops dsv4_kernel_ops_avx512;
extern const struct dsv4_kernel_ops dsv4_kernel_ops_avx512bf16;

/* index-c.c: the indexer scores' definition, and the largest block-exponent spread of a
 * (query head, key) pair for which their integer form is exact */
void dsv4_index_scores_ref(const struct dsv4_index_query *iq, const uint8_t *keys,
                           size_t stride, size_t nk, float *out);
int dsv4_index_exact_spread(int d);

static inline float dsv4_lane_reduce(const float a[DSV4_LANES])
{
    float v[8];
    for (int j = 0; j < 8; j++)
        v[j] = a[j] + a[j + 8];
    for (int j = 0; j < 4; j++)
        v[j] = v[j] + v[j + 4];
    for (int j = 0; j < 2; j++)
        v[j] = v[j] + v[j + 2];
    return v[0] + v[1];
}

static inline float dsv4_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t dsv4_bits_from_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* 2^e for e in [-149, 127] as an exact fp32; outside, 0 or +inf. */
static inline float dsv4_exp2i(int e)
{
    if (e > 127)
        return INFINITY;
    if (e >= -126)
        return dsv4_f32_from_bits((uint32_t)(e + 127) << 23);
    if (e >= -149)
        return dsv4_f32_from_bits(1u << (e + 149));
    return 0.0f;
}

/* formats.c: the definitions of the fake-quant and the bf16 rounding (the scalar ops) */
void dsv4_fp8_qdq_ref(float *x, size_t n, size_t block);
void dsv4_bf16_round_vec_ref(float *x, size_t n);

/* 2^(e-119), the FP8 block factor when the decoded weight carries 2^-8. */
static inline float dsv4_fp8_fast_scale(uint8_t e)
{
    return dsv4_f32_from_bits((uint32_t)(e + 8) << 23);
}
