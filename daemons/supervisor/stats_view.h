/* SPDX-License-Identifier: MIT */
/*
 * What `dsv4ctl status` and the /metrics exporter show, from one table: every
 * field of the per-daemon stats pages (proto/dsv4_stats.h) and of the
 * fetcher's expert segment (proto/dsv4_expert_shm.h) with its Prometheus
 * family, label, status --json key, help text and type. Both outputs walk
 * the same table, so they cannot disagree on a fact.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dsv4_expert_shm.h"
#include "dsv4_stats.h"
#include "dsv4_wire.h"
#include "rundir.h"

enum { DSV4_SV_COUNTER, DSV4_SV_GAUGE };

#define DSV4_SV_ROLE(r) (1u << (r))
#define DSV4_SV_ALL ((1u << DSV4_ROLE_COUNT) - 1)

struct dsv4_sv_field {
    const char *metric;     /* family, e.g. "dsv4_requests_total" */
    const char *label;      /* extra label pair, e.g. "outcome=\"ok\"", or NULL */
    const char *key;        /* status --json key */
    const char *help;
    uint8_t kind;           /* DSV4_SV_COUNTER or DSV4_SV_GAUGE */
    uint8_t roles;          /* pages that carry it; DSV4_SV_ALL gets a daemon label */
    uint16_t off;           /* offsetof(struct dsv4_stats_shm or dsv4_expert_stats_shm) */
    double scale;           /* value × scale = the metric (base units); 0 means 1 */
};

struct dsv4_sv_hist {
    const char *metric, *key, *help;
    uint16_t off;           /* offsetof(struct dsv4_stats_shm, <hist>) */
    uint8_t role;           /* whose page */
    bool count;             /* DSV4_COUNT_BOUNDS, not seconds */
};

extern const struct dsv4_sv_field dsv4_sv_stats[];
extern const size_t dsv4_sv_n_stats;
extern const struct dsv4_sv_hist dsv4_sv_hists[];
extern const size_t dsv4_sv_n_hists;
extern const struct dsv4_sv_field dsv4_sv_expert[];
extern const size_t dsv4_sv_n_expert;

/* One reading of a daemon set. */
struct dsv4_view {
    const char *dir;
    int supervisor_pid;                         /* 0: none running */
    struct dsv4_stats_shm *page[DSV4_ROLE_COUNT]; /* NULL: not mapped */
    bool in_set[DSV4_ROLE_COUNT];               /* the fetcher is optional */
    bool owned;                                 /* pages mapped by dsv4_view_open */
    const struct dsv4_expert_shm *experts;      /* header page, read-only; NULL: none */
    const char *metrics_addr;                   /* "" when off */
};

/* Map the pages of the set in `dir` read-only (status). Never fails: what is
 * missing stays NULL. */
void dsv4_view_open(struct dsv4_view *v, const char *dir);
/* Map the expert segment's header page read-only (NULL if there is none). */
void dsv4_view_map_experts(struct dsv4_view *v);
void dsv4_view_close(struct dsv4_view *v);

uint64_t dsv4_sv_raw(const void *base, const struct dsv4_sv_field *f);
double dsv4_sv_value(const void *base, const struct dsv4_sv_field *f);
/* Resident set of a process from /proc, bytes; 0 if unknown. */
uint64_t dsv4_rss_bytes(uint64_t pid);
/* The expert read-latency bucket i's upper bound, seconds (INFINITY for the last). */
double dsv4_expert_lat_bound_s(int i);

const char *dsv4_state_name(uint64_t st);
