/* SPDX-License-Identifier: MIT */
/*
 * The API's listening socket. The supervisor binds it (so `port 0` is
 * resolved, and the address written to RUN_DIR/api-addr, before dsv4-api
 * runs, and a restarted dsv4-api finds connections waiting in the backlog)
 * and hands the descriptor to dsv4-api with --listen-fd.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

#define DSV4_API_DEFAULT_ADDR "127.0.0.1:8080"

/* "HOST:PORT" or "[HOST]:PORT" → a listening TCP socket (CLOEXEC); the address bound into
 * bound[bound_n]. -errno with a one-line reason. */
int dsv4_api_listen(const char *addr, char *bound, size_t bound_n, struct dsv4_err *err);
/* Does the host part of addr resolve only to loopback addresses? */
bool dsv4_api_addr_is_loopback(const char *addr);
/* Is the socket fd bound to a loopback address? */
bool dsv4_api_fd_is_loopback(int fd);
