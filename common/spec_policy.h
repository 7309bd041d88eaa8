/* SPDX-License-Identifier: MIT */
/*
 * The speculation policy alone (used by the in-process loop, speculate.c, and by the
 * scheduler, which verifies over the wire): whether a step proposes, how many drafts it
 * verifies, and the quench (docs/ARCHITECTURE.md "DSpark", policy).
 *
 * Survival chance of slot i given its prefix survived = the proposer's confidence × the slot's
 * calibration (EMA of acceptance ÷ EMA of confidence over the steps that reached the slot; the
 * first sample replaces the neutral prior). A verify of L drafts costs 1 + row_cost·L plain
 * steps; row_cost is measured from wall time (the extra routed experts the rows pull, the
 * drafting, the verify rows themselves), a plain step being re-measured at least every 64
 * steps. L maximises (1 + expected accepted) ÷ cost; L = 0 starts a quench. A quench also
 * starts when the realised tokens per plain-step time stay below 1 over 4 verify steps: Q
 * plain steps (8, doubling per consecutive quench up to 256, and at least what makes a failed
 * probe cost ≤ 2 % of the quench: (probe cost − 1) / 0.02, capped at 4096), then one probe
 * step that verifies a single draft (the cheapest verify; slot 0's calibration gets a sample,
 * later slots keep theirs, neutral until sampled). A request's first verify is such a probe.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#define DSV4_SPEC_MAX_GAMMA 64

struct dsv4_spec_opts {
    int fixed_verify;       /* > 0: always verify this many drafts (tests, benchmarks); 0: policy */
    bool no_quench;         /* never switch speculation off */
    bool off;               /* plain decoding through the same code (no proposals) */
    bool draft_cost;        /* benchmarks: with a test proposer, run the drafter too and
                             * discard its block (the drafting cost without a trained drafter) */
    bool rows_as_cost;      /* tests: a step costs its forwarded rows (a drafting pass one
                             * more), not its wall time, so the policy's choices do not
                             * depend on how loaded the machine is */
};

struct dsv4_spec_stats {
    uint64_t proposed;      /* drafts verified */
    uint64_t accepted;      /* drafts accepted */
    uint64_t verify_steps;  /* steps that verified ≥ 1 draft */
    uint64_t plain_steps;   /* steps with no draft (policy, quench, off) */
    uint64_t quench_events; /* times the quench switched speculation off */
    double row_cost;        /* measured cost of one extra verify row / plain step */
};

struct dsv4_spec_policy {
    struct dsv4_spec_opts o;
    double t_plain;         /* EMA of a plain step, ns (0: not measured) */
    int since_plain;
    double ema_acc[DSV4_SPEC_MAX_GAMMA], ema_conf[DSV4_SPEC_MAX_GAMMA];
    int seen[DSV4_SPEC_MAX_GAMMA];
    double gain;
    double probe_cost;      /* EMA of a one-draft verify step / plain step (0: none yet) */
    int n_gain, quench_left, quench_len;
    bool probe;
    struct dsv4_spec_stats st;
};

void dsv4_spec_policy_init(struct dsv4_spec_policy *p, const struct dsv4_spec_opts *o);
/* Should this step propose (false: quenched, or a plain step is due for timing)? */
bool dsv4_spec_policy_propose(struct dsv4_spec_policy *p);
/* Drafts to verify given the proposals' confidences conf[0..lmax) (0: a plain step). */
int dsv4_spec_policy_len(struct dsv4_spec_policy *p, const float *conf, int lmax);
/* A finished step: L drafts verified (0: plain), `accepted` of them, `tokens` decided, in ns. */
void dsv4_spec_policy_record(struct dsv4_spec_policy *p, int L, const float *conf, int accepted,
                             int tokens, double ns);
