/* SPDX-License-Identifier: MIT */
/*
 * The DeepSeek-V4 target forward pass: public API of libdsv4engine.
 *
 * An engine owns the resident weights of one checkpoint (native FP8/FP4/BF16
 * formats), the thread pool and the routed-expert provider. A session owns
 * the per-sequence state (window ring, compressed rows, compressor and
 * indexer inputs) sized once from the config and a maximum context. Feeding
 * tokens advances the session; any position reached since the last snapshot
 * (at most max_rollback positions back) can be restored exactly, without
 * recomputation (docs/ARCHITECTURE.md, "Session state and rollback").
 *
 * Thread safety. One thread drives an engine: every dsv4_session_* and dsv4_drafter_* call
 * on any session of one engine must come from the same thread (or be serialised by the
 * caller), because the engine's pool, its expert provider and its lookahead counters are
 * shared by all its sessions. Inside a call the engine fans work out to its own pool and
 * joins before returning; callbacks (on_layer, the provider's acquire/release/prefetch) run on
 * the calling thread. Weights are immutable after dsv4_engine_open, so distinct engines in one
 * process are independent. Sessions are never shared between engines. dsv4_argmax,
 * dsv4_log_softmax_* and dsv4_sample are pure and callable from any thread.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "err.h"
#include "expert.h"
#include "sampling.h"

typedef struct dsv4_engine dsv4_engine;
typedef struct dsv4_session dsv4_session;

struct dsv4_engine_opts {
    int n_threads;                  /* workers incl. the caller; 0 → 1 */
    uint64_t expert_cache_bytes;    /* in-process provider LRU budget; 0 → 1 GiB */
    /* Optional external provider (the fetcher daemon); NULL → in-process pread + LRU. */
    const struct dsv4_expert_provider *experts;
    /* At most this many experts per acquire (a prefill chunk's union is leased in groups,
     * so a small cache can serve it); 0 = the whole union at once. Results do not change. */
    int max_lease;
    /* Optional: called on the forwarding thread after every layer of every batched step
     * (dsv4-compute heartbeats from it, so a long prefill never looks hung). */
    void (*on_layer)(void *ctx);
    void *on_layer_ctx;
    /* Load the DSpark drafter's weights (mtp.*) too; -ENOENT naming "dspark" when the
     * checkpoint has none. dsv4_drafter_new needs it. */
    bool dspark;
    /* Rows one step of dsv4_engine_forward may carry (its scratch); 0 → the default chunk. */
    int step_rows;
};

int dsv4_engine_open(const char *model_dir, const struct dsv4_engine_opts *opts,
                     dsv4_engine **ret, struct dsv4_err *err);
dsv4_engine *dsv4_engine_free(dsv4_engine *e);
const struct dsv4_config *dsv4_engine_config(const dsv4_engine *e);
/* Statistics of the in-process expert cache; -ENOENT with an external provider. */
int dsv4_engine_expert_stats(const dsv4_engine *e, struct dsv4_expert_cache_stats *ret);
/* Bytes of resident weights the engine allocated (dense, embedding, head, tables). */
uint64_t dsv4_engine_resident_bytes(const dsv4_engine *e);
/* Router lookahead (with a provider that takes prefetch hints): experts predicted for the
 * next layer from this layer's FFN input, and how many of them that layer then chose. */
void dsv4_engine_lookahead_stats(const dsv4_engine *e, uint64_t *asked, uint64_t *right);

struct dsv4_session_opts {
    int64_t max_ctx;        /* positions the session can hold; 0 → 4096 */
    int chunk;              /* prefill rows per batched step; 0 → 64 */
    int max_rollback;       /* positions a rollback may undo; 0 → 16 */
};

int dsv4_session_new(dsv4_engine *e, const struct dsv4_session_opts *opts,
                     dsv4_session **ret, struct dsv4_err *err);
dsv4_session *dsv4_session_free(dsv4_session *s);
/* Forget the sequence: position 0, empty state, snapshot at 0. */
void dsv4_session_reset(dsv4_session *s);
/* Number of positions processed so far (= position of the next token). */
int64_t dsv4_session_pos(const dsv4_session *s);
/* Bytes the session allocated: position state, and scratch (0: a session's steps run in the
 * engine's scratch, dsv4_engine_scratch_bytes). */
void dsv4_session_bytes(const dsv4_session *s, uint64_t *state, uint64_t *scratch);

enum dsv4_logits_mode {
    DSV4_LOGITS_NONE,   /* state only */
    DSV4_LOGITS_LAST,   /* logits[vocab] of the last fed token */
    DSV4_LOGITS_ALL,    /* logits[n][vocab], one row per fed token */
};

/*
 * Run `n` tokens at positions pos..pos+n-1 (batched in chunks of the
 * session's chunk size). Every row is computed with the same arithmetic
 * whatever the chunking, so the result does not depend on how a sequence is
 * split into calls. Returns 0 or a negative errno (-ERANGE past max_ctx,
 * -EINVAL for a token outside the vocabulary, provider errors).
 */
int dsv4_session_forward(dsv4_session *s, const int32_t *tokens, int n,
                         enum dsv4_logits_mode mode, float *logits, struct dsv4_err *err);

/*
 * Target features for the DSpark drafter (dspark spec §4): for every fed token and every layer
 * of `layers` (strictly ascending), the plain mean of the hc residual streams after that
 * layer has run, rounded to bf16: hidden[token][i][dim].
 */
struct dsv4_capture {
    const int *layers;
    int n_layers;
    float *hidden;
};

/* dsv4_session_forward plus the capture (`cap` may be NULL); -EINVAL for a bad layer list. */
int dsv4_session_forward_capture(dsv4_session *s, const int32_t *tokens, int n,
                                 enum dsv4_logits_mode mode, float *logits,
                                 const struct dsv4_capture *cap, struct dsv4_err *err);

/* dsv4_session_forward's checks alone (0, or the error it would return): a caller batching
 * several sessions (dsv4_engine_forward) can refuse one request without failing the rest. */
int dsv4_forward_check(const dsv4_session *s, const int32_t *tokens, int n,
                       struct dsv4_err *err);

/*
 * Several sessions forwarded together (continuous batching, docs/ARCHITECTURE.md "Life of a
 * step"): the rows of all items go through every layer in shared steps (each step at most the
 * engine's step_rows rows, each item at most its session's chunk per step), so the weights and
 * the routed experts are read once per step for all of them. Every item's logits and captures
 * are bitwise what dsv4_session_forward_capture would give for that session alone. Sessions
 * must be distinct sessions of this engine. All items are checked before anything runs (the
 * error names the item); a provider error mid-way leaves each session at the position of its
 * last completed step (its rows up to there are committed). Capture: `cap->hidden` receives
 * the rows of each step of the item (at most the session's chunk rows, from index 0), then
 * on_chunk(ctx, position of the first of them, count) is called.
 */
#define DSV4_MAX_STEP_SESSIONS 64
struct dsv4_forward_item {
    dsv4_session *s;
    const int32_t *tokens;
    int n;
    enum dsv4_logits_mode mode;
    float *logits;                  /* LAST: [vocab]; ALL: [n][vocab] */
    const struct dsv4_capture *cap; /* may be NULL */
    void (*on_chunk)(void *ctx, int64_t pos, int n);
    void *ctx;
};
int dsv4_engine_forward(dsv4_engine *e, const struct dsv4_forward_item *items, int n_items,
                        struct dsv4_err *err);
/* Routed-expert leases saved so far by steps of several sessions: the sum over sessions of
 * each one's distinct experts per layer, minus the step's union (leased once). */
uint64_t dsv4_engine_union_saved(const dsv4_engine *e);
/* Bytes of the engine's step scratch (activations of step_rows rows, the step's logits). */
uint64_t dsv4_engine_scratch_bytes(const dsv4_engine *e);

/* Remember the current position as the base of later rollbacks. */
void dsv4_session_snapshot(dsv4_session *s);
/*
 * Restore the state to what it was right after position pos-1 (i.e. the
 * next token goes to `pos`). Valid for snapshot ≤ pos ≤ current and
 * current − pos ≤ max_rollback; -ERANGE otherwise. O(1): the state is
 * position-addressed, rolling back only moves the position.
 */
int dsv4_session_rollback(dsv4_session *s, int64_t pos, struct dsv4_err *err);

/* dsv4_argmax and dsv4_log_softmax_at: common/sampling.h. */

/*
 * Session state export and import (session_io.c; the prefix cache, docs/ARCHITECTURE.md
 * "Prefix cache"). The state at position P is the compressed rows and indexer keys of the
 * windows completed before P ("rows", growing with P, never rewritten) plus a "tail": the raw
 * KV of the last window-1 positions and the compressor/indexer inputs of the windows still
 * open at P. Buffers hold the session's own fp32 words in an order fixed by the config, so
 * they import into any session of the same model (whatever its chunk, max_ctx, max_rollback)
 * and the continuation is bitwise that of a full prefill. A prefix cache stores per block
 * [p0, p1) the rows of [p0, p1) and the tail at p1: restoring [0, P) imports every block's
 * rows in order, then the tail at P.
 */
/* Bytes of the rows of [p0, p1) and of the tail at P (config only; 0 for bad ranges). */
uint64_t dsv4_session_rows_bytes(const dsv4_session *s, int64_t p0, int64_t p1);
uint64_t dsv4_session_tail_bytes(const dsv4_session *s, int64_t P);
/* Rows of [p0, p1), p1 ≤ the position; -ERANGE / -EINVAL (len not the exact size). */
int dsv4_session_export_rows(const dsv4_session *s, int64_t p0, int64_t p1, void *buf,
                             size_t len, struct dsv4_err *err);
/* The tail at P: P ≤ the position and at most max(chunk, max_rollback) back (the rings keep
 * that much), so a decode step that crossed P can still export it; -ERANGE otherwise. */
int dsv4_session_export_tail(const dsv4_session *s, int64_t P, void *buf, size_t len,
                             struct dsv4_err *err);
/* Import the rows of [p0, p1) into a session at position p0 (a fresh one for p0 = 0) and move
 * it to p1. The session is not usable until dsv4_session_import_tail at p1 succeeds; after
 * any error, dsv4_session_reset it. */
int dsv4_session_import_rows(dsv4_session *s, int64_t p0, int64_t p1, const void *buf,
                             size_t len, struct dsv4_err *err);
/* Import the tail at the session's position; the snapshot moves there too. */
int dsv4_session_import_tail(dsv4_session *s, const void *buf, size_t len,
                             struct dsv4_err *err);
/* Both in one buffer (rows of [p0, p1), then the tail at p1): its size; the export of
 * [p0, position); the import of [p0, p1) into a session at p0. */
uint64_t dsv4_session_export_bytes(const dsv4_session *s, int64_t p0, int64_t p1);
int dsv4_session_export(const dsv4_session *s, int64_t p0, void *buf, size_t len,
                        struct dsv4_err *err);
int dsv4_session_import(dsv4_session *s, int64_t p0, int64_t p1, const void *buf, size_t len,
                        struct dsv4_err *err);
