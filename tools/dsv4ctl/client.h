/* SPDX-License-Identifier: MIT */
/*
 * The client side of the scheduler socket, shared by `dsv4ctl gen` and the
 * daemon path of `dsv4ctl score`: connect through the run directory,
 * submit a request, receive its events. A request that the scheduler lost
 * (it was restarted: its stats page shows a new pid, ready) is resubmitted
 * with the same id and the tokens already received, so the caller sees one
 * stream.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "dsv4_stats.h"
#include "dsv4_wire.h"
#include "rundir.h"
#include "zmsg.h"

struct client {
    char dir[DSV4_PATH_MAX];
    void *zctx, *sock;
    struct dsv4_stats_shm *sched;
    uint64_t sched_pid;         /* scheduler pid when the request was (re)submitted */
    int sigfd;                  /* SIGINT, SIGTERM */
    struct dsv4_zin in;
    struct dsv4_wire_buf req;   /* last submission (rebuilt on resubmit) */
};

/* Prints the reason and returns a dsv4ctl exit code on failure. */
int client_open(struct client *c, const char *run_dir_arg, const char *who);
void client_close(struct client *c);
/* Send c->req (blocking up to a few seconds); remembers the scheduler's pid. */
int client_submit(struct client *c);
/* What to tell the user when the scheduler did not take a request: the set is gone (its
 * supervisor died, the daemons followed) or the scheduler is not answering. */
const char *client_unreachable(const struct client *c);
/*
 * Wait up to timeout_ms for a message: 1 = *m decoded (pointing into c->in),
 * 0 = nothing, -EINTR = SIGINT/SIGTERM, -ECONNRESET = the scheduler was
 * restarted (resubmit), -ENOTCONN = the supervisor is gone.
 */
int client_wait(struct client *c, int timeout_ms, struct dsv4_msg *m);
/* The model directory the set serves (RUN_DIR/model), or "" */
/* The served model's directory from RUN_DIR/model; -ENODATA when the file is empty. */
int client_model(const struct client *c, char *out, size_t n);
uint64_t client_new_id(void);
