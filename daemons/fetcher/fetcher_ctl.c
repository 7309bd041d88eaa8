/* SPDX-License-Identifier: MIT */
/*
 * ZeroMQ control socket of dsv4-fetcher (raw libzmq, linger 0, one owner
 * thread per socket). Signals arrive through a signalfd polled next to it.
 */
#include "fetcher_ctl.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "log.h"

#define TOPIC "fetcher.ctl"

int dsv4_fetcher_ctl_endpoint(const char *run_dir, char *buf, size_t n, struct dsv4_err *err)
{
    int len = snprintf(buf, n, "ipc://%s/fetcher.sock", run_dir);
    if (len < 0 || (size_t)len >= n || len - 6 > 107)
        return dsv4_errf(err, -ENAMETOOLONG, "control socket path under %s is longer than 107 "
                                             "bytes (zmq_ipc limit): use a shorter run dir",
                         run_dir);
    return 0;
}

static char *answer(dsv4_fetcher *f, const char *buf, size_t len, bool *shutdown)
{
    struct dsv4_fetcher_msg m;
    struct dsv4_err err;
    if (dsv4_fetcher_msg_parse(buf, len, &m, &err) < 0)
        return dsv4_fetcher_msg_error(err.msg);
    switch (m.cmd) {
    case DSV4_FETCHER_CMD_HEALTH:
        return dsv4_fetcher_msg_health(dsv4_fetcher_shm(f), dsv4_fetcher_describe(f));
    case DSV4_FETCHER_CMD_STATS:
        return dsv4_fetcher_msg_stats(dsv4_fetcher_shm(f));
    case DSV4_FETCHER_CMD_PIN:
    case DSV4_FETCHER_CMD_UNPIN:
        if (dsv4_fetcher_pin(f, m.layer, m.expert, m.cmd == DSV4_FETCHER_CMD_PIN, &err) < 0)
            return dsv4_fetcher_msg_error(err.msg);
        return dsv4_fetcher_msg_ok();
    case DSV4_FETCHER_CMD_SAVE_HOT:
        if (dsv4_fetcher_save_hot(f, &err) < 0)
            return dsv4_fetcher_msg_error(err.msg);
        return dsv4_fetcher_msg_ok();
    case DSV4_FETCHER_CMD_SHUTDOWN:
        *shutdown = true;
        return dsv4_fetcher_msg_ok();
    }
    return dsv4_fetcher_msg_error("unhandled command");
}

int dsv4_fetcher_ctl_serve(dsv4_fetcher *f, const char *run_dir, int sigfd, struct dsv4_err *err)
{
    char ep[256];
    int rc = dsv4_fetcher_ctl_endpoint(run_dir, ep, sizeof(ep), err);
    if (rc < 0)
        return rc;
    void *ctx = zmq_ctx_new();
    zmq_ctx_set(ctx, ZMQ_BLOCKY, 0);
    void *sock = zmq_socket(ctx, ZMQ_REP);
    int zero = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof(zero));
    char path[256];
    snprintf(path, sizeof(path), "%s/fetcher.sock", run_dir);
    unlink(path); /* a stale socket of a killed fetcher (we hold the run dir's lock) */
    if (zmq_bind(sock, ep) < 0) {
        rc = dsv4_errf(err, -errno, "%s: bind: %s", ep, zmq_strerror(errno));
        zmq_close(sock);
        zmq_ctx_term(ctx);
        return rc;
    }
    chmod(path, 0600);
    bool shutdown = false;
    while (!shutdown) {
        zmq_pollitem_t items[2] = { { sock, 0, ZMQ_POLLIN, 0 }, { NULL, sigfd, ZMQ_POLLIN, 0 } };
        int n = zmq_poll(items, sigfd >= 0 ? 2 : 1, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        if (sigfd >= 0 && (items[1].revents & ZMQ_POLLIN)) {
            struct signalfd_siginfo si;
            if (read(sigfd, &si, sizeof(si)) == sizeof(si) &&
                (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT)) {
                dsv4_log_info(TOPIC, "signal %u: stopping", si.ssi_signo);
                shutdown = true;
            }
        }
        if (items[0].revents & ZMQ_POLLIN) {
            zmq_msg_t msg;
            zmq_msg_init(&msg);
            if (zmq_msg_recv(&msg, sock, 0) >= 0) {
                char *reply = answer(f, zmq_msg_data(&msg), zmq_msg_size(&msg), &shutdown);
                zmq_send(sock, reply, strlen(reply), 0);
                free(reply);
            }
            zmq_msg_close(&msg);
        }
    }
    dsv4_fetcher_stop(f);
    zmq_close(sock);
    zmq_ctx_term(ctx);
    unlink(path);
    return 0;
}

int dsv4_fetcher_ctl_call(const char *run_dir, const struct dsv4_fetcher_msg *m, char **reply,
                          int timeout_ms, struct dsv4_err *err)
{
    char ep[256];
    int rc = dsv4_fetcher_ctl_endpoint(run_dir, ep, sizeof(ep), err);
    if (rc < 0)
        return rc;
    void *ctx = zmq_ctx_new();
    void *sock = zmq_socket(ctx, ZMQ_REQ);
    int zero = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_setsockopt(sock, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
    zmq_setsockopt(sock, ZMQ_SNDTIMEO, &timeout_ms, sizeof(timeout_ms));
    char *req = dsv4_fetcher_msg_request(m);
    *reply = NULL;
    if (zmq_connect(sock, ep) < 0 || zmq_send(sock, req, strlen(req), 0) < 0) {
        rc = dsv4_errf(err, -errno, "%s: %s", ep, zmq_strerror(errno));
    } else {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, sock, 0) < 0) {
            rc = dsv4_errf(err, errno == EAGAIN ? -ETIMEDOUT : -errno,
                           "%s: no answer in %d ms", ep, timeout_ms);
        } else {
            size_t len = zmq_msg_size(&msg);
            *reply = malloc(len + 1);
            memcpy(*reply, zmq_msg_data(&msg), len);
            (*reply)[len] = 0;
        }
        zmq_msg_close(&msg);
    }
    free(req);
    zmq_close(sock);
    zmq_ctx_term(ctx);
    return rc;
}
