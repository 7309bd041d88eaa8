/* SPDX-License-Identifier: MIT */
/*
 * Speculative decoding (daemons/compute/speculate.c) is lossless: for every golden prompt of
 * a DSpark fixture, the ids generated with speculation equal plain decoding, and every logits
 * row the verifier chooses from is bitwise equal to plain decoding's row for that token (so
 * the rolled-back target state is exact). Proposers: the C drafter (policy, and every fixed
 * verify length), and the test-only replay proposer with errors injected periodically so that
 * each step accepts exactly 0, 1, …, γ drafts (accept-none … accept-all), which moves the
 * rollback point across every compressed-row and indexer boundary of the fixture's ratios;
 * the drafter's ring after speculation equals one built from the committed tokens only; the
 * seeded sampler gives the same ids too.
 * Usage: test-speculate FIXTURE_DIR
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
#include <cJSON.h>

#include "sampling.h"
#include "speculate.h"
#include "json-file.h"
#include "util.h"

#define N_GEN 32

static const char *fixture;
static cJSON *gold;
static dsv4_engine *eng;
static int V;

struct prompt {
    int32_t *tok;
    int n;
};
static struct prompt prompts[16];
static int n_prompts;

/* choose: the plain run's logits row of each token number, compared bitwise */
struct chooser {
    const float *plain;     /* [N_GEN][V] rows of the plain run (NULL: recording) */
    float *record;
    const struct dsv4_sampling *samp;
    int mismatches, calls;
};

static int32_t choose(void *ctx, const float *logits, int vocab, int64_t index)
{
    struct chooser *c = ctx;
    assert_true(index >= 0 && index < N_GEN);
    if (c->record)
        memcpy(c->record + (size_t)index * vocab, logits, (size_t)vocab * sizeof(float));
    if (c->plain && memcmp(c->plain + (size_t)index * vocab, logits,
                           (size_t)vocab * sizeof(float)) != 0)
        c->mismatches++;
    c->calls++;
    return c->samp ? dsv4_sample(logits, vocab, c->samp, (uint64_t)index)
                   : dsv4_argmax(logits, vocab);
}

static dsv4_session *new_session(int64_t ctx)
{
    struct dsv4_err err = { "" };
    struct dsv4_session_opts o = { .max_ctx = ctx, .chunk = 16 };
    dsv4_session *s = NULL;
    if (dsv4_session_new(eng, &o, &s, &err) < 0)
        fail_msg("session: %s", err.msg);
    return s;
}

/* Generate N_GEN tokens after prompt p (ids past an EOS are -1); stats when st != NULL. */
static void generate(const struct prompt *p, dsv4_drafter *d, const struct dsv4_proposer *prop,
                     const struct dsv4_spec_opts *o, struct chooser *ch, int32_t *ids,
                     struct dsv4_spec_stats *st)
{
    struct dsv4_err err = { "" };
    dsv4_session *s = new_session(p->n + N_GEN + 8);
    if (d)
        dsv4_drafter_reset(d);
    dsv4_spec *sp = NULL;
    float *lg = dsv4_xmalloc((size_t)V * sizeof(float));
    if (dsv4_spec_new(s, d, prop, o, &sp, &err) < 0 ||
        dsv4_spec_feed(sp, p->tok, p->n, lg, &err) < 0)
        fail_msg("speculate: %s", err.msg);
    /* token 0 comes from the prompt's logits */
    ids[0] = choose(ch, lg, V, 0);
    int n = 1;
    while (n < N_GEN) {
        int32_t out[72];
        int k = dsv4_spec_step(sp, ids[n - 1], n - 1, N_GEN - n, choose, ch, out, &err);
        if (k < 0)
            fail_msg("step: %s", err.msg);
        assert_true(k >= 1 && k <= N_GEN - n);
        memcpy(ids + n, out, (size_t)k * sizeof(int32_t));
        n += k;
        if (ids[n - 1] == dsv4_engine_config(eng)->eos_token_id)
            break;
    }
    while (n < N_GEN)
        ids[n++] = -1;
    if (st)
        dsv4_spec_get_stats(sp, st);
    if (d && dsv4_spec_flush(sp, &err) < 0)
        fail_msg("flush: %s", err.msg);
    free(lg);
    dsv4_spec_free(sp);
    dsv4_session_free(s);
}

struct plain_run {
    int32_t ids[N_GEN];
    float *logits;
};

static void plain(const struct prompt *p, const struct dsv4_sampling *samp, struct plain_run *r)
{
    r->logits = dsv4_xmalloc((size_t)N_GEN * V * sizeof(float));
    struct chooser ch = { NULL, r->logits, samp, 0, 0 };
    struct dsv4_spec_opts off = { .off = true };
    generate(p, NULL, NULL, &off, &ch, r->ids, NULL);
}

static dsv4_drafter *new_drafter(void)
{
    struct dsv4_err err = { "" };
    dsv4_drafter *d = NULL;
    if (dsv4_drafter_new(eng, &d, &err) < 0)
        fail_msg("drafter: %s", err.msg);
    return d;
}

static void check_same(const char *what, int pi, const struct plain_run *r, const int32_t *ids,
                       const struct chooser *ch)
{
    int same = 0;
    while (same < N_GEN && ids[same] == r->ids[same])
        same++;
    if (same != N_GEN || ch->mismatches)
        print_message("# %s prompt %d: %d/%d ids equal, %d logits rows differ\n", what, pi,
                      same, N_GEN, ch->mismatches);
    assert_int_equal(same, N_GEN);
    assert_int_equal(ch->mismatches, 0);
}

/* The C drafter proposes: policy (with quench) and every fixed verify length. */
static void test_drafter_identity(void **state)
{
    (void)state;
    dsv4_drafter *d = new_drafter();
    int gamma = dsv4_drafter_block(d);
    uint64_t proposed = 0, accepted = 0, steps = 0;
    for (int pi = 0; pi < n_prompts; pi++) {
        struct plain_run r;
        plain(&prompts[pi], NULL, &r);
        for (int L = 0; L <= gamma; L++) {
            if (prompts[pi].n > 200 && L > 0 && L < gamma)
                continue;   /* the long prompt: policy and the whole block only (time) */
            struct chooser ch = { r.logits, NULL, NULL, 0, 0 };
            struct dsv4_spec_opts o = { .fixed_verify = L };
            struct dsv4_spec_stats st;
            int32_t ids[N_GEN];
            generate(&prompts[pi], d, NULL, &o, &ch, ids, &st);
            check_same(L ? "drafter fixed" : "drafter policy", pi, &r, ids, &ch);
            proposed += st.proposed;
            accepted += st.accepted;
            steps += st.verify_steps;
            if (L > 0)
                assert_true(st.verify_steps > 0);
        }
        free(r.logits);
    }
    print_message("# drafter: %llu verify steps, %llu proposed, %llu accepted\n",
                  (unsigned long long)steps, (unsigned long long)proposed,
                  (unsigned long long)accepted);
    dsv4_drafter_free(d);
}

/*
 * Replay proposer with an error at every token number that is a multiple of want + 1 (none for
 * want = γ): each step, its anchor at a multiple, accepts exactly `want` of γ drafts.
 */
static void test_partial_acceptance(void **state)
{
    (void)state;
    dsv4_drafter *d = new_drafter();
    int gamma = dsv4_drafter_block(d);
    int seen[65] = { 0 };
    for (int pi = 0; pi < n_prompts; pi++) {
        struct plain_run r;
        plain(&prompts[pi], NULL, &r);
        for (int want = 0; want <= gamma; want++) {
            int64_t errs[N_GEN + 8];
            int ne = 0;
            for (int t = want + 1; want < gamma && t < N_GEN + 8; t += want + 1)
                errs[ne++] = t;
            struct dsv4_replay_spec rs = { r.ids, N_GEN, errs, ne, false, -1, 0.9f, V };
            struct dsv4_proposer prop = dsv4_replay_proposer(&rs);
            struct dsv4_spec_opts o = { .fixed_verify = gamma };
            struct chooser ch = { r.logits, NULL, NULL, 0, 0 };
            struct dsv4_spec_stats st;
            int32_t ids[N_GEN];
            /* the drafter follows the committed rows though it does not propose */
            generate(&prompts[pi], d, &prop, &o, &ch, ids, &st);
            check_same("replay", pi, &r, ids, &ch);
            /* every step but possibly the last (cut by the token budget) accepts `want` */
            if (st.accepted < (uint64_t)want * (st.verify_steps - 1) ||
                st.accepted > (uint64_t)want * st.verify_steps)
                print_message("# prompt %d want %d: %llu accepted in %llu steps\n", pi, want,
                              (unsigned long long)st.accepted,
                              (unsigned long long)st.verify_steps);
            assert_true(st.verify_steps > 0);
            assert_true(st.accepted >= (uint64_t)want * (st.verify_steps - 1));
            assert_true(st.accepted <= (uint64_t)want * st.verify_steps);
            seen[want]++;
        }
        free(r.logits);
    }
    for (int k = 0; k <= gamma; k++) {
        print_message("# accepted %d of %d per step: %d runs\n", k, gamma, seen[k]);
        assert_true(seen[k] > 0);
    }
    dsv4_drafter_free(d);
}

/* Random agreement, verify lengths 2 and 5, greedy and sampling at temperature 1 (the short
 * prompts: the long ones ran above): same ids and rows. */
static void test_random_agreement_sampling(void **state)
{
    (void)state;
    struct dsv4_sampling samp = { .temperature = 1.0, .top_p = 1.0, .seed = 11 };
    for (int pi = 0; pi < n_prompts; pi++) {
        if (prompts[pi].n > 200)
            continue;
        for (int si = 0; si < 2; si++) {
            const struct dsv4_sampling *sm = si ? &samp : NULL;
            struct plain_run r;
            plain(&prompts[pi], sm, &r);
            for (int L = 2; L <= 5; L += 3) {
                struct dsv4_replay_spec rs = { r.ids, N_GEN, NULL, 0, false, 30 + 10 * L, 0.8f,
                                               V };
                struct dsv4_proposer prop = dsv4_replay_proposer(&rs);
                struct dsv4_spec_opts o = { .fixed_verify = L };
                struct chooser ch = { r.logits, NULL, sm, 0, 0 };
                int32_t ids[N_GEN];
                generate(&prompts[pi], NULL, &prop, &o, &ch, ids, NULL);
                check_same(sm ? "sampled" : "greedy", pi, &r, ids, &ch);
            }
            free(r.logits);
        }
    }
}

/* Policy and quench at 0 % agreement: speculation switches off, output unchanged. */
static void test_quench(void **state)
{
    (void)state;
    const struct prompt *p = &prompts[0];
    struct plain_run r;
    plain(p, NULL, &r);
    struct dsv4_replay_spec rs = { r.ids, N_GEN, NULL, 0, true, -1, 0.9f, V };
    struct dsv4_proposer prop = dsv4_replay_proposer(&rs);
    struct chooser ch = { r.logits, NULL, NULL, 0, 0 };
    struct dsv4_spec_stats st;
    int32_t ids[N_GEN];
    /* costs by rows, not the clock: a loaded machine must not change the verdict */
    struct dsv4_spec_opts o = { .rows_as_cost = true };
    generate(p, NULL, &prop, &o, &ch, ids, &st);
    check_same("quench", 0, &r, ids, &ch);
    print_message("# 0%% agreement: %llu verify steps, %llu plain, %llu quench events\n",
                  (unsigned long long)st.verify_steps, (unsigned long long)st.plain_steps,
                  (unsigned long long)st.quench_events);
    assert_int_equal(st.accepted, 0);
    assert_true(st.quench_events >= 1);
    assert_true(st.plain_steps > st.verify_steps);
    free(r.logits);
}

/* After speculation the drafter holds exactly the committed rows: same draft bitwise. */
static void test_drafter_ring(void **state)
{
    (void)state;
    const struct prompt *p = &prompts[n_prompts > 2 ? 2 : 0];
    struct plain_run r;
    plain(p, NULL, &r);
    dsv4_drafter *d = new_drafter(), *d2 = new_drafter();
    int gamma = dsv4_drafter_block(d);
    /* the drafter proposes (it commits at every step, partial acceptances included) */
    struct dsv4_spec_opts o = { .fixed_verify = gamma };
    struct chooser ch = { r.logits, NULL, NULL, 0, 0 };
    struct dsv4_spec_stats st;
    int32_t ids[N_GEN];
    generate(p, d, NULL, &o, &ch, ids, &st);
    assert_true(st.accepted > 0 && st.accepted < st.proposed);
    check_same("ring", 0, &r, ids, &ch);
    /* rebuild: the same committed tokens fed plainly */
    int n = p->n + N_GEN;
    int32_t *seq = dsv4_xmalloc((size_t)n * sizeof(int32_t));
    memcpy(seq, p->tok, (size_t)p->n * sizeof(int32_t));
    memcpy(seq + p->n, ids, (size_t)N_GEN * sizeof(int32_t));
    dsv4_session *s = new_session(n + 8);
    struct dsv4_spec *sp = NULL;
    struct dsv4_err err = { "" };
    float *lg = dsv4_xmalloc((size_t)V * sizeof(float));
    dsv4_drafter_reset(d2);
    /* generate() ran to N_GEN tokens: d holds the prompt and the tokens fed (not the last) */
    int64_t have = dsv4_drafter_pos(d);
    print_message("# drafter ring: %lld positions after speculation\n", (long long)have);
    assert_true(have < n);
    if (dsv4_spec_new(s, d2, NULL, NULL, &sp, &err) < 0 ||
        dsv4_spec_feed(sp, seq, (int)have, lg, &err) < 0 || dsv4_spec_flush(sp, &err) < 0)
        fail_msg("feed: %s", err.msg);
    assert_int_equal(dsv4_drafter_pos(d2), have);
    int32_t a1[64], a2[64];
    float c1[64], c2[64];
    if (dsv4_drafter_draft(d, seq[have], NULL, a1, c1, NULL, &err) < 0 ||
        dsv4_drafter_draft(d2, seq[have], NULL, a2, c2, NULL, &err) < 0)
        fail_msg("draft: %s", err.msg);
    assert_memory_equal(a1, a2, (size_t)gamma * sizeof(int32_t));
    assert_memory_equal(c1, c2, (size_t)gamma * sizeof(float));
    dsv4_spec_free(sp);
    dsv4_session_free(s);
    free(lg);
    free(seq);
    free(r.logits);
    dsv4_drafter_free(d);
    dsv4_drafter_free(d2);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test-speculate FIXTURE_DIR\n");
        return 2;
    }
    fixture = argv[1];
    char path[4096];
    snprintf(path, sizeof(path), "%s/goldens.json", fixture);
    gold = load_json_file("test-speculate", path);
    if (!gold)
        return 1;
    struct dsv4_err err = { "" };
    struct dsv4_engine_opts eo = { .dspark = true };
    if (dsv4_engine_open(fixture, &eo, &eng, &err) < 0) {
        fprintf(stderr, "test-speculate: %s\n", err.msg);
        return 1;
    }
    V = dsv4_engine_config(eng)->vocab_size;
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(gold, "prompts")) {
        if (n_prompts == 16)
            break;
        int plen = cJSON_GetObjectItemCaseSensitive(p, "prompt_len")->valueint;
        struct prompt *q = &prompts[n_prompts++];
        q->tok = dsv4_xmalloc((size_t)plen * sizeof(int32_t));
        q->n = plen;
        for (int i = 0; i < plen; i++)
            q->tok[i] = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(p, "tokens"), i)
                            ->valueint;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_drafter_identity),
        cmocka_unit_test(test_partial_acceptance),
        cmocka_unit_test(test_random_agreement_sampling),
        cmocka_unit_test(test_quench),
        cmocka_unit_test(test_drafter_ring),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    for (int i = 0; i < n_prompts; i++)
        free(prompts[i].tok);
    dsv4_engine_free(eng);
    cJSON_Delete(gold);
    return rc;
}
