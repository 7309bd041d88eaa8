/* SPDX-License-Identifier: MIT */
/*
 * AVX-512 (F, BW, VL) twins of matvec-c.c, bit-identical to it: the vector
 * primitives for the shared tiling of matvec-tile.h. A lane of the definition
 * is a lane of one zmm.
 *
 * E4M3 → fp32: the byte shifted into an fp16 pattern is the exact value
 * · 2^-8 (subnormals included), widened by vcvtph2ps; the 2^8 is folded into
 * the block scale. NaN codes would decode as finite, so each block's bytes
 * are also screened (2·b reaches 0xFE only for 0x7F/0xFF) and such rows
 * return NaN, as the reference does.
 *
 * FP4: the 256-bit integer code of matvec-fp4.h, shared with the AVX2 twin.
 */
#include <immintrin.h>

#include "kernels-internal.h"

#define INLINE static inline __attribute__((always_inline))

#define VL 16
typedef __m512 vf;

INLINE vf vf_zero(void) { return _mm512_setzero_ps(); }
INLINE vf vf_load(const float *p) { return _mm512_loadu_ps(p); }
INLINE void vf_store(float *p, vf v) { _mm512_storeu_ps(p, v); }
INLINE vf vf_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
INLINE vf vf_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
INLINE vf vf_set1(float f) { return _mm512_set1_ps(f); }

INLINE void fp8_dec16(const uint8_t *p, vf out[1])
{
    __m256i h = _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p)), 7);
    h = _mm256_and_si256(h, _mm256_set1_epi16((short)0xBFFF));
    out[0] = _mm512_cvtph_ps(h);
}

/* 16 E4M3 bytes → out[0] = e4m3·2^-120 in integers: the sign-extended byte shifted so its
 * magnitude bits land in the exponent's low four bits and the mantissa's top three (subnormal
 * codes become fp32 subnormals, exactly). Three integer ops where vcvtph2ps alone halved
 * the one-row rate; the activations come ×2^112 (x_scale112), so every product is
 * fp8_dec16's e4m3·2^-8·x. */
INLINE void fp8_dec16x(const uint8_t *p, vf out[1])
{
    const __m512i d = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p));
    out[0] = _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_slli_epi32(d, 20), _mm512_set1_epi32((int)0x87F00000u)));
}

INLINE int fp8_nan(const uint8_t *p, uint32_t n)
{
    __m512i m = _mm512_setzero_si512();
    uint32_t u = 0;
    for (; u + 64 <= n; u += 64) {
        __m512i b = _mm512_loadu_si512(p + u);
        m = _mm512_max_epu8(m, _mm512_add_epi8(b, b));
    }
    if (u < n) {
        __m512i b = _mm512_maskz_loadu_epi8((1ull << (n - u)) - 1, p + u);
        m = _mm512_max_epu8(m, _mm512_add_epi8(b, b));
    }
    return _mm512_cmpeq_epi8_mask(m, _mm512_set1_epi8((char)0xFE)) != 0;
}

INLINE void bf16_dec16(const uint16_t *p, vf out[1])
{
    __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    out[0] = _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
}

/* dsv4_lane_reduce of the 16 lanes at acc + r·stride for r = 0..7, the eight results to
 * y[0..7], the definition's additions in its order ((j, j + 8), then + 4, + 2, + 1; each
 * addition's first operand the lower lane) with two outputs' lanes per vector: 16 shuffles
 * and 8 additions where the scalar reduction takes 15 additions per output and extracts
 * its lanes one by one */
#define LANE_REDUCE8 1
INLINE void lane_reduce8(const float *acc, size_t stride, float *y)
{
    __m512 s[4], t[2];
    for (int i = 0; i < 4; i++) {
        const __m512 a = _mm512_loadu_ps(acc + 2 * i * stride);
        const __m512 b = _mm512_loadu_ps(acc + (2 * i + 1) * stride);
        /* lanes 0-7: output 2i's v_j = a_j + a_(j+8); lanes 8-15: output 2i + 1's */
        s[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
    }
    for (int i = 0; i < 2; i++) /* lanes 4q..4q+3: output 4i + q's v_j + v_(j+4), j < 4 */
        t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    /* per 128-bit lane q: output q's v_0 + v_2, v_1 + v_3, then output q + 4's */
    const __m512 u = _mm512_add_ps(_mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* outputs 0..7: v_0 + v_1 */
    const __m512i i0 = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i i1 = _mm512_setr_epi32(1, 5, 9, 13, 3, 7, 11, 15, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512 r = _mm512_add_ps(_mm512_permutexvar_ps(i0, u), _mm512_permutexvar_ps(i1, u));
    _mm256_storeu_ps(y, _mm512_castps512_ps256(r));
}

/* Software prefetch into L2 of the same place in the next tile (R rows on):
 * the hardware streamers alone left the FP8 tiles at about half the rate
 * they reach on cached data. */
#define PREFETCH_T1(p) _mm_prefetch((const char *)(p), _MM_HINT_T1)
#define PREFETCH_T0(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)

/* 32 zmm registers: a direct tile holds R1 × nx accumulators, a buffered one
 * R × NX; 4 rows measured faster than 8 for single-row FP8 calls. FP8 calls of
 * 3–4 activation rows (decode steps of a few sessions) run direct as one 2 × 4
 * register tile (partials and sums, 16 zmm): 1.6–1.8× the buffered path's rate
 * there, measured in thread CPU time on a loaded 2-vCPU Xeon (2026-12-03) */
#define TILE_R1 4
#define TILE_RG 2
#define TILE_NXD 4
#define TILE_R 4
#define TILE_NX 6
#define TILE_BUF_FROM 3
#define TILE_BUF_FROM_FP8 5
#define TILE_NT 2

/* FP8 passes of 32 activation rows: nx = 64 calls 1.2× faster than 16 (2026-12-04) */
#define TILE_NXC 32
#include "matvec-tile.h"
#define FP4_ZMM 1
#include "matvec-fp4.h"
#define DOT_ZMM 1
#include "dot-simd.h"
#define INDEX_ZMM 1
#include "index-simd.h"
#define QUANT_ZMM 1
#include "quant-simd.h"

/* built twice (kernels/meson.build): plain AVX-512 (F, BW, VL), and with VBMI, VNNI and
 * BF16 for the FP4 decode and multiply-adds of fp4_tile_z (FP4_VNNI) and the bf16
 * many-row path (FP4_BF16) */
#ifdef FP4_VNNI
const struct dsv4_kernel_ops dsv4_kernel_ops_avx512bf16 = {
    .isa = DSV4_ISA_AVX512BF16,
    .name = "avx512bf16",
#else
const struct dsv4_kernel_ops dsv4_kernel_ops_avx512 = {
    .isa = DSV4_ISA_AVX512,
    .name = "avx512",
#endif
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
