/* SPDX-License-Identifier: MIT */
/*
 * `dsv4ctl run`: in-process generation. Prefills the prompt in chunks, then
 * decodes one token at a time until --max-tokens or EOS (the EOS id is
 * printed, then generation stops). Output contract (--format ids): the
 * generated ids on one line, space-separated. --format text (the default for
 * a text prompt) streams the decoded text, never splitting a character. --stats prints prefill and
 * decode tok/s and the time to first token to stderr. The prompt goes to the
 * engine one --chunk at a time (the result does not depend on the split), so a
 * long prefill can show its progress on stderr (progress.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4ctl.h"
#include "engine-args.h"
#include "progress.h"
#include "sampling.h"
#include "util.h"

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
    /* The scheduler's sampler: the same draws whether generated in-process or by the daemons. */
    const struct dsv4_sampling samp = { .temperature = a.temperature, .top_p = 1.0, .seed = a.seed };
    int n_gen = 0;
    bool text = strcmp(a.format, "text") == 0;
    struct dsv4_detok detok;
    if (text)
        dsv4_detok_init(&detok, a.tok, false);
    uint64_t t0 = dsv4_now_ns(), t_first = 0;
    struct prefill_progress pg;
    progress_init(&pg, a.progress);
    for (int done = 0; rc == 0 && done < a.n_prompt;) {
        int n = DSV4_MIN(a.chunk, a.n_prompt - done);
        rc = dsv4_session_forward(s, a.prompt + done, n,
                                  done + n == a.n_prompt ? DSV4_LOGITS_LAST : DSV4_LOGITS_NONE,
                                  logits, &err);
        done += n;
        if (rc == 0 && done < a.n_prompt)
            progress_update(&pg, (uint64_t)done, (uint64_t)a.n_prompt);
    }
    progress_end(&pg);
    while (rc == 0 && n_gen < a.max_tokens) {
        int32_t tok = dsv4_sample(logits, vocab, &samp, (uint64_t)n_gen);
        if (text) {
            const char *piece;
            size_t len;
            if (dsv4_detok_feed(&detok, (uint32_t)tok, &piece, &len, NULL) == 0)
                fwrite(piece, 1, len, stdout);
        } else {
            printf(n_gen ? " %d" : "%d", tok);
        }
        fflush(stdout);
        if (n_gen++ == 0)
            t_first = dsv4_now_ns();
        if (tok == eos || n_gen == a.max_tokens)
            break;
        rc = dsv4_session_forward(s, &tok, 1, DSV4_LOGITS_LAST, logits, &err);
    }
    uint64_t t_end = dsv4_now_ns();
    if (text) {
        const char *piece;
        size_t len;
        dsv4_detok_flush(&detok, &piece, &len);
        fwrite(piece, 1, len, stdout);
        dsv4_detok_free(&detok);
    }
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
