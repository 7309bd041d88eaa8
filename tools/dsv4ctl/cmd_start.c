/* SPDX-License-Identifier: MIT */
/*
 * `dsv4ctl start --model DIR [--memory-gb N] [--max-ctx N] [--sessions N]
 * [--threads N] [--run-dir DIR] [--metrics-addr HOST:PORT | --no-metrics]
 * [--watchdog-s N] [--stall-s N] [--foreground]`: makes the memory plan
 * (common/plan.h; refused with the minimum when the budget cannot run the
 * model, exit 69) and runs the supervisor (supervisor.c), which hands the
 * plan's cache and session budgets to the daemons. By default it forks the
 * supervisor into its own session (log: RUN_DIR/supervisor.log) and returns
 * 0 only once every daemon is ready, else prints the reason and exits 69.
 * --foreground supervises in this process until SIGTERM, every daemon's log
 * lines also on stderr.
 * The supervisor serves Prometheus /metrics (metrics.c) on --metrics-addr
 * (default 127.0.0.1:9464; port 0 picks one; the address bound is in
 * RUN_DIR/metrics-addr).
 * --watchdog-s (default 30) and --stall-s (default 600; 0 turns either off)
 * bound how long a daemon may go without a heartbeat, or compute without
 * progress while it has work, before the supervisor kills and restarts it.
 * dsv4-api serves the OpenAI/Anthropic HTTP API (docs/api.md) on --api-addr
 * (default 127.0.0.1:8080; port 0 picks one; the address bound is in
 * RUN_DIR/api-addr); --no-api runs the set without it. A non-loopback
 * address needs --api-key-file (the bearer key, one line).
 */
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dsv4ctl.h"
#include "api_listen.h"
#include "err.h"
#include "plan.h"
#include "metrics.h"
#include "rundir.h"
#include "supervisor.h"

int dsv4ctl_start(int argc, char **argv)
{
    static const struct option opts[] = {
        { "model", required_argument, NULL, 'm' },
        { "run-dir", required_argument, NULL, 'r' },
        { "threads", required_argument, NULL, 't' },
        { "memory-gb", required_argument, NULL, 'g' },
        { "max-ctx", required_argument, NULL, 'c' },
        { "sessions", required_argument, NULL, 's' },
        { "foreground", no_argument, NULL, 'f' },
        { "metrics-addr", required_argument, NULL, 'M' },
        { "no-metrics", no_argument, NULL, 'N' },
        { "watchdog-s", required_argument, NULL, 'w' },
        { "stall-s", required_argument, NULL, 'S' },
        { "dspark", no_argument, NULL, 'D' },
        { "api-addr", required_argument, NULL, 'A' },
        { "no-api", no_argument, NULL, 'a' },
        { "api-key-file", required_argument, NULL, 'K' },
        { "no-dspark", no_argument, NULL, 'E' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    struct supervisor_opts o = { .threads = dsv4ctl_default_threads(),
                                 .metrics_addr = DSV4_METRICS_DEFAULT_ADDR,
                                 .watchdog_s = 30, .stall_s = 600,
                                 .api_addr = DSV4_API_DEFAULT_ADDR };
    long long max_ctx = 0;
    bool fg = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': o.model = optarg; break;
        case 'r': o.run_dir = optarg; break;
        case 't': o.threads = atoi(optarg); break;
        case 'g': o.memory_gb = atof(optarg); break;
        case 'c': max_ctx = atoll(optarg); break;
        case 's': o.sessions = atoi(optarg); break;
        case 'f': fg = true; break;
        case 'D': o.dspark = true; break;
        case 'E': o.dspark = false; break;
        case 'M':
            o.metrics_addr = optarg;
            o.metrics_explicit = true;
            break;
        case 'N': o.metrics_addr = NULL; break;
        case 'A':
            o.api_addr = optarg;
            o.api_explicit = true;
            break;
        case 'a': o.api_addr = NULL; break;
        case 'K': o.api_key_file = optarg; break;
        case 'w': o.watchdog_s = atof(optarg); break;
        case 'S': o.stall_s = atof(optarg); break;
        case 'h':
            printf("usage: dsv4ctl start --model DIR [--memory-gb N] [--max-ctx N] [--sessions N] "
                   "[--threads N] [--run-dir DIR]\n"
                   "       [--metrics-addr HOST:PORT (default " DSV4_METRICS_DEFAULT_ADDR
                   ") | --no-metrics] [--watchdog-s N] [--stall-s N] [--foreground]\n"
                   "       [--dspark|--no-dspark] [--api-addr HOST:PORT (default "
                   DSV4_API_DEFAULT_ADDR ") | --no-api] [--api-key-file FILE]\n"
                   "  --memory-gb  budget in GiB for all daemons (default: 80%% of MemAvailable);\n"
                   "               see `dsv4ctl plan`\n");
            return DSV4_EXIT_OK;
        default: return DSV4_EXIT_USAGE;
        }
    }
    if (!o.model || o.threads < 1 || o.memory_gb < 0 || max_ctx < 0 || o.sessions < 0 ||
        !(o.watchdog_s >= 0) || !(o.stall_s >= 0)) {
        fprintf(stderr, "dsv4ctl start: --model DIR is required (--threads >= 1, "
                        "--watchdog-s and --stall-s >= 0)\n");
        return DSV4_EXIT_USAGE;
    }
    if (o.api_addr && !o.api_key_file && !dsv4_api_addr_is_loopback(o.api_addr)) {
        fprintf(stderr, "dsv4ctl start: --api-addr %s is not a loopback address: "
                        "give --api-key-file\n", o.api_addr);
        return DSV4_EXIT_USAGE;
    }
    if (o.api_key_file && access(o.api_key_file, R_OK) != 0) {
        fprintf(stderr, "dsv4ctl start: --api-key-file %s: not readable\n", o.api_key_file);
        return DSV4_EXIT_NOINPUT;
    }
    if (access(o.model, R_OK) != 0) {
        fprintf(stderr, "dsv4ctl start: model %s: not readable\n", o.model);
        return DSV4_EXIT_NOINPUT;
    }
    struct dsv4_plan plan;
    struct dsv4_err err;
    int prc = dsv4ctl_make_plan(o.model, o.memory_gb, max_ctx, o.sessions, o.threads, o.dspark,
                                &plan, &err);
    if (prc != DSV4_EXIT_OK) {
        fprintf(stderr, "dsv4ctl start: %s\n", err.msg);
        return prc == DSV4_EXIT_FAIL ? DSV4_EXIT_UNAVAILABLE : prc;
    }
    o.budget_bytes = plan.budget;
    o.cache_bytes = plan.cache_bytes;
    o.session_bytes = plan.sessions_total;
    o.drafter_cache_bytes = plan.drafter_cache;
    o.sessions = plan.o.sessions;
    o.foreground = fg;
    if (fg)
        return dsv4_supervise(&o, -1);
    char dir[DSV4_PATH_MAX];
    dsv4_rundir_resolve(o.run_dir, dir);
    if (dsv4_rundir_create(dir, &err) < 0) {
        fprintf(stderr, "dsv4ctl start: %s\n", err.msg);
        return 77;
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return DSV4_EXIT_SOFTWARE;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return 71;
    if (pid == 0) {     /* the supervisor: own session, log file, no terminal */
        close(p[0]);
        setsid();
        char log[DSV4_PATH_MAX + 32];
        snprintf(log, sizeof(log), "%s/supervisor.log", dir);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
        dup2(nul, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        o.run_dir = dir;
        _exit(dsv4_supervise(&o, p[1]));
    }
    close(p[1]);
    char buf[1300] = { 0 };
    size_t n = 0;
    ssize_t k;
    while (n < sizeof(buf) - 1 && (k = read(p[0], buf + n, sizeof(buf) - 1 - n)) > 0)
        n += (size_t)k;
    close(p[0]);
    if (strncmp(buf, "ok", 2) == 0) {
        fprintf(stderr, "dsv4: daemons ready (run dir %s)\n", dir);
        return DSV4_EXIT_OK;
    }
    waitpid(pid, NULL, WNOHANG);
    fprintf(stderr, "dsv4ctl start: %s", n ? buf : "supervisor exited without a word\n");
    return DSV4_EXIT_UNAVAILABLE;
}
