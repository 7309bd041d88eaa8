/* SPDX-License-Identifier: MIT */
/*
 * dsv4_dot_f64 of the SIMD twins (included by matvec-avx2.c and, with DOT_ZMM, by
 * matvec-avx512.c): the definition's eight double chains as two 4-lane vectors (one 8-lane
 * zmm with DOT_ZMM), the products formed in double (exact) and added with separate vaddpd,
 * so each chain sees the definition's additions in its order. The chains' latency bounds
 * one dot; the many form interleaves four dots to fill the adders.
 *
 * dsv4_axpy_f64 (y += a·x in double, the attention's P·V): per element a multiply and an
 * add, each rounded as the scalar code rounds them (no fused multiply-add).
 *
 * The heads forms (the attention's scores and P·V for several heads against the same keys):
 * a register tile of heads × keys (scores) or heads × 8-element groups (P·V), so each key
 * is loaded and widened once per tile, not once per head. There the product of two fp32
 * values is exact in double, so one fused multiply-add rounds exactly where the
 * definition's add does: the same bits.
 */
#include <immintrin.h>

#include "kernels-internal.h"

#ifdef DOT_ZMM
/* eight doubles: one zmm */
typedef __m512d vd8;
INLINE vd8 vd8_zero(void) { return _mm512_setzero_pd(); }
INLINE vd8 vd8_cvt(const float *p) { return _mm512_cvtps_pd(_mm256_loadu_ps(p)); }
INLINE vd8 vd8_load(const double *p) { return _mm512_loadu_pd(p); }
INLINE void vd8_store(double *p, vd8 v) { _mm512_storeu_pd(p, v); }
INLINE vd8 vd8_set1(double d) { return _mm512_set1_pd(d); }
INLINE vd8 vd8_fma(vd8 a, vd8 b, vd8 c) { return _mm512_fmadd_pd(a, b, c); }
/* register tiles (32 zmm): scores 4 heads × 4 keys, P·V 4 heads × 32 elements */
#define DOT_HT 4
#define DOT_JT 4
#define PV_HT 4
#define PV_IT 4

/* elements i .. i + 7 of a and b: the products of chains 0-7, one lane each */
INLINE __m512d dot8z(const float *a, const float *b)
{
    return _mm512_mul_pd(_mm512_cvtps_pd(_mm256_loadu_ps(a)), _mm512_cvtps_pd(_mm256_loadu_ps(b)));
}

/* the tail into chain 0, then the definition's fold */
INLINE double dot_finish_z(__m512d c, const float *a, const float *b, size_t i, size_t n)
{
    double acc[8];
    _mm512_storeu_pd(acc, c);
    for (; i < n; i++)
        acc[0] += (double)a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* dot_finish_z over a vd8 of chains (the heads form) */
INLINE double vd8_finish(vd8 c, const float *a, const float *b, size_t i, size_t n)
{
    return dot_finish_z(c, a, b, i, n);
}

static double dot_f64_simd(const float *a, const float *b, size_t n)
{
    __m512d c = _mm512_setzero_pd();
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        c = _mm512_add_pd(c, dot8z(a + i, b + i));
    return dot_finish_z(c, a, b, i, n);
}

static void dot_f64_many_simd(const float *q, const float *const *k, size_t nk, size_t n,
                              double *out)
{
    size_t j = 0;
    for (; j + 4 <= nk; j += 4) {
        __m512d c[4];
        for (int t = 0; t < 4; t++)
            c[t] = _mm512_setzero_pd();
        size_t i = 0;
        for (; i + 8 <= n; i += 8) {
            const __m512d qd = _mm512_cvtps_pd(_mm256_loadu_ps(q + i));
            for (int t = 0; t < 4; t++)
                c[t] = _mm512_add_pd(c[t], _mm512_mul_pd(qd, _mm512_cvtps_pd(
                                                               _mm256_loadu_ps(k[j + t] + i))));
        }
        for (int t = 0; t < 4; t++)
            out[j + t] = dot_finish_z(c[t], q, k[j + t], i, n);
    }
    for (; j < nk; j++)
        out[j] = dot_f64_simd(q, k[j], n);
}

static void axpy_f64_simd(double *y, double a, const float *x, size_t n)
{
    const __m512d av = _mm512_set1_pd(a);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm512_storeu_pd(y + i, _mm512_add_pd(_mm512_loadu_pd(y + i),
                                              _mm512_mul_pd(av, _mm512_cvtps_pd(
                                                                    _mm256_loadu_ps(x + i)))));
    for (; i < n; i++)
        y[i] += a * (double)x[i];
}
#else
/* eight doubles: two ymm */
typedef struct {
    __m256d lo, hi;
} vd8;
INLINE vd8 vd8_zero(void) { return (vd8){_mm256_setzero_pd(), _mm256_setzero_pd()}; }
INLINE vd8 vd8_cvt(const float *p)
{
    const __m256 v = _mm256_loadu_ps(p);
    return (vd8){_mm256_cvtps_pd(_mm256_castps256_ps128(v)),
                 _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))};
}
INLINE vd8 vd8_load(const double *p) { return (vd8){_mm256_loadu_pd(p), _mm256_loadu_pd(p + 4)}; }
INLINE void vd8_store(double *p, vd8 v)
{
    _mm256_storeu_pd(p, v.lo);
    _mm256_storeu_pd(p + 4, v.hi);
}
INLINE vd8 vd8_set1(double d) { return (vd8){_mm256_set1_pd(d), _mm256_set1_pd(d)}; }
INLINE vd8 vd8_fma(vd8 a, vd8 b, vd8 c)
{
    return (vd8){_mm256_fmadd_pd(a.lo, b.lo, c.lo), _mm256_fmadd_pd(a.hi, b.hi, c.hi)};
}
/* register tiles (16 ymm): scores 2 heads × 2 keys, P·V 2 heads × 16 elements */
#define DOT_HT 2
#define DOT_JT 2
#define PV_HT 2
#define PV_IT 2

/* elements i .. i + 7 of a and b: products of chains 0-3 and 4-7 */
INLINE void dot8(const float *a, const float *b, __m256d *p0, __m256d *p1)
{
    const __m256 va = _mm256_loadu_ps(a), vb = _mm256_loadu_ps(b);
    *p0 = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(va)),
                        _mm256_cvtps_pd(_mm256_castps256_ps128(vb)));
    *p1 = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(va, 1)),
                        _mm256_cvtps_pd(_mm256_extractf128_ps(vb, 1)));
}

/* the tail into chain 0, then the definition's fold */
INLINE double dot_finish(__m256d c0, __m256d c1, const float *a, const float *b, size_t i,
                         size_t n)
{
    double acc[8];
    _mm256_storeu_pd(acc, c0);
    _mm256_storeu_pd(acc + 4, c1);
    for (; i < n; i++)
        acc[0] += (double)a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* dot_finish over a vd8 of chains (the heads form) */
INLINE double vd8_finish(vd8 c, const float *a, const float *b, size_t i, size_t n)
{
    return dot_finish(c.lo, c.hi, a, b, i, n);
}

static double dot_f64_simd(const float *a, const float *b, size_t n)
{
    __m256d c0 = _mm256_setzero_pd(), c1 = _mm256_setzero_pd();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256d p0, p1;
        dot8(a + i, b + i, &p0, &p1);
        c0 = _mm256_add_pd(c0, p0);
        c1 = _mm256_add_pd(c1, p1);
    }
    return dot_finish(c0, c1, a, b, i, n);
}

static void dot_f64_many_simd(const float *q, const float *const *k, size_t nk, size_t n,
                              double *out)
{
    size_t j = 0;
    for (; j + 4 <= nk; j += 4) {
        __m256d c[4][2];
        for (int t = 0; t < 4; t++)
            c[t][0] = c[t][1] = _mm256_setzero_pd();
        size_t i = 0;
        for (; i + 8 <= n; i += 8)
            for (int t = 0; t < 4; t++) {
                __m256d p0, p1;
                dot8(q + i, k[j + t] + i, &p0, &p1);
                c[t][0] = _mm256_add_pd(c[t][0], p0);
                c[t][1] = _mm256_add_pd(c[t][1], p1);
            }
        for (int t = 0; t < 4; t++)
            out[j + t] = dot_finish(c[t][0], c[t][1], q, k[j + t], i, n);
    }
    for (; j < nk; j++)
        out[j] = dot_f64_simd(q, k[j], n);
}

static void axpy_f64_simd(double *y, double a, const float *x, size_t n)
{
    const __m256d av = _mm256_set1_pd(a);
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        _mm256_storeu_pd(y + i, _mm256_add_pd(_mm256_loadu_pd(y + i),
                                              _mm256_mul_pd(av, _mm256_cvtps_pd(
                                                                    _mm_loadu_ps(x + i)))));
    for (; i < n; i++)
        y[i] += a * (double)x[i];
}
#endif

/* ---- several heads against the same keys ---- */

/* q values widened to double at a time, and keys whose chains wait in memory meanwhile */
#define DOT_QC 128
#define DOT_JB 64

/* chains of HT heads × JT keys over elements [0, len) (len a multiple of 8): qd holds the
 * heads' widened q (QC apart), kj the keys at the same offset, acc the chains (key j, head h
 * at acc[(j · DOT_HT + h) · 8]) */
INLINE void dot_tile(const int HT, const int JT, const double *qd, const float *const *kj,
                     size_t len, double *acc)
{
    vd8 c[DOT_HT][DOT_JT];
    for (int h = 0; h < HT; h++)
        for (int t = 0; t < JT; t++)
            c[h][t] = vd8_load(acc + ((size_t)t * DOT_HT + h) * 8);
    for (size_t i = 0; i < len; i += 8) {
        vd8 kd[DOT_JT];
        for (int t = 0; t < JT; t++)
            kd[t] = vd8_cvt(kj[t] + i);
        for (int h = 0; h < HT; h++) {
            const vd8 qv = vd8_load(qd + (size_t)h * DOT_QC + i);
            for (int t = 0; t < JT; t++)
                c[h][t] = vd8_fma(qv, kd[t], c[h][t]);
        }
    }
    for (int h = 0; h < HT; h++)
        for (int t = 0; t < JT; t++)
            vd8_store(acc + ((size_t)t * DOT_HT + h) * 8, c[h][t]);
}

static void dot_f64_heads_simd(const float *q, size_t ldq, size_t nh, const float *const *k,
                               size_t nk, size_t n, double *out)
{
    const size_t n8 = n - n % 8;
    double qd[DOT_HT * DOT_QC] __attribute__((aligned(64)));
    double acc[DOT_JB * DOT_HT * 8] __attribute__((aligned(64)));
    for (size_t h0 = 0; h0 < nh; h0 += DOT_HT) {
        const size_t ht = nh - h0 < DOT_HT ? nh - h0 : DOT_HT;
        for (size_t j0 = 0; j0 < nk; j0 += DOT_JB) {
            const size_t jn = nk - j0 < DOT_JB ? nk - j0 : DOT_JB;
            memset(acc, 0, jn * DOT_HT * 8 * sizeof(double));
            for (size_t i0 = 0; i0 < n8; i0 += DOT_QC) {
                const size_t len = n8 - i0 < DOT_QC ? n8 - i0 : DOT_QC;
                for (size_t h = 0; h < ht; h++)
                    for (size_t i = 0; i < len; i++)
                        qd[h * DOT_QC + i] = (double)q[(h0 + h) * ldq + i0 + i];
                const float *kj[DOT_JT];
                size_t j = 0;
                for (; j + DOT_JT <= jn; j += DOT_JT) {
                    for (int t = 0; t < DOT_JT; t++)
                        kj[t] = k[j0 + j + t] + i0;
                    double *a = acc + j * DOT_HT * 8;
                    if (ht == DOT_HT)
                        dot_tile(DOT_HT, DOT_JT, qd, kj, len, a);
                    else
                        for (size_t h = 0; h < ht; h++)
                            dot_tile(1, DOT_JT, qd + h * DOT_QC, kj, len, a + h * 8);
                }
                for (; j < jn; j++) {
                    kj[0] = k[j0 + j] + i0;
                    double *a = acc + j * DOT_HT * 8;
                    if (ht == DOT_HT)
                        dot_tile(DOT_HT, 1, qd, kj, len, a);
                    else
                        for (size_t h = 0; h < ht; h++)
                            dot_tile(1, 1, qd + h * DOT_QC, kj, len, a + h * 8);
                }
            }
            /* the tail into chain 0, then the definition's fold */
            for (size_t j = 0; j < jn; j++)
                for (size_t h = 0; h < ht; h++)
                    out[(h0 + h) * nk + j0 + j] =
                        vd8_finish(vd8_load(acc + (j * DOT_HT + h) * 8), q + (h0 + h) * ldq,
                                   k[j0 + j], n8, n);
        }
    }
}

/* y of HT heads, elements [i, i + 8·IT), over all nk keys */
INLINE void pv_tile(const int HT, const int IT, const float *p, size_t ldp,
                    const float *const *k, size_t nk, size_t i, double *y, size_t ldy)
{
    vd8 c[PV_HT][PV_IT];
    for (int h = 0; h < HT; h++)
        for (int t = 0; t < IT; t++)
            c[h][t] = vd8_zero();
    for (size_t j = 0; j < nk; j++) {
        vd8 kd[PV_IT];
        for (int t = 0; t < IT; t++)
            kd[t] = vd8_cvt(k[j] + i + 8 * t);
        for (int h = 0; h < HT; h++) {
            const vd8 pb = vd8_set1((double)p[(size_t)h * ldp + j]);
            for (int t = 0; t < IT; t++)
                c[h][t] = vd8_fma(pb, kd[t], c[h][t]);
        }
    }
    for (int h = 0; h < HT; h++)
        for (int t = 0; t < IT; t++)
            vd8_store(y + (size_t)h * ldy + i + 8 * t, c[h][t]);
}

static void pv_f64_heads_simd(const float *p, size_t ldp, size_t nh, const float *const *k,
                              size_t nk, size_t n, double *y, size_t ldy)
{
    const size_t n8 = n - n % 8;
    for (size_t h0 = 0; h0 < nh; h0 += PV_HT) {
        const size_t ht = nh - h0 < PV_HT ? nh - h0 : PV_HT;
        const float *ph = p + h0 * ldp;
        double *yh = y + h0 * ldy;
        size_t i = 0;
        for (; i + 8 * PV_IT <= n8; i += 8 * PV_IT) {
            if (ht == PV_HT)
                pv_tile(PV_HT, PV_IT, ph, ldp, k, nk, i, yh, ldy);
            else
                for (size_t h = 0; h < ht; h++)
                    pv_tile(1, PV_IT, ph + h * ldp, ldp, k, nk, i, yh + h * ldy, ldy);
        }
        for (; i < n8; i += 8) {
            if (ht == PV_HT)
                pv_tile(PV_HT, 1, ph, ldp, k, nk, i, yh, ldy);
            else
                for (size_t h = 0; h < ht; h++)
                    pv_tile(1, 1, ph + h * ldp, ldp, k, nk, i, yh + h * ldy, ldy);
        }
        for (; i < n; i++)
            for (size_t h = 0; h < ht; h++) {
                double s = 0.0;
                for (size_t j = 0; j < nk; j++)
                    s += (double)ph[h * ldp + j] * k[j][i];
                yh[h * ldy + i] = s;
            }
    }
}
