/* SPDX-License-Identifier: MIT */
/*
 * Token sampling: greedy, temperature, top-k, top-p, reproducible from a
 * seed. The random draw of the i-th generated token is a pure function of
 * (seed, i) — splitmix64 of seed + (i+1)·golden, the same sequence
 * `dsv4ctl run` draws — so a replayed or resumed request needs no saved RNG
 * state, and with top-k/top-p off the choice equals `dsv4ctl run`'s.
 */
#pragma once

#include <stdint.h>

struct dsv4_sampling {
    double temperature;     /* 0 = greedy (dsv4_argmax) */
    double top_p;           /* (0, 1]; 1 = off */
    int top_k;              /* 0 = off */
    uint64_t seed;
};

/* Uniform in [0, 1) of draw `index` under `seed`. */
double dsv4_sample_uniform(uint64_t seed, uint64_t index);
/* Choose a token from logits[0..n) for generated token number `index`. */
int32_t dsv4_sample(const float *logits, int n, const struct dsv4_sampling *p, uint64_t index);
/* Greedy choice with the documented tie rule (lower id wins). */
int32_t dsv4_argmax(const float *logits, int n);
/* log-softmax of logits[token] over n entries (fp64 accumulation). */
double dsv4_log_softmax_at(const float *logits, int n, int32_t token);
/* The two terms of that log-softmax, computed once for a row: logprob(v) =
 * (double)logits[v] - *max - *log_sum, bitwise dsv4_log_softmax_at(logits, n, v). */
void dsv4_log_softmax_terms(const float *logits, int n, double *max, double *log_sum);
/* The k largest logits' ids into ids[0..k) in descending order, ties to the lower id (the
 * order repeated dsv4_argmax would give); k <= n. O(n) for small k plus O(k) per entrant. */
void dsv4_top_k(const float *logits, int n, int k, int32_t *ids);
