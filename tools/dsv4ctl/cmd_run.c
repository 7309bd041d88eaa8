/* SPDX-License-Identifier: MIT */
/*
 * `dsv4ctl run`: in-process generation. Prefills the prompt in chunks, then
 * decodes one token at a time until --max-tokens or EOS (the EOS id is
 * printed, then generation stops). With --dspark the tokens come from
 * speculative steps (daemons/compute/speculate.h): the same ids, several per
 * target forward when the drafter (or the test-only --dspark-proposer) is right. Output contract (--format ids): the
 * generated ids on one line, space-separated. --format text (the default for
 * a text prompt) streams the decoded text, never splitting a character. --stats prints prefill and
 * decode tok/s and the time to first token to stderr. The prompt goes to the
 * engine one --chunk at a time (the result does not depend on the split), so a
 * long prefill can show its progress on stderr (progress.h).
 * The prefix cache (daemons/compute/prefix.h; off with --no-prefix-cache) restores the longest
 * cached prefix of the prompt before the prefill, and stores every block of 128 positions the
 * run completes (prompt and generated tokens), in RAM and in the model's cache directory, so a
 * later run whose prompt extends this one's sequence starts where it ended; --stats says how
 * many prompt tokens were restored.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4ctl.h"
#include "engine-args.h"
#include "log.h"
#include "prefix.h"
#include "progress.h"
#include "proposer.h"
#include "sampling.h"
#include "speculate.h"
#include "util.h"

/* The verifier's choice: the same draw for token number `index` as the plain loop's. */
static int32_t choose(void *ctx, const float *logits, int vocab, int64_t index)
{
    return dsv4_sample(logits, vocab, ctx, (uint64_t)index);
}

/* Speculation state of a --dspark run; all NULL without it. */
struct spec_run {
    dsv4_drafter *d;
    dsv4_spec *sp;
    struct dsv4ctl_proposer prop;
    bool have_prop;
    FILE *trace;            /* --dspark-trace */
};

static int spec_open(const struct engine_args *a, dsv4_engine *e, dsv4_session *s,
                     struct spec_run *r)
{
    struct dsv4_err err = { "" };
    int vocab = dsv4_engine_config(e)->vocab_size, rc;
    if (a->proposer) {
        if ((rc = dsv4ctl_proposer_parse(a->proposer, vocab, &r->prop)))
            return rc;
        r->have_prop = true;
    }
    /* the drafter proposes, or (with a test proposer) follows along if the model has one */
    rc = dsv4_drafter_new(e, &r->d, &err);
    if (rc < 0 && !(rc == -ENOENT && r->have_prop)) {
        fprintf(stderr, "dsv4ctl run: --dspark: %s\n", err.msg);
        return rc == -ENOENT ? DSV4_EXIT_USAGE : DSV4_EXIT_DATAERR;
    }
    struct dsv4_proposer p = r->have_prop ? dsv4_replay_proposer(&r->prop.spec)
                                          : (struct dsv4_proposer){ 0 };
    struct dsv4_spec_opts o = { .fixed_verify = a->dspark_verify,
                                .no_quench = a->dspark_no_quench,
                                .draft_cost = r->have_prop && r->prop.draft_cost };
    if (dsv4_spec_new(s, r->d, r->have_prop ? &p : NULL, &o, &r->sp, &err) < 0) {
        fprintf(stderr, "dsv4ctl run: --dspark: %s\n", err.msg);
        return DSV4_EXIT_USAGE;
    }
    if (a->dspark_trace) {
        if (!(r->trace = fopen(a->dspark_trace, "w"))) {
            fprintf(stderr, "dsv4ctl run: --dspark-trace %s: %s\n", a->dspark_trace,
                    strerror(errno));
            return DSV4_EXIT_IOERR;
        }
        dsv4_spec_set_trace(r->sp, r->trace);
    }
    return 0;
}

static void spec_close(struct spec_run *r)
{
    r->sp = dsv4_spec_free(r->sp);
    r->d = dsv4_drafter_free(r->d);
    if (r->trace && fclose(r->trace) != 0)
        fprintf(stderr, "dsv4ctl run: --dspark-trace: %s\n", strerror(errno));
    r->trace = NULL;
    if (r->have_prop)
        dsv4ctl_proposer_free(&r->prop);
}

int dsv4ctl_run(int argc, char **argv)
{
    struct engine_args a;
    int rc = engine_args_parse(argc, argv, true, &a);
    if (rc) {
        engine_args_free(&a);
        return rc < 0 ? DSV4_EXIT_OK : rc;
    }
    if (a.dspark_trace && !a.dspark) {
        fprintf(stderr, "dsv4ctl run: --dspark-trace needs --dspark\n");
        engine_args_free(&a);
        return DSV4_EXIT_USAGE;
    }
    dsv4_engine *e;
    dsv4_session *s;
    uint64_t t_open = dsv4_now_ns();
    if ((rc = engine_args_open(&a, (int64_t)a.n_prompt + a.max_tokens + 1, &e, &s))) {
        engine_args_free(&a);
        return rc;
    }
    int vocab = dsv4_engine_config(e)->vocab_size, eos = dsv4_engine_config(e)->eos_token_id;
    struct spec_run sr = { 0 };
    if (a.dspark && (rc = spec_open(&a, e, s, &sr))) {
        spec_close(&sr);
        dsv4_session_free(s);
        dsv4_engine_free(e);
        engine_args_free(&a);
        return rc;
    }
    float *logits = dsv4_xmalloc((size_t)vocab * sizeof(float));
    struct dsv4_err err = { "" };
    /* every token of the sequence in order (prompt, then each decided one): the cache's keys */
    int32_t *hist = dsv4_xmalloc(((size_t)a.n_prompt + a.max_tokens + 80) * sizeof(int32_t));
    int64_t n_hist = a.n_prompt, restored = 0;
    memcpy(hist, a.prompt, (size_t)a.n_prompt * sizeof(int32_t));
    dsv4_pcache *pc = NULL;
    struct dsv4_prefix_seq pq;
    if (!a.no_prefix_cache && (a.prefix_cache_mb || a.prefix_cache_gb > 0))
        pc = dsv4ctl_prefix_open(a.model, dsv4_engine_config(e), a.prefix_cache_mb,
                                 a.prefix_cache_gb, a.prefix_cache_dir);
    /* The scheduler's sampler: the same draws whether generated in-process or by the daemons. */
    const struct dsv4_sampling samp = { .temperature = a.temperature, .top_p = 1.0, .seed = a.seed };
    int n_gen = 0;
    bool text = strcmp(a.format, "text") == 0;
    struct dsv4_detok detok;
    if (text)
        dsv4_detok_init(&detok, a.tok, false);
    uint64_t t0 = dsv4_now_ns(), t_first = 0;
    if (pc) {
        dsv4_prefix_seq_init(&pq, pc, s, sr.sp);
        rc = dsv4_prefix_restore(&pq, a.prompt, a.n_prompt, &restored, &err);
        if (rc == 0 && restored > 0)
            dsv4_log_info("prefix-cache", "restored %lld of %d prompt tokens (%d blocks, "
                          "%.2f MiB in %.3f ms)", (long long)restored, a.n_prompt, pq.blocks,
                          (double)pq.bytes / (1 << 20), (double)pq.ns / 1e6);
    }
    struct prefill_progress pg;
    progress_init(&pg, a.progress);
    for (int done = (int)restored; rc == 0 && done < a.n_prompt;) {
        int n = DSV4_MIN(a.chunk, a.n_prompt - done);
        if (pc)     /* forwards end on block boundaries: each block's tail is exported there */
            n = (int)DSV4_MIN((int64_t)n, dsv4_prefix_next_boundary(&pq, done) - done);
        bool last = done + n == a.n_prompt;
        rc = sr.sp ? dsv4_spec_feed(sr.sp, a.prompt + done, n, logits, &err)
                   : dsv4_session_forward(s, a.prompt + done, n,
                                          last ? DSV4_LOGITS_LAST : DSV4_LOGITS_NONE, logits, &err);
        done += n;
        if (rc == 0 && pc)
            rc = dsv4_prefix_save(&pq, hist, n_hist, &err);
        if (rc == 0 && !last)
            progress_update(&pg, (uint64_t)done, (uint64_t)a.n_prompt);
    }
    progress_end(&pg);
    int32_t pend[72];   /* tokens decided by the last speculative step, not yet printed */
    int n_pend = 0, i_pend = 0;
    if (rc == 0 && a.max_tokens > 0) {
        pend[n_pend++] = dsv4_sample(logits, vocab, &samp, 0);
        hist[n_hist++] = pend[0];
    }
    while (rc == 0 && n_gen < a.max_tokens) {
        if (i_pend == n_pend) {
            /* one step from the last printed token (number n_gen - 1) */
            int k = dsv4_spec_step(sr.sp, pend[n_pend - 1], n_gen - 1, a.max_tokens - n_gen,
                                   choose, (void *)&samp, pend, &err);
            if (k < 0) {
                rc = k;
                break;
            }
            n_pend = k;
            i_pend = 0;
            memcpy(hist + n_hist, pend, (size_t)k * sizeof(int32_t));
            n_hist += k;
            if (pc)
                rc = dsv4_prefix_save(&pq, hist, n_hist, &err);
        }
        int32_t tok = pend[i_pend++];
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
        if (!sr.sp) {
            rc = dsv4_session_forward(s, &tok, 1, DSV4_LOGITS_LAST, logits, &err);
            if (rc == 0) {
                pend[0] = dsv4_sample(logits, vocab, &samp, (uint64_t)n_gen);
                n_pend = 1;
                i_pend = 0;
                hist[n_hist++] = pend[0];
            }
            if (rc == 0 && pc)
                rc = dsv4_prefix_save(&pq, hist, n_hist, &err);
        }
    }
    if (rc == 0 && pc) /* the partial block after the last boundary, for a next turn */
        rc = dsv4_prefix_save_end(&pq, hist, n_hist, &err);
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
        if (pc) {
            struct dsv4_pcache_stats ps;
            dsv4_pcache_get_stats(pc, &ps);
            fprintf(stderr, "prefix-cache: restored %lld of %d prompt tokens (%d blocks, %.2f MiB "
                            "in %.3f ms); %llu blocks stored; ram %llu entries %.2f MiB; disk "
                            "%llu entries %.2f MiB%s; %llu bad files\n",
                    (long long)restored, a.n_prompt, pq.blocks, (double)pq.bytes / (1 << 20),
                    (double)pq.ns / 1e6, (unsigned long long)ps.stores,
                    (unsigned long long)ps.ram_entries, (double)ps.ram_bytes / (1 << 20),
                    (unsigned long long)ps.disk_entries, (double)ps.disk_bytes / (1 << 20),
                    ps.disk_on ? "" : " (off)", (unsigned long long)ps.bad_files);
        }
        if (sr.sp) {
            struct dsv4_spec_stats st;
            dsv4_spec_get_stats(sr.sp, &st);
            fprintf(stderr, "dspark: %llu verify steps, %llu plain steps, %llu proposed, "
                            "%llu accepted (%.1f %%), %llu quench events, row cost %.3f\n",
                    (unsigned long long)st.verify_steps, (unsigned long long)st.plain_steps,
                    (unsigned long long)st.proposed, (unsigned long long)st.accepted,
                    st.proposed ? 100.0 * (double)st.accepted / (double)st.proposed : 0.0,
                    (unsigned long long)st.quench_events, st.row_cost);
        }
    }
    spec_close(&sr);
    dsv4_pcache_close(pc);
    free(hist);
    free(logits);
    dsv4_session_free(s);
    dsv4_engine_free(e);
    engine_args_free(&a);
    return rc < 0 ? DSV4_EXIT_DATAERR : DSV4_EXIT_OK;
}
