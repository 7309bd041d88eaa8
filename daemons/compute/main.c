/* SPDX-License-Identifier: MIT */
/*
 * dsv4-compute: holds the model's resident weights (loaded once) and the
 * sequence sessions, and executes the scheduler's commands on them:
 * SESSION_OPEN/CLOSE, FORWARD (a batch of consecutive (token, position)
 * rows, answered with per-row argmax / target log-prob / top-k and, on
 * request, the last row's logits), SNAPSHOT and ROLLBACK, and with --dspark
 * DRAFT (the drafter's block; each session keeps the taps of its rows for
 * the drafter, daemons/compute/speculate.h). It keeps no request state:
 * after a restart the scheduler replays each sequence.
 * One thread drives the loop; the engine's pool does the math.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zmq.h>

#include "compute.h"
#include "daemon.h"
#include "exitcode.h"
#include "parse.h"
#include "config.h"
#include "engine.h"
#include "speculate.h"
#include "fetcher_client.h"
#include "log.h"
#include "plan.h"
#include "prefix.h"
#include "session_layout.h"

static int fetched_acquire(void *ctx, int layer, const int *ids, int n,
                           const struct dsv4_expert_weights **ret, struct dsv4_err *err)
{
    struct fetched *f = ctx;
    const struct dsv4_fetcher_expert *v[512];
    if (n > (int)DSV4_ARRAY_SIZE(v))
        return dsv4_errf(err, -E2BIG, "layer %d: %d experts in one lease", layer, n);
    int r = dsv4_fetcher_client_acquire(f->client, layer, ids, n, v, err);
    dsv4_daemon_heartbeat(f->d);
    if (r < 0)
        return r;
    for (int i = 0; i < n; i++) {
        struct dsv4_expert_weights *w = &f->store[(size_t)layer * f->n_experts + ids[i]];
        *w = (struct dsv4_expert_weights){ v[i]->w1, v[i]->w3, v[i]->w2 };
        ret[i] = w;
    }
    return 0;
}

static void fetched_release(void *ctx, int layer, const int *ids, int n)
{
    struct fetched *f = ctx;
    dsv4_fetcher_client_release(f->client, layer, ids, n);
}

static void fetched_prefetch(void *ctx, int layer, const int *ids, int n)
{
    struct fetched *f = ctx;
    dsv4_fetcher_client_prefetch(f->client, layer, ids, n);
}

static void usage(void)
{
    fprintf(stderr, "usage: dsv4-compute --model DIR [--run-dir DIR] [--threads N] [--fetcher]\n"
                    "       [--memory-gb N] [--cache-bytes N] [--session-bytes N] [--chunk N]\n"
                    "       [--max-lease N] [--dspark] [--prefix-cache-mb N] [--prefix-cache-gb N]\n"
                    "       [--prefix-cache-dir DIR] [--no-prefix-cache]\n");
}

struct args {
    const char *model, *run_dir;
    const char *prefix_dir;     /* NULL: $XDG_CACHE_HOME/dsv4/<model id> */
    uint64_t prefix_ram;        /* bytes; the RAM tier */
    double prefix_disk_gb;      /* 0: no disk tier */
    bool prefix_off;
    int threads, max_lease;     /* max_lease -1: derive from the fetcher's slots */
    int chunk;                  /* rows per prefill step (the plan's); 0: the engine's default */
    double mem_gb;
    uint64_t cache_bytes, session_budget;
    bool fetcher, dspark;
};

static int parse_argv(int argc, char **argv, struct args *a)
{
    static const struct option opts[] = {
        { "model", required_argument, NULL, 'm' },
        { "run-dir", required_argument, NULL, 'r' },
        { "threads", required_argument, NULL, 't' },
        { "memory-gb", required_argument, NULL, 'g' },
        { "cache-bytes", required_argument, NULL, 'c' },
        { "session-bytes", required_argument, NULL, 's' },
        { "max-lease", required_argument, NULL, 'l' },
        { "chunk", required_argument, NULL, 'k' },
        { "fetcher", no_argument, NULL, 'F' },
        { "dspark", no_argument, NULL, 'D' },
        { "prefix-cache-mb", required_argument, NULL, 'P' },
        { "prefix-cache-gb", required_argument, NULL, 'G' },
        { "prefix-cache-dir", required_argument, NULL, 'X' },
        { "no-prefix-cache", no_argument, NULL, 'O' },
        { 0 },
    };
    const char *me = "dsv4-compute";
    *a = (struct args){ .threads = 1, .max_lease = -1, .prefix_ram = 64ull << 20,
                        .prefix_disk_gb = 8 };
    uint64_t mb;
    int o, r = 0;
    while (r == 0 && (o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'm': a->model = optarg; break;
        case 'r': a->run_dir = optarg; break;
        case 't': r = dsv4_parse_int_opt(me, "threads", optarg, 1, 4096, &a->threads); break;
        case 'g': r = dsv4_parse_double_opt(me, "memory-gb", optarg, 0, 1 << 24, &a->mem_gb);
            break;
        case 'c': r = dsv4_parse_u64_opt(me, "cache-bytes", optarg, 0, UINT64_MAX / 2,
                                         &a->cache_bytes); break;
        case 's': r = dsv4_parse_u64_opt(me, "session-bytes", optarg, 0, UINT64_MAX / 2,
                                         &a->session_budget); break;
        case 'l': r = dsv4_parse_int_opt(me, "max-lease", optarg, 0, 1 << 20, &a->max_lease);
            break;
        case 'k': r = dsv4_parse_int_opt(me, "chunk", optarg, 1, DSV4_MAX_CHUNK, &a->chunk);
            break;
        case 'F': a->fetcher = true; break;
        case 'D': a->dspark = true; break;
        case 'P':
            r = dsv4_parse_u64_opt(me, "prefix-cache-mb", optarg, 0, 1ull << 30, &mb);
            a->prefix_ram = mb << 20;
            break;
        case 'G': r = dsv4_parse_double_opt(me, "prefix-cache-gb", optarg, 0, 1 << 20,
                                            &a->prefix_disk_gb); break;
        case 'X': a->prefix_dir = optarg; break;
        case 'O': a->prefix_off = true; break;
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

/* Test-only delays from the environment (0 when unset or not a number in range). */
static int env_ms(const char *name)
{
    int v = 0;
    const char *s = getenv(name);
    if (s && dsv4_parse_int(s, 0, 600000, &v) < 0)
        v = 0;
    return v;
}

/* Attach to the fetcher's segment: the engine's expert provider. */
static int open_fetched(struct compute *c, const struct args *a, struct dsv4_engine_opts *eo,
                        struct dsv4_expert_provider *prov, struct dsv4_err *err)
{
    struct dsv4_config cfg;
    int rc;
    if ((rc = dsv4_config_load(a->model, &cfg, err)) < 0)
        return DSV4_EXIT_CONFIG;
    if ((rc = dsv4_fetcher_client_open(c->d.run_dir, 0, &c->fetched.client, err)) < 0) {
        dsv4_log_error("compute", "expert cache: %s", err->msg);
        return DSV4_EXIT_UNAVAILABLE;
    }
    /* Map every page of the segment once, now, rather than one minor fault per 4 KiB
     * page (3264 per expert slot) the first time a slot is read on the forward path; the
     * pages exist (the fetcher registered them) and the plan counts the whole segment. */
    struct dsv4_expert_shm *shm = dsv4_fetcher_client_shm(c->fetched.client);
    uint64_t t0 = dsv4_now_ns();
    if (madvise(shm, shm->hdr.size, MADV_POPULATE_READ) < 0)
        dsv4_log_warn("compute", "expert segment: MADV_POPULATE_READ: %s", strerror(errno));
    else
        dsv4_log_info("compute", "expert segment mapped (%.1f MiB) in %.2f s",
                      shm->hdr.size / 1048576.0, (double)(dsv4_now_ns() - t0) / 1e9);
    c->fetched.n_experts = cfg.n_routed_experts;
    /* Never ask for more than the unpinned slots (the plan's rule, dsv4_expert_shm.h). */
    if (a->max_lease < 0)
        eo->max_lease = dsv4_expert_max_lease(shm->n_slots, cfg.n_routed_experts);
    c->fetched.d = &c->d;
    c->fetched.store = dsv4_xcalloc((size_t)cfg.n_blocks * cfg.n_routed_experts,
                                    sizeof(*c->fetched.store));
    eo->experts = prov;
    dsv4_log_info("compute", "routed experts from the fetcher's cache");
    return DSV4_EXIT_OK;
}

static void serve(struct compute *c)
{
    while (!c->d.stop) {
        zmq_pollitem_t it[3];
        dsv4_daemon_poll_items(&c->d, it);
        it[2] = (zmq_pollitem_t){ c->router, 0, ZMQ_POLLIN, 0 };
        int nr = zmq_poll(it, 3, c->n_pend ? STEP_WAIT_MS : 1000);
        if (nr < 0 && errno != EINTR)
            break;
        if (nr == 0 && c->n_pend) {     /* the step's last FORWARD never came */
            dsv4_log_rl(DSV4_LOG_WARN, "compute", "a step's last FORWARD did not arrive in "
                        DSV4_STRINGIFY(STEP_WAIT_MS) " ms: running the %d pending", c->n_pend);
            atomic_store(&c->d.stats->active, 1);
            compute_run_step(c);
            atomic_store(&c->d.stats->active, 0);
        }
        dsv4_daemon_handle(&c->d, it);
        if (it[2].revents & ZMQ_POLLIN) {
            int r;
            while ((r = dsv4_zrecv(c->router, &c->in, 1, 1)) != -EAGAIN) {
                if (r < 0) {
                    dsv4_daemon_bad_message(&c->d, "scheduler socket", "framing");
                    continue;
                }
                atomic_store(&c->d.stats->active, 1);  /* work pending: the stall watchdog */
                compute_handle(c);
                atomic_store(&c->d.stats->active, 0);
                dsv4_daemon_heartbeat(&c->d);
            }
        }
    }
}

static int run(const struct args *a)
{
    static struct compute c;
    struct dsv4_err err = { "" };
    int rc = DSV4_EXIT_OK;
    c.dspark = a->dspark;
    if (dsv4_daemon_init(&c.d, DSV4_ROLE_COMPUTE, a->run_dir, &err) < 0) {
        dsv4_log_error("compute", "%s", err.msg);
        rc = DSV4_EXIT_OSERR;
        goto out;
    }
    c.delay_ms = env_ms("DSV4_TEST_FORWARD_DELAY_MS");
    c.layer_delay_ms = env_ms("DSV4_TEST_LAYER_DELAY_MS");
    /* In-process cache: the plan's figure (--cache-bytes), else a quarter of --memory-gb. */
    uint64_t cache_bytes = a->cache_bytes ? a->cache_bytes
                                          : (uint64_t)(a->mem_gb * 0.25 * (1ull << 30));
    struct dsv4_engine_opts eo = { .n_threads = a->threads, .expert_cache_bytes = cache_bytes,
                                   .max_lease = a->max_lease > 0 ? a->max_lease : 0,
                                   .step_rows = a->chunk,
                                   .on_layer = compute_on_layer, .on_layer_ctx = &c,
                                   .dspark = a->dspark };
    c.threads = a->threads;
    c.session_budget = a->session_budget;
    c.chunk = a->chunk;
    struct dsv4_expert_provider prov = { &c.fetched, fetched_acquire, fetched_release,
                                         fetched_prefetch };
    if (a->fetcher && (rc = open_fetched(&c, a, &eo, &prov, &err)) != DSV4_EXIT_OK) {
        dsv4_log_error("compute", "%s", err.msg);
        goto out;
    }
    /* the drafter's weights load with the engine: a model without one is a bad config */
    if (dsv4_engine_open(a->model, &eo, &c.e, &err) < 0) {
        dsv4_log_error("compute", "%s", err.msg);
        rc = DSV4_EXIT_CONFIG;  /* a bad model is not fixed by respawning */
        goto out;
    }
    c.vocab = dsv4_engine_config(c.e)->vocab_size;
    if (c.dspark)
        dsv4_log_info("compute", "DSpark drafter loaded");
    if (!a->prefix_off && a->prefix_ram + (uint64_t)(a->prefix_disk_gb * 1073741824.0) > 0) {
        /* a cache that cannot open (the model id) only costs the cache */
        if (dsv4_prefix_cache_open(a->model, dsv4_engine_config(c.e), a->prefix_ram,
                                   (uint64_t)(a->prefix_disk_gb * 1073741824.0), a->prefix_dir,
                                   &c.pc, &err) < 0)
            dsv4_log_warn("compute", "prefix cache off: %s", err.msg);
        else
            dsv4_log_info("compute", "prefix cache: %.0f MiB RAM, %.1f GiB disk in %s",
                          a->prefix_ram / 1048576.0, a->prefix_disk_gb,
                          dsv4_pcache_dir(c.pc) ? dsv4_pcache_dir(c.pc) : "(none)");
        compute_publish_prefix(&c);
    }
    compute_publish_memory(&c);
    char ep[DSV4_PATH_MAX];
    if (dsv4_rundir_endpoint(c.d.run_dir, "compute", ep, &err) < 0) {
        dsv4_log_error("compute", "%s", err.msg);
        rc = DSV4_EXIT_CONFIG;
        goto out;
    }
    c.router = dsv4_zsock(c.d.zctx, ZMQ_ROUTER, NULL);
    if (zmq_bind(c.router, ep) < 0) {
        dsv4_log_error("compute", "bind %s: %s", ep, zmq_strerror(errno));
        rc = DSV4_EXIT_OSERR;
        goto out;
    }
    atomic_store(&c.d.stats->sessions_open, 0);
    dsv4_daemon_ready(&c.d);
    serve(&c);
    compute_log_lookahead(&c);
    dsv4_log_info("compute", "stopping");
out:    /* every path, from any point of the start-up: each free takes NULL */
    for (int i = 0; i < c.n_pend; i++) {    /* unanswered: the scheduler replays them */
        free(c.pend[i].toks);
        free(c.pend[i].targets);
    }
    for (int i = 0; i < MAX_SESSIONS; i++)
        compute_slot_free(&c.slots[i]);
    if (c.router)
        zmq_close(c.router);
    dsv4_daemon_fini(&c.d);
    dsv4_pcache_close(c.pc);
    dsv4_engine_free(c.e);
    dsv4_fetcher_client_free(c.fetched.client);
    free(c.fetched.store);
    free(c.logits);
    dsv4_zin_free(&c.in);
    dsv4_wire_buf_free(&c.out);
    return rc;
}

int main(int argc, char **argv)
{
    struct args a;
    if (parse_argv(argc, argv, &a) < 0)
        return DSV4_EXIT_USAGE;
    return run(&a);
}
