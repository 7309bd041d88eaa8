/* SPDX-License-Identifier: MIT */
/*
 * Small helpers every part of dsv4 may use: allocation that dies loudly on
 * out-of-memory (the engine cannot make progress without its buffers, and a
 * NULL check at every call site hides the real error), checked size
 * arithmetic for anything derived from untrusted files, and a few macros.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#define DSV4_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define DSV4_MIN(a, b) ((a) < (b) ? (a) : (b))
#define DSV4_MAX(a, b) ((a) > (b) ? (a) : (b))
#define DSV4_ALIGN_UP(x, a) (((x) + ((a) - 1)) / (a) * (a))
#define DSV4_CONTAINER_OF(p, type, member) \
    ((type *)(void *)((char *)(p) - offsetof(type, member)))
#define DSV4_STRINGIFY_(x) #x
#define DSV4_STRINGIFY(x) DSV4_STRINGIFY_(x)
#define DSV4_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define DSV4_NORETURN __attribute__((noreturn))
#define DSV4_LIKELY(x) __builtin_expect(!!(x), 1)
#define DSV4_UNLIKELY(x) __builtin_expect(!!(x), 0)

DSV4_NORETURN void dsv4_die(const char *fmt, ...) DSV4_PRINTF(1, 2);

void *dsv4_xmalloc(size_t n);
void *dsv4_xcalloc(size_t count, size_t size);
void *dsv4_xrealloc(void *p, size_t n);
char *dsv4_xstrdup(const char *s);
/* Aligned allocation (alignment a power of two ≥ sizeof(void *)); free with free(). */
void *dsv4_xaligned_alloc(size_t alignment, size_t n);

/* Overflow-checked arithmetic: return false on overflow, *ret untouched then. */
static inline bool dsv4_mul_u64(uint64_t a, uint64_t b, uint64_t *ret)
{
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return false;
    *ret = r;
    return true;
}

static inline bool dsv4_add_u64(uint64_t a, uint64_t b, uint64_t *ret)
{
    uint64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return false;
    *ret = r;
    return true;
}

/* Time constants (the clock is in nanoseconds). */
#define DSV4_NSEC_PER_USEC 1000ull
#define DSV4_NSEC_PER_MSEC 1000000ull
#define DSV4_NSEC_PER_SEC 1000000000ull
#define DSV4_MSEC_PER_SEC 1000ull

/* Monotonic clock in nanoseconds: the one time type of the project. */
uint64_t dsv4_now_ns(void);

/* The CPU's model name from /proc/cpuinfo into out (n > 0), or "unknown CPU" (the
 * hardware line of the benchmark tools). */
void dsv4_cpu_model(char *out, size_t n);
