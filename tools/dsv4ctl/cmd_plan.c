/* SPDX-License-Identifier: MIT */
/*
 * `dsv4ctl plan --model DIR [--memory-gb N] [--max-ctx N] [--sessions N]
 * [--threads N] [--json]`: print the memory plan (common/plan.h) that
 * `start` would enforce. Exit 0 when the budget can run the model, 1 when
 * it is below the minimum (the plan is printed either way), 64 usage,
 * 65/66 for a bad or missing config. dsv4ctl_make_plan is shared with start.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "config.h"
#include "dsv4ctl.h"
#include "parse.h"
#include "plan.h"
#include "session_layout.h"

int dsv4ctl_make_plan(const char *model, double memory_gb, int64_t max_ctx, int sessions,
                      int threads, bool dspark, uint64_t prefix_ram, int chunk,
                      struct dsv4_plan *ret, struct dsv4_err *err)
{
    struct dsv4_config cfg;
    int rc = dsv4_config_load(model, &cfg, err);
    if (rc < 0)
        return rc == -ENOENT ? DSV4_EXIT_NOINPUT : DSV4_EXIT_DATAERR;
    struct statvfs vfs;
    struct dsv4_plan_opts o = { .budget_bytes = (uint64_t)(memory_gb * 1073741824.0),
                                .max_ctx = max_ctx,
                                .sessions = sessions,
                                .chunk = chunk,
                                .threads = threads,
                                .dspark = dspark,
                                .prefix_ram = prefix_ram };
    if (statvfs("/dev/shm", &vfs) == 0)
        o.shm_avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    return dsv4_plan_make(&cfg, &o, ret, err) < 0 ? DSV4_EXIT_FAIL : DSV4_EXIT_OK;
}

int dsv4ctl_default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 && n < 1024 ? (int)n : 1;
}

int dsv4ctl_plan(int argc, char **argv)
{
    static const struct option opts[] = {
        { "model", required_argument, NULL, 'm' },
        { "memory-gb", required_argument, NULL, 'g' },
        { "max-ctx", required_argument, NULL, 'c' },
        { "sessions", required_argument, NULL, 's' },
        { "threads", required_argument, NULL, 't' },
        { "json", no_argument, NULL, 'j' },
        { "dspark", no_argument, NULL, 'D' },
        { "chunk", required_argument, NULL, 'k' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    const char *model = NULL;
    double gb = 0;
    int64_t ctx = 0;
    int sessions = 0, threads = dsv4ctl_default_threads(), chunk = 0, c, bad = 0;
    const char *me = "dsv4ctl plan";
    bool json = false, dspark = false;
    optind = 1;
    while (bad == 0 && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'g': bad = dsv4_parse_double_opt(me, "memory-gb", optarg, 0, 1 << 24, &gb); break;
        case 'c': bad = dsv4_parse_i64(optarg, 0, INT32_MAX, &ctx);
            if (bad < 0)
                fprintf(stderr, "%s: --max-ctx: '%s' is not an integer in [0, %d]\n", me, optarg,
                        INT32_MAX);
            break;
        case 's': bad = dsv4_parse_int_opt(me, "sessions", optarg, 0, 1 << 16, &sessions); break;
        case 't': bad = dsv4_parse_int_opt(me, "threads", optarg, 1, 4096, &threads); break;
        case 'j': json = true; break;
        case 'D': dspark = true; break;
        case 'k': bad = dsv4_parse_int_opt(me, "chunk", optarg, 0, DSV4_MAX_CHUNK, &chunk); break;
        case 'h':
            printf("usage: dsv4ctl plan --model DIR [--memory-gb N] [--max-ctx N] [--sessions N] "
                   "[--threads N] [--dspark] [--chunk N] [--json]\n"
                   "  --memory-gb  budget in GiB for all daemons (default: 80%% of MemAvailable)\n"
                   "  --max-ctx    positions per session (default " DSV4_STRINGIFY(DSV4_DEFAULT_MAX_CTX) ")\n"
                   "  --sessions   sessions at once (default " DSV4_STRINGIFY(DSV4_DEFAULT_SESSIONS) ", the scheduler's --max-active)\n"
                   "  --dspark     the set runs the DSpark drafter (plans its experts' cache)\n"
                   "  --chunk      rows per prefill step (default: the widest up to "
                   DSV4_STRINGIFY(DSV4_MAX_PREFILL_CHUNK) " whose memory fits 1/32 of the room\n"
                   "               above the minimum, at least " DSV4_STRINGIFY(DSV4_DEFAULT_CHUNK) ")\n");
            return DSV4_EXIT_OK;
        default: return DSV4_EXIT_USAGE;
        }
    }
    if (bad < 0)
        return DSV4_EXIT_USAGE;
    if (!model || gb < 0 || ctx < 0 || sessions < 0 || threads < 1) {
        fprintf(stderr, "dsv4ctl plan: --model DIR is required; sizes must be positive\n");
        return DSV4_EXIT_USAGE;
    }
    struct dsv4_plan p;
    struct dsv4_err err;
    int rc = dsv4ctl_make_plan(model, gb, ctx, sessions, threads, dspark,
                               DSV4_PLAN_PREFIX_DEFAULT, chunk, &p, &err);
    if (rc != DSV4_EXIT_OK && rc != DSV4_EXIT_FAIL) {
        fprintf(stderr, "dsv4ctl plan: %s\n", err.msg);
        return rc;
    }
    if (json)
        dsv4_plan_print_json(stdout, &p);
    else
        dsv4_plan_print(stdout, &p);
    if (rc == DSV4_EXIT_FAIL)
        fprintf(stderr, "dsv4ctl plan: %s\n", err.msg);
    return rc;
}
