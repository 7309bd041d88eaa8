/* SPDX-License-Identifier: MIT */
/*
 * Row-split wrappers of the matvecs over the persistent pool (matvec-mt.h):
 * the one threaded path, used by the engine and measured by bench-kernels.
 * Shares are aligned to 16 rows: 64 bytes of fp32 output, so two workers
 * never write the same cache line of y.
 */
#include "matvec-mt.h"

#define ROW_ALIGN 16
/* Below this many multiply-adds (or 64 rows) a pool round trip costs more than it saves. */
#define PARALLEL_MIN_MACS (1u << 20)
#define PARALLEL_MIN_ROWS 64

enum kind { FP8, FP8_NANFREE, FP4, BF16 };

struct job {
    const struct dsv4_kernel_ops *ops;
    enum kind kind;
    const void *w;
    uint32_t begin, end;
    const float *x;
    size_t nx, ldy;
    float *y;
};

static void run_share(void *ctx, int worker, int n_workers)
{
    const struct job *j = ctx;
    unsigned long b, e;
    dsv4_pool_split(j->end - j->begin, ROW_ALIGN, worker, n_workers, &b, &e);
    if (b >= e)
        return;
    const uint32_t rb = j->begin + (uint32_t)b, re = j->begin + (uint32_t)e;
    switch (j->kind) {
    case FP8:
        j->ops->matvec_fp8(j->w, j->x, j->nx, j->y, j->ldy, rb, re);
        break;
    case FP8_NANFREE:
        j->ops->matvec_fp8_nanfree(j->w, j->x, j->nx, j->y, j->ldy, rb, re);
        break;
    case FP4:
        j->ops->matvec_fp4(j->w, j->x, j->nx, j->y, j->ldy, rb, re);
        break;
    case BF16:
        j->ops->matvec_bf16(j->w, j->x, j->nx, j->y, j->ldy, rb, re);
        break;
    }
}

static void run(dsv4_pool *pool, enum kind kind, const void *w, uint32_t cols, uint32_t begin,
                uint32_t end, const float *x, size_t nx, float *y, size_t ldy)
{
    if (nx == 0 || begin >= end)
        return;
    struct job j = {dsv4_kernel_ops(), kind, w, begin, end, x, nx, ldy, y};
    const uint64_t macs = (uint64_t)(end - begin) * cols * nx;
    if (dsv4_pool_size(pool) == 1 || end - begin < PARALLEL_MIN_ROWS || macs < PARALLEL_MIN_MACS)
        run_share(&j, 0, 1);
    else
        dsv4_pool_run(pool, run_share, &j);
}

static enum kind fp8_kind(const struct dsv4_fp8_weight *w)
{
    return w->nan_free ? FP8_NANFREE : FP8;
}

void dsv4_matvec_fp8_mt(dsv4_pool *pool, const struct dsv4_fp8_weight *w, const float *x,
                        size_t nx, float *y, size_t ldy)
{
    run(pool, fp8_kind(w), w, w->cols, 0, w->rows, x, nx, y, ldy);
}

void dsv4_matvec_fp8_range_mt(dsv4_pool *pool, const struct dsv4_fp8_weight *w, uint32_t begin,
                              uint32_t end, const float *x, size_t nx, float *y, size_t ldy)
{
    run(pool, fp8_kind(w), w, w->cols, begin, end, x, nx, y, ldy);
}

void dsv4_matvec_fp8_nanfree_mt(dsv4_pool *pool, const struct dsv4_fp8_weight *w, const float *x,
                                size_t nx, float *y, size_t ldy)
{
    run(pool, FP8_NANFREE, w, w->cols, 0, w->rows, x, nx, y, ldy);
}

void dsv4_matvec_fp4_mt(dsv4_pool *pool, const struct dsv4_fp4_weight *w, const float *x,
                        size_t nx, float *y, size_t ldy)
{
    run(pool, FP4, w, w->cols, 0, w->rows, x, nx, y, ldy);
}

void dsv4_matvec_bf16_mt(dsv4_pool *pool, const struct dsv4_bf16_weight *w, const float *x,
                         size_t nx, float *y, size_t ldy)
{
    run(pool, BF16, w, w->cols, 0, w->rows, x, nx, y, ldy);
}
