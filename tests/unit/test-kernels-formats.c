/* SPDX-License-Identifier: MIT */
/*
 * Number formats and fake-quant against independent oracles: decoders by the
 * textbook formulas (ldexp), encoders by brute-force nearest-code search with
 * ties to the even code, exhaustive wherever the domain allows (every code,
 * every bf16 value and every tie point between neighbours).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kernels.h"

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static float f_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ---- oracles ---- */

static double e4m3_formula(uint8_t b)
{
    int e = (b >> 3) & 15, m = b & 7;
    if ((b & 0x7F) == 0x7F)
        return NAN;
    double v = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
    return (b & 0x80) ? -v : v;
}

/* nearest of the magnitude codes 0..max_code of a format, ties to even code */
static unsigned nearest_code(double a, double (*val)(uint8_t), unsigned max_code)
{
    unsigned best = 0;
    double bd = INFINITY;
    for (unsigned c = 0; c <= max_code; c++) {
        double d = fabs(val((uint8_t)c) - a);
        if (d < bd || (d == bd && !(c & 1))) {
            bd = d;
            best = c;
        }
    }
    return best;
}

static uint8_t e4m3_oracle(float x)
{
    if (isnan(x))
        return 0x7F;
    uint8_t s = signbit(x) ? 0x80 : 0;
    return s | (uint8_t)nearest_code(fabs((double)x), e4m3_formula, 0x7E);
}

static double e2m1_formula(uint8_t c)
{
    int e = (c >> 1) & 3, m = c & 1;
    double v = e == 0 ? 0.5 * m : ldexp(2 + m, e - 2);
    return (c & 8) ? -v : v;
}

static uint8_t e2m1_oracle(float x)
{
    uint8_t s = signbit(x) ? 8 : 0;
    return s | (uint8_t)nearest_code(fabs((double)x), e2m1_formula, 7);
}

/* ---- E4M3 ---- */

static void test_e4m3_decode_all(void **state)
{
    (void)state;
    for (unsigned b = 0; b < 256; b++) {
        float v = dsv4_e4m3_to_f32((uint8_t)b);
        double ref = e4m3_formula((uint8_t)b);
        if (isnan(ref)) {
            assert_true(isnan(v));
            continue;
        }
        assert_true((double)v == ref);
        assert_int_equal(!!signbit(v), b >> 7);
    }
    assert_true(dsv4_e4m3_to_f32(0x7E) == 448.0f);
    assert_true(dsv4_e4m3_to_f32(0x01) == 0x1p-9f);
    assert_true(dsv4_e4m3_to_f32(0x08) == 0x1p-6f);
}

static void test_e4m3_round_trip_and_ties(void **state)
{
    (void)state;
    for (unsigned b = 0; b < 256; b++) {
        float v = dsv4_e4m3_to_f32((uint8_t)b);
        uint8_t back = dsv4_f32_to_e4m3(v);
        if ((b & 0x7F) == 0x7F)
            assert_int_equal(back, 0x7F); /* NaN → the canonical NaN code */
        else
            assert_int_equal(back, b);
    }
    /* every midpoint between neighbouring codes, and one fp32 ulp either side */
    for (unsigned c = 0; c < 0x7E; c++) {
        float lo = dsv4_e4m3_to_f32((uint8_t)c), hi = dsv4_e4m3_to_f32((uint8_t)(c + 1));
        float mid = (float)(((double)lo + hi) / 2);
        assert_true((double)mid == ((double)lo + hi) / 2); /* exact in fp32 */
        assert_int_equal(dsv4_f32_to_e4m3(mid), (c & 1) ? c + 1 : c);
        assert_int_equal(dsv4_f32_to_e4m3(-mid), 0x80 | ((c & 1) ? c + 1 : c));
        assert_int_equal(dsv4_f32_to_e4m3(nextafterf(mid, 0)), c);
        assert_int_equal(dsv4_f32_to_e4m3(nextafterf(mid, 1000)), c + 1);
    }
    /* saturation: 448 and above (and ±inf) clamp to ±448, NaN → 0x7F */
    assert_int_equal(dsv4_f32_to_e4m3(464.0f), 0x7E);
    assert_int_equal(dsv4_f32_to_e4m3(1e30f), 0x7E);
    assert_int_equal(dsv4_f32_to_e4m3(INFINITY), 0x7E);
    assert_int_equal(dsv4_f32_to_e4m3(-INFINITY), 0xFE);
    assert_int_equal(dsv4_f32_to_e4m3(NAN), 0x7F);
    assert_int_equal(dsv4_f32_to_e4m3(-0.0f), 0x80);
    assert_int_equal(dsv4_f32_to_e4m3(0x1p-11f), 0x00); /* quarter of the min subnormal */
    assert_int_equal(dsv4_f32_to_e4m3(0x1p-10f), 0x00); /* tie with 0 → even (0) */
    assert_int_equal(dsv4_f32_to_e4m3(0x1.8p-9f), 0x02); /* 1.5 min-subnormals tie → 2 */
}

static void test_e4m3_encode_random(void **state)
{
    (void)state;
    for (int i = 0; i < 200000; i++) {
        /* exponents spread over the E4M3 range and beyond */
        int e = (int)(rnd() % 40) - 20;
        float x = ldexpf(1.0f + (float)(rnd() % (1u << 23)) * 0x1p-23f, e);
        if (rnd() & 1)
            x = -x;
        uint8_t want = e4m3_oracle(x);
        if (fabsf(x) >= 448.0f)
            want = (x < 0 ? 0x80 : 0) | 0x7E;
        assert_int_equal(dsv4_f32_to_e4m3(x), want);
    }
    /* every fp32 subnormal-range exponent of E4M3 with random mantissas */
    for (int i = 0; i < 20000; i++) {
        float x = f_from_bits((uint32_t)(rnd() % bits_of(0x1p-5f)));
        assert_int_equal(dsv4_f32_to_e4m3(x), e4m3_oracle(x));
    }
}

/* ---- E8M0 ---- */

static void test_e8m0_all(void **state)
{
    (void)state;
    for (unsigned b = 0; b < 255; b++)
        assert_true((double)dsv4_e8m0_to_f32((uint8_t)b) == ldexp(1.0, (int)b - 127));
    assert_true(isnan(dsv4_e8m0_to_f32(0xFF)));
    assert_int_equal(bits_of(dsv4_e8m0_to_f32(0)), 0x00400000u);
}

/* ---- E2M1 ---- */

static void test_e2m1_all_and_ties(void **state)
{
    (void)state;
    static const float vals[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (unsigned c = 0; c < 16; c++) {
        float v = dsv4_e2m1_to_f32((uint8_t)c);
        assert_true(v == ((c & 8) ? -vals[c & 7] : vals[c & 7]));
        assert_true((double)v == e2m1_formula((uint8_t)c));
        assert_int_equal(!!signbit(v), c >> 3);
        assert_int_equal(dsv4_f32_to_e2m1(v), c);
        assert_int_equal(dsv4_e2m1_to_f32((uint8_t)(c | 0xF0)) == v, 1); /* high bits ignored */
    }
    /* ties go to the even code */
    static const struct {
        float x;
        float want;
    } ties[] = {{0.25f, 0}, {0.75f, 1}, {1.25f, 1}, {1.75f, 2}, {2.5f, 2}, {3.5f, 4}, {5.0f, 4},
                {7.0f, 6},  {100.0f, 6}, {INFINITY, 6}, {0.26f, 0.5f}, {5.01f, 6}, {4.99f, 4}};
    for (size_t i = 0; i < sizeof ties / sizeof ties[0]; i++) {
        assert_true(dsv4_e2m1_to_f32(dsv4_f32_to_e2m1(ties[i].x)) == ties[i].want);
        assert_true(dsv4_e2m1_to_f32(dsv4_f32_to_e2m1(-ties[i].x)) == -ties[i].want);
    }
    for (int i = 0; i < 100000; i++) {
        float x = ldexpf((float)(rnd() % (1u << 24)) * 0x1p-24f, (int)(rnd() % 6) - 2);
        if (rnd() & 1)
            x = -x;
        assert_int_equal(dsv4_f32_to_e2m1(x), e2m1_oracle(x));
    }
}

/* ---- BF16 ---- */

static void test_bf16_exhaustive(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float v = dsv4_bf16_to_f32((uint16_t)h);
        assert_int_equal(bits_of(v), h << 16);
        if (isnan(v)) {
            assert_true(isnan(dsv4_bf16_to_f32(dsv4_f32_to_bf16(v))));
            assert_true(isnan(dsv4_bf16_round(f_from_bits((h << 16) | 0x1234))));
            continue;
        }
        assert_int_equal(dsv4_f32_to_bf16(v), h);
        if ((h & 0x7FFF) == 0x7F80)
            continue; /* ±inf: no upper neighbour */
        /* tie point to the next bf16 of larger magnitude, and its neighbours */
        uint32_t mid = (h << 16) | 0x8000u;
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        assert_int_equal(dsv4_f32_to_bf16(f_from_bits(mid)), even);
        assert_int_equal(dsv4_f32_to_bf16(f_from_bits(mid - 1)), h);
        assert_int_equal(dsv4_f32_to_bf16(f_from_bits(mid + 1)), (uint16_t)(h + 1));
    }
    float v[3] = {1.0f + 0x1p-9f, 1.0f + 0x1.8p-8f, -3.0f};
    dsv4_bf16_round_vec(v, 3);
    assert_true(v[0] == 1.0f && v[1] == 1.0f + 0x1p-7f && v[2] == -3.0f);
}

/* ---- ceil_log2 ---- */

static void test_ceil_log2(void **state)
{
    (void)state;
    for (int e = -126; e <= 127; e++) {
        float p = ldexpf(1.0f, e);
        assert_int_equal(dsv4_ceil_log2(p), e);                  /* exact powers */
        assert_int_equal(dsv4_ceil_log2(nextafterf(p, INFINITY)), e + 1);
        if (e > -126)
            assert_int_equal(dsv4_ceil_log2(nextafterf(p, 0)), e);
    }
    for (int i = 0; i < 100000; i++) {
        float v = f_from_bits((uint32_t)(rnd() % 0x7F000000u) + 0x00800000u);
        assert_int_equal(dsv4_ceil_log2(v), (int)ceil(log2((double)v)));
    }
}

/* ---- fake-quant ---- */

static float scale_of_block(const float *x, size_t n, float floor_amax, float inv_max)
{
    float amax = floor_amax;
    for (size_t i = 0; i < n; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    return ldexpf(1.0f, dsv4_ceil_log2(amax * inv_max));
}

/* The compact form of a fake-quantised vector unpacks to it bit for bit. */
static void check_pack(int fp4, const float *x, size_t n, size_t block)
{
    uint8_t *codes = malloc(n + 1), *scales = malloc(n / block + 1);
    float *y = malloc(n * sizeof(float));
    if (fp4) {
        dsv4_fp4_pack(x, n, block, codes, scales);
        dsv4_fp4_unpack(codes, scales, n, block, y);
    } else {
        dsv4_fp8_pack(x, n, block, codes, scales);
        dsv4_fp8_unpack(codes, scales, n, block, y);
    }
    for (size_t i = 0; i < n; i++)
        if (bits_of(y[i]) != bits_of(x[i]))
            fail_msg("%s pack n %zu block %zu elt %zu: %a (%08x) unpacked as %a (%08x)",
                     fp4 ? "fp4" : "fp8", n, block, i, (double)x[i], bits_of(x[i]),
                     (double)y[i], bits_of(y[i]));
    free(codes);
    free(scales);
    free(y);
}

static void check_qdq(int fp4, float *x, size_t n, size_t block)
{
    float *orig = malloc(n * sizeof(float)), *again = malloc(n * sizeof(float));
    memcpy(orig, x, n * sizeof(float));
    const float fmax_v = fp4 ? 6.0f : 448.0f;
    const float floor_amax = fp4 ? 6.0f * 0x1p-126f : 1e-4f;
    if (fp4)
        dsv4_fp4_qdq(x, n, block);
    else
        dsv4_fp8_qdq(x, n, block);
    for (size_t b0 = 0; b0 < n; b0 += block) {
        size_t m = n - b0 < block ? n - b0 : block;
        float s = scale_of_block(orig + b0, m, floor_amax, 1.0f / fmax_v);
        float amax = 0;
        for (size_t i = 0; i < m; i++)
            amax = fmaxf(amax, fabsf(orig[b0 + i]));
        /* a power of two, rounded up: s·max ≥ amax, s/2·max < max(amax, floor)·(1+2^-23) */
        assert_int_equal(bits_of(s) & 0x7FFFFF, 0);
        assert_true((double)s * fmax_v >= amax);
        assert_true((double)s / 2 * fmax_v < fmax((double)amax, floor_amax) * (1 + 0x1p-22));
        for (size_t i = 0; i < m; i++) {
            double q = (double)orig[b0 + i] / s;
            q = fmin(fmax(q, -fmax_v), fmax_v);
            double want = fp4 ? e2m1_formula(e2m1_oracle((float)q)) * s
                              : e4m3_formula(e4m3_oracle((float)q)) * s;
            if (!((double)x[b0 + i] == want))
                fail_msg("%s block %zu elt %zu: x=%.9g got %.9g want %.9g (s=%g)",
                         fp4 ? "fp4" : "fp8", b0, i, (double)orig[b0 + i], (double)x[b0 + i], want,
                         (double)s);
        }
    }
    check_pack(fp4, x, n, block);
    /* idempotent */
    memcpy(again, x, n * sizeof(float));
    if (fp4)
        dsv4_fp4_qdq(again, n, block);
    else
        dsv4_fp8_qdq(again, n, block);
    assert_memory_equal(again, x, n * sizeof(float));
    free(orig);
    free(again);
}

static void test_qdq(void **state)
{
    (void)state;
    static const size_t sizes[] = {1, 31, 32, 64, 127, 128, 129, 300, 4096};
    static const float mags[] = {1e-9f, 1e-5f, 1e-3f, 1.0f, 300.0f, 1e20f};
    float *x = malloc(4096 * sizeof(float));
    for (int fp4 = 0; fp4 < 2; fp4++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (size_t mi = 0; mi < sizeof mags / sizeof mags[0]; mi++) {
                size_t n = sizes[si];
                for (size_t i = 0; i < n; i++)
                    x[i] = ((float)(rnd() % 2000001) / 1000000.0f - 1.0f) * mags[mi];
                if (n > 10)
                    x[3] = 0.0f, x[7] = -0.0f, x[9] = mags[mi] * 0x1p-30f;
                check_qdq(fp4, x, n, fp4 ? 32 : (si & 1) ? 64 : 128);
            }
    /* exact powers of two at the boundary: amax = 448·2^k gives s = 2^k exactly */
    for (int k = -20; k < 20; k++) {
        for (int i = 0; i < 128; i++)
            x[i] = (float)i / 128.0f * ldexpf(448.0f, k);
        x[5] = ldexpf(448.0f, k);
        float s = scale_of_block(x, 128, 1e-4f, 1.0f / 448.0f);
        if (k > -22)
            assert_true(s == ldexpf(1.0f, k) || ldexpf(448.0f, k) < 1e-4f);
        check_qdq(0, x, 128, 128);
        x[5] = 6.0f * ldexpf(1.0f, k);
        check_qdq(1, x, 32, 32);
    }
    /* ties: with amax 448 (s = 1) every midpoint between neighbouring E4M3 values, its
     * two float neighbours and their negatives, subnormal range included (RNE) */
    for (int c0 = 0; c0 < 0x7E; c0 += 21) {
        x[0] = 448.0f;
        int i = 1;
        for (int c = c0; c < 0x7E && i + 6 <= 128; c++) {
            float mid = (dsv4_e4m3_to_f32((uint8_t)c) + dsv4_e4m3_to_f32((uint8_t)(c + 1))) / 2;
            float v[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, 1000.0f)};
            for (int j = 0; j < 3; j++)
                x[i++] = v[j], x[i++] = -v[j];
        }
        for (; i < 128; i++)
            x[i] = 0.0f;
        check_qdq(0, x, 128, 128);
    }
    /* the 1e-4 floor: a block of tiny values is quantised with s = 2^-22 */
    for (int i = 0; i < 128; i++)
        x[i] = 1e-7f * (float)i; /* amax 1.27e-5 < 1e-4 */
    check_qdq(0, x, 128, 128);
    assert_true(dsv4_ceil_log2(1e-4f * (1.0f / 448.0f)) == -22);
    /* zeros stay zero; NaN or inf poisons its block only */
    memset(x, 0, 256 * sizeof(float));
    dsv4_fp8_qdq(x, 256, 128);
    for (int i = 0; i < 256; i++)
        assert_true(x[i] == 0.0f);
    x[130] = NAN;
    dsv4_fp8_qdq(x, 256, 128);
    assert_true(x[0] == 0.0f && isnan(x[128]) && isnan(x[255]));
    for (int i = 0; i < 64; i++)
        x[i] = 1.0f;
    x[40] = INFINITY;
    dsv4_fp4_qdq(x, 64, 32);
    assert_true(x[0] == 1.0f && isnan(x[32]) && isnan(x[63]));
    check_pack(1, x, 64, 32);
    free(x);
}

/* The unpacks are the scalar decoders, code by code (scale byte 127 = 1), and the packs
 * round-trip odd sizes and blocks, every exponent the fake-quant can choose and NaN blocks. */
static void test_pack(void **state)
{
    (void)state;
    uint8_t codes[256], one = 127;
    float y[256];
    for (int b = 0; b < 256; b++) {
        codes[0] = (uint8_t)b;
        dsv4_fp8_unpack(codes, &one, 1, 64, y);
        assert_int_equal(bits_of(y[0]), bits_of(dsv4_e4m3_to_f32((uint8_t)b)));
        codes[0] = (uint8_t)(b & 15) | (uint8_t)(b << 4);
        dsv4_fp4_unpack(codes, &one, 2, 32, y);
        assert_int_equal(bits_of(y[0]), bits_of(dsv4_e2m1_to_f32((uint8_t)b)));
        assert_int_equal(bits_of(y[1]), bits_of(dsv4_e2m1_to_f32((uint8_t)b)));
    }
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t v = (uint16_t)h;
        dsv4_bf16_unpack(&v, 1, y);
        assert_int_equal(bits_of(y[0]), bits_of(dsv4_bf16_to_f32(v)));
    }
    float *x = malloc(4096 * sizeof(float));
    static const size_t sizes[] = {1, 2, 3, 31, 33, 64, 65, 448, 4096};
    static const size_t blocks[] = {1, 7, 31, 32, 64};
    for (int fp4 = 0; fp4 < 2; fp4++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++)
                for (int e = -140; e <= 120; e += 13) {
                    size_t n = sizes[si];
                    for (size_t i = 0; i < n; i++)
                        x[i] = ldexpf((float)((int64_t)(rnd() % 2000001) - 1000000), e - 20);
                    if (n > 3)
                        x[1] = 0.0f, x[2] = -0.0f;
                    if (fp4)
                        dsv4_fp4_qdq(x, n, blocks[bi]);
                    else
                        dsv4_fp8_qdq(x, n, blocks[bi]);
                    check_pack(fp4, x, n, blocks[bi]);
                }
    /* a NaN block next to a finite one */
    for (int i = 0; i < 128; i++)
        x[i] = (float)i - 60.0f;
    x[100] = NAN;
    dsv4_fp8_qdq(x, 128, 64);
    check_pack(0, x, 128, 64);
    free(x);
}

/* DSV4_KERNELS chooses the twin at the first dsv4_kernel_ops() of a process
 * (nothing else in this program calls it) */
static void test_env_override(void **state)
{
    (void)state;
    setenv("DSV4_KERNELS", "scalar", 1);
    assert_int_equal(dsv4_kernel_ops()->isa, DSV4_ISA_SCALAR);
    unsetenv("DSV4_KERNELS");
    assert_int_equal(dsv4_kernel_ops()->isa, DSV4_ISA_SCALAR); /* chosen once */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_override),
        cmocka_unit_test(test_e4m3_decode_all),
        cmocka_unit_test(test_e4m3_round_trip_and_ties),
        cmocka_unit_test(test_e4m3_encode_random),
        cmocka_unit_test(test_e8m0_all),
        cmocka_unit_test(test_e2m1_all_and_ties),
        cmocka_unit_test(test_bf16_exhaustive),
        cmocka_unit_test(test_ceil_log2),
        cmocka_unit_test(test_qdq),
        cmocka_unit_test(test_pack),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
