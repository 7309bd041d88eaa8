/* SPDX-License-Identifier: MIT */
/*
 * Thread pool: every worker runs every job exactly once, jobs never overlap,
 * the split covers [0, n) exactly with aligned, ordered shares; threaded
 * matvecs give the single-thread bits for every pool size and twin.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "matvec-mt.h"

struct count_job {
    int n_workers;
    _Atomic int calls[16];
    _Atomic int total;
    long seq; /* written by worker 0 only, checked between jobs */
};

static void count_fn(void *ctx, int worker, int n_workers)
{
    struct count_job *j = ctx;
    assert_int_equal(n_workers, j->n_workers);
    assert_true(worker >= 0 && worker < n_workers);
    atomic_fetch_add(&j->calls[worker], 1);
    atomic_fetch_add(&j->total, 1);
}

static void test_pool_runs_every_worker(void **state)
{
    (void)state;
    for (int n = 1; n <= 6; n++) {
        dsv4_pool *p = dsv4_pool_new(n);
        assert_int_equal(dsv4_pool_size(p), n);
        struct count_job j = {.n_workers = n};
        const int jobs = 1000;
        for (int i = 0; i < jobs; i++) {
            dsv4_pool_run(p, count_fn, &j);
            /* the run has returned: every worker has finished this job */
            assert_int_equal(atomic_load(&j.total), (i + 1) * n);
        }
        for (int w = 0; w < n; w++)
            assert_int_equal(atomic_load(&j.calls[w]), jobs);
        p = dsv4_pool_free(p);
        assert_null(p);
    }
    assert_null(dsv4_pool_free(NULL));
}

struct sum_job {
    const int *v;
    unsigned long n;
    long partial[8];
};

static void sum_fn(void *ctx, int worker, int n_workers)
{
    struct sum_job *j = ctx;
    unsigned long b, e;
    dsv4_pool_split(j->n, 1, worker, n_workers, &b, &e);
    long s = 0;
    for (unsigned long i = b; i < e; i++)
        s += j->v[i];
    j->partial[worker] = s;
}

static void test_pool_parked_workers_wake(void **state)
{
    (void)state;
    /* with no spinning, every job has to wake parked workers through the futex */
    setenv("DSV4_POOL_SPIN_US", "0", 1);
    dsv4_pool *p = dsv4_pool_new(4);
    unsetenv("DSV4_POOL_SPIN_US");
    int v[1000];
    for (int i = 0; i < 1000; i++)
        v[i] = i;
    for (int round = 0; round < 500; round++) {
        struct sum_job j = {.v = v, .n = 1000 - (unsigned long)round};
        dsv4_pool_run(p, sum_fn, &j);
        long s = 0;
        for (int w = 0; w < 4; w++)
            s += j.partial[w];
        long n = 1000 - round;
        assert_int_equal(s, n * (n - 1) / 2);
    }
    dsv4_pool_free(p);
}

static void test_split(void **state)
{
    (void)state;
    static const unsigned long ns[] = {0, 1, 5, 15, 16, 17, 100, 129280, 4097};
    static const unsigned long aligns[] = {1, 4, 16, 64};
    for (size_t a = 0; a < 4; a++)
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
            for (int nw = 1; nw <= 9; nw++) {
                unsigned long prev = 0, maxlen = 0, minlen = ~0ul;
                for (int w = 0; w < nw; w++) {
                    unsigned long b, e;
                    dsv4_pool_split(ns[i], aligns[a], w, nw, &b, &e);
                    assert_int_equal(b, prev); /* contiguous, ordered */
                    assert_true(e >= b && e <= ns[i]);
                    if (b < ns[i])
                        assert_int_equal(b % aligns[a], 0);
                    if (e < ns[i])
                        assert_int_equal(e % aligns[a], 0);
                    unsigned long len = (e - b + aligns[a] - 1) / aligns[a];
                    maxlen = len > maxlen ? len : maxlen;
                    minlen = len < minlen ? len : minlen;
                    prev = e;
                }
                assert_int_equal(prev, ns[i]); /* covers [0, n) exactly */
                assert_true(maxlen - minlen <= 1); /* near-equal in align units */
            }
}

struct for_job {
    _Atomic int hits[300];
    _Atomic int calls;
};

static void for_fn(void *ctx, unsigned long b, unsigned long e)
{
    struct for_job *j = ctx;
    assert_true(b < e && e <= 300);
    atomic_fetch_add(&j->calls, 1);
    for (unsigned long i = b; i < e; i++)
        atomic_fetch_add(&j->hits[i], 1);
}

/* dsv4_pool_for: every index exactly once, never an empty range, at most one call per
 * worker (one call when the pool has one thread or n is 1) */
static void test_pool_for(void **state)
{
    (void)state;
    static const unsigned long ns[] = {0, 1, 2, 3, 7, 299, 300};
    for (int nw = 1; nw <= 5; nw++) {
        dsv4_pool *p = dsv4_pool_new(nw);
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
            struct for_job j = {0};
            dsv4_pool_for(p, ns[i], for_fn, &j);
            for (unsigned long k = 0; k < 300; k++)
                assert_int_equal(atomic_load(&j.hits[k]), k < ns[i]);
            int calls = atomic_load(&j.calls);
            unsigned long expect = ns[i] < (unsigned long)nw ? ns[i] : (unsigned long)nw;
            assert_int_equal(calls, ns[i] <= 1 || nw == 1 ? (ns[i] > 0) : (int)expect);
        }
        dsv4_pool_free(p);
    }
}

static uint64_t rng_state = 0x1234567890ABCDEFull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void test_matvec_mt_bitwise(void **state)
{
    (void)state;
    /* ≥ 2^20 multiply-adds and ≥ 64 rows: the wrappers really split over the pool */
    const uint32_t rows = 301, cols = 384;
    const size_t nx = 10;
    uint8_t *w8 = malloc((size_t)rows * cols), *s8 = malloc(3 * 3);
    uint8_t *w4 = malloc((size_t)rows * cols / 2), *s4 = malloc((size_t)rows * cols / 32);
    uint16_t *wb = malloc((size_t)rows * cols * 2);
    float *x = malloc(nx * cols * sizeof(float));
    float *ref = malloc(3 * nx * rows * sizeof(float)), *y = malloc(3 * nx * rows * sizeof(float));
    for (size_t i = 0; i < (size_t)rows * cols; i++) {
        w8[i] = (uint8_t)(rnd() % 0x7F);
        wb[i] = (uint16_t)(0x3C00 + rnd() % 0x800);
    }
    for (size_t i = 0; i < (size_t)rows * cols / 2; i++)
        w4[i] = (uint8_t)rnd();
    for (size_t i = 0; i < 9; i++)
        s8[i] = (uint8_t)(120 + i);
    for (size_t i = 0; i < (size_t)rows * cols / 32; i++)
        s4[i] = (uint8_t)(120 + rnd() % 8);
    for (size_t i = 0; i < nx * cols; i++)
        x[i] = (float)((int)(rnd() % 2001) - 1000) / 256.0f;
    struct dsv4_fp8_weight f8 = {w8, s8, rows, cols, 128, false};
    struct dsv4_fp4_weight f4 = {w4, s4, rows, cols};
    struct dsv4_bf16_weight b16 = {wb, rows, cols};
    for (int isa = 0; isa < _DSV4_ISA_MAX; isa++) {
        const struct dsv4_kernel_ops *ops = dsv4_kernel_ops_for((enum dsv4_isa)isa);
        if (!ops)
            continue;
        assert_int_equal(dsv4_kernels_force((enum dsv4_isa)isa), 0);
        ops->matvec_fp8(&f8, x, nx, ref, rows, 0, rows);
        ops->matvec_fp4(&f4, x, nx, ref + nx * rows, rows, 0, rows);
        ops->matvec_bf16(&b16, x, nx, ref + 2 * nx * rows, rows, 0, rows);
        for (int n = 1; n <= 5; n++) {
            dsv4_pool *p = dsv4_pool_new(n);
            memset(y, 0xFF, 3 * nx * rows * sizeof(float));
            dsv4_matvec_fp8_nanfree_mt(p, &f8, x, nx, y, rows);
            assert_memory_equal(y, ref, nx * rows * sizeof(float));
            dsv4_matvec_fp8_mt(p, &f8, x, nx, y, rows);
            dsv4_matvec_fp4_mt(p, &f4, x, nx, y + nx * rows, rows);
            dsv4_matvec_bf16_mt(p, &b16, x, nx, y + 2 * nx * rows, rows);
            assert_memory_equal(y, ref, 3 * nx * rows * sizeof(float));
            dsv4_pool_free(p);
        }
    }
    free(w8), free(s8), free(w4), free(s4), free(wb), free(x), free(ref), free(y);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_runs_every_worker),
        cmocka_unit_test(test_pool_parked_workers_wake),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_pool_for),
        cmocka_unit_test(test_matvec_mt_bitwise),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
