/* SPDX-License-Identifier: MIT */
/*
 * Session state export/import (daemons/compute/session_io.c, spec_io.c) is exact: a session
 * restored from an exported prefix [0, P) continues with bitwise the logits of a full prefill,
 * for P on block boundaries (multiples of every compression ratio) and inside CSA and HCA
 * windows, restored whole or block by block (rows of each block, the tail of the last), into a
 * session with other chunk / max_ctx / max_rollback; through the prefix cache (prefix.c) from
 * RAM and from disk after a reopen, whole and partial prefixes; with a drafter, the drafts and
 * the speculative continuation after a restore equal those after a full prefill.
 * Usage: test-session-io MODEL_DIR
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "prefix.h"
#include "sampling.h"
#include "speculate.h"
#include "util.h"

#define N_TOK 300

static const char *model;
static dsv4_engine *eng;
static int V;
static int32_t toks[N_TOK];
static float *ref;      /* [N_TOK][V] logits of one full prefill */

static dsv4_session *new_session(int64_t ctx, int chunk, int rollback)
{
    struct dsv4_err err = { "" };
    struct dsv4_session_opts o = { .max_ctx = ctx, .chunk = chunk, .max_rollback = rollback };
    dsv4_session *s = NULL;
    if (dsv4_session_new(eng, &o, &s, &err) < 0)
        fail_msg("session: %s", err.msg);
    return s;
}

static void forward(dsv4_session *s, int64_t from, int64_t to, float *logits)
{
    struct dsv4_err err = { "" };
    if (to > from && dsv4_session_forward(s, toks + from, (int)(to - from),
                                          logits ? DSV4_LOGITS_ALL : DSV4_LOGITS_NONE, logits,
                                          &err) < 0)
        fail_msg("forward [%lld, %lld): %s", (long long)from, (long long)to, err.msg);
}

/* Continue a session restored at P to N_TOK and compare every row with the full prefill. */
static void check_continuation(dsv4_session *s, int64_t P, const char *what)
{
    assert_int_equal(dsv4_session_pos(s), P);
    float *lg = dsv4_xmalloc((size_t)(N_TOK - P) * V * sizeof(float));
    forward(s, P, N_TOK, lg);
    for (int64_t t = P; t < N_TOK; t++)
        if (memcmp(lg + (size_t)(t - P) * V, ref + (size_t)t * V, (size_t)V * sizeof(float)))
            fail_msg("%s: restored at %lld, logits of position %lld differ from the full "
                     "prefill", what, (long long)P, (long long)t);
    free(lg);
}

/* Prefix lengths: block boundaries (multiples of 128 and of every ratio), inside windows of
 * every ratio (4, 8, 16 in the fixtures), before the first window completes, tiny. */
static const int64_t cuts[] = { 1, 3, 16, 37, 128, 133, 250, 256, 299 };

static void test_restore_whole(void **state)
{
    (void)state;
    struct dsv4_err err = { "" };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(cuts); i++) {
        int64_t P = cuts[i];
        dsv4_session *a = new_session(N_TOK, 16, 0);
        forward(a, 0, P, NULL);
        uint64_t n = dsv4_session_export_bytes(a, 0, P);
        void *buf = dsv4_xmalloc(n);
        if (dsv4_session_export(a, 0, buf, n, &err) < 0)
            fail_msg("export at %lld: %s", (long long)P, err.msg);
        /* another chunk, context and rollback: other ring capacities */
        dsv4_session *b = new_session(N_TOK + 40, 48, 5);
        if (dsv4_session_import(b, 0, P, buf, n, &err) < 0)
            fail_msg("import at %lld: %s", (long long)P, err.msg);
        check_continuation(b, P, "whole");
        free(buf);
        dsv4_session_free(a);
        dsv4_session_free(b);
    }
}

struct blk {
    int64_t p0, p1;
    void *rows, *tail;
    uint64_t nrows, ntail;
};

/* Export block [p0, p1) from a session whose position is p1 + late (late ≤ slack). */
static void export_block(dsv4_session *s, struct blk *b, int64_t p0, int64_t p1)
{
    struct dsv4_err err = { "" };
    b->p0 = p0;
    b->p1 = p1;
    b->nrows = dsv4_session_rows_bytes(s, p0, p1);
    b->ntail = dsv4_session_tail_bytes(s, p1);
    b->rows = dsv4_xmalloc(b->nrows + 1);
    b->tail = dsv4_xmalloc(b->ntail + 1);
    if (dsv4_session_export_rows(s, p0, p1, b->rows, b->nrows, &err) < 0 ||
        dsv4_session_export_tail(s, p1, b->tail, b->ntail, &err) < 0)
        fail_msg("export block [%lld, %lld): %s", (long long)p0, (long long)p1, err.msg);
}

static void test_restore_blocks(void **state)
{
    (void)state;
    struct dsv4_err err = { "" };
    struct blk b[2];
    /* chunk 16: the tails are exported 7 positions late, as after a decode step crossed them */
    dsv4_session *a = new_session(N_TOK, 16, 0);
    forward(a, 0, 135, NULL);
    export_block(a, &b[0], 0, 128);
    forward(a, 135, 256, NULL);
    export_block(a, &b[1], 128, 256);
    for (int k = 1; k <= 2; k++) {
        dsv4_session *s = new_session(N_TOK, 64, 0);
        for (int i = 0; i < k; i++)
            if (dsv4_session_import_rows(s, b[i].p0, b[i].p1, b[i].rows, b[i].nrows, &err) < 0)
                fail_msg("import rows %d: %s", i, err.msg);
        if (dsv4_session_import_tail(s, b[k - 1].tail, b[k - 1].ntail, &err) < 0)
            fail_msg("import tail: %s", err.msg);
        check_continuation(s, b[k - 1].p1, "blocks");
        dsv4_session_free(s);
    }
    /* a restored session can be rolled back to its restore point, not before */
    dsv4_session *s = new_session(N_TOK, 64, 0);
    assert_int_equal(dsv4_session_import_rows(s, 0, 128, b[0].rows, b[0].nrows, &err), 0);
    assert_int_equal(dsv4_session_import_tail(s, b[0].tail, b[0].ntail, &err), 0);
    forward(s, 128, 131, NULL);
    assert_int_equal(dsv4_session_rollback(s, 127, &err), -ERANGE);
    assert_int_equal(dsv4_session_rollback(s, 128, &err), 0);
    check_continuation(s, 128, "rolled back");
    dsv4_session_free(s);
    for (int i = 0; i < 2; i++) {
        free(b[i].rows);
        free(b[i].tail);
    }
    dsv4_session_free(a);
}

static void test_refusals(void **state)
{
    (void)state;
    struct dsv4_err err = { "" };
    dsv4_session *a = new_session(N_TOK, 16, 0), *b = new_session(64, 16, 0);
    forward(a, 0, 128, NULL);
    uint64_t nr = dsv4_session_rows_bytes(a, 0, 128), nt = dsv4_session_tail_bytes(a, 128);
    char *buf = dsv4_xmalloc(nr + nt + 8);
    assert_true(nr > 0 && nt > 0);
    assert_int_equal(dsv4_session_export_rows(a, 0, 129, buf, nr, &err), -ERANGE);
    assert_int_equal(dsv4_session_export_rows(a, 0, 128, buf, nr - 4, &err), -EINVAL);
    assert_int_equal(dsv4_session_export_tail(a, 128, buf, nt + 4, &err), -EINVAL);
    /* the rings keep only slack = 16 positions beyond what the tail at P reads */
    assert_int_equal(dsv4_session_export_tail(a, 111, buf, dsv4_session_tail_bytes(a, 111),
                                              &err), -ERANGE);
    assert_int_equal(dsv4_session_export_tail(a, 112, buf, dsv4_session_tail_bytes(a, 112),
                                              &err), 0);
    assert_int_equal(dsv4_session_export_rows(a, 0, 128, buf, nr, &err), 0);
    /* rows only at the session's position; not past max_ctx; exact sizes */
    assert_int_equal(dsv4_session_import_rows(b, 16, 128, buf, nr, &err), -ERANGE);
    assert_int_equal(dsv4_session_import_rows(b, 0, 128, buf, nr, &err), -ERANGE);
    dsv4_session *c = new_session(N_TOK, 16, 0);
    assert_int_equal(dsv4_session_import_rows(c, 0, 128, buf, nr + 4, &err), -EINVAL);
    assert_int_equal(dsv4_session_pos(c), 0);
    assert_int_equal(dsv4_session_import(c, 0, 128, buf, nr + nt - 4, &err), -EINVAL);
    assert_int_equal(dsv4_session_pos(c), 0);
    free(buf);
    dsv4_session_free(a);
    dsv4_session_free(b);
    dsv4_session_free(c);
}

/* ---- the prefix cache over a sequence (daemons/compute/prefix.c) ---- */

/* Feed [from, to) in pieces ending on block boundaries, saving after each. */
static void feed_saving(struct dsv4_prefix_seq *q, int64_t from, int64_t to)
{
    struct dsv4_err err = { "" };
    for (int64_t p = from; p < to;) {
        int64_t e = DSV4_MIN(to, dsv4_prefix_next_boundary(q, p));
        forward(q->s, p, e, NULL);
        if (dsv4_prefix_save(q, toks, e, &err) < 0)
            fail_msg("save: %s", err.msg);
        p = e;
    }
}

static void test_prefix_tiers(void **state)
{
    (void)state;
    struct dsv4_err err = { "" };
    char dir[] = "/tmp/test-session-io.XXXXXX";
    assert_non_null(mkdtemp(dir));
    for (int tier = 0; tier < 2; tier++) {     /* RAM, then disk after a reopen */
        dsv4_pcache *pc;
        if (dsv4_prefix_cache_open(model, dsv4_engine_config(eng), tier ? 0 : 64 << 20,
                                   tier ? 64 << 20 : 0, dir, &pc, &err) < 0)
            fail_msg("cache: %s", err.msg);
        assert_int_equal(dsv4_pcache_block_tokens(pc), 128);
        struct dsv4_prefix_seq q;
        dsv4_session *a = new_session(N_TOK, 16, 0);
        int64_t got;
        dsv4_prefix_seq_init(&q, pc, a, NULL);
        assert_int_equal(dsv4_prefix_restore(&q, toks, 270, &got, &err), 0);
        assert_int_equal(got, 0);
        feed_saving(&q, 0, 270);
        dsv4_session_free(a);
        if (tier) {
            dsv4_pcache_close(pc);
            if (dsv4_prefix_cache_open(model, dsv4_engine_config(eng), 0, 64 << 20, dir, &pc,
                                       &err) < 0)
                fail_msg("cache: %s", err.msg);
        }
        /* n = 257: 256 restored (the last token is always fed); n = 256: 128; partial */
        static const int64_t ns[] = { 300, 257, 256, 200 };
        static const int64_t want[] = { 256, 256, 128, 128 };
        for (size_t i = 0; i < DSV4_ARRAY_SIZE(ns); i++) {
            dsv4_session *b = new_session(N_TOK, 64, 0);
            dsv4_prefix_seq_init(&q, pc, b, NULL);
            assert_int_equal(dsv4_prefix_restore(&q, toks, ns[i], &got, &err), 0);
            assert_int_equal(got, want[i]);
            check_continuation(b, got, tier ? "disk" : "ram");
            dsv4_session_free(b);
        }
        struct dsv4_pcache_stats st;
        dsv4_pcache_get_stats(pc, &st);
        assert_true(tier ? st.disk_hits > 0 && st.ram_hits == 0 : st.ram_hits > 0);
        assert_int_equal(st.hit_tokens, 256 + 256 + 128 + 128);
        dsv4_pcache_clear(pc);
        dsv4_pcache_close(pc);
    }
    rmdir(dir);
}

/* A sequence's end stores its partial last block: a longer prompt that extends the sequence
 * restores up to that end (not only to the last boundary) and continues bitwise like a full
 * prefill; only the exact partial matches; a short sequence's partial hangs off the root. */
static void test_prefix_partial(void **state)
{
    (void)state;
    struct dsv4_err err = { "" };
    char dir[] = "/tmp/test-session-io.XXXXXX";
    assert_non_null(mkdtemp(dir));
    for (int tier = 0; tier < 2; tier++) {     /* RAM, then disk after a reopen */
        dsv4_pcache *pc;
        if (dsv4_prefix_cache_open(model, dsv4_engine_config(eng), tier ? 0 : 64 << 20,
                                   tier ? 64 << 20 : 0, dir, &pc, &err) < 0)
            fail_msg("cache: %s", err.msg);
        struct dsv4_prefix_seq q;
        int64_t got;
        static const int64_t ends[] = { 200, 50 };  /* after one block; inside the first */
        for (size_t e = 0; e < DSV4_ARRAY_SIZE(ends); e++) {
            dsv4_session *a = new_session(N_TOK, 16, 0);
            dsv4_prefix_seq_init(&q, pc, a, NULL);
            feed_saving(&q, 0, ends[e]);
            assert_int_equal(dsv4_prefix_save_end(&q, toks, ends[e], &err), 0);
            dsv4_session_free(a);
        }
        if (tier) {
            dsv4_pcache_close(pc);
            if (dsv4_prefix_cache_open(model, dsv4_engine_config(eng), 0, 64 << 20, dir, &pc,
                                       &err) < 0)
                fail_msg("cache: %s", err.msg);
        }
        /* n → restored: 260 → 200 (128 + the 72-token partial); 201 → 200; 200 → 128 (the
         * last token is always fed, and a 71-token partial was never stored); 60 → 50 */
        static const int64_t ns[] = { 260, 201, 200, 60 };
        static const int64_t want[] = { 200, 200, 128, 50 };
        for (size_t i = 0; i < DSV4_ARRAY_SIZE(ns); i++) {
            dsv4_session *b = new_session(N_TOK, 64, 0);
            dsv4_prefix_seq_init(&q, pc, b, NULL);
            assert_int_equal(dsv4_prefix_restore(&q, toks, ns[i], &got, &err), 0);
            if (got != want[i])
                fail_msg("%s: n %lld restored %lld, want %lld", tier ? "disk" : "ram",
                         (long long)ns[i], (long long)got, (long long)want[i]);
            check_continuation(b, got, tier ? "disk partial" : "ram partial");
            dsv4_session_free(b);
        }
        /* a prompt that differs inside the partial's span gets the complete block only */
        int32_t *other = dsv4_xmalloc(N_TOK * sizeof(int32_t));
        memcpy(other, toks, N_TOK * sizeof(int32_t));
        other[150] = (other[150] + 1) % V;
        dsv4_session *c = new_session(N_TOK, 64, 0);
        dsv4_prefix_seq_init(&q, pc, c, NULL);
        assert_int_equal(dsv4_prefix_restore(&q, other, 260, &got, &err), 0);
        assert_int_equal(got, 128);
        dsv4_session_free(c);
        free(other);
        dsv4_pcache_clear(pc);
        dsv4_pcache_close(pc);
    }
    rmdir(dir);
}

/* ---- the drafter ---- */

static int32_t greedy(void *ctx, const float *logits, int vocab, int64_t index)
{
    (void)ctx;
    (void)index;
    return dsv4_argmax(logits, vocab);
}

struct specrun {
    dsv4_session *s;
    dsv4_drafter *d;
    dsv4_spec *sp;
};

static void spec_open(struct specrun *r)
{
    struct dsv4_err err = { "" };
    /* the policy's choices from rows, not wall time: both runs verify the same lengths */
    struct dsv4_spec_opts o = { .rows_as_cost = true, .no_quench = true };
    r->s = new_session(N_TOK + 64, 16, 0);
    if (dsv4_drafter_new(eng, &r->d, &err) < 0 ||
        dsv4_spec_new(r->s, r->d, NULL, &o, &r->sp, &err) < 0)
        fail_msg("drafter: %s", err.msg);
}

static void spec_close(struct specrun *r)
{
    dsv4_spec_free(r->sp);
    dsv4_drafter_free(r->d);
    dsv4_session_free(r->s);
}

/* Drafts at P and 24 speculative tokens after it: ids[24], drafts[γ], conf[γ]. */
static void spec_continue(struct specrun *r, int64_t P, int32_t *ids, int32_t *drafts,
                          float *conf)
{
    struct dsv4_err err = { "" };
    if (dsv4_spec_draft(r->sp, toks[P], drafts, conf, &err) < 0)
        fail_msg("draft at %lld: %s", (long long)P, err.msg);
    int n = 0;
    int32_t anchor = toks[P];
    while (n < 24) {
        int32_t out[72];
        int k = dsv4_spec_step(r->sp, anchor, n, 24 - n, greedy, NULL, out, &err);
        if (k <= 0) {
            fail_msg("step: %s", k < 0 ? err.msg : "no token");
            return;
        }
        memcpy(ids + n, out, (size_t)k * sizeof(int32_t));
        n += k;
        anchor = out[k - 1];
    }
}

static void test_drafter_restore(void **state)
{
    (void)state;
    struct dsv4_err err = { "" };
    static const int64_t pcut[] = { 5, 37, 128, 256 };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(pcut); i++) {
        int64_t P = pcut[i];
        struct specrun full, rest;
        int32_t ids[2][24], dr[2][DSV4_SPEC_MAX_GAMMA];
        float conf[2][DSV4_SPEC_MAX_GAMMA];
        float *lg = dsv4_xmalloc((size_t)V * sizeof(float));
        spec_open(&full);
        if (dsv4_spec_feed(full.sp, toks, (int)P, lg, &err) < 0)
            fail_msg("feed: %s", err.msg);
        uint64_t n = dsv4_session_export_bytes(full.s, 0, P), nt = dsv4_spec_tail_bytes(full.sp, P);
        assert_true(nt > 0);
        void *buf = dsv4_xmalloc(n), *taps = dsv4_xmalloc(nt);
        if (dsv4_session_export(full.s, 0, buf, n, &err) < 0 ||
            dsv4_spec_export_tail(full.sp, P, taps, nt, &err) < 0)
            fail_msg("export: %s", err.msg);
        spec_close(&full);
        /* the full prefill's drafts and continuation, from a fresh run */
        spec_open(&full);
        if (dsv4_spec_feed(full.sp, toks, (int)P, lg, &err) < 0)
            fail_msg("feed: %s", err.msg);
        spec_continue(&full, P, ids[0], dr[0], conf[0]);
        spec_open(&rest);
        if (dsv4_session_import(rest.s, 0, P, buf, n, &err) < 0 ||
            dsv4_spec_import_tail(rest.sp, taps, nt, &err) < 0)
            fail_msg("import: %s", err.msg);
        spec_continue(&rest, P, ids[1], dr[1], conf[1]);
        int g = dsv4_drafter_block(full.d);
        assert_memory_equal(dr[0], dr[1], (size_t)g * sizeof(int32_t));
        assert_memory_equal(conf[0], conf[1], (size_t)g * sizeof(float));
        assert_memory_equal(ids[0], ids[1], sizeof(ids[0]));
        struct dsv4_spec_stats st[2];
        dsv4_spec_get_stats(full.sp, &st[0]);
        dsv4_spec_get_stats(rest.sp, &st[1]);
        assert_true(st[1].accepted == st[0].accepted && st[1].proposed == st[0].proposed);
        spec_close(&full);
        spec_close(&rest);
        free(buf);
        free(taps);
        free(lg);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test-session-io MODEL_DIR\n");
        return 2;
    }
    model = argv[1];
    struct dsv4_err err = { "" };
    struct dsv4_config cfg;
    if (dsv4_config_load(model, &cfg, &err) < 0) {
        fprintf(stderr, "test-session-io: %s\n", err.msg);
        return 1;
    }
    struct dsv4_engine_opts eo = { .dspark = cfg.dspark_stages > 0 };
    if (dsv4_engine_open(model, &eo, &eng, &err) < 0) {
        fprintf(stderr, "test-session-io: %s\n", err.msg);
        return 1;
    }
    V = dsv4_engine_config(eng)->vocab_size;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < N_TOK; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((x >> 33) % (uint64_t)V);
    }
    ref = dsv4_xmalloc((size_t)N_TOK * V * sizeof(float));
    dsv4_session *s = new_session(N_TOK, 64, 0);
    forward(s, 0, N_TOK, ref);
    dsv4_session_free(s);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_restore_whole),
        cmocka_unit_test(test_restore_blocks),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_prefix_tiers),
        cmocka_unit_test(test_prefix_partial),
        cmocka_unit_test(test_drafter_restore),
    };
    /* the drafter's test only where there is a drafter (a TAP skip reads as a failure) */
    int rc = cfg.dspark_stages ? cmocka_run_group_tests(tests, NULL, NULL)
                               : _cmocka_run_group_tests("tests", tests,
                                                         DSV4_ARRAY_SIZE(tests) - 1, NULL, NULL);
    free(ref);
    dsv4_engine_free(eng);
    return rc;
}
