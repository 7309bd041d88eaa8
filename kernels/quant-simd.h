/* SPDX-License-Identifier: MIT */
/*
 * The activation fake-quant (dsv4_fp8_qdq) and the bf16 rounding (dsv4_bf16_round_vec) of the
 * SIMD twins, included by matvec-avx2.c and, with QUANT_ZMM, by matvec-avx512.c. The scalar
 * code in formats.c is the definition; these run its integer rounding tricks lane by lane
 * (the same additions, masks and multiplies by powers of two), so the bits are the same:
 * test_quant_twins compares them on every class of input. Both ran scalar at 4.4 % of a
 * prefill step (perf, 2026-12-05).
 */
#include <immintrin.h>

#include "kernels-internal.h"

#ifdef QUANT_ZMM
#define QL 16
typedef __m512 qf;
typedef __m512i qi;
typedef __mmask16 qm;
INLINE qf qf_load(const float *p) { return _mm512_loadu_ps(p); }
INLINE void qf_store(float *p, qf v) { _mm512_storeu_ps(p, v); }
INLINE qf qf_set1(float f) { return _mm512_set1_ps(f); }
INLINE qf qf_add(qf a, qf b) { return _mm512_add_ps(a, b); }
INLINE qf qf_sub(qf a, qf b) { return _mm512_sub_ps(a, b); }
INLINE qf qf_mul(qf a, qf b) { return _mm512_mul_ps(a, b); }
INLINE qf qf_and(qf a, qf b) /* (_mm512_and_ps needs AVX512DQ) */
{
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}
INLINE qf qf_max(qf a, qf b) { return _mm512_max_ps(a, b); }
INLINE qf qf_min(qf a, qf b) { return _mm512_min_ps(a, b); }
INLINE qi qi_of(qf v) { return _mm512_castps_si512(v); }
INLINE qf qf_of(qi v) { return _mm512_castsi512_ps(v); }
INLINE qi qi_set1(uint32_t u) { return _mm512_set1_epi32((int)u); }
INLINE qi qi_and(qi a, qi b) { return _mm512_and_si512(a, b); }
INLINE qi qi_or(qi a, qi b) { return _mm512_or_si512(a, b); }
INLINE qi qi_add(qi a, qi b) { return _mm512_add_epi32(a, b); }
INLINE qi qi_srl(qi a, int s) { return _mm512_srli_epi32(a, (unsigned)s); }
/* lanes where a < b (both below 2^31) */
INLINE qm qi_lt(qi a, qi b) { return _mm512_cmplt_epi32_mask(a, b); }
/* lanes that are NaN, or (beyond) where |v| is not ≤ the largest finite float */
INLINE qm qf_nan(qf v) { return _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q); }
INLINE qm qf_beyond(qf a, qf lim) { return _mm512_cmp_ps_mask(a, lim, _CMP_NLE_UQ); }
INLINE int qm_any(qm m) { return m != 0; }
INLINE qi qi_pick(qm m, qi yes, qi no) { return _mm512_mask_blend_epi32(m, no, yes); }
INLINE float qf_hmax(qf v) { return _mm512_reduce_max_ps(v); }
#else
#define QL 8
typedef __m256 qf;
typedef __m256i qi;
typedef __m256i qm;
INLINE qf qf_load(const float *p) { return _mm256_loadu_ps(p); }
INLINE void qf_store(float *p, qf v) { _mm256_storeu_ps(p, v); }
INLINE qf qf_set1(float f) { return _mm256_set1_ps(f); }
INLINE qf qf_add(qf a, qf b) { return _mm256_add_ps(a, b); }
INLINE qf qf_sub(qf a, qf b) { return _mm256_sub_ps(a, b); }
INLINE qf qf_mul(qf a, qf b) { return _mm256_mul_ps(a, b); }
INLINE qf qf_and(qf a, qf b) { return _mm256_and_ps(a, b); }
INLINE qf qf_max(qf a, qf b) { return _mm256_max_ps(a, b); }
INLINE qf qf_min(qf a, qf b) { return _mm256_min_ps(a, b); }
INLINE qi qi_of(qf v) { return _mm256_castps_si256(v); }
INLINE qf qf_of(qi v) { return _mm256_castsi256_ps(v); }
INLINE qi qi_set1(uint32_t u) { return _mm256_set1_epi32((int)u); }
INLINE qi qi_and(qi a, qi b) { return _mm256_and_si256(a, b); }
INLINE qi qi_or(qi a, qi b) { return _mm256_or_si256(a, b); }
INLINE qi qi_add(qi a, qi b) { return _mm256_add_epi32(a, b); }
INLINE qi qi_srl(qi a, int s) { return _mm256_srli_epi32(a, s); }
INLINE qm qi_lt(qi a, qi b) { return _mm256_cmpgt_epi32(b, a); }
INLINE qm qf_nan(qf v) { return _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)); }
INLINE qm qf_beyond(qf a, qf lim)
{
    return _mm256_castps_si256(_mm256_cmp_ps(a, lim, _CMP_NLE_UQ));
}
INLINE int qm_any(qm m) { return !_mm256_testz_si256(m, m); }
INLINE qi qi_pick(qm m, qi yes, qi no) { return _mm256_blendv_epi8(no, yes, m); }
INLINE float qf_hmax(qf v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}
#endif

/* e4m3_round of formats.c on QL lanes (|q| ≤ 448, no NaN) */
INLINE qf e4m3_round_v(qf q)
{
    const qi u = qi_of(q), sign = qi_and(u, qi_set1(0x80000000u)),
             a = qi_and(u, qi_set1(0x7FFFFFFFu));
    /* below 2^-6: multiples of 2^-9, RNE by adding 2^14 */
    const qf k = qf_of(qi_set1(0x46800000u)); /* 16384.0f */
    const qi small = qi_of(qf_sub(qf_add(qf_of(a), k), k));
    /* else RNE to 3 mantissa bits */
    const qi big = qi_and(qi_add(qi_add(a, qi_set1(0x7FFFFu)), qi_and(qi_srl(a, 20), qi_set1(1))),
                          qi_set1(0xFFF00000u));
    return qf_of(qi_or(qi_pick(qi_lt(a, qi_set1(0x3C800000u)), small, big), sign));
}

/* one block of m values (m % QL == 0) */
INLINE void fp8_qdq_block(float *v, size_t m)
{
    const qf lim = qf_of(qi_set1(0x7F7FFFFFu)), absm = qf_of(qi_set1(0x7FFFFFFFu));
    qf mx = qf_of(qi_set1(0));
    int bad = 0;
    for (size_t i = 0; i < m; i += QL) {
        const qf a = qf_and(qf_load(v + i), absm);
        bad |= qm_any(qf_beyond(a, lim));
        mx = qf_max(mx, a);
    }
    if (bad) { /* a NaN or an infinity: the block is NaN */
        for (size_t i = 0; i < m; i++)
            v[i] = NAN;
        return;
    }
    float amax = qf_hmax(mx);
    if (amax < 1e-4f)
        amax = 1e-4f;
    const int e = dsv4_ceil_log2(amax * (1.0f / 448.0f));
    const qf s = qf_set1(dsv4_exp2i(e)), inv = qf_set1(dsv4_exp2i(-e));
    const qf hi = qf_set1(448.0f), lo = qf_set1(-448.0f);
    for (size_t i = 0; i < m; i += QL) {
        const qf q = qf_min(qf_max(qf_mul(qf_load(v + i), inv), lo), hi);
        qf_store(v + i, qf_mul(e4m3_round_v(q), s));
    }
}

static void fp8_qdq_simd(float *x, size_t n, size_t block)
{
    for (size_t b0 = 0; b0 < n; b0 += block) {
        const size_t m = n - b0 < block ? n - b0 : block;
        if (m % QL)
            dsv4_fp8_qdq_ref(x + b0, m, m); /* the definition, this block alone */
        else
            fp8_qdq_block(x + b0, m);
    }
}

static void bf16_round_simd(float *x, size_t n)
{
    size_t i = 0;
    for (; i + QL <= n; i += QL) {
        const qf v = qf_load(x + i);
        const qi u = qi_of(v), hi = qi_set1(0xFFFF0000u);
        /* NaN: quiet, sign and payload top kept (dsv4_f32_to_bf16) */
        const qi nan = qi_or(qi_and(u, hi), qi_set1(0x00400000u));
        const qi r = qi_and(qi_add(qi_add(u, qi_set1(0x7FFFu)), qi_and(qi_srl(u, 16), qi_set1(1))),
                            hi);
        qf_store(x + i, qf_of(qi_pick(qf_nan(v), nan, r)));
    }
    for (; i < n; i++)
        x[i] = dsv4_bf16_round(x[i]);
}
