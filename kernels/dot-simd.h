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
 */
#include <immintrin.h>

#include "kernels-internal.h"

#ifdef DOT_ZMM
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
