/* SPDX-License-Identifier: MIT */
/*
 * The Prometheus exporter: GET /metrics in the text exposition format 0.0.4,
 * served by libmicrohttpd's own thread inside the supervisor (which maps
 * every stats page and outlives daemon restarts). The page contents come
 * from the table in stats_view.h.
 */
#pragma once

#include <stddef.h>

#include "err.h"
#include "stats_view.h"

#define DSV4_METRICS_DEFAULT_ADDR "127.0.0.1:9464"

struct dsv4_metrics;

/* Render the exposition text of `v` (malloc'd, NUL-terminated) into *out. */
int dsv4_metrics_render(const struct dsv4_view *v, char **out, size_t *len);

/*
 * Listen on `addr` ("HOST:PORT", "[V6]:PORT"; port 0 picks a free one) and
 * serve `v`, which must stay valid until dsv4_metrics_stop. The address
 * actually bound ("127.0.0.1:41234") is written to bound[bound_n].
 */
int dsv4_metrics_start(const char *addr, const struct dsv4_view *v, struct dsv4_metrics **ret,
                       char *bound, size_t bound_n, struct dsv4_err *err);
void dsv4_metrics_stop(struct dsv4_metrics *m);
