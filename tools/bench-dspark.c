/* SPDX-License-Identifier: MIT */
/*
 * DSpark speculative decoding benchmark, in one process (engine loaded once; configurations
 * interleaved and repeated, the best repetition kept, so a noisy shared machine distorts less):
 *   - plain decode: time per step, routed-expert leases per step;
 *   - verify steps of 1 + k rows (test-only replay proposer at 100 % agreement, fixed k, no
 *     quench): time and expert leases relative to a plain step, and the break-even acceptance
 *     a* with 1 + a + … + a^k = that cost;
 *   - tokens/s with DSpark on ÷ off at 0, 50, 90 % agreement (replay proposer, policy and
 *     quench on), without and with the drafter run (and discarded) at every proposal;
 *   - with --trained, instead: the model's own drafter on a real prompt (--prompt-ids), at
 *     temperature 0 and 0.7 (seeded): on ÷ off speed under the policy and at a fixed verify
 *     length of gamma without quench, tokens per verify step, and acceptance per draft
 *     position (the share of verify steps whose first j drafts were all accepted).
 * Every speculative run must print the plain run's ids (checked). Figures: docs/benchmarks.md.
 * Usage: bench-dspark MODEL_DIR [--tokens N] [--prompt-len P | --prompt-ids ID,ID,..]
 *                    [--threads T] [--reps R] [--cache-mib M] [--ks 1,3,5] [--trained]
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampling.h"
#include "speculate.h"
#include "parse.h"
#include "util.h"

static int n_tok = 24, plen = 4, threads = 2, reps = 2, cache_mib = 0;
static int32_t prompt[4096];
static dsv4_engine *eng;
static struct dsv4_sampling samp;   /* temperature 0: greedy */

/* The choice `dsv4ctl run` makes for generated token number `index`. */
static int32_t choose(void *ctx, const float *logits, int vocab, int64_t index)
{
    return dsv4_sample(logits, vocab, ctx, (uint64_t)index);
}

struct result {
    double secs;            /* decode time (after the first token) */
    uint64_t leases;        /* routed-expert leases during decode */
    int steps;
    struct dsv4_spec_stats st;
    /* verify steps whose first j drafts were proposed / all accepted, j = 1..gamma */
    uint64_t prop_ge[DSV4_SPEC_MAX_GAMMA + 1], acc_ge[DSV4_SPEC_MAX_GAMMA + 1];
};

static uint64_t leases_now(void)
{
    struct dsv4_expert_cache_stats es;
    return dsv4_engine_expert_stats(eng, &es) == 0 ? es.hits + es.misses : 0;
}

static void die(const char *what, const struct dsv4_err *err)
{
    fprintf(stderr, "bench-dspark: %s: %s\n", what, err->msg);
    exit(1);
}

/* One generation of n_tok tokens; ids out (for the plain run), checked against want. */
static struct result generate(dsv4_drafter *d, const struct dsv4_proposer *p,
                              const struct dsv4_spec_opts *o, int32_t *ids, const int32_t *want)
{
    struct dsv4_err err = { "" };
    struct dsv4_session_opts so = { .max_ctx = plen + n_tok + 8 };
    dsv4_session *s = NULL;
    dsv4_spec *sp = NULL;
    int V = dsv4_engine_config(eng)->vocab_size;
    float *lg = dsv4_xmalloc((size_t)V * sizeof(float));
    if (d)
        dsv4_drafter_reset(d);
    if (dsv4_session_new(eng, &so, &s, &err) < 0 || dsv4_spec_new(s, d, p, o, &sp, &err) < 0 ||
        dsv4_spec_feed(sp, prompt, plen, lg, &err) < 0)
        die("prefill", &err);
    ids[0] = dsv4_sample(lg, V, &samp, 0);
    struct result r = { 0 };
    uint64_t l0 = leases_now(), t0 = dsv4_now_ns();
    struct dsv4_spec_stats before, after;
    dsv4_spec_get_stats(sp, &before);
    for (int n = 1; n < n_tok;) {
        int32_t out[80];
        int k = dsv4_spec_step(sp, ids[n - 1], n - 1, n_tok - n, choose, &samp, out, &err);
        if (k < 0)
            die("step", &err);
        memcpy(ids + n, out, (size_t)k * sizeof(int32_t));
        n += k;
        r.steps++;
        /* the counters are cheap to read: one verify step's proposals and acceptances */
        dsv4_spec_get_stats(sp, &after);
        uint64_t prop = after.proposed - before.proposed, acc = after.accepted - before.accepted;
        for (uint64_t j = 1; j <= prop && j <= DSV4_SPEC_MAX_GAMMA; j++) {
            r.prop_ge[j]++;
            r.acc_ge[j] += j <= acc;
        }
        before = after;
    }
    r.secs = (double)(dsv4_now_ns() - t0) / 1e9;
    r.leases = leases_now() - l0;
    dsv4_spec_get_stats(sp, &r.st);
    if (want && memcmp(ids, want, (size_t)n_tok * sizeof(int32_t)) != 0) {
        fprintf(stderr, "bench-dspark: speculation changed the output\n");
        exit(1);
    }
    dsv4_spec_free(sp);
    dsv4_session_free(s);
    free(lg);
    return r;
}

static void keep_best(struct result *best, const struct result *r)
{
    if (best->steps == 0 || r->secs < best->secs)
        *best = *r;
}

/* acceptance a with 1 + a + ... + a^k = cost; -1 when even a = 1 loses */
static double break_even(int k, double cost)
{
    if (cost > k + 1)
        return -1;
    double lo = 0, hi = 1;
    for (int it = 0; it < 60; it++) {
        double mid = (lo + hi) / 2, sum = 0;
        for (int j = 0; j <= k; j++)
            sum += pow(mid, j);
        if (sum < cost)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* The model's own drafter on the prompt, at temperature 0 and 0.7: plain, policy, fixed gamma. */
static void trained(dsv4_drafter *d, int gamma)
{
    const double temps[2] = { 0.0, 0.7 };
    int32_t *want = dsv4_xmalloc((size_t)n_tok * sizeof(int32_t));
    int32_t *ids = dsv4_xmalloc((size_t)n_tok * sizeof(int32_t));
    const struct dsv4_spec_opts off = { .off = true }, policy = { 0 },
                                fixed = { .fixed_verify = gamma, .no_quench = true };
    printf("| temperature | DSpark | on / off | tok/s | verify steps | tokens / verify step "
           "| accepted / proposed | quench events | acceptance at draft position 1..%d |\n"
           "|---|---|---|---|---|---|---|---|---|\n", gamma);
    for (int t = 0; t < 2; t++) {
        samp = (struct dsv4_sampling){ .temperature = temps[t], .top_p = 1.0, .seed = 7 };
        struct result plain = { 0 }, res[2] = { { 0 } };
        generate(NULL, NULL, &off, want, NULL);     /* warm-up, and the ids to reproduce */
        for (int rep = 0; rep < reps; rep++) {
            struct result r = generate(NULL, NULL, &off, ids, want);
            keep_best(&plain, &r);
            for (int m = 0; m < 2; m++) {
                r = generate(d, NULL, m ? &fixed : &policy, ids, want);
                keep_best(&res[m], &r);
            }
        }
        printf("| %.1f | off | 1.00× | %.2f | — | 1 | — | — | — |\n", temps[t],
               (n_tok - 1) / plain.secs);
        for (int m = 0; m < 2; m++) {
            const struct result *r = &res[m];
            printf("| %.1f | %s | %.2f× | %.2f | %llu | %.2f | %llu / %llu | %llu |", temps[t],
                   m ? "verify gamma, no quench" : "policy", plain.secs / r->secs,
                   (n_tok - 1) / r->secs, (unsigned long long)r->st.verify_steps,
                   r->st.verify_steps ? (double)(r->st.accepted + r->st.verify_steps) /
                                            (double)r->st.verify_steps : 0.0,
                   (unsigned long long)r->st.accepted, (unsigned long long)r->st.proposed,
                   (unsigned long long)r->st.quench_events);
            for (int j = 1; j <= gamma && j <= DSV4_SPEC_MAX_GAMMA; j++)
                printf(" %.2f",
                       r->prop_ge[j] ? (double)r->acc_ge[j] / (double)r->prop_ge[j] : NAN);
            printf(" |\n");
        }
    }
    free(want);
    free(ids);
}

/* "0,5,9" -> prompt[], plen; false if malformed or too long. */
static bool parse_ids(const char *s)
{
    plen = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > INT32_MAX || plen == (int)(sizeof(prompt) / sizeof(prompt[0])))
            return false;
        prompt[plen++] = (int32_t)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return false;
    }
    return plen > 0;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *ks_arg = "1,3,5";
    bool given = false, want_trained = false;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(argv[i], "--tokens"))
            n_tok = dsv4_parse_int_or_exit("--tokens", v, 1, 1048576), i++;
        else if (!strcmp(argv[i], "--prompt-len"))
            plen = dsv4_parse_int_or_exit("--prompt-len", v, 1, 4096), i++;
        else if (!strcmp(argv[i], "--threads"))
            threads = dsv4_parse_int_or_exit("--threads", v, 1, 4096), i++;
        else if (!strcmp(argv[i], "--reps"))
            reps = dsv4_parse_int_or_exit("--reps", v, 1, 1000), i++;
        else if (!strcmp(argv[i], "--cache-mib"))
            cache_mib = dsv4_parse_int_or_exit("--cache-mib", v, 1, 16777216), i++;
        else if (!strcmp(argv[i], "--ks"))
            ks_arg = v, i++;
        else if (!strcmp(argv[i], "--prompt-ids")) {
            if (!parse_ids(v))
                return 64;
            given = true, i++;
        } else if (!strcmp(argv[i], "--trained"))
            want_trained = true;
        else if (argv[i][0] != '-' && !model)
            model = argv[i];
        else {
            fprintf(stderr, "usage: bench-dspark MODEL_DIR [--tokens N] [--prompt-len P | "
                            "--prompt-ids ID,ID,..] [--threads T] [--reps R] [--cache-mib M] "
                            "[--ks 1,3,5] [--trained]\n");
            return 64;
        }
    }
    if (!model || n_tok < 2 || plen < 1 || plen > 4096 || reps < 1 || threads < 1)
        return 64;
    struct dsv4_err err = { "" };
    struct dsv4_engine_opts eo = { .n_threads = threads,
                                   .expert_cache_bytes = (uint64_t)cache_mib << 20,
                                   .dspark = true };
    if (dsv4_engine_open(model, &eo, &eng, &err) < 0)
        die("engine", &err);
    const struct dsv4_config *c = dsv4_engine_config(eng);
    for (int i = 0; !given && i < plen; i++)
        prompt[i] = (int32_t)((i * 7919 + 11) % (c->vocab_size - 2) + 2);
    for (int i = 0; i < plen; i++)
        if (prompt[i] >= c->vocab_size)
            return 64;
    dsv4_drafter *d = NULL;
    if (dsv4_drafter_new(eng, &d, &err) < 0)
        die("drafter", &err);
    int gamma = dsv4_drafter_block(d), ks[16], nk = 0;
    for (const char *p = ks_arg; *p && nk < 16;) {
        char one[16];
        size_t n = strcspn(p, ",");
        snprintf(one, sizeof(one), "%.*s", (int)DSV4_MIN(n, sizeof(one) - 1), p);
        ks[nk++] = dsv4_parse_int_or_exit("--ks", one, 0, 64);
        p += n + (p[n] == ',');
    }
    if (want_trained) {
        printf("model %s: %d layers, gamma %d, prompt %d tokens, %d decode tokens, best of %d, "
               "%d threads, drafter trained\n\n", model, c->n_layers, gamma, plen, n_tok - 1,
               reps, threads);
        trained(d, gamma);
        dsv4_drafter_free(d);
        dsv4_engine_free(eng);
        return 0;
    }
    int32_t *want = dsv4_xmalloc((size_t)n_tok * sizeof(int32_t));
    int32_t *ids = dsv4_xmalloc((size_t)n_tok * sizeof(int32_t));
    struct dsv4_spec_opts off = { .off = true };
    struct result plain = { 0 }, vk[16] = { { 0 } }, ag[2][3] = { { { 0 } } };
    const int agrees[3] = { 0, 50, 90 };
    generate(NULL, NULL, &off, want, NULL);     /* warm-up, and the continuation to replay */
    for (int rep = 0; rep < reps; rep++) {
        struct result r = generate(NULL, NULL, &off, ids, want);
        keep_best(&plain, &r);
        for (int i = 0; i < nk; i++) {
            struct dsv4_replay_spec rs = { want, n_tok, NULL, 0, false, -1, 0.9f, c->vocab_size };
            struct dsv4_proposer p = dsv4_replay_proposer(&rs);
            struct dsv4_spec_opts o = { .fixed_verify = ks[i], .no_quench = true };
            r = generate(NULL, &p, &o, ids, want);
            keep_best(&vk[i], &r);
        }
        for (int dr = 0; dr < 2; dr++)
            for (int a = 0; a < 3; a++) {
                struct dsv4_replay_spec rs = { want, n_tok, NULL, 0, false, agrees[a], 0.9f,
                                               c->vocab_size };
                struct dsv4_proposer p = dsv4_replay_proposer(&rs);
                struct dsv4_spec_opts o = { .draft_cost = dr == 1 };
                r = generate(dr ? d : NULL, &p, &o, ids, want);
                keep_best(&ag[dr][a], &r);
            }
        fprintf(stderr, "repetition %d done\n", rep + 1);
    }
    double tp = plain.secs / plain.steps, lp = (double)plain.leases / plain.steps;
    printf("model %s: %d layers, gamma %d, %d decode tokens, best of %d, %d threads\n", model,
           c->n_layers, gamma, n_tok - 1, reps, threads);
    printf("plain: %.2f tok/s, %.0f ms/step, %.1f expert leases/step\n\n",
           (n_tok - 1) / plain.secs, 1e3 * tp, lp);
    printf("| verify rows (1 + k) | time / plain step | expert leases / plain step "
           "| break-even acceptance |\n|---|---|---|---|\n");
    for (int i = 0; i < nk; i++) {
        double cost = (vk[i].secs / vk[i].steps) / tp;
        double be = break_even(ks[i], cost);
        printf("| 1 + %d | %.2f | %.2f | ", ks[i], cost,
               lp > 0 ? ((double)vk[i].leases / vk[i].steps) / lp : NAN);
        if (be < 0)
            printf("— |\n");
        else
            printf("%.0f %% |\n", 100 * be);
    }
    printf("\n| agreement | drafter run | on / off | tok/s on | verify steps "
           "| accepted / proposed | quench events |\n|---|---|---|---|---|---|---|\n");
    for (int dr = 0; dr < 2; dr++)
        for (int a = 0; a < 3; a++) {
            const struct result *r = &ag[dr][a];
            printf("| %d %% | %s | %.2f× | %.2f | %llu | %llu / %llu | %llu |\n", agrees[a],
                   dr ? "yes" : "no", plain.secs / r->secs, (n_tok - 1) / r->secs,
                   (unsigned long long)r->st.verify_steps, (unsigned long long)r->st.accepted,
                   (unsigned long long)r->st.proposed, (unsigned long long)r->st.quench_events);
        }
    free(want);
    free(ids);
    dsv4_drafter_free(d);
    dsv4_engine_free(eng);
    return 0;
}
