/* SPDX-License-Identifier: MIT */
/*
 * The HTTP server (libmicrohttpd, one thread per connection: a request's
 * thread waits on its own scheduler socket and on its client's socket, so
 * a hang-up is seen while the model works). Routes, bearer-key check, body
 * limit, OpenAI/Anthropic error bodies, and the drive of a generation into
 * one JSON body or a stream of server-sent events.
 */
#pragma once

#include <stdatomic.h>

#include "api.h"
#include "err.h"

struct api_http_opts {
    int listen_fd;
    unsigned max_connections, max_per_client, idle_timeout_s;
};

struct api_http;
int api_http_start(struct api_ctx *c, const struct api_http_opts *o, struct api_http **ret,
                   struct dsv4_err *err);
/* Ends open streams with an error event, closes every connection. */
void api_http_stop(struct api_http *h);
