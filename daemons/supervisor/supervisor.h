/* SPDX-License-Identifier: MIT */
/*
 * The supervisor behind `dsv4ctl start`: owns the run directory lock, the
 * stats pages and the control ROUTER; starts fetcher (when built) → compute
 * → scheduler, each only after the previous one said READY; restarts a
 * daemon that dies (alone, with exponential backoff and a crash-loop limit;
 * never one that exits 78 = bad config) and tells the others; kills with
 * SIGKILL a daemon that is alive but hung (the watchdog: no heartbeat, or
 * no progress with work pending), which then restarts the same way; on SIGTERM
 * stops scheduler → compute → fetcher and removes its shm and sockets.
 */
#pragma once

#include <stdbool.h>

struct supervisor_opts {
    const char *run_dir;
    const char *model;
    int threads;
    double memory_gb;
    /* The memory plan (common/plan.h) made by `start`; 0 = not planned. */
    uint64_t budget_bytes;      /* written to compute's stats page */
    uint64_t cache_bytes;       /* fetcher --cache-bytes (compute's in-process cache without one) */
    uint64_t session_bytes;     /* compute --session-bytes */
    uint64_t drafter_cache_bytes; /* with --dspark and a fetcher: compute --cache-bytes (the
                                   * drafter's expert LRU; the target's experts are the fetcher's) */
    int sessions;               /* scheduler --max-active (0: its default) */
    int step_tokens;            /* scheduler --step-tokens (0: its default) */
    int chunk;                  /* compute --chunk: the plan's prefill step (0: its default) */
    /* compute's prefix cache: passed on as given (NULL: compute's default) */
    const char *prefix_mb, *prefix_gb, *prefix_dir;
    bool no_prefix;
    int64_t max_ctx;            /* scheduler --max-ctx: positions one request may need (0: its
                                 * default); the plan sized every session for it */
    const char *metrics_addr;   /* HOST:PORT of /metrics; NULL: none */
    bool metrics_explicit;      /* asked for: failing to listen there is an error */
    bool foreground;            /* daemons' log lines also go to our stderr */
    /* Watchdog (0 = off): kill a ready daemon that sends no HEARTBEAT for watchdog_s, or
     * compute when its progress counter stays still for stall_s while it has work. */
    double watchdog_s, stall_s;
    bool dspark;            /* --dspark: compute loads the drafter, the scheduler speculates */
    const char *dspark_trace;   /* --dspark-trace FILE: the scheduler's verify steps (JSON lines) */
    /* dsv4-api (daemons/api): HOST:PORT it serves (NULL: --no-api), bound here and passed as
     * --listen-fd; a busy default only warns, an address asked for must work. */
    const char *api_addr;
    bool api_explicit;
    const char *api_key_file;   /* --api-key-file, passed on; required off loopback */
};

/*
 * Runs until stopped. `ready_fd` (or -1) receives "ok\n" once the set can
 * serve, or "error: <reason>\n" when it cannot; then it is closed.
 * Returns a process exit status.
 */
int dsv4_supervise(const struct supervisor_opts *o, int ready_fd);
