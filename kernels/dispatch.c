/* SPDX-License-Identifier: MIT */
/*
 * Run-time choice of the kernel twin: the best ISA this CPU supports, unless
 * DSV4_KERNELS=scalar|avx2|avx512|avx512bf16 or dsv4_kernels_force() says otherwise.
 * Every twin gives the same bits (kernels-internal.h), so the choice changes
 * speed only.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "kernels-internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
/* F16C from CPUID leaf 1 (clang's __builtin_cpu_supports does not know "f16c"). */
static bool has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

/* AVX512-VBMI and -VNNI (leaf 7.0 ECX bits 1, 11) and AVX512-BF16 (leaf 7.1 EAX bit 5),
 * read directly: not every compiler's __builtin_cpu_supports knows the three */
static bool has_vbmi_vnni_bf16(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(c & (1u << 1)) || !(c & (1u << 11)))
        return false;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));
}
#endif

static int cpu_has(enum dsv4_isa isa)
{
    switch (isa) {
    case DSV4_ISA_SCALAR:
        return 1;
#if defined(__x86_64__) || defined(__i386__)
    case DSV4_ISA_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case DSV4_ISA_AVX512:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && has_f16c();
    case DSV4_ISA_AVX512BF16:
        return cpu_has(DSV4_ISA_AVX512) && has_vbmi_vnni_bf16();
#endif
    default:
        return 0;
    }
}

/* twins this build has (the x86 ones only on x86); NULL = not built */
static const struct dsv4_kernel_ops *const all_ops[_DSV4_ISA_MAX] = {
    [DSV4_ISA_SCALAR] = &dsv4_kernel_ops_scalar,
#ifdef DSV4_X86_TWINS
    [DSV4_ISA_AVX2] = &dsv4_kernel_ops_avx2,
    [DSV4_ISA_AVX512] = &dsv4_kernel_ops_avx512,
    [DSV4_ISA_AVX512BF16] = &dsv4_kernel_ops_avx512bf16,
#endif
};

static const char *const isa_names[_DSV4_ISA_MAX] = {"scalar", "avx2", "avx512",
                                                      "avx512bf16"};

const struct dsv4_kernel_ops *dsv4_kernel_ops_for(enum dsv4_isa isa)
{
    if ((unsigned)isa >= _DSV4_ISA_MAX || !all_ops[isa] || !cpu_has(isa))
        return NULL;
    return all_ops[isa];
}

const char *dsv4_isa_name(enum dsv4_isa isa)
{
    return (unsigned)isa < _DSV4_ISA_MAX ? isa_names[isa] : "?";
}

int dsv4_isa_by_name(const char *name)
{
    for (int i = 0; i < _DSV4_ISA_MAX; i++)
        if (strcmp(name, isa_names[i]) == 0)
            return i;
    return -1;
}

static _Atomic(const struct dsv4_kernel_ops *) current;

static const struct dsv4_kernel_ops *choose(void)
{
    const char *env = getenv("DSV4_KERNELS");
    if (env && *env) {
        const int i = dsv4_isa_by_name(env);
        if (i >= 0 && dsv4_kernel_ops_for((enum dsv4_isa)i))
            return all_ops[i];
        /* an unknown or unsupported name falls back to the best available */
    }
    /* the best this CPU runs. (AVX-512 was opt-in until its bitwise tests had passed on an
     * AVX-512 CPU: they did, in the fresh-clone CI runs of 2026-12-03 on an AVX-512 Xeon,
     * where it measured 1.2x AVX2 on one row and 1.3x on 16, thread CPU time.) */
    for (int i = _DSV4_ISA_MAX - 1; i >= 0; i--)
        if (dsv4_kernel_ops_for((enum dsv4_isa)i))
            return all_ops[i];
    return &dsv4_kernel_ops_scalar;
}

const struct dsv4_kernel_ops *dsv4_kernel_ops(void)
{
    const struct dsv4_kernel_ops *ops = atomic_load_explicit(&current, memory_order_acquire);
    if (__builtin_expect(ops == NULL, 0)) {
        ops = choose();
        atomic_store_explicit(&current, ops, memory_order_release);
    }
    return ops;
}

int dsv4_kernels_force(enum dsv4_isa isa)
{
    const struct dsv4_kernel_ops *ops = dsv4_kernel_ops_for(isa);
    if (!ops)
        return -ENOTSUP;
    atomic_store_explicit(&current, ops, memory_order_release);
    return 0;
}

void dsv4_fp8_qdq(float *x, size_t n, size_t block)
{
    dsv4_kernel_ops()->fp8_qdq(x, n, block);
}

void dsv4_bf16_round_vec(float *x, size_t n)
{
    dsv4_kernel_ops()->bf16_round(x, n);
}

void dsv4_matvec_fp8(const struct dsv4_fp8_weight *w, const float *x, size_t nx, float *y,
                     size_t ldy, uint32_t row_begin, uint32_t row_end)
{
    dsv4_kernel_ops()->matvec_fp8(w, x, nx, y, ldy, row_begin, row_end);
}

void dsv4_matvec_fp8_nanfree(const struct dsv4_fp8_weight *w, const float *x, size_t nx, float *y,
                             size_t ldy, uint32_t row_begin, uint32_t row_end)
{
    dsv4_kernel_ops()->matvec_fp8_nanfree(w, x, nx, y, ldy, row_begin, row_end);
}

void dsv4_matvec_fp4(const struct dsv4_fp4_weight *w, const float *x, size_t nx, float *y,
                     size_t ldy, uint32_t row_begin, uint32_t row_end)
{
    dsv4_kernel_ops()->matvec_fp4(w, x, nx, y, ldy, row_begin, row_end);
}

void dsv4_matvec_bf16(const struct dsv4_bf16_weight *w, const float *x, size_t nx, float *y,
                      size_t ldy, uint32_t row_begin, uint32_t row_end)
{
    dsv4_kernel_ops()->matvec_bf16(w, x, nx, y, ldy, row_begin, row_end);
}

double dsv4_dot_f64(const float *a, const float *b, size_t n)
{
    return dsv4_kernel_ops()->dot_f64(a, b, n);
}

void dsv4_dot_f64_many(const float *q, const float *const *k, size_t nk, size_t n, double *out)
{
    dsv4_kernel_ops()->dot_f64_many(q, k, nk, n, out);
}

void dsv4_index_scores(const struct dsv4_index_query *iq, const uint8_t *keys, size_t stride,
                       size_t nk, float *out)
{
    dsv4_kernel_ops()->index_scores(iq, keys, stride, nk, out);
}

void dsv4_axpy_f64(double *y, double a, const float *x, size_t n)
{
    dsv4_kernel_ops()->axpy_f64(y, a, x, n);
}

void dsv4_dot_f64_heads(const float *q, size_t ldq, size_t nh, const float *const *k, size_t nk,
                        size_t n, double *out)
{
    dsv4_kernel_ops()->dot_f64_heads(q, ldq, nh, k, nk, n, out);
}

void dsv4_pv_f64_heads(const float *p, size_t ldp, size_t nh, const float *const *k, size_t nk,
                       size_t n, double *y, size_t ldy)
{
    dsv4_kernel_ops()->pv_f64_heads(p, ldp, nh, k, nk, n, y, ldy);
}
