/* SPDX-License-Identifier: MIT */
/*
 * The memory plan (daemons/lib/plan.c): its totals are the sums of its rows, for configs from
 * the tiny DSpark fixture to full-size Flash and Pro and options across their ranges: sessions
 * cost sessions × state + one step scratch as dsv4_plan_session_bytes gives them, one more
 * session moves the fixed part (without the prefix tier) by exactly one state, the minimum is fixed + header + min_slots slots, the
 * cache fits the budget and /dev/shm, and a budget of exactly the minimum runs with exactly
 * min_slots slots while one byte less is refused. (test-engine checks the session and weight
 * rows against what the engine allocates.)
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "plan.h"
#include "session_layout.h"

static const char *const models[] = { FIXTURES_DIR "/tiny-dspark", FIXTURES_DIR "/configs/flash",
                                      FIXTURES_DIR "/configs/pro" };

static void check_rows(const struct dsv4_config *c, const struct dsv4_plan *p)
{
    uint64_t st, sc;
    dsv4_plan_session_bytes(c, p->o.max_ctx, p->o.chunk, p->o.max_rollback, p->o.threads, &st,
                            &sc);
    assert_int_equal(p->session_state, st);
    assert_int_equal(p->session_scratch, sc);
    assert_true(st > 0 && sc > 0);
    /* N states (with DSpark, each with its drafter and speculation buffers) and one step
     * scratch (sessions hold state only, daemons/compute/forward.c) */
    uint64_t ds = p->o.dspark ? dsv4_dspark_session_bytes(c, p->o.chunk, p->o.threads) : 0;
    assert_int_equal(p->session_dspark, ds);
    assert_int_equal(p->sessions_total, (uint64_t)p->o.sessions * (st + ds) + sc);
    if (p->o.dspark && c->dspark_stages > 0) {
        /* at least the two largest buffers: verify logits, and the tap ring (window + slack
         * rows of every tap); the exact count is asserted where they are allocated
         * (daemons/compute/speculate.c) whenever a DSpark session opens */
        uint64_t taps = (uint64_t)c->dspark_n_target_layers * (uint64_t)c->dim * 4;
        assert_true(ds >= (uint64_t)(c->dspark_block_size + 1) * (uint64_t)c->vocab_size * 4 +
                              (uint64_t)(c->window + DSV4_SPEC_TAP_SLACK) * taps);
    } else {
        assert_int_equal(ds, 0);
    }
    /* the prefix cache's RAM tier: given (part of the minimum) or carved from the room above
     * the minimum (an eighth, at most 256 MiB) */
    uint64_t base = p->dense + p->embed_head + p->drafter + p->drafter_cache +
                    p->sessions_total + p->compute_scratch + p->overhead;
    bool carved = p->o.prefix_ram == DSV4_PLAN_PREFIX_DEFAULT;
    assert_int_equal(p->fixed, base + p->prefix_ram);
    /* (the minimum is the default step's: a step the plan widened adds chunk_extra) */
    assert_int_equal(p->minimum, (carved ? base : p->fixed) - p->chunk_extra + p->cache_header +
                                     p->min_slots * p->slot_bytes);
    if (carved && p->budget > p->minimum)
        assert_int_equal(p->prefix_ram, DSV4_MIN(256ull << 20, (p->budget - p->minimum) / 8));
    assert_true(p->dense > 0 && p->embed_head > 0 && p->slot_bytes > 0 && p->cache_header > 0);
    assert_int_equal(p->experts_total, (uint64_t)c->n_layers * c->n_routed_experts);
    if (p->budget < p->minimum) {
        assert_int_equal(p->max_lease, 0);
        return;
    }
    assert_int_equal(p->cache_bytes, p->cache_header + p->n_slots * p->slot_bytes);
    assert_true(p->fixed + p->cache_bytes <= p->budget);
    assert_true(p->n_slots <= p->experts_total);
    if (p->o.shm_avail && !p->o.in_process)
        assert_true(p->cache_bytes <= p->o.shm_avail);
    /* a slot more would pass the budget, unless every expert already has one */
    if (p->n_slots < p->experts_total && !p->shm_limited)
        assert_true(p->fixed + p->cache_bytes + p->slot_bytes > p->budget);
}

static void test_rows_add_up(void **state)
{
    (void)state;
    struct dsv4_config *c = malloc(sizeof(*c));
    struct dsv4_err err = { "" };
    static const struct dsv4_plan_opts opts[] = {
        { .budget_bytes = 1ull << 30 },
        { .budget_bytes = 1ull << 30, .sessions = 1, .max_ctx = 256, .chunk = 8, .threads = 2 },
        { .budget_bytes = 3ull << 30, .sessions = 7, .max_ctx = 1000, .max_rollback = 9,
          .dspark = true },
        { .budget_bytes = 64ull << 30, .sessions = 2, .max_ctx = 65536, .threads = 4 },
        { .budget_bytes = 512ull << 30, .sessions = 3, .dspark = true, .in_process = true },
        { .budget_bytes = 1ull << 40, .sessions = 1, .shm_avail = 40ull << 30 },
        { .budget_bytes = 24ull << 30, .prefix_ram = DSV4_PLAN_PREFIX_DEFAULT },
        { .budget_bytes = 2ull << 30, .sessions = 2, .prefix_ram = 100ull << 20 },
    };
    int checked = 0;
    for (size_t m = 0; m < sizeof(models) / sizeof(models[0]); m++) {
        assert_int_equal(dsv4_config_load(models[m], c, &err), 0);
        for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
            struct dsv4_plan p, q;
            int r = dsv4_plan_make(c, &opts[i], &p, &err);
            assert_true(r == 0 || r == -ENOSPC);
            check_rows(c, &p);
            /* one more session: the fixed part grows by exactly one session's bytes */
            struct dsv4_plan_opts o = p.o;
            o.sessions++;
            r = dsv4_plan_make(c, &o, &q, &err);
            assert_true(r == 0 || r == -ENOSPC);
            check_rows(c, &q);
            assert_int_equal(q.fixed - q.prefix_ram - (p.fixed - p.prefix_ram),
                             p.session_state + p.session_dspark);
            checked += 2;
        }
    }
    assert_int_equal(checked, 48);
    free(c);
}

/*
 * The session state's bytes are the documented formula (docs/numerics.md "Session state"):
 * per layer a ring of window + slack packed KV rows (slack = max(chunk, max_rollback));
 * per compressed layer of ratio r the compressor inputs in fp32, (coff·r + max_rollback) ×
 * 2·coff·head_dim × 4 bytes (a window is pooled as its last row arrives) (CSA: and the
 * same with index_head_dim), and ⌊max_ctx / r⌋ packed KV rows (CSA: and packed indexer
 * keys). A packed KV row is 2·rope + (head_dim − rope) + ⌈(head_dim − rope)/64⌉ bytes
 * rounded up to even, an indexer key ⌈ihd/2⌉ + ⌈ihd/32⌉. Flash and Pro: 584 and 68 bytes, and
 * 3514.25 (Flash) and 5031.4375 (Pro) bytes per token of context, the table's figures.
 */
static uint64_t state_formula(const struct dsv4_config *c, int64_t T, int slack, int rollback)
{
    uint64_t D = (uint64_t)c->head_dim, R = (uint64_t)c->rope_head_dim;
    uint64_t ihd = (uint64_t)c->index_head_dim;
    uint64_t kv = 2 * R + (D - R) + (D - R + 63) / 64, ik = (ihd + 1) / 2 + (ihd + 31) / 32;
    kv += kv & 1;
    uint64_t b = 0;
    for (int l = 0; l < c->n_layers; l++) {
        b += (uint64_t)(c->window + slack) * kv;
        int r = c->compress_ratios[l];
        if (c->layer_kind[l] == DSV4_ATTN_WINDOW)
            continue;
        uint64_t coff = r == 4 ? 2 : 1, cin_cap = coff * (uint64_t)r + (uint64_t)rollback;
        /* (an empty array still takes one byte: max_ctx < r) */
        b += cin_cap * 2 * coff * D * 4 + (T >= r ? (uint64_t)(T / r) * kv : 1);
        if (c->layer_kind[l] == DSV4_ATTN_CSA)
            b += cin_cap * 2 * coff * ihd * 4 + (T >= r ? (uint64_t)(T / r) * ik : 1);
    }
    return b;
}

static void test_state_bytes_formula(void **state)
{
    (void)state;
    struct dsv4_config *c = malloc(sizeof(*c));
    struct dsv4_err err = { "" };
    /* bytes of state per 128 tokens of context (every ratio divides 128) */
    static const uint64_t per128[] = { 0, 449824, 644024 };
    for (size_t m = 0; m < sizeof(models) / sizeof(models[0]); m++) {
        assert_int_equal(dsv4_config_load(models[m], c, &err), 0);
        if (m > 0) {
            assert_int_equal(dsv4_kv_row_bytes(c), 584);
            assert_int_equal(dsv4_ikey_row_bytes(c), 68);
        }
        static const int64_t ctxs[] = { 1, 127, 4096, 65536, 1 << 20 };
        for (size_t i = 0; i < sizeof(ctxs) / sizeof(ctxs[0]); i++) {
            struct dsv4_session_layout L;
            assert_int_equal(dsv4_session_layout(c, ctxs[i], 0, 0, 1, &L, &err), 0);
            assert_int_equal(L.state_bytes, state_formula(c, ctxs[i], DSV4_DEFAULT_CHUNK,
                                                          DSV4_DEFAULT_MAX_ROLLBACK));
            assert_int_equal(dsv4_session_layout(c, ctxs[i], 8, 40, 1, &L, &err), 0);
            assert_int_equal(L.state_bytes, state_formula(c, ctxs[i], 40, 40));
            assert_int_equal(dsv4_session_layout(c, ctxs[i], 512, 4, 1, &L, &err), 0);
            assert_int_equal(L.state_bytes, state_formula(c, ctxs[i], 512, 4));
        }
        if (m > 0) {
            struct dsv4_session_layout A, B;
            assert_int_equal(dsv4_session_layout(c, 4096, 0, 0, 1, &A, &err), 0);
            assert_int_equal(dsv4_session_layout(c, 4096 + 128, 0, 0, 1, &B, &err), 0);
            assert_int_equal(B.state_bytes - A.state_bytes, per128[m]);
        }
    }
    free(c);
}

/* At exactly the minimum: min_slots slots (one decode row's experts and a layer of prefetch:
 * 2 × experts per token); a byte less is refused, naming the minimum. */
static void test_minimum_is_tight(void **state)
{
    (void)state;
    struct dsv4_config *c = malloc(sizeof(*c));
    struct dsv4_err err = { "" };
    for (size_t m = 0; m < sizeof(models) / sizeof(models[0]); m++) {
        assert_int_equal(dsv4_config_load(models[m], c, &err), 0);
        for (int dspark = 0; dspark < 2; dspark++) {
            struct dsv4_plan_opts o = { .budget_bytes = 1ull << 30, .sessions = 2,
                                        .dspark = dspark };
            struct dsv4_plan p;
            assert_true(dsv4_plan_make(c, &o, &p, &err) == 0 || p.budget < p.minimum);
            assert_int_equal(p.min_slots, 2 * (uint64_t)c->n_activated_experts);
            o.budget_bytes = p.minimum;
            assert_int_equal(dsv4_plan_make(c, &o, &p, &err), 0);
            check_rows(c, &p);
            assert_int_equal(p.n_slots, p.min_slots);
            assert_true(p.max_lease > 0);
            o.budget_bytes = p.minimum - 1;
            assert_int_equal(dsv4_plan_make(c, &o, &p, &err), -ENOSPC);
            assert_non_null(strstr(err.msg, "minimum"));
            check_rows(c, &p);
            /* /dev/shm holding the header and min_slots slots exactly, then a byte less */
            o.budget_bytes = 1ull << 40;
            o.shm_avail = p.cache_header + p.min_slots * p.slot_bytes;
            assert_int_equal(dsv4_plan_make(c, &o, &p, &err), 0);
            assert_true(p.shm_limited);
            assert_int_equal(p.n_slots, p.min_slots);
            check_rows(c, &p);
            o.shm_avail--;
            assert_int_equal(dsv4_plan_make(c, &o, &p, &err), -ENOSPC);
            assert_non_null(strstr(err.msg, "/dev/shm"));
        }
    }
    free(c);
}

/* Without --chunk the plan widens the prefill step: the widest power of two from the default
 * up to DSV4_MAX_PREFILL_CHUNK whose extra session memory fits 1/32 of the room above the
 * minimum (the next doubling would not); the default at the minimum and with DSpark; an
 * explicit chunk is kept; the minimum does not move; wider with a larger budget. */
static void test_chunk_from_budget(void **state)
{
    (void)state;
    struct dsv4_config *c = malloc(sizeof(*c));
    struct dsv4_err err = { "" };
    static const double gib[] = { 0, 12, 15, 24, 48, 96, 1024 };
    for (size_t m = 0; m < sizeof(models) / sizeof(models[0]); m++) {
        assert_int_equal(dsv4_config_load(models[m], c, &err), 0);
        int last = 0;
        for (size_t g = 0; g < sizeof(gib) / sizeof(gib[0]); g++) {
            struct dsv4_plan_opts o = { .budget_bytes = (uint64_t)(gib[g] * 1073741824.0),
                                        .sessions = 4 };
            struct dsv4_plan p, d;
            if (g == 0) {   /* exactly the minimum */
                o.budget_bytes = 1;
                dsv4_plan_make(c, &o, &p, &err);
                o.budget_bytes = p.minimum;
            }
            if (dsv4_plan_make(c, &o, &p, &err) < 0)
                continue;
            check_rows(c, &p);
            struct dsv4_plan_opts od = o;
            od.chunk = DSV4_DEFAULT_CHUNK;
            assert_int_equal(dsv4_plan_make(c, &od, &d, &err), 0);
            assert_int_equal(p.minimum, d.minimum);
            int ch = p.o.chunk;
            assert_true(ch >= DSV4_DEFAULT_CHUNK && ch <= DSV4_MAX_PREFILL_CHUNK);
            assert_int_equal(ch & (ch - 1), 0);
            assert_true(ch >= last);
            last = ch;
            uint64_t room = (p.budget - p.minimum) / 32;
            assert_true(p.sessions_total - d.sessions_total <= room);
            assert_int_equal(p.fixed - d.fixed, p.sessions_total - d.sessions_total);
            assert_int_equal(p.chunk_extra, p.sessions_total - d.sessions_total);
            if (g == 0)
                assert_int_equal(ch, DSV4_DEFAULT_CHUNK);
            if (ch < DSV4_MAX_PREFILL_CHUNK) {  /* the next doubling does not fit */
                struct dsv4_plan w;
                od.chunk = 2 * ch;
                int r = dsv4_plan_make(c, &od, &w, &err);
                assert_true(r == -ENOSPC || w.sessions_total - d.sessions_total > room);
            }
            od.chunk = 100;     /* asked for: kept (even where it does not fit) */
            dsv4_plan_make(c, &od, &d, &err);
            assert_int_equal(d.o.chunk, 100);
            assert_int_equal(d.chunk_extra, 0);
            o.dspark = true;    /* DSpark feeds its drafter in 64-row pieces */
            if (dsv4_plan_make(c, &o, &d, &err) == 0)
                assert_int_equal(d.o.chunk, DSV4_DEFAULT_CHUNK);
        }
        assert_true(last > DSV4_DEFAULT_CHUNK);     /* some budget widens it */
    }
    free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_add_up),
        cmocka_unit_test(test_minimum_is_tight),
        cmocka_unit_test(test_state_bytes_formula),
        cmocka_unit_test(test_chunk_from_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
