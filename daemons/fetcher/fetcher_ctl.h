/* SPDX-License-Identifier: MIT */
/*
 * The fetcher's control plane: a ZeroMQ REP socket at ipc://<run_dir>/fetcher.sock
 * answering the messages of fetcher_msg.h, and a blocking REQ call for clients
 * (tests, dsv4ctl).
 */
#pragma once

#include "err.h"
#include "fetcher.h"
#include "fetcher_msg.h"

int dsv4_fetcher_ctl_endpoint(const char *run_dir, char *buf, size_t n, struct dsv4_err *err);
/* Serve until a shutdown message or a signal on `sigfd` (-1: none); then stop `f`. */
int dsv4_fetcher_ctl_serve(dsv4_fetcher *f, const char *run_dir, int sigfd, struct dsv4_err *err);
/* One request/reply; *reply is malloc'd JSON. -ETIMEDOUT when nobody answers. */
int dsv4_fetcher_ctl_call(const char *run_dir, const struct dsv4_fetcher_msg *m, char **reply,
                          int timeout_ms, struct dsv4_err *err);
