/* SPDX-License-Identifier: MIT */
/*
 * Kernel benchmark (not a test): matvec time per call at the real Flash
 * shapes for every available twin, on one thread and on all threads, weight
 * GB/s and multiply-adds per second, and their shares of two ceilings
 * measured in the same run: the DRAM read ceiling (a STREAM-like multi-stream
 * SIMD read with prefetch) and the FMA peak (independent FMA chains of the
 * widest vector unit); plus the dispatch latency of the thread pool (and of an
 * OpenMP parallel region, when built with OpenMP, for comparison).
 *
 * Weights come from an arena much larger than the last-level cache (1280 MiB
 * or 3× the reported L3, whichever is larger) and each
 * call uses the next slice of it, so they are read from DRAM as in decode.
 * Each call alternates with a plain read of as many fresh arena bytes, whose
 * rate is the ratio's denominator: on a shared machine the two then see the
 * same load.
 *
 *   bench-kernels [--arena-mb N] [--threads N] [--isa scalar,avx2,avx512,avx512bf16] [--nx N] [--cpu-time]
 *                 [--rows-ratio N]
 *
 * --cpu-time: one-thread calls are also timed in the calling thread's CPU time (an extra
 * "cpu ms" column and the multiply-add rate from it), which time slicing on a loaded
 * machine does not inflate: the figure to compare kernel code by when the machine is
 * shared (it still shares caches and a core's other hyperthread).
 * --rows-ratio N: then a second table, N-row calls ÷ one-row calls of each shape and twin,
 * the two alternated call by call in one thread (issue 20: 16 rows at most 3× one row).
 */
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels.h"
#include "matvec-mt.h"
#include "util.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* ---- DRAM read bandwidth ---- */

struct read_job {
    const uint8_t *buf;
    size_t len;
    uint64_t sink[64];
};

/*
 * The read ceiling: a STREAM-like read of [p, p + len) as READ_STREAMS
 * interleaved sequential streams (each an equal slice), 256-bit loads where the
 * CPU has AVX2, software prefetch PF_AHEAD bytes ahead in every stream. Several
 * streams keep more lines in flight than one; no kernel reads weights faster
 * than this on the same data.
 */
#define READ_STREAMS 8
#define PF_AHEAD 1024

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t read_range_avx2(const uint8_t *p, size_t len)
{
    const size_t slice = len / READ_STREAMS / 64 * 64;
    __m256i acc[READ_STREAMS];
    for (int s = 0; s < READ_STREAMS; s++)
        acc[s] = _mm256_setzero_si256();
    /* unrolled whatever the build's optimisation level: at -O2 GCC kept acc[] in memory
     * and the "ceiling" read 22-24 GB/s where -O3 reads 38 (Zen 5 VM, 2026-12-04) */
    for (size_t i = 0; i < slice; i += 64)
#pragma GCC unroll 8
        for (int s = 0; s < READ_STREAMS; s++) {
            const uint8_t *q = p + (size_t)s * slice + i;
            _mm_prefetch((const char *)(q + PF_AHEAD), _MM_HINT_T0);
            acc[s] = _mm256_add_epi64(acc[s], _mm256_load_si256((const __m256i *)q));
            acc[s] = _mm256_add_epi64(acc[s], _mm256_load_si256((const __m256i *)(q + 32)));
        }
    uint64_t r = 0;
    for (int s = 0; s < READ_STREAMS; s++) {
        uint64_t v[4];
        _mm256_storeu_si256((__m256i *)v, acc[s]);
        r += v[0] + v[1] + v[2] + v[3];
    }
    return r;
}
#endif

static uint64_t read_range(const uint8_t *p, size_t len)
{
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2"))
        return read_range_avx2(p, len);
#endif
    const uint64_t *q = (const uint64_t *)(const void *)p;
    uint64_t a[8] = {0};
    for (size_t i = 0; i + 8 <= len / 8; i += 8)
        for (int k = 0; k < 8; k++)
            a[k] += q[i + k];
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

/* ---- FMA peak: independent fused multiply-add chains, lanes · chains per step ----
 * Every chain starts from its own run-time value and b, c come from memory the compiler cannot
 * see through: chains that start equal are one computation to the compiler, which then keeps
 * one chain and the loop measures the FMA latency times the chain count (this tool printed
 * 147 GMAC/s on a core whose true peak is 96 until 2026-12-04). AVX-512: 16 chains (32
 * registers; 2 ports × latency 4-5 need 8-10); AVX2: 12 (16 registers). */

#define FMA_STEPS 20000000L

static volatile float fma_seed[3] = { 0.5f, 0.999f, 0.0005f };

#if defined(__x86_64__)
#define FMA4(f, i, j, k, l) a##i = f(a##i, b, c), a##j = f(a##j, b, c), a##k = f(a##k, b, c), \
                            a##l = f(a##l, b, c)
/* one operand of every FMA loaded from L1 */
#define FMA4M(f, L, i, j, k, l)                                                                    \
    a##i = f(a##i, L(p + i * VW), c), a##j = f(a##j, L(p + j * VW), c),                            \
    a##k = f(a##k, L(p + k * VW), c), a##l = f(a##l, L(p + l * VW), c)
/* chains a0.. from s, s + 1, ...; their sum, in a fixed tree */
#define CHAINS12(T, SET1)                                                                          \
    T a0 = SET1(s), a1 = SET1(s + 1), a2 = SET1(s + 2), a3 = SET1(s + 3), a4 = SET1(s + 4),        \
      a5 = SET1(s + 5), a6 = SET1(s + 6), a7 = SET1(s + 7), a8 = SET1(s + 8), a9 = SET1(s + 9),    \
      a10 = SET1(s + 10), a11 = SET1(s + 11)
#define CHAINS16(T, SET1)                                                                          \
    CHAINS12(T, SET1), a12 = SET1(s + 12), a13 = SET1(s + 13), a14 = SET1(s + 14),               \
                       a15 = SET1(s + 15)
#define SUM8(ADD, x0, x1, x2, x3, x4, x5, x6, x7)                                                  \
    ADD(ADD(ADD(x0, x1), ADD(x2, x3)), ADD(ADD(x4, x5), ADD(x6, x7)))
#define SUM12(ADD) ADD(SUM8(ADD, a0, a1, a2, a3, a4, a5, a6, a7), ADD(ADD(a8, a9), ADD(a10, a11)))
#define SUM16(ADD) \
    ADD(SUM8(ADD, a0, a1, a2, a3, a4, a5, a6, a7), SUM8(ADD, a8, a9, a10, a11, a12, a13, a14, a15))

__attribute__((target("avx2,fma"))) static float fma_avx2(long steps)
{
    const float s = fma_seed[0];
    CHAINS12(__m256, _mm256_set1_ps);
    const __m256 b = _mm256_set1_ps(fma_seed[1]), c = _mm256_set1_ps(fma_seed[2]);
    for (long i = 0; i < steps; i++) {
        FMA4(_mm256_fmadd_ps, 0, 1, 2, 3);
        FMA4(_mm256_fmadd_ps, 4, 5, 6, 7);
        FMA4(_mm256_fmadd_ps, 8, 9, 10, 11);
    }
    return _mm256_cvtss_f32(SUM12(_mm256_add_ps));
}

__attribute__((target("avx512f"))) static float fma_avx512(long steps)
{
    const float s = fma_seed[0];
    CHAINS16(__m512, _mm512_set1_ps);
    const __m512 b = _mm512_set1_ps(fma_seed[1]), c = _mm512_set1_ps(fma_seed[2]);
    for (long i = 0; i < steps; i++) {
        FMA4(_mm512_fmadd_ps, 0, 1, 2, 3);
        FMA4(_mm512_fmadd_ps, 4, 5, 6, 7);
        FMA4(_mm512_fmadd_ps, 8, 9, 10, 11);
        FMA4(_mm512_fmadd_ps, 12, 13, 14, 15);
    }
    return _mm512_reduce_add_ps(SUM16(_mm512_add_ps));
}

/* the same chains with one operand of every FMA loaded from L1 (a buffer filled at run time,
 * so its loads cannot be folded): the bound of a kernel that loads a vector per FMA */
static float fma_l1_buf[8 * 16 * 16] __attribute__((aligned(64)));

__attribute__((target("avx2,fma"))) static float fma_l1_avx2(long steps)
{
    enum { VW = 8 };
    const float s = fma_seed[0];
    CHAINS12(__m256, _mm256_set1_ps);
    const __m256 c = _mm256_set1_ps(fma_seed[2]);
    for (long i = 0; i < steps; i++) {
        const float *p = fma_l1_buf + (i & 7) * 12 * VW;
        FMA4M(_mm256_fmadd_ps, _mm256_load_ps, 0, 1, 2, 3);
        FMA4M(_mm256_fmadd_ps, _mm256_load_ps, 4, 5, 6, 7);
        FMA4M(_mm256_fmadd_ps, _mm256_load_ps, 8, 9, 10, 11);
    }
    return _mm256_cvtss_f32(SUM12(_mm256_add_ps));
}

__attribute__((target("avx512f"))) static float fma_l1_avx512(long steps)
{
    enum { VW = 16 };
    const float s = fma_seed[0];
    CHAINS16(__m512, _mm512_set1_ps);
    const __m512 c = _mm512_set1_ps(fma_seed[2]);
    for (long i = 0; i < steps; i++) {
        const float *p = fma_l1_buf + (i & 7) * 16 * VW;
        FMA4M(_mm512_fmadd_ps, _mm512_load_ps, 0, 1, 2, 3);
        FMA4M(_mm512_fmadd_ps, _mm512_load_ps, 4, 5, 6, 7);
        FMA4M(_mm512_fmadd_ps, _mm512_load_ps, 8, 9, 10, 11);
        FMA4M(_mm512_fmadd_ps, _mm512_load_ps, 12, 13, 14, 15);
    }
    return _mm512_reduce_add_ps(SUM16(_mm512_add_ps));
}
#endif

struct fma_job {
    int lanes;
    int l1;         /* one operand from L1 */
    long steps;
    volatile float sink[64];
};

static void fma_share(void *ctx, int worker, int n_workers)
{
    struct fma_job *j = ctx;
    (void)n_workers;
#if defined(__x86_64__)
    if (j->l1)
        j->sink[worker] = j->lanes == 16 ? fma_l1_avx512(j->steps) : fma_l1_avx2(j->steps);
    else
        j->sink[worker] = j->lanes == 16 ? fma_avx512(j->steps) : fma_avx2(j->steps);
#else
    j->sink[worker] = 0;
#endif
}

/* multiply-adds per second of the widest FMA this CPU has, on every worker of
 * the pool (best of 3), with one operand from L1 if l1; 0 when none */
static double fma_peak_gmacs(dsv4_pool *pool, int l1, int *lanes_out)
{
    int lanes = 0;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f"))
        lanes = 16;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        lanes = 8;
#endif
    *lanes_out = lanes;
    if (!lanes)
        return 0;
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(fma_l1_buf); i++) /* small multipliers: no overflow */
        fma_l1_buf[i] = fma_seed[2] * (float)(i % 7 + 1);
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        struct fma_job j = {.lanes = lanes, .l1 = l1, .steps = FMA_STEPS / (lanes / 8)};
        uint64_t t0 = dsv4_now_ns();
        dsv4_pool_run(pool, fma_share, &j);
        double g = (double)j.steps * (lanes == 16 ? 16 : 12) * lanes * dsv4_pool_size(pool) / (double)(dsv4_now_ns() - t0);
        if (g > best)
            best = g;
    }
    return best;
}

static void read_share(void *ctx, int worker, int n_workers)
{
    struct read_job *j = ctx;
    unsigned long b, e;
    dsv4_pool_split(j->len, 4096, worker, n_workers, &b, &e);
    j->sink[worker] = read_range(j->buf + b, e - b);
}

/* best of 3 full passes, GB/s */
static double dram_read_gbs(dsv4_pool *pool, const uint8_t *buf, size_t len)
{
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        struct read_job j = {.buf = buf, .len = len};
        uint64_t t0 = dsv4_now_ns();
        dsv4_pool_run(pool, read_share, &j);
        double gbs = (double)len / (double)(dsv4_now_ns() - t0);
        if (gbs > best)
            best = gbs;
    }
    return best;
}

/* ---- pool dispatch latency ---- */

static void empty_job(void *ctx, int worker, int n_workers)
{
    (void)ctx, (void)worker, (void)n_workers;
}

static double pool_latency_us(dsv4_pool *pool)
{
    const int n = 20000;
    for (int i = 0; i < 1000; i++)
        dsv4_pool_run(pool, empty_job, NULL);
    uint64_t t0 = dsv4_now_ns();
    for (int i = 0; i < n; i++)
        dsv4_pool_run(pool, empty_job, NULL);
    return (double)(dsv4_now_ns() - t0) / n / 1000.0;
}

#ifdef _OPENMP
static double omp_latency_us(int threads)
{
    const int n = 20000;
    volatile int sink = 0;
    for (int i = 0; i < 1000; i++) {
#pragma omp parallel num_threads(threads)
        sink += 0;
    }
    uint64_t t0 = dsv4_now_ns();
    for (int i = 0; i < n; i++) {
#pragma omp parallel num_threads(threads)
        sink += 0;
    }
    (void)sink;
    return (double)(dsv4_now_ns() - t0) / n / 1000.0;
}
#endif

/* ---- matvec shapes ---- */

enum kind { FP8, FP8_NANFREE, FP4, BF16 };

struct shape {
    const char *name;
    enum kind kind;
    uint32_t rows, cols;
};

static const struct shape shapes[] = {
    {"expert w1/w3 FP4 2048x4096", FP4, 2048, 4096},
    {"expert w2 FP4 4096x2048", FP4, 4096, 2048},
    {"wq_b FP8 32768x1024", FP8, 32768, 1024},
    {"wo_b FP8 4096x8192", FP8, 4096, 8192},
    {"wq_b FP8 nanfree", FP8_NANFREE, 32768, 1024},
    {"wo_b FP8 nanfree", FP8_NANFREE, 4096, 8192},
    {"head BF16 129280x4096", BF16, 129280, 4096},
};

static size_t weight_bytes(const struct shape *s)
{
    switch (s->kind) {
    case FP8:
    case FP8_NANFREE:
        return (size_t)s->rows * s->cols;
    case FP4:
        return (size_t)s->rows * s->cols / 2;
    default:
        return (size_t)s->rows * s->cols * 2;
    }
}

static size_t scale_bytes(const struct shape *s)
{
    switch (s->kind) {
    case FP8:
    case FP8_NANFREE:
        return (size_t)((s->rows + 127) / 128) * ((s->cols + 127) / 128);
    case FP4:
        return (size_t)s->rows * (s->cols / 32);
    default:
        return 0;
    }
}

struct ctx {
    uint8_t *arena;
    size_t arena_len;
    uint8_t *scales;
    size_t scales_len;
    size_t next; /* next arena offset */
    size_t next_s;
};

static void call_once(struct ctx *c, const struct shape *s, dsv4_pool *pool,
                      const struct dsv4_kernel_ops *ops, const float *x, size_t nx, float *y)
{
    size_t wb = weight_bytes(s), sb = scale_bytes(s);
    if (c->next + wb > c->arena_len)
        c->next = 0;
    if (c->next_s + sb > c->scales_len)
        c->next_s = 0;
    const uint8_t *w = c->arena + c->next, *sc = c->scales + c->next_s;
    c->next = (c->next + wb + 4095) & ~(size_t)4095;
    c->next_s = (c->next_s + sb + 63) & ~(size_t)63;
    switch (s->kind) {
    case FP8: {
        struct dsv4_fp8_weight wt = {w, sc, s->rows, s->cols, 128, false};
        if (pool)
            dsv4_matvec_fp8_mt(pool, &wt, x, nx, y, s->rows);
        else
            ops->matvec_fp8(&wt, x, nx, y, s->rows, 0, s->rows);
        break;
    }
    case FP8_NANFREE: {
        struct dsv4_fp8_weight wt = {w, sc, s->rows, s->cols, 128, false};
        if (pool)
            dsv4_matvec_fp8_nanfree_mt(pool, &wt, x, nx, y, s->rows);
        else
            ops->matvec_fp8_nanfree(&wt, x, nx, y, s->rows, 0, s->rows);
        break;
    }
    case FP4: {
        struct dsv4_fp4_weight wt = {w, sc, s->rows, s->cols};
        if (pool)
            dsv4_matvec_fp4_mt(pool, &wt, x, nx, y, s->rows);
        else
            ops->matvec_fp4(&wt, x, nx, y, s->rows, 0, s->rows);
        break;
    }
    default: {
        struct dsv4_bf16_weight wt = {(const uint16_t *)(const void *)w, s->rows, s->cols};
        if (pool)
            dsv4_matvec_bf16_mt(pool, &wt, x, nx, y, s->rows);
        else
            ops->matvec_bf16(&wt, x, nx, y, s->rows, 0, s->rows);
        break;
    }
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* a plain read of the next weight-sized slice of the arena: the DRAM baseline
 * measured under the same conditions as the kernel call next to it */
static void read_once(struct ctx *c, const struct shape *s, dsv4_pool *pool)
{
    size_t wb = weight_bytes(s) + scale_bytes(s);
    if (c->next + wb > c->arena_len)
        c->next = 0;
    struct read_job j = {.buf = c->arena + c->next, .len = wb};
    c->next = (c->next + wb + 4095) & ~(size_t)4095;
    dsv4_pool_run(pool, read_share, &j);
}

struct timing {
    double call_s, read_s, cpu_s; /* medians (cpu_s: thread CPU time of the call, 1 thread) */
};

static bool cpu_time;

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* kernel calls alternating with plain reads of as many bytes, ≥ 5 pairs and
 * ≥ 0.4 s; medians of both */
static struct timing time_calls(struct ctx *c, const struct shape *s, dsv4_pool *pool,
                                dsv4_pool *read_pool, const struct dsv4_kernel_ops *ops,
                                const float *x, size_t nx, float *y)
{
    static uint64_t t[2048], r[2048], u[2048];
    int n = 0;
    call_once(c, s, pool, ops, x, nx, y); /* warm-up */
    uint64_t start = dsv4_now_ns();
    while (n < (int)DSV4_ARRAY_SIZE(t) && (n < 5 || dsv4_now_ns() - start < 400000000ull)) {
        uint64_t t0 = dsv4_now_ns();
        read_once(c, s, read_pool);
        uint64_t t1 = dsv4_now_ns(), c1 = thread_cpu_ns();
        call_once(c, s, pool, ops, x, nx, y);
        u[n] = thread_cpu_ns() - c1;
        r[n] = t1 - t0;
        t[n++] = dsv4_now_ns() - t1;
    }
    qsort(t, (size_t)n, sizeof t[0], cmp_u64);
    qsort(r, (size_t)n, sizeof r[0], cmp_u64);
    qsort(u, (size_t)n, sizeof u[0], cmp_u64);
    return (struct timing){(double)t[n / 2] * 1e-9, (double)r[n / 2] * 1e-9,
                           pool ? 0.0 : (double)u[n / 2] * 1e-9};
}

/*
 * The issue-20 goal "N rows cost at most k× one row" measured side by side: one-thread calls
 * of 1 row and of N rows alternate (each on fresh weights), ≥ 9 pairs and ≥ 0.6 s; returns
 * the medians of their thread CPU times and the median of the pairs' ratios, so a VM's
 * minutes-long swings hit both sides alike.
 */
struct ratio {
    double one_s, many_s, ratio;
};

static struct ratio time_ratio(struct ctx *c, const struct shape *s,
                               const struct dsv4_kernel_ops *ops, const float *x, size_t nrows,
                               float *y)
{
    static uint64_t a[1024], b[1024];
    static double q[1024];
    int n = 0;
    call_once(c, s, NULL, ops, x, 1, y);
    call_once(c, s, NULL, ops, x, nrows, y);
    uint64_t start = dsv4_now_ns();
    while (n < (int)DSV4_ARRAY_SIZE(a) && (n < 9 || dsv4_now_ns() - start < 600000000ull)) {
        uint64_t c0 = thread_cpu_ns();
        call_once(c, s, NULL, ops, x, 1, y);
        uint64_t c1 = thread_cpu_ns();
        call_once(c, s, NULL, ops, x, nrows, y);
        uint64_t c2 = thread_cpu_ns();
        a[n] = c1 - c0;
        b[n] = c2 - c1;
        q[n] = a[n] ? (double)b[n] / (double)a[n] : 0.0;
        n++;
    }
    qsort(a, (size_t)n, sizeof a[0], cmp_u64);
    qsort(b, (size_t)n, sizeof b[0], cmp_u64);
    qsort(q, (size_t)n, sizeof q[0], cmp_double);
    return (struct ratio){(double)a[n / 2] * 1e-9, (double)b[n / 2] * 1e-9, q[n / 2]};
}

static void hardware_line(int threads)
{
    char model[256];
    dsv4_cpu_model(model, sizeof model);
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    printf("hardware: %s, %ld cpus online, %d threads used, L3 %ld KiB, ISA:", model,
           sysconf(_SC_NPROCESSORS_ONLN), threads, l3 > 0 ? l3 / 1024 : -1);
    for (int i = 0; i < _DSV4_ISA_MAX; i++)
        if (dsv4_kernel_ops_for((enum dsv4_isa)i))
            printf(" %s", dsv4_kernel_ops_for((enum dsv4_isa)i)->name);
    printf("\n");
}

int main(int argc, char **argv)
{
    size_t arena_mb = 1280, nx = 1, ratio_rows = 0;
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int want[_DSV4_ISA_MAX];
    for (int k = 0; k < _DSV4_ISA_MAX; k++)
        want[k] = k != DSV4_ISA_SCALAR;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--arena-mb") && i + 1 < argc) {
            arena_mb = strtoul(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--nx") && i + 1 < argc) {
            nx = strtoul(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--rows-ratio") && i + 1 < argc) {
            ratio_rows = strtoul(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--cpu-time")) {
            cpu_time = true;
        } else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
            /* a comma-separated list of exact names */
            char list[128];
            snprintf(list, sizeof list, ",%s,", argv[++i]);
            for (int k = 0; k < _DSV4_ISA_MAX; k++) {
                /* the twin's own name (this tool also builds against older trees, for
                 * tools/bench-kernels-ab.sh SAME_TOOL=1) */
                const struct dsv4_kernel_ops *o = dsv4_kernel_ops_for((enum dsv4_isa)k);
                char item[32];
                snprintf(item, sizeof item, ",%s,", o ? o->name : "?");
                want[k] = o && strstr(list, item) != NULL;
            }
        } else {
            fprintf(stderr,
                    "usage: %s [--arena-mb N] [--threads N] [--isa scalar,avx2,avx512,avx512bf16] [--nx N]"
                    " [--cpu-time] [--rows-ratio N]\n",
                    argv[0]);
            return 2;
        }
    }
    if (threads < 1)
        threads = 1;
    if (nx < 1)
        nx = 1;
    hardware_line(threads);

    /* ≫ LLC: at least 3× the reported L3 (some VMs report the whole socket's) and
     * larger than the head */
    size_t head = weight_bytes(&shapes[DSV4_ARRAY_SIZE(shapes) - 1]);
    size_t arena_len = arena_mb << 20;
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0 && arena_len < 3 * (size_t)l3)
        arena_len = 3 * (size_t)l3;
    if (arena_len < head + (64u << 20))
        arena_len = head + (64u << 20);
    struct ctx c = {.arena_len = arena_len, .scales_len = 64u << 20};
    c.arena = dsv4_xaligned_alloc(4096, arena_len);
    c.scales = dsv4_xaligned_alloc(4096, c.scales_len);
    /* sane finite data for every format: bf16 words in [2^-15, 2) of either
     * sign with the low bit clear, so no byte is an E4M3 NaN code */
    uint16_t *a16 = (uint16_t *)(void *)c.arena;
    for (size_t i = 0; i < arena_len / 2; i++)
        a16[i] = (uint16_t)(((rnd() & 0x87FE) | 0x3800));
    for (size_t i = 0; i < c.scales_len; i++)
        c.scales[i] = (uint8_t)(120 + rnd() % 10);
    /* room for the --rows-ratio calls too */
    const size_t nxa = ratio_rows > nx ? ratio_rows : nx;
    float *x = dsv4_xaligned_alloc(64, nxa * 8192 * sizeof(float));
    for (size_t i = 0; i < nxa * 8192; i++)
        x[i] = (float)((int)(rnd() % 2001) - 1000) / 1000.0f;
    dsv4_fp8_qdq(x, nxa * 8192, 128);
    float *y = dsv4_xaligned_alloc(64, nxa * 129280 * sizeof(float));

    dsv4_pool *one = dsv4_pool_new(1), *all = dsv4_pool_new(threads);
    double bw1 = dram_read_gbs(one, c.arena, arena_len);
    double bwn = dram_read_gbs(all, c.arena, arena_len);
    int lanes;
    double pk1 = fma_peak_gmacs(one, 0, &lanes), pkn = fma_peak_gmacs(all, 0, &lanes);
    double pl1 = fma_peak_gmacs(one, 1, &lanes);
    printf("read ceiling (%d-stream SIMD read with prefetch, %zu MiB, best of 3): 1 thread %.2f GB/s,"
           " %d threads %.2f GB/s\n",
           READ_STREAMS, arena_len >> 20, bw1, threads, bwn);
    printf("FMA peak (%d-lane fp32 FMAs, %d independent chains, best of 3): 1 thread %.2f GMAC/s, %d"
           " threads %.2f GMAC/s\n",
           lanes, lanes == 16 ? 16 : 12, pk1, threads, pkn);
    printf("FMA with one operand loaded from L1 (the bound of a kernel that loads a vector per FMA):"
           " 1 thread %.2f GMAC/s = %.2f of the peak\n",
           pl1, pk1 > 0 ? pl1 / pk1 : 0.0);
    printf("pool dispatch latency (empty job, %d threads): %.2f us\n", threads,
           pool_latency_us(all));
#ifdef _OPENMP
    printf("OpenMP parallel region latency (empty, %d threads): %.2f us\n", threads,
           omp_latency_us(threads));
#endif
    printf("nx = %zu activation row(s); GB/s counts weight + scale bytes once per call; of read ="
           " GB/s over\nplain reads of as many fresh bytes alternated with the calls (same"
           " conditions); of ceiling = GB/s\nover the read ceiling above; GMAC/s = rows·cols·nx"
           " per second, of peak = over the FMA peak\n\n",
           nx);
    if (cpu_time)
        printf("cpu ms = the one-thread call's median thread CPU time; cpu GMAC/s from it\n\n");
    printf("| shape | isa | threads | ms | GB/s | of read | of ceiling | GMAC/s | of peak |%s\n",
           cpu_time ? " cpu ms | cpu GMAC/s |" : "");
    printf("|---|---|---:|---:|---:|---:|---:|---:|---:|%s\n", cpu_time ? "---:|---:|" : "");
    for (size_t si = 0; si < DSV4_ARRAY_SIZE(shapes); si++) {
        const struct shape *s = &shapes[si];
        const double bytes = (double)(weight_bytes(s) + scale_bytes(s));
        const double macs = (double)s->rows * s->cols * (double)nx;
        for (int isa = 0; isa < _DSV4_ISA_MAX; isa++) {
            const struct dsv4_kernel_ops *ops = dsv4_kernel_ops_for((enum dsv4_isa)isa);
            if (!ops || !want[isa])
                continue;
            dsv4_kernels_force((enum dsv4_isa)isa);
            for (int pass = 0; pass < 2; pass++) {
                const int thr = pass ? threads : 1;
                if (pass && threads == 1)
                    break;
                struct timing t = pass ? time_calls(&c, s, all, all, ops, x, nx, y)
                                       : time_calls(&c, s, NULL, one, ops, x, nx, y);
                const double g = bytes / t.call_s * 1e-9, r = bytes / t.read_s * 1e-9;
                const double m = macs / t.call_s * 1e-9, ceil = pass ? bwn : bw1;
                const double peak = pass ? pkn : pk1;
                printf("| %s | %s | %d | %.3f | %.2f | %.2f | %.2f | %.2f | %.2f |", s->name,
                       ops->name, thr, t.call_s * 1e3, g, g / r, g / ceil, m,
                       peak > 0 ? m / peak : 0.0);
                if (cpu_time && t.cpu_s > 0)
                    printf(" %.3f | %.2f |", t.cpu_s * 1e3, macs / t.cpu_s * 1e-9);
                else if (cpu_time)
                    printf(" | |");
                printf("\n");
                fflush(stdout);
            }
        }
    }
    if (ratio_rows > 1) {
        printf("\n%zu rows ÷ 1 row, one thread, thread CPU time: calls of 1 and of %zu rows"
               " alternated (fresh weights each), medians of >= 9 pairs and >= 0.6 s; ratio = the"
               " median of the pairs' ratios (issue 20's goal for 16 rows: <= 3)\n\n",
               ratio_rows, ratio_rows);
        printf("| shape | isa | 1 row cpu ms | %zu rows cpu ms | ratio | GMAC/s at %zu | of peak |\n"
               "|---|---|---:|---:|---:|---:|---:|\n",
               ratio_rows, ratio_rows);
        for (size_t si = 0; si < DSV4_ARRAY_SIZE(shapes); si++) {
            const struct shape *s = &shapes[si];
            const double macs = (double)s->rows * s->cols * (double)ratio_rows;
            for (int isa = 0; isa < _DSV4_ISA_MAX; isa++) {
                const struct dsv4_kernel_ops *ops = dsv4_kernel_ops_for((enum dsv4_isa)isa);
                if (!ops || !want[isa])
                    continue;
                dsv4_kernels_force((enum dsv4_isa)isa);
                const struct ratio r = time_ratio(&c, s, ops, x, ratio_rows, y);
                const double m = r.many_s > 0 ? macs / r.many_s * 1e-9 : 0.0;
                printf("| %s | %s | %.3f | %.3f | %.2f | %.2f | %.2f |\n", s->name, ops->name,
                       r.one_s * 1e3, r.many_s * 1e3, r.ratio, m, pk1 > 0 ? m / pk1 : 0.0);
                fflush(stdout);
            }
        }
    }
    dsv4_pool_free(one);
    dsv4_pool_free(all);
    free(c.arena);
    free(c.scales);
    free(x);
    free(y);
    return 0;
}
