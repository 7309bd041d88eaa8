/* SPDX-License-Identifier: MIT */
/*
 * A persistent worker pool owned by the compute path: threads are created
 * once and parked on a futex/condvar between jobs, never created in the token
 * loop. A job is one function run by every worker with its index; the caller
 * takes part as worker 0, and dsv4_pool_run returns when all have finished.
 */
#pragma once

typedef struct dsv4_pool dsv4_pool;

/* n_threads ≥ 1 counts the caller; 1 means run everything inline. */
dsv4_pool *dsv4_pool_new(int n_threads);
dsv4_pool *dsv4_pool_free(dsv4_pool *p);
int dsv4_pool_size(const dsv4_pool *p);

typedef void (*dsv4_pool_fn)(void *ctx, int worker, int n_workers);
void dsv4_pool_run(dsv4_pool *p, dsv4_pool_fn fn, void *ctx);

/* fn(ctx, begin, end) over [0, n) in near-equal contiguous ranges, one per worker (a
 * worker whose range is empty is not called); for element-wise work over rows, whose
 * results do not depend on the split. */
typedef void (*dsv4_pool_range_fn)(void *ctx, unsigned long begin, unsigned long end);
void dsv4_pool_for(dsv4_pool *p, unsigned long n, dsv4_pool_range_fn fn, void *ctx);

/* Split [0, n) into n_workers near-equal ranges aligned to `align`; worker's share. */
void dsv4_pool_split(unsigned long n, unsigned long align, int worker, int n_workers,
                     unsigned long *ret_begin, unsigned long *ret_end);
