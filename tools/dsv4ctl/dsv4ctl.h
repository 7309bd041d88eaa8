/* SPDX-License-Identifier: MIT */
/*
 * dsv4ctl: one binary, one file per subcommand. Each subcommand is a
 * function with main()'s signature (argv[0] is the subcommand name) that
 * returns a process exit status (sysexits: 0 ok, 64 usage, 65 bad data,
 * 66 no input, 69 unavailable, 70 software, 74 I/O).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "exitcode.h"

struct dsv4ctl_command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
};

/* The subcommands; the table lives in dsv4ctl.c. */
int dsv4ctl_version(int argc, char **argv);
int dsv4ctl_run(int argc, char **argv);
int dsv4ctl_score(int argc, char **argv);
int dsv4ctl_inspect(int argc, char **argv);
int dsv4ctl_tokenize(int argc, char **argv);
int dsv4ctl_detokenize(int argc, char **argv);
int dsv4ctl_start(int argc, char **argv);
int dsv4ctl_stop(int argc, char **argv);
int dsv4ctl_status(int argc, char **argv);
int dsv4ctl_gen(int argc, char **argv);
int dsv4ctl_score_any(int argc, char **argv);
int dsv4ctl_plan(int argc, char **argv);
int dsv4ctl_cache(int argc, char **argv);

struct dsv4_plan;
struct dsv4_err;
/* Load DIR's config and plan for the budget (cmd_plan.c); DSV4_EXIT_OK, DSV4_EXIT_FAIL when
 * the budget is below the minimum (err says by how much), or 65/66 for the config.
 * prefix_ram: the prefix cache's RAM tier (DSV4_PLAN_PREFIX_DEFAULT, 0 = none); chunk: rows
 * per prefill step (0: the plan picks it from the budget). */
int dsv4ctl_make_plan(const char *model, double memory_gb, int64_t max_ctx, int sessions,
                      int threads, bool dspark, uint64_t prefix_ram, int chunk,
                      struct dsv4_plan *ret, struct dsv4_err *err);
/* Online CPUs: the default compute thread count (dense work on every core). */
int dsv4ctl_default_threads(void);
