/* SPDX-License-Identifier: MIT */
/*
 * The wire decoder (proto/wire.c) accepts what the builders produce, with
 * the fields intact, and rejects every truncation, a wrong ABI major (with
 * the ABI error code), trailing bytes at our minor version (accepted from a
 * newer minor), and each out-of-range field the validators name. Sampling
 * (daemons/scheduler/sampling.c): greedy is argmax, the draw sequence is
 * `dsv4ctl run`'s sequential splitmix64, top-k 1 and a tiny top-p reduce to
 * argmax, and temperature sampling follows softmax(logits / T).
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dsv4_wire.h"
#include "sampling.h"

static int decode(struct dsv4_wire_buf *b, struct dsv4_msg *m, int *errc)
{
    struct dsv4_err err;
    uint64_t *al = malloc(b->len + 8);
    memcpy(al, b->p, b->len);
    int r = dsv4_wire_decode(al, b->len, m, errc, &err);
    /* m points into al: copy what the tests read before freeing */
    static uint64_t keep[512];
    if (r == 0 && b->len <= sizeof(keep)) {
        memcpy(keep, al, b->len);
        m->body = (const char *)keep + 16;
        m->tail = (const char *)m->body + ((const char *)m->tail - ((const char *)al + 16));
    }
    free(al);
    return r;
}

static void build_generate(struct dsv4_wire_buf *b, struct dsv4_msg_generate g, const int32_t *t,
                           const char *stop, size_t n_stop)
{
    dsv4_wire_begin(b, DSV4_MSG_GENERATE);
    dsv4_wire_put(b, &g, sizeof(g));
    dsv4_wire_put(b, t, 4 * ((size_t)g.n_prompt + g.n_done));
    dsv4_wire_put(b, stop, n_stop);
    dsv4_wire_finish(b);
}

static const struct dsv4_msg_generate gen0 = { 42, 7, 0.5f, 0.9f, 10, 32, 3, 1, 6, 0 };
static const int32_t toks[4] = { 0, 5, 6, 9 };

static void test_roundtrip_and_truncation(void **state)
{
    (void)state;
    struct dsv4_wire_buf b = { 0 };
    build_generate(&b, gen0, toks, "ab\0cd", 6);
    struct dsv4_msg m;
    int errc;
    assert_int_equal(decode(&b, &m, &errc), 0);
    assert_int_equal(m.type, DSV4_MSG_GENERATE);
    const struct dsv4_msg_generate *g = m.body;
    assert_int_equal(g->req_id, 42);
    assert_int_equal(g->n_prompt, 3);
    assert_memory_equal(m.tail, toks, 16);
    assert_memory_equal((const char *)m.tail + 16, "ab\0cd", 6);
    for (size_t n = 0; n < b.len; n++) {   /* every truncation, header patched or not */
        struct dsv4_wire_buf t = { 0 };
        dsv4_wire_begin(&t, DSV4_MSG_GENERATE);
        dsv4_wire_put(&t, b.p + 16, n > 16 ? n - 16 : 0);
        dsv4_wire_finish(&t);
        assert_int_not_equal(decode(&t, &m, &errc), 0);
        assert_int_equal(errc, DSV4_WE_PROTO);
        t.len = n;
        memcpy(t.p, b.p, DSV4_MIN(n, (size_t)16));
        assert_int_not_equal(decode(&t, &m, &errc), 0);
        dsv4_wire_buf_free(&t);
    }
    dsv4_wire_buf_free(&b);
}

static void test_versions(void **state)
{
    (void)state;
    struct dsv4_wire_buf b = { 0 };
    struct dsv4_msg_cancel c = { 5 };
    uint64_t extra = 0;
    dsv4_wire_begin(&b, DSV4_MSG_CANCEL);
    dsv4_wire_put(&b, &c, sizeof(c));
    dsv4_wire_put(&b, &extra, sizeof(extra));
    dsv4_wire_finish(&b);
    struct dsv4_msg m;
    int errc;
    assert_int_not_equal(decode(&b, &m, &errc), 0);     /* our minor: no tail allowed */
    uint16_t minor = DSV4_WIRE_ABI_MINOR + 1, major = DSV4_WIRE_ABI_MAJOR + 1;
    memcpy(b.p + 6, &minor, 2);
    assert_int_equal(decode(&b, &m, &errc), 0);         /* newer minor: tail ignored */
    memcpy(b.p + 4, &major, 2);
    assert_int_equal(decode(&b, &m, &errc), -EPROTO);
    assert_int_equal(errc, DSV4_WE_ABI);
    dsv4_wire_buf_free(&b);
}

static void test_ranges(void **state)
{
    (void)state;
    struct dsv4_msg m;
    int errc;
    struct { const char *what; struct dsv4_msg_generate g; const char *stop; size_t n_stop; int32_t t0; } bad[] = {
        { "top_p 0", { 1, 0, 0.5f, 0.0f, 0, 8, 3, 1, 0, 0 }, "", 0, 0 },
        { "temperature NaN", { 1, 0, NAN, 1.0f, 0, 8, 3, 1, 0, 0 }, "", 0, 0 },
        { "n_done > max_tokens", { 1, 0, 0, 1.0f, 0, 0 + 1, 2, 2, 0, 0 }, "", 0, 0 },
        { "req_id 0", { 0, 0, 0, 1.0f, 0, 8, 3, 1, 0, 0 }, "", 0, 0 },
        { "negative token", { 1, 0, 0, 1.0f, 0, 8, 3, 1, 0, 0 }, "", 0, -3 },
        { "stop without NUL", { 1, 0, 0, 1.0f, 0, 8, 3, 1, 2, 0 }, "ab", 2, 0 },
        { "empty stop", { 1, 0, 0, 1.0f, 0, 8, 3, 1, 2, 0 }, "\0a", 2, 0 },
        { "unknown flag", { 1, 0, 0, 1.0f, 0, 8, 3, 1, 0, 8 }, "", 0, 0 },
        { "21 top logprobs", { 1, 0, 0, 1.0f, 0, 8, 3, 1, 0, DSV4_GEN_LOGPROBS | 21u << 8 }, "", 0, 0 },
        { "top without logprobs", { 1, 0, 0, 1.0f, 0, 8, 3, 1, 0, 2u << 8 }, "", 0, 0 },
    };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(bad); i++) {
        int32_t t[4] = { bad[i].t0, 1, 2, 3 };
        struct dsv4_wire_buf b = { 0 };
        build_generate(&b, bad[i].g, t, bad[i].stop, bad[i].n_stop);
        if (decode(&b, &m, &errc) == 0)
            fail_msg("accepted: %s", bad[i].what);
        dsv4_wire_buf_free(&b);
    }
    /* FETCHER_PIN: pin is 0 or 1, padding zero (layer and expert: the fetcher's to check) */
    const struct { struct dsv4_msg_fetcher_pin p; bool ok; } pins[] = {
        { { 1, 2, 3, 1, 0 }, true }, { { 1, 2, 3, 0, 0 }, true },
        { { 1, 2, 3, 2, 0 }, false }, { { 1, 2, 3, 1, 7 }, false },
    };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(pins); i++) {
        struct dsv4_wire_buf fb = { 0 };
        dsv4_wire_simple(&fb, DSV4_MSG_FETCHER_PIN, &pins[i].p, sizeof(pins[i].p));
        assert_int_equal(decode(&fb, &m, &errc) == 0, pins[i].ok);
        dsv4_wire_buf_free(&fb);
    }
    /* PEER_RESTARTED names a role: the last one passes, one past it is refused */
    for (uint32_t role = DSV4_ROLE_COUNT - 1; role <= DSV4_ROLE_COUNT + 1; role++) {
        struct dsv4_msg_peer pr = { role, 1234, 7 };
        struct dsv4_wire_buf pb = { 0 };
        dsv4_wire_simple(&pb, DSV4_MSG_PEER_RESTARTED, &pr, sizeof(pr));
        int r = decode(&pb, &m, &errc);
        if (role < DSV4_ROLE_COUNT) {
            assert_int_equal(r, 0);
            assert_int_equal(((const struct dsv4_msg_peer *)m.body)->role, role);
        } else {
            assert_int_not_equal(r, 0);
        }
        dsv4_wire_buf_free(&pb);
    }
    /* FORWARD rows whose positions would overflow int64 are refused, not computed */
    struct { struct dsv4_msg_forward f; struct dsv4_wire_fwd_in r[2]; } fw = {
        { 1, 2, 2, 0, 0, 0 }, { { 5, -1, INT64_MAX }, { 6, -1, INT64_MIN } } };
    struct dsv4_wire_buf wb = { 0 };
    dsv4_wire_simple(&wb, DSV4_MSG_FORWARD, &fw, sizeof(fw));
    assert_int_not_equal(decode(&wb, &m, &errc), 0);
    dsv4_wire_buf_free(&wb);
    /* PROGRESS: 1 <= total, done <= total */
    const struct dsv4_msg_progress progress[] = { { 7, 0, 10 }, { 7, 10, 10 }, { 7, 11, 10 },
                                                  { 7, 0, 0 } };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(progress); i++) {
        struct dsv4_wire_buf pb = { 0 };
        dsv4_wire_simple(&pb, DSV4_MSG_PROGRESS, &progress[i], sizeof(progress[i]));
        int r = decode(&pb, &m, &errc);
        if (i < 2) {
            assert_int_equal(r, 0);
            assert_int_equal(m.type, DSV4_MSG_PROGRESS);
            const struct dsv4_msg_progress *pm = m.body;
            assert_int_equal(pm->req_id, 7);
            assert_int_equal(pm->done, progress[i].done);
            assert_int_equal(pm->total, 10);
        } else {
            assert_int_not_equal(r, 0);
        }
        dsv4_wire_buf_free(&pb);
    }
    /* GENERATE with logprobs; TOKEN_LOGPROBS: logprobs <= 0 and finite, n_top <= 20 */
    struct dsv4_msg_generate lg = { 1, 0, 0, 1.0f, 0, 8, 3, 1, 0, DSV4_GEN_LOGPROBS | 20u << 8 };
    int32_t lt[4] = { 0, 1, 2, 3 };
    struct dsv4_wire_buf gb = { 0 };
    build_generate(&gb, lg, lt, "", 0);
    assert_int_equal(decode(&gb, &m, &errc), 0);
    dsv4_wire_buf_free(&gb);
    struct { struct dsv4_msg_token_logprobs h; struct dsv4_wire_topk top[2]; bool ok; } lps[] = {
        { { 9, 3, 5, -0.25f, 2 }, { { 5, -0.25f }, { 7, -2.0f } }, true },
        { { 9, 3, 5, 0.5f, 2 }, { { 5, -0.25f }, { 7, -2.0f } }, false },
        { { 9, 3, 5, -0.25f, 2 }, { { 5, -0.25f }, { -7, -2.0f } }, false },
        { { 9, 3, 5, -0.25f, 2 }, { { 5, -0.25f }, { 7, NAN } }, false },
        { { 9, 3, -1, -0.25f, 0 }, { { 0, 0 }, { 0, 0 } }, false },
    };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(lps); i++) {
        struct dsv4_wire_buf lb = { 0 };
        dsv4_wire_begin(&lb, DSV4_MSG_TOKEN_LOGPROBS);
        dsv4_wire_put(&lb, &lps[i].h, sizeof(lps[i].h));
        dsv4_wire_put(&lb, lps[i].top, lps[i].h.n_top * sizeof(lps[i].top[0]));
        dsv4_wire_finish(&lb);
        if ((decode(&lb, &m, &errc) == 0) != lps[i].ok)
            fail_msg("TOKEN_LOGPROBS case %zu", i);
        dsv4_wire_buf_free(&lb);
    }
    struct dsv4_msg_token_logprobs many = { 9, 3, 5, -0.25f, 21 };
    struct dsv4_wire_topk ztop[21] = { { 0, 0 } };
    struct dsv4_wire_buf mb = { 0 };
    dsv4_wire_begin(&mb, DSV4_MSG_TOKEN_LOGPROBS);
    dsv4_wire_put(&mb, &many, sizeof(many));
    dsv4_wire_put(&mb, ztop, sizeof(ztop));
    dsv4_wire_finish(&mb);
    assert_int_not_equal(decode(&mb, &m, &errc), 0);
    dsv4_wire_buf_free(&mb);

    /* FORWARD: rows must be consecutive positions; taps not served yet */
    struct dsv4_msg_forward f = { 1, 2, 2, 0, 0, 0 };
    struct dsv4_wire_fwd_in rows[2] = { { 5, -1, 10 }, { 6, -1, 11 } };
    struct dsv4_wire_buf b = { 0 };
    dsv4_wire_begin(&b, DSV4_MSG_FORWARD);
    dsv4_wire_put(&b, &f, sizeof(f));
    dsv4_wire_put(&b, rows, sizeof(rows));
    dsv4_wire_finish(&b);
    assert_int_equal(decode(&b, &m, &errc), 0);
    rows[1].pos = 13;
    memcpy(b.p + 16 + sizeof(f), rows, sizeof(rows));
    assert_int_not_equal(decode(&b, &m, &errc), 0);
    f.n_taps = 4;
    rows[1].pos = 11;
    memcpy(b.p + 16, &f, sizeof(f));
    memcpy(b.p + 16 + sizeof(f), rows, sizeof(rows));
    assert_int_not_equal(decode(&b, &m, &errc), 0);
    /* FORWARD flags: MORE and SPECULATIVE are known, the next bit is not */
    static const uint32_t flags[] = { DSV4_FWD_MORE, DSV4_FWD_SPECULATIVE | DSV4_FWD_ALL_ROWS,
                                      DSV4_FWD_MORE | DSV4_FWD_LOGITS, 16u };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(flags); i++) {
        f = (struct dsv4_msg_forward){ 1, 2, 2, 0, flags[i], 0 };
        rows[1].pos = 11;
        memcpy(b.p + 16, &f, sizeof(f));
        memcpy(b.p + 16 + sizeof(f), rows, sizeof(rows));
        assert_int_equal(decode(&b, &m, &errc) == 0, flags[i] != 16u);
    }
    dsv4_wire_buf_free(&b);

    /* PREFIX_RESTORE: 1..MAX ids, each >= 0, padding zero, the array inside the frame */
    struct { struct dsv4_msg_prefix_restore h; int32_t ids[3]; size_t put; bool ok; } pr[] = {
        { { 1, 2, 3, 0 }, { 0, 5, 6 }, 3, true },
        { { 1, 2, 0, 0 }, { 0, 5, 6 }, 0, false },
        { { 1, 2, 3, 1 }, { 0, 5, 6 }, 3, false },
        { { 1, 2, 3, 0 }, { 0, -5, 6 }, 3, false },
        { { 1, 2, 3, 0 }, { 0, 5, 6 }, 2, false },
        { { 1, 2, DSV4_WIRE_MAX_TOKENS + 1, 0 }, { 0, 5, 6 }, 3, false },
    };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(pr); i++) {
        struct dsv4_wire_buf rb = { 0 };
        dsv4_wire_begin(&rb, DSV4_MSG_PREFIX_RESTORE);
        dsv4_wire_put(&rb, &pr[i].h, sizeof(pr[i].h));
        dsv4_wire_put(&rb, pr[i].ids, pr[i].put * sizeof(int32_t));
        dsv4_wire_finish(&rb);
        if ((decode(&rb, &m, &errc) == 0) != pr[i].ok)
            fail_msg("PREFIX_RESTORE case %zu", i);
        if (pr[i].ok)
            assert_int_equal(((const struct dsv4_msg_prefix_restore *)m.body)->n_tokens, 3);
        dsv4_wire_buf_free(&rb);
    }
    /* DONE: n_cached <= n_prompt */
    const struct { struct dsv4_msg_done d; bool ok; } dn[] = {
        { { 7, DSV4_DONE_LENGTH, 4, 300, 256 }, true }, { { 7, DSV4_DONE_EOS, 4, 300, 300 }, true },
        { { 7, DSV4_DONE_LENGTH, 4, 300, 301 }, false }, { { 7, 9, 4, 300, 0 }, false },
    };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(dn); i++) {
        struct dsv4_wire_buf db = { 0 };
        dsv4_wire_simple(&db, DSV4_MSG_DONE, &dn[i].d, sizeof(dn[i].d));
        assert_int_equal(decode(&db, &m, &errc) == 0, dn[i].ok);
        if (dn[i].ok)
            assert_int_equal(((const struct dsv4_msg_done *)m.body)->n_cached, dn[i].d.n_cached);
        dsv4_wire_buf_free(&db);
    }
    /* a FORWARD of no rows (the body alone, or rows the count disowns) is refused */
    struct dsv4_msg_forward f0 = { .seq = 1, .session = 2, .n_rows = 0 };
    dsv4_wire_simple(&b, DSV4_MSG_FORWARD, &f0, sizeof(f0));
    assert_int_not_equal(decode(&b, &m, &errc), 0);
    dsv4_wire_buf_free(&b);
    dsv4_wire_begin(&b, DSV4_MSG_FORWARD);
    dsv4_wire_put(&b, &f0, sizeof(f0));
    dsv4_wire_put(&b, rows, sizeof(rows[0]));
    dsv4_wire_finish(&b);
    assert_int_not_equal(decode(&b, &m, &errc), 0);
    dsv4_wire_buf_free(&b);
}

/* top-k against repeated argmax-with-exclusion (the old O(k²·V) definition), with many ties. */
static void test_top_k(void **state)
{
    (void)state;
    enum { V = 500 };
    float lg[V];
    uint64_t x = 12345;
    for (int trial = 0; trial < 40; trial++) {
        for (int v = 0; v < V; v++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            lg[v] = (float)((x >> 33) % 23) * 0.25f - 2.0f;     /* 23 values: ties everywhere */
        }
        int k = 1 + trial % DSV4_WIRE_MAX_TOPK;
        int32_t got[DSV4_WIRE_MAX_TOPK], want[DSV4_WIRE_MAX_TOPK];
        dsv4_top_k(lg, V, k, got);
        for (int j = 0; j < k; j++) {
            int32_t best = -1;
            for (int v = 0; v < V; v++) {
                bool used = false;
                for (int q = 0; q < j; q++)
                    used |= want[q] == v;
                if (!used && (best < 0 || lg[v] > lg[best]))
                    best = v;
            }
            want[j] = best;
        }
        assert_memory_equal(got, want, (size_t)k * sizeof(int32_t));
        double mx, ls;
        dsv4_log_softmax_terms(lg, V, &mx, &ls);
        for (int j = 0; j < k; j++) {
            double a = (double)lg[got[j]] - mx - ls, b = dsv4_log_softmax_at(lg, V, got[j]);
            assert_memory_equal(&a, &b, sizeof(a));     /* bitwise */
        }
    }
    int32_t all[6];
    const float small[6] = { 1, 3, 3, 2, 3, 0 };
    dsv4_top_k(small, 6, 6, all);
    const int32_t order[6] = { 1, 2, 4, 3, 0, 5 };
    assert_memory_equal(all, order, sizeof(order));
}

static void test_sampling(void **state)
{
    (void)state;
    float lg[6] = { 0.5f, 2.0f, -1.0f, 1.9f, 2.0f, 0.0f };
    struct dsv4_sampling greedy = { 0, 1, 0, 3 };
    assert_int_equal(dsv4_sample(lg, 6, &greedy, 0), 1);    /* tie: lower id */
    /* draw i is the (i+1)-th output of a sequential splitmix64 seeded with seed */
    uint64_t s = 77;
    for (int i = 0; i < 50; i++) {
        uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        z ^= z >> 31;
        assert_true((double)(z >> 11) / 9007199254740992.0 == dsv4_sample_uniform(77, (uint64_t)i));
    }
    struct dsv4_sampling k1 = { 5.0, 1.0, 1, 9 }, p0 = { 5.0, 1e-6, 0, 9 };
    for (uint64_t i = 0; i < 100; i++) {
        assert_int_equal(dsv4_sample(lg, 6, &k1, i), 1);
        assert_int_equal(dsv4_sample(lg, 6, &p0, i), 1);
    }
    /* frequencies within 5 sigma of softmax(lg / T); top-k 3 keeps ids {1, 3, 4} */
    struct dsv4_sampling t = { 0.7, 1.0, 0, 1 }, tk = { 0.7, 1.0, 3, 1 };
    int n = 20000, cnt[6] = { 0 }, cntk[6] = { 0 };
    for (int i = 0; i < n; i++) {
        cnt[dsv4_sample(lg, 6, &t, (uint64_t)i)]++;
        cntk[dsv4_sample(lg, 6, &tk, (uint64_t)i)]++;
    }
    double z = 0, zk = 0;
    for (int v = 0; v < 6; v++) {
        z += exp(lg[v] / 0.7);
        zk += (v == 1 || v == 3 || v == 4) ? exp(lg[v] / 0.7) : 0;
    }
    for (int v = 0; v < 6; v++) {
        double p = exp(lg[v] / 0.7) / z, pk = (v == 1 || v == 3 || v == 4) ? exp(lg[v] / 0.7) / zk : 0;
        assert_true(fabs(cnt[v] - n * p) <= 5 * sqrt(n * p * (1 - p)) + 1);
        assert_true(fabs(cntk[v] - n * pk) <= 5 * sqrt(n * pk * (1 - pk)) + 1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_and_truncation),
        cmocka_unit_test(test_versions),
        cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_sampling),
        cmocka_unit_test(test_top_k),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
