/* SPDX-License-Identifier: MIT */
/*
 * Per-sequence state (the forward driver is forward.c). All state is addressed by
 * absolute position: the raw KV ring has window + max(chunk, max_rollback)
 * slots, the compressor inputs ring coff*ratio + max(chunk, max_rollback)
 * slots, compressed rows are indexed by window number. So nothing is ever
 * evicted that a position within max_rollback of the current one still
 * needs, and a rollback is a change of the position counter: exact, O(1).
 * Everything is allocated once in dsv4_session_new. A session holds state only: the
 * activations of a step live in the engine's step scratch (forward.c), shared by every
 * session, so N sessions cost N states and one scratch.
 */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "util.h"

/* One array of the layout (a zero count still allocates one element, as the layout counts). */
static void *zcount(uint64_t *bytes, uint64_t count, size_t size)
{
    *bytes += dsv4_layout_bytes(count, size);
    return dsv4_xcalloc(count ? count : 1, size);
}

static int session_new(dsv4_engine *e, const struct dsv4_session_opts *opts, bool with_state,
                       dsv4_session **ret, struct dsv4_err *err)
{
    const struct dsv4_config *c = &e->cfg;
    struct dsv4_session_opts o = opts ? *opts : (struct dsv4_session_opts){ 0 };
    struct dsv4_session_layout lay, *L = &lay;
    int rc = dsv4_session_layout(c, o.max_ctx, o.chunk, o.max_rollback, dsv4_pool_size(e->pool),
                                 L, err);
    if (rc < 0)
        return rc;
    dsv4_session *s = dsv4_xcalloc(1, sizeof(*s));
    s->e = e;
    s->max_ctx = L->max_ctx;
    s->chunk = L->chunk;
    s->max_rollback = L->max_rollback;
    s->la_layer = -1;
    s->ring_cap = L->ring_cap;
    s->max_visible = L->max_visible;
    s->ls = dsv4_xcalloc((size_t)DSV4_MAX(c->n_layers, 1), sizeof(*s->ls));
    for (int l = 0; l < c->n_layers && with_state; l++) {
        struct layer_state *st = &s->ls[l];
        struct dsv4_layer_layout ll;
        dsv4_layer_layout(c, L, l, &ll);
        st->max_rows = ll.max_rows;
        st->cin_cap = ll.cin_cap;
        st->ring = zcount(&s->state_bytes, ll.ring, 1);
        if (c->layer_kind[l] == DSV4_ATTN_WINDOW)
            continue;
        st->cin = zcount(&s->state_bytes, ll.cin, 1);
        st->rows = zcount(&s->state_bytes, ll.rows, 1);
        if (c->layer_kind[l] == DSV4_ATTN_CSA) {
            st->icin = zcount(&s->state_bytes, ll.icin, 1);
            st->irows = zcount(&s->state_bytes, ll.irows, 1);
        }
    }
    s->scratch_only = !with_state;
    if (!with_state) {
        struct scratch *sc = &s->s;
#define ALLOC(name, type, count) sc->name = zcount(&s->scratch_bytes, (count), sizeof(type));
        DSV4_SCRATCH_ARRAYS(ALLOC)
#undef ALLOC
    }
    assert(s->state_bytes == (with_state ? L->state_bytes : 0) &&
           s->scratch_bytes == (with_state ? 0 : L->scratch_bytes));
    /* a session with state runs in the engine's steps: their scratch must fit it */
    if (with_state && (rc = engine_step_reserve(e, L->max_ctx, L->chunk, err)) < 0) {
        dsv4_session_free(s);
        return rc;
    }
    *ret = s;
    return 0;
}

int dsv4_session_new(dsv4_engine *e, const struct dsv4_session_opts *opts,
                     dsv4_session **ret, struct dsv4_err *err)
{
    return session_new(e, opts, true, ret, err);
}

int session_new_scratch(dsv4_engine *e, const struct dsv4_session_opts *opts,
                        dsv4_session **ret, struct dsv4_err *err)
{
    return session_new(e, opts, false, ret, err);
}

dsv4_session *dsv4_session_free(dsv4_session *s)
{
    if (!s)
        return NULL;
    for (int l = 0; l < s->e->cfg.n_layers; l++) {
        free(s->ls[l].ring);
        free(s->ls[l].cin);
        free(s->ls[l].rows);
        free(s->ls[l].icin);
        free(s->ls[l].irows);
    }
    free(s->ls);
    struct scratch *sc = &s->s;
#define FREE(name, type, count) free((void *)sc->name);
    DSV4_SCRATCH_ARRAYS(FREE)
#undef FREE
    free(s);
    return NULL;
}

void dsv4_session_reset(dsv4_session *s)
{
    /* Position-addressed state: positions ≥ pos are never read before being written. */
    s->pos = 0;
    s->snap = 0;
}

int64_t dsv4_session_pos(const dsv4_session *s)
{
    return s->pos;
}

void dsv4_session_bytes(const dsv4_session *s, uint64_t *state, uint64_t *scratch)
{
    *state = s->state_bytes;
    *scratch = s->scratch_bytes;
}

void dsv4_session_snapshot(dsv4_session *s)
{
    s->snap = s->pos;
}

int dsv4_session_rollback(dsv4_session *s, int64_t pos, struct dsv4_err *err)
{
    if (pos < s->snap || pos > s->pos || s->pos - pos > s->max_rollback)
        return dsv4_errf(err, -ERANGE,
                         "session: cannot roll back to %lld (position %lld, snapshot %lld, "
                         "max_rollback %d)", (long long)pos, (long long)s->pos,
                         (long long)s->snap, s->max_rollback);
    s->pos = pos;
    return 0;
}

void head_logits(dsv4_session *bs, const float *x, int n, float *logits)
{
    dsv4_engine *e = bs->e;
    const struct dsv4_config *c = &e->cfg;
    mhc_head(e, x, n, bs->s.y);
    rmsnorm_rows(bs->s.a, bs->s.y, e->norm, n, c->dim, (float)c->norm_eps);
    linear_bf16(e, &e->head, bs->s.a, n, logits);
}

