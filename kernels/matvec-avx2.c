/* SPDX-License-Identifier: MIT */
/*
 * AVX2 (+FMA, F16C) twins of matvec-c.c, bit-identical to it. A lane of the
 * reference lives in one of two ymm halves (lanes 0-7, 8-15), so the fold and
 * the accumulation order are those of the 16-lane definition. Partial tails
 * go through zero-filled stack copies, which add exact zeros like the masked
 * loads of the AVX-512 twin. Same NaN screening of E4M3 codes as there.
 *
 * E2M1 → fp32: every E2M1 value is an fp16 whose low byte is zero, so one
 * vpshufb on the nibbles yields the high bytes, an unpack with zero builds the
 * fp16 words and vcvtph2ps widens them.
 */
#include <immintrin.h>

#include "kernels-internal.h"

#define INLINE static inline __attribute__((always_inline))

/* a 16-lane value as two ymm halves */
struct v16 {
    __m256 lo, hi;
};

INLINE struct v16 v16_zero(void)
{
    return (struct v16){_mm256_setzero_ps(), _mm256_setzero_ps()};
}

INLINE struct v16 v16_load(const float *p)
{
    return (struct v16){_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
}

INLINE struct v16 v16_fma(struct v16 a, struct v16 b, struct v16 c)
{
    return (struct v16){_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}

INLINE struct v16 v16_fma_s(struct v16 a, __m256 s, struct v16 c)
{
    return (struct v16){_mm256_fmadd_ps(a.lo, s, c.lo), _mm256_fmadd_ps(a.hi, s, c.hi)};
}

INLINE float reduce16(struct v16 v)
{
    __m256 a = _mm256_add_ps(v.lo, v.hi);
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

INLINE struct v16 fp8_decode(__m128i bytes)
{
    __m256i h = _mm256_slli_epi16(_mm256_cvtepi8_epi16(bytes), 7);
    h = _mm256_and_si256(h, _mm256_set1_epi16((short)0xBFFF));
    return (struct v16){_mm256_cvtph_ps(_mm256_castsi256_si128(h)),
                        _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1))};
}

/* up to 16 E8M0 bytes → 2^(e-127) each (byte 0 → 2^-127, 0xFF → NaN) */
INLINE void e8m0_16(const uint8_t *p, uint32_t n, float out[16])
{
    uint8_t b[16] = {0};
    memcpy(b, p, n < 16 ? n : 16);
    __m128i bytes = _mm_loadu_si128((const __m128i *)b);
    for (int h = 0; h < 2; h++) {
        __m256i e = _mm256_cvtepu8_epi32(h ? _mm_unpackhi_epi64(bytes, bytes) : bytes);
        __m256i v = _mm256_slli_epi32(e, 23);
        v = _mm256_blendv_epi8(v, _mm256_set1_epi32(0x00400000),
                               _mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
        v = _mm256_blendv_epi8(v, _mm256_set1_epi32(0x7FC00000),
                               _mm256_cmpeq_epi32(e, _mm256_set1_epi32(255)));
        _mm256_storeu_si256((__m256i *)(out + 8 * h), v);
    }
}

/* Software prefetch into L2 of the same place in the next tile (R rows on),
 * as in the AVX-512 twin. */
#define PREFETCH_NEXT_TILE(p) _mm_prefetch((const char *)(p), _MM_HINT_T1)

/* ---- FP8 ---- */

INLINE void fp8_tile(const struct dsv4_fp8_weight *w, const float *x, float *y, size_t ldy,
                     uint32_t i0, const int R, const int NX)
{
    const uint32_t B = w->block, cols = w->cols, kblocks = (cols + B - 1) / B;
    const uint8_t *wr[4];
    const uint8_t *sr[4];
    struct v16 acc[4][4];
    __m256i nanv[4];
    for (int r = 0; r < R; r++) {
        wr[r] = w->w + (size_t)(i0 + r) * cols;
        sr[r] = w->scale + (size_t)((i0 + r) / B) * kblocks;
        nanv[r] = _mm256_setzero_si256();
        for (int n = 0; n < NX; n++)
            acc[r][n] = v16_zero();
    }
    for (uint32_t kb = 0; kb < kblocks; kb++) {
        const uint32_t k0 = kb * B, m = cols - k0 < B ? cols - k0 : B;
        struct v16 p[4][4];
        for (int r = 0; r < R; r++) {
            for (uint32_t u = 0; u < m; u += 64)
                PREFETCH_NEXT_TILE(wr[r] + k0 + u + (size_t)R * cols);
            for (int n = 0; n < NX; n++)
                p[r][n] = v16_zero();
        }
        uint32_t t = 0;
        for (; t + 16 <= m; t += 16) {
            struct v16 xv[4];
            for (int n = 0; n < NX; n++)
                xv[n] = v16_load(x + (size_t)n * cols + k0 + t);
            for (int r = 0; r < R; r++) {
                __m128i b = _mm_loadu_si128((const __m128i *)(wr[r] + k0 + t));
                nanv[r] = _mm256_max_epu8(nanv[r], _mm256_castsi128_si256(_mm_add_epi8(b, b)));
                struct v16 wv = fp8_decode(b);
                for (int n = 0; n < NX; n++)
                    p[r][n] = v16_fma(wv, xv[n], p[r][n]);
            }
        }
        if (t < m) {
            float xt[4][16] = {{0}};
            struct v16 xv[4];
            for (int n = 0; n < NX; n++) {
                memcpy(xt[n], x + (size_t)n * cols + k0 + t, (m - t) * sizeof(float));
                xv[n] = v16_load(xt[n]);
            }
            for (int r = 0; r < R; r++) {
                uint8_t bt[16] = {0};
                memcpy(bt, wr[r] + k0 + t, m - t);
                __m128i b = _mm_loadu_si128((const __m128i *)bt);
                nanv[r] = _mm256_max_epu8(nanv[r], _mm256_castsi128_si256(_mm_add_epi8(b, b)));
                struct v16 wv = fp8_decode(b);
                for (int n = 0; n < NX; n++)
                    p[r][n] = v16_fma(wv, xv[n], p[r][n]);
            }
        }
        for (int r = 0; r < R; r++) {
            const uint8_t e = sr[r][kb];
            if (e <= DSV4_E8M0_FAST_MAX) {
                const __m256 s = _mm256_set1_ps(dsv4_fp8_fast_scale(e));
                for (int n = 0; n < NX; n++)
                    acc[r][n] = v16_fma_s(p[r][n], s, acc[r][n]);
            } else {
                const __m256 s = _mm256_set1_ps(dsv4_e8m0_to_f32(e)), k256 = _mm256_set1_ps(256.0f);
                for (int n = 0; n < NX; n++) {
                    struct v16 q = {_mm256_mul_ps(p[r][n].lo, k256), _mm256_mul_ps(p[r][n].hi, k256)};
                    acc[r][n] = v16_fma_s(q, s, acc[r][n]);
                }
            }
        }
    }
    for (int r = 0; r < R; r++) {
        __m128i v = _mm256_castsi256_si128(nanv[r]);
        const int has_nan = _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8((char)0xFE))) != 0;
        for (int n = 0; n < NX; n++)
            y[(size_t)n * ldy + i0 + r] = has_nan ? NAN : reduce16(acc[r][n]);
    }
}

#define DISPATCH(tile, w, x, nx, y, ldy, row_begin, row_end, RMAX)                                 \
    for (size_t n0 = 0; n0 < (nx); n0 += 4) {                                                      \
        const size_t nxc = (nx) - n0 < 4 ? (nx) - n0 : 4;                                          \
        const float *xc = (x) + n0 * (w)->cols;                                                    \
        float *yc = (y) + n0 * (ldy);                                                              \
        uint32_t i = (row_begin);                                                                  \
        switch (nxc) {                                                                             \
        case 1:                                                                                    \
            for (; i + (RMAX) <= (row_end); i += (RMAX))                                           \
                tile(w, xc, yc, ldy, i, (RMAX), 1);                                                \
            for (; i < (row_end); i++)                                                             \
                tile(w, xc, yc, ldy, i, 1, 1);                                                     \
            break;                                                                                 \
        case 2:                                                                                    \
            for (; i + 2 <= (row_end); i += 2)                                                     \
                tile(w, xc, yc, ldy, i, 2, 2);                                                     \
            for (; i < (row_end); i++)                                                             \
                tile(w, xc, yc, ldy, i, 1, 2);                                                     \
            break;                                                                                 \
        case 3:                                                                                    \
            for (; i < (row_end); i++)                                                             \
                tile(w, xc, yc, ldy, i, 1, 3);                                                     \
            break;                                                                                 \
        default:                                                                                   \
            for (; i < (row_end); i++)                                                             \
                tile(w, xc, yc, ldy, i, 1, 4);                                                     \
            break;                                                                                 \
        }                                                                                          \
    }

static void matvec_fp8_avx2(const struct dsv4_fp8_weight *w, const float *x, size_t nx, float *y,
                            size_t ldy, uint32_t row_begin, uint32_t row_end)
{
    if (w->block % DSV4_LANES) {
        dsv4_kernel_ops_scalar.matvec_fp8(w, x, nx, y, ldy, row_begin, row_end);
        return;
    }
    DISPATCH(fp8_tile, w, x, nx, y, ldy, row_begin, row_end, 2)
}

/* ---- FP4 ---- */

INLINE __m128i e2m1_fp16_hi_table(void)
{
    return _mm_setr_epi8(0x00, 0x38, 0x3C, 0x3E, 0x40, 0x42, 0x44, 0x46, (char)0x80, (char)0xB8,
                         (char)0xBC, (char)0xBE, (char)0xC0, (char)0xC2, (char)0xC4, (char)0xC6);
}

/* 32 consecutive x → even (k = 2j) and odd (k = 2j+1) lanes */
INLINE void deinterleave32(const float *xb, struct v16 *xe, struct v16 *xo)
{
    const __m256i fix = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
    __m256 a = _mm256_loadu_ps(xb), b = _mm256_loadu_ps(xb + 8);
    __m256 c = _mm256_loadu_ps(xb + 16), d = _mm256_loadu_ps(xb + 24);
    xe->lo = _mm256_permutevar8x32_ps(_mm256_shuffle_ps(a, b, 0x88), fix);
    xo->lo = _mm256_permutevar8x32_ps(_mm256_shuffle_ps(a, b, 0xDD), fix);
    xe->hi = _mm256_permutevar8x32_ps(_mm256_shuffle_ps(c, d, 0x88), fix);
    xo->hi = _mm256_permutevar8x32_ps(_mm256_shuffle_ps(c, d, 0xDD), fix);
}

INLINE void fp4_tile(const struct dsv4_fp4_weight *w, const float *x, float *y, size_t ldy,
                     uint32_t i0, const int R, const int NX)
{
    const uint32_t cols = w->cols, kblocks = cols / 32;
    const __m128i table = e2m1_fp16_hi_table(), low4 = _mm_set1_epi8(0x0F);
    const uint8_t *wr[4];
    const uint8_t *sr[4];
    struct v16 acc[4][4];
    for (int r = 0; r < R; r++) {
        wr[r] = w->w + (size_t)(i0 + r) * (cols / 2);
        sr[r] = w->scale + (size_t)(i0 + r) * kblocks;
        for (int n = 0; n < NX; n++)
            acc[r][n] = v16_zero();
    }
    float sbuf[4][16];
    for (uint32_t kb = 0; kb < kblocks; kb++) {
        if ((kb & 15) == 0)
            for (int r = 0; r < R; r++)
                e8m0_16(sr[r] + kb, kblocks - kb, sbuf[r]);
        struct v16 xe[4], xo[4];
        for (int n = 0; n < NX; n++) {
            /* x arrives pre-split per block: 16 even then 16 odd elements */
            const float *xb = x + (size_t)n * cols + kb * 32;
            xe[n] = v16_load(xb);
            xo[n] = v16_load(xb + 16);
        }
        for (int r = 0; r < R; r++) {
            if ((kb & 3) == 0)
                PREFETCH_NEXT_TILE(wr[r] + kb * 16 + (size_t)R * (cols / 2));
            __m128i b = _mm_loadu_si128((const __m128i *)(wr[r] + kb * 16));
            __m128i he = _mm_shuffle_epi8(table, _mm_and_si128(b, low4));
            __m128i ho = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(b, 4), low4));
            const __m128i z = _mm_setzero_si128();
            struct v16 we = {_mm256_cvtph_ps(_mm_unpacklo_epi8(z, he)),
                             _mm256_cvtph_ps(_mm_unpackhi_epi8(z, he))};
            struct v16 wo = {_mm256_cvtph_ps(_mm_unpacklo_epi8(z, ho)),
                             _mm256_cvtph_ps(_mm_unpackhi_epi8(z, ho))};
            const __m256 s = _mm256_set1_ps(sbuf[r][kb & 15]);
            for (int n = 0; n < NX; n++) {
                struct v16 p = {_mm256_mul_ps(we.lo, xe[n].lo), _mm256_mul_ps(we.hi, xe[n].hi)};
                p = v16_fma(wo, xo[n], p);
                acc[r][n] = v16_fma_s(p, s, acc[r][n]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int n = 0; n < NX; n++)
            y[(size_t)n * ldy + i0 + r] = reduce16(acc[r][n]);
}

/* x split once per call into even/odd halves per 32-block, so the tiles load
 * them directly; done in chunks of activation rows that fit the buffer */
#define FP4_SPLIT_FLOATS 16384

static void fp4_rows(const struct dsv4_fp4_weight *w, const float *xs, size_t nx, float *y,
                     size_t ldy, uint32_t row_begin, uint32_t row_end)
{
    DISPATCH(fp4_tile, w, xs, nx, y, ldy, row_begin, row_end, 4)
}

static void matvec_fp4_avx2(const struct dsv4_fp4_weight *w, const float *x, size_t nx, float *y,
                            size_t ldy, uint32_t row_begin, uint32_t row_end)
{
    float xs[FP4_SPLIT_FLOATS] __attribute__((aligned(32)));
    const size_t cols = w->cols;
    if (cols > FP4_SPLIT_FLOATS) {
        /* beyond any checkpoint shape: split into a heap-free per-row pass */
        for (size_t n = 0; n < nx; n++)
            for (uint32_t i = row_begin; i < row_end; i++)
                dsv4_kernel_ops_scalar.matvec_fp4(w, x + n * cols, 1, y + n * ldy, ldy, i, i + 1);
        return;
    }
    const size_t per = FP4_SPLIT_FLOATS / cols;
    for (size_t c0 = 0; c0 < nx; c0 += per) {
        const size_t nc = nx - c0 < per ? nx - c0 : per;
        for (size_t n = 0; n < nc; n++)
            for (size_t kb = 0; kb < cols / 32; kb++) {
                struct v16 xe, xo;
                deinterleave32(x + (c0 + n) * cols + kb * 32, &xe, &xo);
                float *d = xs + n * cols + kb * 32;
                _mm256_storeu_ps(d, xe.lo);
                _mm256_storeu_ps(d + 8, xe.hi);
                _mm256_storeu_ps(d + 16, xo.lo);
                _mm256_storeu_ps(d + 24, xo.hi);
            }
        fp4_rows(w, xs, nc, y + c0 * ldy, ldy, row_begin, row_end);
    }
}

/* ---- BF16 ---- */

INLINE struct v16 bf16_decode(__m256i h)
{
    __m256i lo = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(h));
    __m256i hi = _mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1));
    return (struct v16){_mm256_castsi256_ps(_mm256_slli_epi32(lo, 16)),
                        _mm256_castsi256_ps(_mm256_slli_epi32(hi, 16))};
}

INLINE void bf16_tile(const struct dsv4_bf16_weight *w, const float *x, float *y, size_t ldy,
                      uint32_t i0, const int R, const int NX)
{
    const uint32_t cols = w->cols;
    const uint16_t *wr[4];
    struct v16 acc[4][4];
    for (int r = 0; r < R; r++) {
        wr[r] = w->w + (size_t)(i0 + r) * cols;
        for (int n = 0; n < NX; n++)
            acc[r][n] = v16_zero();
    }
    uint32_t k = 0;
    for (; k + 16 <= cols; k += 16) {
        struct v16 xv[4];
        for (int n = 0; n < NX; n++)
            xv[n] = v16_load(x + (size_t)n * cols + k);
        for (int r = 0; r < R; r++) {
            if ((k & 31) == 0)
                PREFETCH_NEXT_TILE(wr[r] + k + (size_t)R * cols);
            struct v16 wv = bf16_decode(_mm256_loadu_si256((const __m256i *)(wr[r] + k)));
            for (int n = 0; n < NX; n++)
                acc[r][n] = v16_fma(wv, xv[n], acc[r][n]);
        }
    }
    if (k < cols) {
        float xt[4][16] = {{0}};
        struct v16 xv[4];
        for (int n = 0; n < NX; n++) {
            memcpy(xt[n], x + (size_t)n * cols + k, (cols - k) * sizeof(float));
            xv[n] = v16_load(xt[n]);
        }
        for (int r = 0; r < R; r++) {
            uint16_t bt[16] = {0};
            memcpy(bt, wr[r] + k, (cols - k) * sizeof(uint16_t));
            struct v16 wv = bf16_decode(_mm256_loadu_si256((const __m256i *)bt));
            for (int n = 0; n < NX; n++)
                acc[r][n] = v16_fma(wv, xv[n], acc[r][n]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int n = 0; n < NX; n++)
            y[(size_t)n * ldy + i0 + r] = reduce16(acc[r][n]);
}

static void matvec_bf16_avx2(const struct dsv4_bf16_weight *w, const float *x, size_t nx,
                             float *y, size_t ldy, uint32_t row_begin, uint32_t row_end)
{
    DISPATCH(bf16_tile, w, x, nx, y, ldy, row_begin, row_end, 4)
}

const struct dsv4_kernel_ops dsv4_kernel_ops_avx2 = {
    .isa = DSV4_ISA_AVX2,
    .name = "avx2",
    .matvec_fp8 = matvec_fp8_avx2,
    .matvec_fp4 = matvec_fp4_avx2,
    .matvec_bf16 = matvec_bf16_avx2,
};
