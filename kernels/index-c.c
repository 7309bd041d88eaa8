/* SPDX-License-Identifier: MIT */
/*
 * Lightning indexer scores (spec §11): the definition, and the query's integer form that the
 * SIMD twins (index-simd.h) use.
 *
 * Why the twins may use integers: every value of a query head and of a key is an E2M1 code
 * times a power of two per 32-block (the FP4 QDQ). Doubled, a code is an integer in
 * [-12, 12], so a block's products sum exactly to an integer S_b (|S_b| ≤ 32·144) and
 *   q·k = Σ_b S_b · 2^(eq_b + ek_b − 256).
 * dot_f64 forms the same products exactly in double and adds them in its chains. Each
 * partial sum is an integer multiple of 2^(E_min − 256) below d·144·2^(E_max − 256) in
 * magnitude (E_b = eq_b + ek_b), so when E_max − E_min ≤ 53 − ceil(log2(d·144)) every
 * addition is exact and dot_f64 returns the exact value: the integer form gives the same
 * double. Pairs outside that bound (and NaN blocks, non-finite head weights) take the
 * definition below.
 */
#include <stdlib.h>

#include "kernels-internal.h"

/* the definition: unpack each key, dot_f64 against every head, the head sum in order */
void dsv4_index_scores_ref(const struct dsv4_index_query *iq, const uint8_t *keys,
                           size_t stride, size_t nk, float *out)
{
    const int nh = iq->nh, d = iq->d;
    const struct dsv4_kernel_ops *ops = dsv4_kernel_ops();
    float *key = malloc((size_t)d * sizeof(*key));
    double *dots = malloc((size_t)nh * sizeof(*dots));
    const float **qh = malloc((size_t)nh * sizeof(*qh));
    if (!key || !dots || !qh)
        abort();
    for (int h = 0; h < nh; h++)
        qh[h] = iq->q + (size_t)h * (size_t)d;
    for (size_t w = 0; w < nk; w++) {
        const uint8_t *k = keys + w * stride;
        dsv4_fp4_unpack(k, k + d / 2, (size_t)d, 32, key);
        /* dot_f64(q_h, key) for every head, the key loaded once (same bits) */
        ops->dot_f64_many(key, qh, (size_t)nh, (size_t)d, dots);
        double tot = 0.0;
        for (int h = 0; h < nh; h++) {
            float dot = dsv4_bf16_round((float)dots[h]);
            tot += dsv4_bf16_round(fmaxf(dot, 0.0f) * iq->wt[h]);
        }
        out[w] = dsv4_bf16_round((float)tot);
    }
    free(qh);
    free(dots);
    free(key);
}

static const int8_t e2m1_doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

int dsv4_index_exact_spread(int d)
{
    int bits = 0;
    while ((1ull << bits) < (unsigned long long)d * 144u)
        bits++;
    return 53 - bits;
}

void dsv4_index_query_init(struct dsv4_index_query *iq, const float *q, const float *wt, int nh,
                           int d)
{
    *iq = (struct dsv4_index_query){.q = q, .wt = wt, .nh = nh, .d = d};
    if (nh < 1 || d < 32 || d % 32 || (size_t)d > 16384)
        return;
    for (int h = 0; h < nh; h++)
        if (!isfinite(wt[h]))
            return;     /* NaN/inf weights: the definition's own propagation */
    const int nb = d / 32, ns = d / 8;
    iq->qi = malloc((size_t)ns * 2 * (size_t)nh * sizeof(*iq->qi));
    iq->qsum12 = malloc((size_t)nb * (size_t)nh * sizeof(*iq->qsum12));
    iq->qscale = malloc((size_t)nb * (size_t)nh * sizeof(*iq->qscale));
    uint8_t *codes = malloc((size_t)d / 2 + (size_t)nb);
    float *back = malloc((size_t)d * sizeof(*back));
    bool ok = iq->qi && iq->qsum12 && iq->qscale && codes && back;
    for (int h = 0; ok && h < nh; h++) {
        const float *qh = q + (size_t)h * (size_t)d;
        uint8_t *sc = codes + d / 2;
        dsv4_fp4_pack(qh, (size_t)d, 32, codes, sc);
        dsv4_fp4_unpack(codes, sc, (size_t)d, 32, back);
        if (memcmp(back, qh, (size_t)d * sizeof(float)) != 0) {
            ok = false;     /* not FP4-QDQ'd values (or a NaN block) */
            break;
        }
        int emin = 255, emax = 0;
        for (int b = 0; b < nb; b++) {
            emin = sc[b] < emin ? sc[b] : emin;
            emax = sc[b] > emax ? sc[b] : emax;
            iq->qscale[(size_t)b * (size_t)nh + (size_t)h] = ldexp(1.0, (int)sc[b] - 128);
            int32_t sum = 0;
            for (int i = 32 * b; i < 32 * b + 32; i++)
                sum += e2m1_doubled[(codes[i / 2] >> (4 * (i & 1))) & 15];
            iq->qsum12[(size_t)b * (size_t)nh + (size_t)h] = 12 * sum;
        }
        iq->qspread = emax - emin > iq->qspread ? emax - emin : iq->qspread;
        /* slot s: code bytes 4s .. 4s + 3; lo = their low nibbles (elements 8s, +2, +4, +6),
         * hi = their high nibbles (8s + 1, +3, +5, +7), as the twins decode a key */
        for (int s = 0; s < ns; s++)
            for (int half = 0; half < 2; half++) {
                uint32_t v = 0;
                for (int j = 0; j < 4; j++) {
                    uint8_t c = (uint8_t)((codes[4 * s + j] >> (4 * half)) & 15);
                    v |= (uint32_t)(uint8_t)e2m1_doubled[c] << (8 * j);
                }
                iq->qi[((size_t)s * 2 + (size_t)half) * (size_t)nh + (size_t)h] = (int32_t)v;
            }
    }
    free(back);
    free(codes);
    if (ok && iq->qspread <= dsv4_index_exact_spread(d)) {
        iq->exact_int = true;
        return;
    }
    dsv4_index_query_free(iq);
}

void dsv4_index_query_free(struct dsv4_index_query *iq)
{
    free(iq->qi);
    free(iq->qsum12);
    free(iq->qscale);
    iq->qi = NULL;
    iq->qsum12 = NULL;
    iq->qscale = NULL;
    iq->exact_int = false;
}
