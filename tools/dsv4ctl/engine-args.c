/* SPDX-License-Identifier: MIT */
/*
 * Shared option parsing and engine setup of `dsv4ctl run` and `dsv4ctl score`.
 */
#include "engine-args.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "dsv4ctl.h"
#include "parse.h"
#include "plan.h"
#include "prompt.h"
#include "session_layout.h"
#include "util.h"

static bool parse_long(const char *s, long long lo, long long hi, long long *ret)
{
    int64_t v;
    if (dsv4_parse_i64(s, lo, hi, &v) < 0)
        return false;
    *ret = v;
    return true;
}

/* --prompt-ids into a->prompt (int32, what the engine takes). */
static bool parse_ids(const char *s, struct engine_args *a)
{
    struct dsv4_ids ids = { 0 };
    bool ok = dsv4ctl_parse_ids(s, &ids) && ids.n <= INT32_MAX;
    if (ok) {
        a->prompt = dsv4_xmalloc(ids.n * sizeof(int32_t));
        for (size_t i = 0; i < ids.n; i++)
            a->prompt[i] = (int32_t)ids.v[i];
        a->n_prompt = (int)ids.n;
    }
    dsv4_ids_free(&ids);
    return ok;
}

int engine_args_parse(int argc, char **argv, bool generate, struct engine_args *a)
{
    enum { O_MODEL = 256, O_IDS, O_MAX, O_TEMP, O_SEED, O_FORMAT, O_STATS, O_THREADS, O_CHUNK,
           O_CTX, O_CACHE, O_PROMPT, O_CHAT, O_THINK, O_NO_THINK, O_PROGRESS, O_NO_PROGRESS,
           O_DSPARK, O_NO_DSPARK, O_PROPOSER, O_VERIFY, O_NO_QUENCH, O_TRACE, O_PC_MB, O_PC_GB,
           O_PC_DIR, O_NO_PC };
    static const struct option opts[] = {
        { "model", required_argument, NULL, O_MODEL },
        { "prompt-ids", required_argument, NULL, O_IDS },
        { "prompt", required_argument, NULL, O_PROMPT },
        { "chat", no_argument, NULL, O_CHAT },
        { "think", no_argument, NULL, O_THINK },
        { "no-think", no_argument, NULL, O_NO_THINK },
        { "max-tokens", required_argument, NULL, O_MAX },
        { "temperature", required_argument, NULL, O_TEMP },
        { "seed", required_argument, NULL, O_SEED },
        { "format", required_argument, NULL, O_FORMAT },
        { "stats", no_argument, NULL, O_STATS },
        { "threads", required_argument, NULL, O_THREADS },
        { "chunk", required_argument, NULL, O_CHUNK },
        { "max-ctx", required_argument, NULL, O_CTX },
        { "expert-cache-mib", required_argument, NULL, O_CACHE },
        { "progress", no_argument, NULL, O_PROGRESS },
        { "no-progress", no_argument, NULL, O_NO_PROGRESS },
        { "dspark", no_argument, NULL, O_DSPARK },
        { "no-dspark", no_argument, NULL, O_NO_DSPARK },
        { "dspark-proposer", required_argument, NULL, O_PROPOSER },
        { "dspark-verify", required_argument, NULL, O_VERIFY },
        { "dspark-no-quench", no_argument, NULL, O_NO_QUENCH },
        { "dspark-trace", required_argument, NULL, O_TRACE },
        { "prefix-cache-mb", required_argument, NULL, O_PC_MB },
        { "prefix-cache-gb", required_argument, NULL, O_PC_GB },
        { "prefix-cache-dir", required_argument, NULL, O_PC_DIR },
        { "no-prefix-cache", no_argument, NULL, O_NO_PC },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    memset(a, 0, sizeof(*a));
    a->max_tokens = 16;
    a->threads = 1;
    /* run: 0 until engine_args_open asks the plan; score keeps a step's logits per row */
    a->chunk = generate ? 0 : DSV4_DEFAULT_CHUNK;
    a->progress = -1;
    a->prefix_cache_mb = ENGINE_ARGS_PREFIX_MB;
    a->prefix_cache_gb = ENGINE_ARGS_PREFIX_GB;
    long long v;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case O_MODEL:
            a->model = optarg;
            break;
        case O_IDS:
            free(a->prompt);
            if (!parse_ids(optarg, a)) {
                fprintf(stderr, "%s: --prompt-ids wants comma-separated token ids, got '%s'\n",
                        argv[0], optarg);
                return DSV4_EXIT_USAGE;
            }
            break;
        case O_PROMPT:
            a->text = optarg;
            break;
        case O_CHAT:
            a->chat = true;
            break;
        case O_THINK:
        case O_NO_THINK:
            a->think = c == O_THINK;
            break;
        case O_MAX:
            if (!generate || !parse_long(optarg, 0, 1 << 24, &v))
                goto bad;
            a->max_tokens = (int)v;
            break;
        case O_TEMP:
            if (!generate || dsv4_parse_double(optarg, 0, 1e6, &a->temperature) < 0)
                goto bad;
            break;
        case O_SEED:
            if (!generate || !parse_long(optarg, 0, INT64_MAX, &v))
                goto bad;
            a->seed = (uint64_t)v;
            break;
        case O_FORMAT:
            a->format = optarg;
            if (strcmp(optarg, generate ? "ids" : "tsv") != 0 &&
                (!generate || strcmp(optarg, "text") != 0))
                goto bad;
            break;
        case O_STATS:
            a->stats = true;
            break;
        case O_PROGRESS:
        case O_NO_PROGRESS:
            a->progress = c == O_PROGRESS;
            break;
        case O_THREADS:
            if (!parse_long(optarg, 1, 1024, &v))
                goto bad;
            a->threads = (int)v;
            break;
        case O_CHUNK:
            if (!parse_long(optarg, 1, DSV4_MAX_CHUNK, &v))
                goto bad;
            a->chunk = (int)v;
            break;
        case O_CTX:
            if (!parse_long(optarg, 1, INT64_MAX, &v))
                goto bad;
            a->max_ctx = v;
            break;
        case O_CACHE:
            if (!parse_long(optarg, 1, 1LL << 40, &v))
                goto bad;
            a->expert_cache_mib = (uint64_t)v;
            break;
        case O_DSPARK:
        case O_NO_DSPARK:
            if (!generate)
                goto bad_flag;
            a->dspark = c == O_DSPARK;
            break;
        case O_PROPOSER:
            if (!generate)
                goto bad;
            a->proposer = optarg;
            a->dspark = true;
            break;
        case O_VERIFY:
            if (!generate || !parse_long(optarg, 0, 64, &v))
                goto bad;
            a->dspark_verify = (int)v;
            break;
        case O_NO_QUENCH:
            if (!generate)
                goto bad_flag;
            a->dspark_no_quench = true;
            break;
        case O_TRACE:
            if (!generate)
                goto bad;
            a->dspark_trace = optarg;
            break;
        case O_PC_MB:
            if (!generate || !parse_long(optarg, 0, 1LL << 30, &v))
                goto bad;
            a->prefix_cache_mb = (uint64_t)v;
            break;
        case O_PC_GB:
            if (!generate || dsv4_parse_double(optarg, 0, 1 << 20, &a->prefix_cache_gb) < 0)
                goto bad;
            break;
        case O_PC_DIR:
            if (!generate || optarg[0] != '/')
                goto bad;
            a->prefix_cache_dir = optarg;
            break;
        case O_NO_PC:
            if (!generate)
                goto bad_flag;
            a->no_prefix_cache = true;
            break;
        case 'h':
            printf("usage: dsv4ctl %s --model DIR (--prompt-ids ID,ID,... | [--prompt] TEXT "
                   "[--chat] [--think|--no-think]) %s[--format text|%s] "
                   "[--threads N] [--chunk N] [--max-ctx N] [--expert-cache-mib N] [--stats]%s\n",
                   argv[0], generate ? "[--max-tokens N] [--temperature T] [--seed S] " : "",
                   generate ? "ids" : "tsv",
                   generate ? " [--progress|--no-progress] [--dspark|--no-dspark] [--dspark-verify N]"
                              " [--dspark-no-quench] [--dspark-trace FILE]"
                              " [--no-prefix-cache] [--prefix-cache-mb N] [--prefix-cache-gb G]"
                              " [--prefix-cache-dir /DIR]"
                              " [--dspark-proposer replay:FILE[:err=N,..|all]"
                              "[:agree=P][:conf=C][:draft]] (test-only)" : "");
            return -1;
        case ':':
            fprintf(stderr, "%s: option '%s' needs a value\n", argv[0], argv[optind - 1]);
            return DSV4_EXIT_USAGE;
        default:
            fprintf(stderr, "%s: unknown option '%s'\n", argv[0], argv[optind - 1]);
            return DSV4_EXIT_USAGE;
        }
        continue;
bad:
        fprintf(stderr, "%s: bad value '%s' for %s\n", argv[0], optarg, argv[optind - 1]);
        return DSV4_EXIT_USAGE;
bad_flag:
        fprintf(stderr, "%s: unknown option '%s'\n", argv[0], argv[optind - 1]);
        return DSV4_EXIT_USAGE;
    }
    if (optind < argc && !a->text)
        a->text = argv[optind++];
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", argv[0], argv[optind]);
        return DSV4_EXIT_USAGE;
    }
    if (!a->model || !!a->prompt == !!a->text) {
        fprintf(stderr, "%s: --model and one of --prompt-ids or a text prompt are required\n",
                argv[0]);
        return DSV4_EXIT_USAGE;
    }
    if ((a->chat || a->think) && !a->text) {
        fprintf(stderr, "%s: --chat/--think apply to a text prompt\n", argv[0]);
        return DSV4_EXIT_USAGE;
    }
    if (!a->format)
        a->format = !generate ? "tsv" : a->text ? "text" : "ids";
    if (!a->text && strcmp(a->format, "text") != 0)
        return 0;
    struct dsv4_err err = { "" };
    if (dsv4_tokenizer_open_dir(a->model, &a->tok, &err) < 0) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        return DSV4_EXIT_DATAERR;
    }
    if (!a->text)
        return 0;
    struct dsv4_ids ids = { 0 };
    if (dsv4_chat_prompt(a->tok, a->text, strlen(a->text), dsv4ctl_prompt_kind(a->chat, a->think),
                         &ids, &err) < 0 || ids.n == 0 ||
        ids.n > INT32_MAX) {
        fprintf(stderr, "%s: cannot encode the prompt: %s\n", argv[0], err.msg);
        dsv4_ids_free(&ids);
        return DSV4_EXIT_DATAERR;
    }
    a->prompt = dsv4_xmalloc(ids.n * sizeof(int32_t));
    for (size_t i = 0; i < ids.n; i++)
        a->prompt[i] = (int32_t)ids.v[i];
    a->n_prompt = (int)ids.n;
    dsv4_ids_free(&ids);
    return 0;
}

void engine_args_free(struct engine_args *a)
{
    free(a->prompt);
    a->prompt = NULL;
    dsv4_tokenizer_free(a->tok);
    a->tok = NULL;
}

/* run's prefill step when --chunk is not given: the plan's for one in-process session at this
 * machine's default budget (daemons/lib/plan.c), the default where no plan can be made. */
static int run_chunk(const struct engine_args *a, const struct dsv4_config *cfg, int64_t max_ctx)
{
    struct dsv4_plan p;
    struct dsv4_plan_opts o = { .max_ctx = max_ctx, .sessions = 1, .threads = a->threads,
                                .in_process = true, .dspark = a->dspark, .prefix_ram = 0 };
    if (max_ctx > INT32_MAX || dsv4_plan_make(cfg, &o, &p, NULL) < 0)
        return DSV4_DEFAULT_CHUNK;
    return p.o.chunk;
}

int engine_args_open(struct engine_args *a, int64_t positions, dsv4_engine **eng,
                     dsv4_session **ses)
{
    struct dsv4_err err = { "" };
    struct dsv4_engine_opts eo = { .n_threads = a->threads,
                                   .expert_cache_bytes = a->expert_cache_mib << 20,
                                   .dspark = a->dspark };
    if (a->dspark) {
        /* the drafter loads with the engine; a test proposer runs without one */
        struct dsv4_config cfg;
        if (dsv4_config_load(a->model, &cfg, NULL) == 0 && cfg.dspark_stages < 1) {
            if (!a->proposer) {
                fprintf(stderr, "dsv4ctl: --dspark: %s has no DSpark drafter (no dspark_* keys "
                                "in its config)\n", a->model);
                return DSV4_EXIT_USAGE;
            }
            eo.dspark = false;
        }
    }
    int rc = dsv4_engine_open(a->model, &eo, eng, &err);
    if (rc < 0) {
        fprintf(stderr, "dsv4ctl: %s\n", err.msg);
        return rc == -ENOENT ? DSV4_EXIT_NOINPUT : DSV4_EXIT_DATAERR;
    }
    struct dsv4_session_opts so = { .max_ctx = a->max_ctx ? a->max_ctx : positions };
    if (!a->chunk)
        a->chunk = run_chunk(a, dsv4_engine_config(*eng), so.max_ctx);
    so.chunk = a->chunk;
    if ((rc = dsv4_session_new(*eng, &so, ses, &err)) < 0) {
        fprintf(stderr, "dsv4ctl: %s\n", err.msg);
        *eng = dsv4_engine_free(*eng);
        return DSV4_EXIT_USAGE;
    }
    return 0;
}
