/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: dsv4-api's handling of the scheduler's reply stream (daemons/api/gen.c: TOKEN,
 * TOKEN_LOGPROBS, PROGRESS, DONE, ERROR, a scheduler restart and the resubmission) and the
 * responses made from it (oai_resp.c, anthropic.c: server-sent events and JSON bodies), as
 * daemons/api/http.c drives them, without HTTP. The first input byte picks one of a few fixed
 * requests (OpenAI chat with stop strings, logprobs, tools, thinking; completions; Anthropic
 * messages; streamed or not); gen_begin() submits it on its own DEALER to a ROUTER played by
 * this file (inproc), which then sends what the rest of the input says, one operation each:
 *   0 TOKEN: u8 count (1..4), then a u16 per id (an id of the vocabulary, or a piece of text
 *     from a fixed list — </think>, the DSML tool-call start, a call, stop strings, UTF-8 —
 *     its ids as the tokenizer encodes it); index = the tokens received so far unless the
 *     count's high bit asks for another index
 *   1 TOKEN_LOGPROBS for the next index (u8: its n_top, u8 logprob)
 *   2 PROGRESS   3 DONE (u8 reason, u8 cached)   4 ERROR (u8 code, u8: id ours/0/other)
 *   5 a raw frame (u16 length, bytes)   6 a TOKEN for another request
 *   7 the scheduler restarts (its stats page shows a new pid): the API must resubmit
 * After each, gen_wait() takes what arrived and the response is pumped as http.c does (stream:
 * pieces then finish, or the error event; else the body once done, or the error body). What
 * must hold: no crash or sanitizer report; every SSE event's data and every body is one JSON
 * value in valid UTF-8 (or "[DONE]"); a resubmission is a valid GENERATE with the same id, its
 * done tokens exactly those received.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include <zmq.h>

#include "api.h"
#include "api_req.h"
#include "chat.h"
#include "gen.h"
#include "log.h"
#include "resp.h"
#include "utf8.h"
#include "util.h"
#include "zmsg.h"

#ifndef FUZZ_MODEL
#error "FUZZ_MODEL: a model directory with config.json and tokenizer.json"
#endif

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "invariant failed: %s\n", #x); abort(); } } while (0)

static struct api_ctx c;
static struct dsv4_stats_shm pages[DSV4_ROLE_COUNT];
static void *sched;         /* the scheduler side: ROUTER */
static struct dsv4_zin zin;
static struct dsv4_wire_buf wb;
static uint32_t vocab;

static const struct {
    int kind;               /* 0 chat, 1 completion, 2 messages */
    const char *body;
} reqs[] = {
    { 0, "{\"model\":\"demo\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"stream\":true,"
         "\"max_tokens\":256}" },
    { 0, "{\"model\":\"demo\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":256,"
         "\"stop\":[\"the\",\"o\\u00e9\"],\"logprobs\":true,\"top_logprobs\":3}" },
    { 0, "{\"model\":\"demo\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"stream\":true,"
         "\"max_tokens\":256,\"stop\":[\"e\"],\"logprobs\":true,\"top_logprobs\":2,"
         "\"stream_options\":{\"include_usage\":true}}" },
    { 0, "{\"model\":\"demo\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":256,"
         "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
         "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}}}}}],"
         "\"thinking\":{\"type\":\"enabled\"}}" },
    { 0, "{\"model\":\"demo\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"stream\":true,"
         "\"max_tokens\":256,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
         "\"thinking\":{\"type\":\"enabled\"}}" },
    { 1, "{\"model\":\"demo\",\"prompt\":[5,9,12],\"max_tokens\":256,\"logprobs\":2,\"echo\":false}" },
    { 1, "{\"model\":\"demo\",\"prompt\":\"Once\",\"max_tokens\":256,\"stream\":true,\"stop\":\"\\n\"}" },
    { 2, "{\"model\":\"demo\",\"max_tokens\":256,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
         "\"stream\":true,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024}}" },
    { 2, "{\"model\":\"demo\",\"max_tokens\":256,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
         "\"stop_sequences\":[\"ab\"],\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}]}" },
    { 2, "{\"model\":\"demo\",\"max_tokens\":256,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
         "\"stream\":true,\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}]}" },
};
#define N_REQS (sizeof(reqs) / sizeof(reqs[0]))

/* Text pieces the model could write, as ids (filled at setup). */
static const char *const pieces[] = {
    "</think>", DSV4_CHAT_TOOL_CALLS_START,
    "\n<" DSV4_CHAT_DSML "invoke name=\"f\">\n<" DSV4_CHAT_DSML "parameter name=\"a\" "
    "string=\"true\">1</" DSV4_CHAT_DSML "parameter>\n</" DSV4_CHAT_DSML "invoke>\n</"
    DSV4_CHAT_DSML "tool_calls>",
    "the", "o\xc3\xa9", "e", "ab", "\n", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\"\\\x01", "Hello",
};
#define N_PIECES (sizeof(pieces) / sizeof(pieces[0]))
static struct dsv4_ids piece_ids[N_PIECES];

static char lock_path[DSV4_PATH_MAX + 32];

static void remove_run_dir(void)
{
    unlink(lock_path);
    rmdir(c.run_dir);
}

static void setup(void)
{
    struct dsv4_err err = { "" };
    const char *model = getenv("DSV4_FUZZ_MODEL") ? getenv("DSV4_FUZZ_MODEL") : FUZZ_MODEL;
    dsv4_log_set_level(DSV4_LOG_ERROR);
    if (dsv4_tokenizer_open_dir(model, &c.tok, &err) < 0) {
        fprintf(stderr, "fuzz-api-stream: %s\n", err.msg);
        abort();
    }
    vocab = dsv4_tokenizer_n_ids(c.tok);
    c.has_eos = dsv4_tokenizer_eos(c.tok, &c.eos);
    c.has_end_think = dsv4_tokenizer_find(c.tok, "</think>", &c.end_think);
    c.dsml_special = dsv4_tokenizer_find(c.tok, DSV4_CHAT_DSML, &c.dsml) &&
                     dsv4_tokenizer_is_special(c.tok, c.dsml);
    pthread_mutex_init(&c.tok_mu, NULL);
    c.n_ctx = 4096;
    c.default_max_tokens = 64;
    snprintf(c.model_id, sizeof(c.model_id), "demo");
    c.stats = &pages[DSV4_ROLE_API];
    for (int r = 0; r < DSV4_ROLE_COUNT; r++) {
        c.page[r] = &pages[r];
        atomic_store(&pages[r].state, DSV4_STATE_READY);
        atomic_store(&pages[r].pid, 1000 + r);
    }
    /* a run dir whose supervisor lock is held (by us), so the set looks alive */
    static char tmpl[] = "/tmp/fuzz-api-stream-XXXXXX";
    if (!mkdtemp(tmpl))
        abort();
    snprintf(c.run_dir, sizeof(c.run_dir), "%s", tmpl);
    snprintf(lock_path, sizeof(lock_path), "%s/supervisor.lock", tmpl);
    int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || flock(fd, LOCK_EX) < 0 || write(fd, "1\n", 2) != 2)
        abort();
    atexit(remove_run_dir);
    c.zctx = dsv4_zctx_new();
    snprintf(c.sched_ep, sizeof(c.sched_ep), "inproc://fz-api-sched");
    sched = dsv4_zsock(c.zctx, ZMQ_ROUTER, NULL);
    if (zmq_bind(sched, c.sched_ep) < 0)
        abort();
    for (size_t i = 0; i < N_PIECES; i++)
        if (i == 0 && c.has_end_think)  /* the marker as the model writes it: its own id */
            dsv4_ids_push(&piece_ids[i], c.end_think);
        else if (dsv4_chat_prompt(c.tok, pieces[i], strlen(pieces[i]), DSV4_PROMPT_RAW,
                             &piece_ids[i], &err) < 0 ||
            piece_ids[i].n == 0) {
            fprintf(stderr, "fuzz-api-stream: piece %zu: %s\n", i, err.msg);
            abort();
        }
}

/* Every event of an SSE stream ("event: X\n" optional, "data: <json>\n\n", ": comment\n\n"). */
static void check_json(const char *p, size_t n)
{
    CHECK(dsv4_utf8_valid_prefix((const uint8_t *)p, n) == n);
    char *z = dsv4_xmalloc(n + 1);
    memcpy(z, p, n);
    z[n] = '\0';
    cJSON *j = cJSON_ParseWithOpts(z, NULL, 1);
    if (!j)
        fprintf(stderr, "not JSON: %s\n", z);
    CHECK(j != NULL);
    cJSON_Delete(j);
    free(z);
}

static void check_sse(const struct dsv4_buf *b)
{
    size_t at = 0;
    while (at < b->len) {
        const char *p = b->p + at;
        const char *end = memmem(p, b->len - at, "\n\n", 2);
        CHECK(end != NULL);
        size_t n = (size_t)(end - p);
        const char *data = memmem(p, n, "data: ", 6);
        if (data) {
            data += 6;
            size_t dn = (size_t)(end - data);
            if (!(dn == 6 && !memcmp(data, "[DONE]", 6)))
                check_json(data, dn);
        } else {
            CHECK(p[0] == ':');     /* a comment (keep-alive) */
        }
        at += n + 2;
    }
}

/* The GENERATE gen_begin() (or a resubmission) sent: valid, ours, the done tokens ours.
 * wait_ms: how long the first one may take (a new connection is attached by the ROUTER
 * asynchronously: a non-blocking receive right after the connect can find nothing yet). */
static bool take_generate(const struct gen *g, unsigned char *rid, size_t *rid_len, int wait_ms)
{
    bool got = false;
    uint64_t end = dsv4_now_ns() + (uint64_t)wait_ms * 1000000u;
    for (;;) {
        while (dsv4_zrecv(sched, &zin, 1, 1) == 0) {
            struct dsv4_msg m;
            struct dsv4_err err;
            int errc;
            CHECK(dsv4_wire_decode(zin.buf, zin.len, &m, &errc, &err) == 0);
            if (m.type == DSV4_MSG_CANCEL)
                continue;   /* a request of an earlier input, closed */
            CHECK(m.type == DSV4_MSG_GENERATE);
            const struct dsv4_msg_generate *gm = m.body;
            CHECK(gm->req_id == g->id && gm->n_done == g->n_got);
            CHECK(!memcmp((const int32_t *)m.tail + gm->n_prompt, g->got, (size_t)g->n_got * 4));
            memcpy(rid, zin.rid, zin.rid_len);
            *rid_len = zin.rid_len;
            got = true;
        }
        uint64_t now = dsv4_now_ns();
        if (got || now >= end)
            return got;
        zmq_pollitem_t it = { sched, 0, ZMQ_POLLIN, 0 };
        zmq_poll(&it, 1, (long)((end - now) / 1000000u) + 1);
    }
}

struct rd {
    const uint8_t *p;
    size_t n, at;
};
static unsigned u8(struct rd *r)
{
    return r->at < r->n ? r->p[r->at++] : 0;
}
static unsigned u16(struct rd *r)
{
    unsigned lo = u8(r);
    return lo | u8(r) << 8;
}

static void meta_init(struct api_meta *m, const struct api_req *r)
{
    static const char *const prefix[] = { "chatcmpl-", "cmpl-", "msg_" };
    memset(m, 0, sizeof(*m));
    snprintf(m->id, sizeof(m->id), "%s0123456789abcdef01234567", prefix[r->kind]);
    m->created = 1700000000;
    m->model = c.model_id;
    m->req = r;
    m->block = -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!c.tok)
        setup();
    if (size < 1)
        return 0;
    struct rd rd = { data, size, 1 };
    unsigned which = data[0] % N_REQS;
    static int (*const parse[])(const char *, size_t, struct api_req *, struct api_error *) = {
        api_parse_chat, api_parse_completion, api_parse_messages,
    };
    static const struct api_writer *const writers[] = { &api_oai_chat, &api_oai_completion,
                                                        &api_anthropic };
    struct api_req req;
    struct api_error e;
    const char *body = reqs[which].body;
    if (parse[reqs[which].kind](body, strlen(body), &req, &e) < 0) {
        fprintf(stderr, "fuzz-api-stream: request %u: %s\n", which, e.msg);
        abort();
    }
    req.seed = 1;
    const struct api_writer *w = writers[reqs[which].kind];
    struct gen g;
    CHECK(gen_begin(&g, &c, &req, -1, &e) == 0);
    unsigned char rid[256];
    size_t rid_len = 0;
    CHECK(take_generate(&g, rid, &rid_len, 5000));
    struct api_meta meta;
    meta_init(&meta, &req);
    struct dsv4_buf out = { 0 };
    bool stream = req.stream, started = false, finished = false;
    int ops = 0;
    while (rd.at < rd.n && ops++ < 1024 && !finished) {
        unsigned op = u8(&rd);
        switch (op % 8) {
        case 0:
        case 6: {
            unsigned cnt = u8(&rd);
            uint32_t n = 1 + (cnt & 3);
            int32_t ids[512];
            uint32_t k = 0;
            for (uint32_t i = 0; i < n; i++) {
                unsigned v = u16(&rd);
                if (v & 0x8000) {   /* a piece of text */
                    const struct dsv4_ids *pi = &piece_ids[(v & 0x7fff) % N_PIECES];
                    for (size_t j = 0; j < pi->n && k < 512; j++)
                        ids[k++] = (int32_t)pi->v[j];
                } else if (k < 512) {
                    ids[k++] = (int32_t)(v % (vocab + 4));  /* a few past the vocabulary */
                }
            }
            struct dsv4_msg_token t = { op % 8 == 6 ? g.id + 1 : g.id,
                                        cnt & 0x80 ? (cnt >> 2 & 7) : g.n_got, k };
            dsv4_wire_begin(&wb, DSV4_MSG_TOKEN);
            dsv4_wire_put(&wb, &t, sizeof(t));
            dsv4_wire_put(&wb, ids, k * 4);
            dsv4_wire_finish(&wb);
            break;
        }
        case 1: {
            unsigned nt = u8(&rd) % (DSV4_WIRE_MAX_LOGPROBS + 1);
            struct dsv4_msg_token_logprobs l = { g.id, g.n_lp, (int32_t)(u8(&rd) % vocab),
                                                 -(float)u8(&rd) / 16.0f, nt };
            dsv4_wire_begin(&wb, DSV4_MSG_TOKEN_LOGPROBS);
            dsv4_wire_put(&wb, &l, sizeof(l));
            for (unsigned i = 0; i < nt; i++) {
                struct dsv4_wire_topk tk = { (int32_t)((i * 131u + l.id) % vocab),
                                             -(float)i * 0.5f };
                dsv4_wire_put(&wb, &tk, sizeof(tk));
            }
            dsv4_wire_finish(&wb);
            break;
        }
        case 2: {
            struct dsv4_msg_progress p = { g.id, 1, 3 };
            dsv4_wire_simple(&wb, DSV4_MSG_PROGRESS, &p, sizeof(p));
            break;
        }
        case 3: {
            unsigned a = u8(&rd), b = u8(&rd);
            struct dsv4_msg_done d = { g.id, a % 4, g.n_got, (uint32_t)g.prompt.n,
                                       b % ((uint32_t)g.prompt.n + 1) };
            dsv4_wire_simple(&wb, DSV4_MSG_DONE, &d, sizeof(d));
            break;
        }
        case 4: {
            unsigned code = u8(&rd), who = u8(&rd);
            dsv4_wire_error(&wb, who % 3 == 0 ? g.id : who % 3 == 1 ? 0 : g.id + 7,
                            (int)(code % 11), "fuzz \"error\" \xc3\xa9");
            break;
        }
        case 5: {
            size_t n = u16(&rd);
            if (n > rd.n - rd.at)
                n = rd.n - rd.at;
            dsv4_wire_buf_free(&wb);
            wb.p = dsv4_xmalloc(n ? n : 1);
            memcpy(wb.p, rd.p + rd.at, n);
            wb.len = wb.cap = n;
            rd.at += n;
            break;
        }
        case 7:
            atomic_fetch_add(&pages[DSV4_ROLE_SCHEDULER].pid, 1);
            wb.len = 0;     /* nothing sent: gen_wait() sees no event and resubmits */
            break;
        }
        if (wb.len) {
            zmq_send(sched, rid, rid_len, ZMQ_SNDMORE);
            zmq_send(sched, wb.p, wb.len, 0);
        }
        uint64_t pid_before = g.sched_pid;
        int r = gen_wait(&g, 0, &e);
        if (g.sched_pid != pid_before)  /* it resubmitted: the GENERATE must come */
            CHECK(take_generate(&g, rid, &rid_len, 5000));
        if (r < 0) {
            CHECK(e.status >= 400 && e.msg[0]);
            if (stream && started) {
                const char *p;
                size_t n;
                bool rs;
                while (gen_take(&g, &p, &n, &rs))
                    w->piece(&out, &g, &meta, rs, p, n);
                w->error(&out, &e);
            } else {
                char *eb = w->error_body(&e);
                check_json(eb, strlen(eb));
                free(eb);
            }
            finished = true;
            break;
        }
        if (stream && g.started && !started) {
            w->start(&out, &g, &meta);
            started = true;
        }
        if (stream && started) {
            const char *p;
            size_t n;
            bool rs;
            while (gen_take(&g, &p, &n, &rs))
                w->piece(&out, &g, &meta, rs, p, n);
            if (g.state == GEN_DONE) {
                w->finish(&out, &g, &meta);
                finished = true;
            }
        } else if (!stream && g.state == GEN_DONE) {
            char *b = w->body(&g, &meta);
            if (getenv("DSV4_FUZZ_VERBOSE"))
                fprintf(stderr, "%s\n", b);
            check_json(b, strlen(b));
            free(b);
            finished = true;
        }
    }
    if (getenv("DSV4_FUZZ_VERBOSE"))   /* what an input produced (for corpus work) */
        fprintf(stderr, "%.*s[state %d, %u tokens]\n", (int)out.len, out.p ? out.p : "", g.state,
                g.n_got);
    check_sse(&out);
    dsv4_buf_free(&out);
    gen_end(&g);
    while (dsv4_zrecv(sched, &zin, 1, 1) == 0)     /* the CANCEL of a request left running */
        ;
    api_req_free(&req);
    return 0;
}
