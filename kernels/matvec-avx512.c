/* SPDX-License-Identifier: MIT */
/*
 * AVX-512 (F, BW, VL) twins of matvec-c.c, bit-identical to it. A lane of
 * the reference is a lane of one zmm. Weight rows are processed R at a time
 * so each x load serves R rows, and up to 4 activation rows share each
 * decoded weight vector (batched calls); every (row, activation row) pair
 * still sees exactly the operation sequence of the single-row call.
 *
 * E4M3 → fp32: the byte shifted into an fp16 pattern is the exact value
 * · 2^-8 (subnormals included), widened by vcvtph2ps; the 2^8 is folded into
 * the block scale. NaN codes would decode as finite, so each block's bytes
 * are also screened (2·b reaches 0xFE only for 0x7F/0xFF) and such rows
 * return NaN, as the reference does.
 */
#include <immintrin.h>

#include "kernels-internal.h"

#define INLINE static inline __attribute__((always_inline))

INLINE float reduce16(__m512 v)
{
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

INLINE __m512 fp8_decode(__m128i bytes)
{
    __m256i h = _mm256_slli_epi16(_mm256_cvtepi8_epi16(bytes), 7);
    h = _mm256_and_si256(h, _mm256_set1_epi16((short)0xBFFF));
    return _mm512_cvtph_ps(h);
}

/* 32 E4M3 bytes → two vectors (bytes 0-15, 16-31), as two fp8_decode calls */
INLINE void fp8_decode32(const uint8_t *p, __m512 *a, __m512 *b)
{
    __m512i h = _mm512_slli_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)p)), 7);
    h = _mm512_and_si512(h, _mm512_set1_epi16((short)0xBFFF));
    *a = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
    *b = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
}

/* 16 E8M0 bytes → 2^(e-127) each, with byte 0 → 2^-127 and 0xFF → NaN */
INLINE __m512 e8m0_16(__m128i bytes)
{
    __m512i e = _mm512_cvtepu8_epi32(bytes);
    __m512i v = _mm512_slli_epi32(e, 23);
    v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()),
                              _mm512_set1_epi32(0x00400000));
    v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(255)),
                              _mm512_set1_epi32(0x7FC00000));
    return _mm512_castsi512_ps(v);
}

/* ---- FP8 ---- */

/* rows per tile for single-row calls: 4 measured faster than 8 */
#define FP8_R1 4

/* Software prefetch into L2 of the same place in the next tile (R rows on):
 * the hardware streamers alone left the FP8 tiles at about half the rate
 * they reach on cached data. */
#define PREFETCH_NEXT_TILE(p) _mm_prefetch((const char *)(p), _MM_HINT_T1)

INLINE void fp8_tile(const struct dsv4_fp8_weight *w, const float *x, float *y, size_t ldy,
                     uint32_t i0, const int R, const int NX)
{
    const uint32_t B = w->block, cols = w->cols, kblocks = (cols + B - 1) / B;
    const uint8_t *wr[8];
    const uint8_t *sr[8];
    __m512 acc[8][4];
    __m512i nanv[8];
    for (int r = 0; r < R; r++) {
        wr[r] = w->w + (size_t)(i0 + r) * cols;
        sr[r] = w->scale + (size_t)((i0 + r) / B) * kblocks;
        nanv[r] = _mm512_setzero_si512();
        for (int n = 0; n < NX; n++)
            acc[r][n] = _mm512_setzero_ps();
    }
    for (uint32_t kb = 0; kb < kblocks; kb++) {
        const uint32_t k0 = kb * B, m = cols - k0 < B ? cols - k0 : B;
        __m512 p[8][4];
        for (int r = 0; r < R; r++) {
            for (uint32_t u = 0; u < m; u += 64)
                PREFETCH_NEXT_TILE(wr[r] + k0 + u + (size_t)R * cols);
            for (int n = 0; n < NX; n++)
                p[r][n] = _mm512_setzero_ps();
        }
        uint32_t t = 0;
        for (; t + 32 <= m; t += 32) {
            __m512 xa[4], xb[4];
            for (int n = 0; n < NX; n++) {
                xa[n] = _mm512_loadu_ps(x + (size_t)n * cols + k0 + t);
                xb[n] = _mm512_loadu_ps(x + (size_t)n * cols + k0 + t + 16);
            }
            for (int r = 0; r < R; r++) {
                __m512 wa, wb;
                fp8_decode32(wr[r] + k0 + t, &wa, &wb);
                for (int n = 0; n < NX; n++)
                    p[r][n] = _mm512_fmadd_ps(wa, xa[n], p[r][n]);
                for (int n = 0; n < NX; n++)
                    p[r][n] = _mm512_fmadd_ps(wb, xb[n], p[r][n]);
            }
        }
        for (; t + 16 <= m; t += 16) {
            __m512 xv[4];
            for (int n = 0; n < NX; n++)
                xv[n] = _mm512_loadu_ps(x + (size_t)n * cols + k0 + t);
            for (int r = 0; r < R; r++) {
                __m512 wv = fp8_decode(_mm_loadu_si128((const __m128i *)(wr[r] + k0 + t)));
                for (int n = 0; n < NX; n++)
                    p[r][n] = _mm512_fmadd_ps(wv, xv[n], p[r][n]);
            }
        }
        if (t < m) {
            const __mmask16 mk = (__mmask16)((1u << (m - t)) - 1);
            __m512 xv[4];
            for (int n = 0; n < NX; n++)
                xv[n] = _mm512_maskz_loadu_ps(mk, x + (size_t)n * cols + k0 + t);
            for (int r = 0; r < R; r++) {
                __m512 wv = fp8_decode(_mm_maskz_loadu_epi8(mk, wr[r] + k0 + t));
                for (int n = 0; n < NX; n++)
                    p[r][n] = _mm512_fmadd_ps(wv, xv[n], p[r][n]);
            }
        }
        for (int r = 0; r < R; r++) {
            uint32_t u = 0;
            for (; u + 64 <= m; u += 64) {
                __m512i b = _mm512_loadu_si512(wr[r] + k0 + u);
                nanv[r] = _mm512_max_epu8(nanv[r], _mm512_add_epi8(b, b));
            }
            if (u < m) {
                __m512i b = _mm512_maskz_loadu_epi8((1ull << (m - u)) - 1, wr[r] + k0 + u);
                nanv[r] = _mm512_max_epu8(nanv[r], _mm512_add_epi8(b, b));
            }
            const uint8_t e = sr[r][kb];
            if (e <= DSV4_E8M0_FAST_MAX) {
                const __m512 s = _mm512_set1_ps(dsv4_fp8_fast_scale(e));
                for (int n = 0; n < NX; n++)
                    acc[r][n] = _mm512_fmadd_ps(p[r][n], s, acc[r][n]);
            } else {
                const __m512 s = _mm512_set1_ps(dsv4_e8m0_to_f32(e));
                for (int n = 0; n < NX; n++)
                    acc[r][n] = _mm512_fmadd_ps(_mm512_mul_ps(p[r][n], _mm512_set1_ps(256.0f)), s,
                                                acc[r][n]);
            }
        }
    }
    for (int r = 0; r < R; r++) {
        const int has_nan = _mm512_cmpeq_epi8_mask(nanv[r], _mm512_set1_epi8((char)0xFE)) != 0;
        for (int n = 0; n < NX; n++)
            y[(size_t)n * ldy + i0 + r] = has_nan ? NAN : reduce16(acc[r][n]);
    }
}

static void matvec_fp8_avx512(const struct dsv4_fp8_weight *w, const float *x, size_t nx, float *y,
                              size_t ldy, uint32_t row_begin, uint32_t row_end)
{
    if (w->block % DSV4_LANES) {
        dsv4_kernel_ops_scalar.matvec_fp8(w, x, nx, y, ldy, row_begin, row_end);
        return;
    }
    for (size_t n0 = 0; n0 < nx; n0 += 4) {
        const size_t nxc = nx - n0 < 4 ? nx - n0 : 4;
        const float *xc = x + n0 * w->cols;
        float *yc = y + n0 * ldy;
        uint32_t i = row_begin;
        switch (nxc) {
        case 1:
            for (; i + FP8_R1 <= row_end; i += FP8_R1)
                fp8_tile(w, xc, yc, ldy, i, FP8_R1, 1);
            for (; i < row_end; i++)
                fp8_tile(w, xc, yc, ldy, i, 1, 1);
            break;
        case 2:
            for (; i + 2 <= row_end; i += 2)
                fp8_tile(w, xc, yc, ldy, i, 2, 2);
            for (; i < row_end; i++)
                fp8_tile(w, xc, yc, ldy, i, 1, 2);
            break;
        case 3:
            for (; i + 2 <= row_end; i += 2)
                fp8_tile(w, xc, yc, ldy, i, 2, 3);
            for (; i < row_end; i++)
                fp8_tile(w, xc, yc, ldy, i, 1, 3);
            break;
        default:
            for (; i + 2 <= row_end; i += 2)
                fp8_tile(w, xc, yc, ldy, i, 2, 4);
            for (; i < row_end; i++)
                fp8_tile(w, xc, yc, ldy, i, 1, 4);
            break;
        }
    }
}

/* ---- FP4 ---- */

INLINE void fp4_tile(const struct dsv4_fp4_weight *w, const float *x, float *y, size_t ldy,
                     uint32_t i0, const int R, const int NX)
{
    const uint32_t cols = w->cols, kblocks = cols / 32;
    const __m512 table = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f,
                                        -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
    const uint8_t *wr[8];
    const uint8_t *sr[8];
    __m512 acc[8][4];
    for (int r = 0; r < R; r++) {
        wr[r] = w->w + (size_t)(i0 + r) * (cols / 2);
        sr[r] = w->scale + (size_t)(i0 + r) * kblocks;
        for (int n = 0; n < NX; n++)
            acc[r][n] = _mm512_setzero_ps();
    }
    float sbuf[8][16];
    for (uint32_t kb = 0; kb < kblocks; kb++) {
        if ((kb & 15) == 0) {
            const uint32_t left = kblocks - kb;
            const __mmask16 mk = left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1);
            for (int r = 0; r < R; r++)
                _mm512_storeu_ps(sbuf[r], e8m0_16(_mm_maskz_loadu_epi8(mk, sr[r] + kb)));
        }
        __m512 xe[4], xo[4];
        for (int n = 0; n < NX; n++) {
            /* x arrives pre-split per block: 16 even then 16 odd elements */
            const float *xb = x + (size_t)n * cols + kb * 32;
            xe[n] = _mm512_loadu_ps(xb);
            xo[n] = _mm512_loadu_ps(xb + 16);
        }
        for (int r = 0; r < R; r++) {
            if ((kb & 3) == 0)
                PREFETCH_NEXT_TILE(wr[r] + kb * 16 + (size_t)R * (cols / 2));
            __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(wr[r] + kb * 16)));
            __m512 we = _mm512_permutexvar_ps(bytes, table);
            __m512 wo = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table);
            const __m512 s = _mm512_set1_ps(sbuf[r][kb & 15]);
            for (int n = 0; n < NX; n++) {
                __m512 p = _mm512_mul_ps(we, xe[n]);
                p = _mm512_fmadd_ps(wo, xo[n], p);
                acc[r][n] = _mm512_fmadd_ps(p, s, acc[r][n]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int n = 0; n < NX; n++)
            y[(size_t)n * ldy + i0 + r] = reduce16(acc[r][n]);
}

static void fp4_rows(const struct dsv4_fp4_weight *w, const float *x, size_t nx, float *y,
                     size_t ldy, uint32_t row_begin, uint32_t row_end)
{
    for (size_t n0 = 0; n0 < nx; n0 += 4) {
        const size_t nxc = nx - n0 < 4 ? nx - n0 : 4;
        const float *xc = x + n0 * w->cols;
        float *yc = y + n0 * ldy;
        uint32_t i = row_begin;
        switch (nxc) {
        case 1:
            for (; i + 8 <= row_end; i += 8)
                fp4_tile(w, xc, yc, ldy, i, 8, 1);
            for (; i < row_end; i++)
                fp4_tile(w, xc, yc, ldy, i, 1, 1);
            break;
        case 2:
            for (; i + 2 <= row_end; i += 2)
                fp4_tile(w, xc, yc, ldy, i, 2, 2);
            for (; i < row_end; i++)
                fp4_tile(w, xc, yc, ldy, i, 1, 2);
            break;
        case 3:
            for (; i + 2 <= row_end; i += 2)
                fp4_tile(w, xc, yc, ldy, i, 2, 3);
            for (; i < row_end; i++)
                fp4_tile(w, xc, yc, ldy, i, 1, 3);
            break;
        default:
            for (; i + 2 <= row_end; i += 2)
                fp4_tile(w, xc, yc, ldy, i, 2, 4);
            for (; i < row_end; i++)
                fp4_tile(w, xc, yc, ldy, i, 1, 4);
            break;
        }
    }
}

/* x split once per call into even/odd halves per 32-block (what the tiles
 * load), in chunks of activation rows that fit the stack buffer */
#define FP4_SPLIT_FLOATS 16384

static void matvec_fp4_avx512(const struct dsv4_fp4_weight *w, const float *x, size_t nx, float *y,
                              size_t ldy, uint32_t row_begin, uint32_t row_end)
{
    float xs[FP4_SPLIT_FLOATS] __attribute__((aligned(64)));
    const size_t cols = w->cols;
    if (cols > FP4_SPLIT_FLOATS) {
        dsv4_kernel_ops_scalar.matvec_fp4(w, x, nx, y, ldy, row_begin, row_end);
        return;
    }
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    const size_t per = FP4_SPLIT_FLOATS / cols;
    for (size_t c0 = 0; c0 < nx; c0 += per) {
        const size_t nc = nx - c0 < per ? nx - c0 : per;
        for (size_t n = 0; n < nc; n++)
            for (size_t kb = 0; kb < cols / 32; kb++) {
                const float *xb = x + (c0 + n) * cols + kb * 32;
                __m512 a = _mm512_loadu_ps(xb), b = _mm512_loadu_ps(xb + 16);
                _mm512_store_ps(xs + n * cols + kb * 32, _mm512_permutex2var_ps(a, even, b));
                _mm512_store_ps(xs + n * cols + kb * 32 + 16, _mm512_permutex2var_ps(a, odd, b));
            }
        fp4_rows(w, xs, nc, y + c0 * ldy, ldy, row_begin, row_end);
    }
}

/* ---- BF16 ---- */

INLINE __m512 bf16_decode(__m256i h)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

INLINE void bf16_tile(const struct dsv4_bf16_weight *w, const float *x, float *y, size_t ldy,
                      uint32_t i0, const int R, const int NX)
{
    const uint32_t cols = w->cols;
    const uint16_t *wr[4];
    __m512 acc[4][4];
    for (int r = 0; r < R; r++) {
        wr[r] = w->w + (size_t)(i0 + r) * cols;
        for (int n = 0; n < NX; n++)
            acc[r][n] = _mm512_setzero_ps();
    }
    uint32_t k = 0;
    for (; k + 16 <= cols; k += 16) {
        __m512 xv[4];
        for (int n = 0; n < NX; n++)
            xv[n] = _mm512_loadu_ps(x + (size_t)n * cols + k);
        for (int r = 0; r < R; r++) {
            if ((k & 31) == 0)
                PREFETCH_NEXT_TILE(wr[r] + k + (size_t)R * cols);
            __m512 wv = bf16_decode(_mm256_loadu_si256((const __m256i *)(wr[r] + k)));
            for (int n = 0; n < NX; n++)
                acc[r][n] = _mm512_fmadd_ps(wv, xv[n], acc[r][n]);
        }
    }
    if (k < cols) {
        const __mmask16 mk = (__mmask16)((1u << (cols - k)) - 1);
        __m512 xv[4];
        for (int n = 0; n < NX; n++)
            xv[n] = _mm512_maskz_loadu_ps(mk, x + (size_t)n * cols + k);
        for (int r = 0; r < R; r++) {
            __m512 wv = bf16_decode(_mm256_maskz_loadu_epi16(mk, wr[r] + k));
            for (int n = 0; n < NX; n++)
                acc[r][n] = _mm512_fmadd_ps(wv, xv[n], acc[r][n]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int n = 0; n < NX; n++)
            y[(size_t)n * ldy + i0 + r] = reduce16(acc[r][n]);
}

static void matvec_bf16_avx512(const struct dsv4_bf16_weight *w, const float *x, size_t nx,
                               float *y, size_t ldy, uint32_t row_begin, uint32_t row_end)
{
    for (size_t n0 = 0; n0 < nx; n0 += 4) {
        const size_t nxc = nx - n0 < 4 ? nx - n0 : 4;
        const float *xc = x + n0 * w->cols;
        float *yc = y + n0 * ldy;
        uint32_t i = row_begin;
        switch (nxc) {
        case 1:
            for (; i + 4 <= row_end; i += 4)
                bf16_tile(w, xc, yc, ldy, i, 4, 1);
            for (; i < row_end; i++)
                bf16_tile(w, xc, yc, ldy, i, 1, 1);
            break;
        case 2:
            for (; i + 2 <= row_end; i += 2)
                bf16_tile(w, xc, yc, ldy, i, 2, 2);
            for (; i < row_end; i++)
                bf16_tile(w, xc, yc, ldy, i, 1, 2);
            break;
        case 3:
            for (; i + 2 <= row_end; i += 2)
                bf16_tile(w, xc, yc, ldy, i, 2, 3);
            for (; i < row_end; i++)
                bf16_tile(w, xc, yc, ldy, i, 1, 3);
            break;
        default:
            for (; i + 2 <= row_end; i += 2)
                bf16_tile(w, xc, yc, ldy, i, 2, 4);
            for (; i < row_end; i++)
                bf16_tile(w, xc, yc, ldy, i, 1, 4);
            break;
        }
    }
}

const struct dsv4_kernel_ops dsv4_kernel_ops_avx512 = {
    .isa = DSV4_ISA_AVX512,
    .name = "avx512",
    .matvec_fp8 = matvec_fp8_avx512,
    .matvec_fp4 = matvec_fp4_avx512,
    .matvec_bf16 = matvec_bf16_avx512,
};
