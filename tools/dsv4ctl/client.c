/* SPDX-License-Identifier: MIT */
/* Scheduler client (client.h). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <unistd.h>
#include <zmq.h>

#include "client.h"
#include "dsv4ctl.h"
#include "util.h"

int client_open(struct client *c, const char *run_dir_arg, const char *who)
{
    memset(c, 0, sizeof(*c));
    c->sigfd = -1;
    dsv4_rundir_resolve(run_dir_arg, c->dir);
    int sv = dsv4_rundir_supervisor_pid(c->dir);
    if (sv == 0) {
        fprintf(stderr, "dsv4ctl %s: daemons not running in %s (dsv4ctl start)\n", who, c->dir);
        return DSV4_EXIT_UNAVAILABLE;
    }
    if (sv == DSV4_SUPERVISOR_UNREADABLE) {
        fprintf(stderr, "dsv4ctl %s: %s/supervisor.lock: %s\n", who, c->dir, strerror(errno));
        return DSV4_EXIT_OSERR;
    }
    struct dsv4_err err;
    char ep[DSV4_PATH_MAX];
    if (dsv4_stats_map(c->dir, DSV4_ROLE_SCHEDULER, false, &c->sched, &err) < 0 ||
        dsv4_rundir_endpoint(c->dir, "sched", ep, &err) < 0) {
        fprintf(stderr, "dsv4ctl %s: %s\n", who, err.msg);
        return DSV4_EXIT_UNAVAILABLE;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    sigdelset(&set, SIGPIPE);
    c->sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    c->zctx = dsv4_zctx_new();
    c->sock = dsv4_zsock(c->zctx, ZMQ_DEALER, NULL);
    int tmo = 5000;
    zmq_setsockopt(c->sock, ZMQ_SNDTIMEO, &tmo, sizeof(tmo));
    zmq_connect(c->sock, ep);
    return 0;
}

void client_close(struct client *c)
{
    if (c->sock)
        zmq_close(c->sock);
    if (c->zctx)
        zmq_ctx_term(c->zctx);
    dsv4_stats_unmap(c->sched);
    dsv4_zin_free(&c->in);
    dsv4_wire_buf_free(&c->req);
    if (c->sigfd >= 0)
        close(c->sigfd);
}

int client_submit(struct client *c)
{
    c->sched_pid = atomic_load(&c->sched->pid);
    int r = dsv4_zsend(c->sock, NULL, 0, &c->req, 0);
    return r;
}

const char *client_unreachable(const struct client *c)
{
    return dsv4_rundir_supervisor_pid(c->dir) == 0 ? "the daemons stopped"
                                                   : "scheduler not reachable";
}

int client_wait(struct client *c, int timeout_ms, struct dsv4_msg *m)
{
    zmq_pollitem_t it[2] = { { c->sock, 0, ZMQ_POLLIN, 0 }, { NULL, c->sigfd, ZMQ_POLLIN, 0 } };
    zmq_poll(it, 2, timeout_ms);
    if (it[1].revents & ZMQ_POLLIN) {
        struct signalfd_siginfo si;
        while (read(c->sigfd, &si, sizeof(si)) == sizeof(si))
            ;
        return -EINTR;
    }
    if (it[0].revents & ZMQ_POLLIN) {
        int r = dsv4_zrecv(c->sock, &c->in, 0, 1);
        struct dsv4_err err;
        int errc;
        if (r == 0 && dsv4_wire_decode(c->in.buf, c->in.len, m, &errc, &err) == 0)
            return 1;
        if (r == 0)
            fprintf(stderr, "dsv4ctl: dropped a malformed reply: %s\n", err.msg);
        return 0;
    }
    if (dsv4_rundir_supervisor_pid(c->dir) == 0)
        return -ENOTCONN;
    uint64_t pid = atomic_load(&c->sched->pid);
    if (pid != c->sched_pid && atomic_load(&c->sched->state) == DSV4_STATE_READY)
        return -ECONNRESET;
    return 0;
}

int client_model(const struct client *c, char *out, size_t n)
{
    char path[DSV4_PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/model", c->dir);
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    if (fgets(out, (int)n, f))
        out[strcspn(out, "\n")] = '\0';
    fclose(f);
    return out[0] ? 0 : -ENODATA;
}

uint64_t client_new_id(void)
{
    uint64_t id = 0;
    while (id == 0)
        if (getrandom(&id, sizeof(id), 0) != sizeof(id))
            id = dsv4_now_ns() ^ ((uint64_t)getpid() << 40);
    return id;
}
