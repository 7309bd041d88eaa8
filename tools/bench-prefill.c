/* SPDX-License-Identifier: MIT */
/*
 * Prefill with the routed experts warm (issue 20, prefill): an in-process engine whose expert
 * cache holds every expert the prompt routes to runs a prompt of N tokens through a fresh
 * session, once per chunk size (rows per batched step), after one untimed pass that brings
 * the experts into the cache. Prints tok/s per chunk size and the ratio to the first size.
 * Not a test: figures only.
 *
 *   bench-prefill --model DIR [--tokens N] [--chunks 64,256,512] [--threads N] [--reps N]
 *                 [--cache-gb G] [--isa A,B,...]
 *
 * The prompt is a fixed pseudo-random id sequence (every id below the vocabulary), so runs
 * of two builds prefill the same rows; each figure is the fastest of --reps passes.
 * --isa: an A/B of kernel twins in one process (one model load, one page-cache state):
 * per chunk size and repetition every named twin runs once, in rotating order, and the
 * table gives each twin's tok/s and its ratio to the first; the last-token logits of all
 * twins must be the same bits (the twins' contract), else the tool stops.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "kernels.h"
#include "util.h"

static int parse_list(const char *arg, int *v, int max)
{
    int n = 0;
    for (const char *p = arg; *p && n < max;) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (errno || end == p || x < 1 || x > 65536 || (*end && *end != ',')) {
            fprintf(stderr, "bench-prefill: bad list value at '%s'\n", p);
            exit(2);
        }
        v[n++] = (int)x;
        p = *end ? end + 1 : end;
    }
    return n;
}

/* seconds of one prefill of `n` tokens through a fresh session of chunk `chunk` */
static double prefill_once(dsv4_engine *e, const int32_t *tok, int n, int chunk, float *logits)
{
    struct dsv4_err err = {0};
    struct dsv4_session_opts so = {.max_ctx = n + 1, .chunk = chunk};
    dsv4_session *s = NULL;
    if (dsv4_session_new(e, &so, &s, &err) < 0) {
        fprintf(stderr, "bench-prefill: session: %s\n", err.msg);
        exit(1);
    }
    uint64_t t0 = dsv4_now_ns();
    if (dsv4_session_forward(s, tok, n, DSV4_LOGITS_LAST, logits, &err) < 0) {
        fprintf(stderr, "bench-prefill: forward: %s\n", err.msg);
        exit(1);
    }
    double t = (double)(dsv4_now_ns() - t0) * 1e-9;
    dsv4_session_free(s);
    return t;
}

int main(int argc, char **argv)
{
    const char *model = NULL;
    int chunks[16] = {64, 256, 512}, nch = 3, n = 512, reps = 2;
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    double cache_gb = 16;
    enum dsv4_isa isas[_DSV4_ISA_MAX];
    int nisa = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--chunks") && i + 1 < argc)
            nch = parse_list(argv[++i], chunks, 16);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cache-gb") && i + 1 < argc)
            cache_gb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
            char list[128];
            snprintf(list, sizeof list, "%s", argv[++i]);
            for (char *save = NULL, *t = strtok_r(list, ",", &save); t;
                 t = strtok_r(NULL, ",", &save)) {
                const int k = dsv4_isa_by_name(t);
                if (k < 0 || !dsv4_kernel_ops_for((enum dsv4_isa)k) || nisa == _DSV4_ISA_MAX) {
                    fprintf(stderr, "bench-prefill: --isa: '%s' is not a twin this CPU runs\n", t);
                    return 2;
                }
                isas[nisa++] = (enum dsv4_isa)k;
            }
        } else {
            fprintf(stderr,
                    "usage: %s --model DIR [--tokens N] [--chunks C,C,...] [--threads N] "
                    "[--reps N] [--cache-gb G] [--isa A,B,...]\n",
                    argv[0]);
            return 2;
        }
    }
    if (!model || n < 1 || nch < 1 || threads < 1 || reps < 1 ||
        !(cache_gb > 0 && cache_gb < 1e6)) {
        fprintf(stderr, "bench-prefill: --model DIR is required (and counts must be ≥ 1)\n");
        return 2;
    }
    int maxc = 0;
    for (int i = 0; i < nch; i++)
        maxc = DSV4_MAX(maxc, chunks[i]);
    struct dsv4_err err = {0};
    dsv4_engine *e = NULL;
    struct dsv4_engine_opts eo = {.n_threads = threads, .step_rows = maxc,
                                  .expert_cache_bytes = (uint64_t)(cache_gb * 1073741824.0)};
    if (dsv4_engine_open(model, &eo, &e, &err) < 0) {
        fprintf(stderr, "bench-prefill: %s\n", err.msg);
        return 1;
    }
    const struct dsv4_config *c = &e->cfg;
    int32_t *tok = dsv4_xmalloc((size_t)n * sizeof(*tok));
    for (int i = 0; i < n; i++)
        tok[i] = (int32_t)(((int64_t)i * 7919 + 11) % (c->vocab_size - 2) + 2);
    float *logits = dsv4_xmalloc((size_t)c->vocab_size * sizeof(*logits));
    char host[256];
    dsv4_cpu_model(host, sizeof host);
    double t_warm = prefill_once(e, tok, n, chunks[0], logits);
    double load[3] = {0};
    if (getloadavg(load, 3) < 0)
        load[0] = -1;
    printf("# hardware: %s, %ld cpus, %d threads used, load %.2f, kernels %s, wall clock\n", host,
           sysconf(_SC_NPROCESSORS_ONLN), threads, load[0], dsv4_kernel_ops()->name);
    printf("# model %s: %d layers, dim %d, %d routed experts (%d per token); prompt %d tokens;"
           " untimed warm-up pass %.2f s\n\n", model, c->n_layers, c->dim, c->n_routed_experts,
           c->n_activated_experts, n, t_warm);
    if (nisa > 0) {
        /* the A/B of twins: rotating order per repetition, logits compared bitwise */
        float *ref = dsv4_xmalloc((size_t)c->vocab_size * sizeof(*ref));
        printf("| chunk |");
        for (int k = 0; k < nisa; k++)
            printf(" %s s (fastest of %d) | tok/s |%s", dsv4_kernel_ops_for(isas[k])->name, reps,
                   k ? " ÷ first |" : "");
        printf("\n|---:|");
        for (int k = 0; k < nisa; k++)
            printf("---:|---:|%s", k ? "---:|" : "");
        printf("\n");
        for (int i = 0; i < nch; i++) {
            double best[_DSV4_ISA_MAX];
            for (int k = 0; k < nisa; k++)
                best[k] = 1e30;
            for (int r = 0; r < reps; r++)
                for (int j = 0; j < nisa; j++) {
                    const int k = (j + r) % nisa;
                    dsv4_kernels_force(isas[k]);
                    double t = prefill_once(e, tok, n, chunks[i], logits);
                    best[k] = t < best[k] ? t : best[k];
                    if (i == 0 && r == 0 && j == 0)
                        memcpy(ref, logits, (size_t)c->vocab_size * sizeof(*ref));
                    else if (memcmp(ref, logits, (size_t)c->vocab_size * sizeof(*ref))) {
                        fprintf(stderr, "bench-prefill: twin %s gave other logits (chunk %d)\n",
                                dsv4_kernel_ops()->name, chunks[i]);
                        return 1;
                    }
                }
            printf("| %d |", chunks[i]);
            for (int k = 0; k < nisa; k++) {
                printf(" %.3f | %.2f |", best[k], n / best[k]);
                if (k)
                    printf(" %.2f |", best[0] / best[k]);
            }
            printf("\n");
            fflush(stdout);
        }
        printf("\nlast-token logits identical across the twins\n");
        free(ref);
        free(logits);
        free(tok);
        dsv4_engine_free(e);
        return 0;
    }
    printf("| chunk | s (fastest of %d) | tok/s | ÷ chunk %d |\n|---:|---:|---:|---:|\n", reps,
           chunks[0]);
    double base = -1;
    for (int i = 0; i < nch; i++) {
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
            double t = prefill_once(e, tok, n, chunks[i], logits);
            best = t < best ? t : best;
        }
        if (base < 0)
            base = best;
        printf("| %d | %.3f | %.2f | %.2f |\n", chunks[i], best, n / best, base / best);
        fflush(stdout);
    }
    free(logits);
    free(tok);
    dsv4_engine_free(e);
    return 0;
}
