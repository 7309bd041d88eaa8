/* SPDX-License-Identifier: MIT */
/*
 * Persistent worker pool (threadpool.h). A decode step runs hundreds of small
 * jobs, so dispatch must cost microseconds: workers spin briefly on a job
 * generation counter after each job (the next one usually follows at once)
 * and only then park on a futex; the caller wakes the futex only when someone
 * is parked. No OpenMP: peers.md records libgomp eating half the cycles of a
 * peer, and its barrier/spin policy is not ours to tune (docs/ARCHITECTURE.md).
 *
 * One caller at a time: dsv4_pool_run is not reentrant and must not be called
 * concurrently on the same pool.
 */
#include "threadpool.h"

#include <limits.h>
#include <stdbool.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util.h"

struct worker {
    struct dsv4_pool *pool;
    int index;
    pthread_t thread;
};

struct dsv4_pool {
    int n;
    struct worker *workers; /* [1, n) are threads; index 0 is the caller */
    uint64_t spin_ns;

    dsv4_pool_fn fn;
    void *ctx;
    bool stop;

    _Alignas(64) _Atomic uint32_t gen;    /* futex word: bumped once per job */
    _Atomic int sleepers;                 /* workers parked on gen */
    _Alignas(64) _Atomic uint32_t pending; /* futex word: workers still running the job */
    _Atomic int caller_parked;
};

static void futex_wait(_Atomic uint32_t *addr, uint32_t val)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr, int n)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Spin up to spin_ns for *addr to leave `val`; returns its new value or `val`. */
static uint32_t spin_while_equal(_Atomic uint32_t *addr, uint32_t val, uint64_t spin_ns)
{
    uint64_t start = 0;
    for (unsigned i = 0;; i++) {
        uint32_t v = atomic_load_explicit(addr, memory_order_acquire);
        if (v != val)
            return v;
        if ((i & 63) == 63) {
            uint64_t now = dsv4_now_ns();
            if (!start)
                start = now;
            else if (now - start >= spin_ns)
                return val;
            /* let a descheduled peer run when the machine is oversubscribed */
            if ((i & 1023) == 1023)
                sched_yield();
        }
        cpu_relax();
    }
}

static void *worker_main(void *arg)
{
    struct worker *wk = arg;
    struct dsv4_pool *p = wk->pool;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g = spin_while_equal(&p->gen, seen, p->spin_ns);
        while (g == seen) {
            atomic_fetch_add(&p->sleepers, 1);
            futex_wait(&p->gen, seen);
            atomic_fetch_sub(&p->sleepers, 1);
            g = atomic_load_explicit(&p->gen, memory_order_acquire);
        }
        seen = g;
        if (p->stop)
            return NULL;
        p->fn(p->ctx, wk->index, p->n);
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_parked))
            futex_wake(&p->pending, 1);
    }
}

static uint64_t spin_ns_from_env(void)
{
    const char *s = getenv("DSV4_POOL_SPIN_US");
    if (s && *s) {
        char *end;
        unsigned long us = strtoul(s, &end, 10);
        if (*end == '\0' && us <= 1000000)
            return (uint64_t)us * 1000;
    }
    /* 1 ms: a parked worker on a VM can take milliseconds to run again (its idle vCPU is
     * descheduled by the host): with 100 µs, a 512-row prefill step's worker parked in the
     * caller's short serial stretches and started 60-115 jobs per 16 000 more than 0.5 ms
     * late (0.2-0.4 s per 11 s of steps; sched_switch traces, 2026-12-05); from 300 µs up
     * the step ran 1.06-1.16x faster, in one process, the spins alternated per rep */
    return 1000 * 1000;
}

dsv4_pool *dsv4_pool_new(int n_threads)
{
    if (n_threads < 1)
        n_threads = 1;
    struct dsv4_pool *p = dsv4_xaligned_alloc(64, sizeof(*p));
    *p = (struct dsv4_pool){.n = n_threads, .spin_ns = spin_ns_from_env()};
    p->workers = dsv4_xcalloc((size_t)n_threads, sizeof(*p->workers));
    for (int i = 1; i < n_threads; i++) {
        p->workers[i] = (struct worker){.pool = p, .index = i};
        int rc = pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]);
        if (rc != 0)
            dsv4_die("thread pool: cannot create worker %d of %d (error %d)", i, n_threads, rc);
    }
    return p;
}

static void run_workers(dsv4_pool *p)
{
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_seq_cst);
    if (atomic_load(&p->sleepers) > 0)
        futex_wake(&p->gen, INT_MAX);
}

dsv4_pool *dsv4_pool_free(dsv4_pool *p)
{
    if (!p)
        return NULL;
    if (p->n > 1) {
        p->stop = true;
        run_workers(p);
        for (int i = 1; i < p->n; i++)
            pthread_join(p->workers[i].thread, NULL);
    }
    free(p->workers);
    free(p);
    return NULL;
}

int dsv4_pool_size(const dsv4_pool *p)
{
    return p->n;
}

void dsv4_pool_run(dsv4_pool *p, dsv4_pool_fn fn, void *ctx)
{
    if (p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->pending, (uint32_t)(p->n - 1), memory_order_relaxed);
    run_workers(p); /* seq_cst bump publishes fn, ctx and pending */
    fn(ctx, 0, p->n);
    for (;;) {
        uint32_t v = atomic_load_explicit(&p->pending, memory_order_acquire);
        if (v == 0)
            break;
        v = spin_while_equal(&p->pending, v, p->spin_ns);
        if (v == 0)
            break;
        atomic_store(&p->caller_parked, 1);
        v = atomic_load(&p->pending);
        if (v != 0)
            futex_wait(&p->pending, v);
        atomic_store(&p->caller_parked, 0);
    }
}

struct pool_for {
    dsv4_pool_range_fn fn;
    void *ctx;
    unsigned long n;
};

static void pool_for_worker(void *ctx, int worker, int n_workers)
{
    const struct pool_for *j = ctx;
    unsigned long b, e;
    dsv4_pool_split(j->n, 1, worker, n_workers, &b, &e);
    if (b < e)
        j->fn(j->ctx, b, e);
}

void dsv4_pool_for(dsv4_pool *p, unsigned long n, dsv4_pool_range_fn fn, void *ctx)
{
    if (n == 0)
        return;
    if (p->n == 1 || n == 1) {
        fn(ctx, 0, n);
        return;
    }
    struct pool_for j = {fn, ctx, n};
    dsv4_pool_run(p, pool_for_worker, &j);
}

void dsv4_pool_split(unsigned long n, unsigned long align, int worker, int n_workers,
                     unsigned long *ret_begin, unsigned long *ret_end)
{
    if (align == 0)
        align = 1;
    if (n_workers < 1)
        n_workers = 1;
    unsigned long units = n / align + (n % align != 0);
    unsigned long per = units / (unsigned long)n_workers, rem = units % (unsigned long)n_workers;
    unsigned long w = (unsigned long)worker;
    unsigned long ub = w * per + (w < rem ? w : rem);
    unsigned long ue = ub + per + (w < rem);
    unsigned long b = ub * align, e = ue * align;
    *ret_begin = b < n ? b : n;
    *ret_end = e < n ? e : n;
}
