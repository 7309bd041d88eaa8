/* SPDX-License-Identifier: MIT */
/*
 * Per-sequence state and the forward driver. All state is addressed by
 * absolute position: the raw KV ring has window + max(chunk, max_rollback)
 * slots, the compressor inputs ring coff*ratio + max(chunk, max_rollback)
 * slots, compressed rows are indexed by window number. So nothing is ever
 * evicted that a position within max_rollback of the current one still
 * needs, and a rollback is a change of the position counter: exact, O(1).
 * Everything is allocated once in dsv4_session_new.
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
        st->ring = zcount(&s->state_bytes, ll.ring, sizeof(float));
        if (c->layer_kind[l] == DSV4_ATTN_WINDOW)
            continue;
        st->cin = zcount(&s->state_bytes, ll.cin, sizeof(float));
        st->rows = zcount(&s->state_bytes, ll.rows, sizeof(float));
        if (c->layer_kind[l] == DSV4_ATTN_CSA) {
            st->icin = zcount(&s->state_bytes, ll.icin, sizeof(float));
            st->irows = zcount(&s->state_bytes, ll.irows, sizeof(float));
        }
    }
    struct scratch *sc = &s->s;
#define ALLOC(name, type, count) sc->name = zcount(&s->scratch_bytes, (count), sizeof(type));
    DSV4_SCRATCH_ARRAYS(ALLOC)
#undef ALLOC
    assert(s->state_bytes == (with_state ? L->state_bytes : 0) &&
           s->scratch_bytes == L->scratch_bytes);
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

/* hidden[r][i] = bf16(mean of the hc streams of row r) for the capture slot i of layer l */
static void capture_layer(const dsv4_engine *e, const float *x, int n, int l,
                          const struct dsv4_capture *cap, float *hidden)
{
    int d = e->cfg.dim, hc = e->cfg.hc_mult;
    for (int i = 0; i < cap->n_layers; i++) {
        if (cap->layers[i] != l)
            continue;
        for (int r = 0; r < n; r++) {
            const float *xr = x + (size_t)r * hc * d;
            float *h = hidden + ((size_t)r * cap->n_layers + i) * d;
            for (int k = 0; k < d; k++) {
                float acc = xr[k];
                for (int j = 1; j < hc; j++)
                    acc += xr[(size_t)j * d + k];
                h[k] = dsv4_bf16_round(acc / (float)hc);
            }
        }
    }
}

static int forward_chunk(dsv4_session *s, const int32_t *tokens, int n, float *logits,
                         enum dsv4_logits_mode mode, const struct dsv4_capture *cap,
                         float *hidden, struct dsv4_err *err)
{
    dsv4_engine *e = s->e;
    const struct dsv4_config *c = &e->cfg;
    struct scratch *sc = &s->s;
    int d = c->dim, hc = c->hc_mult;
    float eps = (float)c->norm_eps;
    for (int r = 0; r < n; r++) {
        const uint16_t *row = e->embed.w + (size_t)tokens[r] * d;
        float *x = sc->x + (size_t)r * hc * d;
        for (int j = 0; j < d; j++)
            x[j] = dsv4_bf16_to_f32(row[j]);
        for (int h = 1; h < hc; h++)
            memcpy(x + (size_t)h * d, x, (size_t)d * sizeof(float));
    }
    moe_prefetch_hashed(s, tokens, n);
    for (int l = 0; l < c->n_layers; l++) {
        const struct layer_w *lw = &e->layers[l];
        mhc_pre(e, sc->x, lw->hc_attn_fn, lw->hc_attn_base, lw->hc_attn_scale, n, sc->y,
                sc->post, sc->comb);
        rmsnorm_rows(sc->a, sc->y, lw->attn_norm, n, d, eps);
        attention_layer(s, l, sc->a, n, s->pos, sc->out);
        mhc_post(e, sc->out, sc->x, sc->post, sc->comb, n);
        mhc_pre(e, sc->x, lw->hc_ffn_fn, lw->hc_ffn_base, lw->hc_ffn_scale, n, sc->y, sc->post,
                sc->comb);
        rmsnorm_rows(sc->a, sc->y, lw->ffn_norm, n, d, eps);
        int rc = moe_layer(s, l, sc->a, tokens, n, sc->out, err);
        if (rc < 0)
            return rc;
        mhc_post(e, sc->out, sc->x, sc->post, sc->comb, n);
        if (cap)
            capture_layer(e, sc->x, n, l, cap, hidden);
        if (e->on_layer)
            e->on_layer(e->on_layer_ctx);
    }
    if (mode == DSV4_LOGITS_ALL)
        head_logits(s, sc->x, n, logits);
    else if (mode == DSV4_LOGITS_LAST)
        head_logits(s, sc->x + (size_t)(n - 1) * hc * d, 1, logits);
    s->pos += n;
    return 0;
}

int dsv4_session_forward(dsv4_session *s, const int32_t *tokens, int n,
                         enum dsv4_logits_mode mode, float *logits, struct dsv4_err *err)
{
    return dsv4_session_forward_capture(s, tokens, n, mode, logits, NULL, err);
}

int dsv4_session_forward_capture(dsv4_session *s, const int32_t *tokens, int n,
                                 enum dsv4_logits_mode mode, float *logits,
                                 const struct dsv4_capture *cap, struct dsv4_err *err)
{
    const struct dsv4_config *c = &s->e->cfg;
    if (cap) {
        if (cap->n_layers < 1 || !cap->hidden)
            return dsv4_errf(err, -EINVAL, "forward: empty capture");
        for (int i = 0; i < cap->n_layers; i++)
            if (cap->layers[i] < 0 || cap->layers[i] >= c->n_layers ||
                (i > 0 && cap->layers[i] <= cap->layers[i - 1]))
                return dsv4_errf(err, -EINVAL,
                                 "forward: capture layers must be ascending in 0..%d",
                                 c->n_layers - 1);
    }
    if (n < 1)
        return dsv4_errf(err, -EINVAL, "forward: no tokens");
    if (s->pos + n > s->max_ctx)
        return dsv4_errf(err, -ERANGE, "forward: position %lld + %d tokens exceeds max_ctx %lld",
                         (long long)s->pos, n, (long long)s->max_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return dsv4_errf(err, -EINVAL, "forward: token %d outside the vocabulary (%d)",
                             tokens[i], c->vocab_size);
    for (int done = 0; done < n;) {
        int m = DSV4_MIN(s->chunk, n - done);
        bool last = done + m == n;
        enum dsv4_logits_mode cm = mode == DSV4_LOGITS_ALL ? mode
                                   : last                  ? mode
                                                           : DSV4_LOGITS_NONE;
        float *lg = mode == DSV4_LOGITS_ALL ? logits + (size_t)done * c->vocab_size : logits;
        float *hid = cap ? cap->hidden + (size_t)done * cap->n_layers * c->dim : NULL;
        int rc = forward_chunk(s, tokens + done, m, lg, cm, cap, hid, err);
        if (rc < 0)
            return rc;
        done += m;
    }
    return 0;
}

void head_logits(dsv4_session *s, const float *x, int n, float *logits)
{
    dsv4_engine *e = s->e;
    const struct dsv4_config *c = &e->cfg;
    mhc_head(e, x, n, s->s.y);
    rmsnorm_rows(s->s.a, s->s.y, e->norm, n, c->dim, (float)c->norm_eps);
    linear_bf16(e, &e->head, s->s.a, n, logits);
}

