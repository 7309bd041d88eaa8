/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: dsv4-scheduler's message handlers (daemons/scheduler/handlers.c: admission,
 * CANCEL, compute's answers, PEER_RESTARTED) and its step (step.c, spec.c), without a daemon.
 * The scheduler's sockets are real (inproc): its client ROUTER talks to two client DEALERs,
 * "gen" (as `dsv4ctl gen`) and "api" (as dsv4-api), and to a third routing id, "gone", that
 * is not connected (a client that died: the send fails, the request is cancelled); its
 * compute DEALER talks to a ROUTER played by this file, which collects the commands the
 * scheduler sends (SESSION_OPEN, PREFIX_RESTORE, DRAFT, FORWARD...).
 *
 * An input is a sequence of operations; each is one opcode byte and its operands:
 *   0 raw client frame: u8 client, u16 length, bytes (through dsv4_wire_decode, as received)
 *   1 GENERATE built from 12 operand bytes (id 1..8, client, prompt, n_done, max_tokens,
 *     sampling, flags, stop strings)
 *   2 CANCEL: u8 id, u8 client
 *   3 SCORE: u8 id, u8 client, u8 length
 *   4 raw compute frame: u16 length, bytes
 *   5 answer the oldest command the scheduler sent to compute, honestly or perturbed by one
 *     operand byte (an ERROR, a wrong position, fewer rows, no or fewer logits, argmax -1 or
 *     past the vocabulary, a duplicate answer, the wrong message type)
 *   6 PEER_RESTARTED (u8: compute or fetcher): the old compute's commands are forgotten
 *   7 answer every outstanding command honestly
 * After each operation the scheduler runs schedule() (as its loop does) and every message it
 * sent to the clients is received and must decode (dsv4_wire_decode). At the end compute is
 * made to answer honestly (every greedy row is EOS, every sample draws it) until no request
 * is left, for at most DRAIN_ROUNDS steps. What must hold: no crash or sanitizer report; each
 * frame to a client valid; the in-flight count equal to the requests waiting on compute;
 * every request a live client submitted ends with DONE or ERROR sent to that client; no
 * request left; allocations bounded (the context is max_ctx = 256 positions).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "config.h"
#include "log.h"
#include "sched.h"

#ifndef FUZZ_MODEL
#error "FUZZ_MODEL: a model directory with config.json and tokenizer.json"
#endif

#define N_IDS 8             /* request ids 1..8: resubmissions and cancels meet */
#define MAX_CTX 256
#define MAX_CMDS 256
#define DRAIN_ROUNDS 4000

static struct sched s;
static struct dsv4_stats_shm stats;
static void *cpeer;                 /* the compute side: ROUTER */
static void *cl[2];                 /* "gen", "api" */
static const char *const cl_name[3] = { "gen", "api", "gone" };
static int vocab;
static struct dsv4_zin zin;
static struct dsv4_wire_buf wb;

/* Commands the scheduler sent to compute, oldest first (frames copied, 8-byte aligned). */
static struct cmd {
    uint64_t *p;
    size_t len;
} cmds[MAX_CMDS];
static int n_cmds;

/* Requests of the live clients: who submitted id i last, and whether it ended for them. */
static int owner[N_IDS + 1];       /* -1: none or a gone client */
static bool open_req[N_IDS + 1];

static void die(const char *what)
{
    fprintf(stderr, "fuzz-scheduler: %s\n", what);
    abort();
}

/* a receive that failed: what, and dsv4_zrecv's error */
static void die_recv(const char *what, int r)
{
    fprintf(stderr, "fuzz-scheduler: %s: %s\n", what, strerror(-r));
    abort();
}

static void setup(void)
{
    struct dsv4_err err = { "" };
    const char *model = getenv("DSV4_FUZZ_MODEL") ? getenv("DSV4_FUZZ_MODEL") : FUZZ_MODEL;
    dsv4_log_set_level(DSV4_LOG_ERROR);
    struct dsv4_config cfg;
    if (dsv4_config_load(model, &cfg, &err) < 0 || dsv4_tokenizer_open_dir(model, &s.tok, &err) < 0) {
        fprintf(stderr, "fuzz-scheduler: %s\n", err.msg);
        abort();
    }
    vocab = s.vocab = cfg.vocab_size;
    s.eos = cfg.eos_token_id;
    s.dspark_block = cfg.dspark_block_size;
    s.max_ctx = MAX_CTX;
    s.max_active = 3;
    s.queue_cap = 2;
    s.n_reqs = s.max_active + s.queue_cap;
    s.prefill_rows = 24;        /* a prompt of up to 256 in several chunks */
    s.step_tokens = 16;
    s.reqs = dsv4_xcalloc((size_t)s.n_reqs, sizeof(*s.reqs));
    s.fwd = dsv4_xcalloc((size_t)s.max_active, sizeof(*s.fwd));
    s.fw = dsv4_xcalloc((size_t)s.n_reqs, sizeof(*s.fw));
    s.catching = dsv4_xcalloc((size_t)s.n_reqs, sizeof(*s.catching));
    s.d.role = DSV4_ROLE_SCHEDULER;
    s.d.stats = &stats;
    s.d.zctx = dsv4_zctx_new();
    s.next_session = 1ull << 32;
    cpeer = dsv4_zsock(s.d.zctx, ZMQ_ROUTER, NULL);
    s.clients = dsv4_zsock(s.d.zctx, ZMQ_ROUTER, NULL);
    if (zmq_bind(cpeer, "inproc://fz-compute") < 0 || zmq_bind(s.clients, "inproc://fz-sched") < 0)
        die("bind");
    s.compute = dsv4_zsock(s.d.zctx, ZMQ_DEALER, NULL);
    if (zmq_connect(s.compute, "inproc://fz-compute") < 0)
        die("connect compute");
    for (int i = 0; i < 2; i++) {
        cl[i] = dsv4_zsock(s.d.zctx, ZMQ_DEALER, cl_name[i]);
        if (zmq_connect(cl[i], "inproc://fz-sched") < 0)
            die("connect client");
        /* one frame each, so the ROUTER knows the routing id before it answers to it */
        if (zmq_send(cl[i], "hi", 2, 0) != 2 || dsv4_zrecv(s.clients, &zin, 1, 0) < 0)
            die("client hello");
    }
}

/* Receive what the scheduler sent to the clients: each frame must decode; DONE or ERROR
 * ends the request of its id for that client. */
static void drain_clients(void)
{
    for (int c = 0; c < 2; c++) {
        int r;
        while ((r = dsv4_zrecv(cl[c], &zin, 0, 1)) != -EAGAIN) {
            if (r < 0)
                die_recv("client receive", r);
            struct dsv4_msg m;
            struct dsv4_err err;
            int errc;
            if (dsv4_wire_decode(zin.buf, zin.len, &m, &errc, &err) < 0) {
                fprintf(stderr, "fuzz-scheduler: the scheduler sent %s a bad frame: %s\n",
                        cl_name[c], err.msg);
                abort();
            }
            uint64_t id = m.type == DSV4_MSG_DONE    ? ((const struct dsv4_msg_done *)m.body)->req_id
                          : m.type == DSV4_MSG_ERROR ? ((const struct dsv4_msg_error *)m.body)->id
                                                     : 0;
            if (id >= 1 && id <= N_IDS && owner[id] == c)
                open_req[id] = false;
        }
    }
}

/* Compute's commands that want an answer (seq != 0); the fire-and-forget ones are dropped. */
static void collect_cmds(void)
{
    int r;
    while ((r = dsv4_zrecv(cpeer, &zin, 1, 1)) != -EAGAIN) {
        if (r < 0)
            die_recv("compute receive", r);
        struct dsv4_msg m;
        struct dsv4_err err;
        int errc;
        if (dsv4_wire_decode(zin.buf, zin.len, &m, &errc, &err) < 0) {
            fprintf(stderr, "fuzz-scheduler: the scheduler sent compute a bad frame: %s\n",
                    err.msg);
            abort();
        }
        if (*(const uint64_t *)m.body == 0)     /* every command's body starts with seq */
            continue;
        if (n_cmds == MAX_CMDS)
            die("more commands outstanding than requests");
        cmds[n_cmds].p = dsv4_xmalloc(zin.len + 8);
        memcpy(cmds[n_cmds].p, zin.buf, zin.len);
        cmds[n_cmds++].len = zin.len;
    }
}

static void check_inflight(void)
{
    int waiting = 0;
    for (int i = 0; i < s.n_reqs; i++)
        waiting += s.reqs[i].state != R_FREE && s.reqs[i].seq != 0;
    if (waiting != s.n_inflight) {
        fprintf(stderr, "fuzz-scheduler: n_inflight %d, requests waiting on compute %d\n",
                s.n_inflight, waiting);
        abort();
    }
}

static void after(void)
{
    schedule(&s);
    check_inflight();
    collect_cmds();
    drain_clients();
}

static void to_sched(const void *p, size_t n)
{
    if (n + 8 > s.in.cap) {
        free(s.in.buf);
        s.in.cap = n + 8;
        s.in.buf = dsv4_xmalloc(s.in.cap);
    }
    memcpy(s.in.buf, p, n);
    s.in.len = n;
}

static void from_client(int c, const void *p, size_t n)
{
    to_sched(p, n);
    s.in.rid_len = strlen(cl_name[c]);
    memcpy(s.in.rid, cl_name[c], s.in.rid_len);
    sched_on_client(&s);
}

static void from_compute(const void *p, size_t n)
{
    to_sched(p, n);
    s.in.rid_len = 0;
    sched_on_compute(&s);
}

/* A request of id `id` from client c: who must hear its end (a gone client hears nothing). */
static void submitted(uint64_t id, int c)
{
    if (id < 1 || id > N_IDS)
        return;
    owner[id] = c < 2 ? c : -1;
    open_req[id] = c < 2;
}

/* Operand bytes: zero past the end of the input. */
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

static const char *const stops[] = { "", "e", "the", ". ", "zz\xff", "a\0b" };

static void op_generate(struct rd *rd)
{
    uint64_t id = 1 + u8(rd) % N_IDS;
    int c = (int)(u8(rd) % 3);
    uint32_t n_prompt = 1 + u8(rd);
    unsigned b = u8(rd);
    int32_t max_tokens = 1 + (int32_t)(u8(rd) % 48);
    if (b & 0x80)
        max_tokens += 200;   /* near or past the context: refused as too large */
    uint32_t n_done = (b & 0x40) ? u8(rd) % (uint32_t)(max_tokens + 1) : 0;
    unsigned samp = u8(rd);
    float temps[4] = { 0.0f, 0.7f, 1.0f, 2.5f };
    float tops[4] = { 1.0f, 0.9f, 0.3f, 1e-6f };
    struct dsv4_msg_generate g = {
        .req_id = id, .seed = u8(rd), .temperature = temps[samp & 3], .top_p = tops[samp >> 2 & 3],
        .top_k = (int32_t)(samp >> 4 & 3) * 3, .max_tokens = max_tokens, .n_prompt = n_prompt,
        .n_done = n_done,
    };
    unsigned f = u8(rd);
    if (f & 1)
        g.flags |= DSV4_GEN_NO_DSPARK;
    if (f & 2)
        g.flags |= DSV4_GEN_LOGPROBS | ((f >> 2) % (DSV4_WIRE_MAX_LOGPROBS + 1)) << DSV4_GEN_TOP_SHIFT;
    unsigned st = u8(rd);
    unsigned tok_seed = u8(rd) | u8(rd) << 8;
    dsv4_wire_begin(&wb, DSV4_MSG_GENERATE);
    size_t at = wb.len;
    dsv4_wire_put(&wb, &g, sizeof(g));
    for (uint32_t i = 0; i < n_prompt + n_done; i++) {   /* ids of the vocabulary, some EOS */
        int32_t t = (int32_t)((tok_seed * 2654435761u + i * 40503u) % (uint32_t)vocab);
        dsv4_wire_put(&wb, &t, 4);
    }
    uint32_t nsb = 0;
    for (int k = 0; k < 2; k++) {
        const char *q = stops[(st >> (3 * k)) % 6];
        if (!*q || (st & 0x40 && k))
            continue;
        dsv4_wire_put(&wb, q, strlen(q) + 1);
        nsb += (uint32_t)strlen(q) + 1;
    }
    ((struct dsv4_msg_generate *)(wb.p + at))->n_stop_bytes = nsb;
    dsv4_wire_finish(&wb);
    submitted(id, c);
    from_client(c, wb.p, wb.len);
}

static void op_score(struct rd *rd)
{
    uint64_t id = 1 + u8(rd) % N_IDS;
    int c = (int)(u8(rd) % 3);
    struct dsv4_msg_score sc = { id, 1 + u8(rd), 0 };
    dsv4_wire_begin(&wb, DSV4_MSG_SCORE);
    dsv4_wire_put(&wb, &sc, sizeof(sc));
    for (uint32_t i = 0; i < sc.n_tokens; i++) {
        int32_t t = (int32_t)((i * 7919u + (uint32_t)id) % (uint32_t)vocab);
        dsv4_wire_put(&wb, &t, 4);
    }
    dsv4_wire_finish(&wb);
    submitted(id, c);
    from_client(c, wb.p, wb.len);
}

/*
 * Answer command k (then forget it). mode 0: what compute would answer, every greedy row EOS
 * and the logits peaked at EOS (so requests end); argmax is the argmax to report, -2 for EOS.
 * Other modes perturb the answer as a broken or hostile compute would.
 */
static void answer(int k, unsigned mode, unsigned arg)
{
    struct dsv4_msg m;
    struct dsv4_err err;
    int errc;
    if (dsv4_wire_decode(cmds[k].p, cmds[k].len, &m, &errc, &err) < 0)
        die("stored command no longer decodes");
    uint64_t seq = *(const uint64_t *)m.body;
    uint64_t session = ((const uint64_t *)m.body)[1];
    int64_t pos = 0;
    int32_t amax = s.eos;
    switch (mode % 12) {
    case 1: {   /* ERROR: NOSESSION (the session is gone) or another code */
        int codes[4] = { DSV4_WE_NOSESSION, DSV4_WE_RANGE, DSV4_WE_INTERNAL, DSV4_WE_INVALID };
        dsv4_wire_error(&wb, seq, codes[arg % 4], "fuzz");
        goto send;
    }
    case 2:     /* ACK whatever was asked */
        if (m.type == DSV4_MSG_FORWARD || m.type == DSV4_MSG_DRAFT) {
            struct dsv4_msg_ack a = { seq, session, (int64_t)(int8_t)arg };
            dsv4_wire_simple(&wb, DSV4_MSG_ACK, &a, sizeof(a));
            goto send;
        }
        break;
    case 3:     /* argmax from the input: -1 (not computed), anything in or past the vocab */
        amax = (int32_t)(arg * 37u % (unsigned)(vocab + 64)) - 1;
        break;
    case 8:     /* an answer for another seq (stale or foreign); k is still answered later */
        seq += 1 + arg % 3;
        break;
    default:
        break;
    }
    if (m.type == DSV4_MSG_SESSION_OPEN) {
        struct dsv4_msg_ack a = { seq, session, 0 };
        dsv4_wire_simple(&wb, DSV4_MSG_ACK, &a, sizeof(a));
    } else if (m.type == DSV4_MSG_PREFIX_RESTORE) {
        const struct dsv4_msg_prefix_restore *pr = m.body;
        if (mode % 12 == 4 || mode % 12 == 5)   /* a restored prefix, maybe past the sequence */
            pos = (int64_t)(arg % (pr->n_tokens + 3)) - (mode % 12 == 5 ? 2 : 0);
        struct dsv4_msg_ack a = { seq, session, pos };
        dsv4_wire_simple(&wb, DSV4_MSG_ACK, &a, sizeof(a));
    } else if (m.type == DSV4_MSG_DRAFT) {
        const struct dsv4_msg_draft *d = m.body;
        uint32_t n = mode % 12 == 6 ? 1 + arg % DSV4_WIRE_MAX_DRAFT : (uint32_t)s.dspark_block;
        struct dsv4_msg_draft_result dr = { seq, session, d->pos, n, 0 };
        dsv4_wire_begin(&wb, DSV4_MSG_DRAFT_RESULT);
        dsv4_wire_put(&wb, &dr, sizeof(dr));
        for (uint32_t i = 0; i < n; i++) {
            int32_t t = i == 0 && mode % 12 != 6 ? s.eos : (int32_t)((arg + i) % (unsigned)vocab);
            dsv4_wire_put(&wb, &t, 4);
        }
        for (uint32_t i = 0; i < n; i++) {
            float c = (float)((arg >> (i % 8)) & 1);
            dsv4_wire_put(&wb, &c, 4);
        }
        dsv4_wire_finish(&wb);
    } else if (m.type == DSV4_MSG_FORWARD) {
        const struct dsv4_msg_forward *f = m.body;
        const struct dsv4_wire_fwd_in *in = m.tail;
        uint32_t n = f->flags & DSV4_FWD_ALL_ROWS ? f->n_rows : 1;
        uint32_t n_logits = f->flags & DSV4_FWD_LOGITS ? (uint32_t)vocab : 0;
        pos = in[0].pos + f->n_rows;
        if (mode % 12 == 7)     /* a position other than the one the rows lead to */
            pos += (int64_t)(int8_t)arg;
        if (mode % 12 == 9)     /* fewer rows */
            n = 1 + arg % n;
        if (mode % 12 == 10)    /* no logits, or fewer than the vocabulary */
            n_logits = arg & 1 ? 0 : arg % (unsigned)vocab;
        struct dsv4_msg_forward_result fr = { seq, session, pos, n, 0, n_logits, 0 };
        dsv4_wire_begin(&wb, DSV4_MSG_FORWARD_RESULT);
        dsv4_wire_put(&wb, &fr, sizeof(fr));
        for (uint32_t i = 0; i < n; i++) {
            struct dsv4_wire_row row = { amax, 0, 0.0 };
            if (in[i].target >= 0)
                row = (struct dsv4_wire_row){ amax, 1, -1.5 };
            dsv4_wire_put(&wb, &row, sizeof(row));
        }
        for (uint32_t i = 0; i < n_logits; i++) {
            float l = (int32_t)i == s.eos ? 60.0f : (float)(i % 7) * 0.25f;
            dsv4_wire_put(&wb, &l, 4);
        }
        dsv4_wire_finish(&wb);
    } else {
        die("a command that wants no answer was kept");
    }
send:
    if (mode % 12 != 8) {
        free(cmds[k].p);
        memmove(&cmds[k], &cmds[k + 1], (size_t)(n_cmds - k - 1) * sizeof(cmds[0]));
        n_cmds--;
    }
    from_compute(wb.p, wb.len);
    if (mode % 12 == 11) {  /* the same answer twice */
        from_compute(wb.p, wb.len);
    }
}

static void forget_cmds(void)
{
    for (int i = 0; i < n_cmds; i++)
        free(cmds[i].p);
    n_cmds = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!s.reqs)
        setup();
    for (int i = 0; i <= N_IDS; i++) {
        owner[i] = -1;
        open_req[i] = false;
    }
    struct rd rd = { data, size, 0 };
    int ops = 0;
    while (rd.at < rd.n && ops++ < 4096) {
        unsigned op = u8(&rd);
        switch (op % 8) {
        case 0: {
            int c = (int)(u8(&rd) % 3);
            size_t n = u16(&rd);
            if (n > rd.n - rd.at)
                n = rd.n - rd.at;
            to_sched(rd.p + rd.at, n);  /* a request it carries is tracked like the others */
            struct dsv4_msg m;
            struct dsv4_err err;
            int errc;
            if (dsv4_wire_decode(s.in.buf, n, &m, &errc, &err) == 0 &&
                (m.type == DSV4_MSG_GENERATE || m.type == DSV4_MSG_SCORE))
                submitted(*(const uint64_t *)m.body, c);
            from_client(c, rd.p + rd.at, n);
            rd.at += n;
            break;
        }
        case 1: op_generate(&rd); break;
        case 2: {
            struct dsv4_msg_cancel cm = { 1 + u8(&rd) % N_IDS };
            dsv4_wire_simple(&wb, DSV4_MSG_CANCEL, &cm, sizeof(cm));
            from_client((int)(u8(&rd) % 3), wb.p, wb.len);
            break;
        }
        case 3: op_score(&rd); break;
        case 4: {
            size_t n = u16(&rd);
            if (n > rd.n - rd.at)
                n = rd.n - rd.at;
            from_compute(rd.p + rd.at, n);
            rd.at += n;
            break;
        }
        case 5:
            if (n_cmds) {
                unsigned mode = u8(&rd);
                answer(0, op >> 3 & 1 ? mode : 0, u8(&rd));
            }
            break;
        case 6: {
            int role = u8(&rd) & 1 ? DSV4_ROLE_COMPUTE : DSV4_ROLE_FETCHER;
            if (role == DSV4_ROLE_COMPUTE)
                forget_cmds();  /* the old compute's answers never come */
            sched_on_peer(&s, role);
            break;
        }
        case 7:
            while (n_cmds)
                answer(0, 0, 0);
            break;
        }
        after();
    }
    /* compute answers everything until no request is left */
    int rounds = 0;
    for (;; rounds++) {
        bool any = false;
        for (int i = 0; i < s.n_reqs; i++)
            any |= s.reqs[i].state != R_FREE;
        if (!any)
            break;
        if (rounds == DRAIN_ROUNDS) {
            for (int i = 0; i < s.n_reqs; i++)
                if (s.reqs[i].state != R_FREE)
                    fprintf(stderr, "req %llu state %d seq %llu cpos %lld n_tok %u n_gen %u "
                            "max %u opened %d cancel %d\n", (unsigned long long)s.reqs[i].id,
                            s.reqs[i].state, (unsigned long long)s.reqs[i].seq,
                            (long long)s.reqs[i].cpos, s.reqs[i].n_tok, s.reqs[i].n_gen,
                            s.reqs[i].max_tokens, s.reqs[i].opened, s.reqs[i].cancel);
            die("requests left after the drain: wedged");
        }
        while (n_cmds)
            answer(0, 0, 0);
        after();
    }
    forget_cmds();
    drain_clients();
    for (int i = 1; i <= N_IDS; i++)
        if (open_req[i]) {
            fprintf(stderr, "fuzz-scheduler: request %d of %s never ended\n", i,
                    cl_name[owner[i]]);
            abort();
        }
    if (getenv("DSV4_FUZZ_VERBOSE"))
        fprintf(stderr, "ops %d, drain rounds %d; ok %llu cancelled %llu errors %llu tokens %llu\n",
                ops, rounds, (unsigned long long)atomic_load(&stats.req_ok),
                (unsigned long long)atomic_load(&stats.req_cancelled),
                (unsigned long long)atomic_load(&stats.req_error),
                (unsigned long long)atomic_load(&stats.generated_tokens));
    return 0;
}
