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

/* the definition (scalar ops); dsv4_bf16_round_vec runs the chosen twin */
void dsv4_bf16_round_vec_ref(float *x, size_t n)
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

/* dsv4_e4m3_to_f32(dsv4_f32_to_e4m3(q)) for |q| ≤ 448 (not NaN), without the code: the
 * same two roundings written straight into the fp32 value (a fifth of the fake-quant's
 * time went to the two calls per element in a prefill profile) */
static inline float e4m3_round(float q)
{
    const uint32_t u = dsv4_bits_from_f32(q), sign = u & 0x80000000u;
    uint32_t a = u & 0x7FFFFFFFu;
    if (a < 0x3C800000u) { /* below 2^-6: multiples of 2^-9, RNE by adding 2^14 */
        const float r = (dsv4_f32_from_bits(a) + 16384.0f) - 16384.0f;
        return dsv4_f32_from_bits(dsv4_bits_from_f32(r) | sign);
    }
    a += 0x7FFFFu + ((a >> 20) & 1u); /* RNE to 3 mantissa bits; 448 is the largest result */
    return dsv4_f32_from_bits((a & 0xFFF00000u) | sign);
}

/* the definition (scalar ops); dsv4_fp8_qdq runs the chosen twin */
void dsv4_fp8_qdq_ref(float *x, size_t n, size_t block)
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
        float s = dsv4_exp2i(e), inv = dsv4_exp2i(-e);
        for (size_t i = 0; i < m; i++) {
            float q = v[i] * inv; /* exact: power of two, |q| ≤ 448 */
            q = q > 448.0f ? 448.0f : q < -448.0f ? -448.0f : q;
            v[i] = e4m3_round(q) * s;
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
        float s = dsv4_exp2i(e), inv = dsv4_exp2i(-e);
        for (size_t i = 0; i < m; i++) {
            float q = v[i] * inv;
            q = q > 6.0f ? 6.0f : q < -6.0f ? -6.0f : q;
            v[i] = dsv4_e2m1_to_f32(dsv4_f32_to_e2m1(q)) * s;
        }
    }
}

/*
 * Compact forms of fake-quantised values (session state). A block that dsv4_fp8_qdq (resp.
 * dsv4_fp4_qdq) produced is q_i · 2^e with E4M3 (E2M1) q_i; the pack picks the smallest
 * exponent e' with max|x| ≤ 448 · 2^e' (6 · 2^e'), so e' ≤ e and every x_i / 2^e' =
 * q_i · 2^(e−e') stays a code of the format (both formats are closed under doubling below
 * their maximum). It is computed from the values alone, so no assumption about how the
 * producer rounded its own scale enters, and x_i = code_i · 2^e' holds exactly: the unpack is
 * the same fp32 number, bit for bit. The exponent is kept as an E8M0 byte (e' + 127, clamped
 * to [1, 254]: a smaller e' is still valid); a block holding a NaN (the fake-quant turns any
 * non-finite block into NaNs) gets scale byte 0xFF and unpacks to NaNs.
 */
static uint8_t pack_scale(float amax, int top_exp, float top_mant)
{
    /* smallest e' with amax ≤ top_mant · 2^(top_exp + e') */
    if (amax == 0.0f)
        return 127;
    int k = dsv4_ceil_log2(amax);   /* amax ≤ 2^k */
    /* amax in (2^(k-1), 2^k]: ≤ top_mant · 2^(top_exp + e') with e' = k − 1 − top_exp when
       amax ≤ top_mant · 2^(k − 1), else k − top_exp */
    int e = k - 1 - top_exp;
    float lim = top_mant * dsv4_exp2i(k - 1);
    if (!(amax <= lim))
        e++;
    if (e < -126)
        e = -126;
    if (e > 127)
        e = 127;
    return (uint8_t)(e + 127);
}

static float unpack_scale(uint8_t b)
{
    return b == 0xFF ? NAN : dsv4_f32_from_bits((uint32_t)b << 23);
}

void dsv4_fp8_pack(const float *x, size_t n, size_t block, uint8_t *codes, uint8_t *scales)
{
    for (size_t b0 = 0, k = 0; b0 < n; b0 += block, k++) {
        size_t m = n - b0 < block ? n - b0 : block;
        float amax = block_amax(x + b0, m);
        if (isnan(amax)) {
            memset(codes + b0, 0x7F, m);
            scales[k] = 0xFF;
            continue;
        }
        scales[k] = pack_scale(amax, 8, 1.75f);     /* 448 = 1.75 · 2^8 */
        float inv = dsv4_exp2i(127 - (int)scales[k]);
        for (size_t i = 0; i < m; i++)
            codes[b0 + i] = dsv4_f32_to_e4m3(x[b0 + i] * inv);
    }
}

/* The unpack runs in the attention's inner loop: let GCC vectorise it at -O2. */
#if defined(__GNUC__) && !defined(__clang__)
#define UNPACK_FAST __attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
#else
#define UNPACK_FAST
#endif

UNPACK_FAST void dsv4_fp8_unpack(const uint8_t *codes, const uint8_t *scales, size_t n, size_t block,
                     float *x)
{
    for (size_t b0 = 0, k = 0; b0 < n; b0 += block, k++) {
        size_t m = n - b0 < block ? n - b0 : block;
        float s = unpack_scale(scales[k]);
        const uint8_t *cb = codes + b0;
        float *xb = x + b0;
        for (size_t i = 0; i < m; i++) {
            /* dsv4_e4m3_to_f32 (same bits) without branches (so the loop vectorises) and
               without subnormal operands: normal codes are the fp32 bits with the exponent
               rebiased, subnormal ones (mag < 8) mag · 2^-9, 0x7F NaN */
            uint32_t b = cb[i], mag = b & 0x7Fu, sign = (b & 0x80u) << 24;
            uint32_t sub = 0u - (uint32_t)(mag < 8), nan = 0u - (uint32_t)(mag == 0x7Fu);
            uint32_t u = ((mag << 20) + (120u << 23)) & ~sub;
            u |= dsv4_bits_from_f32((float)(int32_t)mag * 0x1p-9f) & sub;
            u = ((sign | u) & ~nan) | (0x7FC00000u & nan);  /* NaN as the decoder's: + */
            xb[i] = dsv4_f32_from_bits(u) * s;
        }
    }
}

void dsv4_fp4_pack(const float *x, size_t n, size_t block, uint8_t *codes, uint8_t *scales)
{
    memset(codes, 0, (n + 1) / 2);
    for (size_t b0 = 0, k = 0; b0 < n; b0 += block, k++) {
        size_t m = n - b0 < block ? n - b0 : block;
        float amax = block_amax(x + b0, m);
        if (isnan(amax)) {
            scales[k] = 0xFF;
            continue;
        }
        scales[k] = pack_scale(amax, 2, 1.5f);      /* 6 = 1.5 · 2^2 */
        float inv = dsv4_exp2i(127 - (int)scales[k]);
        for (size_t i = b0; i < b0 + m; i++)
            codes[i / 2] |= (uint8_t)(dsv4_f32_to_e2m1(x[i] * inv) << (4 * (i & 1)));
    }
}

/* Both E2M1 values of a code byte (low nibble first): dsv4_e2m1_to_f32's bits, -0 included. */
#define E2M1_ABS(m)                                                                          \
    ((m) == 0 ? 0.0f : (m) == 1 ? 0.5f : (m) == 2 ? 1.0f : (m) == 3 ? 1.5f : (m) == 4 ? 2.0f \
     : (m) == 5 ? 3.0f : (m) == 6 ? 4.0f : 6.0f)
#define E2M1_V(c) (((c) & 8) ? -E2M1_ABS((c) & 7) : E2M1_ABS((c) & 7))
#define E2M1_P(b) { E2M1_V((b) & 15), E2M1_V((b) >> 4) }
#define E2M1_R(h) E2M1_P(16 * (h) + 0), E2M1_P(16 * (h) + 1), E2M1_P(16 * (h) + 2),             \
    E2M1_P(16 * (h) + 3), E2M1_P(16 * (h) + 4), E2M1_P(16 * (h) + 5), E2M1_P(16 * (h) + 6),    \
    E2M1_P(16 * (h) + 7), E2M1_P(16 * (h) + 8), E2M1_P(16 * (h) + 9), E2M1_P(16 * (h) + 10),   \
    E2M1_P(16 * (h) + 11), E2M1_P(16 * (h) + 12), E2M1_P(16 * (h) + 13), E2M1_P(16 * (h) + 14), \
    E2M1_P(16 * (h) + 15)
static const float e2m1_pairs[256][2] = {
    E2M1_R(0), E2M1_R(1), E2M1_R(2), E2M1_R(3), E2M1_R(4), E2M1_R(5), E2M1_R(6), E2M1_R(7),
    E2M1_R(8), E2M1_R(9), E2M1_R(10), E2M1_R(11), E2M1_R(12), E2M1_R(13), E2M1_R(14), E2M1_R(15),
};

static UNPACK_FAST void scale_vec(float *x, size_t n, float s)
{
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}

void dsv4_fp4_unpack(const uint8_t *codes, const uint8_t *scales, size_t n, size_t block,
                     float *x)
{
    for (size_t b0 = 0, k = 0; b0 < n; b0 += block, k++) {
        size_t i = b0, end = n - b0 < block ? n : b0 + block;
        if (i % 2 && i < end) {     /* an odd block size: the pairs start one later */
            x[i] = e2m1_pairs[codes[i / 2]][1];
            i++;
        }
        for (; i + 1 < end; i += 2)
            memcpy(x + i, e2m1_pairs[codes[i / 2]], 2 * sizeof(float));
        if (i < end)
            x[i] = e2m1_pairs[codes[i / 2]][0];
        scale_vec(x + b0, end - b0, unpack_scale(scales[k]));
    }
}

UNPACK_FAST void dsv4_bf16_unpack(const uint16_t *h, size_t n, float *x)
{
    for (size_t i = 0; i < n; i++)
        x[i] = dsv4_f32_from_bits((uint32_t)h[i] << 16);
}
