/* SPDX-License-Identifier: MIT */
/*
 * One generation through the scheduler, as `dsv4ctl gen` does it
 * (tools/dsv4ctl/cmd_gen.c): GENERATE on a DEALER of our own, TOKEN events
 * detokenized as they come, DONE or ERROR; a scheduler restart (its stats
 * page shows a new pid, ready) resubmits with the same id and the tokens we
 * have, so the stream goes on. Around that, what the HTTP edge needs:
 * - the text split into reasoning (before </think>, thinking mode) and content;
 * - stop strings cut out (the scheduler stops at the token that completes
 *   one, OpenAI returns the text before it): text that could still become
 *   a stop string is held back, so a stream never shows what the final
 *   answer will not contain;
 * - the HTTP client watched while we wait: when it hangs up the request is
 *   cancelled (CANCEL) at the next event, i.e. within one token.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api.h"
#include "api_req.h"
#include "dsml.h"
#include "zmsg.h"

enum { GEN_RUNNING, GEN_DONE, GEN_FAILED };

struct gen {
    struct api_ctx *ctx;
    const struct api_req *req;
    struct dsv4_ids prompt;
    int max_tokens;
    void *sock;
    uint64_t id, sched_pid;
    struct dsv4_wire_buf msg;
    struct dsv4_zin in;
    int32_t *got;
    uint32_t n_got;
    struct dsv4_detok dt;
    bool detok;
    /* the visible text: reasoning = [0, think_end), content = [think_end, cut) */
    char *text;
    size_t len, cap, think_end, cut, emitted, max_stop;
    size_t hold;                /* bytes at the end that may still become a stop or a DSML start */
    /* tools: where the DSML tool calls start (SIZE_MAX: not seen), and the calls once done */
    size_t calls_at;
    struct api_tool_call *calls;
    int n_calls;
    int state;
    int reason;                 /* enum dsv4_done_reason once GEN_DONE */
    int stop_index;             /* which stop string matched, -1 none */
    uint32_t n_generated;
    uint32_t n_cached;          /* prompt tokens the prefix cache restored (DONE) */
    bool started;               /* a TOKEN or PROGRESS came: the request was admitted */
    bool client_gone;
    int client_fd;
    bool watch_fd;
    uint64_t t_submit;
    /* logprobs (req->logprobs): per generated token, its own and the top alternatives */
    float *lp;
    struct dsv4_wire_topk *top; /* [max_tokens][req->top_logprobs] */
    uint32_t n_lp;              /* tokens whose logprobs arrived, in order */
};

/*
 * Encode the prompt, check the context length and the set's readiness,
 * submit. client_fd: the HTTP connection (-1: none). 0 or -1 with e filled
 * (400 context overflow, 503 set not ready, 500).
 */
int gen_begin(struct gen *g, struct api_ctx *ctx, const struct api_req *r, int client_fd,
              struct api_error *e);
/*
 * Wait up to timeout_ms for the next event and take it in. Returns 1 when
 * something changed (text, started, done), 0 on nothing, -1 when the
 * request failed (e filled: 429 busy, 400, 503) or the client is gone
 * (g->client_gone, the request cancelled).
 */
int gen_wait(struct gen *g, int timeout_ms, struct api_error *e);
/*
 * The next run of text that is final (never part of a stop string to come)
 * and of one kind: true with *p, *n, *reasoning, or false when there is none
 * now. Call until false after every gen_wait().
 */
bool gen_take(struct gen *g, const char **p, size_t *n, bool *reasoning);
/* Cancel if still running, release everything. */
void gen_end(struct gen *g);
/* The finish reason as OpenAI names it: stop, length, tool_calls. */
const char *gen_finish_reason(const struct gen *g);
