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

/* Split [0, n) into n_workers near-equal ranges aligned to `align`; worker's share. */
void dsv4_pool_split(unsigned long n, unsigned long align, int worker, int n_workers,
                     unsigned long *ret_begin, unsigned long *ret_end);
