/* SPDX-License-Identifier: MIT */
/*
 * Number formats of the checkpoint (E4M3, E8M0, E2M1, BF16) and the official
 * activation fake-quant (spec §1, §16.1). Scalar code with integer rounding
 * tricks instead of libm calls, so the fake-quant before every quantised
 * GEMM stays cheap; tests check every conversion against a brute-force
 * nearest-code search.
 */
#include "kernels-internal.h"

float dsv4_e4m3_to_f32(uint8_t b)
{
    uint32_t mag = b & 0x7Fu;
    if (mag == 0x7Fu)
        return NAN;
    /* exponent and mantissa bits dropped into fp32 give value · 2^-120,
     * subnormals included; the multiply by 2^120 is exact */
    float v = dsv4_f32_from_bits(mag << 20) * 0x1p120f;
    return (b & 0x80u) ? -v : v;
}

uint8_t dsv4_f32_to_e4m3(float x)
{
    if (isnan(x))
        return 0x7F;
    uint8_t sign = signbit(x) ? 0x80 : 0x00;
    float a = fabsf(x);
    if (a >= 448.0f)
        return sign | 0x7E;
    uint32_t code;
    if (a < 0x1p-6f) {
        /* subnormal range: multiples of 2^-9; adding 2^14 (ulp 2^-9) rounds RNE */
        float r = a + 16384.0f;
        code = dsv4_bits_from_f32(r) - dsv4_bits_from_f32(16384.0f);
    } else {
        uint32_t u = dsv4_bits_from_f32(a);
        u += 0x7FFFFu + ((u >> 20) & 1u); /* RNE to 3 mantissa bits */
        code = (u >> 20) - ((127u - 7u) << 3);
        if (code > 0x7Eu)
            code = 0x7E;
    }
    return sign | (uint8_t)code;
}

int dsv4_e4m3_has_nan(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((p[i] & 0x7Fu) == 0x7Fu)
            return 1;
    return 0;
}

float dsv4_e8m0_to_f32(uint8_t b)
{
    if (b == 0xFF)
        return NAN;
    if (b == 0)
        return 0x1p-127f;
    return dsv4_f32_from_bits((uint32_t)b << 23);
}

static const float e2m1_values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

float dsv4_e2m1_to_f32(uint8_t code)
{
    float v = e2m1_values[code & 7u];
    return (code & 8u) ? -v : v;
}

uint8_t dsv4_f32_to_e2m1(float x)
{
    /* NaN has no E2M1 code: it maps to +0 here; dsv4_fp4_qdq keeps NaN itself */
    if (isnan(x))
        return 0;
    uint8_t sign = signbit(x) ? 8 : 0;
    float a = fabsf(x);
    /* midpoints between neighbours; at a tie the even code wins */
    static const float mid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    uint8_t c = 0;
    while (c < 7 && (a > mid[c] || (a == mid[c] && (c & 1u))))
        c++;
    return sign | c;
}

uint16_t dsv4_f32_to_bf16(float x)
{
    uint32_t u = dsv4_bits_from_f32(x);
    if (isnan(x))
        return (uint16_t)((u >> 16) | 0x0040u); /* quiet, sign and payload top kept */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float dsv4_bf16_to_f32(uint16_t h)
{
    return dsv4_f32_from_bits((uint32_t)h << 16);
}

float dsv4_bf16_round(float x)
{
    return dsv4_bf16_to_f32(dsv4_f32_to_bf16(x));
}

void dsv4_bf16_round_vec(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = dsv4_bf16_round(x[i]);
}

int dsv4_ceil_log2(float v)
{
    uint32_t u = dsv4_bits_from_f32(v);
    int e = (int)((u >> 23) & 0xFFu);
    return e - 127 + ((u & 0x7FFFFFu) != 0);
}

/* 2^e for e in [-149, 127] as an exact fp32; outside, 0 or +inf. */
static float exp2i(int e)
{
    if (e > 127)
        return INFINITY;
    if (e >= -126)
        return dsv4_f32_from_bits((uint32_t)(e + 127) << 23);
    if (e >= -149)
        return dsv4_f32_from_bits(1u << (e + 149));
    return 0.0f;
}

/* max |x| over the block, or NAN when it holds a NaN or an infinity */
static float block_amax(const float *x, size_t n)
{
    float amax = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (!(a <= 3.4028234664e38f))
            return NAN;
        if (a > amax)
            amax = a;
    }
    return amax;
}

void dsv4_fp8_qdq(float *x, size_t n, size_t block)
{
    const float inv448 = 1.0f / 448.0f;
    for (size_t b0 = 0; b0 < n; b0 += block) {
        size_t m = n - b0 < block ? n - b0 : block;
        float *v = x + b0;
        float amax = block_amax(v, m);
        if (isnan(amax)) {
            for (size_t i = 0; i < m; i++)
                v[i] = NAN;
            continue;
        }
        if (amax < 1e-4f)
            amax = 1e-4f;
        int e = dsv4_ceil_log2(amax * inv448);
        float s = exp2i(e), inv = exp2i(-e);
        for (size_t i = 0; i < m; i++) {
            float q = v[i] * inv; /* exact: power of two, |q| ≤ 448 */
            q = q > 448.0f ? 448.0f : q < -448.0f ? -448.0f : q;
            v[i] = dsv4_e4m3_to_f32(dsv4_f32_to_e4m3(q)) * s;
        }
    }
}

void dsv4_fp4_qdq(float *x, size_t n, size_t block)
{
    const float inv6 = 1.0f / 6.0f;
    const float floor_amax = 6.0f * 0x1p-126f;
    for (size_t b0 = 0; b0 < n; b0 += block) {
        size_t m = n - b0 < block ? n - b0 : block;
        float *v = x + b0;
        float amax = block_amax(v, m);
        if (isnan(amax)) {
            for (size_t i = 0; i < m; i++)
                v[i] = NAN;
            continue;
        }
        if (amax < floor_amax)
            amax = floor_amax;
        int e = dsv4_ceil_log2(amax * inv6);
        float s = exp2i(e), inv = exp2i(-e);
        for (size_t i = 0; i < m; i++) {
            float q = v[i] * inv;
            q = q > 6.0f ? 6.0f : q < -6.0f ? -6.0f : q;
            v[i] = dsv4_e2m1_to_f32(dsv4_f32_to_e2m1(q)) * s;
        }
    }
}
