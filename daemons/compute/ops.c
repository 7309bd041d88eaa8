/* SPDX-License-Identifier: MIT */
/*
 * Small shared math of the forward pass: the linears over the native weight
 * formats (kernels/matvec-mt.h: output rows split across the pool, each worker
 * running every activation row of the chunk),
 * activation fake-quant wrappers, RMSNorm, RoPE with YaRN, Hadamard.
 * Rounding points follow spec §16.4.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "matvec-mt.h"
#include "util.h"

void engine_track(dsv4_engine *e, void *p, size_t bytes)
{
    e->resident_bytes += bytes;
    if (e->n_allocs == e->cap_allocs) {
        e->cap_allocs = e->cap_allocs ? 2 * e->cap_allocs : 256;
        e->allocs = dsv4_xrealloc(e->allocs, e->cap_allocs * sizeof(*e->allocs));
    }
    e->allocs[e->n_allocs++] = p;
}

/* below this many elements a row-wise job runs on the caller: a dispatch costs a few
 * microseconds, about what 2^15 element-wise operations take */
size_t engine_rows_par_min(void)
{
    const char *s = getenv("DSV4_ROWS_PAR_MIN");
    if (s && *s) {
        char *end;
        unsigned long v = strtoul(s, &end, 10);
        if (*end == '\0')
            return v;
    }
    return 1u << 15;
}

void engine_rows(const dsv4_engine *e, int n, size_t width, dsv4_pool_range_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    if (n == 1 || (size_t)n * width < e->rows_par_min)
        fn(ctx, 0, (unsigned long)n);
    else
        dsv4_pool_for(e->pool, (unsigned long)n, fn, ctx);
}

/* The linears are the threaded kernels of kernels/matvec-mt.c (what bench-kernels
 * measures): rows split over the pool, small calls on the caller. */

void linear_fp8(dsv4_engine *e, const struct dsv4_fp8_weight *w, const float *x, int n, float *y)
{
    dsv4_matvec_fp8_mt(e->pool, w, x, n > 0 ? (size_t)n : 0, y, w->rows);
}

void linear_fp4(dsv4_engine *e, const struct dsv4_fp4_weight *w, const float *x, int n, float *y)
{
    dsv4_matvec_fp4_mt(e->pool, w, x, n > 0 ? (size_t)n : 0, y, w->rows);
}

void linear_bf16(dsv4_engine *e, const struct dsv4_bf16_weight *w, const float *x, int n,
                 float *y)
{
    dsv4_matvec_bf16_mt(e->pool, w, x, n > 0 ? (size_t)n : 0, y, w->rows);
}

void linear_fp8_range(dsv4_engine *e, const struct dsv4_fp8_weight *w, uint32_t begin,
                      uint32_t end, const float *x, int n, float *y, size_t ldy)
{
    dsv4_matvec_fp8_range_mt(e->pool, w, begin, end, x, n > 0 ? (size_t)n : 0, y, ldy);
}

struct rows_job {
    float *y;
    const float *x;
    size_t width;
};

static void quant_range(void *ctx, unsigned long b, unsigned long e)
{
    const struct rows_job *j = ctx;
    memcpy(j->y + b * j->width, j->x + b * j->width, (e - b) * j->width * sizeof(float));
    for (unsigned long r = b; r < e; r++)
        dsv4_fp8_qdq(j->y + r * j->width, j->width, 128);
}

static void quant_rows(dsv4_engine *e, float *xq, const float *x, int n, uint32_t cols)
{
    struct rows_job j = {xq, x, cols};
    engine_rows(e, n, cols, quant_range, &j);
}

static void round_range(void *ctx, unsigned long b, unsigned long e)
{
    const struct rows_job *j = ctx;
    dsv4_bf16_round_vec(j->y + b * j->width, (e - b) * j->width);
}

/* the linears' bf16 outputs */
void round_rows(dsv4_engine *e, float *y, int n, size_t width)
{
    struct rows_job j = {y, NULL, width};
    engine_rows(e, n, width, round_range, &j);
}

void qlinear_fp8(dsv4_engine *e, const struct dsv4_fp8_weight *w, const float *x, int n,
                 float *xq, float *y)
{
    quant_rows(e, xq, x, n, w->cols);
    linear_fp8(e, w, xq, n, y);
    round_rows(e, y, n, w->rows);
}

void qlinear_fp4(dsv4_engine *e, const struct dsv4_fp4_weight *w, const float *x, int n,
                 float *xq, float *y)
{
    quant_rows(e, xq, x, n, w->cols);
    linear_fp4(e, w, xq, n, y);
    round_rows(e, y, n, w->rows);
}

void qlinear_fp4_two(dsv4_engine *e, const struct dsv4_fp4_weight *wa,
                     const struct dsv4_fp4_weight *wb, const float *x, int n, float *xq,
                     float *ya, float *yb)
{
    if (wa->cols != wb->cols) { /* not one input width: each its own fake-quant */
        qlinear_fp4(e, wa, x, n, xq, ya);
        qlinear_fp4(e, wb, x, n, xq, yb);
        return;
    }
    quant_rows(e, xq, x, n, wa->cols);
    linear_fp4(e, wa, xq, n, ya);
    round_rows(e, ya, n, wa->rows);
    linear_fp4(e, wb, xq, n, yb);
    round_rows(e, yb, n, wb->rows);
}

/* qlinear_fp4 (nb = 1) or qlinear_fp4_two (nb = 2) on the calling thread alone: a worker's
 * expert in moe.c's expert-parallel job. The same operations as the pooled forms, so the
 * same bits. */
void qlinear_fp4_here(const struct dsv4_fp4_weight *const *w, int nb, const float *x, int n,
                      float *xq, float *const *y)
{
    if (nb == 2 && w[0]->cols != w[1]->cols) { /* not one input width: each its own fake-quant */
        qlinear_fp4_here(w, 1, x, n, xq, y);
        qlinear_fp4_here(w + 1, 1, x, n, xq, y + 1);
        return;
    }
    struct rows_job q = {xq, x, w[0]->cols};
    quant_range(&q, 0, (unsigned long)n);
    for (int i = 0; i < nb; i++) {
        dsv4_matvec_fp4(w[i], xq, (size_t)n, y[i], w[i]->rows, 0, w[i]->rows);
        struct rows_job r = {y[i], NULL, w[i]->rows};
        round_range(&r, 0, (unsigned long)n);
    }
}

void rmsnorm_rows(float *y, const float *x, const float *w, int n, int d, float eps)
{
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * d;
        float *yr = y + (size_t)r * d;
        /* mean of the fp32 squares carried in double, rounded once (reference fmean) */
        double ss = 0.0;
        for (int i = 0; i < d; i++)
            ss += (double)(xr[i] * xr[i]);
        float ms = (float)(ss / d) + eps;
        float inv = (float)(1.0 / sqrt((double)ms));
        for (int i = 0; i < d; i++)
            yr[i] = dsv4_bf16_round(w ? w[i] * (xr[i] * inv) : xr[i] * inv);
    }
}

void rope_table_init(dsv4_engine *e, struct rope_table *t, double base, bool yarn)
{
    const struct dsv4_config *c = &e->cfg;
    int np = c->rope_head_dim / 2;
    int dim = c->rope_head_dim;
    t->freq = dsv4_xcalloc((size_t)np, sizeof(float));
    engine_track(e, t->freq, (size_t)np * sizeof(float));
    double lo = 0, hi = 0;
    yarn = yarn && c->original_seq_len > 0;
    if (yarn) {
        lo = floor(dim * log(c->original_seq_len / (c->beta_fast * 2 * M_PI)) / (2 * log(base)));
        hi = ceil(dim * log(c->original_seq_len / (c->beta_slow * 2 * M_PI)) / (2 * log(base)));
        lo = DSV4_MAX(lo, 0.0);
        hi = DSV4_MIN(hi, (double)(dim - 1));
        if (lo == hi)
            hi += 0.001;
    }
    /* fp32 steps as in the official precompute_freqs_cis */
    for (int j = 0; j < np; j++) {
        float ex = (float)(2 * j) / (float)dim;
        float f = 1.0f / (float)pow(base, (double)ex);
        if (yarn) {
            float ramp = ((float)j - (float)lo) / (float)(hi - lo);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            float smooth = 1.0f - ramp;
            f = f / (float)c->rope_factor * (1.0f - smooth) + f * smooth;
        }
        t->freq[j] = f;
    }
}

/* pair i's cos and sin at position pos (sin negated for the inverse rotation) */
static void rope_angle(const struct rope_table *t, int i, int64_t pos, bool inverse, float *cs,
                       float *sn)
{
    float ang = (float)pos * t->freq[i];
    *cs = (float)cos((double)ang);
    *sn = (float)sin((double)ang);
    if (inverse)
        *sn = -*sn;
}

static void rope_rotate(float *x, int i, float cs, float sn)
{
    float x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = dsv4_bf16_round(x0 * cs - x1 * sn);
    x[2 * i + 1] = dsv4_bf16_round(x0 * sn + x1 * cs);
}

void rope_apply(const struct rope_table *t, int npairs, float *x, int64_t pos, bool inverse)
{
    for (int i = 0; i < npairs; i++) {
        float cs, sn;
        rope_angle(t, i, pos, inverse, &cs, &sn);
        rope_rotate(x, i, cs, sn);
    }
}

void rope_row_heads(const struct rope_table *t, int npairs, float *x, int H, size_t stride,
                    int64_t pos, bool inverse)
{
    enum { CACHED = 64 };
    if (npairs > CACHED) {
        for (int h = 0; h < H; h++)
            rope_apply(t, npairs, x + (size_t)h * stride, pos, inverse);
        return;
    }
    float cs[CACHED], sn[CACHED];
    for (int i = 0; i < npairs; i++)
        rope_angle(t, i, pos, inverse, &cs[i], &sn[i]);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < npairs; i++)
            rope_rotate(x + (size_t)h * stride, i, cs[i], sn[i]);
}

struct rope_heads_job {
    const struct rope_table *t;
    float *x;
    const int64_t *rpos;
    int npairs, H;
    size_t stride, row;
    bool inverse;
};

static void rope_heads_range(void *ctx, unsigned long b, unsigned long e)
{
    const struct rope_heads_job *j = ctx;
    for (unsigned long r = b; r < e; r++)
        rope_row_heads(j->t, j->npairs, j->x + r * j->row, j->H, j->stride, j->rpos[r],
                       j->inverse);
}

void rope_heads(const dsv4_engine *e, const struct rope_table *t, int npairs, float *x, int n,
                int H, size_t stride, const int64_t *rpos, bool inverse)
{
    struct rope_heads_job j = {t, x, rpos, npairs, H, stride, (size_t)H * stride, inverse};
    engine_rows(e, n, (size_t)H * (size_t)npairs * 2, rope_heads_range, &j);
}

/* the order is defined (and vectorised, same bits) in kernels/: dsv4_dot_f64 */
double dot_f64(const float *a, const float *b, int n)
{
    return dsv4_dot_f64(a, b, n > 0 ? (size_t)n : 0);
}

/* Sylvester-order butterfly in double (exact for bf16 inputs), fp32, scale, bf16. */
void hadamard_inplace(float *x, int n)
{
    double v[1024];
    for (int i = 0; i < n; i++)
        v[i] = x[i];
    for (int h = 1; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                double a = v[j], b = v[j + h];
                v[j] = a + b;
                v[j + h] = a - b;
            }
    float s = (float)(1.0 / sqrt((double)n));
    for (int i = 0; i < n; i++)
        x[i] = dsv4_bf16_round((float)v[i] * s);
}

float sigmoidf_(float x)
{
    return (float)(1.0 / (1.0 + exp(-(double)x)));
}
