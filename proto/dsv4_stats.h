/* SPDX-License-Identifier: MIT */
/*
 * The per-daemon stats page: a POSIX shared-memory segment per daemon role,
 * created by the supervisor (so it outlives daemon restarts: counters never
 * go backwards) and written only by its daemon (the supervisor writes the
 * restart count and the pid). Readers (dsv4ctl status, the metrics
 * exporter) map it read-only. Counters are relaxed lock-free atomics;
 * histograms have fixed buckets sized for CPU inference.
 */
#pragma once

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "shm atomics must be lock-free");

#define DSV4_SHM_MAGIC 0x4d485344u      /* "DSHM" */
#define DSV4_STATS_ABI_MAJOR 1
#define DSV4_STATS_ABI_MINOR 1
#define DSV4_SHM_KIND_STATS 1

struct dsv4_shm_hdr {                   /* first 64 bytes of every segment */
    uint32_t magic;
    uint16_t abi_major, abi_minor;
    uint32_t hdr_size;
    uint32_t kind;
    uint64_t size;
    uint64_t build_id;
    _Atomic uint64_t epoch;             /* bumped by the supervisor on every (re)spawn */
    uint8_t reserved[24];
};
_Static_assert(sizeof(struct dsv4_shm_hdr) == 64, "one cache line");
_Static_assert(offsetof(struct dsv4_shm_hdr, epoch) == 32, "ABI");

/*
 * Upper bounds in microseconds; a last implicit +Inf bucket. From 5 ms
 * (a tiny model's token) to 10 min (a long prefill of a large model on CPU).
 */
#define DSV4_HIST_BOUNDS_US                                                          \
    { 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, \
      10000000, 30000000, 60000000, 120000000, 600000000 }
#define DSV4_HIST_N 16                  /* 15 bounds + Inf */
/* Bounds of the count histograms (rows per step): powers of two, the same bucket count. */
#define DSV4_COUNT_BOUNDS \
    { 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384 }

struct dsv4_hist_shm {
    _Atomic uint64_t count, sum_us;
    _Atomic uint64_t bucket[DSV4_HIST_N];  /* non-cumulative */
};

enum dsv4_daemon_state { DSV4_STATE_DOWN, DSV4_STATE_STARTING, DSV4_STATE_READY, DSV4_STATE_FAILED };

struct dsv4_stats_shm {
    struct dsv4_shm_hdr hdr;
    /* supervisor-owned */
    _Atomic uint64_t pid;
    _Atomic uint64_t started_unix_ms;   /* CLOCK_REALTIME at spawn */
    _Atomic uint64_t restarts;          /* respawns after an unexpected exit */
    _Atomic uint64_t state;             /* enum dsv4_daemon_state */
    /* daemon-owned */
    _Atomic uint64_t progress;          /* work counter (watchdog) */
    _Atomic uint64_t req_ok, req_error, req_cancelled, req_busy;
    _Atomic uint64_t prompt_tokens, generated_tokens;
    _Atomic uint64_t queue_depth, active;   /* gauges */
    _Atomic uint64_t forward_calls, forward_rows, sessions_open;
    _Atomic uint64_t replays, replayed_tokens;  /* scheduler: sessions rebuilt after a compute restart */
    _Atomic uint64_t bad_messages;
    /* scheduler: the prefill in progress (gauges; 0/0 when none) */
    _Atomic uint64_t prefill_done, prefill_total;
    /* scheduler: DSpark speculation */
    _Atomic uint64_t spec_proposed, spec_accepted, spec_verify_steps, spec_quench;
    /* compute: resident bytes by memory tier (weights = dense + head + drafter) */
    _Atomic uint64_t mem_weights_bytes, mem_session_bytes, mem_scratch_bytes;
    /* supervisor: the plan's budget; hung daemons it killed (heartbeat watchdog) */
    _Atomic uint64_t mem_budget_bytes, watchdog_kills;
    /* compute, continuous batching: steps run, sessions summed over steps, routed-expert
     * loads the step's union saved (each session alone would have leased its own) */
    _Atomic uint64_t steps, step_sessions, experts_union_saved;
    /* compute, prefix cache: prompt tokens looked up / restored; entries and bytes per tier
     * (gauges), blocks evicted, bad files skipped and deleted */
    _Atomic uint64_t prefix_lookup_tokens, prefix_hit_tokens;
    _Atomic uint64_t prefix_ram_entries, prefix_ram_bytes, prefix_disk_entries, prefix_disk_bytes;
    _Atomic uint64_t prefix_evictions, prefix_bad_files;
    _Atomic uint64_t reserved[3];
    struct dsv4_hist_shm ttft, per_token, request;
    struct dsv4_hist_shm queue_wait;    /* scheduler: from admission to the first step */
    struct dsv4_hist_shm step_rows;     /* compute: rows per step, DSV4_COUNT_BOUNDS (sum_us: rows) */
    struct dsv4_hist_shm prefix_restore;    /* compute: time to restore a cached prefix */
};
_Static_assert(sizeof(struct dsv4_stats_shm) % 64 == 0, "whole lines");
_Static_assert(offsetof(struct dsv4_stats_shm, pid) == 64, "ABI");
