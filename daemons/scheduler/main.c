/* SPDX-License-Identifier: MIT */
/*
 * dsv4-scheduler: the clients' endpoint. It admits GENERATE and SCORE
 * requests into a bounded queue (ERROR busy when full), runs up to
 * --max-active of them on compute sessions, samples, applies the stop
 * conditions, streams TOKEN events and ends each request with DONE (or
 * ERROR). Each request keeps its prompt and every generated token: the
 * compute daemon holds no request state, so when it restarts (the
 * supervisor's PEER_RESTARTED, or a NOSESSION error) the scheduler reopens
 * the session and replays the sequence, and because sampling is a pure
 * function of (seed, token index) the stream continues exactly as an
 * uninterrupted run. A client that lost the scheduler itself resubmits with
 * the tokens it has (n_done) and the stream resumes the same way. A client
 * that is gone (its process died) is noticed on the next send to it, and its
 * request is cancelled: to_client(). A prefill in several chunks reports
 * PROGRESS to its client and in the stats page's prefill gauges.
 *
 * The step (step.c): every active request's next command goes to compute at
 * once and the FORWARDs run as one batched step. A generation step feeds the
 * rows compute has not seen (the prompt in chunks, a replay, else the last
 * token) and accepts tokens from the per-row results. With --dspark a greedy
 * request's step is DRAFT, then one FORWARD of the anchor and the drafts the
 * policy verifies (DSV4_FWD_ALL_ROWS), then ROLLBACK past the accepted prefix
 * (spec.h; verification and acceptance in verify_result()).
 *
 * This file holds the arguments, the sockets and the loop; the message handlers are in
 * handlers.c, the step in step.c (sched.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "config.h"
#include "daemon.h"
#include "exitcode.h"
#include "parse.h"
#include "log.h"
#include "session_layout.h"
#include "sched.h"

struct args {
    const char *model, *run_dir, *trace;
    int max_active, queue, step_tokens;
    int64_t max_ctx;            /* 0: the default, capped by the model */
    bool dspark;
};

static void usage(void)
{
    fprintf(stderr, "usage: dsv4-scheduler --model DIR [--run-dir DIR] [--max-active N] "
                    "[--queue N] [--max-ctx N] [--step-tokens N] [--dspark] "
                    "[--dspark-trace FILE]\n");
}

static int parse_argv(int argc, char **argv, struct args *a)
{
    static const struct option opts[] = {
        { "model", required_argument, NULL, 'm' },
        { "run-dir", required_argument, NULL, 'r' },
        { "max-active", required_argument, NULL, 'a' },
        { "queue", required_argument, NULL, 'q' },
        { "dspark", no_argument, NULL, 'D' },
        { "max-ctx", required_argument, NULL, 'c' },
        { "dspark-trace", required_argument, NULL, 'T' },
        { "step-tokens", required_argument, NULL, 'S' },
        { 0 },
    };
    const char *me = "dsv4-scheduler";
    *a = (struct args){ .max_active = DSV4_DEFAULT_SESSIONS, .queue = 8,
                        .step_tokens = DSV4_DEFAULT_CHUNK };
    int o, r = 0;
    while (r == 0 && (o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'm': a->model = optarg; break;
        case 'r': a->run_dir = optarg; break;
        case 'a': r = dsv4_parse_int_opt(me, "max-active", optarg, 1, 1 << 16, &a->max_active);
            break;
        case 'q': r = dsv4_parse_int_opt(me, "queue", optarg, 0, 1 << 16, &a->queue); break;
        case 'D': a->dspark = true; break;
        case 'T': a->trace = optarg; break;
        case 'S': r = dsv4_parse_int_opt(me, "step-tokens", optarg, 1, DSV4_WIRE_MAX_TOKENS,
                                         &a->step_tokens); break;
        case 'c':
            if ((r = dsv4_parse_i64(optarg, 1, 2 * (int64_t)DSV4_WIRE_MAX_TOKENS, &a->max_ctx)) < 0)
                fprintf(stderr, "%s: --max-ctx: '%s' is not an integer in [1, %d]\n", me, optarg,
                        2 * DSV4_WIRE_MAX_TOKENS);
            break;
        default: usage(); return -EINVAL;
        }
    }
    if (r < 0)
        return r;
    if (!a->model || optind != argc) {
        usage();
        return -EINVAL;
    }
    return 0;
}

/* Environment knobs of the tests: a number in [min, max], else the default (with a warning). */
static int env_int(const char *name, int min, int max, int def)
{
    const char *v = getenv(name);
    int x = def;
    if (v && dsv4_parse_int(v, min, max, &x) < 0) {
        dsv4_log_warn("scheduler", "%s=%s: want %d..%d; using %d", name, v, min, max, def);
        x = def;
    }
    return x;
}

/*
 * When the last request ends, malloc_trim(0) gives the allocator's free pages back: without it
 * the RSS of an idle scheduler creeps up for a long while (the soak saw +6 % over 900 requests,
 * every byte of it free pages inside glibc's arenas — the requests' buffers and the ZeroMQ I/O
 * thread's connection buffers — touched for the first time, with a flat live heap), so a leak
 * would be hard to tell from it. It runs once per busy-to-idle transition: cheap next to the
 * generation that preceded it.
 */
static void serve(struct sched *s)
{
    bool busy = false;
    while (!s->d.stop) {
        zmq_pollitem_t it[4];
        dsv4_daemon_poll_items(&s->d, it);
        it[2] = (zmq_pollitem_t){ s->clients, 0, ZMQ_POLLIN, 0 };
        it[3] = (zmq_pollitem_t){ s->compute, 0, ZMQ_POLLIN, 0 };
        bool waiting = false;
        for (int i = 0; i < s->n_reqs && !waiting; i++)
            waiting = s->reqs[i].state == R_ACTIVE && s->n_inflight == 0;
        if (zmq_poll(it, 4, waiting ? 10 : 1000) < 0 && errno != EINTR)
            break;
        dsv4_daemon_handle(&s->d, it);
        int r;
        if (it[2].revents & ZMQ_POLLIN)
            while ((r = dsv4_zrecv(s->clients, &s->in, 1, 1)) != -EAGAIN) {
                if (r < 0)
                    dsv4_daemon_bad_message(&s->d, "client", "framing");
                else
                    sched_on_client(s);
            }
        if (it[3].revents & ZMQ_POLLIN)
            while ((r = dsv4_zrecv(s->compute, &s->in, 0, 1)) != -EAGAIN)
                if (r == 0)
                    sched_on_compute(s);
        schedule(s);
        bool any = false;
        for (int i = 0; i < s->n_reqs && !any; i++)
            any = s->reqs[i].state != R_FREE;
        if (busy && !any)
            malloc_trim(0);
        busy = any;
    }
}

static int run(const struct args *a)
{
    static struct sched s;
    struct dsv4_err err = { "" };
    int rc = DSV4_EXIT_OK;
    if (dsv4_daemon_init(&s.d, DSV4_ROLE_SCHEDULER, a->run_dir, &err) < 0) {
        dsv4_log_error("scheduler", "%s", err.msg);
        rc = DSV4_EXIT_OSERR;
        goto out;
    }
    s.d.on_peer = sched_on_peer;
    s.d.peer_ctx = &s;
    struct dsv4_config cfg;
    if (dsv4_config_load(a->model, &cfg, &err) < 0) {
        dsv4_log_error("scheduler", "%s", err.msg);
        rc = DSV4_EXIT_CONFIG;
        goto out;
    }
    s.eos = cfg.eos_token_id;
    s.vocab = cfg.vocab_size;
    if (a->trace) {     /* appended to: a restarted scheduler goes on in the same file */
        int tfd = open(a->trace, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (tfd < 0 || !(s.trace = fdopen(tfd, "a"))) {
            dsv4_log_error("scheduler", "--dspark-trace %s: %s", a->trace, strerror(errno));
            if (tfd >= 0)
                close(tfd);
            rc = DSV4_EXIT_CONFIG;
            goto out;
        }
    }
    s.max_ctx = a->max_ctx ? a->max_ctx : DSV4_DEFAULT_MAX_CTX;
    if (cfg.max_position_embeddings > 0)
        s.max_ctx = DSV4_MIN(s.max_ctx, cfg.max_position_embeddings);
    s.dspark_block = a->dspark ? cfg.dspark_block_size : 0;
    s.dspark_opts.fixed_verify = env_int("DSV4_TEST_DSPARK_VERIFY", 0, DSV4_WIRE_MAX_DRAFT, 0);
    if (dsv4_tokenizer_open_dir(a->model, &s.tok, &err) < 0)
        dsv4_log_info("scheduler", "no tokenizer (%s): stop strings refused", err.msg);
    s.max_active = a->max_active;
    s.queue_cap = a->queue;
    s.n_reqs = a->max_active + a->queue;
    s.prefill_rows = (uint32_t)env_int("DSV4_PREFILL_ROWS", 1, DSV4_WIRE_MAX_TOKENS, PREFILL_ROWS);
    s.step_tokens = (uint32_t)a->step_tokens;
    s.reqs = dsv4_xcalloc((size_t)s.n_reqs, sizeof(*s.reqs));
    s.fwd = dsv4_xcalloc((size_t)s.max_active, sizeof(*s.fwd));
    s.fw = dsv4_xcalloc((size_t)s.n_reqs, sizeof(*s.fw));
    s.catching = dsv4_xcalloc((size_t)s.n_reqs, sizeof(*s.catching));
    /* session ids unique across scheduler restarts: compute may still hold older ones */
    s.next_session = (uint64_t)getpid() << 32;
    char ep[DSV4_PATH_MAX];
    s.compute = dsv4_zsock(s.d.zctx, ZMQ_DEALER, NULL);
    s.clients = dsv4_zsock(s.d.zctx, ZMQ_ROUTER, NULL);
    int mandatory = 1;  /* sends to a gone client fail (EHOSTUNREACH): see to_client() */
    zmq_setsockopt(s.clients, ZMQ_ROUTER_MANDATORY, &mandatory, sizeof(mandatory));
    err.msg[0] = '\0';  /* the tokenizer's note above is not a socket error */
    if (dsv4_rundir_endpoint(s.d.run_dir, "compute", ep, &err) < 0 || zmq_connect(s.compute, ep) < 0 ||
        dsv4_rundir_endpoint(s.d.run_dir, "sched", ep, &err) < 0 || zmq_bind(s.clients, ep) < 0) {
        dsv4_log_error("scheduler", "sockets: %s", err.msg[0] ? err.msg : zmq_strerror(errno));
        rc = DSV4_EXIT_OSERR;
        goto out;
    }
    dsv4_daemon_ready(&s.d);
    serve(&s);
    dsv4_log_info("scheduler", "stopping");
    for (int i = 0; i < s.n_reqs; i++)
        if (s.reqs[i].state != R_FREE)
            fail(&s, &s.reqs[i], DSV4_WE_UNAVAILABLE, "scheduler stopping");
out:    /* every path: each free takes NULL */
    if (s.clients)
        zmq_close(s.clients);
    if (s.compute)
        zmq_close(s.compute);
    dsv4_daemon_fini(&s.d);
    dsv4_tokenizer_free(s.tok);
    if (s.trace)
        fclose(s.trace);
    free(s.reqs);
    for (int i = 0; s.fwd && i < s.max_active; i++)
        dsv4_wire_buf_free(&s.fwd[i]);
    free(s.fwd);
    free(s.fw);
    free(s.catching);
    dsv4_zin_free(&s.in);
    dsv4_wire_buf_free(&s.out);
    return rc;
}

int main(int argc, char **argv)
{
    struct args a;
    if (parse_argv(argc, argv, &a) < 0)
        return DSV4_EXIT_USAGE;
    return run(&a);
}
