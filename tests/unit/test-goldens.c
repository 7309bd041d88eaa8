/* SPDX-License-Identifier: MIT */
/*
 * The forward pass against the reference's goldens (tests/fixtures/NAME/
 * goldens.json, format in docs/numerics.md "Goldens"), by the rules of the
 * reference's own verdict():
 *   teacher forcing (chunked prefill, the goldens' chunk size): no argmax
 *   change at a position the ensemble marks stable; median and 90th
 *   percentile of |Δ log p(next token)| and the max |Δ logit| of the stored
 *   last-position logits within `factor` × the ensemble's own spread;
 *   greedy (prefill + one-token decode): the same ids as the goldens up to
 *   the first unstable step, or over the whole continuation with --exact.
 * The measured figures are printed as TAP comments.
 * Usage: test-goldens FIXTURE_DIR [--exact]
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

#include "engine.h"
#include "json-file.h"
#include "util.h"

static const char *fixture;
static bool exact_greedy;
static cJSON *gold;

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v))
        fail_msg("goldens: missing number %s", k);
    return v->valuedouble;
}

static const cJSON *arr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsArray(v))
        fail_msg("goldens: missing array %s", k);
    return v;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* numpy.percentile's default (linear interpolation) on sorted data */
static double percentile(const double *v, int n, double q)
{
    double pos = q / 100.0 * (n - 1);
    int lo = (int)floor(pos), hi = DSV4_MIN(lo + 1, n - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - lo);
}

static dsv4_engine *open_engine(void)
{
    struct dsv4_err err = { "" };
    dsv4_engine *e = NULL;
    if (dsv4_engine_open(fixture, NULL, &e, &err) < 0)
        fail_msg("engine open: %s", err.msg);
    return e;
}

static dsv4_session *new_session(dsv4_engine *e, int64_t ctx, int chunk)
{
    struct dsv4_err err = { "" };
    struct dsv4_session_opts o = { .max_ctx = ctx, .chunk = chunk };
    dsv4_session *s = NULL;
    if (dsv4_session_new(e, &o, &s, &err) < 0)
        fail_msg("session: %s", err.msg);
    return s;
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

/* Bound `v` by factor × the prompt's (or, in older goldens, the global) tolerance `k`. */
static bool within(const cJSON *tol, const char *k, double v, double factor, double *bound)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(tol, k);
    if (!cJSON_IsNumber(t)) {
        *bound = NAN;
        return true; /* not bounded for this prompt */
    }
    *bound = factor * t->valuedouble;
    return v <= *bound;
}

static void test_teacher_forcing(void **state)
{
    (void)state;
    dsv4_engine *e = open_engine();
    int vocab = dsv4_engine_config(e)->vocab_size;
    int chunk = (int)num(gold, "chunk");
    const cJSON *gtol = cJSON_GetObjectItemCaseSensitive(gold, "tolerances");
    const cJSON *gf = cJSON_GetObjectItemCaseSensitive(gold, "factor");
    double factor = cJSON_IsNumber(gf) ? gf->valuedouble : num(gtol, "factor");
    int n_bad = 0, tot_stable = 0, tot_flips = 0, tot_eq = 0, tot_pos = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, arr(gold, "prompts")) {
        int n, plen = (int)num(p, "prompt_len");
        int32_t *tok = ids_of(arr(p, "tokens"), &n);
        int m = n - 1; /* positions scored: logits of tokens[0..n-2] */
        float *lg = dsv4_xmalloc((size_t)m * vocab * sizeof(float));
        dsv4_session *s = new_session(e, n, chunk);
        struct dsv4_err err = { "" };
        if (dsv4_session_forward(s, tok, m, DSV4_LOGITS_ALL, lg, &err) < 0)
            fail_msg("forward: %s", err.msg);
        dsv4_session_free(s);
        const cJSON *am = arr(p, "argmax"), *st = arr(p, "stable"), *lp = arr(p, "logp");
        assert_int_equal(cJSON_GetArraySize(am), m);
        double *dlp = dsv4_xmalloc((size_t)m * sizeof(double));
        int n_stable = 0, flips = 0, n_eq = 0;
        for (int i = 0; i < m; i++) {
            const float *l = lg + (size_t)i * vocab;
            int a = dsv4_argmax(l, vocab), ga = cJSON_GetArrayItem(am, i)->valueint;
            n_eq += a == ga;
            if (cJSON_GetArrayItem(st, i)->valueint) {
                n_stable++;
                if (a != ga) {
                    flips++;
                    print_message("# flip: prompt_len %d pos %d engine %d golden %d\n", plen, i,
                                  a, ga);
                }
            }
            dlp[i] = fabs(dsv4_log_softmax_at(l, vocab, tok[i + 1]) -
                          cJSON_GetArrayItem(lp, i)->valuedouble);
        }
        qsort(dlp, (size_t)m, sizeof(double), cmp_double);
        double med = percentile(dlp, m, 50), p90 = percentile(dlp, m, 90), bm, b9, bl;
        const cJSON *tol = cJSON_GetObjectItemCaseSensitive(p, "tolerances");
        if (!tol)
            tol = gtol;
        bool ok = flips == 0;
        ok &= within(tol, "dlogp_median", med, factor, &bm);
        ok &= within(tol, "dlogp_p90", p90, factor, &b9);
        print_message("# prompt_len %d: %d positions, stable %d, flips %d, argmax equal %d; "
                      "|dlogp| median %.4g (bound %.4g) p90 %.4g (bound %.4g) max %.4g\n",
                      plen, m, n_stable, flips, n_eq, med, bm, p90, b9, dlp[m - 1]);
        const cJSON *ll = cJSON_GetObjectItemCaseSensitive(p, "last_logits");
        if (ll) {
            int k = plen - 1;
            double last = 0.0;
            assert_int_equal(cJSON_GetArraySize(ll), vocab);
            for (int v = 0; v < vocab; v++)
                last = fmax(last, fabs(lg[(size_t)k * vocab + v] -
                                       cJSON_GetArrayItem(ll, v)->valuedouble));
            ok &= within(tol, "last_logits_max", last, factor, &bl);
            print_message("#   last-position logits max |d| %.4g (bound %.4g)\n", last, bl);
        }
        n_bad += !ok;
        tot_stable += n_stable;
        tot_flips += flips;
        tot_eq += n_eq;
        tot_pos += m;
        free(dlp);
        free(lg);
        free(tok);
    }
    print_message("# %s: stable %d/%d, flips %d, argmax equal %d/%d, prompts out of bounds %d\n",
                  fixture, tot_stable, tot_pos, tot_flips, tot_eq, tot_pos, n_bad);
    assert_int_equal(n_bad, 0);
    dsv4_engine_free(e);
}

static void test_greedy(void **state)
{
    (void)state;
    dsv4_engine *e = open_engine();
    int vocab = dsv4_engine_config(e)->vocab_size;
    int chunk = (int)num(gold, "chunk"), ng = (int)num(gold, "n_greedy");
    float *lg = dsv4_xmalloc((size_t)vocab * sizeof(float));
    const cJSON *p;
    cJSON_ArrayForEach(p, arr(gold, "prompts")) {
        int n, plen = (int)num(p, "prompt_len"), prefix = (int)num(p, "greedy_stable_prefix");
        int32_t *tok = ids_of(arr(p, "tokens"), &n);
        assert_int_equal(n, plen + ng);
        dsv4_session *s = new_session(e, n, chunk);
        struct dsv4_err err = { "" };
        if (dsv4_session_forward(s, tok, plen, DSV4_LOGITS_LAST, lg, &err) < 0)
            fail_msg("forward: %s", err.msg);
        int same = 0;
        bool diverged = false;
        for (int k = 0; k < ng; k++) {
            int32_t t = dsv4_argmax(lg, vocab);
            diverged |= t != tok[plen + k];
            same += !diverged;
            if (k + 1 < ng && dsv4_session_forward(s, &t, 1, DSV4_LOGITS_LAST, lg, &err) < 0)
                fail_msg("forward: %s", err.msg);
        }
        print_message("# greedy prompt_len %d: %d/%d ids identical before the first "
                      "difference (stable prefix %d)\n", plen, same, ng, prefix);
        if (exact_greedy)
            assert_int_equal(same, ng);
        else
            assert_true(same >= prefix);
        dsv4_session_free(s);
        free(tok);
    }
    free(lg);
    dsv4_engine_free(e);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test-goldens FIXTURE_DIR [--exact]\n");
        return 2;
    }
    fixture = argv[1];
    exact_greedy = argc > 2 && strcmp(argv[2], "--exact") == 0;
    char path[4096];
    snprintf(path, sizeof(path), "%s/goldens.json", fixture);
    gold = load_json_file("test-goldens", path);
    if (!gold)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_teacher_forcing),
        cmocka_unit_test(test_greedy),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    cJSON_Delete(gold);
    return rc;
}
