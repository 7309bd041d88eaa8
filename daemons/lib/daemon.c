/* SPDX-License-Identifier: MIT */
/* Daemon bootstrap and the supervisor control channel (daemon.h). */
#include <errno.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>
#include <zmq.h>

#include "daemon.h"
#include "dsv4_wire.h"
#include "log.h"

int dsv4_daemon_init(struct dsv4_daemon *d, int role, const char *run_dir, struct dsv4_err *err)
{
    memset(d, 0, sizeof(*d));
    d->role = role;
    dsv4_rundir_resolve(run_dir, d->run_dir);
    /* Block before any thread exists (libzmq's I/O thread, the pool) so signals reach the fd. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    d->sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (d->sigfd < 0)
        return dsv4_errf(err, -errno, "signalfd: %s", strerror(errno));
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getenv("DSV4_SUPERVISED") && getppid() == 1)
        return dsv4_errf(err, -ESRCH, "supervisor already gone");
    int r = dsv4_stats_map(d->run_dir, role, true, &d->stats, err);
    if (r)
        return r;
    d->zctx = dsv4_zctx_new();
    char ep[DSV4_PATH_MAX];
    if ((r = dsv4_rundir_endpoint(d->run_dir, "ctl", ep, err)))
        return r;
    d->ctl = dsv4_zsock(d->zctx, ZMQ_DEALER, dsv4_role_name(role));
    if (zmq_connect(d->ctl, ep) < 0)
        return dsv4_errf(err, -errno, "connect %s: %s", ep, zmq_strerror(errno));
    return 0;
}

static void send_ctl(struct dsv4_daemon *d, int type, const void *body, size_t n)
{
    struct dsv4_wire_buf b = { 0 };
    dsv4_wire_simple(&b, type, body, n);
    /* blocking: the supervisor is the one peer we cannot serve without */
    int r = dsv4_zsend(d->ctl, NULL, 0, &b, 0);
    if (r < 0)
        dsv4_log_warn(dsv4_role_name(d->role), "control send: %s", zmq_strerror(-r));
    dsv4_wire_buf_free(&b);
}

void dsv4_daemon_reply(struct dsv4_daemon *d, struct dsv4_wire_buf *b)
{
    int r = dsv4_zsend(d->ctl, NULL, 0, b, 1);
    if (r < 0)
        dsv4_log_warn(dsv4_role_name(d->role), "control reply: %s", zmq_strerror(-r));
}

void dsv4_daemon_ready(struct dsv4_daemon *d)
{
    struct dsv4_msg_ready m = { (uint32_t)getpid(), (uint32_t)d->role, 0 };
    atomic_store(&d->stats->state, DSV4_STATE_READY);
    send_ctl(d, DSV4_MSG_READY, &m, sizeof(m));
    dsv4_log_info(dsv4_role_name(d->role), "ready (pid %d)", (int)getpid());
}

void dsv4_daemon_poll_items(struct dsv4_daemon *d, void *items)
{
    zmq_pollitem_t *it = items;
    it[0] = (zmq_pollitem_t){ d->ctl, 0, ZMQ_POLLIN, 0 };
    it[1] = (zmq_pollitem_t){ NULL, d->sigfd, ZMQ_POLLIN, 0 };
}

void dsv4_daemon_bad_message(struct dsv4_daemon *d, const char *from, const char *why)
{
    atomic_fetch_add_explicit(&d->stats->bad_messages, 1, memory_order_relaxed);
    dsv4_log_rl(DSV4_LOG_WARN, dsv4_role_name(d->role), "dropped message from %s: %s", from, why);
}

void dsv4_daemon_handle(struct dsv4_daemon *d, const void *items)
{
    const zmq_pollitem_t *it = items;
    if (it[1].revents & ZMQ_POLLIN) {
        struct signalfd_siginfo si;
        while (read(d->sigfd, &si, sizeof(si)) == sizeof(si))
            if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT)
                d->stop = true;
    }
    if (it[0].revents & ZMQ_POLLIN) {
        while (dsv4_zrecv(d->ctl, &d->in, 0, 1) != -EAGAIN) {
            struct dsv4_msg m;
            struct dsv4_err err;
            int errc;
            if (d->in.len == 0 || dsv4_wire_decode(d->in.buf, d->in.len, &m, &errc, &err)) {
                dsv4_daemon_bad_message(d, "supervisor", d->in.len ? err.msg : "framing");
                continue;
            }
            if (m.type == DSV4_MSG_STOP) {
                d->stop = true;
            } else if (m.type == DSV4_MSG_PEER_RESTARTED) {
                const struct dsv4_msg_peer *p = m.body;
                dsv4_log_info(dsv4_role_name(d->role), "%s restarted (pid %u)",
                              dsv4_role_name((int)p->role), p->pid);
                if (d->on_peer)
                    d->on_peer(d->peer_ctx, (int)p->role);
            } else if (d->on_control) {
                d->on_control(d->control_ctx, &m);
            }
        }
    }
    dsv4_daemon_heartbeat(d);
}

void dsv4_daemon_heartbeat(struct dsv4_daemon *d)
{
    uint64_t now = dsv4_now_ns();
    if (now < d->next_heartbeat_ns)
        return;
    struct dsv4_msg_heartbeat hb = { (uint32_t)getpid(), (uint32_t)d->role,
                                     atomic_load(&d->stats->progress) };
    struct dsv4_wire_buf b = { 0 };
    dsv4_wire_simple(&b, DSV4_MSG_HEARTBEAT, &hb, sizeof(hb));
    dsv4_zsend(d->ctl, NULL, 0, &b, 1);
    dsv4_wire_buf_free(&b);
    d->next_heartbeat_ns = now + DSV4_NSEC_PER_SEC;
}

void dsv4_daemon_fini(struct dsv4_daemon *d)
{
    if (d->stats)
        atomic_store(&d->stats->state, DSV4_STATE_DOWN);
    if (d->ctl)
        zmq_close(d->ctl);
    if (d->zctx)
        zmq_ctx_term(d->zctx);
    dsv4_zin_free(&d->in);
    dsv4_stats_unmap(d->stats);
    if (d->sigfd >= 0)
        close(d->sigfd);
}
