/* SPDX-License-Identifier: MIT */
/*
 * Continuous batching is exact (issue 16): sessions forwarded together through
 * dsv4_engine_forward get bitwise the logits (and DSpark taps) each gets alone through
 * dsv4_session_forward. Checkpoint in argv[1]; run on every fixture, with the best and the
 * scalar kernels (tests/meson.build).
 *
 * The script: S sessions with different prompt lengths (shorter and longer than a chunk, so
 * a step splits them), joining at different steps; each then decodes greedily from its own
 * logits, one leaves early, one verifies a multi-row block (all rows' logits, as DSpark does)
 * and rolls back, and a late one prefills while the others decode. Every step's logits of
 * every session are compared with a solo replay of that session's own calls.
 */
#include <errno.h>
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
#include "util.h"

#define S 5
#define STEPS 14
#define MAXROWS 200

static const char *model_dir;
static int vocab;

static dsv4_engine *open_engine(int threads, int step_rows, bool dspark)
{
    struct dsv4_err err = { "" };
    struct dsv4_engine_opts o = { .n_threads = threads, .step_rows = step_rows, .dspark = dspark };
    dsv4_engine *e = NULL;
    if (dsv4_engine_open(model_dir, &o, &e, &err) < 0)
        fail_msg("engine open: %s", err.msg);
    return e;
}

static dsv4_session *new_session(dsv4_engine *e, int chunk)
{
    struct dsv4_err err = { "" };
    struct dsv4_session_opts o = { .max_ctx = 400, .chunk = chunk, .max_rollback = 16 };
    dsv4_session *s = NULL;
    if (dsv4_session_new(e, &o, &s, &err) < 0)
        fail_msg("session: %s", err.msg);
    return s;
}

/* One session's call in one step: rows, mode, and a rollback before it (or -1). */
struct call {
    int32_t toks[MAXROWS];
    int n;
    enum dsv4_logits_mode mode;
    int64_t rollback_to;
};

/* The script, derived as the batched run goes (decode tokens come from its logits). */
static struct call script[STEPS][S];
static float *logits_b[STEPS][S];   /* batched results */

static uint32_t rng = 2024;
static int32_t rand_tok(void)
{
    rng = rng * 1103515245u + 12345u;
    return (int32_t)(2 + (rng >> 8) % (uint32_t)(vocab - 2));
}

static size_t rows_out(const struct call *c)
{
    return c->mode == DSV4_LOGITS_ALL ? (size_t)c->n : c->mode == DSV4_LOGITS_LAST ? 1 : 0;
}

/* Build the step-t calls: prompt lengths 3, 70, 1, 131, 9; joins at steps 0, 0, 2, 1, 6. */
static void plan_step(int t, dsv4_session **ss)
{
    static const int prompt[S] = { 3, 70, 1, 131, 9 };
    static const int join[S] = { 0, 0, 2, 1, 6 };
    static const int leave[S] = { STEPS, STEPS, 9, STEPS, STEPS };
    for (int i = 0; i < S; i++) {
        struct call *c = &script[t][i];
        memset(c, 0, sizeof(*c));
        c->rollback_to = -1;
        if (t < join[i] || t >= leave[i])
            continue;
        if (t == join[i]) {
            c->n = prompt[i];
            for (int k = 0; k < c->n; k++)
                c->toks[k] = rand_tok();
            c->mode = i == 3 ? DSV4_LOGITS_ALL : DSV4_LOGITS_LAST;  /* scoring-like for 3 */
            continue;
        }
        /* decode: the argmax of the last step's last row */
        const struct call *p = NULL;
        int pt = t - 1;
        for (; pt >= 0; pt--)
            if (script[pt][i].n) {
                p = &script[pt][i];
                break;
            }
        assert_non_null(p);
        const float *lg = logits_b[pt][i] + (rows_out(p) - 1) * (size_t)vocab;
        c->toks[0] = dsv4_argmax(lg, vocab);
        c->n = 1;
        c->mode = DSV4_LOGITS_LAST;
        if (i == 0 && t % 4 == 3) {    /* a DSpark-like verify block, then a rollback */
            c->n = 5;
            for (int k = 1; k < c->n; k++)
                c->toks[k] = rand_tok();
            c->mode = DSV4_LOGITS_ALL;
        }
        if (i == 0 && p->n == 5)    /* keep 2 of the block's 5 rows */
            c->rollback_to = dsv4_session_pos(ss[i]) - 3;
    }
}

static void run_batched(dsv4_engine *e, int chunk)
{
    dsv4_session *ss[S];
    for (int i = 0; i < S; i++)
        ss[i] = new_session(e, chunk);
    for (int t = 0; t < STEPS; t++) {
        plan_step(t, ss);
        struct dsv4_forward_item items[S];
        int n = 0;
        for (int i = 0; i < S; i++) {
            struct call *c = &script[t][i];
            free(logits_b[t][i]);
            logits_b[t][i] = NULL;
            if (!c->n)
                continue;
            struct dsv4_err err = { "" };
            if (c->rollback_to >= 0 && dsv4_session_rollback(ss[i], c->rollback_to, &err) < 0)
                fail_msg("rollback: %s", err.msg);
            logits_b[t][i] = dsv4_xmalloc(rows_out(c) * vocab * sizeof(float));
            /* the order of items varies with the step: it must not matter */
            int at = (t % 2) ? n : 0;
            if (at == 0)
                memmove(items + 1, items, (size_t)n * sizeof(items[0]));
            items[at] = (struct dsv4_forward_item){ ss[i], c->toks, c->n, c->mode,
                                                    logits_b[t][i], NULL, NULL, NULL };
            n++;
        }
        struct dsv4_err err = { "" };
        if (n && dsv4_engine_forward(e, items, n, &err) < 0)
            fail_msg("step %d: %s", t, err.msg);
    }
    for (int i = 0; i < S; i++)
        dsv4_session_free(ss[i]);
}

/* Each session alone, the same calls: bitwise the batched logits. */
static void check_solo(dsv4_engine *e, int chunk)
{
    for (int i = 0; i < S; i++) {
        dsv4_session *s = new_session(e, chunk);
        for (int t = 0; t < STEPS; t++) {
            const struct call *c = &script[t][i];
            if (!c->n)
                continue;
            struct dsv4_err err = { "" };
            if (c->rollback_to >= 0 && dsv4_session_rollback(s, c->rollback_to, &err) < 0)
                fail_msg("rollback: %s", err.msg);
            size_t m = rows_out(c) * vocab;
            float *lg = dsv4_xmalloc(m * sizeof(float));
            if (dsv4_session_forward(s, c->toks, c->n, c->mode, lg, &err) < 0)
                fail_msg("solo forward: %s", err.msg);
            if (memcmp(lg, logits_b[t][i], m * sizeof(float)) != 0)
                fail_msg("session %d step %d (%d rows): batched logits differ from solo", i, t,
                         c->n);
            free(lg);
        }
        dsv4_session_free(s);
    }
}

static void test_batched_equals_solo(void **state)
{
    (void)state;
    /* step rows 64 (a 131-row prompt splits over steps), 16 (every step is split), and a
     * session chunk of 7 (items split inside the step) */
    static const struct { int step_rows, chunk, threads; } cfg[] = {
        { 0, 0, 1 }, { 16, 0, 2 }, { 0, 7, 1 },
    };
    for (size_t k = 0; k < DSV4_ARRAY_SIZE(cfg); k++) {
        rng = 2024 + (uint32_t)k;
        dsv4_engine *e = open_engine(cfg[k].threads, cfg[k].step_rows, false);
        run_batched(e, cfg[k].chunk);
        dsv4_engine_free(e);
        /* solo on a fresh engine: nothing shared with the batched run */
        e = open_engine(cfg[k].threads, cfg[k].step_rows, false);
        check_solo(e, cfg[k].chunk);
        dsv4_engine_free(e);
    }
}

/* Where a batched capture's step rows go: on_chunk copies them to their place. */
struct taps {
    const struct dsv4_capture *cap;
    float *all;             /* [n][n_layers*dim] */
    size_t w;               /* floats per row */
    int calls;
};

static void on_chunk(void *ctx, int64_t pos, int n)
{
    struct taps *t = ctx;
    memcpy(t->all + (size_t)pos * t->w, t->cap->hidden, (size_t)n * t->w * sizeof(float));
    t->calls++;
}

/* A capture (the DSpark taps) per item and per step: the same rows as a solo capture. */
static void test_batched_capture(void **state)
{
    (void)state;
    dsv4_engine *e = open_engine(1, 16, false);
    const struct dsv4_config *c = dsv4_engine_config(e);
    int layers[2] = { 0, c->n_layers - 1 }, nl = c->n_layers > 1 ? 2 : 1;
    int n[2] = { 37, 5 };
    size_t w = (size_t)nl * c->dim;
    int32_t toks[2][40];
    for (int j = 0; j < 2; j++)
        for (int k = 0; k < n[j]; k++)
            toks[j][k] = rand_tok();
    struct dsv4_capture cap[2];
    struct taps tp[2];
    struct dsv4_forward_item items[2];
    dsv4_session *ss[2];
    float *lg[2];
    for (int j = 0; j < 2; j++) {
        ss[j] = new_session(e, 0);
        lg[j] = dsv4_xmalloc((size_t)vocab * sizeof(float));
        cap[j] = (struct dsv4_capture){ layers, nl, dsv4_xcalloc(64 * w, sizeof(float)) };
        tp[j] = (struct taps){ &cap[j], dsv4_xcalloc(n[j] * w, sizeof(float)), w, 0 };
        items[j] = (struct dsv4_forward_item){ ss[j], toks[j], n[j], DSV4_LOGITS_LAST, lg[j],
                                               &cap[j], on_chunk, &tp[j] };
    }
    struct dsv4_err err = { "" };
    if (dsv4_engine_forward(e, items, 2, &err) < 0)
        fail_msg("batched capture: %s", err.msg);
    assert_int_equal(tp[0].calls, 3);   /* 37 rows in steps of at most 16 */
    for (int j = 0; j < 2; j++) {
        dsv4_session *s = new_session(e, 0);
        float *hid = dsv4_xcalloc(n[j] * w, sizeof(float));
        float *l1 = dsv4_xmalloc((size_t)vocab * sizeof(float));
        struct dsv4_capture sc = { layers, nl, hid };
        if (dsv4_session_forward_capture(s, toks[j], n[j], DSV4_LOGITS_LAST, l1, &sc, &err) < 0)
            fail_msg("solo capture: %s", err.msg);
        assert_memory_equal(hid, tp[j].all, n[j] * w * sizeof(float));
        assert_memory_equal(l1, lg[j], (size_t)vocab * sizeof(float));
        free(hid);
        free(l1);
        dsv4_session_free(s);
        dsv4_session_free(ss[j]);
        free(lg[j]);
        free((void *)cap[j].hidden);
        free(tp[j].all);
    }
    dsv4_engine_free(e);
}

/* Refusals name the item; nothing runs when one item is bad. */
static void test_batch_errors(void **state)
{
    (void)state;
    dsv4_engine *e = open_engine(1, 0, false);
    dsv4_session *a = new_session(e, 0), *b = new_session(e, 0);
    int32_t good[2] = { 2, 3 }, bad[1] = { vocab };
    float *out = dsv4_xmalloc((size_t)vocab * sizeof(float));
    struct dsv4_err err = { "" };
    struct dsv4_forward_item it[2] = {
        { a, good, 2, DSV4_LOGITS_LAST, out, NULL, NULL, NULL },
        { b, bad, 1, DSV4_LOGITS_LAST, out, NULL, NULL, NULL },
    };
    assert_int_equal(dsv4_engine_forward(e, it, 2, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "item 1"));
    assert_int_equal(dsv4_session_pos(a), 0);
    it[1] = it[0];      /* one session twice */
    assert_int_equal(dsv4_engine_forward(e, it, 2, &err), -EINVAL);
    assert_int_equal(dsv4_session_pos(a), 0);
    assert_int_equal(dsv4_engine_forward(e, it, 0, &err), -EINVAL);
    it[1] = (struct dsv4_forward_item){ b, good, 2, DSV4_LOGITS_NONE, NULL, NULL, NULL, NULL };
    assert_int_equal(dsv4_engine_forward(e, it, 2, &err), 0);
    assert_int_equal(dsv4_session_pos(a), 2);
    assert_int_equal(dsv4_session_pos(b), 2);
    free(out);
    dsv4_session_free(a);
    dsv4_session_free(b);
    dsv4_engine_free(e);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test-batch MODEL_DIR\n");
        return 2;
    }
    model_dir = argv[1];
    fprintf(stdout, "# kernels: %s\n", dsv4_kernel_ops()->name);
    dsv4_engine *e = open_engine(1, 0, false);
    vocab = dsv4_engine_config(e)->vocab_size;
    dsv4_engine_free(e);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched_equals_solo),
        cmocka_unit_test(test_batched_capture),
        cmocka_unit_test(test_batch_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
