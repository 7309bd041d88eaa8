/* SPDX-License-Identifier: MIT */
/*
 * `dsv4ctl start --model DIR [--memory-gb N] [--max-ctx N] [--sessions N]
 * [--threads N] [--run-dir DIR] [--metrics-addr HOST:PORT | --no-metrics]
 * [--watchdog-s N] [--stall-s N] [--foreground] [--dspark]`: makes the memory plan
 * (common/plan.h; refused with the minimum when the budget cannot run the
 * model, exit 69) and execs dsv4-supervisor (daemons/supervisor/) with the plan's cache and
 * session budgets on its command line. By default the supervisor is forked into its own
 * session (log: RUN_DIR/supervisor.log) and `start` returns 0 only once every daemon is
 * ready, else prints the reason and exits 69. --foreground execs the supervisor in this
 * process (it stays attached until SIGTERM, every daemon's log lines also on stderr).
 * The supervisor serves Prometheus /metrics on --metrics-addr
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
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dsv4ctl.h"
#include "tcp_listen.h"
#include "err.h"
#include "metrics.h"
#include "parse.h"
#include "plan.h"
#include "rundir.h"
#include "session_layout.h"

/* The supervisor's command line: every value as text, the strings owned by `a`. */
struct sv_argv {
    char *v[64];
    int n;
    char num[16][32];
    int n_num;
};

static void add(struct sv_argv *a, const char *s)
{
    if (a->n >= (int)DSV4_ARRAY_SIZE(a->v) - 1)
        dsv4_die("dsv4ctl start: supervisor command line too long");
    a->v[a->n++] = (char *)s;
    a->v[a->n] = NULL;
}

static void add_num(struct sv_argv *a, const char *opt, const char *fmt, ...)
    DSV4_PRINTF(3, 4);

static void add_num(struct sv_argv *a, const char *opt, const char *fmt, ...)
{
    if (a->n_num >= (int)DSV4_ARRAY_SIZE(a->num))
        dsv4_die("dsv4ctl start: too many numeric options");
    char *buf = a->num[a->n_num++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(a->num[0]), fmt, ap);
    va_end(ap);
    add(a, opt);
    add(a, buf);
}

int dsv4ctl_start(int argc, char **argv)
{
    static const struct option opts[] = {
        { "model", required_argument, NULL, 'm' },
        { "run-dir", required_argument, NULL, 'r' },
        { "threads", required_argument, NULL, 't' },
        { "memory-gb", required_argument, NULL, 'g' },
        { "max-ctx", required_argument, NULL, 'c' },
        { "sessions", required_argument, NULL, 's' },
        { "step-tokens", required_argument, NULL, 'k' },
        { "chunk", required_argument, NULL, 'H' },
        { "prefix-cache-mb", required_argument, NULL, 'P' },
        { "prefix-cache-gb", required_argument, NULL, 'G' },
        { "prefix-cache-dir", required_argument, NULL, 'X' },
        { "no-prefix-cache", no_argument, NULL, 'O' },
        { "foreground", no_argument, NULL, 'f' },
        { "metrics-addr", required_argument, NULL, 'M' },
        { "no-metrics", no_argument, NULL, 'N' },
        { "watchdog-s", required_argument, NULL, 'w' },
        { "stall-s", required_argument, NULL, 'S' },
        { "dspark", no_argument, NULL, 'D' },
        { "dspark-trace", required_argument, NULL, 'T' },
        { "api-addr", required_argument, NULL, 'A' },
        { "no-api", no_argument, NULL, 'a' },
        { "api-key-file", required_argument, NULL, 'K' },
        { "no-dspark", no_argument, NULL, 'E' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    const char *me = "dsv4ctl start", *model = NULL, *run_dir = NULL;
    const char *metrics_addr = DSV4_METRICS_DEFAULT_ADDR, *watchdog = "30", *stall = "600";
    const char *api_addr = DSV4_API_DEFAULT_ADDR, *api_key_file = NULL, *dspark_trace = NULL;
    bool metrics_explicit = false, api_explicit = false, fg = false, dspark = false;
    int threads = dsv4ctl_default_threads(), sessions = 0, step_tokens = 0, chunk = 0, r = 0, c;
    int prefix_mb = -1;             /* -1: the plan's default */
    const char *prefix_gb = NULL, *prefix_dir = NULL;
    bool no_prefix = false;
    double memory_gb = 0, tmp;
    int64_t max_ctx = 0;
    optind = 1;
    while (r == 0 && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'r': run_dir = optarg; break;
        case 't': r = dsv4_parse_int_opt(me, "threads", optarg, 1, 4096, &threads); break;
        case 'g': r = dsv4_parse_double_opt(me, "memory-gb", optarg, 0, 1 << 24, &memory_gb);
            break;
        case 'c':
            if ((r = dsv4_parse_i64(optarg, 0, INT32_MAX, &max_ctx)) < 0)
                fprintf(stderr, "%s: --max-ctx: '%s' is not an integer in [0, %d]\n", me,
                        optarg, INT32_MAX);
            break;
        case 's': r = dsv4_parse_int_opt(me, "sessions", optarg, 0, 1 << 16, &sessions); break;
        case 'k': r = dsv4_parse_int_opt(me, "step-tokens", optarg, 1, DSV4_WIRE_MAX_TOKENS,
                                         &step_tokens); break;
        case 'H': r = dsv4_parse_int_opt(me, "chunk", optarg, 0, DSV4_MAX_CHUNK, &chunk); break;
        case 'P': r = dsv4_parse_int_opt(me, "prefix-cache-mb", optarg, 0, 1 << 30, &prefix_mb);
            break;
        case 'G':
            r = dsv4_parse_double_opt(me, "prefix-cache-gb", optarg, 0, 1 << 20, &tmp);
            prefix_gb = optarg;
            break;
        case 'X': prefix_dir = optarg; break;
        case 'O': no_prefix = true; break;
        case 'f': fg = true; break;
        case 'D': dspark = true; break;
        case 'T': dspark_trace = optarg; break;
        case 'E': dspark = false; break;
        case 'M':
            metrics_addr = optarg;
            metrics_explicit = true;
            break;
        case 'N': metrics_addr = NULL; break;
        case 'w':
            r = dsv4_parse_double_opt(me, "watchdog-s", optarg, 0, 1e6, &tmp);
            watchdog = optarg;
            break;
        case 'S':
            r = dsv4_parse_double_opt(me, "stall-s", optarg, 0, 1e7, &tmp);
            stall = optarg;
            break;
        case 'A':
            api_addr = optarg;
            api_explicit = true;
            break;
        case 'a': api_addr = NULL; break;
        case 'K': api_key_file = optarg; break;
        case 'h':
            printf("usage: dsv4ctl start --model DIR [--memory-gb N] [--max-ctx N] [--sessions N] "
                   "[--step-tokens N] [--chunk N] [--threads N] [--run-dir DIR]\n"
                   "       [--metrics-addr HOST:PORT (default " DSV4_METRICS_DEFAULT_ADDR
                   ") | --no-metrics] [--watchdog-s N] [--stall-s N] [--foreground]\n"
                   "       [--dspark [--dspark-trace FILE]|--no-dspark] [--api-addr HOST:PORT (default "
                   DSV4_API_DEFAULT_ADDR ") | --no-api] [--api-key-file FILE]\n"
                   "  --memory-gb  budget in GiB for all daemons (default: 80%% of MemAvailable);\n"
                   "               see `dsv4ctl plan`\n"
                   "  --sessions   requests served at once, batched in every step\n"
                   "               (default 4; the plan sizes their memory)\n"
                   "  --step-tokens  rows of a step that prompts being prefilled may share with\n"
                   "               decoding requests (default 64: bounds their inter-token time)\n"
                   "  --chunk      rows per prefill step of a session (default: the plan's, from\n"
                   "               the budget; see `dsv4ctl plan`)\n"
                   "  --prefix-cache-mb N  RAM tier of the prefix cache (default: an eighth of\n"
                   "               the plan's room for experts, at most 256 MiB); --prefix-cache-gb N:\n"
                   "               disk tier\n"
                   "               (default 8); --prefix-cache-dir DIR (default\n"
                   "               $XDG_CACHE_HOME/dsv4/<model id>); --no-prefix-cache\n");
            return DSV4_EXIT_OK;
        default: return DSV4_EXIT_USAGE;
        }
    }
    if (r < 0)
        return DSV4_EXIT_USAGE;
    if (!model || optind != argc) {
        fprintf(stderr, "%s: --model DIR is required\n", me);
        return DSV4_EXIT_USAGE;
    }
    if (api_addr && !api_key_file && !dsv4_addr_is_loopback(api_addr)) {
        fprintf(stderr, "%s: --api-addr %s is not a loopback address: give --api-key-file\n",
                me, api_addr);
        return DSV4_EXIT_USAGE;
    }
    if (api_key_file && access(api_key_file, R_OK) != 0) {
        fprintf(stderr, "%s: --api-key-file %s: not readable\n", me, api_key_file);
        return DSV4_EXIT_NOINPUT;
    }
    if (access(model, R_OK) != 0) {
        fprintf(stderr, "%s: model %s: not readable\n", me, model);
        return DSV4_EXIT_NOINPUT;
    }
    struct dsv4_plan plan;
    struct dsv4_err err;
    uint64_t prefix_ram = no_prefix ? 0 : prefix_mb >= 0 ? (uint64_t)prefix_mb << 20
                                                         : DSV4_PLAN_PREFIX_DEFAULT;
    int prc = dsv4ctl_make_plan(model, memory_gb, max_ctx, sessions, threads, dspark, prefix_ram,
                                chunk, &plan, &err);
    if (prc != DSV4_EXIT_OK) {
        fprintf(stderr, "%s: %s\n", me, err.msg);
        return prc == DSV4_EXIT_FAIL ? DSV4_EXIT_UNAVAILABLE : prc;
    }
    char exe[DSV4_PATH_MAX], dir[DSV4_PATH_MAX];
    if (!dsv4_daemon_exe("dsv4-supervisor", exe, sizeof(exe))) {
        fprintf(stderr, "%s: dsv4-supervisor not found next to dsv4ctl (or $DSV4_LIBEXEC_DIR)\n",
                me);
        return DSV4_EXIT_NOINPUT;
    }
    dsv4_rundir_resolve(run_dir, dir);
    struct sv_argv a = { .n = 0 };
    add(&a, exe);
    add(&a, "--model");
    add(&a, model);
    add(&a, "--run-dir");
    add(&a, dir);
    add_num(&a, "--threads", "%d", threads);
    add_num(&a, "--memory-gb", "%.17g", memory_gb);
    add_num(&a, "--budget-bytes", "%llu", (unsigned long long)plan.budget);
    add_num(&a, "--cache-bytes", "%llu", (unsigned long long)plan.cache_bytes);
    add_num(&a, "--session-bytes", "%llu", (unsigned long long)plan.sessions_total);
    add_num(&a, "--drafter-cache-bytes", "%llu", (unsigned long long)plan.drafter_cache);
    add_num(&a, "--sessions", "%d", plan.o.sessions);
    add_num(&a, "--chunk", "%d", plan.o.chunk);
    if (step_tokens)
        add_num(&a, "--step-tokens", "%d", step_tokens);
    if (no_prefix) {
        add(&a, "--no-prefix-cache");
    } else {
        add_num(&a, "--prefix-cache-mb", "%llu", (unsigned long long)(plan.prefix_ram >> 20));
        if (prefix_gb) {
            add(&a, "--prefix-cache-gb");
            add(&a, prefix_gb);
        }
        if (prefix_dir) {
            add(&a, "--prefix-cache-dir");
            add(&a, prefix_dir);
        }
    }
    add_num(&a, "--max-ctx", "%lld", (long long)plan.o.max_ctx);
    if (metrics_addr) {
        add(&a, "--metrics-addr");
        add(&a, metrics_addr);
        if (metrics_explicit)
            add(&a, "--metrics-required");
    } else {
        add(&a, "--no-metrics");
    }
    if (api_addr) {
        add(&a, "--api-addr");
        add(&a, api_addr);
        if (api_explicit)
            add(&a, "--api-required");
        if (api_key_file) {
            add(&a, "--api-key-file");
            add(&a, api_key_file);
        }
    } else {
        add(&a, "--no-api");
    }
    add(&a, "--watchdog-s");
    add(&a, watchdog);
    add(&a, "--stall-s");
    add(&a, stall);
    if (dspark)
        add(&a, "--dspark");
    char trace_abs[DSV4_PATH_MAX];
    if (dspark_trace) {     /* the supervisor runs elsewhere: an absolute path */
        if (dspark_trace[0] == '/' || !getcwd(trace_abs, sizeof(trace_abs)) ||
            strlen(trace_abs) + strlen(dspark_trace) + 2 > sizeof(trace_abs))
            snprintf(trace_abs, sizeof(trace_abs), "%s", dspark_trace);
        else
            snprintf(trace_abs + strlen(trace_abs), sizeof(trace_abs) - strlen(trace_abs), "/%s",
                     dspark_trace);
        add(&a, "--dspark-trace");
        add(&a, trace_abs);
    }
    fflush(NULL);
    if (fg) {
        add(&a, "--foreground");
        execv(exe, a.v);
        fprintf(stderr, "%s: exec %s: %s\n", me, exe, strerror(errno));
        return DSV4_EXIT_OSERR;
    }
    if (dsv4_rundir_create(dir, &err) < 0) {
        fprintf(stderr, "%s: %s\n", me, err.msg);
        return DSV4_EXIT_NOPERM;
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return DSV4_EXIT_OSERR;
    pid_t pid = fork();
    if (pid < 0)
        return DSV4_EXIT_OSERR;
    if (pid == 0) {     /* the supervisor: own session, log file, no terminal */
        close(p[0]);
        setsid();
        char log[DSV4_PATH_MAX + 32];
        snprintf(log, sizeof(log), "%s/supervisor.log", dir);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
        int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (nul >= 0)
            dup2(nul, 0);
        if (fd < 0) {   /* never keep the caller's stdout/stderr: it waits for their EOF */
            fprintf(stderr, "%s: warning: %s: %s; the supervisor logs nowhere\n", me, log,
                    strerror(errno));
            fd = nul;
        }
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        int ready = fcntl(p[1], F_DUPFD, 3);    /* without O_CLOEXEC: it crosses the exec */
        if (ready < 0)
            _exit(DSV4_EXIT_OSERR);
        add_num(&a, "--ready-fd", "%d", ready);
        execv(exe, a.v);
        dprintf(ready, "error: exec %s: %s\n", exe, strerror(errno));
        _exit(DSV4_EXIT_OSERR);
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
    fprintf(stderr, "%s: %s", me, n ? buf : "supervisor exited without a word\n");
    /* It says why before it cleans up (daemons stopped, segments and sockets removed, the
     * lock released): a failed start returns once nothing of the set is left, so that the
     * next status, stop or start sees no half-gone set. Bounded: stop_all gives each daemon
     * a few seconds. */
    for (int i = 0; i < 3000 && waitpid(pid, NULL, WNOHANG) == 0; i++)
        usleep(10000);
    return DSV4_EXIT_UNAVAILABLE;
}
