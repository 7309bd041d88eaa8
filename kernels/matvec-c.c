/* SPDX-License-Identifier: MIT */
/*
 * Scalar reference matvecs: the definition every SIMD twin reproduces bit for
 * bit (lane structure in kernels-internal.h, prose in docs/numerics.md).
 * Written for clarity, not speed; fmaf keeps the fused rounding of the twins.
 */
#include "kernels-internal.h"

/* E4M3 byte → fp32 value · 2^-8: the exact fp16 bit pattern the twins build
 * by shifting the byte; NaN codes stay NaN. */
static float fp8_weight(uint8_t b)
{
    return dsv4_e4m3_to_f32(b) * 0x1p-8f;
}

static float fp8_row(const struct dsv4_fp8_weight *w, uint32_t i, const float *x)
{
    const uint32_t B = w->block, kblocks = (w->cols + B - 1) / B;
    const uint8_t *wr = w->w + (size_t)i * w->cols;
    const uint8_t *sr = w->scale + (size_t)(i / B) * kblocks;
    float acc[DSV4_LANES] = {0};
    for (uint32_t kb = 0; kb < kblocks; kb++) {
        uint32_t k0 = kb * B, k1 = k0 + B < w->cols ? k0 + B : w->cols;
        float p[DSV4_LANES] = {0};
        /* lane j = (k − k0) mod 16; each 32-column group from the block's start gives its
         * lanes their upper column first (g + 16 + j, then g + j): the pair order of
         * vdpbf16ps, so that the bf16 twin is this definition too (docs/numerics.md) */
        for (uint32_t g = k0; g < k1; g += 2 * DSV4_LANES)
            for (int half = 1; half >= 0; half--)
                for (uint32_t j = 0; j < DSV4_LANES; j++) {
                    const uint32_t k = g + (uint32_t)half * DSV4_LANES + j;
                    if (k < k1)
                        p[j] = fmaf(fp8_weight(wr[k]), x[k], p[j]);
                }
        uint8_t e = sr[kb];
        if (e <= DSV4_E8M0_FAST_MAX) {
            float s = dsv4_fp8_fast_scale(e);
            for (int j = 0; j < DSV4_LANES; j++)
                acc[j] = fmaf(p[j], s, acc[j]);
        } else {
            float s = dsv4_e8m0_to_f32(e);
            for (int j = 0; j < DSV4_LANES; j++)
                acc[j] = fmaf(p[j] * 256.0f, s, acc[j]);
        }
    }
    return dsv4_lane_reduce(acc);
}

static void matvec_fp8_c(const struct dsv4_fp8_weight *w, const float *x, size_t nx, float *y,
                         size_t ldy, uint32_t row_begin, uint32_t row_end)
{
    for (size_t r = 0; r < nx; r++)
        for (uint32_t i = row_begin; i < row_end; i++)
            y[r * ldy + i] = fp8_row(w, i, x + r * w->cols);
}

/*
 * FP4: per scale block of 32 columns, lane j (0..7) takes the four columns
 * base, base + 1, base + 8, base + 9 with base = 16·(j / 4) + 2·(j % 4) (the
 * pairing of the twins' integer multiply-adds), their unscaled E2M1 products
 * summed in that order, then acc_(j + 8·(block mod 2)) = fma(P, 2^(S-127), acc).
 * On FP8-QDQ'd activations P is exact (docs/numerics.md), so the twins may form
 * it in integers.
 */
static float fp4_row(const struct dsv4_fp4_weight *w, uint32_t i, const float *x)
{
    const uint32_t kblocks = w->cols / 32;
    const uint8_t *wr = w->w + (size_t)i * (w->cols / 2);
    const uint8_t *sr = w->scale + (size_t)i * kblocks;
    float acc[DSV4_LANES] = {0};
    for (uint32_t kb = 0; kb < kblocks; kb++) {
        const uint8_t *b = wr + kb * 16;
        const float *xb = x + kb * 32;
        const float s = dsv4_e8m0_to_f32(sr[kb]);
        for (int j = 0; j < 8; j++) {
            static const uint8_t off[4] = {0, 1, 8, 9};
            const int base = 16 * (j / 4) + 2 * (j % 4);
            float p = 0.0f;
            for (int t = 0; t < 4; t++) {
                const int k = base + off[t];
                const uint8_t code = k & 1 ? b[k / 2] >> 4 : b[k / 2] & 0x0F;
                const float wk = dsv4_e2m1_to_f32(code);
                p = t == 0 ? wk * xb[k] : fmaf(wk, xb[k], p);
            }
            acc[j + 8 * (kb & 1)] = fmaf(p, s, acc[j + 8 * (kb & 1)]);
        }
    }
    return dsv4_lane_reduce(acc);
}

static void matvec_fp4_c(const struct dsv4_fp4_weight *w, const float *x, size_t nx, float *y,
                         size_t ldy, uint32_t row_begin, uint32_t row_end)
{
    for (size_t r = 0; r < nx; r++)
        for (uint32_t i = row_begin; i < row_end; i++)
            y[r * ldy + i] = fp4_row(w, i, x + r * w->cols);
}

static float bf16_row(const struct dsv4_bf16_weight *w, uint32_t i, const float *x)
{
    const uint16_t *wr = w->w + (size_t)i * w->cols;
    float acc[DSV4_LANES] = {0};
    for (uint32_t k = 0; k < w->cols; k++)
        acc[k % DSV4_LANES] = fmaf(dsv4_bf16_to_f32(wr[k]), x[k], acc[k % DSV4_LANES]);
    return dsv4_lane_reduce(acc);
}

static void matvec_bf16_c(const struct dsv4_bf16_weight *w, const float *x, size_t nx, float *y,
                          size_t ldy, uint32_t row_begin, uint32_t row_end)
{
    for (size_t r = 0; r < nx; r++)
        for (uint32_t i = row_begin; i < row_end; i++)
            y[r * ldy + i] = bf16_row(w, i, x + r * w->cols);
}

static double dot_f64_c(const float *a, const float *b, size_t n)
{
    double acc[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            acc[k] += (double)a[i + k] * b[i + k];
    for (; i < n; i++)
        acc[0] += (double)a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

static void dot_f64_many_c(const float *q, const float *const *k, size_t nk, size_t n,
                           double *out)
{
    for (size_t j = 0; j < nk; j++)
        out[j] = dot_f64_c(q, k[j], n);
}

static void axpy_f64_c(double *y, double a, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] += a * (double)x[i];
}

static void dot_f64_heads_c(const float *q, size_t ldq, size_t nh, const float *const *k,
                            size_t nk, size_t n, double *out)
{
    for (size_t h = 0; h < nh; h++)
        dot_f64_many_c(q + h * ldq, k, nk, n, out + h * nk);
}

static void pv_f64_heads_c(const float *p, size_t ldp, size_t nh, const float *const *k,
                           size_t nk, size_t n, double *y, size_t ldy)
{
    for (size_t h = 0; h < nh; h++) {
        double *yh = y + h * ldy;
        for (size_t i = 0; i < n; i++)
            yh[i] = 0.0;
        for (size_t j = 0; j < nk; j++)
            axpy_f64_c(yh, (double)p[h * ldp + j], k[j], n);
    }
}

const struct dsv4_kernel_ops dsv4_kernel_ops_scalar = {
    .isa = DSV4_ISA_SCALAR,
    .name = "scalar",
    .matvec_fp8 = matvec_fp8_c,
    .matvec_fp4 = matvec_fp4_c,
    .matvec_bf16 = matvec_bf16_c,
    .matvec_fp8_nanfree = matvec_fp8_c, /* the reference has nothing to skip */
    .dot_f64 = dot_f64_c,
    .dot_f64_many = dot_f64_many_c,
    .index_scores = dsv4_index_scores_ref,
    .axpy_f64 = axpy_f64_c,
    .dot_f64_heads = dot_f64_heads_c,
    .pv_f64_heads = pv_f64_heads_c,
    .fp8_qdq = dsv4_fp8_qdq_ref,
    .bf16_round = dsv4_bf16_round_vec_ref,
};
