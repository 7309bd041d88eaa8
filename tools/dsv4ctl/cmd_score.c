/* SPDX-License-Identifier: MIT */
/*
 * `dsv4ctl score`: teacher-forced scoring of a prompt. Output contract
 * (--format tsv): one line per position `pos<TAB>argmax<TAB>logprob`, where
 * logprob is the log-softmax of the token at pos+1 under the logits of pos
 * (%.6f), and `-` on the last line. The prompt runs in chunks of --chunk
 * rows, logits of every row come from the same forward as generation.
 */
#include <stdio.h>
#include <stdlib.h>

#include "dsv4ctl.h"
#include "engine-args.h"
#include "util.h"

int dsv4ctl_score(int argc, char **argv)
{
    struct engine_args a;
    int rc = engine_args_parse(argc, argv, false, &a);
    if (rc) {
        engine_args_free(&a);
        return rc < 0 ? DSV4_EXIT_OK : rc;
    }
    dsv4_engine *e;
    dsv4_session *s;
    if ((rc = engine_args_open(&a, a.n_prompt, &e, &s))) {
        engine_args_free(&a);
        return rc;
    }
    int vocab = dsv4_engine_config(e)->vocab_size;
    float *logits = dsv4_xmalloc((size_t)a.chunk * vocab * sizeof(float));
    struct dsv4_err err = { "" };
    uint64_t t0 = dsv4_now_ns();
    for (int done = 0; rc == 0 && done < a.n_prompt;) {
        int m = DSV4_MIN(a.chunk, a.n_prompt - done);
        rc = dsv4_session_forward(s, a.prompt + done, m, DSV4_LOGITS_ALL, logits, &err);
        for (int i = 0; rc == 0 && i < m; i++) {
            int pos = done + i;
            const float *lg = logits + (size_t)i * vocab;
            printf("%d\t%d\t", pos, dsv4_argmax(lg, vocab));
            if (pos + 1 < a.n_prompt)
                printf("%.6f\n", dsv4_log_softmax_at(lg, vocab, a.prompt[pos + 1]));
            else
                printf("-\n");
        }
        done += m;
    }
    if (rc < 0)
        fprintf(stderr, "dsv4ctl score: %s\n", err.msg);
    else if (a.stats)
        fprintf(stderr, "score: %d tokens in %.3f s\n", a.n_prompt,
                (double)(dsv4_now_ns() - t0) / 1e9);
    free(logits);
    dsv4_session_free(s);
    dsv4_engine_free(e);
    engine_args_free(&a);
    return rc < 0 ? DSV4_EXIT_DATAERR : DSV4_EXIT_OK;
}
