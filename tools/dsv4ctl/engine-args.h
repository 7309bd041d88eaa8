/* SPDX-License-Identifier: MIT */
/*
 * Options shared by the in-process model subcommands (run, score): model
 * directory, the prompt (ids, or text encoded with the model's tokenizer,
 * optionally through the chat template), threads, chunk size, statistics.
 * Parsing is strict: an unknown option or a malformed number is a usage
 * error naming it.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "engine.h"
#include "prefix_cache.h"
#include "tokenizer.h"

struct engine_args {
    const char *model;
    int32_t *prompt;
    int n_prompt;
    const char *text;           /* text prompt (instead of --prompt-ids) */
    bool chat, think;           /* --chat, --think / --no-think */
    dsv4_tokenizer *tok;        /* opened when the prompt is text or --format text */
    int max_tokens;
    double temperature;
    uint64_t seed;
    const char *format;
    bool stats;
    int progress;               /* run: prefill progress on stderr; -1 auto (tty), 0 off, 1 on */
    int threads;
    int chunk;
    int64_t max_ctx;
    uint64_t expert_cache_mib;  /* in-process expert LRU budget; 0 = engine default */
    /* speculative decoding (run only): --dspark / --no-dspark (default off) */
    bool dspark;
    const char *proposer;       /* --dspark-proposer SPEC (test-only; implies --dspark) */
    int dspark_verify;          /* --dspark-verify N: fixed verify length; 0 = policy */
    bool dspark_no_quench;      /* --dspark-no-quench */
    const char *dspark_trace;   /* --dspark-trace FILE: one JSON line per step (run) */
    /* prefix cache (run only; docs/ARCHITECTURE.md "Prefix cache") */
    bool no_prefix_cache;       /* --no-prefix-cache */
    uint64_t prefix_cache_mb;   /* --prefix-cache-mb N: RAM tier (MiB) */
    double prefix_cache_gb;     /* --prefix-cache-gb G: disk tier cap (GiB; 0: no disk tier) */
    const char *prefix_cache_dir;   /* --prefix-cache-dir DIR (default: per model, XDG) */
};

#define ENGINE_ARGS_PREFIX_MB 256       /* run's default RAM tier */
#define ENGINE_ARGS_PREFIX_GB 8.0       /* run's default disk cap */

/* Parses argv[1..] and encodes a text prompt; returns 0 or a DSV4_EXIT_*
 * code after printing why (-1 after --help). --format defaults to text for a
 * text prompt and to ids (run) / tsv (score) for --prompt-ids. */
int engine_args_parse(int argc, char **argv, bool generate, struct engine_args *ret);
void engine_args_free(struct engine_args *a);
/* Open the engine and a session able to hold `positions` (a chunk of 0 becomes the plan's);
 * prints errors. */
int engine_args_open(struct engine_args *a, int64_t positions, dsv4_engine **eng,
                     dsv4_session **ses);
/* The prefix cache of the model in `model` (config c) for `run` (cmd_cache.c): RAM tier ram_mb
 * MiB, disk tier disk_gb GiB (0: none) in `dir` (NULL: the default); NULL after a line on
 * stderr when it cannot be opened (the run goes on without it). */
dsv4_pcache *dsv4ctl_prefix_open(const char *model, const struct dsv4_config *c,
                                 uint64_t ram_mb, double disk_gb, const char *dir);
