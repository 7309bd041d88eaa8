/* SPDX-License-Identifier: MIT */
/*
 * The C target layer by layer against the reference (tools/reference/layer_hidden.py): for
 * every golden prompt, the hidden state after every layer (mHC streams averaged, bf16) is
 * compared bit for bit. Both sides round to bf16 at the same places, so they agree exactly
 * until an fp32 accumulation of the C kernels (fixed 16-lane fold) and the reference's
 * float64 one land on opposite sides of a bf16 rounding midpoint; from there the tiny random
 * model amplifies the difference. Such flips are rare (about one per few hundred positions on
 * these fixtures); a defect makes them common (the fp32 running sum of the mHC mix, fixed in
 * mhc.c, diverged within 2-38 positions on every prompt). Verdict: at least half of the prompts
 * agree bitwise at every layer over their first MIN_EXACT positions (or the whole prompt).
 * The first divergence (layer, position, max |Δ|) of every prompt is printed as a TAP comment.
 * Usage: test-layers FIXTURE_DIR REF_FILE
 */
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

enum { MIN_EXACT = 32 };

static const char *fixture, *ref_path;

static float *read_ref(size_t *n_floats)
{
    FILE *f = fopen(ref_path, "rb");
    if (!f)
        fail_msg("cannot open %s", ref_path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    *n_floats = (size_t)(len > 0 ? len : 0) / sizeof(float);
    float *v = dsv4_xmalloc((*n_floats ? *n_floats : 1) * sizeof(float));
    if (fread(v, sizeof(float), *n_floats, f) != *n_floats)
        fail_msg("short read of %s", ref_path);
    fclose(f);
    return v;
}

static void test_layers(void **state)
{
    (void)state;
    char path[4096];
    snprintf(path, sizeof(path), "%s/goldens.json", fixture);
    cJSON *gold = load_json_file("test-layers", path);
    assert_non_null(gold);
    struct dsv4_err err = { "" };
    dsv4_engine *e = NULL;
    if (dsv4_engine_open(fixture, NULL, &e, &err) < 0)
        fail_msg("engine open: %s", err.msg);
    const struct dsv4_config *c = dsv4_engine_config(e);
    int L = c->n_layers, dim = c->dim;
    int *layers = dsv4_xmalloc((size_t)L * sizeof(int));
    for (int l = 0; l < L; l++)
        layers[l] = l;
    size_t n_ref;
    float *ref = read_ref(&n_ref);
    size_t row0 = 0;
    int n_prompts = 0, n_exact = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(gold, "prompts")) {
        const cJSON *toks = cJSON_GetObjectItemCaseSensitive(p, "tokens");
        int n = cJSON_GetArraySize(toks);
        assert_true(n > 0);
        int32_t *seq = dsv4_xmalloc((size_t)n * sizeof(int32_t));
        for (int i = 0; i < n; i++)
            seq[i] = cJSON_GetArrayItem(toks, i)->valueint;
        size_t w = (size_t)L * dim;
        assert_true((row0 + (size_t)n) * w <= n_ref);
        float *hidden = dsv4_xmalloc((size_t)n * w * sizeof(float));
        struct dsv4_capture cap = { layers, L, hidden };
        struct dsv4_session_opts so = { .max_ctx = n, .chunk = 16 };
        dsv4_session *s = NULL;
        if (dsv4_session_new(e, &so, &s, &err) < 0 ||
            dsv4_session_forward_capture(s, seq, n, DSV4_LOGITS_NONE, NULL, &cap, &err) < 0)
            fail_msg("forward: %s", err.msg);
        dsv4_session_free(s);
        /* first position with any layer off, and there the first such layer */
        int first = n, first_layer = -1;
        double dmax = 0.0;
        for (int t = 0; t < n && first == n; t++)
            for (int l = 0; l < L; l++) {
                const float *a = hidden + ((size_t)t * L + l) * dim;
                const float *b = ref + ((row0 + (size_t)t) * L + l) * dim;
                if (memcmp(a, b, (size_t)dim * sizeof(float)) == 0)
                    continue;
                for (int k = 0; k < dim; k++)
                    dmax = fmax(dmax, fabs((double)a[k] - b[k]));
                first = t;
                first_layer = l;
                break;
            }
        bool exact = first >= DSV4_MIN(n, MIN_EXACT);
        if (first < n)
            print_message("# prompt %d (%d tokens): first difference at position %d, layer %d, "
                          "max |d| %.3g%s\n", n_prompts, n, first, first_layer, dmax,
                          exact ? "" : " (early)");
        else
            print_message("# prompt %d (%d tokens): every layer bitwise equal\n", n_prompts, n);
        n_exact += exact;
        n_prompts++;
        row0 += (size_t)n;
        free(hidden);
        free(seq);
    }
    assert_int_equal(row0 * (size_t)L * dim, n_ref);
    print_message("# %d of %d prompts bitwise equal over their first %d positions\n", n_exact,
                  n_prompts, MIN_EXACT);
    assert_true(n_prompts > 0);
    assert_true(2 * n_exact >= n_prompts);
    free(ref);
    free(layers);
    dsv4_engine_free(e);
    cJSON_Delete(gold);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: test-layers FIXTURE_DIR REF_FILE\n");
        return 2;
    }
    fixture = argv[1];
    ref_path = argv[2];
    const struct CMUnitTest tests[] = { cmocka_unit_test(test_layers) };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
