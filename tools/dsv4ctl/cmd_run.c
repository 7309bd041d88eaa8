/* SPDX-License-Identifier: MIT */
/*
 * `dsv4ctl run`: in-process generation. Prefills the prompt in chunks, then
 * decodes one token at a time until --max-tokens or EOS (the EOS id is
 * printed, then generation stops). Output contract (--format ids): the
 * generated ids on one line, space-separated. --stats prints prefill and
 * decode tok/s and the time to first token to stderr.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "dsv4ctl.h"
#include "engine-args.h"
#include "util.h"

/* splitmix64: reproducible sampling from --seed */
static double next_uniform(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}

static int32_t pick(const float *logits, int n, double temp, uint64_t *rng)
{
    if (temp == 0.0)
        return dsv4_argmax(logits, n);
    double mx = logits[dsv4_argmax(logits, n)], sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += exp(((double)logits[i] - mx) / temp);
    double u = next_uniform(rng) * sum, acc = 0.0;
    for (int i = 0; i < n; i++) {
        acc += exp(((double)logits[i] - mx) / temp);
        if (acc >= u)
            return i;
    }
    return n - 1;
}

int dsv4ctl_run(int argc, char **argv)
{
    struct engine_args a;
    int rc = engine_args_parse(argc, argv, true, &a);
    if (rc) {
        engine_args_free(&a);
        return rc < 0 ? DSV4_EXIT_OK : rc;
    }
    dsv4_engine *e;
    dsv4_session *s;
    uint64_t t_open = dsv4_now_ns();
    if ((rc = engine_args_open(&a, (int64_t)a.n_prompt + a.max_tokens + 1, &e, &s))) {
        engine_args_free(&a);
        return rc;
    }
    int vocab = dsv4_engine_config(e)->vocab_size, eos = dsv4_engine_config(e)->eos_token_id;
    float *logits = dsv4_xmalloc((size_t)vocab * sizeof(float));
    struct dsv4_err err = { "" };
    uint64_t rng = a.seed;
    int n_gen = 0;
    uint64_t t0 = dsv4_now_ns(), t_first = 0;
    rc = dsv4_session_forward(s, a.prompt, a.n_prompt, DSV4_LOGITS_LAST, logits, &err);
    while (rc == 0 && n_gen < a.max_tokens) {
        int32_t tok = pick(logits, vocab, a.temperature, &rng);
        printf(n_gen ? " %d" : "%d", tok);
        fflush(stdout);
        if (n_gen++ == 0)
            t_first = dsv4_now_ns();
        if (tok == eos || n_gen == a.max_tokens)
            break;
        rc = dsv4_session_forward(s, &tok, 1, DSV4_LOGITS_LAST, logits, &err);
    }
    uint64_t t_end = dsv4_now_ns();
    printf("\n");
    if (rc < 0)
        fprintf(stderr, "dsv4ctl run: %s\n", err.msg);
    if (a.stats && rc == 0 && n_gen > 0) {
        double pre = (double)(t_first - t0) / 1e9, dec = (double)(t_end - t_first) / 1e9;
        fprintf(stderr, "prefill: %d tokens in %.3f s (%.2f tok/s)\n", a.n_prompt, pre,
                a.n_prompt / pre);
        if (n_gen > 1)
            fprintf(stderr, "decode: %d tokens in %.3f s (%.2f tok/s)\n", n_gen - 1, dec,
                    (n_gen - 1) / dec);
        fprintf(stderr, "ttft: %.3f s\n", pre);
        fprintf(stderr, "load: %.3f s\n", (double)(t0 - t_open) / 1e9);
        struct dsv4_expert_cache_stats es;
        if (dsv4_engine_expert_stats(e, &es) == 0)
            fprintf(stderr, "experts: %llu hits, %llu misses, %.2f GiB read, peak cache %.2f GiB\n",
                    (unsigned long long)es.hits, (unsigned long long)es.misses,
                    (double)es.bytes_read / (1 << 30), (double)es.peak_bytes / (1 << 30));
    }
    free(logits);
    dsv4_session_free(s);
    dsv4_engine_free(e);
    engine_args_free(&a);
    return rc < 0 ? DSV4_EXIT_DATAERR : DSV4_EXIT_OK;
}
