/* SPDX-License-Identifier: MIT */
/*
 * Self-consistency of the forward pass on a tiny checkpoint (argv[1]):
 * chunked prefill = token-by-token decode (bitwise logits at every
 * position, any chunk size and call split, any thread count), rollback then
 * regenerate = uninterrupted run (bitwise), the expert provider contract
 * (every lease released, one union request per layer and chunk, results
 * independent of the cache budget), input errors, and repeated
 * open/generate/close (leak-checked by LSan in the sanitizer build).
 * Agreement with the reference is tests/unit/test-goldens.c.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "engine.h"
#include "kernels.h"
#include "plan.h"
#include "util.h"

static const char *model_dir;

#define N_TOK 110

static int32_t tokens[N_TOK];
static int vocab;
static int n_tok = N_TOK;   /* fewer under the (slow) scalar kernels */

static dsv4_engine *open_engine(int threads, uint64_t cache, const struct dsv4_expert_provider *p)
{
    struct dsv4_err err = { "" };
    struct dsv4_engine_opts o = { .n_threads = threads, .expert_cache_bytes = cache,
                                  .experts = p };
    dsv4_engine *e = NULL;
    int rc = dsv4_engine_open(model_dir, &o, &e, &err);
    if (rc < 0)
        fail_msg("engine open: %s", err.msg);
    return e;
}

static dsv4_session *new_session(dsv4_engine *e, int chunk, int max_rollback)
{
    struct dsv4_err err = { "" };
    struct dsv4_session_opts o = { .max_ctx = 512, .chunk = chunk, .max_rollback = max_rollback };
    dsv4_session *s = NULL;
    if (dsv4_session_new(e, &o, &s, &err) < 0)
        fail_msg("session: %s", err.msg);
    return s;
}

static void forward(dsv4_session *s, const int32_t *t, int n, enum dsv4_logits_mode m, float *lg)
{
    struct dsv4_err err = { "" };
    int rc = dsv4_session_forward(s, t, n, m, lg, &err);
    if (rc < 0)
        fail_msg("forward: %s", err.msg);
}

/* Logits of every position of tokens[0..n) with the given chunk size, one call. */
static float *all_logits(dsv4_engine *e, int n, int chunk)
{
    float *lg = dsv4_xmalloc((size_t)n * vocab * sizeof(float));
    dsv4_session *s = new_session(e, chunk, 16);
    forward(s, tokens, n, DSV4_LOGITS_ALL, lg);
    dsv4_session_free(s);
    return lg;
}

static void test_chunked_equals_decode(void **state)
{
    (void)state;
    dsv4_engine *e = open_engine(1, 0, NULL);
    float *ref = all_logits(e, n_tok, 64);
    /* one token at a time through the decode path */
    dsv4_session *s = new_session(e, 64, 16);
    float *lg = dsv4_xmalloc((size_t)vocab * sizeof(float));
    for (int i = 0; i < n_tok; i++) {
        forward(s, tokens + i, 1, DSV4_LOGITS_LAST, lg);
        assert_memory_equal(lg, ref + (size_t)i * vocab, (size_t)vocab * sizeof(float));
    }
    dsv4_session_free(s);
    /* other chunk sizes and irregular call splits */
    static const int chunks[] = { 7, 110 };
    for (size_t c = 0; c < DSV4_ARRAY_SIZE(chunks); c++) {
        float *o = all_logits(e, n_tok, DSV4_MIN(chunks[c], n_tok));
        assert_memory_equal(o, ref, (size_t)n_tok * vocab * sizeof(float));
        free(o);
    }
    static const int split[] = { 5, 13, 64, 1, 27 };
    s = new_session(e, 16, 16);
    float *o = dsv4_xmalloc((size_t)n_tok * vocab * sizeof(float));
    int done = 0;
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(split) && done < n_tok; i++) {
        int m = DSV4_MIN(split[i], n_tok - done);
        forward(s, tokens + done, m, DSV4_LOGITS_ALL, o + (size_t)done * vocab);
        done += m;
    }
    assert_int_equal(done, n_tok);
    assert_int_equal(dsv4_session_pos(s), n_tok);
    assert_memory_equal(o, ref, (size_t)n_tok * vocab * sizeof(float));
    dsv4_session_free(s);
    free(o);
    free(lg);
    free(ref);
    dsv4_engine_free(e);
}

static void test_threads_bitwise(void **state)
{
    (void)state;
    dsv4_engine *e1 = open_engine(1, 0, NULL), *e2 = open_engine(2, 0, NULL);
    /* and with every row-wise job of two rows or more split over the pool (the tiny
     * model's rows are below the default threshold) */
    setenv("DSV4_ROWS_PAR_MIN", "1", 1);
    dsv4_engine *e3 = open_engine(3, 0, NULL);
    unsetenv("DSV4_ROWS_PAR_MIN");
    float *a = all_logits(e1, 70, 64), *b = all_logits(e2, 70, 64), *c = all_logits(e3, 70, 64);
    assert_memory_equal(a, b, (size_t)70 * vocab * sizeof(float));
    assert_memory_equal(a, c, (size_t)70 * vocab * sizeof(float));
    free(a);
    free(b);
    free(c);
    dsv4_engine_free(e1);
    dsv4_engine_free(e2);
    dsv4_engine_free(e3);
}

/*
 * Speculative cycle: from prefix P, feed `spec` draft tokens (k of which
 * are later "accepted"), roll back to P + k, feed the true continuation;
 * its logits must equal an uninterrupted run over prefix + accepted + true.
 */
static void check_rollback(dsv4_engine *e, int P, int spec, int k, int chunk)
{
    int tail = 12;
    int32_t seq[N_TOK + 64];
    memcpy(seq, tokens, sizeof(int32_t) * (size_t)P);
    int32_t draft[32];
    for (int i = 0; i < spec; i++)
        draft[i] = (int32_t)((tokens[(P + 3 * i) % N_TOK] * 7 + 11) % vocab);
    memcpy(seq + P, draft, sizeof(int32_t) * (size_t)k);
    for (int i = 0; i < tail; i++)
        seq[P + k + i] = tokens[(i * 5 + 1) % N_TOK];
    int n = P + k + tail;

    float *want = dsv4_xmalloc((size_t)n * vocab * sizeof(float));
    dsv4_session *s = new_session(e, chunk, 16);
    forward(s, seq, n, DSV4_LOGITS_ALL, want);
    dsv4_session_free(s);

    float *got = dsv4_xmalloc((size_t)spec * vocab * sizeof(float));
    s = new_session(e, chunk, 16);
    forward(s, seq, P, DSV4_LOGITS_NONE, NULL);
    dsv4_session_snapshot(s);
    forward(s, draft, spec, DSV4_LOGITS_ALL, got);
    /* the draft rows themselves match the uninterrupted run where they coincide */
    for (int i = 0; i < k; i++)
        assert_memory_equal(got + (size_t)i * vocab, want + (size_t)(P + i) * vocab,
                            (size_t)vocab * sizeof(float));
    struct dsv4_err err;
    assert_int_equal(dsv4_session_rollback(s, P + k, &err), 0);
    assert_int_equal(dsv4_session_pos(s), P + k);
    float *lg = dsv4_xmalloc((size_t)tail * vocab * sizeof(float));
    forward(s, seq + P + k, tail, DSV4_LOGITS_ALL, lg);
    assert_memory_equal(lg, want + (size_t)(P + k) * vocab, (size_t)tail * vocab * sizeof(float));
    dsv4_session_free(s);
    free(lg);
    free(got);
    free(want);
}

static void test_rollback(void **state)
{
    (void)state;
    dsv4_engine *e = open_engine(1, 0, NULL);
    /* prefixes around window (32) and compressor boundaries (4, 8, 16), full and partial
     * rejections, draft longer than one chunk */
    check_rollback(e, 29, 8, 3, 64);
    check_rollback(e, 60, 16, 0, 5);
    if (n_tok == N_TOK) {
        check_rollback(e, 95, 12, 5, 1);
        /* the whole max_rollback (16) undone after one wide step: the compressor ring keeps
         * only coff·ratio + max_rollback positions, and the reopened windows (32..47 of
         * ratio 16, 44..47 of ratio 4 with its overlap 40..43) must still be in it */
        check_rollback(e, 47, 16, 0, 64);
        check_rollback(e, 33, 16, 2, 64);
    }
    dsv4_engine_free(e);
}

static void test_rollback_limits(void **state)
{
    (void)state;
    dsv4_engine *e = open_engine(1, 0, NULL);
    dsv4_session *s = new_session(e, 8, 4);
    struct dsv4_err err;
    forward(s, tokens, 10, DSV4_LOGITS_NONE, NULL);
    dsv4_session_snapshot(s);
    forward(s, tokens + 10, 6, DSV4_LOGITS_NONE, NULL);
    assert_int_equal(dsv4_session_rollback(s, 11, &err), -ERANGE);  /* 5 > max_rollback 4 */
    assert_int_equal(dsv4_session_rollback(s, 9, &err), -ERANGE);   /* before snapshot */
    assert_int_equal(dsv4_session_rollback(s, 17, &err), -ERANGE);  /* in the future */
    assert_int_equal(dsv4_session_rollback(s, 12, &err), 0);
    assert_int_equal(dsv4_session_pos(s), 12);
    assert_int_equal(dsv4_session_rollback(s, 10, &err), 0);
    dsv4_session_reset(s);
    assert_int_equal(dsv4_session_pos(s), 0);
    assert_int_equal(dsv4_session_rollback(s, 0, &err), 0);
    /* a reset session computes what a fresh one does (stale rows are never read) */
    float *a = dsv4_xmalloc((size_t)40 * vocab * sizeof(float));
    forward(s, tokens + 50, 40, DSV4_LOGITS_ALL, a);
    float *b = dsv4_xmalloc((size_t)40 * vocab * sizeof(float));
    dsv4_session *f = new_session(e, 8, 4);
    forward(f, tokens + 50, 40, DSV4_LOGITS_ALL, b);
    assert_memory_equal(a, b, (size_t)40 * vocab * sizeof(float));
    free(a);
    free(b);
    dsv4_session_free(f);
    dsv4_session_free(s);
    dsv4_engine_free(e);
}

/* A provider wrapping the in-process cache that checks the lease contract. */
struct counting {
    struct dsv4_expert_provider inner;
    int acquires, releases, outstanding, n_layers;
    int last_layer, max_n, prefetches;
};

static int cnt_acquire(void *ctx, int layer, const int *ids, int n,
                       const struct dsv4_expert_weights **ret, struct dsv4_err *err)
{
    struct counting *c = ctx;
    for (int i = 1; i < n; i++)
        if (ids[i] <= ids[i - 1])
            fail_msg("expert ids not strictly ascending");
    c->acquires++;
    c->outstanding += n;
    c->max_n = DSV4_MAX(c->max_n, n);
    c->last_layer = layer;
    return c->inner.acquire(c->inner.ctx, layer, ids, n, ret, err);
}

static void cnt_release(void *ctx, int layer, const int *ids, int n)
{
    struct counting *c = ctx;
    c->releases++;
    c->outstanding -= n;
    c->inner.release(c->inner.ctx, layer, ids, n);
}

static void cnt_prefetch(void *ctx, int layer, const int *ids, int n)
{
    struct counting *c = ctx;
    if (layer < 0 || layer >= c->n_layers || n < 1)
        fail_msg("prefetch hint for layer %d, %d ids", layer, n);
    for (int i = 1; i < n; i++)
        if (ids[i] <= ids[i - 1])
            fail_msg("prefetch ids not strictly ascending");
    c->prefetches++;
}

static void test_expert_provider(void **state)
{
    (void)state;
    dsv4_engine *base = open_engine(1, 0, NULL);
    float *ref = all_logits(base, 100, 64);

    /* budget of one byte: every unleased expert is evicted at once */
    dsv4_engine *tight = open_engine(1, 1, NULL);
    float *lg = all_logits(tight, 100, 64);
    assert_memory_equal(lg, ref, (size_t)100 * vocab * sizeof(float));
    struct dsv4_expert_cache_stats st;
    assert_int_equal(dsv4_engine_expert_stats(tight, &st), 0);
    assert_true(st.evictions > 0);
    assert_int_equal(st.bytes_cached, 0);
    assert_true(st.misses > 0);
    free(lg);

    /* external provider: one union request per layer and chunk, all released */
    struct counting c = { .inner = { 0 } };
    dsv4_expert_cache *cache;
    struct dsv4_err err;
    assert_int_equal(dsv4_engine_expert_stats(base, &st), 0);
    assert_true(st.hits > 0);
    dsv4_engine *tmp = open_engine(1, 0, NULL);
    c.n_layers = dsv4_engine_config(tmp)->n_layers;
    dsv4_engine_free(tmp);
    /* the cache borrows a checkpoint: open one for the wrapper */
    dsv4_checkpoint *ck;
    assert_int_equal(dsv4_checkpoint_open(model_dir, &ck, &err), 0);
    assert_int_equal(dsv4_expert_cache_new(ck, dsv4_engine_config(base), 1 << 20, &cache, &err),
                     0);
    c.inner = dsv4_expert_cache_provider(cache);
    struct dsv4_expert_provider p = { &c, cnt_acquire, cnt_release, NULL };
    dsv4_engine *ext = open_engine(1, 0, &p);
    assert_int_equal(dsv4_engine_expert_stats(ext, &st), -ENOENT);
    lg = all_logits(ext, 100, 64);
    assert_memory_equal(lg, ref, (size_t)100 * vocab * sizeof(float));
    assert_int_equal(c.acquires, 2 * c.n_layers); /* 100 tokens = 2 chunks of ≤ 64 */
    assert_int_equal(c.releases, c.acquires);
    assert_int_equal(c.outstanding, 0);
    free(lg);
    dsv4_engine_free(ext);
    dsv4_expert_cache_free(cache);
    dsv4_checkpoint_free(ck);
    dsv4_engine_free(tight);
    dsv4_engine_free(base);
    free(ref);
}

/*
 * The memory plan's arithmetic agrees with what the engine allocates: session state and
 * scratch exactly, resident weights within the plan's figure; and a lease limit (a small
 * expert cache) changes neither the logits nor the release contract.
 */
static void test_memory_plan(void **state)
{
    (void)state;
    struct dsv4_err err = { "" };
    static const struct { int64_t ctx; int chunk, rollback, threads; } cases[] = {
        { 512, 64, 16, 1 }, { 100, 8, 4, 2 }, { 4096, 1, 1, 1 }, { 3, 300, 32, 2 },
    };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(cases); i++) {
        dsv4_engine *e = open_engine(cases[i].threads, 0, NULL);
        struct dsv4_session_opts o = { cases[i].ctx, cases[i].chunk, cases[i].rollback };
        dsv4_session *s = NULL;
        assert_int_equal(dsv4_session_new(e, &o, &s, &err), 0);
        uint64_t st, sc, pst, psc, unused;
        dsv4_session_bytes(s, &st, &sc);
        assert_int_equal(sc, 0);    /* sessions hold state only */
        dsv4_plan_session_bytes(dsv4_engine_config(e), cases[i].ctx, cases[i].chunk,
                                cases[i].rollback, cases[i].threads, &pst, &unused);
        assert_int_equal(st, pst);
        /* the engine's step scratch: steps of max(chunk, the default step rows) rows */
        dsv4_plan_session_bytes(dsv4_engine_config(e), cases[i].ctx,
                                cases[i].chunk > 64 ? cases[i].chunk : 64, cases[i].rollback,
                                cases[i].threads, &unused, &psc);
        assert_int_equal(dsv4_engine_scratch_bytes(e), psc);
        assert_true(st > 0 && psc > 0);
        dsv4_session_free(s);
        dsv4_engine_free(e);
    }
    dsv4_engine *e = open_engine(1, 0, NULL);
    struct dsv4_plan p;
    struct dsv4_plan_opts po = { .budget_bytes = 1ull << 30 };
    assert_int_equal(dsv4_plan_make(dsv4_engine_config(e), &po, &p, &err), 0);
    uint64_t res = dsv4_engine_resident_bytes(e), planned = p.dense + p.embed_head;
    if (res > planned + 4096 || res < planned - planned / 20)
        fail_msg("resident weights %llu bytes, plan %llu", (unsigned long long)res,
                 (unsigned long long)planned);
    /* the cache never outgrows the free space of /dev/shm */
    uint64_t want = p.n_slots;
    po.shm_avail = p.cache_header + p.min_slots * p.slot_bytes;
    assert_int_equal(dsv4_plan_make(dsv4_engine_config(e), &po, &p, &err), 0);
    assert_true(p.shm_limited && p.n_slots == p.min_slots && p.n_slots < want);
    po.shm_avail -= p.slot_bytes;
    assert_int_equal(dsv4_plan_make(dsv4_engine_config(e), &po, &p, &err), -ENOSPC);
    assert_non_null(strstr(err.msg, "/dev/shm"));
    po.shm_avail = 0;
    /* a budget below the minimum is refused, naming the minimum */
    assert_int_equal(dsv4_plan_make(dsv4_engine_config(e), &po, &p, &err), 0);
    po.budget_bytes = p.minimum - 1;
    assert_int_equal(dsv4_plan_make(dsv4_engine_config(e), &po, &p, &err), -ENOSPC);
    assert_non_null(strstr(err.msg, "below the minimum"));

    float *ref = all_logits(e, 100, 64);
    dsv4_checkpoint *ck;
    dsv4_expert_cache *cache;
    assert_int_equal(dsv4_checkpoint_open(model_dir, &ck, &err), 0);
    assert_int_equal(dsv4_expert_cache_new(ck, dsv4_engine_config(e), 1 << 20, &cache, &err), 0);
    struct counting c = { .inner = dsv4_expert_cache_provider(cache) };
    c.n_layers = dsv4_engine_config(e)->n_layers;
    struct dsv4_expert_provider prov = { &c, cnt_acquire, cnt_release, cnt_prefetch };
    struct dsv4_engine_opts eo = { .n_threads = 1, .experts = &prov, .max_lease = 2 };
    dsv4_engine *lim = NULL;
    assert_int_equal(dsv4_engine_open(model_dir, &eo, &lim, &err), 0);
    float *lg = all_logits(lim, 100, 64);
    assert_memory_equal(lg, ref, (size_t)100 * vocab * sizeof(float));
    assert_int_equal(c.max_n, 2);
    uint64_t asked, right;
    dsv4_engine_lookahead_stats(lim, &asked, &right);
    assert_int_equal(asked, 0);     /* 64-row chunks: no lookahead */
    /* decode: hash-layer hints and router lookahead, same logits */
    dsv4_session *d = new_session(lim, 1, 16);
    for (int i = 0; i < 24; i++) {
        forward(d, tokens + i, 1, DSV4_LOGITS_LAST, lg);
        assert_memory_equal(lg, ref + (size_t)i * vocab, (size_t)vocab * sizeof(float));
    }
    dsv4_session_free(d);
    dsv4_engine_lookahead_stats(lim, &asked, &right);
    const struct dsv4_config *cf = dsv4_engine_config(lim);
    int routed_after = cf->n_layers - DSV4_MAX(cf->n_hash_layers, 1);
    assert_int_equal(asked, (uint64_t)24 * routed_after * cf->n_activated_experts);
    assert_true(right <= asked);
    assert_int_equal(c.prefetches, 24 * (cf->n_hash_layers + routed_after));
    assert_int_equal(c.releases, c.acquires);
    assert_int_equal(c.outstanding, 0);
    free(lg);
    free(ref);
    dsv4_engine_free(lim);
    dsv4_expert_cache_free(cache);
    dsv4_checkpoint_free(ck);
    dsv4_engine_free(e);
}

/* DSpark capture: same bits in chunked prefill and decode, no effect on the logits. */
static void test_capture(void **state)
{
    (void)state;
    dsv4_engine *e = open_engine(1, 0, NULL);
    int L = dsv4_engine_config(e)->n_layers, d = dsv4_engine_config(e)->dim, n = 70;
    int layers[2] = { 0, L - 1 };
    float *ref = all_logits(e, n, 64);
    float *lg = dsv4_xmalloc((size_t)n * vocab * sizeof(float));
    float *ha = dsv4_xcalloc((size_t)n * 2 * d, sizeof(float));
    float *hb = dsv4_xcalloc((size_t)n * 2 * d, sizeof(float));
    struct dsv4_err err;
    dsv4_session *s = new_session(e, 64, 16);
    struct dsv4_capture cap = { layers, 2, ha };
    assert_int_equal(dsv4_session_forward_capture(s, tokens, n, DSV4_LOGITS_ALL, lg, &cap, &err),
                     0);
    assert_memory_equal(lg, ref, (size_t)n * vocab * sizeof(float));
    dsv4_session_free(s);
    s = new_session(e, 64, 16);
    for (int i = 0; i < n; i++) {
        struct dsv4_capture c1 = { layers, 2, hb + (size_t)i * 2 * d };
        assert_int_equal(dsv4_session_forward_capture(s, tokens + i, 1, DSV4_LOGITS_NONE, NULL,
                                                      &c1, &err), 0);
    }
    assert_memory_equal(ha, hb, (size_t)n * 2 * d * sizeof(float));
    int differ = 0;
    for (size_t i = 0; i < (size_t)n * 2 * d; i++) {
        assert_true(isfinite(ha[i]) && dsv4_bf16_round(ha[i]) == ha[i]);
        differ += i % (2 * (size_t)d) < (size_t)d && ha[i] != ha[i + d];
    }
    assert_true(differ > 0);
    int bad[2] = { L - 1, 0 };
    struct dsv4_capture cb = { bad, 2, hb };
    assert_int_equal(dsv4_session_forward_capture(s, tokens, 1, DSV4_LOGITS_NONE, NULL, &cb,
                                                  &err), -EINVAL);
    bad[0] = L;
    cb.n_layers = 1;
    assert_int_equal(dsv4_session_forward_capture(s, tokens, 1, DSV4_LOGITS_NONE, NULL, &cb,
                                                  &err), -EINVAL);
    assert_int_equal(dsv4_session_pos(s), n);
    dsv4_session_free(s);
    free(ha);
    free(hb);
    free(lg);
    free(ref);
    dsv4_engine_free(e);
}

static void test_errors(void **state)
{
    (void)state;
    struct dsv4_err err = { "" };
    dsv4_engine *e = NULL;
    assert_true(dsv4_engine_open("/nonexistent-dsv4-model", NULL, &e, &err) < 0);
    assert_null(e);
    assert_true(strlen(err.msg) > 0);

    e = open_engine(1, 0, NULL);
    dsv4_session *s = NULL;
    struct dsv4_session_opts o = { .max_ctx = 10, .chunk = 4 };
    assert_int_equal(dsv4_session_new(e, &o, &s, &err), 0);
    int32_t bad = vocab;
    assert_int_equal(dsv4_session_forward(s, &bad, 1, DSV4_LOGITS_NONE, NULL, &err), -EINVAL);
    bad = -1;
    assert_int_equal(dsv4_session_forward(s, &bad, 1, DSV4_LOGITS_NONE, NULL, &err), -EINVAL);
    assert_int_equal(dsv4_session_pos(s), 0);
    assert_int_equal(dsv4_session_forward(s, tokens, 11, DSV4_LOGITS_NONE, NULL, &err), -ERANGE);
    assert_int_equal(dsv4_session_forward(s, tokens, 10, DSV4_LOGITS_NONE, NULL, &err), 0);
    assert_int_equal(dsv4_session_forward(s, tokens, 1, DSV4_LOGITS_NONE, NULL, &err), -ERANGE);
    dsv4_session_free(s);
    o.chunk = -1;
    assert_int_equal(dsv4_session_new(e, &o, &s, &err), -EINVAL);
    dsv4_engine_free(e);
}

static void test_reopen(void **state)
{
    (void)state;
    float *lg = dsv4_xmalloc((size_t)vocab * sizeof(float));
    int32_t first = -1;
    for (int round = 0; round < 3; round++) {
        dsv4_engine *e = open_engine(1 + round % 2, 0, NULL);
        for (int k = 0; k < 2; k++) {
            dsv4_session *s = new_session(e, 8, 4);
            forward(s, tokens, 12, DSV4_LOGITS_LAST, lg);
            int32_t t = dsv4_argmax(lg, vocab);
            for (int i = 0; i < 4; i++) {
                forward(s, &t, 1, DSV4_LOGITS_LAST, lg);
                t = dsv4_argmax(lg, vocab);
            }
            if (first < 0)
                first = t;
            assert_int_equal(t, first);
            dsv4_session_free(s);
        }
        dsv4_engine_free(e);
    }
    free(lg);
}

static void test_helpers(void **state)
{
    (void)state;
    float l[4] = { 1.0f, 3.0f, 3.0f, -2.0f };
    assert_int_equal(dsv4_argmax(l, 4), 1); /* tie: lower id */
    double lp = dsv4_log_softmax_at(l, 4, 3);
    double z = exp(1.0) + 2 * exp(3.0) + exp(-2.0);
    assert_true(fabs(lp - (-2.0 - log(z))) < 1e-12);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test-engine MODEL_DIR\n");
        return 2;
    }
    model_dir = argv[1];
    /* The scalar kernels are the definition, not the fast path: a shorter run keeps the
     * suite fast while still checking every property on them. */
    bool quick = dsv4_kernel_ops()->isa == DSV4_ISA_SCALAR;
    if (quick)
        n_tok = 70;
    fprintf(stdout, "# kernels: %s%s\n", dsv4_kernel_ops()->name, quick ? " (quick)" : "");
    dsv4_engine *e = open_engine(1, 0, NULL);
    vocab = dsv4_engine_config(e)->vocab_size;
    dsv4_engine_free(e);
    uint32_t x = 12345;
    for (int i = 0; i < N_TOK; i++) {
        x = x * 1103515245u + 12345u;
        tokens[i] = (int32_t)(2 + (x >> 8) % (uint32_t)(vocab - 2));
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_helpers),
        cmocka_unit_test(test_chunked_equals_decode),
        cmocka_unit_test(test_threads_bitwise),
        cmocka_unit_test(test_rollback),
        cmocka_unit_test(test_rollback_limits),
        cmocka_unit_test(test_expert_provider),
        cmocka_unit_test(test_memory_plan),
        cmocka_unit_test(test_capture),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_reopen),
    };
    const struct CMUnitTest quick_tests[] = {
        cmocka_unit_test(test_chunked_equals_decode),
        cmocka_unit_test(test_rollback),
    };
    if (quick)
        return cmocka_run_group_tests(quick_tests, NULL, NULL);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
