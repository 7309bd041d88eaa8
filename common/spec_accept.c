/* SPDX-License-Identifier: MIT */
/* DSpark's acceptance rule (spec_accept.h). */
#include "spec_accept.h"

int dsv4_spec_accept(const int32_t *drafts, int L, int32_t eos, dsv4_spec_row_choice_fn choice,
                     void *ctx, int32_t *out, int *keep, int *accepted)
{
    int n = 0;
    *accepted = 0;
    *keep = L + 1;
    for (int j = 0; j <= L; j++) {
        int32_t g = choice(ctx, j);
        out[n++] = g;
        if (j == L || drafts[j] != g) {
            *keep = j + 1;      /* rows anchor, d_1..d_j; g is the next anchor */
            break;
        }
        ++*accepted;
        if (g == eos) {
            *keep = j + 1;      /* an accepted EOS ends the list, unfed */
            break;
        }
    }
    return n;
}
