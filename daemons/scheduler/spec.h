/* SPDX-License-Identifier: MIT */
/*
 * DSpark verification in the scheduler (docs/ARCHITECTURE.md "DSpark"): for a greedy request
 * whose compute session holds every token but the newest (the anchor), a step is DRAFT (the
 * compute daemon's drafter proposes a block), then — if the policy (spec_policy.h) verifies
 * L > 0 drafts — SNAPSHOT and one FORWARD of [anchor, d_1..d_L] with every row's argmax;
 * the longest prefix of drafts equal to the target's own argmaxes is accepted plus the target's
 * next token, and ROLLBACK returns the session to the last accepted row (never a replay).
 * Rows are bitwise equal to one-row decode, so the ids equal plain greedy decoding. Sampled
 * requests verify one token at a time (plain decoding). The request keeps only accepted
 * tokens, so a compute restart mid-step replays committed tokens and continues identically.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "dsv4_wire.h"
#include "spec_policy.h"

struct spec_req {
    bool on;                    /* this request speculates */
    bool drafted;               /* ids/conf hold a DRAFT_RESULT for the anchor at cpos */
    uint32_t n_draft, verify_l; /* block size; drafts the in-flight FORWARD verifies */
    int32_t ids[DSV4_WIRE_MAX_DRAFT];
    float conf[DSV4_WIRE_MAX_DRAFT];
    uint64_t t_step;            /* start of the step (ns) */
    uint64_t quench_seen;
    struct dsv4_spec_policy pol;
};

/* A new request: speculate when the daemons run --dspark (block > 0), it is greedy and its
 * GENERATE flags do not refuse it. */
void spec_admit(struct spec_req *q, int block, bool greedy, uint32_t flags,
                const struct dsv4_spec_opts *o);
/* Forget a step in progress (compute restarted: its session and draft are gone). */
void spec_reset(struct spec_req *q);
/*
 * The next command of a caught-up request (compute holds every token but the anchor at cpos):
 * a DRAFT, or the verify FORWARD of [anchor, drafts] once a block is back, into b; false for a
 * plain step (the caller sends the one-row FORWARD).
 */
bool spec_issue(struct spec_req *q, struct dsv4_wire_buf *b, uint64_t seq, uint64_t session,
                int64_t cpos, int32_t anchor, uint32_t n_gen, uint32_t max_tokens);
void spec_draft_result(struct spec_req *q, const struct dsv4_msg_draft_result *m,
                       const void *tail);
/*
 * The verify FORWARD's rows: out[0..ret) the tokens decided (accepted drafts, then the target's
 * own), *keep the rows compute keeps (rollback to cpos + keep), *accepted the drafts accepted.
 */
int spec_verify(struct spec_req *q, const struct dsv4_wire_row *rows, uint32_t n_rows,
                int32_t eos, int32_t *out, int *keep, int *accepted);
/* A plain step's token was decided: the policy's timing sample. */
void spec_plain_done(struct spec_req *q);
