/* SPDX-License-Identifier: MIT */
/*
 * The C drafter (daemons/compute/dspark.c) against the reference's drafter goldens
 * (tests/fixtures/tiny-dspark/dspark_goldens.json, tools/reference/dspark_goldens.py): per
 * context, the target's taps of the whole sequence are committed up to each block's P and one
 * block is drafted for the anchor seq[P]. Along the golden Markov chain, on the reference's
 * taps (TAPS_FILE, tools/reference/dspark_taps.py: the drafter alone), the corrected logits
 * and the confidence logits stay within the block's calibrated tolerances and the proposals
 * equal the golden ones at every slot marked stable; running free on the C target's own taps
 * (end to end), the proposals equal the golden ones up to the first unstable slot. Also:
 * commit/draft argument checks.
 * Usage: test-dspark FIXTURE_DIR TAPS_FILE
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

#include "dspark.h"
#include "json-file.h"
#include "util.h"

static const char *fixture;
static cJSON *gold;
static float *ref_taps;     /* the reference's taps of every context, in file order */
static size_t n_ref_taps;

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v))
        fail_msg("dspark goldens: missing number %s", k);
    return v->valuedouble;
}

static const cJSON *arr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsArray(v))
        fail_msg("dspark goldens: missing array %s", k);
    return v;
}

static int32_t *ids_of(const cJSON *a, int *n)
{
    *n = cJSON_GetArraySize(a);
    int32_t *t = dsv4_xmalloc((size_t)(*n ? *n : 1) * sizeof(int32_t));
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, a) t[i++] = (int32_t)x->valueint;
    return t;
}

static dsv4_engine *open_engine(void)
{
    struct dsv4_err err = { "" };
    dsv4_engine *e = NULL;
    struct dsv4_engine_opts eo = { .dspark = true };
    if (dsv4_engine_open(fixture, &eo, &e, &err) < 0)
        fail_msg("engine open: %s", err.msg);
    return e;
}

/* main_hidden rows of seq[0..n) from one chunked target forward */
static float *taps_of(dsv4_engine *e, dsv4_drafter *d, const int32_t *seq, int n)
{
    const struct dsv4_config *c = dsv4_engine_config(e);
    int nt;
    const int *taps = dsv4_drafter_taps(d, &nt);
    float *hidden = dsv4_xmalloc((size_t)n * nt * c->dim * sizeof(float));
    struct dsv4_capture cap = { taps, nt, hidden };
    struct dsv4_session_opts so = { .max_ctx = n, .chunk = 16 };
    struct dsv4_err err = { "" };
    dsv4_session *s = NULL;
    if (dsv4_session_new(e, &so, &s, &err) < 0 ||
        dsv4_session_forward_capture(s, seq, n, DSV4_LOGITS_NONE, NULL, &cap, &err) < 0)
        fail_msg("target forward: %s", err.msg);
    dsv4_session_free(s);
    return hidden;
}

static void run_goldens(bool free_running)
{
    dsv4_engine *e = open_engine();
    const struct dsv4_config *c = dsv4_engine_config(e);
    int V = c->vocab_size, g = c->dspark_block_size, dim = c->dim;
    struct dsv4_err err = { "" };
    dsv4_drafter *d = NULL;
    if (dsv4_drafter_new(e, &d, &err) < 0)
        fail_msg("drafter: %s", err.msg);
    assert_int_equal(dsv4_drafter_block(d), g);
    int nt;
    dsv4_drafter_taps(d, &nt);
    float *z = dsv4_xmalloc((size_t)g * V * sizeof(float));
    float cl[64];
    int32_t ids[64];
    int bad = 0, n_blocks = 0, n_stable = 0;
    size_t row0 = 0;
    const cJSON *ctx;
    cJSON_ArrayForEach(ctx, arr(gold, "contexts")) {
        int n;
        int32_t *seq = ids_of(arr(ctx, "tokens"), &n);
        float *hidden;
        if (free_running) {
            hidden = taps_of(e, d, seq, n);
        } else {
            size_t w = (size_t)nt * dim;
            assert_true((row0 + (size_t)n) * w <= n_ref_taps);
            hidden = dsv4_xmalloc((size_t)n * w * sizeof(float));
            memcpy(hidden, ref_taps + row0 * w, (size_t)n * w * sizeof(float));
            row0 += (size_t)n;
        }
        dsv4_drafter_reset(d);
        const cJSON *b;
        cJSON_ArrayForEach(b, arr(ctx, "blocks")) {
            int P = (int)num(b, "P"), nd;
            int32_t *want = ids_of(arr(b, "drafts"), &nd);
            assert_int_equal(nd, g);
            int64_t have = dsv4_drafter_pos(d);
            if (dsv4_drafter_commit(d, hidden + (size_t)have * nt * dim, P - (int)have, have,
                                    &err) < 0 ||
                dsv4_drafter_draft(d, seq[P], free_running ? NULL : want, ids, cl, z, &err) < 0)
                fail_msg("drafter: %s", err.msg);
            const cJSON *tol = cJSON_GetObjectItemCaseSensitive(b, "tolerances");
            const cJSON *st = arr(b, "stable");
            double dz = 0.0, dc = 0.0;
            const cJSON *lg = cJSON_GetObjectItemCaseSensitive(b, "logits");
            for (int i = 0; i < g; i++) {
                if (lg) {
                    const cJSON *row = cJSON_GetArrayItem(lg, i);
                    for (int v = 0; v < V; v++)
                        dz = fmax(dz, fabs(z[(size_t)i * V + v] -
                                           cJSON_GetArrayItem(row, v)->valuedouble));
                } else {
                    const cJSON *pr;
                    cJSON_ArrayForEach(pr, cJSON_GetArrayItem(arr(b, "logits_top"), i)) {
                        int v = cJSON_GetArrayItem(pr, 0)->valueint;
                        dz = fmax(dz, fabs(z[(size_t)i * V + v] -
                                           cJSON_GetArrayItem(pr, 1)->valuedouble));
                    }
                }
                dc = fmax(dc, fabs(cl[i] - cJSON_GetArrayItem(arr(b, "confidence_logit"), i)
                                               ->valuedouble));
            }
            bool ok = true;
            int same = 0;
            for (int i = 0; i < g; i++) {
                bool stable = cJSON_GetArrayItem(st, i)->valueint != 0;
                n_stable += stable && !free_running;
                if (free_running) {
                    /* free running: equal up to the first unstable slot */
                    if (!stable)
                        break;
                    ok &= ids[i] == want[i];
                } else if (stable) {
                    ok &= ids[i] == want[i];
                }
                same += ids[i] == want[i];
            }
            if (!free_running) {
                ok &= dz <= num(tol, "logits") && dc <= num(tol, "confidence_logit");
                print_message("# len %d P %d: max |dz| %.3g (tol %.3g), max |dconf| %.3g "
                              "(tol %.3g), drafts equal %d/%d\n",
                              (int)num(ctx, "prompt_len"), P, dz, num(tol, "logits"), dc,
                              num(tol, "confidence_logit"), same, g);
            }
            bad += !ok;
            n_blocks++;
            free(want);
        }
        free(hidden);
        free(seq);
    }
    print_message("# %s: %d blocks, %d stable slots, %d out of bounds\n",
                  free_running ? "free running" : "golden chain", n_blocks, n_stable, bad);
    assert_true(n_blocks > 0);
    assert_int_equal(bad, 0);
    free(z);
    dsv4_drafter_free(d);
    dsv4_engine_free(e);
}

static void test_golden_chain(void **state)
{
    (void)state;
    run_goldens(false);
}

static void test_free_running(void **state)
{
    (void)state;
    run_goldens(true);
}

static void test_bad_calls(void **state)
{
    (void)state;
    dsv4_engine *e = open_engine();
    struct dsv4_err err = { "" };
    dsv4_drafter *d = NULL;
    assert_int_equal(dsv4_drafter_new(e, &d, &err), 0);
    /* its own ring only: no target-layer state borrowed with its scratch */
    const struct dsv4_config *cf = dsv4_engine_config(e);
    assert_int_equal(dsv4_drafter_state_bytes(d),
                     (uint64_t)cf->dspark_stages * cf->window * cf->head_dim * sizeof(float));
    int32_t ids[64];
    /* nothing committed yet */
    assert_int_equal(dsv4_drafter_draft(d, 3, NULL, ids, NULL, NULL, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "committed"));
    const struct dsv4_config *c = dsv4_engine_config(e);
    int nt;
    dsv4_drafter_taps(d, &nt);
    float *h = dsv4_xcalloc((size_t)nt * c->dim, sizeof(float));
    assert_int_equal(dsv4_drafter_commit(d, h, 1, 5, &err), -EINVAL);   /* wrong position */
    assert_int_equal(dsv4_drafter_commit(d, h, 1, 0, &err), 0);
    assert_int_equal(dsv4_drafter_pos(d), 1);
    assert_int_equal(dsv4_drafter_draft(d, c->vocab_size, NULL, ids, NULL, NULL, &err),
                     -EINVAL);
    assert_int_equal(dsv4_drafter_draft(d, 3, NULL, ids, NULL, NULL, &err), 0);
    for (int i = 0; i < c->dspark_block_size; i++)
        assert_true(ids[i] >= 0 && ids[i] < c->vocab_size);
    free(h);
    dsv4_drafter_free(d);
    dsv4_engine_free(e);
}

static void test_no_drafter(void **state)
{
    (void)state;
    if (!getenv("DSV4_TEST_PLAIN_MODEL"))
        skip();
    struct dsv4_err err = { "" };
    dsv4_engine *e = NULL;
    /* a plain model: its engine opens, and has no drafter to make */
    if (dsv4_engine_open(getenv("DSV4_TEST_PLAIN_MODEL"), NULL, &e, &err) < 0)
        fail_msg("engine open: %s", err.msg);
    dsv4_drafter *d = NULL;
    assert_int_equal(dsv4_drafter_new(e, &d, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "dspark"));
    dsv4_engine_free(e);
    /* asking for the drafter at open is refused, naming it */
    struct dsv4_engine_opts eo = { .dspark = true };
    assert_int_equal(dsv4_engine_open(getenv("DSV4_TEST_PLAIN_MODEL"), &eo, &e, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "dspark"));
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: test-dspark FIXTURE_DIR TAPS_FILE\n");
        return 2;
    }
    fixture = argv[1];
    FILE *tf = fopen(argv[2], "rb");
    if (!tf) {
        fprintf(stderr, "test-dspark: cannot open %s: %s\n", argv[2], strerror(errno));
        return 1;
    }
    fseek(tf, 0, SEEK_END);
    long tlen = ftell(tf);
    fseek(tf, 0, SEEK_SET);
    n_ref_taps = (size_t)(tlen > 0 ? tlen : 0) / sizeof(float);
    ref_taps = dsv4_xmalloc((n_ref_taps ? n_ref_taps : 1) * sizeof(float));
    if (fread(ref_taps, sizeof(float), n_ref_taps, tf) != n_ref_taps) {
        fprintf(stderr, "test-dspark: short read of %s\n", argv[2]);
        return 1;
    }
    fclose(tf);
    char path[4096];
    snprintf(path, sizeof(path), "%s/dspark_goldens.json", fixture);
    gold = load_json_file("test-dspark", path);
    if (!gold)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_chain),
        cmocka_unit_test(test_free_running),
        cmocka_unit_test(test_bad_calls),
        cmocka_unit_test(test_no_drafter),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    cJSON_Delete(gold);
    free(ref_taps);
    return rc;
}
