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

static void test_teacher_forcing(void **state)
{
    (void)state;
    dsv4_engine *e = open_engine();
    int vocab = dsv4_engine_config(e)->vocab_size;
    int chunk = (int)num(gold, "chunk");
    const cJSON *tol = cJSON_GetObjectItemCaseSensitive(gold, "tolerances");
    double factor = num(tol, "factor");
    double *dlp = NULL;
    int n_dlp = 0, n_stable = 0, flips = 0, n_argmax_eq = 0, n_pos = 0;
    double last_max = 0.0;
    bool have_last = false;
    const cJSON *p;
    cJSON_ArrayForEach(p, arr(gold, "prompts")) {
        int n;
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
        dlp = dsv4_xrealloc(dlp, (size_t)(n_dlp + m) * sizeof(double));
        for (int i = 0; i < m; i++) {
            const float *l = lg + (size_t)i * vocab;
            int a = dsv4_argmax(l, vocab), ga = cJSON_GetArrayItem(am, i)->valueint;
            n_pos++;
            n_argmax_eq += a == ga;
            if (cJSON_GetArrayItem(st, i)->valueint) {
                n_stable++;
                if (a != ga) {
                    flips++;
                    print_message("# flip: prompt_len %d pos %d engine %d golden %d\n",
                                  (int)num(p, "prompt_len"), i, a, ga);
                }
            }
            double g = cJSON_GetArrayItem(lp, i)->valuedouble;
            dlp[n_dlp++] = fabs(dsv4_log_softmax_at(l, vocab, tok[i + 1]) - g);
        }
        const cJSON *ll = cJSON_GetObjectItemCaseSensitive(p, "last_logits");
        if (ll) {
            int k = (int)num(p, "prompt_len") - 1;
            assert_int_equal(cJSON_GetArraySize(ll), vocab);
            for (int v = 0; v < vocab; v++)
                last_max = fmax(last_max, fabs(lg[(size_t)k * vocab + v] -
                                               cJSON_GetArrayItem(ll, v)->valuedouble));
            have_last = true;
        }
        free(lg);
        free(tok);
    }
    qsort(dlp, (size_t)n_dlp, sizeof(double), cmp_double);
    double med = percentile(dlp, n_dlp, 50), p90 = percentile(dlp, n_dlp, 90);
    print_message("# %s: stable positions %d/%d, stable argmax flips %d, argmax equal at all "
                  "positions %d/%d\n", fixture, n_stable, n_pos, flips, n_argmax_eq, n_pos);
    print_message("# |dlogp| median %.4g (bound %.4g), p90 %.4g (bound %.4g), max %.4g\n", med,
                  factor * num(tol, "dlogp_median"), p90, factor * num(tol, "dlogp_p90"),
                  dlp[n_dlp - 1]);
    if (have_last)
        print_message("# last-position logits max |d| %.4g (bound %.4g)\n", last_max,
                      factor * num(tol, "last_logits_max"));
    assert_int_equal(flips, 0);
    assert_true(med <= factor * num(tol, "dlogp_median"));
    assert_true(p90 <= factor * num(tol, "dlogp_p90"));
    assert_true(!have_last || last_max <= factor * num(tol, "last_logits_max"));
    free(dlp);
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
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "test-goldens: cannot open %s: %s\n", path, strerror(errno));
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = dsv4_xmalloc((size_t)len + 1);
    size_t got = fread(text, 1, (size_t)len, f);
    fclose(f);
    text[got] = 0;
    gold = cJSON_Parse(text);
    free(text);
    if (!gold) {
        fprintf(stderr, "test-goldens: %s is not JSON\n", path);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_teacher_forcing),
        cmocka_unit_test(test_greedy),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    cJSON_Delete(gold);
    return rc;
}
