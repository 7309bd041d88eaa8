/* SPDX-License-Identifier: MIT */
/*
 * Speculative decoding over a session (docs/ARCHITECTURE.md "DSpark"): per step, a proposer
 * drafts tokens after the anchor, the target verifies the anchor and a chosen prefix of the
 * drafts in one batched forward (rows bitwise equal to one-row decode), the longest prefix
 * whose drafts equal the target's own choice is accepted plus the target's next token, and
 * the session rolls back (snapshot/rollback, never replay) to the last accepted position. The
 * drafter's ring receives the taps of accepted rows only.
 *
 * Lossless by construction for any choice rule that is a function of (logits, token index):
 * greedy, and the scheduler's seeded sampler (dsv4_sample draws from (seed, index)), so the
 * output ids are identical to plain decoding whatever is proposed. The verify length comes
 * from the proposer's confidences, a measured acceptance calibration and a measured cost per
 * verify row; a quench switches speculation off when it measures a loss and re-probes later.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "dspark.h"
#include "engine.h"
#include "spec_policy.h"

struct dsv4_proposer {
    void *ctx;
    /*
     * Propose ids[0..gamma) for the tokens after `anchor`, which is generated token number
     * `index` at position `pos` (the tokens proposed are numbers index+1..). conf[i]: the
     * proposer's probability that ids[i] is accepted given ids[0..i) were.
     */
    int (*propose)(void *ctx, int64_t pos, int64_t index, int32_t anchor, int gamma,
                   int32_t *ids, float *conf, struct dsv4_err *err);
};

/* The target's choice for generated token number `index` from its logits. */
typedef int32_t (*dsv4_choose_fn)(void *ctx, const float *logits, int vocab, int64_t index);

typedef struct dsv4_spec dsv4_spec;

/*
 * `d` (may be NULL) is the drafter: it proposes unless `p` is given, and its ring follows the
 * committed positions either way. With neither, every step is plain.
 */
int dsv4_spec_new(dsv4_session *s, dsv4_drafter *d, const struct dsv4_proposer *p,
                  const struct dsv4_spec_opts *o, dsv4_spec **ret, struct dsv4_err *err);
dsv4_spec *dsv4_spec_free(dsv4_spec *sp);
/* Feed tokens (the prompt, or replayed committed tokens) and commit them; logits of the last. */
int dsv4_spec_feed(dsv4_spec *sp, const int32_t *tokens, int n, float *logits,
                   struct dsv4_err *err);
/* Commit the rows the drafter still lacks (the last window of them; rows are committed lazily,
 * when a proposal needs them, so steps without speculation cost no drafter work). */
int dsv4_spec_flush(dsv4_spec *sp, struct dsv4_err *err);
/*
 * One step from `anchor` (generated token number `index`, not yet fed): out[0..ret) receives
 * the next tokens (≥ 1, at most max_out; the last is the next anchor; an EOS ends the list).
 * Returns the count or a negative errno.
 */
int dsv4_spec_step(dsv4_spec *sp, int32_t anchor, int64_t index, int max_out,
                   dsv4_choose_fn choose, void *choose_ctx, int32_t *out, struct dsv4_err *err);
void dsv4_spec_get_stats(const dsv4_spec *sp, struct dsv4_spec_stats *ret);
/*
 * Trace every step to f (NULL: off) as one JSON line: {"pos": P (the anchor's position),
 * "index": the anchor's generated-token number, "anchor", "drafts": the proposed block (all
 * gamma, [] on a plain step), "conf": their confidences, "verified": drafts verified, "accepted",
 * "out": the tokens the step produced}. Drafts are checked, not only outputs: a drafter bug only
 * slows speculation down (tests/py/test_dspark_trace.py compares them with the reference).
 */
void dsv4_spec_set_trace(dsv4_spec *sp, FILE *f);

/* Parts of a step for a verifier elsewhere (the compute daemon serving the scheduler): */
/* forward rows at the session's position, keeping their taps for the drafter; */
int dsv4_spec_forward(dsv4_spec *sp, const int32_t *rows, int n, enum dsv4_logits_mode mode,
                      float *logits, struct dsv4_err *err);
/* the same for a batched forward (dsv4_engine_forward): fills its capture and on_chunk; */
void dsv4_spec_batch_item(dsv4_spec *sp, struct dsv4_forward_item *it);
/* the drafter's block for `anchor` at the session's position (conf = probabilities); */
int dsv4_spec_draft(dsv4_spec *sp, int32_t anchor, int32_t *ids, float *conf,
                    struct dsv4_err *err);
/* after a session rollback: forget drafter rows past the session's position. */
void dsv4_spec_sync(dsv4_spec *sp);

/*
 * Test-only proposer (tests/, benchmarks): replays a known continuation cont[0..n) (generated
 * token number i is cont[i]) and proposes a wrong token ((id + 1) mod vocab) at the numbers in
 * err[0..n_err), at every number when err_all, or at a pseudo-random share of 100 − agree
 * percent (agree < 0: off). Past the continuation it proposes token 0. conf is reported for
 * every proposal.
 */
struct dsv4_replay_spec {
    const int32_t *cont;
    int n;
    const int64_t *err;
    int n_err;
    bool err_all;
    int agree;
    float conf;
    int vocab;
};
struct dsv4_proposer dsv4_replay_proposer(const struct dsv4_replay_spec *r);

/* The parts of a spec the prefix cache's drafter state needs (spec_io.c): its session, its
 * drafter (NULL: none), and the tap ring (cap slots of width floats, slot = position mod cap;
 * NULL without a drafter). */
dsv4_session *dsv4_spec_session(const dsv4_spec *sp);
dsv4_drafter *dsv4_spec_drafter(const dsv4_spec *sp);
float *dsv4_spec_tap_ring(const dsv4_spec *sp, int *cap, size_t *width);

/*
 * The drafter's state for the prefix cache (spec_io.c). Everything the drafter needs at
 * position P is the taps of the last min(window, P) positions (the drafter's ring is built
 * from them lazily, dsv4_spec_flush), so that is the whole export: taps[min(window, P)][width]
 * fp32. 0 bytes without a drafter. Export at P ≤ the session's position while the tap ring
 * still holds them; import after the session was restored to P: the tap ring gets the taps and
 * the drafter restarts at P - min(window, P), so the next draft commits exactly the rows a full
 * prefill would have.
 */
uint64_t dsv4_spec_tail_bytes(const dsv4_spec *sp, int64_t P);
int dsv4_spec_export_tail(const dsv4_spec *sp, int64_t P, void *buf, size_t len,
                          struct dsv4_err *err);
int dsv4_spec_import_tail(dsv4_spec *sp, const void *buf, size_t len, struct dsv4_err *err);
