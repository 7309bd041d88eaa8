/* SPDX-License-Identifier: MIT */
/* The Prometheus exporter (metrics.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dsv4-build.h"
#include "dsv4-vcs.h"
#include "metrics.h"
#include "tcp_listen.h"

struct dsv4_metrics {
    struct MHD_Daemon *mhd;
    const struct dsv4_view *v;
};

static void family(FILE *o, const char *name, const char *help, const char *type)
{
    fprintf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value with \\, " and newline escaped. */
static void label_value(FILE *o, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            fputc('\\', o);
        if (*v == '\n')
            fputs("\\n", o);
        else
            fputc(*v, o);
    }
}

static void num(FILE *o, double x)
{
    if (isinf(x))
        fputs("+Inf", o);
    else if (x == floor(x) && fabs(x) < 1e15)
        fprintf(o, "%.0f", x);
    else
        fprintf(o, "%.15g", x);
}

/* One sample: NAME{LABELS} VALUE; labels is "a=\"x\",b=\"y\"" or "". */
static void sample(FILE *o, const char *name, const char *labels, double x)
{
    if (labels[0])
        fprintf(o, "%s{%s} ", name, labels);
    else
        fprintf(o, "%s ", name);
    num(o, x);
    fputc('\n', o);
}

static void daemon_label(char *buf, size_t n, int role, const char *extra)
{
    snprintf(buf, n, "daemon=\"%s\"%s%s", dsv4_role_name(role), extra ? "," : "",
             extra ? extra : "");
}

/* Families from a field table: consecutive rows of one metric share HELP and TYPE. */
static void fields(FILE *o, const struct dsv4_sv_field *t, size_t n,
                   const void *const base[DSV4_ROLE_COUNT], const bool in_set[DSV4_ROLE_COUNT])
{
    for (size_t i = 0; i < n; i++) {
        const struct dsv4_sv_field *f = &t[i];
        if (i == 0 || strcmp(t[i - 1].metric, f->metric) != 0)
            family(o, f->metric, f->help, f->kind == DSV4_SV_COUNTER ? "counter" : "gauge");
        char labels[128];
        for (int r = 0; r < DSV4_ROLE_COUNT; r++) {
            bool carried = f->roles ? (f->roles & DSV4_SV_ROLE(r)) != 0 : r == 0;
            if (!carried || !base[r] || !in_set[r])
                continue;
            if (f->roles == DSV4_SV_ALL)
                daemon_label(labels, sizeof(labels), r, f->label);
            else
                snprintf(labels, sizeof(labels), "%s", f->label ? f->label : "");
            sample(o, f->metric, labels, dsv4_sv_value(base[r], f));
        }
    }
}

/* A histogram from non-cumulative buckets; _count is the buckets' sum so the +Inf bucket and
 * _count always agree, even mid-update. */
static void histogram(FILE *o, const char *name, const char *help, const _Atomic uint64_t *bucket,
                      const double *bound, int n, double sum_s)
{
    char s[160];
    family(o, name, help, "histogram");
    uint64_t cum = 0;
    for (int i = 0; i < n; i++) {
        cum += atomic_load_explicit(&bucket[i], memory_order_relaxed);
        snprintf(s, sizeof(s), "%s_bucket", name);
        fprintf(o, "%s{le=\"", s);
        num(o, i < n - 1 ? bound[i] : INFINITY);
        fprintf(o, "\"} %llu\n", (unsigned long long)cum);
    }
    snprintf(s, sizeof(s), "%s_sum", name);
    sample(o, s, "", sum_s);
    snprintf(s, sizeof(s), "%s_count", name);
    sample(o, s, "", (double)cum);
}

int dsv4_metrics_render(const struct dsv4_view *v, char **out, size_t *len)
{
    FILE *o = open_memstream(out, len);
    if (!o)
        return -errno;
    family(o, "dsv4_build_info", "The dsv4 version and source revision of this exporter.", "gauge");
    fputs("dsv4_build_info{version=\"", o);
    label_value(o, DSV4_VERSION);
    fputs("\",revision=\"", o);
    label_value(o, DSV4_REVISION);
    fputs("\"} 1\n", o);

    const void *base[DSV4_ROLE_COUNT];
    char labels[64];
    for (int r = 0; r < DSV4_ROLE_COUNT; r++)
        base[r] = v->page[r];
    family(o, "dsv4_daemon_up", "1 when the daemon is ready to serve, else 0.", "gauge");
    for (int r = 0; r < DSV4_ROLE_COUNT; r++)
        if (v->page[r] && v->in_set[r]) {
            daemon_label(labels, sizeof(labels), r, NULL);
            sample(o, "dsv4_daemon_up", labels,
                   atomic_load(&v->page[r]->state) == DSV4_STATE_READY);
        }
    family(o, "dsv4_daemon_state", "Daemon state: 0 down, 1 starting, 2 ready, 3 failed.", "gauge");
    for (int r = 0; r < DSV4_ROLE_COUNT; r++)
        if (v->page[r] && v->in_set[r]) {
            daemon_label(labels, sizeof(labels), r, NULL);
            sample(o, "dsv4_daemon_state", labels, (double)atomic_load(&v->page[r]->state));
        }
    family(o, "dsv4_daemon_resident_memory_bytes", "Resident set of the daemon's process.",
           "gauge");
    for (int r = 0; r < DSV4_ROLE_COUNT; r++)
        if (v->page[r] && v->in_set[r]) {
            daemon_label(labels, sizeof(labels), r, NULL);
            sample(o, "dsv4_daemon_resident_memory_bytes", labels,
                   (double)dsv4_rss_bytes(atomic_load(&v->page[r]->pid)));
        }
    fields(o, dsv4_sv_stats, dsv4_sv_n_stats, base, v->in_set);

    static const uint64_t bounds_us[] = DSV4_HIST_BOUNDS_US, bounds_n[] = DSV4_COUNT_BOUNDS;
    double bounds[DSV4_HIST_N], cbounds[DSV4_HIST_N];
    for (int i = 0; i < DSV4_HIST_N - 1; i++) {
        bounds[i] = (double)bounds_us[i] / 1e6;
        cbounds[i] = (double)bounds_n[i];
    }
    for (size_t i = 0; i < dsv4_sv_n_hists; i++) {
        const struct dsv4_sv_hist *hv = &dsv4_sv_hists[i];
        const struct dsv4_stats_shm *pg = v->page[hv->role];
        if (!pg)
            continue;
        const struct dsv4_hist_shm *h = (const void *)((const char *)pg + hv->off);
        double sum = (double)atomic_load(&h->sum_us);
        histogram(o, hv->metric, hv->help, h->bucket, hv->count ? cbounds : bounds, DSV4_HIST_N,
                  hv->count ? sum : sum / 1e6);
    }

    const struct dsv4_expert_shm *es = v->experts;
    if (es) {
        const void *eb[DSV4_ROLE_COUNT] = { &es->stats };
        const bool one[DSV4_ROLE_COUNT] = { true };
        fields(o, dsv4_sv_expert, dsv4_sv_n_expert, eb, one);
        family(o, "dsv4_expert_slots", "Expert cache slots in shared memory.", "gauge");
        sample(o, "dsv4_expert_slots", "", es->n_slots);
        double lb[DSV4_EXPERT_LAT_BUCKETS];
        for (int i = 0; i < DSV4_EXPERT_LAT_BUCKETS; i++)
            lb[i] = dsv4_expert_lat_bound_s(i);
        histogram(o, "dsv4_expert_read_latency_seconds",
                  "Expert load time, first read to resident.", es->stats.lat_hist, lb,
                  DSV4_EXPERT_LAT_BUCKETS, (double)atomic_load(&es->stats.lat_sum_us) / 1e6);
    }
    return fclose(o) == 0 ? 0 : -EIO;
}

static enum MHD_Result respond(struct MHD_Connection *conn, unsigned code, const char *type,
                               char *body, size_t len, enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result ret = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **state)
{
    struct dsv4_metrics *m = cls;
    static const char text[] = "text/plain; charset=utf-8";
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        static char msg[] = "only GET and HEAD\n";
        return respond(conn, MHD_HTTP_METHOD_NOT_ALLOWED, text, msg, sizeof(msg) - 1,
                       MHD_RESPMEM_PERSISTENT);
    }
    if (strcmp(url, "/metrics") != 0) {
        static char msg[] = "dsv4 exporter: see /metrics\n";
        return respond(conn, strcmp(url, "/") == 0 ? MHD_HTTP_OK : MHD_HTTP_NOT_FOUND, text, msg,
                       sizeof(msg) - 1, MHD_RESPMEM_PERSISTENT);
    }
    struct dsv4_view v = *m->v;     /* the expert segment is mapped per scrape: it comes later */
    dsv4_view_map_experts(&v);
    char *body = NULL;
    size_t len = 0;
    int rc = dsv4_metrics_render(&v, &body, &len);
    v.owned = false;
    dsv4_view_close(&v);
    if (rc < 0) {
        free(body);
        static char msg[] = "out of memory\n";
        return respond(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, text, msg, sizeof(msg) - 1,
                       MHD_RESPMEM_PERSISTENT);
    }
    return respond(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", body, len,
                   MHD_RESPMEM_MUST_FREE);
}

int dsv4_metrics_start(const char *addr, const struct dsv4_view *v, struct dsv4_metrics **ret,
                       char *bound, size_t bound_n, struct dsv4_err *err)
{
    int fd = dsv4_tcp_listen("metrics", addr, 16, bound, bound_n, err);
    if (fd < 0)
        return fd;
    struct dsv4_metrics *m = dsv4_xcalloc(1, sizeof(*m));
    m->v = v;
    /* one internal thread (epoll) serves every connection: scrapes are rare and small */
    /* One event-driven thread: a slow client costs a connection slot, never the thread. The
     * slots are many and an idle one is closed after 3 s, so a few dozen slow or stuck clients
     * cannot starve the scraper (32 slots and 10 s let 40 of them hold it off for 25 s). */
    m->mhd = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD, 0, NULL, NULL, on_request, m,
                              MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT, 256u,
                              MHD_OPTION_CONNECTION_TIMEOUT, 3u,
                              MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)16384, MHD_OPTION_END);
    if (!m->mhd) {
        close(fd);
        free(m);
        return dsv4_errf(err, -EIO, "metrics %s: libmicrohttpd did not start", bound);
    }
    *ret = m;
    return 0;
}

void dsv4_metrics_stop(struct dsv4_metrics *m)
{
    if (!m)
        return;
    MHD_stop_daemon(m->mhd);    /* closes the listening socket too */
    free(m);
}
