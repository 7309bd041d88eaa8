/* SPDX-License-Identifier: MIT */
/*
 * Attention at long context without a long prefill (issue 20, long context): a session's
 * state is filled with valid stored rows (every byte 0x21: small normal E4M3/E2M1 codes,
 * scale bytes and bf16/fp32 values, so every page is real memory and no value is NaN)
 * and its position set to P; then one decode row runs the attention half of a layer
 * (attention_layer: q/kv projections, the ring write, the compressors, the CSA indexer,
 * attention over the visible rows, the output projections) for the first CSA and the first
 * HCA layer, at each P. The layer's time at P, minus its time at the smallest P (where
 * the context costs nothing), is what the context costs; the remainder is the layer's
 * projections (matvecs). Not a test: figures only.
 *
 *   bench-attention --model DIR [--positions 1024,8192,65536,1048576] [--threads N]
 *                   [--reps N] [--decode [--cache-gb G]] [--cpu-time]
 *
 * With --decode it also times whole decode steps (dsv4_session_forward of one token: every
 * layer, the routed experts from an in-process cache of --cache-gb, the head) at each P, and
 * prints decode tok/s at P over tok/s at the smallest P: the end-to-end cost of the context.
 *
 * Each figure is the fastest of --reps calls after two warm-up calls (which also bring the
 * routed experts of that step into the cache).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "util.h"

static int cpu_time;    /* --cpu-time: the process's CPU time, which a loaded machine's time
                           slicing does not inflate (meaningful with --threads 1) */

static double now_s(void)
{
    if (cpu_time) {
        struct timespec ts;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    }
    return (double)dsv4_now_ns() * 1e-9;
}

/* every state byte 0x21 (see the top comment); pages touched so they are real */
static void fill_state(dsv4_session *s, const struct dsv4_config *c)
{
    struct dsv4_session_layout L;
    struct dsv4_err err = {0};
    if (dsv4_session_layout(c, s->max_ctx, s->chunk, s->max_rollback, 1, &L, &err) < 0) {
        fprintf(stderr, "bench-attention: %s\n", err.msg);
        exit(1);
    }
    for (int l = 0; l < c->n_layers; l++) {
        struct dsv4_layer_layout ll;
        dsv4_layer_layout(c, &L, l, &ll);
        struct layer_state *st = &s->ls[l];
        memset(st->ring, 0x21, ll.ring ? ll.ring : 1);
        if (st->cin)
            memset(st->cin, 0x21, ll.cin ? ll.cin : 1);
        if (st->rows)
            memset(st->rows, 0x21, ll.rows ? ll.rows : 1);
        if (st->icin)
            memset(st->icin, 0x21, ll.icin ? ll.icin : 1);
        if (st->irows)
            memset(st->irows, 0x21, ll.irows ? ll.irows : 1);
    }
}

/* fastest of `reps` decode rows of layer l's attention at position p (on a shared machine
 * the minimum is the stable figure) */
static double time_layer(dsv4_engine *e, dsv4_session *s, int l, int64_t p, int reps)
{
    const struct dsv4_config *c = &e->cfg;
    dsv4_session *bs = e->step;
    struct scratch *sc = &bs->s;
    double t[64];
    if (reps > 64)
        reps = 64;
    for (int i = -2; i < reps; i++) {
        /* a bf16-rounded attention input, as rmsnorm_rows leaves it */
        for (int j = 0; j < c->dim; j++)
            sc->a[j] = dsv4_bf16_round((float)((j * 2654435761u >> 7) % 2001) / 1000.0f - 1.0f);
        struct step_seg seg = {.s = s, .r0 = 0, .n = 1, .pos0 = p};
        sc->rpos[0] = p;
        sc->rtok[0] = 1;
        bs->step_seg = &seg;
        bs->n_step_seg = 1;
        double t0 = now_s();
        attention_layer(bs, &seg, 1, l, sc->a, 1, sc->out);
        if (i >= 0) /* two calls first warm the caches and the pool */
            t[i] = now_s() - t0;
    }
    for (int i = 1; i < reps; i++) /* insertion sort: few values */
        for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
            double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    return t[0];
}

/* fastest of `reps` whole decode steps of one token at position p */
static double time_decode(dsv4_session *s, int64_t p, int reps)
{
    double best = 1e30;
    struct dsv4_err err = {0};
    float *logits = dsv4_xmalloc((size_t)s->e->cfg.vocab_size * sizeof(*logits));
    for (int i = -2; i < reps; i++) {
        s->pos = p;
        const int32_t tok = 1;
        double t0 = now_s();
        if (dsv4_session_forward(s, &tok, 1, DSV4_LOGITS_LAST, logits, &err) < 0) {
            fprintf(stderr, "bench-attention: forward at %lld: %s\n", (long long)p, err.msg);
            exit(1);
        }
        double t = now_s() - t0;
        if (i >= 0 && t < best)
            best = t;
    }
    free(logits);
    return best;
}

static int parse_positions(const char *arg, int64_t *pos, int max)
{
    int n = 0;
    const char *p = arg;
    while (*p && n < max) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (errno || end == p || v < 1 || v > (1ll << 31)) {
            fprintf(stderr, "bench-attention: --positions: bad value at '%s'\n", p);
            exit(2);
        }
        pos[n++] = v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') {
            fprintf(stderr, "bench-attention: --positions: bad value at '%s'\n", end);
            exit(2);
        }
    }
    return n;
}

int main(int argc, char **argv)
{
    const char *model = NULL;
    int64_t pos[16] = {1024, 8192, 65536, 1048576};
    int npos = 4, threads = (int)sysconf(_SC_NPROCESSORS_ONLN), reps = 9, decode = 0;
    double cache_gb = 8;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "--positions") && i + 1 < argc)
            npos = parse_positions(argv[++i], pos, 16);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--decode"))
            decode = 1;
        else if (!strcmp(argv[i], "--cpu-time"))
            cpu_time = 1;
        else if (!strcmp(argv[i], "--cache-gb") && i + 1 < argc)
            cache_gb = atof(argv[++i]);
        else {
            fprintf(stderr,
                    "usage: %s --model DIR [--positions P,P,...] [--threads N] [--reps N] "
                    "[--decode [--cache-gb G]] [--cpu-time]\n",
                    argv[0]);
            return 2;
        }
    }
    if (!model || npos < 1 || threads < 1 || reps < 1 || !(cache_gb > 0 && cache_gb < 1e6)) {
        fprintf(stderr, "bench-attention: --model DIR is required (and counts must be ≥ 1)\n");
        return 2;
    }
    struct dsv4_err err = {0};
    dsv4_engine *e = NULL;
    struct dsv4_engine_opts eo = {.n_threads = threads, .step_rows = 1,
                                  .expert_cache_bytes = (uint64_t)(cache_gb * 1073741824.0)};
    if (dsv4_engine_open(model, &eo, &e, &err) < 0) {
        fprintf(stderr, "bench-attention: %s\n", err.msg);
        return 1;
    }
    const struct dsv4_config *c = &e->cfg;
    int lcsa = -1, lhca = -1;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_kind[l] == DSV4_ATTN_CSA && lcsa < 0)
            lcsa = l;
        if (c->layer_kind[l] == DSV4_ATTN_HCA && lhca < 0)
            lhca = l;
    }
    char host[256];
    dsv4_cpu_model(host, sizeof host);
    double load[3] = {0};
    if (getloadavg(load, 3) < 0)
        load[0] = -1;
    printf("# hardware: %s, %ld cpus, %d threads used, load %.2f, kernels %s, %s\n", host,
           sysconf(_SC_NPROCESSORS_ONLN), threads, load[0], dsv4_kernel_ops()->name,
           cpu_time ? "process CPU time" : "wall clock");
    printf("# model %s: dim %d, %d heads × %d, window %d, index_topk %d, %d index heads × %d\n",
           model, c->dim, c->n_heads, c->head_dim, c->window, c->index_topk, c->index_n_heads,
           c->index_head_dim);
    printf("# one decode row, attention half of the layer (fastest of %d); context = time at P"
           " − time at the smallest P\n\n", reps);
    printf("| layer | P | ms | context ms | context ÷ projections |\n|---|---:|---:|---:|---:|\n");
    const int layers[2] = {lcsa, lhca};
    const char *names[2] = {"CSA", "HCA"};
    for (int k = 0; k < 2; k++) {
        int l = layers[k];
        if (l < 0) {
            printf("| %s | — | the model has no such layer | | |\n", names[k]);
            continue;
        }
        double base = -1;
        for (int i = 0; i < npos; i++) {
            struct dsv4_session_opts so = {.max_ctx = pos[i] + 1};
            dsv4_session *s = NULL;
            if (dsv4_session_new(e, &so, &s, &err) < 0) {
                printf("| %s %d | %lld | session: %s | | |\n", names[k], l, (long long)pos[i],
                       err.msg);
                err = (struct dsv4_err){0};
                continue;
            }
            fill_state(s, c);
            s->pos = pos[i];
            double t = time_layer(e, s, l, pos[i], reps);
            if (base < 0)
                base = t;
            double ctx = t - base;
            printf("| %s %d | %lld | %.3f | %.3f | %.2f |\n", names[k], l, (long long)pos[i],
                   t * 1e3, ctx * 1e3, base > 0 ? ctx / base : 0.0);
            fflush(stdout);
            dsv4_session_free(s);
        }
    }
    if (decode) {
        printf("\n| decode step | P | ms | tok/s | ÷ tok/s at %lld |\n|---|---:|---:|---:|---:|\n",
               (long long)pos[0]);
        double base = -1;
        for (int i = 0; i < npos; i++) {
            struct dsv4_session_opts so = {.max_ctx = pos[i] + 1};
            dsv4_session *s = NULL;
            if (dsv4_session_new(e, &so, &s, &err) < 0) {
                printf("| all layers | %lld | session: %s | | |\n", (long long)pos[i], err.msg);
                err = (struct dsv4_err){0};
                continue;
            }
            fill_state(s, c);
            double t = time_decode(s, pos[i], reps);
            if (base < 0)
                base = t;
            printf("| all %d layers + head | %lld | %.3f | %.2f | %.3f |\n", c->n_layers,
                   (long long)pos[i], t * 1e3, 1.0 / t, base / t);
            fflush(stdout);
            dsv4_session_free(s);
        }
    }
    dsv4_engine_free(e);
    return 0;
}
