/* SPDX-License-Identifier: MIT */
/*
 * The DSpark drafter of DeepSeek-V4 (dspark spec §3–§7; the numpy definition is
 * tools/reference/dspark_ref.py): S full ratio-0 blocks mtp.0..S-1 that read a ring of context
 * K/V rows built from the target's hidden-state taps, draft a block [anchor, noise…] of γ
 * positions in one pass, and pick the proposals left to right with the Markov head; the
 * confidence head gives, per slot, the chance that it survives verification given its prefix.
 *
 * The ring holds committed positions only (the verifier commits the taps of accepted rows),
 * so a rejected draft never needs undoing in the drafter. Weights are loaded from the engine's
 * checkpoint on the first dsv4_drafter_new and live as long as the engine; the stages'
 * routed experts come through their own in-process LRU (docs/ARCHITECTURE.md "DSpark").
 */
#pragma once

#include <stdint.h>

#include "engine.h"

typedef struct dsv4_drafter dsv4_drafter;

/* -ENOENT when the config declares no drafter (no dspark_* keys). */
int dsv4_drafter_new(dsv4_engine *e, dsv4_drafter **ret, struct dsv4_err *err);
dsv4_drafter *dsv4_drafter_free(dsv4_drafter *d);
/* Forget every committed row. */
void dsv4_drafter_reset(dsv4_drafter *d);
/* Committed positions (= the position of the next anchor). */
int64_t dsv4_drafter_pos(const dsv4_drafter *d);
/* Bytes of per-sequence state the drafter holds: its context ring (stages × window × head_dim
 * floats) and nothing of the target's layers. */
uint64_t dsv4_drafter_state_bytes(const dsv4_drafter *d);
/* γ, the drafted block size (the drafter always drafts a whole block). */
int dsv4_drafter_block(const dsv4_drafter *d);
/* The target layers whose taps commit() wants, ascending (a dsv4_capture layer list). */
const int *dsv4_drafter_taps(const dsv4_drafter *d, int *n_taps);

/*
 * Commit the context rows of positions pos..pos+n-1 from their taps hidden[n][n_taps][dim]
 * (dsv4_session_forward_capture with dsv4_drafter_taps). pos must equal dsv4_drafter_pos.
 */
int dsv4_drafter_commit(dsv4_drafter *d, const float *hidden, int n, int64_t pos,
                        struct dsv4_err *err);

/*
 * Skip positions dsv4_drafter_pos..pos-1 without their rows (pos ≥ dsv4_drafter_pos): a
 * verifier that stopped proposing need not commit rows that leave the window before it drafts
 * again. Drafting needs the rows of the last min(window, P) positions.
 */
int dsv4_drafter_skip_to(dsv4_drafter *d, int64_t pos, struct dsv4_err *err);
/* The drafter's context window (sliding_window): rows older than P − window are never read. */
int dsv4_drafter_window(const dsv4_drafter *d);
/* Bytes the drafter allocated (its arrays and scratch session): what the memory plan counts
 * (dsv4_dspark_session_bytes, with the speculation buffers). */
uint64_t dsv4_drafter_bytes(const dsv4_drafter *d);

/*
 * Draft one block for `anchor` (the newest token, at position P = dsv4_drafter_pos ≥ 1):
 * ids[γ] greedy proposals for positions P+1..P+γ; conf_logit[γ] the confidence head's raw
 * logits (probability = sigmoid); logits[γ][vocab] the Markov-corrected logits. Each output may
 * be NULL. chain (NULL or γ-1 ids) forces the Markov chain: slot i+1 uses chain[i] as its
 * previous token instead of ids[i] (to compare drafters along one chain).
 */
int dsv4_drafter_draft(dsv4_drafter *d, int32_t anchor, const int32_t *chain, int32_t *ids,
                       float *conf_logit, float *logits, struct dsv4_err *err);
