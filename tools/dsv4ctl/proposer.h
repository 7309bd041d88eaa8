/* SPDX-License-Identifier: MIT */
/*
 * --dspark-proposer SPEC (test-only, for tests and benchmarks without a trained drafter):
 *   replay:FILE[:err=N,N,...|:err=all][:agree=P][:conf=C][:draft]
 * FILE holds the known continuation (generated token numbers 0.., ids separated by spaces,
 * commas or newlines, e.g. the output of `dsv4ctl run --format ids`); the proposer replays it
 * with a wrong id at the listed token numbers, at all of them, or at a pseudo-random
 * 100 − P percent; C is the confidence it reports (default 0.9); :draft runs the model's
 * drafter too and discards its block (benchmarks: the drafting cost without a trained drafter).
 */
#pragma once

#include <stdint.h>

#include "speculate.h"

struct dsv4ctl_proposer {
    struct dsv4_replay_spec spec;
    int32_t *cont;
    int64_t *err;
    bool draft_cost;
};

/* 0, or a DSV4_EXIT_* code after printing why. */
int dsv4ctl_proposer_parse(const char *arg, int vocab, struct dsv4ctl_proposer *ret);
void dsv4ctl_proposer_free(struct dsv4ctl_proposer *p);
