/* SPDX-License-Identifier: MIT */
/*
 * Row-split wrappers of the matvecs over the persistent pool (matvec-mt.h).
 * Shares are aligned to 16 rows: 64 bytes of fp32 output, so two workers
 * never write the same cache line of y.
 */
#include "matvec-mt.h"

#define ROW_ALIGN 16

enum kind { FP8, FP8_NANFREE, FP4, BF16 };

struct job {
    const struct dsv4_kernel_ops *ops;
    enum kind kind;
    const void *w;
    uint32_t rows;
    const float *x;
    size_t nx, ldy;
    float *y;
};

static void run_share(void *ctx, int worker, int n_workers)
{
    const struct job *j = ctx;
    unsigned long b, e;
    dsv4_pool_split(j->rows, ROW_ALIGN, worker, n_workers, &b, &e);
    if (b >= e)
        return;
    switch (j->kind) {
    case FP8:
        j->ops->matvec_fp8(j->w, j->x, j->nx, j->y, j->ldy, (uint32_t)b, (uint32_t)e);
        break;
    case FP8_NANFREE:
        j->ops->matvec_fp8_nanfree(j->w, j->x, j->nx, j->y, j->ldy, (uint32_t)b, (uint32_t)e);
        break;
    case FP4:
        j->ops->matvec_fp4(j->w, j->x, j->nx, j->y, j->ldy, (uint32_t)b, (uint32_t)e);
        break;
    case BF16:
        j->ops->matvec_bf16(j->w, j->x, j->nx, j->y, j->ldy, (uint32_t)b, (uint32_t)e);
        break;
    }
}

static void run(dsv4_pool *pool, enum kind kind, const void *w, uint32_t rows, const float *x,
                size_t nx, float *y, size_t ldy)
{
    struct job j = {dsv4_kernel_ops(), kind, w, rows, x, nx, ldy, y};
    dsv4_pool_run(pool, run_share, &j);
}

void dsv4_matvec_fp8_mt(dsv4_pool *pool, const struct dsv4_fp8_weight *w, const float *x,
                        size_t nx, float *y, size_t ldy)
{
    run(pool, FP8, w, w->rows, x, nx, y, ldy);
}

void dsv4_matvec_fp8_nanfree_mt(dsv4_pool *pool, const struct dsv4_fp8_weight *w, const float *x,
                                size_t nx, float *y, size_t ldy)
{
    run(pool, FP8_NANFREE, w, w->rows, x, nx, y, ldy);
}

void dsv4_matvec_fp4_mt(dsv4_pool *pool, const struct dsv4_fp4_weight *w, const float *x,
                        size_t nx, float *y, size_t ldy)
{
    run(pool, FP4, w, w->rows, x, nx, y, ldy);
}

void dsv4_matvec_bf16_mt(dsv4_pool *pool, const struct dsv4_bf16_weight *w, const float *x,
                         size_t nx, float *y, size_t ldy)
{
    run(pool, BF16, w, w->rows, x, nx, y, ldy);
}
