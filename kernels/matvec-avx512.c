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
 * E2M1 → fp32: the 16 signed values times the block scale (exact) form a
 * table that vpermps indexes with the nibbles spread into column order.
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

typedef __m512 fp4_tab;

INLINE fp4_tab fp4_tab_make(float s)
{
    const __m512 table = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f,
                                        -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
    return _mm512_mul_ps(table, _mm512_set1_ps(s));
}

INLINE void fp4_dec32(const uint8_t *p, fp4_tab tab, vf out[2])
{
    /* byte j → the 16-bit word lo(b_j) | hi(b_j) << 8: the 32 codes in column order */
    __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p));
    __m256i c = _mm256_and_si256(_mm256_or_si256(w, _mm256_slli_epi16(w, 4)),
                                 _mm256_set1_epi16(0x0F0F));
    out[0] = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(c)), tab);
    out[1] = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(c, 1)), tab);
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

/* 32 zmm registers: a direct tile holds R1 × nx accumulators, a buffered one
 * R × NX; 4 rows measured faster than 8 for single-row FP8 calls */
#define TILE_R1 4
#define TILE_RG 2
#define TILE_R1_FP4 8
#define TILE_NXD 2
#define TILE_R 4
#define TILE_NX 6
#define TILE_BUF_FROM 3
#define TILE_BUF_FROM_FP8 3
#define TILE_NT 2

#include "matvec-tile.h"

const struct dsv4_kernel_ops dsv4_kernel_ops_avx512 = {
    .isa = DSV4_ISA_AVX512,
    .name = "avx512",
    .matvec_fp8 = matvec_fp8_simd,
    .matvec_fp4 = matvec_fp4_simd,
    .matvec_bf16 = matvec_bf16_simd,
    .matvec_fp8_nanfree = matvec_fp8_nanfree_simd,
};
