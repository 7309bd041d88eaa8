/* SPDX-License-Identifier: MIT */
/*
 * What every dsv4 daemon shares: blocked signals read through a signalfd,
 * death with the supervisor (PR_SET_PDEATHSIG), the control DEALER to the
 * supervisor (routing id = role name: a restarted daemon takes its identity
 * back), its stats page, READY / HEARTBEAT / STOP / PEER_RESTARTED handling.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "dsv4_stats.h"
#include "dsv4_wire.h"
#include "err.h"
#include "rundir.h"
#include "zmsg.h"

struct dsv4_daemon {
    int role;
    char run_dir[DSV4_PATH_MAX];
    void *zctx;
    void *ctl;                  /* DEALER to the supervisor's ROUTER */
    int sigfd;
    struct dsv4_stats_shm *stats;
    bool stop;
    uint64_t next_heartbeat_ns;
    struct dsv4_zin in;
    /* called when the supervisor reports that a peer restarted */
    void (*on_peer)(void *ctx, int role);
    void *peer_ctx;
    /* called for any other valid message on the control channel (the fetcher's controls);
     * it may answer with dsv4_daemon_reply() */
    void (*on_control)(void *ctx, const struct dsv4_msg *m);
    void *control_ctx;
};

int dsv4_daemon_init(struct dsv4_daemon *d, int role, const char *run_dir, struct dsv4_err *err);
void dsv4_daemon_ready(struct dsv4_daemon *d);
/* Poll items 0 (ctl) and 1 (signalfd) belong to the daemon; handle what they report. */
void dsv4_daemon_poll_items(struct dsv4_daemon *d, void *items);
void dsv4_daemon_handle(struct dsv4_daemon *d, const void *items);
/*
 * Send HEARTBEAT (pid, role, the progress counter) if a second has passed
 * since the last one. dsv4_daemon_handle() calls it every loop turn; work
 * that keeps the loop away for long calls it too (compute: after every
 * layer of a forward), from the loop's thread. So a heartbeat means the
 * thread that does the work advances, not merely that the process exists:
 * the supervisor's watchdog kills a daemon that stops sending them.
 */
void dsv4_daemon_heartbeat(struct dsv4_daemon *d);
/* Answer a control message (to the supervisor, or the test acting as one). */
void dsv4_daemon_reply(struct dsv4_daemon *d, struct dsv4_wire_buf *b);
void dsv4_daemon_fini(struct dsv4_daemon *d);
/* Count a message we dropped as malformed (rate-limited log). */
void dsv4_daemon_bad_message(struct dsv4_daemon *d, const char *from, const char *why);
