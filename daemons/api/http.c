/* SPDX-License-Identifier: MIT */
/* The HTTP server (http.h). */
#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "gen.h"
#include "http.h"
#include "log.h"
#include "resp.h"
#include "util.h"

#define KEEPALIVE_NS (15ull * DSV4_NSEC_PER_SEC)  /* an SSE comment when nothing else was sent */
#define WAIT_MS 100

enum route { R_CHAT, R_COMPLETIONS, R_MESSAGES, R_MODELS, R_MODEL, R_HEALTH };

struct api_http {
    struct MHD_Daemon *mhd;
    struct api_ctx *c;
};

static atomic_bool stopping;

struct conn {                   /* per request, until MHD completes it */
    enum route route;
    struct dsv4_buf body;
    bool too_big;
};

struct stream {                 /* a streamed response, owned by MHD's callback */
    struct api_ctx *c;
    struct api_req req;
    struct gen g;
    struct api_meta meta;
    const struct api_writer *w;
    struct dsv4_buf out;
    size_t off;
    bool finished;
    uint64_t last_out;
    struct MHD_Connection *conn;
};

/* The idle deadline again, after a generation (which runs without one). */
static void deadline_back(struct MHD_Connection *conn, const struct api_ctx *c)
{
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, c->idle_timeout_s);
}

static const char *const json_type = "application/json";

static enum MHD_Result send_body(struct MHD_Connection *conn, unsigned status, const char *type,
                                 char *body, int retry_after)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body,
                                                             MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%d", retry_after);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *conn, const struct api_writer *w,
                                  const struct api_error *e)
{
    return send_body(conn, (unsigned)e->status, json_type,
                     w ? w->error_body(e) : api_oai_error_body(e), e->retry_after);
}

static const struct api_writer *writer_of(enum route r)
{
    return r == R_MESSAGES ? &api_anthropic : r == R_COMPLETIONS ? &api_oai_completion
                                                                 : &api_oai_chat;
}

static void count(struct api_ctx *c, int status)
{
    atomic_fetch_add(status < 300 ? &c->stats->req_ok
                     : status == 429 ? &c->stats->req_busy
                                     : &c->stats->req_error, 1);
}

/* ---- GET routes ---- */
static cJSON *model_obj(const struct api_ctx *c)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", c->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)c->created);
    cJSON_AddStringToObject(m, "owned_by", "dsv4");
    cJSON_AddNumberToObject(m, "context_length", (double)c->n_ctx);
    return m;
}

static enum MHD_Result models(struct MHD_Connection *conn, struct api_ctx *c, const char *id)
{
    cJSON *o;
    if (id) {
        if (strcmp(id, c->model_id) != 0) {
            struct api_error e;
            api_err(&e, 404, "invalid_request_error", "model", "model_not_found",
                    "The model '%.200s' does not exist (this server serves '%s')", id, c->model_id);
            return send_error(conn, NULL, &e);
        }
        o = model_obj(c);
    } else {
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "object", "list");
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), model_obj(c));
    }
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return send_body(conn, 200, json_type, t, 0);
}

/* 200 only when every daemon of the set is ready (the fetcher only when the set runs one). */
static enum MHD_Result health(struct MHD_Connection *conn, struct api_ctx *c)
{
    cJSON *o = cJSON_CreateObject(), *ds = cJSON_AddObjectToObject(o, "daemons"),
          *bad = cJSON_CreateArray();
    for (int r = 0; r < DSV4_ROLE_COUNT; r++) {
        const struct dsv4_stats_shm *p = c->page[r];
        if (r == DSV4_ROLE_API)
            continue;   /* we answer */
        uint64_t st = p ? atomic_load(&p->state) : DSV4_STATE_DOWN;
        if (r == DSV4_ROLE_FETCHER && (!p || (atomic_load(&p->pid) == 0 && st == DSV4_STATE_DOWN)))
            continue;   /* a set without a fetcher */
        static const char *const names[] = { "down", "starting", "ready", "failed" };
        cJSON_AddStringToObject(ds, dsv4_role_name(r), st < 4 ? names[st] : "unknown");
        if (st != DSV4_STATE_READY)
            cJSON_AddItemToArray(bad, cJSON_CreateString(dsv4_role_name(r)));
    }
    bool ok = cJSON_GetArraySize(bad) == 0 && !atomic_load(&stopping);
    cJSON_AddStringToObject(o, "status", ok ? "ok" : "unavailable");
    cJSON_AddItemToObject(o, "not_ready", bad);
    cJSON_AddStringToObject(o, "model", c->model_id);
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return send_body(conn, ok ? 200 : 503, json_type, t, ok ? 0 : 1);
}

/* ---- generation ---- */
static void meta_init(struct api_meta *m, const struct api_ctx *c, const struct api_req *r)
{
    static const char *const prefix[] = { "chatcmpl-", "cmpl-", "msg_" };
    uint64_t x[2] = { 0, 0 };
    if (getrandom(x, sizeof(x), 0) != sizeof(x))
        x[0] = dsv4_now_ns();
    snprintf(m->id, sizeof(m->id), "%s%016llx%08llx", prefix[r->kind], (unsigned long long)x[0],
             (unsigned long long)(x[1] & 0xffffffffu));
    m->created = (long long)time(NULL);
    m->model = c->model_id;
    m->req = r;
    m->block = -1;
}

/* Text gen_take() releases, then the end once the generation is done. */
static void pump(struct stream *s)
{
    const char *p;
    size_t n;
    bool r;
    while (gen_take(&s->g, &p, &n, &r))
        s->w->piece(&s->out, &s->g, &s->meta, r, p, n);
    if (s->g.state == GEN_DONE && !s->finished) {
        s->w->finish(&s->out, &s->g, &s->meta);
        s->finished = true;
        count(s->c, 200);
    }
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct stream *s = cls;
    while (s->off == s->out.len) {
        s->off = s->out.len = 0;
        if (s->finished) {
            deadline_back(s->conn, s->c);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        pump(s);
        if (s->out.len)
            break;
        struct api_error e;
        int r = atomic_load(&stopping)
                    ? api_err(&e, 503, "server_error", NULL, "unavailable", "the server is stopping")
                    : gen_wait(&s->g, WAIT_MS, &e);
        if (r < 0) {
            if (s->g.client_gone)
                return MHD_CONTENT_READER_END_WITH_ERROR;
            pump(s);    /* what was final before the failure */
            s->w->error(&s->out, &e);
            s->finished = true;
            count(s->c, e.status);
        } else if (r == 0 && dsv4_now_ns() - s->last_out > KEEPALIVE_NS) {
            dsv4_buf_append(&s->out, ": keep-alive\n\n", 14);
        }
    }
    size_t n = DSV4_MIN(max, s->out.len - s->off);
    memcpy(buf, s->out.p + s->off, n);
    s->off += n;
    s->last_out = dsv4_now_ns();
    return (ssize_t)n;
}

static void stream_free(void *cls)
{
    struct stream *s = cls;
    if (s->g.state == GEN_RUNNING && !s->g.client_gone)
        atomic_fetch_add(&s->c->stats->req_cancelled, 1);   /* the write to the client failed */
    atomic_fetch_sub(&s->c->stats->active, 1);
    gen_end(&s->g);
    api_req_free(&s->req);
    dsv4_buf_free(&s->out);
    free(s);
}

static int parse(enum route rt, const struct dsv4_buf *b, struct api_req *r, struct api_error *e)
{
    const char *p = b->p ? b->p : "";
    if (rt == R_CHAT)
        return api_parse_chat(p, b->len, r, e);
    if (rt == R_COMPLETIONS)
        return api_parse_completion(p, b->len, r, e);
    return api_parse_messages(p, b->len, r, e);
}

static enum MHD_Result generate(struct MHD_Connection *conn, struct api_ctx *c, struct conn *st)
{
    struct stream *s = dsv4_xcalloc(1, sizeof(*s));
    struct api_error e;
    s->c = c;
    s->w = writer_of(st->route);
    enum MHD_Result ret;
    if (parse(st->route, &st->body, &s->req, &e) < 0)
        goto fail;
    if (strcmp(s->req.model, c->model_id) != 0) {
        api_err(&e, 404, st->route == R_MESSAGES ? "not_found_error" : "invalid_request_error",
                "model", "model_not_found",
                "The model '%.200s' does not exist (this server serves '%s')", s->req.model,
                c->model_id);
        goto fail;
    }
    if (!s->req.has_seed && getrandom(&s->req.seed, sizeof(s->req.seed), 0) != sizeof(uint64_t))
        s->req.seed = dsv4_now_ns();
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn,
                                                                 MHD_CONNECTION_INFO_CONNECTION_FD);
    /* no idle deadline while the model works: we watch the client ourselves */
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    if (gen_begin(&s->g, c, &s->req, ci ? ci->connect_fd : -1, &e) < 0)
        goto fail_gen;  /* gen_end frees what gen_begin got to */
    atomic_fetch_add(&c->stats->active, 1);
    atomic_fetch_add(&c->stats->progress, 1);
    atomic_fetch_add(&c->stats->prompt_tokens, s->g.prompt.n);
    meta_init(&s->meta, c, &s->req);
    /* until the scheduler admits it, a request can still get a status of its own (429) */
    bool stream = s->req.stream;
    while (s->g.state == GEN_RUNNING && (!stream || !s->g.started)) {
        int r = atomic_load(&stopping)
                    ? api_err(&e, 503, "server_error", NULL, "unavailable", "the server is stopping")
                    : gen_wait(&s->g, WAIT_MS, &e);
        if (r < 0) {
            atomic_fetch_sub(&c->stats->active, 1);
            if (s->g.client_gone) {
                gen_end(&s->g);
                api_req_free(&s->req);
                free(s);
                return MHD_NO;  /* nobody to answer */
            }
            goto fail_gen;
        }
    }
    if (!stream) {
        deadline_back(conn, c);
        char *body = s->w->body(&s->g, &s->meta);
        atomic_fetch_sub(&c->stats->active, 1);
        count(c, 200);
        gen_end(&s->g);
        api_req_free(&s->req);
        free(s);
        return send_body(conn, 200, json_type, body, 0);
    }
    s->w->start(&s->out, &s->g, &s->meta);
    s->last_out = dsv4_now_ns();
    s->conn = conn;
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read,
                                                                  s, stream_free);
    if (!resp) {
        stream_free(s);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");  /* nginx: pass events at once */
    ret = MHD_queue_response(conn, 200, resp);
    MHD_destroy_response(resp);
    return ret;
fail_gen:
    gen_end(&s->g);
fail:
    deadline_back(conn, c);
    count(c, e.status);
    ret = send_error(conn, s->w, &e);
    api_req_free(&s->req);
    free(s);
    return ret;
}

/* ---- routing ---- */
static const struct {
    const char *path, *method;
    enum route route;
} routes[] = {
    { "/v1/chat/completions", "POST", R_CHAT },
    { "/chat/completions", "POST", R_CHAT },
    { "/v1/completions", "POST", R_COMPLETIONS },
    { "/completions", "POST", R_COMPLETIONS },
    { "/v1/messages", "POST", R_MESSAGES },
    { "/v1/models", "GET", R_MODELS },
    { "/models", "GET", R_MODELS },
    { "/health", "GET", R_HEALTH },
};

/* 0 found, -1 unknown path, -2 path known with another method */
static int find_route(const char *url, const char *method, enum route *out)
{
    int rc = -1;
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(routes); i++) {
        bool mine = !strcmp(routes[i].method, "GET") ? get : !strcmp(method, routes[i].method);
        if (strcmp(url, routes[i].path) == 0) {
            if (mine) {
                *out = routes[i].route;
                return 0;
            }
            rc = -2;
        }
    }
    if (get && (!strncmp(url, "/v1/models/", 11) || !strncmp(url, "/models/", 8))) {
        *out = R_MODEL;
        return 0;
    }
    return rc;
}

/* Constant time over the key's length: no early exit on the first differing byte. */
static bool key_ok(const char *want, const char *got)
{
    if (!got)
        return false;
    size_t n = strlen(want), m = strlen(got);
    unsigned char d = n != m;
    for (size_t i = 0; i < n; i++)
        d |= (unsigned char)(want[i] ^ (i < m ? got[i] : 0));
    return d == 0;
}

static bool authorized(struct MHD_Connection *conn, const struct api_ctx *c)
{
    if (!c->api_key)
        return true;
    const char *a = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (a && strncasecmp(a, "Bearer ", 7) == 0 && key_ok(c->api_key, a + 7))
        return true;
    const char *x = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "x-api-key");
    return x && key_ok(c->api_key, x);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **state)
{
    struct api_ctx *c = cls;
    struct conn *st = *state;
    struct api_error e;
    if (!st) {
        enum route rt = R_HEALTH;
        int f = find_route(url, method, &rt);
        bool anthropic = f == 0 && rt == R_MESSAGES;
        if (f == -1) {
            api_err(&e, 404, "invalid_request_error", NULL, "unknown_url",
                    "Unknown request URL: %.8s %.200s", method, url);
            return send_error(conn, NULL, &e);
        }
        if (f == -2) {
            api_err(&e, 405, "invalid_request_error", NULL, "method_not_allowed",
                    "Method %.8s not allowed for %.200s", method, url);
            struct MHD_Response *r;
            char *body = api_oai_error_body(&e);
            r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
            MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, json_type);
            MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW,
                                    !strcmp(url, "/health") || strstr(url, "models") ? "GET, HEAD"
                                                                                      : "POST");
            enum MHD_Result ret = MHD_queue_response(conn, 405, r);
            MHD_destroy_response(r);
            return ret;
        }
        if (rt != R_HEALTH && !authorized(conn, c)) {
            api_err(&e, 401, anthropic ? "authentication_error" : "invalid_request_error", NULL,
                    "invalid_api_key", "Incorrect or missing API key (Authorization: Bearer KEY)");
            return send_error(conn, anthropic ? &api_anthropic : NULL, &e);
        }
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > c->max_body) {
            api_err(&e, 413, "invalid_request_error", NULL, "request_too_large",
                    "Request body of %.20s bytes is over the limit of %zu bytes", cl, c->max_body);
            return send_error(conn, anthropic ? &api_anthropic : NULL, &e);
        }
        st = dsv4_xcalloc(1, sizeof(*st));
        st->route = rt;
        *state = st;
        return MHD_YES;
    }
    if (*upload_size) {
        if (st->body.len + *upload_size > c->max_body)
            st->too_big = true;
        if (!st->too_big)
            dsv4_buf_append(&st->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (st->too_big) {
        api_err(&e, 413, "invalid_request_error", NULL, "request_too_large",
                "Request body over the limit of %zu bytes", c->max_body);
        return send_error(conn, st->route == R_MESSAGES ? &api_anthropic : NULL, &e);
    }
    switch (st->route) {
    case R_HEALTH: return health(conn, c);
    case R_MODELS: return models(conn, c, NULL);
    case R_MODEL: return models(conn, c, strchr(url + 1, '/') + (url[1] == 'v' ? 8 : 1));
    default: return generate(conn, c, st);
    }
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **state,
                         enum MHD_RequestTerminationCode why)
{
    struct conn *st = *state;
    if (!st)
        return;
    dsv4_buf_free(&st->body);
    free(st);
    *state = NULL;
}

int api_http_start(struct api_ctx *c, const struct api_http_opts *o, struct api_http **ret,
                   struct dsv4_err *err)
{
    struct api_http *h = dsv4_xcalloc(1, sizeof(*h));
    h->c = c;
    h->mhd = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                                  MHD_USE_POLL,
                              0, NULL, NULL, on_request, c,
                              MHD_OPTION_LISTEN_SOCKET, o->listen_fd,
                              MHD_OPTION_CONNECTION_LIMIT, o->max_connections,
                              MHD_OPTION_PER_IP_CONNECTION_LIMIT, o->max_per_client,
                              MHD_OPTION_CONNECTION_TIMEOUT, o->idle_timeout_s,
                              MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
                              MHD_OPTION_END);
    if (!h->mhd) {
        free(h);
        return dsv4_errf(err, -EIO, "libmicrohttpd did not start on fd %d", o->listen_fd);
    }
    *ret = h;
    return 0;
}

void api_http_stop(struct api_http *h)
{
    if (!h)
        return;
    atomic_store(&stopping, true);
    MHD_stop_daemon(h->mhd);
    free(h);
}
