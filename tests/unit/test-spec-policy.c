/* SPDX-License-Identifier: MIT */
/*
 * The speculation policy (daemons/compute/spec_policy.c) in a simulated decode with given
 * costs, no wall clock: a proposer whose drafts each survive with probability `agree`, while
 * claiming 0.9 confidence (the worst case for the calibration); a plain step costs 1, a verify
 * of L drafts 1 + row·L, and drafting `draft` more whenever the policy asks for proposals.
 * Speed-up = plain time ÷ time with the policy over the same tokens. Checks the promise of
 * the quench (no loss beyond 3 % when nothing is accepted, whatever drafting costs) and that
 * the policy still takes the gain (≥ 1.3× at 90 % with cheap rows).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "spec_policy.h"

struct sim {
    double speedup;
    struct dsv4_spec_stats st;
};

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static struct sim simulate(double agree, double draft, double row, int tokens, uint64_t seed)
{
    struct dsv4_spec_policy p;
    dsv4_spec_policy_init(&p, NULL);
    const double T = 1e6;       /* a plain step, ns */
    float conf[5] = { 0.9f, 0.9f, 0.9f, 0.9f, 0.9f };
    double total = 0.0;
    int made = 0;
    while (made < tokens) {
        int L = 0;
        double ns = T;
        if (dsv4_spec_policy_propose(&p)) {
            ns += draft * T;
            L = dsv4_spec_policy_len(&p, conf, 5);
        }
        int acc = 0;
        while (acc < L && (double)(rng_next(&seed) % 10000) < agree * 10000.0)
            acc++;
        ns += row * L * T;
        dsv4_spec_policy_record(&p, L, conf, acc, acc + 1, ns);
        made += acc + 1;
        total += ns;
    }
    struct sim r = { made * T / total, p.st };
    return r;
}

static void test_floor_at_zero(void **state)
{
    (void)state;
    const double drafts[] = { 0.0, 0.3, 1.0, 3.0, 6.0 };
    for (size_t i = 0; i < sizeof(drafts) / sizeof(drafts[0]); i++) {
        struct sim r = simulate(0.0, drafts[i], 0.4, 1000, 0x9e3779b97f4a7c15ULL + i);
        print_message("# 0%% agreement, drafting %.1f steps: %.3fx, %llu verify steps, "
                      "%llu quench events\n", drafts[i], r.speedup,
                      (unsigned long long)r.st.verify_steps,
                      (unsigned long long)r.st.quench_events);
        assert_true(r.speedup >= 0.97);
        assert_true(r.st.quench_events >= 1);
        assert_int_equal(r.st.accepted, 0);
    }
}

static void test_gain_at_ninety(void **state)
{
    (void)state;
    double worst = 1e9;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        struct sim r = simulate(0.9, 0.05, 0.36, 1000, seed * 0x2545F4914F6CDD1DULL);
        worst = fmin(worst, r.speedup);
        assert_true(r.st.verify_steps > 0);
    }
    print_message("# 90%% agreement, rows 0.36, drafting 0.05: worst of 8 runs %.3fx\n", worst);
    assert_true(worst >= 1.3);
    /* costly rows (a verify of 1 + 3 = 2.8 plain steps: best possible ≈ 1.25×) */
    worst = 1e9;
    for (uint64_t seed = 1; seed <= 8; seed++)
        worst = fmin(worst, simulate(0.9, 0.05, 0.6, 1000, seed * 0x2545F4914F6CDD1DULL).speedup);
    print_message("# 90%% agreement, rows 0.60, drafting 0.05: worst of 8 runs %.3fx\n", worst);
    assert_true(worst >= 1.1);
}

static void test_no_big_loss_at_half(void **state)
{
    (void)state;
    /* 50 %: a gain with cheap rows; never much of a loss with costly drafting */
    const double drafts[] = { 0.05, 1.0, 3.0 };
    for (size_t i = 0; i < sizeof(drafts) / sizeof(drafts[0]); i++) {
        double worst = 1e9;
        for (uint64_t seed = 1; seed <= 8; seed++)
            worst = fmin(worst, simulate(0.5, drafts[i], 0.36, 1000, seed * 7919).speedup);
        print_message("# 50%% agreement, drafting %.2f steps: worst of 8 runs %.3fx\n",
                      drafts[i], worst);
        assert_true(worst >= (drafts[i] < 0.1 ? 0.98 : 0.95));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_floor_at_zero),
        cmocka_unit_test(test_gain_at_ninety),
        cmocka_unit_test(test_no_big_loss_at_half),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
