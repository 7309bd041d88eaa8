/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: dsv4-compute's command handlers (daemons/compute/handlers.c) behind the wire
 * decoder, on a real engine (the tiny DSpark fixture, drafter loaded, a RAM-only prefix
 * cache). An input is a sequence of messages, each a little-endian u16 length and that many
 * bytes, handled in order as if they came from the scheduler; then any pending batched step
 * runs and every session is closed, so inputs do not leak state into each other. Replies go
 * to a ROUTER with no peers (dropped). What must hold: no crash, no sanitizer report, no
 * unbounded allocation (the session budget caps what SESSION_OPEN may allocate).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "compute.h"
#include "log.h"

#ifndef FUZZ_MODEL
#error "FUZZ_MODEL: the checkpoint directory (tests/meson.build passes it)"
#endif

static struct compute c;
static struct dsv4_stats_shm stats;

static void setup(void)
{
    struct dsv4_err err = { "" };
    const char *model = getenv("DSV4_FUZZ_MODEL") ? getenv("DSV4_FUZZ_MODEL") : FUZZ_MODEL;
    dsv4_log_set_level(DSV4_LOG_ERROR);
    struct dsv4_engine_opts eo = { .n_threads = 1, .expert_cache_bytes = 64u << 20,
                                   .dspark = true };
    if (dsv4_engine_open(model, &eo, &c.e, &err) < 0) {
        fprintf(stderr, "fuzz-compute: %s\n", err.msg);
        abort();
    }
    c.vocab = dsv4_engine_config(c.e)->vocab_size;
    c.threads = 1;
    c.dspark = true;
    c.session_budget = 64u << 20;       /* what the plan would allow a small set */
    c.d.role = DSV4_ROLE_COMPUTE;
    c.d.stats = &stats;
    c.d.next_heartbeat_ns = UINT64_MAX; /* no supervisor to tell */
    c.d.zctx = zmq_ctx_new();
    c.router = zmq_socket(c.d.zctx, ZMQ_ROUTER);
    if (!c.router || zmq_bind(c.router, "inproc://fuzz-compute") < 0)
        abort();
    if (dsv4_prefix_cache_open(model, dsv4_engine_config(c.e), 16u << 20, 0, NULL, &c.pc,
                               &err) < 0) {
        fprintf(stderr, "fuzz-compute: prefix cache: %s\n", err.msg);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!c.e)
        setup();
    memcpy(c.in.rid, "sched", 5);
    c.in.rid_len = 5;
    for (size_t at = 0; at + 2 <= size;) {
        size_t n = (size_t)data[at] | (size_t)data[at + 1] << 8;
        at += 2;
        if (n > size - at)
            n = size - at;
        if (n + 8 > c.in.cap) {
            free(c.in.buf);
            c.in.cap = n + 8;
            c.in.buf = dsv4_xmalloc(c.in.cap);
        }
        memcpy(c.in.buf, data + at, n);
        c.in.len = n;
        at += n;
        compute_handle(&c);
    }
    compute_run_step(&c);
    for (int i = 0; i < MAX_SESSIONS; i++)
        if (c.slots[i].s)
            compute_slot_free(&c.slots[i]);
    compute_publish_memory(&c);     /* the session budget starts over */
    if (getenv("DSV4_FUZZ_VERBOSE"))    /* what an input reached (for corpus work) */
        fprintf(stderr, "steps %llu, rows %llu, bad messages %llu\n",
                (unsigned long long)atomic_load(&stats.steps),
                (unsigned long long)atomic_load(&stats.forward_rows),
                (unsigned long long)atomic_load(&stats.bad_messages));
    return 0;
}
