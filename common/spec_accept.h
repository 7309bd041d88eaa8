/* SPDX-License-Identifier: MIT */
/*
 * DSpark's acceptance rule, the one implementation (the engine's in-process speculation and
 * the scheduler's verification both call it). A verify forward ran the rows
 * [anchor, d_1 .. d_L]; row j's own choice g_j (argmax, or the sampled token) is what plain
 * decoding would have produced after d_1..d_j. Accept drafts while d_{j+1} == g_j; the first
 * disagreeing row's choice (or row L's after all L are accepted) is the next token. An
 * accepted EOS ends the list where it is: nothing after it is emitted or kept.
 */
#pragma once

#include <stdint.h>

/* Row j's choice; called for j = 0, 1, ... only as far as the rule needs. */
typedef int32_t (*dsv4_spec_row_choice_fn)(void *ctx, int row);

/*
 * drafts[0..L) against the rows' choices. out[0..ret) receives the tokens decided (the
 * accepted drafts, then the target's own unless an accepted EOS ended the list), *keep the
 * rows of the forward to keep (anchor + accepted drafts: roll the session back to
 * first_pos + *keep), *accepted the drafts accepted. out must hold L + 1 ids.
 */
int dsv4_spec_accept(const int32_t *drafts, int L, int32_t eos, dsv4_spec_row_choice_fn choice,
                     void *ctx, int32_t *out, int *keep, int *accepted);
