/* SPDX-License-Identifier: MIT */
/*
 * Session state export and import (engine.h, "Session state export"): the prefix cache's view
 * of a session. The state at position P is a pure function of the positions before P
 * (docs/ARCHITECTURE.md "Session state and rollback"), and splits in two:
 *   rows: per compressed layer the rows of windows completed before P (CSA: and the indexer
 *         keys), addressed by window number, never rewritten; the rows of [p0, p1) are the
 *         windows floor(p0/r) .. floor(p1/r)-1;
 *   tail: per layer the raw KV of the window-1 positions before P (the next query sees
 *         t-window+1.. t), and per compressed layer the compressor (CSA: indexer) inputs of
 *         the windows still open at P (the overlapping CSA compressor also pools the previous
 *         window's: coff·r - r positions more).
 * Both are the session's own stored bytes (packed KV rows and indexer keys, fp32 compressor
 * inputs: common/session_layout.h) in a fixed order derived from the config alone, so a
 * buffer exported by one session imports into any session of the same model whatever its
 * chunk, max_ctx or max_rollback, and the restored state is bitwise the prefilled one.
 */
#include <errno.h>
#include <string.h>

#include "internal.h"
#include "util.h"

/* The overlap factor of the compressors, as session_layout.c sizes them. */
static int coff_of(int ratio)
{
    return ratio == 4 ? 2 : 1;
}

/* First position whose compressor inputs the windows open at P still read. */
static int64_t cin_start(int ratio, int64_t P)
{
    int64_t w = P / ratio - (coff_of(ratio) - 1);
    return w < 0 ? 0 : w * ratio;
}

static int64_t ring_start(const struct dsv4_config *c, int64_t P)
{
    int64_t p = P - (c->window - 1);
    return p < 0 ? 0 : p;
}

/* Walk the rows of [p0, p1): copy between the session and buf (to_buf) or only count. */
static uint64_t walk_rows(dsv4_session *s, int64_t p0, int64_t p1, uint8_t *buf, bool to_buf)
{
    const struct dsv4_config *c = &s->e->cfg;
    uint64_t n = 0;
    for (int l = 0; l < c->n_layers; l++) {
        enum dsv4_attn_kind k = c->layer_kind[l];
        if (k == DSV4_ATTN_WINDOW)
            continue;
        int r = c->compress_ratios[l];
        int64_t w0 = p0 / r, w1 = p1 / r;
        struct layer_state *st = &s->ls[l];
        for (int pass = 0; pass < (k == DSV4_ATTN_CSA ? 2 : 1); pass++) {
            size_t rb = pass ? dsv4_ikey_row_bytes(c) : dsv4_kv_row_bytes(c);
            uint8_t *src = pass ? st->irows : st->rows;
            size_t cnt = (size_t)(w1 - w0) * rb;
            if (buf && to_buf)
                memcpy(buf + n, src + (size_t)w0 * rb, cnt);
            else if (buf)
                memcpy(src + (size_t)w0 * rb, buf + n, cnt);
            n += cnt;
        }
    }
    return n;
}

/* Copy one position range [a, b) of a position-addressed ring with `cap` slots of `w` bytes. */
static uint64_t ring_copy(void *ring, int cap, size_t w, int64_t a, int64_t b, uint8_t *buf,
                          bool to_buf)
{
    for (int64_t p = a; buf && p < b; p++) {
        uint8_t *slot = (uint8_t *)ring + (size_t)(p % cap) * w;
        uint8_t *o = buf + (size_t)(p - a) * w;
        if (to_buf)
            memcpy(o, slot, w);
        else
            memcpy(slot, o, w);
    }
    return (uint64_t)(b - a) * w;
}

static uint64_t walk_tail(dsv4_session *s, int64_t P, uint8_t *buf, bool to_buf)
{
    const struct dsv4_config *c = &s->e->cfg;
    uint64_t n = 0;
    size_t f = sizeof(float);
    for (int l = 0; l < c->n_layers; l++) {
        struct layer_state *st = &s->ls[l];
        n += ring_copy(st->ring, s->ring_cap, (size_t)dsv4_kv_row_bytes(c), ring_start(c, P), P,
                       buf ? buf + n : NULL, to_buf);
        enum dsv4_attn_kind k = c->layer_kind[l];
        if (k == DSV4_ATTN_WINDOW)
            continue;
        int r = c->compress_ratios[l], coff = coff_of(r);
        int64_t a = cin_start(r, P);
        n += ring_copy(st->cin, st->cin_cap, (size_t)2 * coff * c->head_dim * f, a, P,
                       buf ? buf + n : NULL, to_buf);
        if (k == DSV4_ATTN_CSA)
            n += ring_copy(st->icin, st->cin_cap, (size_t)2 * coff * c->index_head_dim * f, a, P,
                           buf ? buf + n : NULL, to_buf);
    }
    return n;
}

uint64_t dsv4_session_rows_bytes(const dsv4_session *s, int64_t p0, int64_t p1)
{
    return p0 < 0 || p1 < p0 ? 0 : walk_rows((dsv4_session *)s, p0, p1, NULL, false);
}

uint64_t dsv4_session_tail_bytes(const dsv4_session *s, int64_t P)
{
    return P < 0 ? 0 : walk_tail((dsv4_session *)s, P, NULL, false);
}

int dsv4_session_export_rows(const dsv4_session *s, int64_t p0, int64_t p1, void *buf,
                             size_t len, struct dsv4_err *err)
{
    if (p0 < 0 || p1 < p0 || p1 > s->pos)
        return dsv4_errf(err, -ERANGE, "session export: rows of [%lld, %lld) at position %lld",
                         (long long)p0, (long long)p1, (long long)s->pos);
    uint64_t want = dsv4_session_rows_bytes(s, p0, p1);
    if (len != want)
        return dsv4_errf(err, -EINVAL, "session export: rows of [%lld, %lld) take %llu bytes, "
                         "not %zu", (long long)p0, (long long)p1, (unsigned long long)want, len);
    walk_rows((dsv4_session *)s, p0, p1, buf, true);
    return 0;
}

int dsv4_session_export_tail(const dsv4_session *s, int64_t P, void *buf, size_t len,
                             struct dsv4_err *err)
{
    /* the rings keep slack = ring_cap - window positions beyond what P still reads */
    int slack = s->ring_cap - s->e->cfg.window;
    if (P < 0 || P > s->pos || s->pos - P > slack)
        return dsv4_errf(err, -ERANGE, "session export: tail at %lld from position %lld "
                         "(at most %d back)", (long long)P, (long long)s->pos, slack);
    uint64_t want = dsv4_session_tail_bytes(s, P);
    if (len != want)
        return dsv4_errf(err, -EINVAL, "session export: tail at %lld takes %llu bytes, not %zu",
                         (long long)P, (unsigned long long)want, len);
    walk_tail((dsv4_session *)s, P, buf, true);
    return 0;
}

int dsv4_session_import_rows(dsv4_session *s, int64_t p0, int64_t p1, const void *buf,
                             size_t len, struct dsv4_err *err)
{
    if (p0 != s->pos || p1 < p0 || p1 > s->max_ctx)
        return dsv4_errf(err, -ERANGE, "session import: rows of [%lld, %lld) at position %lld "
                         "(max_ctx %lld)", (long long)p0, (long long)p1, (long long)s->pos,
                         (long long)s->max_ctx);
    uint64_t want = dsv4_session_rows_bytes(s, p0, p1);
    if (len != want)
        return dsv4_errf(err, -EINVAL, "session import: rows of [%lld, %lld) take %llu bytes, "
                         "not %zu", (long long)p0, (long long)p1, (unsigned long long)want, len);
    walk_rows(s, p0, p1, (uint8_t *)(uintptr_t)buf, false);
    s->pos = p1;
    return 0;
}

int dsv4_session_import_tail(dsv4_session *s, const void *buf, size_t len,
                             struct dsv4_err *err)
{
    uint64_t want = dsv4_session_tail_bytes(s, s->pos);
    if (len != want)
        return dsv4_errf(err, -EINVAL, "session import: tail at %lld takes %llu bytes, not %zu",
                         (long long)s->pos, (unsigned long long)want, len);
    walk_tail(s, s->pos, (uint8_t *)(uintptr_t)buf, false);
    s->snap = s->pos;
    return 0;
}

uint64_t dsv4_session_export_bytes(const dsv4_session *s, int64_t p0, int64_t p1)
{
    return dsv4_session_rows_bytes(s, p0, p1) + dsv4_session_tail_bytes(s, p1);
}

int dsv4_session_export(const dsv4_session *s, int64_t p0, void *buf, size_t len,
                        struct dsv4_err *err)
{
    uint64_t rows = dsv4_session_rows_bytes(s, p0, s->pos);
    if (len != dsv4_session_export_bytes(s, p0, s->pos))
        return dsv4_errf(err, -EINVAL, "session export: [%lld, %lld) takes %llu bytes, not %zu",
                         (long long)p0, (long long)s->pos,
                         (unsigned long long)dsv4_session_export_bytes(s, p0, s->pos), len);
    int rc = dsv4_session_export_rows(s, p0, s->pos, buf, (size_t)rows, err);
    return rc < 0 ? rc
                  : dsv4_session_export_tail(s, s->pos, (char *)buf + rows, len - (size_t)rows,
                                             err);
}

int dsv4_session_import(dsv4_session *s, int64_t p0, int64_t p1, const void *buf, size_t len,
                        struct dsv4_err *err)
{
    uint64_t rows = dsv4_session_rows_bytes(s, p0, p1);
    if (p1 < p0 || len != dsv4_session_export_bytes(s, p0, p1))
        return dsv4_errf(err, -EINVAL, "session import: [%lld, %lld) takes %llu bytes, not %zu",
                         (long long)p0, (long long)p1,
                         (unsigned long long)dsv4_session_export_bytes(s, p0, p1), len);
    int rc = dsv4_session_import_rows(s, p0, p1, buf, (size_t)rows, err);
    return rc < 0 ? rc
                  : dsv4_session_import_tail(s, (const char *)buf + rows, len - (size_t)rows,
                                             err);
}
