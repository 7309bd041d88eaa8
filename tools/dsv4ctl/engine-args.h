/* SPDX-License-Identifier: MIT */
/*
 * Options shared by the in-process model subcommands (run, score): model
 * directory, prompt ids, threads, chunk size, statistics. Parsing is strict:
 * an unknown option or a malformed number is a usage error naming it.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "engine.h"

struct engine_args {
    const char *model;
    int32_t *prompt;
    int n_prompt;
    int max_tokens;
    double temperature;
    uint64_t seed;
    const char *format;
    bool stats;
    int threads;
    int chunk;
    int64_t max_ctx;
    uint64_t expert_cache_mib;  /* in-process expert LRU budget; 0 = engine default */
};

/* Parses argv[1..]; returns 0 or a DSV4_EXIT_* code after printing why. */
int engine_args_parse(int argc, char **argv, bool generate, struct engine_args *ret);
void engine_args_free(struct engine_args *a);
/* Open the engine and a session able to hold `positions`; prints errors. */
int engine_args_open(const struct engine_args *a, int64_t positions, dsv4_engine **eng,
                     dsv4_session **ses);
