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
};
