/* SPDX-License-Identifier: MIT */
/*
 * dsv4-api: the OpenAI-compatible (and Anthropic Messages) HTTP edge of the
 * daemon set. Supervised like the other daemons (READY, HEARTBEAT, its
 * stats page); the supervisor binds the listening socket and passes it as
 * --listen-fd, so the address is known before we run and survives our
 * restarts. Text is handled here (the served model's tokenizer and chat
 * template); the scheduler sees token ids over the wire protocol, exactly
 * as from `dsv4ctl gen`. docs/api.md describes the endpoints.
 *
 * usage: dsv4-api --run-dir DIR --model DIR --listen-fd FD [--api-key-file FILE]
 *        [--max-body-mb N] [--max-connections N] [--max-conn-per-client N]
 *        [--idle-timeout-s N] [--default-max-tokens N] [--max-ctx N]
 * A socket bound to a non-loopback address without an API key is refused
 * (exit 78: the supervisor does not restart a bad configuration).
 */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zmq.h>

#include "api.h"
#include "tcp_listen.h"
#include "chat.h"
#include "config.h"
#include "daemon.h"
#include "exitcode.h"
#include "parse.h"
#include "session_layout.h"
#include "http.h"
#include "log.h"
#include "util.h"


static char *read_key(const char *path, struct dsv4_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        dsv4_errf(err, -errno, "api key file %s: %s", path, strerror(errno));
        return NULL;
    }
    char buf[512];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    if (n == 0 || strchr(buf, '\n')) {
        dsv4_errf(err, -EINVAL, "api key file %s: one non-empty line expected", path);
        return NULL;
    }
    return dsv4_xstrdup(buf);
}

static int setup(struct api_ctx *c, const char *model, const char *key_file, int fd,
                 int64_t max_ctx, struct dsv4_err *err)
{
    if (key_file && !(c->api_key = read_key(key_file, err)))
        return -EINVAL;
    if (!c->api_key && !dsv4_fd_is_loopback(fd))
        return dsv4_errf(err, -EPERM, "refusing to serve a non-loopback address without "
                                      "--api-key-file");
    char real[DSV4_PATH_MAX];
    if (!realpath(model, real))
        return dsv4_errf(err, -errno, "model %s: %s", model, strerror(errno));
    snprintf(c->model_id, sizeof(c->model_id), "%s", basename(real));
    struct stat st;
    c->created = stat(real, &st) == 0 ? (long long)st.st_mtime : 0;
    struct dsv4_config cfg;
    int r = dsv4_config_load(model, &cfg, err);
    if (r < 0)
        return r;
    /* the context a request may fill: the scheduler's (the plan's --max-ctx) within the
     * model's, so the API's 400 and the scheduler's "too large" agree */
    c->n_ctx = cfg.max_position_embeddings > 0 ? cfg.max_position_embeddings : DSV4_DEFAULT_MAX_CTX;
    if (max_ctx > 0 && max_ctx < c->n_ctx)
        c->n_ctx = max_ctx;
    if ((r = dsv4_tokenizer_open_dir(model, &c->tok, err)) < 0)
        return r;
    c->has_eos = dsv4_tokenizer_eos(c->tok, &c->eos);
    c->has_end_think = dsv4_tokenizer_find(c->tok, "</think>", &c->end_think);
    c->dsml_special = dsv4_tokenizer_find(c->tok, DSV4_CHAT_DSML, &c->dsml) &&
                      dsv4_tokenizer_is_special(c->tok, c->dsml);
    pthread_mutex_init(&c->tok_mu, NULL);
    return 0;
}

struct args {
    const char *run_dir, *model, *key_file;
    struct api_http_opts ho;
    double body_mb;
    int default_max;
    int64_t max_ctx;    /* 0: the model's context */
};

static void usage(void)
{
    fprintf(stderr, "usage: dsv4-api --run-dir DIR --model DIR --listen-fd FD "
                    "[--api-key-file FILE] [--max-body-mb N] [--max-connections N] "
                    "[--max-conn-per-client N] [--idle-timeout-s N] [--default-max-tokens N] "
                    "[--max-ctx N]\n");
}

static int parse_argv(int argc, char **argv, struct args *a)
{
    static const struct option opts[] = {
        { "run-dir", required_argument, NULL, 'r' },
        { "model", required_argument, NULL, 'm' },
        { "listen-fd", required_argument, NULL, 'l' },
        { "api-key-file", required_argument, NULL, 'k' },
        { "max-body-mb", required_argument, NULL, 'b' },
        { "max-connections", required_argument, NULL, 'c' },
        { "max-conn-per-client", required_argument, NULL, 'p' },
        { "idle-timeout-s", required_argument, NULL, 'i' },
        { "default-max-tokens", required_argument, NULL, 'd' },
        { "max-ctx", required_argument, NULL, 'x' },
        { 0 },
    };
    const char *me = "dsv4-api";
    *a = (struct args){ .ho = { .listen_fd = -1, .max_connections = 256, .max_per_client = 64,
                                .idle_timeout_s = 30 },
                        .body_mb = 8, .default_max = 4096 };
    int o, r = 0, v;
    while (r == 0 && (o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'r': a->run_dir = optarg; break;
        case 'm': a->model = optarg; break;
        case 'l': r = dsv4_parse_int_opt(me, "listen-fd", optarg, 0, 1 << 20, &a->ho.listen_fd);
            break;
        case 'k': a->key_file = optarg; break;
        case 'b': r = dsv4_parse_double_opt(me, "max-body-mb", optarg, 0.001, 4096, &a->body_mb);
            break;
        case 'c':
            if ((r = dsv4_parse_int_opt(me, "max-connections", optarg, 1, 65536, &v)) == 0)
                a->ho.max_connections = (unsigned)v;
            break;
        case 'p':
            if ((r = dsv4_parse_int_opt(me, "max-conn-per-client", optarg, 1, 65536, &v)) == 0)
                a->ho.max_per_client = (unsigned)v;
            break;
        case 'i':
            if ((r = dsv4_parse_int_opt(me, "idle-timeout-s", optarg, 1, 86400, &v)) == 0)
                a->ho.idle_timeout_s = (unsigned)v;
            break;
        case 'd': r = dsv4_parse_int_opt(me, "default-max-tokens", optarg, 1, 1 << 24,
                                         &a->default_max); break;
        case 'x':
            if ((r = dsv4_parse_i64(optarg, 0, INT32_MAX, &a->max_ctx)) < 0)
                fprintf(stderr, "%s: --max-ctx: '%s' is not an integer in [0, %d]\n", me, optarg,
                        INT32_MAX);
            break;
        default: usage(); return -EINVAL;
        }
    }
    if (r < 0)
        return r;
    if (!a->model || a->ho.listen_fd < 0 || optind != argc) {
        usage();
        return -EINVAL;
    }
    return 0;
}

static int run(struct args *a)
{
    struct api_http_opts ho = a->ho;
    const char *model = a->model, *key_file = a->key_file, *run_dir = a->run_dir;
    double body_mb = a->body_mb;
    int default_max = a->default_max;
    static struct api_ctx c;
    c.max_body = (size_t)(body_mb * 1048576.0);
    c.default_max_tokens = default_max;
    c.idle_timeout_s = ho.idle_timeout_s;
    struct dsv4_daemon d;
    struct dsv4_err err;
    if (dsv4_daemon_init(&d, DSV4_ROLE_API, run_dir, &err) < 0) {
        dsv4_log_error("api", "%s", err.msg);
        dsv4_daemon_fini(&d);
        return DSV4_EXIT_UNAVAILABLE;
    }
    int rc = 0;
    struct api_http *h = NULL;
    if (setup(&c, model, key_file, ho.listen_fd, a->max_ctx, &err) < 0) {
        dsv4_log_error("api", "%s", err.msg);
        rc = DSV4_EXIT_CONFIG;
        goto out;
    }
    snprintf(c.run_dir, sizeof(c.run_dir), "%s", d.run_dir);
    c.zctx = d.zctx;
    c.stats = d.stats;
    for (int r = 0; r < DSV4_ROLE_COUNT; r++)
        if (dsv4_stats_map(d.run_dir, r, false, &c.page[r], NULL) < 0)
            c.page[r] = NULL;
    if (!c.page[DSV4_ROLE_SCHEDULER] ||
        dsv4_rundir_endpoint(d.run_dir, "sched", c.sched_ep, &err) < 0) {
        dsv4_log_error("api", "the scheduler's stats page or socket: not found");
        rc = DSV4_EXIT_UNAVAILABLE;
        goto out;
    }
    if (api_http_start(&c, &ho, &h, &err) < 0) {
        dsv4_log_error("api", "%s", err.msg);
        rc = DSV4_EXIT_OSERR;
        goto out;
    }
    dsv4_daemon_ready(&d);
    while (!d.stop) {
        zmq_pollitem_t it[2];
        dsv4_daemon_poll_items(&d, it);
        zmq_poll(it, 2, 500);
        dsv4_daemon_handle(&d, it);
    }
    dsv4_log_info("api", "stopping");
out:
    api_http_stop(h);
    for (int r = 0; r < DSV4_ROLE_COUNT; r++)
        dsv4_stats_unmap(c.page[r]);
    dsv4_tokenizer_free(c.tok);
    free(c.api_key);
    dsv4_daemon_fini(&d);
    return rc;
}

int main(int argc, char **argv)
{
    struct args a;
    if (parse_argv(argc, argv, &a) < 0)
        return DSV4_EXIT_CONFIG;   /* the supervisor does not restart a bad command line */
    return run(&a);
}
