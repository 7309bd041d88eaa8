/* SPDX-License-Identifier: MIT */
/*
 * `dsv4ctl gen`: generation through the daemon set, streamed as it comes.
 * The prompt is --prompt-ids or text (encoded with the served model's
 * tokenizer; --chat wraps it as one user turn with the chat template).
 * Output: --format ids is `dsv4ctl run`'s contract (the generated ids on one
 * line, space-separated), text prints the decoded text, jsonl one object
 * per token then a final {"done":...}. Ctrl-C sends CANCEL and exits 130.
 * A long prefill shows its progress on stderr (progress.h: on a terminal, or
 * with --progress; never with --no-progress).
 * If the scheduler is restarted mid-stream the request is resubmitted with
 * the same id and the tokens received so far: the stream goes on unchanged.
 *
 * `dsv4ctl score` without --model (score_daemon): `dsv4ctl score`'s
 * contract, `pos<TAB>argmax<TAB>logprob` per position, `-` on the last line.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "client.h"
#include "dsv4ctl.h"
#include "parse.h"
#include "progress.h"
#include "prompt.h"
#include "tokenizer.h"
#include "util.h"

struct gen_args {
    const char *run_dir, *prompt_ids, *text, *format;
    bool chat, think, stats;
    bool no_dspark;             /* --no-dspark: this request decodes without speculation */
    int max_tokens, top_k;
    int progress;               /* -1 auto (tty), 0 off, 1 on */
    double temperature, top_p;
    uint64_t seed;
    char stop[DSV4_WIRE_MAX_STOP_BYTES];
    size_t n_stop;
};

static int exit_for(int code)
{
    switch (code) {
    case DSV4_WE_BUSY: return DSV4_EXIT_TEMPFAIL;
    case DSV4_WE_INVALID: case DSV4_WE_RANGE: case DSV4_WE_PROTO: case DSV4_WE_TOO_LARGE:
        return DSV4_EXIT_DATAERR;
    case DSV4_WE_ABI: return DSV4_EXIT_PROTOCOL;
    default: return DSV4_EXIT_UNAVAILABLE;
    }
}

static const char *errname(int code)
{
    switch (code) {
    case DSV4_WE_BUSY: return "busy";
    case DSV4_WE_INVALID: return "invalid request";
    case DSV4_WE_RANGE: return "out of range";
    case DSV4_WE_TOO_LARGE: return "too large (will never fit: do not retry)";
    case DSV4_WE_PROTO: return "protocol error";
    case DSV4_WE_ABI: return "ABI mismatch";
    default: return "unavailable";
    }
}

static void build_generate(struct client *c, uint64_t id, const struct gen_args *a,
                           const struct dsv4_ids *prompt, const int32_t *done, uint32_t n_done)
{
    struct dsv4_msg_generate g = { id, a->seed, (float)a->temperature, (float)a->top_p, a->top_k,
                                   a->max_tokens, (uint32_t)prompt->n, n_done,
                                   (uint32_t)a->n_stop, a->no_dspark ? DSV4_GEN_NO_DSPARK : 0 };
    dsv4_wire_begin(&c->req, DSV4_MSG_GENERATE);
    dsv4_wire_put(&c->req, &g, sizeof(g));
    dsv4_wire_put(&c->req, prompt->v, prompt->n * 4);
    dsv4_wire_put(&c->req, done, (size_t)n_done * 4);
    dsv4_wire_put(&c->req, a->stop, a->n_stop);
    dsv4_wire_finish(&c->req);
}

static void json_str(const char *s, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

int dsv4ctl_gen(int argc, char **argv)
{
    static const struct option opts[] = {
        { "run-dir", required_argument, NULL, 'r' },
        { "prompt-ids", required_argument, NULL, 'i' },
        { "prompt", required_argument, NULL, 'p' },
        { "chat", no_argument, NULL, 'c' },
        { "think", no_argument, NULL, 'T' },
        { "no-think", no_argument, NULL, 'N' },
        { "max-tokens", required_argument, NULL, 'n' },
        { "temperature", required_argument, NULL, 't' },
        { "top-p", required_argument, NULL, 'P' },
        { "top-k", required_argument, NULL, 'k' },
        { "seed", required_argument, NULL, 's' },
        { "stop", required_argument, NULL, 'S' },
        { "format", required_argument, NULL, 'f' },
        { "stats", no_argument, NULL, 'x' },
        { "progress", no_argument, NULL, 'G' },
        { "no-progress", no_argument, NULL, 'g' },
        { "dspark", no_argument, NULL, 'D' },
        { "no-dspark", no_argument, NULL, 'E' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    struct gen_args a = { .max_tokens = 16, .top_p = 1.0, .progress = -1 };
    int o;
    optind = 1;
    const char *me = "dsv4ctl gen";
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int bad = 0;
        switch (o) {
        case 'r': a.run_dir = optarg; break;
        case 'i': a.prompt_ids = optarg; break;
        case 'p': a.text = optarg; break;
        case 'c': a.chat = true; break;
        case 'T': a.think = true; break;
        case 'N': a.think = false; break;
        case 'x': a.stats = true; break;
        case 'G': a.progress = 1; break;
        case 'g': a.progress = 0; break;
        case 'D': a.no_dspark = false; break;  /* the default: speculate if the set runs --dspark */
        case 'E': a.no_dspark = true; break;
        case 'n': bad = dsv4_parse_int_opt(me, "max-tokens", optarg, 1, DSV4_WIRE_MAX_TOKENS,
                                           &a.max_tokens); break;
        case 't': bad = dsv4_parse_double_opt(me, "temperature", optarg, 0, 1e6, &a.temperature);
            break;
        case 'P': bad = dsv4_parse_double_opt(me, "top-p", optarg, 0, 1, &a.top_p); break;
        case 'k': bad = dsv4_parse_int_opt(me, "top-k", optarg, 0, INT32_MAX, &a.top_k); break;
        case 's': bad = dsv4_parse_u64_opt(me, "seed", optarg, 0, UINT64_MAX, &a.seed); break;
        case 'f': a.format = optarg; break;
        case 'S': {
            size_t n = strlen(optarg) + 1;
            if (n == 1 || a.n_stop + n > sizeof(a.stop)) {
                fprintf(stderr, "dsv4ctl gen: --stop: empty or too many stop strings\n");
                return DSV4_EXIT_USAGE;
            }
            memcpy(a.stop + a.n_stop, optarg, n);
            a.n_stop += n;
            break;
        }
        case 'h':
            printf("usage: dsv4ctl gen [--run-dir DIR] (--prompt-ids ID,... | --prompt TEXT | TEXT) "
                   "[--chat [--think|--no-think]] [--max-tokens N] [--temperature T] [--top-p P] [--top-k K] [--seed S] "
                   "[--stop STR]... [--format text|ids|jsonl] [--stats] [--progress|--no-progress]\n"
                   "       [--dspark|--no-dspark]\n");
            return DSV4_EXIT_OK;
        default: return DSV4_EXIT_USAGE;
        }
        if (bad < 0)
            return DSV4_EXIT_USAGE;
    }
    if (!a.text && optind < argc)
        a.text = argv[optind++];
    if (optind < argc || !!a.text == !!a.prompt_ids || a.max_tokens < 1 || a.temperature < 0 ||
        !(a.top_p > 0 && a.top_p <= 1) || a.top_k < 0) {
        fprintf(stderr, "dsv4ctl gen: give one of --prompt-ids or a text prompt; "
                        "--max-tokens >= 1, --temperature >= 0, --top-p in (0, 1], --top-k >= 0\n");
        return DSV4_EXIT_USAGE;
    }
    struct client c;
    int rc = client_open(&c, a.run_dir, "gen");
    if (rc) {
        client_close(&c);
        return rc;
    }
    char model[DSV4_PATH_MAX];
    int mrc = client_model(&c, model, sizeof(model));
    dsv4_tokenizer *tok = NULL;
    struct dsv4_err err;
    bool need_tok = a.text || !a.format || strcmp(a.format, "ids") != 0;
    if (need_tok && mrc < 0 && (a.text || (a.format && strcmp(a.format, "text") == 0))) {
        fprintf(stderr, "dsv4ctl gen: %s/model: %s (the set records its model there at start)\n",
                c.dir, mrc == -ENODATA ? "empty" : strerror(-mrc));
        client_close(&c);
        return DSV4_EXIT_NOINPUT;
    }
    if (need_tok && dsv4_tokenizer_open_dir(model, &tok, &err) < 0) {
        if (a.text || (a.format && strcmp(a.format, "text") == 0)) {
            fprintf(stderr, "dsv4ctl gen: tokenizer of %s: %s\n", model, err.msg);
            client_close(&c);
            return DSV4_EXIT_NOINPUT;
        }
    }
    const char *format = a.format ? a.format : tok ? "text" : "ids";
    if (strcmp(format, "ids") && strcmp(format, "text") && strcmp(format, "jsonl")) {
        fprintf(stderr, "dsv4ctl gen: --format must be text, ids or jsonl\n");
        client_close(&c);
        dsv4_tokenizer_free(tok);
        return DSV4_EXIT_USAGE;
    }
    struct dsv4_ids prompt = { 0 };
    if (a.prompt_ids) {
        if (!dsv4ctl_parse_ids(a.prompt_ids, &prompt)) {
            fprintf(stderr, "dsv4ctl gen: --prompt-ids: comma-separated non-negative ids\n");
            rc = DSV4_EXIT_USAGE;
        }
    } else if (dsv4_chat_prompt(tok, a.text, strlen(a.text), dsv4ctl_prompt_kind(a.chat, a.think),
                                &prompt, &err) < 0) {
        fprintf(stderr, "dsv4ctl gen: prompt: %s\n", err.msg);
        rc = DSV4_EXIT_DATAERR;
    }
    int32_t *got = dsv4_xmalloc((size_t)a.max_tokens * sizeof(int32_t));
    uint32_t n_got = 0, n_cached = 0;
    uint64_t id = client_new_id();
    struct dsv4_detok dt;
    if (tok)
        dsv4_detok_init(&dt, tok, false);
    if (!rc) {
        build_generate(&c, id, &a, &prompt, got, 0);
        if (client_submit(&c) < 0) {
            fprintf(stderr, "dsv4ctl gen: %s\n", client_unreachable(&c));
            rc = DSV4_EXIT_UNAVAILABLE;
        }
    }
    bool done = rc != 0, cancelled = false;
    struct prefill_progress pg;
    progress_init(&pg, a.progress);
    uint64_t t0 = dsv4_now_ns(), t_first = 0;
    uint64_t cancel_at = 0;
    while (!done) {
        struct dsv4_msg m;
        int r = client_wait(&c, 200, &m);
        if (r == -EINTR && !cancelled) {
            struct dsv4_msg_cancel cm = { id };
            struct dsv4_wire_buf b = { 0 };
            dsv4_wire_simple(&b, DSV4_MSG_CANCEL, &cm, sizeof(cm));
            dsv4_zsend(c.sock, NULL, 0, &b, 1);
            dsv4_wire_buf_free(&b);
            cancelled = true;
            cancel_at = dsv4_now_ns();
            continue;
        }
        if (cancelled && dsv4_now_ns() - cancel_at > 2000000000ull)
            break;
        if (r == -ENOTCONN) {
            fprintf(stderr, "dsv4ctl gen: the daemons stopped\n");
            rc = DSV4_EXIT_UNAVAILABLE;
            break;
        }
        if (r == -ECONNRESET) {     /* scheduler restarted: same id, the tokens we have */
            build_generate(&c, id, &a, &prompt, got, n_got);
            if (client_submit(&c) < 0)
                c.sched_pid = 0;    /* try again on the next turn */
            continue;
        }
        if (r != 1)
            continue;
        if (m.type == DSV4_MSG_PROGRESS) {
            const struct dsv4_msg_progress *p = m.body;
            if (p->req_id == id && n_got == 0)   /* also a liveness probe: shown only in prefill */
                progress_update(&pg, p->done, p->total);
            continue;
        }
        if (m.type == DSV4_MSG_TOKEN || m.type == DSV4_MSG_DONE || m.type == DSV4_MSG_ERROR)
            progress_end(&pg);
        if (m.type == DSV4_MSG_TOKEN) {
            const struct dsv4_msg_token *t = m.body;
            if (t->req_id != id)
                continue;
            for (uint32_t i = 0; i < t->n; i++) {
                int32_t v;
                memcpy(&v, (const char *)m.tail + 4 * i, 4);
                if (t->index + i != n_got || n_got >= (uint32_t)a.max_tokens)
                    continue;   /* a duplicate after a resubmission */
                got[n_got++] = v;
                if (n_got == 1)
                    t_first = dsv4_now_ns();
                if (!strcmp(format, "ids")) {
                    printf(n_got > 1 ? " %d" : "%d", v);
                } else {
                    const char *piece = "";
                    size_t len = 0;
                    if (!tok || dsv4_detok_feed(&dt, (uint32_t)v, &piece, &len, &err) < 0)
                        len = 0;
                    if (!strcmp(format, "text")) {
                        fwrite(piece, 1, len, stdout);
                    } else {
                        printf("{\"index\":%u,\"id\":%d", n_got - 1, v);
                        if (tok) {
                            printf(",\"text\":");
                            json_str(piece, len);
                        }
                        printf("}\n");
                    }
                }
                fflush(stdout);
            }
        } else if (m.type == DSV4_MSG_DONE) {
            const struct dsv4_msg_done *d = m.body;
            if (d->req_id != id)
                continue;
            static const char *const reasons[] = { "eos", "length", "stop", "cancelled" };
            n_cached = d->n_cached;
            if (!strcmp(format, "text")) {
                const char *piece;
                size_t len;
                dsv4_detok_flush(&dt, &piece, &len);
                fwrite(piece, 1, len, stdout);
            }
            if (!strcmp(format, "jsonl"))
                printf("{\"done\":true,\"reason\":\"%s\",\"n_generated\":%u,\"n_prompt\":%u,"
                       "\"n_cached\":%u}\n",
                       reasons[d->reason], d->n_generated, d->n_prompt, d->n_cached);
            else
                printf("\n");
            done = true;
        } else if (m.type == DSV4_MSG_ERROR) {
            const struct dsv4_msg_error *e = m.body;
            if (e->id != id && e->id != 0)
                continue;
            fprintf(stderr, "dsv4ctl gen: %s: %.*s\n", errname(e->code), (int)e->text_len,
                    (const char *)m.tail);
            rc = exit_for(e->code);
            done = true;
        }
    }
    progress_end(&pg);
    if (cancelled)
        rc = 130;
    if (a.stats && rc == 0 && n_got > 0) {   /* the same lines as `dsv4ctl run --stats` */
        double pre = (double)(t_first - t0) / 1e9, dec = (double)(dsv4_now_ns() - t_first) / 1e9;
        fprintf(stderr, "prefill: %zu tokens in %.3f s (%.2f tok/s)\n", prompt.n, pre,
                (double)prompt.n / pre);
        if (n_got > 1)
            fprintf(stderr, "decode: %u tokens in %.3f s (%.2f tok/s)\n", n_got - 1, dec,
                    (n_got - 1) / dec);
        fprintf(stderr, "ttft: %.3f s\n", pre);
        fprintf(stderr, "prefix-cache: restored %u of %zu prompt tokens\n", n_cached, prompt.n);
    }
    if (tok) {
        dsv4_detok_free(&dt);
        dsv4_tokenizer_free(tok);
    }
    free(got);
    dsv4_ids_free(&prompt);
    client_close(&c);
    return rc;
}

static int score_daemon(int argc, char **argv)
{
    static const struct option opts[] = {
        { "run-dir", required_argument, NULL, 'r' },
        { "prompt-ids", required_argument, NULL, 'i' },
        { "format", required_argument, NULL, 'f' },
        { 0 },
    };
    const char *run_dir = NULL, *ids = NULL;
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 'r')
            run_dir = optarg;
        else if (o == 'i')
            ids = optarg;
        else if (o == 'f' && strcmp(optarg, "tsv") == 0)
            ;
        else {
            fprintf(stderr, "usage: dsv4ctl score (--model DIR | [--run-dir DIR]) "
                            "--prompt-ids ID,... [--format tsv]\n");
            return DSV4_EXIT_USAGE;
        }
    }
    struct dsv4_ids prompt = { 0 };
    if (!ids || !dsv4ctl_parse_ids(ids, &prompt)) {
        fprintf(stderr, "dsv4ctl score: --prompt-ids ID,ID,... required\n");
        dsv4_ids_free(&prompt);
        return DSV4_EXIT_USAGE;
    }
    struct client c;
    int rc = client_open(&c, run_dir, "score");
    uint64_t id = client_new_id();
    struct dsv4_msg_score sc = { id, (uint32_t)prompt.n, 0 };
    if (!rc) {
        dsv4_wire_begin(&c.req, DSV4_MSG_SCORE);
        dsv4_wire_put(&c.req, &sc, sizeof(sc));
        dsv4_wire_put(&c.req, prompt.v, prompt.n * 4);
        dsv4_wire_finish(&c.req);
        if (client_submit(&c) < 0) {
            fprintf(stderr, "dsv4ctl score: %s\n", client_unreachable(&c));
            rc = DSV4_EXIT_UNAVAILABLE;
        }
    }
    uint32_t next = 0;
    while (!rc) {
        struct dsv4_msg m;
        int r = client_wait(&c, 200, &m);
        if (r == -EINTR) {
            rc = 130;
            break;
        }
        if (r == -ENOTCONN) {
            fprintf(stderr, "dsv4ctl score: the daemons stopped\n");
            rc = DSV4_EXIT_UNAVAILABLE;
            break;
        }
        if (r == -ECONNRESET) {     /* rows are deterministic: resubmit, skip what we printed */
            if (client_submit(&c) < 0)
                c.sched_pid = 0;
            continue;
        }
        if (r != 1)
            continue;
        if (m.type == DSV4_MSG_SCORE_ROWS) {
            const struct dsv4_msg_score_rows *sr = m.body;
            const struct dsv4_wire_row *rows = m.tail;
            for (uint32_t i = 0; sr->req_id == id && i < sr->n; i++) {
                uint32_t pos = sr->first + i;
                if (pos != next || pos >= prompt.n)
                    continue;
                printf("%u\t%d\t", pos, rows[i].argmax);
                if (rows[i].has_logprob)
                    printf("%.6f\n", rows[i].logprob);
                else
                    printf("-\n");
                next++;
            }
            fflush(stdout);
        } else if (m.type == DSV4_MSG_DONE && ((const struct dsv4_msg_done *)m.body)->req_id == id) {
            break;
        } else if (m.type == DSV4_MSG_ERROR) {
            const struct dsv4_msg_error *e = m.body;
            if (e->id != id && e->id != 0)
                continue;
            fprintf(stderr, "dsv4ctl score: %s: %.*s\n", errname(e->code), (int)e->text_len,
                    (const char *)m.tail);
            rc = exit_for(e->code);
        }
    }
    dsv4_ids_free(&prompt);
    client_close(&c);
    return rc;
}

/*
 * `score` goes to the daemons with --run-dir, or without --model when a set runs in the
 * default run directory; otherwise in-process (where a missing --model is a usage error).
 */
int dsv4ctl_score_any(int argc, char **argv)
{
    bool run_dir = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") || !strncmp(argv[i], "--model=", 8) ||
            !strcmp(argv[i], "--help"))
            return dsv4ctl_score(argc, argv);
        run_dir |= !strcmp(argv[i], "--run-dir") || !strncmp(argv[i], "--run-dir=", 10);
    }
    char dir[DSV4_PATH_MAX];
    dsv4_rundir_resolve(NULL, dir);
    if (run_dir || dsv4_rundir_supervisor_pid(dir) != 0)
        return score_daemon(argc, argv);
    return dsv4ctl_score(argc, argv);
}
