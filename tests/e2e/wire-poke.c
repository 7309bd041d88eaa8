/* SPDX-License-Identifier: MIT */
/*
 * wire-poke RUN_DIR SEED: sends hostile traffic to every socket of a running
 * daemon set — empty, short, bad magic, wrong ABI major, body size lies,
 * unknown types, truncated bodies, absurd counts, extra frames, random
 * bytes, valid headers over random bodies, one oversized frame — and
 * checks that the scheduler and compute sockets answer the ones they can
 * attribute with ERROR and the right code (ABI for the wrong version,
 * PROTO for the malformed). Exits 0 when every expected answer came; the
 * caller (test_daemons.py malformed) then checks the daemons still serve.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "dsv4_wire.h"
#include "rundir.h"
#include "zmsg.h"

static int failures;

static void send_raw(void *s, const void *p, size_t n)
{
    zmq_send(s, p, n, 0);
}

/* Wait for one reply; returns its ERROR code, 0 for another type, -1 for none. */
static int reply_code(void *s, int timeout_ms)
{
    zmq_pollitem_t it = { s, 0, ZMQ_POLLIN, 0 };
    if (zmq_poll(&it, 1, timeout_ms) <= 0)
        return -1;
    struct dsv4_zin in = { 0 };
    struct dsv4_msg m;
    struct dsv4_err err;
    int errc, code = 0;
    if (dsv4_zrecv(s, &in, 0, 1) == 0 && dsv4_wire_decode(in.buf, in.len, &m, &errc, &err) == 0 &&
        m.type == DSV4_MSG_ERROR)
        code = ((const struct dsv4_msg_error *)m.body)->code;
    dsv4_zin_free(&in);
    return code;
}

static void expect(void *s, const char *what, const char *sock, int want)
{
    int got = reply_code(s, 3000);
    printf("%s %s: %s%d\n", sock, what, got == want ? "ERROR " : "UNEXPECTED ", got);
    if (got != want)
        failures++;
}

static void hdr(unsigned char *p, uint32_t magic, int major, int type, uint32_t body)
{
    struct dsv4_msg_hdr h = { magic, (uint16_t)major, 0, (uint16_t)type, 0, body };
    memcpy(p, &h, sizeof(h));
}

static void poke(void *s, const char *name, bool answers, unsigned *seed)
{
    unsigned char buf[4096];
    /* attributable garbage: expect an ERROR from the request sockets */
    hdr(buf, DSV4_WIRE_MAGIC, DSV4_WIRE_ABI_MAJOR + 1, DSV4_MSG_GENERATE, 0);
    send_raw(s, buf, 16);
    if (answers)
        expect(s, "wrong abi major", name, DSV4_WE_ABI);
    hdr(buf, DSV4_WIRE_MAGIC, DSV4_WIRE_ABI_MAJOR, DSV4_MSG_GENERATE, 8);
    memset(buf + 16, 0, 8);
    send_raw(s, buf, 24);
    if (answers)
        expect(s, "truncated GENERATE", name, DSV4_WE_PROTO);
    struct dsv4_msg_generate g = { 1, 0, 0, 1, 0, 16, 1u << 30, 0, 0, 0 };
    hdr(buf, DSV4_WIRE_MAGIC, DSV4_WIRE_ABI_MAJOR, DSV4_MSG_GENERATE, sizeof(g) + 4);
    memcpy(buf + 16, &g, sizeof(g));
    memset(buf + 16 + sizeof(g), 0, 4);
    send_raw(s, buf, 16 + sizeof(g) + 4);
    if (answers)
        expect(s, "GENERATE n_prompt 2^30 in 4 bytes", name, DSV4_WE_PROTO);
    struct dsv4_msg_forward f = { 1, 1, 1u << 24, 0, 0, 0 };
    hdr(buf, DSV4_WIRE_MAGIC, DSV4_WIRE_ABI_MAJOR, DSV4_MSG_FORWARD, sizeof(f));
    memcpy(buf + 16, &f, sizeof(f));
    send_raw(s, buf, 16 + sizeof(f));
    if (answers)
        expect(s, "FORWARD 2^24 rows in 0 bytes", name, DSV4_WE_PROTO);
    hdr(buf, DSV4_WIRE_MAGIC, DSV4_WIRE_ABI_MAJOR, 999, 0);
    send_raw(s, buf, 16);
    if (answers)
        expect(s, "unknown type", name, DSV4_WE_PROTO);
    hdr(buf, DSV4_WIRE_MAGIC, DSV4_WIRE_ABI_MAJOR, DSV4_MSG_CANCEL, 100);
    send_raw(s, buf, 24);
    if (answers)
        expect(s, "body_size lie", name, DSV4_WE_PROTO);
    /* fire and forget: no reply needed, none must hurt */
    send_raw(s, "", 0);
    send_raw(s, "abc", 3);
    hdr(buf, 0xdeadbeef, DSV4_WIRE_ABI_MAJOR, DSV4_MSG_CANCEL, 8);
    send_raw(s, buf, 24);
    zmq_send(s, "x", 1, ZMQ_SNDMORE);
    zmq_send(s, "y", 1, ZMQ_SNDMORE);
    zmq_send(s, "z", 1, 0);
    for (int i = 0; i < 300; i++) {
        size_t n = (size_t)(rand_r(seed) % 300);
        for (size_t j = 0; j < n; j++)
            buf[j] = (unsigned char)rand_r(seed);
        if (i % 2 && n >= 16) {     /* a valid header over a random body of a random known type */
            static const int types[] = { 1, 2, 3, 4, 5, 16, 17, 18, 19, 20, 21, 32, 33, 34, 35, 36, 37, 38 };
            hdr(buf, DSV4_WIRE_MAGIC, DSV4_WIRE_ABI_MAJOR, types[rand_r(seed) % 18], (uint32_t)(n - 16));
        }
        send_raw(s, buf, n);
    }
    while (reply_code(s, 300) != -1)
        ;   /* drain the answers to the random ones */
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: wire-poke RUN_DIR SEED\n");
        return 64;
    }
    unsigned seed = (unsigned)atoi(argv[2]);
    void *ctx = dsv4_zctx_new();
    const char *socks[] = { "sched", "compute", "ctl" };
    char ep[DSV4_PATH_MAX];
    for (int i = 0; i < 3; i++) {
        if (dsv4_rundir_endpoint(argv[1], socks[i], ep, NULL) < 0)
            return 64;
        void *s = dsv4_zsock(ctx, ZMQ_DEALER, i == 2 ? "intruder" : NULL);
        zmq_connect(s, ep);
        poke(s, socks[i], i < 2, &seed);
        zmq_close(s);
        /* an oversized frame: libzmq drops the connection (ZMQ_MAXMSGSIZE) before we see it */
        s = dsv4_zsock(ctx, ZMQ_DEALER, NULL);
        zmq_connect(s, ep);
        size_t big = (size_t)DSV4_WIRE_MAX_BODY + 1024;
        unsigned char *p = calloc(1, big);
        hdr(p, DSV4_WIRE_MAGIC, DSV4_WIRE_ABI_MAJOR, DSV4_MSG_GENERATE, (uint32_t)(big - 16));
        zmq_send(s, p, big, 0);
        free(p);
        zmq_close(s);
        printf("%s: oversized frame sent\n", socks[i]);
    }
    zmq_ctx_term(ctx);
    printf("%d unexpected answers\n", failures);
    return failures ? 1 : 0;
}
