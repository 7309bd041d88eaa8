/* SPDX-License-Identifier: MIT */
/*
 * AVX2 (+FMA, F16C) twins of matvec-c.c, bit-identical to it: the vector
 * primitives for the shared tiling of matvec-tile.h. A definition lane lives
 * in one of two ymm halves (lanes 0-7, 8-15).
 *
 * E4M3 → fp32: the byte shifted into an fp16 pattern is the exact value
 * · 2^-8 (subnormals included), widened by vcvtph2ps; the 2^8 is folded into
 * the block scale. NaN codes would decode as finite, so each block's bytes
 * are also screened (2·b reaches 0xFE only for 0x7F/0xFF).
 *
 * FP4: in integers, matvec-fp4.h.
 */
#include <immintrin.h>

#include "kernels-internal.h"

#define INLINE static inline __attribute__((always_inline))

#define VL 8
typedef __m256 vf;

INLINE vf vf_zero(void) { return _mm256_setzero_ps(); }
INLINE vf vf_load(const float *p) { return _mm256_loadu_ps(p); }
INLINE void vf_store(float *p, vf v) { _mm256_storeu_ps(p, v); }
INLINE vf vf_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
INLINE vf vf_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
INLINE vf vf_set1(float f) { return _mm256_set1_ps(f); }

INLINE void fp8_dec16(const uint8_t *p, vf out[2])
{
    __m256i h = _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p)), 7);
    h = _mm256_and_si256(h, _mm256_set1_epi16((short)0xBFFF));
    out[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    out[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

/* 16 E4M3 bytes → e4m3·2^-120 in integers (as the AVX-512 twin's fp8_dec16x); the
 * activations come ×2^112 */
INLINE void fp8_dec16x(const uint8_t *p, vf out[2])
{
    const __m256i m = _mm256_set1_epi32((int)0x87F00000u);
    const __m256i d0 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p));
    const __m256i d1 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8)));
    out[0] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(d0, 20), m));
    out[1] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(d1, 20), m));
}

INLINE int fp8_nan(const uint8_t *p, uint32_t n)
{
    __m256i m = _mm256_setzero_si256();
    uint32_t u = 0;
    for (; u + 32 <= n; u += 32) {
        __m256i b = _mm256_loadu_si256((const __m256i *)(p + u));
        m = _mm256_max_epu8(m, _mm256_add_epi8(b, b));
    }
    __m128i m1 = _mm_max_epu8(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
    if (u < n) {
        __m128i b = _mm_loadu_si128((const __m128i *)(p + u));
        m1 = _mm_max_epu8(m1, _mm_add_epi8(b, b));
    }
    return _mm_movemask_epi8(_mm_cmpeq_epi8(m1, _mm_set1_epi8((char)0xFE))) != 0;
}

INLINE void bf16_dec16(const uint16_t *p, vf out[2])
{
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    __m256i lo = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(h));
    __m256i hi = _mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1));
    out[0] = _mm256_castsi256_ps(_mm256_slli_epi32(lo, 16));
    out[1] = _mm256_castsi256_ps(_mm256_slli_epi32(hi, 16));
}

/* dsv4_lane_reduce of the 16 lanes at acc + r·stride for r = 0..7 into y[0..7], the
 * definition's additions in its order ((j, j + 8) is the two halves, then + 4, + 2, + 1; each
 * addition's first operand the lower lane), several outputs per vector: 15 additions and 15
 * shuffles for the eight where the scalar reduction takes 15 additions each */
#define LANE_REDUCE8 1
INLINE void lane_reduce8(const float *acc, size_t stride, float *y)
{
    __m256 v[8], s[4], t[2];
    for (int r = 0; r < 8; r++) /* output r's v_j = a_j + a_(j+8) */
        v[r] = _mm256_add_ps(_mm256_loadu_ps(acc + r * stride), _mm256_loadu_ps(acc + r * stride + 8));
    for (int i = 0; i < 4; i++) /* lanes 0-3: output 2i's v_j + v_(j+4); 4-7: output 2i + 1's */
        s[i] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x31));
    /* per 128-bit half h: outputs 4i + h's (v_0 + v_2, v_1 + v_3), then 4i + 2 + h's */
    for (int i = 0; i < 2; i++)
        t[i] = _mm256_add_ps(_mm256_shuffle_ps(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* v_0 + v_1 of outputs 0, 2, 4, 6 | 1, 3, 5, 7 */
    const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 1, 3, 1)));
    _mm256_storeu_ps(y, _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

/* Software prefetch into L2 of the same place in the next tile (R rows on). */
#define PREFETCH_T1(p) _mm_prefetch((const char *)(p), _MM_HINT_T1)
#define PREFETCH_T0(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)

/* 16 ymm registers: a direct tile holds R1 × nx × 2 accumulators, a buffered
 * one R × NX (one half per pass) */
#define TILE_R1 2
#define TILE_RG 1

#define TILE_NXD 4
#define TILE_R 2
#define TILE_NX 6
#define TILE_BUF_FROM 16
#define TILE_BUF_FROM_FP8 (NXC + 1)
#define TILE_NT 4

/* FP8 passes of 16 activation rows (32 measured 0-7 % slower on the direct path) */
#define TILE_NXC 16
#include "matvec-tile.h"
#include "matvec-fp4.h"
#include "dot-simd.h"
#include "index-simd.h"
#include "quant-simd.h"

const struct dsv4_kernel_ops dsv4_kernel_ops_avx2 = {
    .isa = DSV4_ISA_AVX2,
    .name = "avx2",
    .matvec_fp8 = matvec_fp8_simd,
    .matvec_fp4 = matvec_fp4_simd,
    .matvec_bf16 = matvec_bf16_simd,
    .matvec_fp8_nanfree = matvec_fp8_nanfree_simd,
    .dot_f64 = dot_f64_simd,
    .dot_f64_many = dot_f64_many_simd,
    .index_scores = index_scores_simd,
    .axpy_f64 = axpy_f64_simd,
    .dot_f64_heads = dot_f64_heads_simd,
    .pv_f64_heads = pv_f64_heads_simd,
    .fp8_qdq = fp8_qdq_simd,
    .bf16_round = bf16_round_simd,
};
