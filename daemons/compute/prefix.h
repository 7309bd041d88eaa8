/* SPDX-License-Identifier: MIT */
/*
 * The prefix cache over one sequence (docs/ARCHITECTURE.md "Prefix cache"): restore the
 * longest cached prefix of a prompt into a fresh session (and its spec's drafter), then store
 * every block the sequence completes. The store is common/prefix_cache.h; the state is
 * session_io.c's rows and tail, plus spec_io.c's taps when the spec has a drafter (such
 * chains are keyed apart from the plain ones: their tails hold more).
 *
 * A block's tail can only be exported while the session is at most max(chunk, max_rollback)
 * positions past the block's end, so feed a prefill in pieces that end on block boundaries
 * (dsv4_prefix_next_boundary) and call dsv4_prefix_save after every forward or decode step
 * (after the step's rollback: the session's positions must all be committed tokens).
 */
#pragma once

#include <stdint.h>

#include "engine.h"
#include "prefix_cache.h"
#include "speculate.h"

/*
 * The cache of the model in model_dir (config c) for this engine: model id (model_id.h),
 * blocks of the smallest multiple of every compression ratio ≥ 128, RAM tier ram_bytes, disk
 * tier disk_bytes (0: none) in dir (NULL: $XDG_CACHE_HOME/dsv4/<model id>). Errors only for
 * the model id; disk tier problems only cost the disk tier (a warning).
 */
int dsv4_prefix_cache_open(const char *model_dir, const struct dsv4_config *c,
                           uint64_t ram_bytes, uint64_t disk_bytes, const char *dir,
                           dsv4_pcache **ret, struct dsv4_err *err);

struct dsv4_prefix_seq {
    dsv4_pcache *pc;
    dsv4_session *s;
    dsv4_spec *sp;                  /* NULL: no drafter state */
    uint8_t root[DSV4_SHA256_LEN];
    uint8_t key[DSV4_SHA256_LEN];   /* chain key of the blocks in [0, keyed) */
    int64_t keyed;
    /* the last restore */
    int64_t restored;
    int blocks;
    uint64_t bytes, ns;
};

/* Bind a sequence to a session at position 0 (and its spec, or NULL). */
void dsv4_prefix_seq_init(struct dsv4_prefix_seq *q, dsv4_pcache *pc, dsv4_session *s,
                          dsv4_spec *sp);
/*
 * Restore the longest cached prefix of tokens[0..n) into the session (at position 0): at most
 * n - 1 tokens, so the last prompt token is always fed (its logits): the complete blocks, then
 * the longest partial block a sequence's end left after them. *restored = P, the
 * position the session (and the drafter) now continue from; 0 when nothing was cached. A bad
 * block costs the blocks after it, never a wrong state: anything unreadable is a miss.
 */
int dsv4_prefix_restore(struct dsv4_prefix_seq *q, const int32_t *tokens, int64_t n,
                        int64_t *restored, struct dsv4_err *err);
/* Store the blocks the session completed since the last call: tokens[0..n) are the committed
 * ids of positions 0..n-1; blocks ending after min(n, the session's position) wait (a verify
 * step's draft rows are past n until accepted). Cache write problems are only logged. */
int dsv4_prefix_save(struct dsv4_prefix_seq *q, const int32_t *tokens, int64_t n,
                     struct dsv4_err *err);
/* At a sequence's end (its session closing): dsv4_prefix_save, then the partial block after
 * the last complete one — the tokens since that boundary with the state at their end — so a
 * later sequence that extends this one (a chat's next turn: this prompt, its answer, a new
 * question) restores up to here instead of to the last boundary. Keyed by the chain key of
 * the blocks before it and the partial's own tokens; restore tries the longest first. */
int dsv4_prefix_save_end(struct dsv4_prefix_seq *q, const int32_t *tokens, int64_t n,
                         struct dsv4_err *err);
/* The first block boundary after pos (feed a prefill up to it, then save). */
int64_t dsv4_prefix_next_boundary(const struct dsv4_prefix_seq *q, int64_t pos);
