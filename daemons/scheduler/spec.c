/* SPDX-License-Identifier: MIT */
/* DSpark verification steps of the scheduler (spec.h). */
#include "spec.h"

#include <string.h>

#include "spec_accept.h"
#include "util.h"

void spec_admit(struct spec_req *q, int block, bool greedy, uint32_t flags,
                const struct dsv4_spec_opts *o)
{
    memset(q, 0, sizeof(*q));
    q->on = block > 0 && block <= DSV4_WIRE_MAX_DRAFT && greedy &&
            !(flags & DSV4_GEN_NO_DSPARK);
    q->n_draft = (uint32_t)block;
    dsv4_spec_policy_init(&q->pol, o);
}

void spec_reset(struct spec_req *q)
{
    q->drafted = false;
    q->verify_l = 0;
    q->t_step = 0;
}

/* The largest verify length: the token budget and compute's default max_rollback (16). */
static int lmax_of(const struct spec_req *q, uint32_t n_gen, uint32_t max_tokens)
{
    int64_t l = (int64_t)max_tokens - n_gen - 1;
    l = DSV4_MIN(l, (int64_t)q->n_draft);
    l = DSV4_MIN(l, 15);
    return l < 0 ? 0 : (int)l;
}

bool spec_issue(struct spec_req *q, struct dsv4_wire_buf *b, uint64_t seq, uint64_t session,
                int64_t cpos, int32_t anchor, uint32_t n_gen, uint32_t max_tokens)
{
    if (!q->on)
        return false;
    int lmax = lmax_of(q, n_gen, max_tokens);
    if (!q->drafted) {
        q->t_step = dsv4_now_ns();
        if (lmax == 0 || !dsv4_spec_policy_propose(&q->pol))
            return false;
        struct dsv4_msg_draft d = { seq, session, cpos, anchor, 0 };
        dsv4_wire_simple(b, DSV4_MSG_DRAFT, &d, sizeof(d));
        return true;
    }
    q->drafted = false;
    int L = dsv4_spec_policy_len(&q->pol, q->conf, lmax);
    if (L == 0)
        return false;   /* a plain step after all (the drafting time counts in it) */
    struct dsv4_msg_forward f = { seq, session, (uint32_t)L + 1, 0,
                                  DSV4_FWD_ALL_ROWS | DSV4_FWD_SPECULATIVE, 0 };
    dsv4_wire_begin(b, DSV4_MSG_FORWARD);
    dsv4_wire_put(b, &f, sizeof(f));
    for (int i = 0; i <= L; i++) {
        struct dsv4_wire_fwd_in row = { i ? q->ids[i - 1] : anchor, -1, cpos + i };
        dsv4_wire_put(b, &row, sizeof(row));
    }
    dsv4_wire_finish(b);
    q->verify_l = (uint32_t)L;
    return true;
}

void spec_draft_result(struct spec_req *q, const struct dsv4_msg_draft_result *m,
                       const void *tail)
{
    uint32_t n = DSV4_MIN(m->n, q->n_draft);
    memcpy(q->ids, tail, n * sizeof(int32_t));
    memcpy(q->conf, (const unsigned char *)tail + (size_t)m->n * sizeof(int32_t),
           n * sizeof(float));
    for (uint32_t i = n; i < q->n_draft; i++) {     /* a shorter block: nothing to verify */
        q->ids[i] = 0;
        q->conf[i] = 0.0f;
    }
    q->drafted = true;
}

static int32_t row_argmax(void *ctx, int j)
{
    return ((const struct dsv4_wire_row *)ctx)[j].argmax;
}

int spec_verify(struct spec_req *q, const struct dsv4_wire_row *rows, uint32_t n_rows,
                int32_t eos, int32_t *out, int *keep, int *accepted)
{
    int L = (int)q->verify_l;
    q->verify_l = 0;
    if (n_rows < (uint32_t)L + 1)       /* the decoder guarantees n_rows >= 1 */
        L = (int)n_rows - 1;            /* compute answered fewer rows: verify those */
    int n = dsv4_spec_accept(q->ids, L, eos, row_argmax, (void *)rows, out, keep, accepted);
    dsv4_spec_policy_record(&q->pol, L, q->conf, *accepted, n,
                            (double)(dsv4_now_ns() - q->t_step));
    q->t_step = 0;
    return n;
}

void spec_plain_done(struct spec_req *q)
{
    if (!q->on || !q->t_step)
        return;     /* not a timed step (prefill or replay catch-up) */
    dsv4_spec_policy_record(&q->pol, 0, NULL, 0, 1, (double)(dsv4_now_ns() - q->t_step));
    q->t_step = 0;
}
