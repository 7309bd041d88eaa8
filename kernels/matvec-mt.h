/* SPDX-License-Identifier: MIT */
/*
 * Thread-parallel matvecs: the output rows of one call split over the workers
 * of a dsv4_pool (common/threadpool.h), each worker running the dispatched
 * kernel on its share (calls under 2^20 multiply-adds or 64 rows run on the
 * caller). Every output element is computed by the same code as in the
 * single-thread call, so the result is bitwise the same for any pool size.
 * This is the engine's path (daemons/compute/ops.c) and what bench-kernels
 * measures. FP8 weights flagged nan_free run the screening-free kernel. Lives in its own library (libdsv4kernels_mt) because it joins
 * kernels/ and common/, which stay independent of each other.
 */
#pragma once

#include "kernels.h"
#include "threadpool.h"

void dsv4_matvec_fp8_mt(dsv4_pool *pool, const struct dsv4_fp8_weight *w, const float *x,
                        size_t nx, float *y, size_t ldy);
/* rows [begin, end) only; y is still indexed by absolute row (y[n·ldy + i]) */
void dsv4_matvec_fp8_range_mt(dsv4_pool *pool, const struct dsv4_fp8_weight *w, uint32_t begin,
                              uint32_t end, const float *x, size_t nx, float *y, size_t ldy);
void dsv4_matvec_fp8_nanfree_mt(dsv4_pool *pool, const struct dsv4_fp8_weight *w, const float *x,
                                size_t nx, float *y, size_t ldy);
void dsv4_matvec_fp4_mt(dsv4_pool *pool, const struct dsv4_fp4_weight *w, const float *x,
                        size_t nx, float *y, size_t ldy);
void dsv4_matvec_bf16_mt(dsv4_pool *pool, const struct dsv4_bf16_weight *w, const float *x,
                         size_t nx, float *y, size_t ldy);
