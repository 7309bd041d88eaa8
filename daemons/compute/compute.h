/* SPDX-License-Identifier: MIT */
/*
 * dsv4-compute's state, shared by main.c (arguments, the fetcher's provider, the loop) and
 * handlers.c (the scheduler's commands, the batched step, the prefix cache hooks, the stats
 * page figures).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "daemon.h"
#include "engine.h"
#include "fetcher_client.h"
#include "prefix.h"
#include "speculate.h"

#define MAX_SESSIONS 64

struct slot {
    uint64_t id;
    dsv4_session *s;
    dsv4_drafter *d;            /* --dspark: the session's drafter and its tap keeper */
    dsv4_spec *sp;
    uint64_t state_bytes, scratch_bytes;
    /* the prefix cache: the sequence's ids so far (ids[p] = token at position p) */
    bool cached;
    int64_t max_ctx;
    struct dsv4_prefix_seq q;
    int32_t *ids;
    int64_t committed;          /* positions below it hold accepted tokens (not drafts) */
};

/*
 * The fetcher's expert cache as the engine's provider: a lease from the
 * fetcher client is a view into the shared segment; the engine wants
 * dsv4_expert_weights, so each (layer, expert) gets a stable entry here
 * (rewritten by every acquire, valid until the matching release).
 */
struct fetched {
    dsv4_fetcher_client *client;
    struct dsv4_daemon *d;      /* a lease may wait on the disk: heartbeat after each */
    int n_experts;
    struct dsv4_expert_weights *store;  /* [n_layers * n_experts] */
};

/* A FORWARD waiting for the rest of its step (DSV4_FWD_MORE); the receive buffer is reused,
 * so its rows are copied. */
struct pending {
    uint64_t seq;
    struct slot *sl;
    int64_t pos0;
    void (*stash)(void *ctx, int64_t pos, int n);   /* the drafter's taps (speculate.h) */
    void *stash_ctx;
    uint32_t n, top_k, flags;
    int32_t *toks, *targets;
    unsigned char rid[256];
    size_t rid_len;
};

#define STEP_WAIT_MS 200    /* a step whose last FORWARD never comes runs after this */

struct compute {
    struct dsv4_daemon d;
    struct pending pend[MAX_SESSIONS];
    int n_pend;
    struct fetched fetched;
    dsv4_engine *e;
    void *router;
    struct slot slots[MAX_SESSIONS];
    int vocab, threads;
    uint64_t session_budget;    /* --session-bytes (the plan's sessions); 0 = unlimited */
    int chunk;                  /* --chunk: rows per prefill step of each session; 0 = default */
    uint64_t session_bytes;     /* allocated by the open sessions */
    int delay_ms;               /* DSV4_TEST_FORWARD_DELAY_MS: widen race windows in tests */
    uint64_t forwards;
    int layer_delay_ms;         /* DSV4_TEST_LAYER_DELAY_MS: a slow model (watchdog tests) */
    bool dspark;                /* --dspark: sessions carry a drafter */
    dsv4_pcache *pc;            /* the prefix cache, or NULL (--no-prefix-cache) */
    float *logits;
    size_t logits_cap;
    struct dsv4_zin in;
    struct dsv4_wire_buf out;
};

void compute_slot_free(struct slot *sl);
/* One validated or malformed message from the scheduler (c->in). */
void compute_handle(struct compute *c);
/* Run the pending FORWARDs as one batched step and answer each. */
void compute_run_step(struct compute *c);
/* Engine hook after every layer: heartbeat and progress for the watchdog. */
void compute_on_layer(void *ctx);
void compute_publish_memory(struct compute *c);
void compute_publish_prefix(struct compute *c);
void compute_log_lookahead(struct compute *c);
