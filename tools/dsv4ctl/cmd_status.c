/* SPDX-License-Identifier: MIT */
/*
 * `dsv4ctl status [--run-dir DIR] [--json]`: per daemon pid, state, uptime,
 * restarts, RSS (from /proc), plus the model and the scheduler's queue
 * depth, read from the stats pages. Exits 0 only when every daemon that
 * the set runs is ready (69 otherwise), so scripts can use it as a probe.
 */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dsv4ctl.h"
#include "dsv4_wire.h"
#include "fetcher_shm.h"
#include "rundir.h"

static long rss_kib(long pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%ld/status", pid);
    FILE *f = fopen(path, "r");
    long kib = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

int dsv4ctl_status(int argc, char **argv)
{
    static const struct option opts[] = {
        { "run-dir", required_argument, NULL, 'r' },
        { "json", no_argument, NULL, 'j' },
        { 0 },
    };
    const char *arg = NULL;
    bool json = false;
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
    char dir[DSV4_PATH_MAX], model[DSV4_PATH_MAX] = "", path[DSV4_PATH_MAX + 16];
    dsv4_rundir_resolve(arg, dir);
    int sv = dsv4_rundir_supervisor_pid(dir);
    snprintf(path, sizeof(path), "%s/model", dir);
    FILE *f = fopen(path, "r");
    if (f) {
        if (fgets(model, sizeof(model), f))
            model[strcspn(model, "\n")] = '\0';
        fclose(f);
    }
    static const char *const states[] = { "down", "starting", "ready", "failed" };
    cJSON *root = cJSON_CreateObject(), *ds = cJSON_AddArrayToObject(root, "daemons");
    cJSON_AddStringToObject(root, "run_dir", dir);
    cJSON_AddNumberToObject(root, "supervisor_pid", sv > 0 ? sv : 0);
    cJSON_AddStringToObject(root, "model", model);
    bool all_ready = sv != 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now_ms = (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    if (!json)
        printf("run dir %s, supervisor %d, model %s\n%-10s %8s %-8s %9s %8s %10s\n", dir, sv,
               model[0] ? model : "-", "daemon", "pid", "state", "uptime_s", "restarts", "rss_kib");
    for (int r = 0; r < DSV4_ROLE_COUNT; r++) {
        struct dsv4_stats_shm *s;
        if (sv == 0 || dsv4_stats_map(dir, r, false, &s, NULL) < 0)
            continue;
        uint64_t st = atomic_load(&s->state), pid = atomic_load(&s->pid);
        if (pid == 0 && st == DSV4_STATE_DOWN && r == DSV4_ROLE_FETCHER) {
            dsv4_stats_unmap(s);
            continue;   /* not part of this set (fetcher not built) */
        }
        all_ready &= st == DSV4_STATE_READY;
        double up = (double)(now_ms - atomic_load(&s->started_unix_ms)) / 1000.0;
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "name", dsv4_role_name(r));
        cJSON_AddNumberToObject(d, "pid", (double)pid);
        cJSON_AddStringToObject(d, "state", st < 4 ? states[st] : "?");
        cJSON_AddNumberToObject(d, "uptime_s", up);
        cJSON_AddNumberToObject(d, "restarts", (double)atomic_load(&s->restarts));
        cJSON_AddNumberToObject(d, "rss_kib", (double)rss_kib((long)pid));
        if (r == DSV4_ROLE_SCHEDULER) {
            cJSON_AddNumberToObject(root, "queue_depth", (double)atomic_load(&s->queue_depth));
            cJSON_AddNumberToObject(root, "active", (double)atomic_load(&s->active));
            cJSON_AddNumberToObject(d, "requests_ok", (double)atomic_load(&s->req_ok));
            cJSON_AddNumberToObject(d, "requests_busy", (double)atomic_load(&s->req_busy));
            cJSON_AddNumberToObject(d, "requests_cancelled", (double)atomic_load(&s->req_cancelled));
            cJSON_AddNumberToObject(d, "requests_error", (double)atomic_load(&s->req_error));
            cJSON_AddNumberToObject(d, "generated_tokens", (double)atomic_load(&s->generated_tokens));
            cJSON_AddNumberToObject(d, "replays", (double)atomic_load(&s->replays));
            cJSON_AddNumberToObject(d, "spec_proposed", (double)atomic_load(&s->spec_proposed));
            cJSON_AddNumberToObject(d, "spec_accepted", (double)atomic_load(&s->spec_accepted));
            cJSON_AddNumberToObject(d, "spec_verify_steps",
                                    (double)atomic_load(&s->spec_verify_steps));
            cJSON_AddNumberToObject(d, "spec_quench", (double)atomic_load(&s->spec_quench));
        }
        cJSON_AddNumberToObject(d, "bad_messages", (double)atomic_load(&s->bad_messages));
        cJSON_AddItemToArray(ds, d);
        if (!json)
            printf("%-10s %8llu %-8s %9.1f %8llu %10ld\n", dsv4_role_name(r),
                   (unsigned long long)pid, st < 4 ? states[st] : "?", up,
                   (unsigned long long)atomic_load(&s->restarts), rss_kib((long)pid));
        dsv4_stats_unmap(s);
    }
    /* the fetcher's counters live in its expert segment (misses are loads it had to read;
     * leases of resident experts are served without it and are not counted there) */
    char ename[64];
    struct dsv4_expert_shm *es;
    uint64_t esize;
    if (sv != 0 && dsv4_eshm_name(dir, ename, sizeof(ename), NULL) == 0 &&
        dsv4_eshm_attach(ename, &es, &esize, NULL) == 0) {
        double req = (double)atomic_load(&es->stats.requests), hit = (double)atomic_load(&es->stats.hits);
        cJSON *e = cJSON_AddObjectToObject(root, "expert_cache");
        cJSON_AddNumberToObject(e, "load_requests", req);
        cJSON_AddNumberToObject(e, "hits", hit);
        cJSON_AddNumberToObject(e, "misses", (double)atomic_load(&es->stats.misses));
        cJSON_AddNumberToObject(e, "bytes_read", (double)atomic_load(&es->stats.bytes_read));
        cJSON_AddNumberToObject(e, "hit_rate", req > 0 ? hit / req : 0);
        if (!json)
            printf("expert cache: %.0f load requests, hit rate %.3f\n", req, req > 0 ? hit / req : 0);
        dsv4_eshm_unmap(es, esize);
    }
    if (json) {
        char *t = cJSON_Print(root);
        printf("%s\n", t);
        free(t);
    } else {
        cJSON *q = cJSON_GetObjectItem(root, "queue_depth");
        printf("queue depth %d\n", q ? q->valueint : 0);
    }
    cJSON_Delete(root);
    return all_ready ? DSV4_EXIT_OK : DSV4_EXIT_UNAVAILABLE;
}
