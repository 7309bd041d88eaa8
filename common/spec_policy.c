/* SPDX-License-Identifier: MIT */
/* The speculation policy (spec_policy.h). */
#include "spec_policy.h"

#include <math.h>
#include <string.h>

#define EMA 0.2             /* weight of a new sample (timings) */
#define CAL_EMA 0.1         /* weight of a new acceptance sample (calibration) */
#define GAIN_MIN_STEPS 16   /* verify steps measured before a quench decision */
#define GAIN_EMA 0.05       /* weight of a step in the realised-gain average (per step: 0.4-1.5) */
#define QUENCH_BASE 8
#define QUENCH_MAX 256
#define QUENCH_CAP 4096     /* longest quench, whatever a probe costs */
#define PROBE_LOSS 0.02     /* a failed probe may cost at most this share of its quench */
#define REFRESH_STEPS 64    /* re-measure a plain step at least this often */
#define ROW_COST_PRIOR 0.25 /* before any measurement */

void dsv4_spec_policy_init(struct dsv4_spec_policy *p, const struct dsv4_spec_opts *o)
{
    memset(p, 0, sizeof(*p));
    if (o)
        p->o = *o;
    for (int i = 0; i < DSV4_SPEC_MAX_GAMMA; i++)
        p->ema_acc[i] = p->ema_conf[i] = 1.0;
    p->gain = 1.0;
    p->quench_len = QUENCH_BASE;
    p->st.row_cost = ROW_COST_PRIOR;
    p->probe = true;    /* a request's first verify checks one draft before trusting more */
}

bool dsv4_spec_policy_propose(struct dsv4_spec_policy *p)
{
    if (p->o.off)
        return false;
    if (p->quench_left > 0) {
        if (--p->quench_left == 0)
            p->probe = true;
        return false;
    }
    return p->o.fixed_verify > 0 || (p->t_plain > 0.0 && p->since_plain < REFRESH_STEPS);
}

static void quench(struct dsv4_spec_policy *p)
{
    /* Long enough that the next probe (which may fail: it then yields one token for
     * probe_cost plain steps) loses at most PROBE_LOSS of the time spent quenched: with a
     * costly drafter (relative to the target) probes come rarely. */
    double need = ceil((p->probe_cost - 1.0) / PROBE_LOSS);
    p->quench_left = p->quench_len;
    /* only once probing is what is going on: after a failed probe (consecutive quench) or
     * before anything was ever accepted; a first quench after a gain stays short */
    bool probing = p->quench_len > QUENCH_BASE || p->st.accepted == 0;
    if (probing && need > p->quench_left)
        p->quench_left = need < QUENCH_CAP ? (int)need : QUENCH_CAP;
    p->quench_len = p->quench_len * 2 < QUENCH_MAX ? p->quench_len * 2 : QUENCH_MAX;
    p->st.quench_events++;
    p->n_gain = 0;
}

/* Survival chance of slot i given its prefix survived, at most 0.99. */
static double survival(const struct dsv4_spec_policy *p, const float *conf, int i)
{
    double calib = fmin(p->ema_acc[i] / fmax(p->ema_conf[i], 1e-6), 1e3);
    return fmin(fmax((double)conf[i] * calib, 0.0), 0.99);
}

/* The verify length with the best expected tokens per plain-step time (0: none beats plain). */
static int best_len(const struct dsv4_spec_policy *p, const float *conf, int lmax)
{
    double surv = 1.0, expect = 0.0, best = 1.0;
    int bl = 0;
    for (int l = 1; l <= lmax; l++) {
        surv *= survival(p, conf, l - 1);
        expect += surv;
        double v = (1.0 + expect) / (1.0 + p->st.row_cost * l);
        if (v > best) {
            best = v;
            bl = l;
        }
    }
    return bl;
}

int dsv4_spec_policy_len(struct dsv4_spec_policy *p, const float *conf, int lmax)
{
    if (lmax > DSV4_SPEC_MAX_GAMMA)
        lmax = DSV4_SPEC_MAX_GAMMA;
    if (p->o.fixed_verify > 0)
        return p->o.fixed_verify < lmax ? p->o.fixed_verify : lmax;
    if (p->probe) {     /* the cheapest test: one draft (slot 0's calibration gets a sample) */
        p->probe = false;
        return lmax > 0 ? 1 : 0;
    }
    int bl = best_len(p, conf, lmax);
    if (bl == 0 && lmax > 0 && !p->o.no_quench)
        quench(p);      /* the calibrated confidences say a verify is a loss */
    return bl;
}

void dsv4_spec_policy_record(struct dsv4_spec_policy *p, int L, const float *conf, int accepted,
                             int tokens, double ns)
{
    if (L == 0) {
        p->st.plain_steps++;
        p->t_plain = p->t_plain == 0.0 ? ns : (1 - EMA) * p->t_plain + EMA * ns;
        p->since_plain = 0;
        return;
    }
    p->since_plain++;
    p->st.verify_steps++;
    p->st.proposed += (uint64_t)L;
    p->st.accepted += (uint64_t)accepted;
    /* calibration of every slot the step reached (all before it accepted) */
    for (int i = 0; i < L && i <= accepted && i < DSV4_SPEC_MAX_GAMMA; i++) {
        /* a running mean with the neutral prior as one pseudo-sample, then an EMA slow enough
         * that two unlucky rejections at 90 % do not quench a profitable request */
        double w = fmax(CAL_EMA, 1.0 / (p->seen[i]++ + 2));
        p->ema_acc[i] = (1 - w) * p->ema_acc[i] + w * (i < accepted);
        p->ema_conf[i] = (1 - w) * p->ema_conf[i] + w * conf[i];
    }
    double cost = 1.0 + p->st.row_cost * L;
    if (p->t_plain > 0.0) {
        cost = ns / p->t_plain;
        p->st.row_cost = (1 - EMA) * p->st.row_cost + EMA * fmax((cost - 1.0) / L, 0.0);
    }
    if (L == 1)     /* what a one-draft probe costs, drafting included */
        p->probe_cost = p->probe_cost == 0.0 ? cost : (1 - EMA) * p->probe_cost + EMA * cost;
    else if (p->probe_cost == 0.0)
        p->probe_cost = 1.0 + (cost - 1.0) / L;
    /* With the slots just calibrated, would the confidences seen so far still verify
     * anything? If not, quench now rather than pay for drafting the next block first. */
    if (!p->o.no_quench && p->o.fixed_verify == 0) {
        float seen_conf[DSV4_SPEC_MAX_GAMMA];
        int n = 0;
        while (n < DSV4_SPEC_MAX_GAMMA && p->seen[n]) {
            seen_conf[n] = (float)p->ema_conf[n];
            n++;
        }
        if (n > 0 && best_len(p, seen_conf, n) == 0) {
            quench(p);
            return;
        }
    }
    double g = tokens / fmax(cost, 1e-9);
    p->gain = p->n_gain ? (1 - GAIN_EMA) * p->gain + GAIN_EMA * g : g;
    p->n_gain++;
    if (p->o.no_quench || p->o.fixed_verify > 0 || p->n_gain < GAIN_MIN_STEPS)
        return;
    if (p->gain < 1.0)
        quench(p);
    else if (p->gain > 1.1)
        p->quench_len = QUENCH_BASE;
}
