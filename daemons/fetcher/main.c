/* SPDX-License-Identifier: MIT */
/*
 * dsv4-fetcher: the expert fetcher daemon. Creates (or re-attaches to) the expert segment of
 * its run directory and serves the compute daemon's requests from the checkpoint on its own
 * I/O thread (fetcher.c). Like every daemon it lives on daemons/lib: READY once the segment
 * serves, HEARTBEAT every second from this (control) thread, STOP or SIGTERM to finish its
 * reads, save the hot set and remove the segment. Its controls (FETCHER_PIN,
 * FETCHER_SAVE_HOT) are wire messages on the control channel, answered ACK or ERROR.
 *
 *   dsv4-fetcher --model DIR [--run-dir DIR] [--slots N | --cache-bytes N] [--pin-slots N]
 *                [--queue-depth N] [--chunk-kib N] [--io auto|buffered|pread] [--no-numa]
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "daemon.h"
#include "exitcode.h"
#include "fetcher.h"
#include "log.h"
#include "parse.h"

#define TOPIC "fetcher"

struct args {
    struct dsv4_fetcher_opts o;
    const char *run_dir;
};

static void usage(void)
{
    fprintf(stderr, "usage: dsv4-fetcher --model DIR [--run-dir DIR] [--slots N | --cache-bytes N]\n"
                    "       [--pin-slots N] [--queue-depth N] [--chunk-kib N]\n"
                    "       [--io auto|buffered|pread] [--no-numa]\n");
}

static int parse_argv(int argc, char **argv, struct args *a)
{
    static const struct option opts[] = {
        { "model", required_argument, NULL, 'm' },
        { "run-dir", required_argument, NULL, 'r' },
        { "slots", required_argument, NULL, 's' },
        { "cache-bytes", required_argument, NULL, 'c' },
        { "pin-slots", required_argument, NULL, 'p' },
        { "queue-depth", required_argument, NULL, 'q' },
        { "chunk-kib", required_argument, NULL, 'k' },
        { "io", required_argument, NULL, 'i' },
        { "no-numa", no_argument, NULL, 'n' },
        { 0 },
    };
    const char *me = "dsv4-fetcher";
    memset(a, 0, sizeof(*a));
    a->o.numa = true;
    int c;
    uint64_t v;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': a->o.model_dir = optarg; break;
        case 'r': a->run_dir = optarg; break;
        case 's':
            if (dsv4_parse_u64_opt(me, "slots", optarg, 1, 1u << 24, &v) < 0)
                return -EINVAL;
            a->o.n_slots = (uint32_t)v;
            break;
        case 'c':
            if (dsv4_parse_u64_opt(me, "cache-bytes", optarg, 1, UINT64_MAX / 2,
                                   &a->o.cache_bytes) < 0)
                return -EINVAL;
            break;
        case 'p':
            if (dsv4_parse_u64_opt(me, "pin-slots", optarg, 0, 1u << 24, &v) < 0)
                return -EINVAL;
            a->o.pin_slots = (uint32_t)v;
            a->o.pin_slots_set = true;
            break;
        case 'q':
            if (dsv4_parse_u64_opt(me, "queue-depth", optarg, 1, 4096, &v) < 0)
                return -EINVAL;
            a->o.queue_depth = (uint32_t)v;
            break;
        case 'k':
            if (dsv4_parse_u64_opt(me, "chunk-kib", optarg, 4, 1u << 20, &v) < 0)
                return -EINVAL;
            a->o.chunk_bytes = (uint32_t)v * 1024;
            break;
        case 'i':
            if (!strcmp(optarg, "pread"))
                a->o.io = DSV4_FETCHER_IO_PREAD;
            else if (!strcmp(optarg, "buffered"))
                a->o.io = DSV4_FETCHER_IO_BUFFERED;
            else if (!strcmp(optarg, "auto"))
                a->o.io = DSV4_FETCHER_IO_AUTO;
            else {
                fprintf(stderr, "%s: --io: '%s' is not auto, buffered or pread\n", me, optarg);
                return -EINVAL;
            }
            break;
        case 'n': a->o.numa = false; break;
        default: usage(); return -EINVAL;
        }
    }
    if (!a->o.model_dir || optind != argc) {
        usage();
        return -EINVAL;
    }
    return 0;
}

struct server {
    struct dsv4_daemon d;
    dsv4_fetcher *f;
};

static void reply_ack(struct server *sv, uint64_t seq)
{
    struct dsv4_msg_ack ack = { .seq = seq };
    struct dsv4_wire_buf b = { 0 };
    dsv4_wire_simple(&b, DSV4_MSG_ACK, &ack, sizeof(ack));
    dsv4_daemon_reply(&sv->d, &b);
    dsv4_wire_buf_free(&b);
}

static void reply_error(struct server *sv, uint64_t seq, int code, const char *text)
{
    struct dsv4_wire_buf b = { 0 };
    dsv4_wire_error(&b, seq, code, text);
    dsv4_daemon_reply(&sv->d, &b);
    dsv4_wire_buf_free(&b);
}

/* A control message from the supervisor (daemon.h on_control). */
static void on_control(void *ctx, const struct dsv4_msg *m)
{
    struct server *sv = ctx;
    struct dsv4_err err;
    if (m->type == DSV4_MSG_FETCHER_PIN) {
        const struct dsv4_msg_fetcher_pin *p = m->body;
        if (dsv4_fetcher_pin(sv->f, p->layer, p->expert, p->pin != 0, &err) < 0)
            reply_error(sv, p->seq, DSV4_WE_INVALID, err.msg);
        else
            reply_ack(sv, p->seq);
    } else if (m->type == DSV4_MSG_FETCHER_SAVE_HOT) {
        const struct dsv4_msg_fetcher_save_hot *p = m->body;
        if (dsv4_fetcher_save_hot(sv->f, &err) < 0)
            reply_error(sv, p->seq, DSV4_WE_INTERNAL, err.msg);
        else
            reply_ack(sv, p->seq);
    } else {
        dsv4_daemon_bad_message(&sv->d, "supervisor", dsv4_wire_type_name(m->type));
    }
}

static void *io_thread(void *arg)
{
    dsv4_fetcher_run(arg);
    return NULL;
}

static int run(struct args *a)
{
    static struct server sv;
    struct dsv4_err err;
    if (dsv4_daemon_init(&sv.d, DSV4_ROLE_FETCHER, a->run_dir, &err) < 0) {
        dsv4_log_error(TOPIC, "%s", err.msg);
        dsv4_daemon_fini(&sv.d);
        return DSV4_EXIT_OSERR;
    }
    a->o.run_dir = sv.d.run_dir;
    if (dsv4_fetcher_open(&a->o, &sv.f, &err) < 0) {
        dsv4_log_error(TOPIC, "%s", err.msg);
        dsv4_daemon_fini(&sv.d);
        return DSV4_EXIT_CONFIG;   /* a bad model or budget is not fixed by respawning */
    }
    sv.d.on_control = on_control;
    sv.d.control_ctx = &sv;
    pthread_t th;
    int rc = pthread_create(&th, NULL, io_thread, sv.f);
    if (rc != 0) {
        dsv4_log_error(TOPIC, "I/O thread: %s", strerror(rc));
        dsv4_fetcher_free(sv.f, true);
        dsv4_daemon_fini(&sv.d);
        return DSV4_EXIT_OSERR;
    }
    dsv4_log_info(TOPIC, "%s", dsv4_fetcher_describe(sv.f));
    dsv4_daemon_ready(&sv.d);
    struct dsv4_expert_shm *shm = dsv4_fetcher_shm(sv.f);
    while (!sv.d.stop) {
        zmq_pollitem_t items[2];
        dsv4_daemon_poll_items(&sv.d, items);
        if (zmq_poll(items, 2, 250) < 0 && errno != EINTR)
            break;
        /* the watchdog's progress counter: reads and requests served */
        atomic_store(&sv.d.stats->progress,
                     atomic_load_explicit(&shm->stats.reads, memory_order_relaxed) +
                         atomic_load_explicit(&shm->stats.requests, memory_order_relaxed));
        dsv4_daemon_handle(&sv.d, items);
    }
    dsv4_log_info(TOPIC, "stopping");
    dsv4_fetcher_stop(sv.f);
    pthread_join(th, NULL);
    dsv4_fetcher_free(sv.f, true);
    dsv4_log_info(TOPIC, "stopped; segment removed");
    dsv4_daemon_fini(&sv.d);
    return DSV4_EXIT_OK;
}

int main(int argc, char **argv)
{
    struct args a;
    if (parse_argv(argc, argv, &a) < 0)
        return DSV4_EXIT_USAGE;
    return run(&a);
}
