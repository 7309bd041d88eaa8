/* SPDX-License-Identifier: MIT */
/*
 * `dsv4ctl status [--run-dir DIR] [--json]`: the facts /metrics exports, for
 * a person or (--json) a script: per daemon pid, state, uptime, restarts,
 * RSS and every counter and gauge of its stats page; the latency histograms
 * (count, mean, buckets); the fetcher's expert cache. Both read the table in
 * stats_view.c. Exits 0 only when every daemon that the set runs is ready
 * (69 otherwise), so scripts can use it as a probe.
 */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dsv4ctl.h"
#include "stats_view.h"

static void read_line(const char *dir, const char *name, char *out, size_t n)
{
    char path[DSV4_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f) {
        if (fgets(out, (int)n, f))
            out[strcspn(out, "\n")] = '\0';
        fclose(f);
    }
}

/* Fields of `t` carried by role r (r < 0: the expert table) into object o; printed too. */
static void add_fields(cJSON *o, const struct dsv4_sv_field *t, size_t n, const void *base, int r,
                       bool print)
{
    int col = 0;
    for (size_t i = 0; i < n; i++) {
        const struct dsv4_sv_field *f = &t[i];
        if (r >= 0 && !(f->roles & DSV4_SV_ROLE(r)))
            continue;
        double x = dsv4_sv_value(base, f);
        cJSON_AddNumberToObject(o, f->key, x);
        if (print && strcmp(f->key, "restarts") != 0 && strcmp(f->key, "started_unix_s") != 0) {
            printf("%s%s %.15g", col == 0 ? "  " : ", ", f->key, x);
            if (++col == 6) {
                putchar('\n');
                col = 0;
            }
        }
    }
    if (print && col)
        putchar('\n');
}

static void add_hist(cJSON *o, const char *key, const _Atomic uint64_t *bucket, const double *bound,
                     int n, double sum_s, bool print)
{
    cJSON *h = cJSON_AddObjectToObject(o, key), *bs = cJSON_AddArrayToObject(h, "buckets");
    uint64_t cum = 0;
    for (int i = 0; i < n; i++) {
        cum += atomic_load_explicit(&bucket[i], memory_order_relaxed);
        cJSON *b = cJSON_CreateObject();
        if (i < n - 1)
            cJSON_AddNumberToObject(b, "le", bound[i]);
        else
            cJSON_AddStringToObject(b, "le", "+Inf");
        cJSON_AddNumberToObject(b, "count", (double)cum);
        cJSON_AddItemToArray(bs, b);
    }
    cJSON_AddNumberToObject(h, "count", (double)cum);
    cJSON_AddNumberToObject(h, "sum_s", sum_s);
    if (print)
        printf("  %-12s %8llu  mean %.1f ms\n", key, (unsigned long long)cum,
               cum ? 1e3 * sum_s / (double)cum : 0.0);
}

int dsv4ctl_status(int argc, char **argv)
{
    static const struct option opts[] = {
        { "run-dir", required_argument, NULL, 'r' },
        { "json", no_argument, NULL, 'j' },
        { 0 },
    };
    const char *arg = NULL;
    bool json = false, print;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'r')
            arg = optarg;
        else if (c == 'j')
            json = true;
        else
            return DSV4_EXIT_USAGE;
    }
    print = !json;
    char dir[DSV4_PATH_MAX], model[DSV4_PATH_MAX], maddr[128], aaddr[128];
    dsv4_rundir_resolve(arg, dir);
    struct dsv4_view v;
    dsv4_view_open(&v, dir);
    read_line(dir, "model", model, sizeof(model));
    read_line(dir, "metrics-addr", maddr, sizeof(maddr));
    read_line(dir, "api-addr", aaddr, sizeof(aaddr));
    if (v.supervisor_pid == 0)
        maddr[0] = aaddr[0] = '\0';
    cJSON *root = cJSON_CreateObject(), *ds = cJSON_AddArrayToObject(root, "daemons");
    cJSON_AddStringToObject(root, "run_dir", dir);
    cJSON_AddNumberToObject(root, "supervisor_pid", v.supervisor_pid > 0 ? v.supervisor_pid : 0);
    cJSON_AddStringToObject(root, "model", model);
    cJSON_AddStringToObject(root, "metrics_addr", maddr);
    cJSON_AddStringToObject(root, "api_addr", aaddr);
    bool all_ready = v.supervisor_pid != 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now_ms = (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    if (print)
        printf("run dir %s, supervisor %d, model %s, metrics %s, api %s\n"
               "%-10s %8s %-8s %9s %8s %10s\n",
               dir, v.supervisor_pid, model[0] ? model : "-", maddr[0] ? maddr : "off",
               aaddr[0] ? aaddr : "off", "daemon",
               "pid", "state", "uptime_s", "restarts", "rss_kib");
    for (int r = 0; r < DSV4_ROLE_COUNT; r++) {
        const struct dsv4_stats_shm *s = v.page[r];
        if (!s || !v.in_set[r])
            continue;
        uint64_t st = atomic_load(&s->state), pid = atomic_load(&s->pid);
        all_ready &= st == DSV4_STATE_READY;
        double up = (double)(now_ms - atomic_load(&s->started_unix_ms)) / 1000.0;
        long rss = (long)(dsv4_rss_bytes(pid) / 1024);
        if (print)
            printf("%-10s %8llu %-8s %9.1f %8llu %10ld\n", dsv4_role_name(r),
                   (unsigned long long)pid, dsv4_state_name(st), up,
                   (unsigned long long)atomic_load(&s->restarts), rss);
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "name", dsv4_role_name(r));
        cJSON_AddNumberToObject(d, "pid", (double)pid);
        cJSON_AddStringToObject(d, "state", dsv4_state_name(st));
        cJSON_AddNumberToObject(d, "uptime_s", up);
        cJSON_AddNumberToObject(d, "rss_kib", (double)rss);
        add_fields(d, dsv4_sv_stats, dsv4_sv_n_stats, s, r, print);
        cJSON_AddItemToArray(ds, d);
    }
    const struct dsv4_stats_shm *sch = v.page[DSV4_ROLE_SCHEDULER];
    if (sch) {
        /* the scheduler's gauges at the top level too (scripts read these) */
        cJSON_AddNumberToObject(root, "queue_depth", (double)atomic_load(&sch->queue_depth));
        cJSON_AddNumberToObject(root, "active", (double)atomic_load(&sch->active));
        cJSON_AddNumberToObject(root, "prefill_done", (double)atomic_load(&sch->prefill_done));
        cJSON_AddNumberToObject(root, "prefill_total", (double)atomic_load(&sch->prefill_total));
    }
    /* latency and batching histograms, each from its daemon's page */
    static const uint64_t bounds_us[] = DSV4_HIST_BOUNDS_US, bounds_n[] = DSV4_COUNT_BOUNDS;
    double bounds[DSV4_HIST_N], cbounds[DSV4_HIST_N];
    for (int i = 0; i < DSV4_HIST_N - 1; i++) {
        bounds[i] = (double)bounds_us[i] / 1e6;
        cbounds[i] = (double)bounds_n[i];
    }
    cJSON *hs = cJSON_AddObjectToObject(root, "latency");
    if (print && sch)
        printf("histogram    count\n");
    for (size_t i = 0; i < dsv4_sv_n_hists; i++) {
        const struct dsv4_sv_hist *hv = &dsv4_sv_hists[i];
        const struct dsv4_stats_shm *pg = v.page[hv->role];
        if (!pg)
            continue;
        const struct dsv4_hist_shm *h = (const void *)((const char *)pg + hv->off);
        double sum = (double)atomic_load(&h->sum_us);
        add_hist(hs, hv->key, h->bucket, hv->count ? cbounds : bounds, DSV4_HIST_N,
                 hv->count ? sum : sum / 1e6, print);
    }
    /* the fetcher's counters live in its expert segment (misses are loads it had to read;
     * leases of resident experts are served without it: client_hits) */
    if (v.supervisor_pid != 0)
        dsv4_view_map_experts(&v);
    if (v.experts) {
        const struct dsv4_expert_stats_shm *es = &v.experts->stats;
        /* of the experts clients asked for, those already resident: leased directly by the
         * client, or found READY when the fetcher took the request */
        double req = (double)atomic_load(&es->client_requests);
        double hit = (double)atomic_load(&es->client_hits) + (double)atomic_load(&es->hits);
        cJSON *e = cJSON_AddObjectToObject(root, "expert_cache");
        if (print)
            printf("expert cache: %u slots, hit rate %.3f\n", v.experts->n_slots,
                   req > 0 ? hit / req : 0);
        cJSON_AddNumberToObject(e, "slots", v.experts->n_slots);
        cJSON_AddNumberToObject(e, "hit_rate", req > 0 ? hit / req : 0);
        add_fields(e, dsv4_sv_expert, dsv4_sv_n_expert, es, -1, print);
        double lb[DSV4_EXPERT_LAT_BUCKETS];
        for (int i = 0; i < DSV4_EXPERT_LAT_BUCKETS; i++)
            lb[i] = dsv4_expert_lat_bound_s(i);
        add_hist(e, "read_latency", es->lat_hist, lb, DSV4_EXPERT_LAT_BUCKETS,
                 (double)atomic_load(&es->lat_sum_us) / 1e6, print);
    }
    if (json) {
        char *t = cJSON_Print(root);
        printf("%s\n", t);
        free(t);
    }
    cJSON_Delete(root);
    dsv4_view_close(&v);
    return all_ready ? DSV4_EXIT_OK : DSV4_EXIT_UNAVAILABLE;
}
