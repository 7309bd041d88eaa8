/* SPDX-License-Identifier: MIT */
/*
 * The memory plan: from a model config and a budget in bytes, what stays
 * resident (dense weights, embedding + head, drafter stages, session state
 * for the configured context and sessions, scratch, per-process overhead) and
 * what is left for the routed-expert cache, in slots of one expert each.
 *
 * The cache is one pool for all layers (the fetcher's segment), not a quota
 * per layer: routing skew differs from layer to layer and over time, and the
 * fetcher's eviction already prefers layers holding more than slots/layers,
 * so a pool gives every layer its fair share when it is busy and lends it
 * out when it is not. Everything here is arithmetic on the config (no I/O
 * but /proc/meminfo for the default budget); the daemons enforce the result:
 * the fetcher sizes its segment from `cache_bytes`, compute refuses sessions
 * past `session_bytes` and leases at most `max_lease` experts at a time.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "err.h"

struct dsv4_plan_opts {
    uint64_t budget_bytes;  /* 0 → dsv4_plan_default_budget() */
    int64_t max_ctx;        /* positions per session; 0 → 4096 */
    int sessions;           /* sessions open at once (scheduler --max-active); 0 → 4 */
    int chunk;              /* prefill rows per step; 0 → 64 (engine default) */
    int max_rollback;       /* 0 → 16 (engine default) */
    int threads;            /* compute workers; 0 → 1 */
    bool in_process;        /* experts cached inside compute (dsv4ctl run), not by the fetcher */
    bool dspark;            /* the drafter runs (start --dspark): its experts' cache is planned */
    uint64_t shm_avail;     /* free bytes of /dev/shm, which holds the fetcher's cache; 0 = no cap */
    /* The prefix cache's RAM tier in compute: DSV4_PLAN_PREFIX_DEFAULT = an eighth of the room
     * above the minimum, at most 256 MiB; 0 = none (--no-prefix-cache); else these bytes (part
     * of the minimum). */
    uint64_t prefix_ram;
};

#define DSV4_PLAN_PREFIX_DEFAULT UINT64_MAX

struct dsv4_plan {
    struct dsv4_plan_opts o;        /* with defaults filled in */
    uint64_t budget;
    uint64_t dense;                 /* target layers' resident weights (FP8 + small tensors) */
    uint64_t embed_head;            /* embedding + output head (BF16) + final norms */
    uint64_t drafter;               /* MTP / DSpark stages */
    uint64_t drafter_cache;         /* with dspark: compute's LRU of the stages' routed experts */
    uint64_t session_state;         /* per session: KV ring, compressed rows, indexer keys */
    uint64_t session_scratch;       /* once: a forward step's activations (chunk rows) */
    uint64_t session_dspark;        /* per session with dspark: drafter and speculation
                                     * buffers (dsv4_dspark_session_bytes) */
    uint64_t sessions_total;        /* sessions × (state + dspark) + the step scratch */
    uint64_t chunk_extra;           /* of which a prefill step the plan widened adds (not in
                                     * the minimum; 0 when the chunk was asked for) */
    uint64_t compute_scratch;       /* logits rows, result buffers, lease table */
    uint64_t prefix_ram;            /* the prefix cache's RAM tier (compute) */
    uint64_t overhead;              /* processes: code, libraries, allocator, checkpoint index */
    uint64_t fixed;                 /* everything above */
    uint64_t slot_bytes;            /* one expert slot (upper bound: O_DIRECT-aligned spans) */
    uint64_t cache_header;          /* the fetcher segment's header, directory and rings */
    uint64_t cache_bytes;           /* routed-expert cache: header + n_slots × slot_bytes */
    uint64_t n_slots;               /* cache_bytes / slot_bytes */
    uint64_t min_slots;             /* fewest slots that can run: one token's experts + prefetch */
    uint64_t minimum;               /* fixed + min_slots × slot_bytes */
    uint64_t experts_total;         /* routed experts in the model */
    int max_lease;                  /* experts one acquire may ask for (0 = no limit) */
    bool shm_limited;               /* the cache was cut to fit /dev/shm, not the budget */
};

/*
 * Make the plan. -ENOSPC (message: the budget, the minimum in GiB and what takes it)
 * when the budget cannot hold the fixed part plus min_slots experts; the plan is
 * filled in either way.
 */
int dsv4_plan_make(const struct dsv4_config *c, const struct dsv4_plan_opts *o,
                   struct dsv4_plan *ret, struct dsv4_err *err);

/*
 * Bytes dsv4_session_new allocates for one session's state, and the engine's step scratch
 * for sessions of max_ctx positions and steps of `chunk` rows (one for all sessions), the
 * same arithmetic as daemons/compute (a unit test checks they agree); zero max_ctx, chunk or
 * max_rollback take the engine's defaults.
 */
void dsv4_plan_session_bytes(const struct dsv4_config *c, int64_t max_ctx, int chunk,
                             int max_rollback, int n_workers, uint64_t *state,
                             uint64_t *scratch);

/* A safe share of this machine's RAM: 80 % of MemAvailable (0 if /proc/meminfo is unreadable). */
uint64_t dsv4_plan_default_budget(void);

/* The plan as a table (dsv4ctl plan) or as one JSON object. */
void dsv4_plan_print(FILE *f, const struct dsv4_plan *p);
void dsv4_plan_print_json(FILE *f, const struct dsv4_plan *p);
