/* SPDX-License-Identifier: MIT */
/*
 * dsv4-supervisor: the daemon that runs the set (supervisor.h). `dsv4ctl start` makes the
 * memory plan and execs it with the plan's figures on the command line, as systemctl asks
 * systemd; under a service manager it can be run directly with --foreground.
 *
 *   dsv4-supervisor --model DIR [--run-dir DIR] [--threads N] [--memory-gb N]
 *       [--budget-bytes N] [--cache-bytes N] [--session-bytes N] [--drafter-cache-bytes N]
 *       [--sessions N] [--metrics-addr HOST:PORT [--metrics-required] | --no-metrics]
 *       [--watchdog-s N] [--stall-s N] [--dspark] [--foreground] [--ready-fd FD]
 *       [--api-addr HOST:PORT [--api-required] | --no-api] [--api-key-file FILE]
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "tcp_listen.h"
#include "exitcode.h"
#include "metrics.h"
#include "parse.h"
#include "session_layout.h"
#include "supervisor.h"

static void usage(void)
{
    fprintf(stderr,
            "usage: dsv4-supervisor --model DIR [--run-dir DIR] [--threads N] [--memory-gb N]\n"
            "       [--budget-bytes N] [--cache-bytes N] [--session-bytes N]\n"
            "       [--drafter-cache-bytes N] [--sessions N] [--step-tokens N] [--chunk N]\n"
            "       [--max-ctx N]\n"
            "       [--prefix-cache-mb N] [--prefix-cache-gb N] [--prefix-cache-dir DIR]\n"
            "       [--no-prefix-cache]\n"
            "       [--metrics-addr HOST:PORT [--metrics-required] | --no-metrics]\n"
            "       [--watchdog-s N] [--stall-s N] [--dspark [--dspark-trace FILE]] [--foreground]\n"
            "       [--ready-fd FD]\n"
            "       [--api-addr HOST:PORT [--api-required] | --no-api] [--api-key-file FILE]\n"
            "(normally started by `dsv4ctl start`, which makes the memory plan)\n");
}

static int parse_argv(int argc, char **argv, struct supervisor_opts *o, int *ready_fd)
{
    static const struct option opts[] = {
        { "model", required_argument, NULL, 'm' },
        { "run-dir", required_argument, NULL, 'r' },
        { "threads", required_argument, NULL, 't' },
        { "memory-gb", required_argument, NULL, 'g' },
        { "budget-bytes", required_argument, NULL, 'B' },
        { "cache-bytes", required_argument, NULL, 'C' },
        { "session-bytes", required_argument, NULL, 'S' },
        { "drafter-cache-bytes", required_argument, NULL, 'D' },
        { "sessions", required_argument, NULL, 's' },
        { "step-tokens", required_argument, NULL, 'k' },
        { "chunk", required_argument, NULL, 'H' },
        { "prefix-cache-mb", required_argument, NULL, 'P' },
        { "prefix-cache-gb", required_argument, NULL, 'G' },
        { "prefix-cache-dir", required_argument, NULL, 'X' },
        { "no-prefix-cache", no_argument, NULL, 'O' },
        { "max-ctx", required_argument, NULL, 'c' },
        { "metrics-addr", required_argument, NULL, 'M' },
        { "metrics-required", no_argument, NULL, 'R' },
        { "no-metrics", no_argument, NULL, 'N' },
        { "watchdog-s", required_argument, NULL, 'w' },
        { "stall-s", required_argument, NULL, 'x' },
        { "dspark", no_argument, NULL, 'd' },
        { "dspark-trace", required_argument, NULL, 'T' },
        { "foreground", no_argument, NULL, 'f' },
        { "ready-fd", required_argument, NULL, 'y' },
        { "api-addr", required_argument, NULL, 'A' },
        { "api-required", no_argument, NULL, 'Q' },
        { "no-api", no_argument, NULL, 'a' },
        { "api-key-file", required_argument, NULL, 'K' },
        { 0 },
    };
    const char *me = "dsv4-supervisor";
    *o = (struct supervisor_opts){ .threads = 1, .metrics_addr = DSV4_METRICS_DEFAULT_ADDR,
                                   .watchdog_s = 30, .stall_s = 600,
                                   .api_addr = DSV4_API_DEFAULT_ADDR };
    *ready_fd = -1;
    int c, r = 0;
    optind = 1;
    while (r == 0 && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'r': o->run_dir = optarg; break;
        case 't': r = dsv4_parse_int_opt(me, "threads", optarg, 1, 4096, &o->threads); break;
        case 'g': r = dsv4_parse_double_opt(me, "memory-gb", optarg, 0, 1 << 24, &o->memory_gb);
            break;
        case 'B': r = dsv4_parse_u64_opt(me, "budget-bytes", optarg, 0, UINT64_MAX / 2,
                                         &o->budget_bytes); break;
        case 'C': r = dsv4_parse_u64_opt(me, "cache-bytes", optarg, 0, UINT64_MAX / 2,
                                         &o->cache_bytes); break;
        case 'S': r = dsv4_parse_u64_opt(me, "session-bytes", optarg, 0, UINT64_MAX / 2,
                                         &o->session_bytes); break;
        case 'D': r = dsv4_parse_u64_opt(me, "drafter-cache-bytes", optarg, 0, UINT64_MAX / 2,
                                         &o->drafter_cache_bytes); break;
        case 's': r = dsv4_parse_int_opt(me, "sessions", optarg, 0, 1 << 16, &o->sessions); break;
        case 'k': r = dsv4_parse_int_opt(me, "step-tokens", optarg, 0, 1 << 20, &o->step_tokens);
            break;
        case 'H': r = dsv4_parse_int_opt(me, "chunk", optarg, 0, DSV4_MAX_CHUNK, &o->chunk);
            break;
        case 'P': {
            int mb;
            r = dsv4_parse_int_opt(me, "prefix-cache-mb", optarg, 0, 1 << 30, &mb);
            o->prefix_mb = optarg;
            break;
        }
        case 'G': {
            double gb;
            r = dsv4_parse_double_opt(me, "prefix-cache-gb", optarg, 0, 1 << 20, &gb);
            o->prefix_gb = optarg;
            break;
        }
        case 'X': o->prefix_dir = optarg; break;
        case 'O': o->no_prefix = true; break;
        case 'c':
            if ((r = dsv4_parse_i64(optarg, 0, INT32_MAX, &o->max_ctx)) < 0)
                fprintf(stderr, "%s: --max-ctx: '%s' is not an integer in [0, %d]\n", me, optarg,
                        INT32_MAX);
            break;
        case 'M': o->metrics_addr = optarg; break;
        case 'R': o->metrics_explicit = true; break;
        case 'N': o->metrics_addr = NULL; break;
        case 'w': r = dsv4_parse_double_opt(me, "watchdog-s", optarg, 0, 1e6, &o->watchdog_s);
            break;
        case 'x': r = dsv4_parse_double_opt(me, "stall-s", optarg, 0, 1e7, &o->stall_s); break;
        case 'd': o->dspark = true; break;
        case 'T': o->dspark_trace = optarg; break;
        case 'f': o->foreground = true; break;
        case 'y': r = dsv4_parse_int_opt(me, "ready-fd", optarg, 3, 1 << 20, ready_fd); break;
        case 'A': o->api_addr = optarg; break;
        case 'Q': o->api_explicit = true; break;
        case 'a': o->api_addr = NULL; break;
        case 'K': o->api_key_file = optarg; break;
        default: usage(); return -EINVAL;
        }
    }
    if (r < 0)
        return r;
    if (!o->model || optind != argc) {
        usage();
        return -EINVAL;
    }
    if (o->api_addr && !o->api_key_file && !dsv4_addr_is_loopback(o->api_addr)) {
        fprintf(stderr, "%s: --api-addr %s is not a loopback address: give --api-key-file\n", me,
                o->api_addr);
        return -EINVAL;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct supervisor_opts o;
    int ready_fd;
    if (parse_argv(argc, argv, &o, &ready_fd) < 0)
        return DSV4_EXIT_USAGE;
    /* the readiness pipe from `dsv4ctl start` must not leak into the daemons */
    if (ready_fd >= 0 && fcntl(ready_fd, F_SETFD, FD_CLOEXEC) < 0) {
        fprintf(stderr, "dsv4-supervisor: --ready-fd %d: %s\n", ready_fd, strerror(errno));
        return DSV4_EXIT_USAGE;
    }
    return dsv4_supervise(&o, ready_fd);
}
