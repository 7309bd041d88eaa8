/* SPDX-License-Identifier: MIT */
/*
 * The prefix cache over one sequence (prefix.h). A stored tail is
 * [u64 session tail bytes][u64 drafter taps bytes][session tail][taps].
 */
#include "prefix.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "model_id.h"
#include "util.h"

#define TOPIC "prefix-cache"

static int gcd(int a, int b)
{
    return b ? gcd(b, a % b) : a;
}

int dsv4_prefix_cache_open(const char *model_dir, const struct dsv4_config *c,
                           uint64_t ram_bytes, uint64_t disk_bytes, const char *dir,
                           dsv4_pcache **ret, struct dsv4_err *err)
{
    uint8_t id[DSV4_SHA256_LEN];
    int rc = dsv4_model_id(model_dir, NULL, id, err);
    if (rc < 0)
        return rc;
    int lcm = 1;
    for (int l = 0; l < c->n_layers; l++)
        if (c->compress_ratios[l] > 0)
            lcm = lcm / gcd(lcm, c->compress_ratios[l]) * c->compress_ratios[l];
    struct dsv4_pcache_opts o = { .model = id, .ratio_lcm = lcm, .ram_bytes = ram_bytes,
                                  .disk_bytes = disk_bytes, .dir = dir };
    return dsv4_pcache_open(&o, ret, err);
}

static bool has_drafter(const struct dsv4_prefix_seq *q)
{
    return q->sp && dsv4_spec_drafter(q->sp);
}

void dsv4_prefix_seq_init(struct dsv4_prefix_seq *q, dsv4_pcache *pc, dsv4_session *s,
                          dsv4_spec *sp)
{
    memset(q, 0, sizeof(*q));
    q->pc = pc;
    q->s = s;
    q->sp = sp;
    dsv4_pcache_root(pc, has_drafter(q) ? 1 : 0, q->root);
    memcpy(q->key, q->root, DSV4_SHA256_LEN);
}

int64_t dsv4_prefix_next_boundary(const struct dsv4_prefix_seq *q, int64_t pos)
{
    int B = dsv4_pcache_block_tokens(q->pc);
    return (pos / B + 1) * B;
}

/* Import a block's tail (its session part, then the taps). */
static int import_tail(struct dsv4_prefix_seq *q, const struct dsv4_pcache_block *b,
                       struct dsv4_err *err)
{
    uint64_t n[2];
    if (b->tail_len < sizeof(n))
        return dsv4_errf(err, -EBADMSG, "prefix cache: short tail");
    memcpy(n, b->tail, sizeof(n));
    if (n[0] > b->tail_len - sizeof(n) || n[1] != b->tail_len - sizeof(n) - n[0])
        return dsv4_errf(err, -EBADMSG, "prefix cache: tail sections do not add up");
    const char *p = (const char *)b->tail + sizeof(n);
    int rc = dsv4_session_import_tail(q->s, p, (size_t)n[0], err);
    if (rc == 0 && has_drafter(q))
        rc = dsv4_spec_import_tail(q->sp, p + n[0], (size_t)n[1], err);
    return rc;
}

/* Block i as read: where and what it must be. */
static bool block_is(const struct dsv4_pcache_block *b, const uint8_t *parent, int64_t p0,
                     int B, const int32_t *tokens)
{
    return b->p0 == p0 && b->p1 == p0 + B && memcmp(b->parent, parent, DSV4_SHA256_LEN) == 0 &&
           memcmp(b->tokens, tokens + p0, (size_t)B * sizeof(int32_t)) == 0;
}

int dsv4_prefix_restore(struct dsv4_prefix_seq *q, const int32_t *tokens, int64_t n,
                        int64_t *restored, struct dsv4_err *err)
{
    *restored = 0;
    q->restored = 0;
    q->blocks = 0;
    q->bytes = q->ns = 0;
    if (dsv4_session_pos(q->s) != 0)
        return dsv4_errf(err, -EINVAL, "prefix cache: restore into a session at %lld",
                         (long long)dsv4_session_pos(q->s));
    int B = dsv4_pcache_block_tokens(q->pc);
    int64_t max = n - 1;
    if (max < 1)
        return 0;
    uint64_t t0 = dsv4_now_ns();
    int want = (int)(max / B);
    uint8_t (*keys)[DSV4_SHA256_LEN] = dsv4_xmalloc((size_t)DSV4_MAX(want, 1) * DSV4_SHA256_LEN);
    int k = want > 0 ? dsv4_pcache_lookup(q->pc, q->root, tokens, max, want, keys) : 0;
    /* a partial block a sequence's end left after the k complete ones: the longest held */
    const int64_t ps = (int64_t)k * B;
    const uint8_t *pparent = k ? keys[k - 1] : q->root;
    uint8_t pkey[DSV4_SHA256_LEN];
    int pl = 0;
    for (int64_t L = DSV4_MIN((int64_t)B - 1, max - ps); L >= 1 && !pl; L--) {
        dsv4_pcache_chain(pparent, tokens + ps, (int)L, pkey);
        if (dsv4_pcache_has(q->pc, pkey))
            pl = (int)L;
    }
    int done = 0;       /* blocks whose rows are in */
    bool tail = false, partial = false;
    struct dsv4_err e2 = { "" };
    for (int i = 0; i < k; i++) {
        struct dsv4_pcache_block b;
        bool last = i == k - 1 && !pl;    /* with a partial block, its tail is the one */
        const uint8_t *parent = i ? keys[i - 1] : q->root;
        if (dsv4_pcache_get(q->pc, keys[i], last, &b, &e2) < 0)
            break;
        int rc = block_is(&b, parent, (int64_t)i * B, B, tokens) ? 0 : -EBADMSG;
        if (rc == 0)
            rc = dsv4_session_import_rows(q->s, b.p0, b.p1, b.rows, (size_t)b.rows_len, &e2);
        if (rc == 0) {
            done++;
            q->bytes += b.rows_len;
        }
        if (rc == 0 && last) {
            tail = import_tail(q, &b, &e2) == 0;
            q->bytes += b.tail_len;
        }
        dsv4_pcache_put_back(q->pc, &b);
        if (rc < 0)
            break;
    }
    if (pl && done == k) {
        struct dsv4_pcache_block b;
        if (dsv4_pcache_get(q->pc, pkey, true, &b, &e2) == 0) {
            int rc = b.p0 == ps && b.p1 == ps + pl &&
                             memcmp(b.parent, pparent, DSV4_SHA256_LEN) == 0 &&
                             memcmp(b.tokens, tokens + ps, (size_t)pl * sizeof(int32_t)) == 0
                         ? 0
                         : -EBADMSG;
            if (rc == 0)
                rc = dsv4_session_import_rows(q->s, b.p0, b.p1, b.rows, (size_t)b.rows_len,
                                              &e2);
            if (rc == 0)
                rc = import_tail(q, &b, &e2);
            if (rc == 0) {
                tail = partial = true;
                q->bytes += b.rows_len + b.tail_len;
            }
            dsv4_pcache_put_back(q->pc, &b);
        }
    }
    if (done > 0 && !tail) {
        /* a later block failed: end on the last good one's tail */
        struct dsv4_pcache_block b;
        if (dsv4_pcache_get(q->pc, keys[done - 1], true, &b, &e2) == 0) {
            tail = import_tail(q, &b, &e2) == 0;
            q->bytes += b.tail_len;
            dsv4_pcache_put_back(q->pc, &b);
        }
    }
    if (done > 0 && !tail) {
        dsv4_log_warn(TOPIC, "restore of %d block(s) abandoned: %s", done, e2.msg);
        dsv4_session_reset(q->s);
        if (has_drafter(q))
            dsv4_drafter_reset(dsv4_spec_drafter(q->sp));
        done = 0;
    }
    if (done > 0 || partial) {
        if (done > 0)
            memcpy(q->key, keys[done - 1], DSV4_SHA256_LEN);
        q->keyed = (int64_t)done * B;       /* the chain of complete blocks goes on from here */
        q->restored = *restored = q->keyed + (partial ? pl : 0);
        q->blocks = done + (partial ? 1 : 0);
        dsv4_pcache_count_hit(q->pc, q->restored);
    }
    q->ns = dsv4_now_ns() - t0;
    free(keys);
    return 0;
}

/* Export block [p0, P) of the sequence (a complete one, or a sequence's partial last one) with
 * the state at P, and put it in the cache. */
static int store_block(struct dsv4_prefix_seq *q, const uint8_t *parent, const uint8_t *key,
                       const int32_t *tokens, int64_t p0, int64_t P, struct dsv4_err *err)
{
    const int64_t B = P - p0;
    uint64_t nr = dsv4_session_rows_bytes(q->s, P - B, P);
    uint64_t n[2] = { dsv4_session_tail_bytes(q->s, P),
                      has_drafter(q) ? dsv4_spec_tail_bytes(q->sp, P) : 0 };
    char *rows = dsv4_xmalloc(nr + 1), *tail = dsv4_xmalloc(sizeof(n) + n[0] + n[1]);
    memcpy(tail, n, sizeof(n));
    int rc = dsv4_session_export_rows(q->s, P - B, P, rows, (size_t)nr, err);
    if (rc == 0)
        rc = dsv4_session_export_tail(q->s, P, tail + sizeof(n), (size_t)n[0], err);
    if (rc == 0 && n[1])
        rc = dsv4_spec_export_tail(q->sp, P, tail + sizeof(n) + n[0], (size_t)n[1], err);
    if (rc == 0) {
        struct dsv4_pcache_block b = { .p0 = P - B, .p1 = P, .tokens = tokens + P - B,
                                       .rows = rows, .rows_len = nr, .tail = tail,
                                       .tail_len = sizeof(n) + n[0] + n[1] };
        memcpy(b.key, key, DSV4_SHA256_LEN);
        memcpy(b.parent, parent, DSV4_SHA256_LEN);
        rc = dsv4_pcache_put(q->pc, &b, err);
    }
    free(rows);
    free(tail);
    return rc;
}

int dsv4_prefix_save(struct dsv4_prefix_seq *q, const int32_t *tokens, int64_t n,
                     struct dsv4_err *err)
{
    int B = dsv4_pcache_block_tokens(q->pc);
    /* positions past n are not committed yet (a verify step's drafts): blocks end by then */
    int64_t pos = DSV4_MIN(dsv4_session_pos(q->s), n);
    (void)err;
    while (q->keyed + B <= pos) {
        int64_t P = q->keyed + B;
        uint8_t key[DSV4_SHA256_LEN];
        dsv4_pcache_chain(q->key, tokens + q->keyed, B, key);
        if (!dsv4_pcache_has(q->pc, key)) {
            struct dsv4_err e2 = { "" };
            /* -ERANGE: the session moved on too far for this block's tail (a gap, logged) */
            if (store_block(q, q->key, key, tokens, P - B, P, &e2) < 0)
                dsv4_log_debug(TOPIC, "block at %lld not stored: %s", (long long)P, e2.msg);
        }
        memcpy(q->key, key, DSV4_SHA256_LEN);
        q->keyed = P;
    }
    return 0;
}

int dsv4_prefix_save_end(struct dsv4_prefix_seq *q, const int32_t *tokens, int64_t n,
                         struct dsv4_err *err)
{
    dsv4_prefix_save(q, tokens, n, err);
    int B = dsv4_pcache_block_tokens(q->pc);
    int64_t pos = DSV4_MIN(dsv4_session_pos(q->s), n), L = pos - q->keyed;
    if (L < 1 || L >= B)
        return 0;
    uint8_t key[DSV4_SHA256_LEN];
    dsv4_pcache_chain(q->key, tokens + q->keyed, (int)L, key);
    if (!dsv4_pcache_has(q->pc, key)) {
        struct dsv4_err e2 = { "" };
        if (store_block(q, q->key, key, tokens, q->keyed, pos, &e2) < 0)
            dsv4_log_debug(TOPIC, "partial block [%lld, %lld) not stored: %s",
                           (long long)q->keyed, (long long)pos, e2.msg);
    }
    return 0;
}
