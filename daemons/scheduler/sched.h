/* SPDX-License-Identifier: MIT */
/*
 * The scheduler's request table, shared by its parts: handlers.c (admission, the clients,
 * compute's results, the stop conditions), step.c (which requests run in the next batched
 * step, and the commands that make it) and main.c (arguments, sockets, the loop).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "buf.h"
#include "daemon.h"
#include "sampling.h"
#include "spec.h"
#include "tokenizer.h"

#define PREFILL_ROWS 512        /* rows per FORWARD while catching up (keeps the loop responsive);
                                 * $DSV4_PREFILL_ROWS overrides it (tests: many PROGRESS events) */
#define PROBE_NS DSV4_NSEC_PER_SEC  /* a request's client hears from us at least this often */
#define SCORE_ROWS 64           /* rows per FORWARD with every row's result */
#define MIN_PREFILL_ROWS 16     /* a catching-up request's rows in a step full of decode rows */

enum { R_FREE, R_QUEUED, R_ACTIVE };

struct req {
    int state;
    int kind;                   /* DSV4_MSG_GENERATE or DSV4_MSG_SCORE */
    uint64_t id, session, order;
    unsigned char rid[256];
    size_t rid_len;
    struct dsv4_sampling sp;
    int32_t *toks;              /* prompt, then generated tokens */
    uint32_t n_prompt, n_tok, max_tokens, n_gen;
    char *stop;
    uint32_t n_stop, max_stop_len;
    /* the generated text so far, decoded incrementally for the stop strings */
    struct dsv4_detok detok;
    struct dsv4_buf text;
    uint32_t n_decoded;         /* generated tokens fed to detok */
    bool detok_on;
    bool opened, cancel;
    bool logprobs;              /* TOKEN_LOGPROBS before each TOKEN, with n_top alternatives */
    uint32_t n_top;
    int64_t cpos;               /* rows compute holds for this session */
    uint64_t seq;               /* the command in flight for this request; 0: none */
    uint16_t cmd;               /* its type */
    uint32_t fwd_rows;          /* a FORWARD's rows: its result must be at cpos + fwd_rows */
    bool restore_tried;         /* PREFIX_RESTORE answered for the session open now */
    bool cached_known;          /* n_cached is the first prefill's */
    uint32_t n_cached;          /* prompt tokens restored from the prefix cache (DONE) */
    uint64_t t_submit, t_last;
    uint64_t t_sent;            /* last message to the client (PROGRESS probes the rest) */
    bool first_sent, stepped;   /* stepped: it has been in a step (queue wait measured) */
    struct spec_req spec;
};

struct sched {
    struct dsv4_daemon d;
    void *clients, *compute;
    dsv4_tokenizer *tok;
    int eos, max_active, queue_cap, dspark_block;    /* dspark_block 0: no --dspark */
    int vocab;                  /* a token compute decides must be below it */
    int64_t max_ctx;            /* positions a request may need (the plan's sessions) */
    FILE *trace;                /* --dspark-trace: one JSON line per verify step, or NULL */
    struct dsv4_spec_opts dspark_opts;  /* DSV4_TEST_DSPARK_VERIFY: fixed verify length (tests) */
    uint32_t prefill_rows;
    uint32_t step_tokens;       /* --step-tokens: rows of a step shared with decoding requests */
    struct req *prefilling;     /* the request the prefill gauges describe */
    struct req *reqs;
    int n_reqs;                 /* slots = max_active + queue_cap */
    uint64_t next_session, next_order, seq;
    int n_inflight;             /* commands sent to compute and not answered */
    int rr;
    struct dsv4_wire_buf *fwd;  /* [max_active]: one step's FORWARDs, sent together */
    struct req **fw, **catching;    /* [n_reqs]: the step's requests, those catching up */
    struct dsv4_zin in;
    struct dsv4_wire_buf out;
};

/* handlers.c */
void to_client(struct sched *s, struct req *r);
void prefill_gauges(struct sched *s, struct req *r, uint64_t done, uint64_t total);
void send_progress(struct sched *s, struct req *r);
void finish(struct sched *s, struct req *r, int reason);
void fail(struct sched *s, struct req *r, int code, const char *text);
/* One message from a client (s->in, its routing id in s->in.rid): GENERATE, SCORE, CANCEL. */
void sched_on_client(struct sched *s);
/* One message from compute (s->in): ACK, ERROR, FORWARD_RESULT, DRAFT_RESULT. */
void sched_on_compute(struct sched *s);
/* The supervisor's PEER_RESTARTED (dsv4_daemon.on_peer; ctx is the struct sched). */
void sched_on_peer(void *ctx, int role);

/* step.c: when nothing is in flight, the next step (commands of every active request). */
void schedule(struct sched *s);
