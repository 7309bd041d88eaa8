/* SPDX-License-Identifier: MIT */
/*
 * Sampling (common/sampling.c) against its definition (sampling.h, docs/numerics.md), written
 * out again here: the candidates are the top_k largest logits (ties: the lower id), cut to the
 * shortest prefix by rank whose weight exp((l - max) / T) reaches top_p of theirs; draw i of
 * seed s, u = dsv4_sample_uniform(s, i), picks the first candidate in id order whose running
 * weight reaches u times the candidates' total. Every draw is compared exactly over many
 * seeds, temperatures, top_p and top_k (the seed and every cut matter); and, without any
 * reference code, the set of ids drawn at each top_p is exactly the nucleus its masses give.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "sampling.h"

#define N 12

/* The definition, spelled out with plain arrays (n <= N). */
static int32_t reference(const float *lg, int n, const struct dsv4_sampling *p, uint64_t i)
{
    if (p->temperature == 0.0)
        return dsv4_argmax(lg, n);
    int rank[N];   /* ids by rank: larger logit first, then the lower id */
    for (int a = 0; a < n; a++)
        rank[a] = a;
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            if (lg[rank[b]] > lg[rank[a]] || (lg[rank[b]] == lg[rank[a]] && rank[b] < rank[a])) {
                int t = rank[a];
                rank[a] = rank[b];
                rank[b] = t;
            }
    double mx = lg[rank[0]], w[N];
    for (int v = 0; v < n; v++)
        w[v] = exp(((double)lg[v] - mx) / p->temperature);
    int keep = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    if (p->top_p < 1.0) {
        double total = 0, acc = 0;
        for (int r = 0; r < keep; r++)
            total += w[rank[r]];
        int r = 0;
        while (r < keep && acc < p->top_p * total)
            acc += w[rank[r++]];
        keep = r;
    }
    bool in[N] = { false };
    for (int r = 0; r < keep; r++)
        in[rank[r]] = true;
    double sum = 0, acc = 0;
    for (int v = 0; v < n; v++)
        sum += in[v] ? w[v] : 0;
    double u = dsv4_sample_uniform(p->seed, i) * sum;
    int32_t last = -1;
    for (int v = 0; v < n; v++) {
        if (!in[v])
            continue;
        last = v;
        acc += w[v];
        if (acc >= u)
            return v;
    }
    return last;
}

static void test_against_definition(void **state)
{
    (void)state;
    const float lg[N] = { 0.3f, 1.7f, -0.4f, 1.1f, 2.2f, 0.9f, -1.3f, 1.7f, 0.0f, 0.6f, 2.0f, -0.2f };
    const uint64_t seeds[] = { 0, 1, 2, 77, 0x8000000000000005ull };
    const double temps[] = { 0.5, 1.0, 1.7 }, top_ps[] = { 1.0, 0.95, 0.8, 0.6, 0.3, 1e-6 };
    const int top_ks[] = { 0, 1, 3, 7 };
    long n = 0;
    for (size_t s = 0; s < sizeof(seeds) / sizeof(seeds[0]); s++)
        for (size_t t = 0; t < sizeof(temps) / sizeof(temps[0]); t++)
            for (size_t pp = 0; pp < sizeof(top_ps) / sizeof(top_ps[0]); pp++)
                for (size_t k = 0; k < sizeof(top_ks) / sizeof(top_ks[0]); k++) {
                    struct dsv4_sampling sp = { temps[t], top_ps[pp], top_ks[k], seeds[s] };
                    for (uint64_t i = 0; i < 400; i++, n++) {
                        int32_t want = reference(lg, N, &sp, i), got = dsv4_sample(lg, N, &sp, i);
                        if (got != want)
                            fail_msg("seed %llu T %g top_p %g top_k %d draw %llu: %d, want %d",
                                     (unsigned long long)sp.seed, sp.temperature, sp.top_p,
                                     sp.top_k, (unsigned long long)i, got, want);
                    }
                }
    assert_int_equal(n, 5 * 3 * 6 * 4 * 400);
}

/* Different seeds draw different sequences; the same seed the same one. */
static void test_seed_matters(void **state)
{
    (void)state;
    const float lg[4] = { 0.0f, 0.1f, 0.2f, 0.3f };
    const uint64_t seeds[] = { 0, 1, 2, 3, 1234567 };
    int32_t seq[5][64];
    for (int s = 0; s < 5; s++) {
        struct dsv4_sampling sp = { 1.0, 0.9, 0, seeds[s] };
        for (int i = 0; i < 64; i++) {
            seq[s][i] = dsv4_sample(lg, 4, &sp, (uint64_t)i);
            assert_int_equal(seq[s][i], dsv4_sample(lg, 4, &sp, (uint64_t)i));
        }
    }
    for (int a = 0; a < 5; a++)
        for (int b = a + 1; b < 5; b++)
            assert_memory_not_equal(seq[a], seq[b], sizeof(seq[a]));
}

/*
 * Logits 0..5 at T = 2: weights e^(v/2), masses by rank (id 5 first) 0.414, 0.251, 0.152,
 * 0.092, 0.056, 0.034; cumulative 0.414, 0.665, 0.817, 0.909, 0.966, 1. A top_p between two
 * cumulative masses keeps exactly the ids up to the next one, so over 3000 draws (the rarest
 * kept id is drawn ~3 % of the time) exactly those ids are seen.
 */
static void test_nucleus_sizes(void **state)
{
    (void)state;
    const float lg[6] = { 0, 1, 2, 3, 4, 5 };
    const double top_ps[] = { 0.3, 0.5, 0.7, 0.85, 0.95, 0.99 };
    for (int k = 0; k < 6; k++)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            struct dsv4_sampling sp = { 2.0, top_ps[k], 0, seed };
            int seen[6] = { 0 };
            for (uint64_t i = 0; i < 3000; i++)
                seen[dsv4_sample(lg, 6, &sp, i)]++;
            for (int v = 0; v < 6; v++)
                if ((seen[v] > 0) != (v >= 5 - k))
                    fail_msg("top_p %g seed %llu: id %d drawn %d times; the nucleus is ids %d..5",
                             top_ps[k], (unsigned long long)seed, v, seen[v], 5 - k);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_definition),
        cmocka_unit_test(test_seed_matters),
        cmocka_unit_test(test_nucleus_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
