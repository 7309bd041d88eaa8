/* SPDX-License-Identifier: MIT */
/*
 * Listening TCP sockets from "HOST:PORT" text, for the two HTTP endpoints: the supervisor
 * binds dsv4-api's (so `port 0` is resolved and RUN_DIR/api-addr written before dsv4-api runs,
 * and a restarted dsv4-api finds connections waiting in the backlog, --listen-fd) and its own
 * /metrics one.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

#define DSV4_API_DEFAULT_ADDR "127.0.0.1:8080"

/* "HOST:PORT" or "[HOST]:PORT" → a listening TCP socket (CLOEXEC, `backlog`); the address
 * bound into bound[bound_n]. -errno with a one-line reason starting "`what` address ADDR". */
int dsv4_tcp_listen(const char *what, const char *addr, int backlog, char *bound,
                    size_t bound_n, struct dsv4_err *err);
/* Does the host part of addr resolve only to loopback addresses? */
bool dsv4_addr_is_loopback(const char *addr);
/* Is the socket fd bound to a loopback address? */
bool dsv4_fd_is_loopback(int fd);
