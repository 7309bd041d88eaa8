/* SPDX-License-Identifier: MIT */
/*
 * Lightning indexer scores of the SIMD twins (included by matvec-avx2.c and, with
 * INDEX_ZMM, by matvec-avx512.c): bitwise the definition of index-c.c, which says why the
 * integer form is exact. A vector lane is a key: IK keys are scored at once, so each head's
 * sum over heads stays a per-lane chain in head order, as the definition adds it.
 *
 * Per group of IK keys: gather each key's code dwords (eight E2M1 codes), split the nibbles
 * and map them with one byte shuffle to the doubled value + 12 (unsigned, 0..24); then per
 * head and 32-block, eight vpmaddubsw against the head's broadcast signed values sum the
 * block in 16-bit lanes (|sum| ≤ 32·24·12 < 2^15), vpmaddwd folds them to int32 and the
 * head's 12·Σq is taken off. The block sums become the exact double dot with one factor
 * 2^(eq + ek − 256) per block; from there the definition's float/bf16 steps in vector form.
 * A group holding a NaN block or a pair beyond the exact bound goes to the definition.
 */
#include <immintrin.h>

#include "kernels-internal.h"

#ifdef INDEX_ZMM
#define IK 16
typedef __m512i ivi;
typedef __m512 ivs;
typedef __m512d ivd;
typedef __m256 ivh;
INLINE ivi ix_set1(int v) { return _mm512_set1_epi32(v); }
INLINE ivi ix_gather(const uint8_t *base, ivi idx) { return _mm512_i32gather_epi32(idx, base, 1); }
INLINE ivi ix_and(ivi a, ivi b) { return _mm512_and_si512(a, b); }
INLINE ivi ix_srl(ivi a, int n) { return _mm512_srli_epi32(a, (unsigned)n); }
INLINE ivi ix_shuf(ivi t, ivi i) { return _mm512_shuffle_epi8(t, i); }
INLINE ivi ix_maddubs(ivi u, ivi s) { return _mm512_maddubs_epi16(u, s); }
INLINE ivi ix_add16(ivi a, ivi b) { return _mm512_add_epi16(a, b); }
INLINE ivi ix_madd(ivi a, ivi b) { return _mm512_madd_epi16(a, b); }
INLINE ivi ix_sub(ivi a, ivi b) { return _mm512_sub_epi32(a, b); }
INLINE ivi ix_max(ivi a, ivi b) { return _mm512_max_epi32(a, b); }
INLINE ivi ix_min(ivi a, ivi b) { return _mm512_min_epi32(a, b); }
INLINE bool ix_any_gt(ivi a, ivi b) { return _mm512_cmpgt_epi32_mask(a, b) != 0; }
INLINE ivi ix_zero(void) { return _mm512_setzero_si512(); }
INLINE ivi ix_seq(size_t stride)
{
    return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13,
                                                 14, 15), _mm512_set1_epi32((int)stride));
}
INLINE ivi ix_lut(void)
{
    return _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9,
                                                8, 6, 4, 0));
}
INLINE ivd id_lo(ivi a) { return _mm512_cvtepi32_pd(_mm512_castsi512_si256(a)); }
INLINE ivd id_hi(ivi a) { return _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(a, 1)); }
/* 2^(e − 128) of the low / high int32 lanes (e in 1..254) */
INLINE ivd id_pow2(__m256i e)
{
    __m512i b = _mm512_add_epi64(_mm512_cvtepu32_epi64(e), _mm512_set1_epi64(1023 - 128));
    return _mm512_castsi512_pd(_mm512_slli_epi64(b, 52));
}
INLINE ivd id_pow2_lo(ivi e) { return id_pow2(_mm512_castsi512_si256(e)); }
INLINE ivd id_pow2_hi(ivi e) { return id_pow2(_mm512_extracti64x4_epi64(e, 1)); }
INLINE ivd id_set1(double v) { return _mm512_set1_pd(v); }
INLINE ivd id_zero(void) { return _mm512_setzero_pd(); }
INLINE ivd id_add(ivd a, ivd b) { return _mm512_add_pd(a, b); }
INLINE ivd id_mul(ivd a, ivd b) { return _mm512_mul_pd(a, b); }
INLINE ivs is_from_d(ivd lo, ivd hi)
{
    __m512 l = _mm512_castps256_ps512(_mm512_cvtpd_ps(lo));
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(l),
                                               _mm256_castps_pd(_mm512_cvtpd_ps(hi)), 1));
}
INLINE ivd id_from_s_lo(ivs a) { return _mm512_cvtps_pd(_mm512_castps512_ps256(a)); }
INLINE ivd id_from_s_hi(ivs a)
{
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
}
INLINE ivs is_max0(ivs a) { return _mm512_max_ps(a, _mm512_setzero_ps()); }
INLINE ivs is_mul(ivs a, ivs b) { return _mm512_mul_ps(a, b); }
INLINE ivs is_set1(float v) { return _mm512_set1_ps(v); }
INLINE ivi ix_from_s(ivs a) { return _mm512_castps_si512(a); }
INLINE ivs is_from_x(ivi a) { return _mm512_castsi512_ps(a); }
INLINE ivi ix_add(ivi a, ivi b) { return _mm512_add_epi32(a, b); }
INLINE void is_store(float *p, ivs v) { _mm512_storeu_ps(p, v); }
#else
#define IK 8
typedef __m256i ivi;
typedef __m256 ivs;
typedef __m256d ivd;
INLINE ivi ix_set1(int v) { return _mm256_set1_epi32(v); }
INLINE ivi ix_gather(const uint8_t *base, ivi idx)
{
    return _mm256_i32gather_epi32((const int *)(const void *)base, idx, 1);
}
INLINE ivi ix_and(ivi a, ivi b) { return _mm256_and_si256(a, b); }
INLINE ivi ix_srl(ivi a, int n) { return _mm256_srli_epi32(a, n); }
INLINE ivi ix_shuf(ivi t, ivi i) { return _mm256_shuffle_epi8(t, i); }
INLINE ivi ix_maddubs(ivi u, ivi s) { return _mm256_maddubs_epi16(u, s); }
INLINE ivi ix_add16(ivi a, ivi b) { return _mm256_add_epi16(a, b); }
INLINE ivi ix_madd(ivi a, ivi b) { return _mm256_madd_epi16(a, b); }
INLINE ivi ix_sub(ivi a, ivi b) { return _mm256_sub_epi32(a, b); }
INLINE ivi ix_max(ivi a, ivi b) { return _mm256_max_epi32(a, b); }
INLINE ivi ix_min(ivi a, ivi b) { return _mm256_min_epi32(a, b); }
INLINE bool ix_any_gt(ivi a, ivi b) { return !_mm256_testz_si256(_mm256_cmpgt_epi32(a, b),
                                                                  _mm256_cmpgt_epi32(a, b)); }
INLINE ivi ix_zero(void) { return _mm256_setzero_si256(); }
INLINE ivi ix_seq(size_t stride)
{
    return _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                              _mm256_set1_epi32((int)stride));
}
INLINE ivi ix_lut(void)
{
    return _mm256_broadcastsi128_si256(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10,
                                                     9, 8, 6, 4, 0));
}
INLINE ivd id_lo(ivi a) { return _mm256_cvtepi32_pd(_mm256_castsi256_si128(a)); }
INLINE ivd id_hi(ivi a) { return _mm256_cvtepi32_pd(_mm256_extracti128_si256(a, 1)); }
INLINE ivd id_pow2(__m128i e)
{
    __m256i b = _mm256_add_epi64(_mm256_cvtepu32_epi64(e), _mm256_set1_epi64x(1023 - 128));
    return _mm256_castsi256_pd(_mm256_slli_epi64(b, 52));
}
INLINE ivd id_pow2_lo(ivi e) { return id_pow2(_mm256_castsi256_si128(e)); }
INLINE ivd id_pow2_hi(ivi e) { return id_pow2(_mm256_extracti128_si256(e, 1)); }
INLINE ivd id_set1(double v) { return _mm256_set1_pd(v); }
INLINE ivd id_zero(void) { return _mm256_setzero_pd(); }
INLINE ivd id_add(ivd a, ivd b) { return _mm256_add_pd(a, b); }
INLINE ivd id_mul(ivd a, ivd b) { return _mm256_mul_pd(a, b); }
INLINE ivs is_from_d(ivd lo, ivd hi) { return _mm256_set_m128(_mm256_cvtpd_ps(hi),
                                                              _mm256_cvtpd_ps(lo)); }
INLINE ivd id_from_s_lo(ivs a) { return _mm256_cvtps_pd(_mm256_castps256_ps128(a)); }
INLINE ivd id_from_s_hi(ivs a) { return _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)); }
INLINE ivs is_max0(ivs a) { return _mm256_max_ps(a, _mm256_setzero_ps()); }
INLINE ivs is_mul(ivs a, ivs b) { return _mm256_mul_ps(a, b); }
INLINE ivs is_set1(float v) { return _mm256_set1_ps(v); }
INLINE ivi ix_from_s(ivs a) { return _mm256_castps_si256(a); }
INLINE ivs is_from_x(ivi a) { return _mm256_castsi256_ps(a); }
INLINE ivi ix_add(ivi a, ivi b) { return _mm256_add_epi32(a, b); }
INLINE void is_store(float *p, ivs v) { _mm256_storeu_ps(p, v); }
#endif

/* dsv4_bf16_round of finite or infinite lanes (the fast path never holds a NaN) */
INLINE ivs is_bf16(ivs x)
{
    ivi u = ix_from_s(x);
    ivi r = ix_add(u, ix_add(ix_set1(0x7FFF), ix_and(ix_srl(u, 16), ix_set1(1))));
    return is_from_x(ix_and(r, ix_set1((int)0xFFFF0000u)));
}

/* The widest d the twins take (a group's decoded keys live on the stack); wider heads, and
 * the definition's own cases, go to dsv4_index_scores_ref. */
#define INDEX_MAX_D 1024

/* IK keys at `base`, `stride` apart: 0 when scored, -1 when the group needs the definition */
INLINE int index_group(const struct dsv4_index_query *iq, const uint8_t *base, size_t stride,
                       float *out)
{
    const int nh = iq->nh, d = iq->d, nb = d / 32, ns = d / 8;
    const ivi idx = ix_seq(stride), low4 = ix_set1(0x0F0F0F0F), lut = ix_lut();
    /* scales: the dword that ends with block b's byte (in bounds: d/2 ≥ 16 code bytes lead) */
    ivi ek[INDEX_MAX_D / 32];
    ivi emax = ix_zero(), emin = ix_set1(255);
    for (int b = 0; b < nb; b++) {
        ek[b] = ix_srl(ix_gather(base + d / 2 + b - 3, idx), 24);
        emax = ix_max(emax, ek[b]);
        emin = ix_min(emin, ek[b]);
    }
    /* a NaN block (0xFF) or a spread past the exact bound: the definition */
    if (ix_any_gt(emax, ix_set1(254)) ||
        ix_any_gt(ix_sub(emax, emin), ix_set1(dsv4_index_exact_spread(d) - iq->qspread)))
        return -1;
    ivi kd[INDEX_MAX_D / 8][2];
    for (int s = 0; s < ns; s++) {
        ivi v = ix_gather(base + 4 * s, idx);
        kd[s][0] = ix_shuf(lut, ix_and(v, low4));
        kd[s][1] = ix_shuf(lut, ix_and(ix_srl(v, 4), low4));
    }
    const ivi ones = ix_set1(0x00010001);
    ivd tot_lo = id_zero(), tot_hi = id_zero();
    for (int h = 0; h < nh; h++) {
        ivd dot_lo = id_zero(), dot_hi = id_zero();
        for (int b = 0; b < nb; b++) {
            ivi acc = ix_zero();
            for (int s = 4 * b; s < 4 * b + 4; s++) {
                const int32_t *qs = iq->qi + (size_t)s * 2 * (size_t)nh + (size_t)h;
                acc = ix_add16(acc, ix_maddubs(kd[s][0], ix_set1(qs[0])));
                acc = ix_add16(acc, ix_maddubs(kd[s][1], ix_set1(qs[nh])));
            }
            size_t bh = (size_t)b * (size_t)nh + (size_t)h;
            ivi S = ix_sub(ix_madd(acc, ones), ix_set1(iq->qsum12[bh]));
            ivd qs = id_set1(iq->qscale[bh]);
            /* exact: an integer below 2^13 times two powers of two */
            ivd t_lo = id_mul(id_lo(S), id_mul(id_pow2_lo(ek[b]), qs));
            ivd t_hi = id_mul(id_hi(S), id_mul(id_pow2_hi(ek[b]), qs));
            /* exact too (the bound): the sum is the exact dot, as dot_f64's */
            dot_lo = b ? id_add(dot_lo, t_lo) : t_lo;
            dot_hi = b ? id_add(dot_hi, t_hi) : t_hi;
        }
        ivs dot = is_bf16(is_from_d(dot_lo, dot_hi));
        ivs term = is_bf16(is_mul(is_max0(dot), is_set1(iq->wt[h])));
        tot_lo = id_add(tot_lo, id_from_s_lo(term));
        tot_hi = id_add(tot_hi, id_from_s_hi(term));
    }
    is_store(out, is_bf16(is_from_d(tot_lo, tot_hi)));
    return 0;
}

static void index_scores_simd(const struct dsv4_index_query *iq, const uint8_t *keys,
                              size_t stride, size_t nk, float *out)
{
    size_t w = 0;
    if (iq->exact_int && iq->d <= INDEX_MAX_D &&
        (uint64_t)stride * IK + (uint64_t)iq->d < (1u << 31))
        for (; w + IK <= nk; w += IK)
            if (index_group(iq, keys + w * stride, stride, out + w) < 0)
                dsv4_index_scores_ref(iq, keys + w * stride, stride, IK, out + w);
    if (w < nk)
        dsv4_index_scores_ref(iq, keys + w * stride, stride, nk - w, out + w);
}
