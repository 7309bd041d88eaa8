/* SPDX-License-Identifier: MIT */
/*
 * dsv4-api's shared state: set up once by main.c, read by every connection
 * thread (http.c). The tokenizer's encoder is single-threaded (its word
 * cache): tok_mu guards encoding; decoding is thread-safe.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "dsv4_stats.h"
#include "dsv4_wire.h"
#include "rundir.h"
#include "tokenizer.h"

struct api_ctx {
    char run_dir[DSV4_PATH_MAX];
    char sched_ep[DSV4_PATH_MAX];
    void *zctx;                             /* sockets are per request (per thread) */
    dsv4_tokenizer *tok;
    pthread_mutex_t tok_mu;
    uint32_t eos, end_think, dsml;
    bool has_eos, has_end_think;
    bool dsml_special;                      /* ｜DSML｜ is a special token: not in decoded text */
    int64_t n_ctx;                          /* the model's context length */
    int default_max_tokens;
    char model_id[256];                     /* the model directory's name */
    long long created;                      /* its mtime (unix seconds) */
    char *api_key;                          /* NULL: no authentication */
    size_t max_body;
    unsigned idle_timeout_s;                /* a connection's deadline while it is not generating */
    struct dsv4_stats_shm *stats;           /* ours */
    struct dsv4_stats_shm *page[DSV4_ROLE_COUNT];  /* every role's, read-only (health) */
};
