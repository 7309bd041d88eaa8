/* SPDX-License-Identifier: MIT */
/*
 * JSON encoding of the fetcher's control messages (see fetcher_msg.h).
 */
#include "fetcher_msg.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <string.h>

static const char *const cmd_names[] = {
    [DSV4_FETCHER_CMD_HEALTH] = "health",     [DSV4_FETCHER_CMD_STATS] = "stats",
    [DSV4_FETCHER_CMD_PIN] = "pin",           [DSV4_FETCHER_CMD_UNPIN] = "unpin",
    [DSV4_FETCHER_CMD_SAVE_HOT] = "save-hot", [DSV4_FETCHER_CMD_SHUTDOWN] = "shutdown",
};

static cJSON *new_msg(void)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "v", DSV4_FETCHER_MSG_VERSION);
    return o;
}

static char *finish(cJSON *o)
{
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

char *dsv4_fetcher_msg_request(const struct dsv4_fetcher_msg *m)
{
    cJSON *o = new_msg();
    cJSON_AddStringToObject(o, "cmd", cmd_names[m->cmd]);
    if (m->cmd == DSV4_FETCHER_CMD_PIN || m->cmd == DSV4_FETCHER_CMD_UNPIN) {
        cJSON_AddNumberToObject(o, "layer", m->layer);
        cJSON_AddNumberToObject(o, "expert", m->expert);
    }
    return finish(o);
}

static int get_int(const cJSON *o, const char *name, int *ret, struct dsv4_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int)v->valuedouble)
        return dsv4_errf(err, -EPROTO, "control message: \"%s\" must be an integer", name);
    *ret = (int)v->valuedouble;
    return 0;
}

int dsv4_fetcher_msg_parse(const char *buf, size_t len, struct dsv4_fetcher_msg *ret,
                           struct dsv4_err *err)
{
    cJSON *o = cJSON_ParseWithLength(buf, len);
    int rc = 0, v = 0;
    memset(ret, 0, sizeof(*ret));
    if (!cJSON_IsObject(o)) {
        rc = dsv4_errf(err, -EPROTO, "control message: not a JSON object");
        goto out;
    }
    if ((rc = get_int(o, "v", &v, err)) < 0)
        goto out;
    if (v != DSV4_FETCHER_MSG_VERSION) {
        rc = dsv4_errf(err, -EPROTO, "control message: version %d, this fetcher speaks %d", v,
                       DSV4_FETCHER_MSG_VERSION);
        goto out;
    }
    const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(o, "cmd");
    size_t i = 0;
    for (; cJSON_IsString(cmd) && i < sizeof(cmd_names) / sizeof(cmd_names[0]); i++)
        if (!strcmp(cmd->valuestring, cmd_names[i]))
            break;
    if (!cJSON_IsString(cmd) || i == sizeof(cmd_names) / sizeof(cmd_names[0])) {
        rc = dsv4_errf(err, -EPROTO, "control message: unknown \"cmd\"");
        goto out;
    }
    ret->cmd = (enum dsv4_fetcher_cmd)i;
    if (ret->cmd == DSV4_FETCHER_CMD_PIN || ret->cmd == DSV4_FETCHER_CMD_UNPIN) {
        if ((rc = get_int(o, "layer", &ret->layer, err)) < 0 ||
            (rc = get_int(o, "expert", &ret->expert, err)) < 0)
            goto out;
    }
out:
    cJSON_Delete(o);
    return rc;
}

char *dsv4_fetcher_msg_error(const char *msg)
{
    cJSON *o = new_msg();
    cJSON_AddBoolToObject(o, "ok", 0);
    cJSON_AddStringToObject(o, "error", msg);
    return finish(o);
}

char *dsv4_fetcher_msg_ok(void)
{
    cJSON *o = new_msg();
    cJSON_AddBoolToObject(o, "ok", 1);
    return finish(o);
}

#define LOAD(x) ((double)atomic_load_explicit(&(x), memory_order_relaxed))

char *dsv4_fetcher_msg_health(struct dsv4_expert_shm *s, const char *describe)
{
    static const char *const states[] = { "starting", "ready", "stopped" };
    uint32_t st = atomic_load_explicit(&s->state, memory_order_acquire);
    cJSON *o = new_msg();
    cJSON_AddBoolToObject(o, "ok", 1);
    cJSON_AddStringToObject(o, "state", st < 3 ? states[st] : "?");
    cJSON_AddNumberToObject(o, "pid", LOAD(s->pid));
    cJSON_AddNumberToObject(o, "epoch", LOAD(s->hdr.epoch));
    cJSON_AddBoolToObject(o, "o_direct", atomic_load_explicit(&s->io_direct, memory_order_relaxed));
    cJSON_AddBoolToObject(o, "io_uring", atomic_load_explicit(&s->io_uring, memory_order_relaxed));
    cJSON_AddStringToObject(o, "io", describe);
    return finish(o);
}

char *dsv4_fetcher_msg_stats(struct dsv4_expert_shm *s)
{
    struct dsv4_expert_stats_shm *t = &s->stats;
    cJSON *o = new_msg();
    cJSON_AddBoolToObject(o, "ok", 1);
    cJSON_AddNumberToObject(o, "slots", s->n_slots);
    cJSON_AddNumberToObject(o, "slot_bytes", (double)s->slot_size);
    cJSON_AddNumberToObject(o, "requests", LOAD(t->requests));
    cJSON_AddNumberToObject(o, "hits", LOAD(t->hits));
    cJSON_AddNumberToObject(o, "misses", LOAD(t->misses));
    cJSON_AddNumberToObject(o, "failures", LOAD(t->failures));
    cJSON_AddNumberToObject(o, "client_requests", LOAD(t->client_requests));
    cJSON_AddNumberToObject(o, "client_hits", LOAD(t->client_hits));
    cJSON_AddNumberToObject(o, "prefetch_issued", LOAD(t->prefetch_issued));
    cJSON_AddNumberToObject(o, "prefetch_used", LOAD(t->prefetch_used));
    cJSON_AddNumberToObject(o, "prefetch_dropped", LOAD(t->prefetch_dropped));
    cJSON_AddNumberToObject(o, "bytes_read", LOAD(t->bytes_read));
    cJSON_AddNumberToObject(o, "reads", LOAD(t->reads));
    cJSON_AddNumberToObject(o, "buffered_reads", LOAD(t->buffered_reads));
    cJSON_AddNumberToObject(o, "evictions", LOAD(t->evictions));
    cJSON_AddNumberToObject(o, "pinned", LOAD(t->pinned));
    cJSON_AddNumberToObject(o, "restarts", LOAD(t->restarts));
    cJSON_AddNumberToObject(o, "discarded_loading", LOAD(t->discarded_loading));
    cJSON *h = cJSON_AddArrayToObject(o, "load_latency_us_hist"); /* bucket i: < 64·2^i µs */
    for (int i = 0; i < DSV4_EXPERT_LAT_BUCKETS; i++)
        cJSON_AddItemToArray(h, cJSON_CreateNumber(LOAD(t->lat_hist[i])));
    return finish(o);
}
