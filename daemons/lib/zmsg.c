/* SPDX-License-Identifier: MIT */
/* ZeroMQ helpers (zmsg.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "util.h"
#include "zmsg.h"

void *dsv4_zctx_new(void)
{
    void *ctx = zmq_ctx_new();
    if (!ctx)
        dsv4_die("zmq_ctx_new: %s", zmq_strerror(errno));
    zmq_ctx_set(ctx, ZMQ_BLOCKY, 0);
    zmq_ctx_set(ctx, ZMQ_IO_THREADS, 1);
    return ctx;
}

void *dsv4_zsock(void *ctx, int type, const char *rid)
{
    void *s = zmq_socket(ctx, type);
    if (!s)
        dsv4_die("zmq_socket: %s", zmq_strerror(errno));
    int zero = 0, one = 1, hwm = 10000;
    int64_t maxmsg = (int64_t)DSV4_WIRE_MAX_BODY + sizeof(struct dsv4_msg_hdr);
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof(hwm));
    zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof(hwm));
    zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
    if (type == ZMQ_ROUTER) {
        zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof(one));
        zmq_setsockopt(s, ZMQ_ROUTER_HANDOVER, &one, sizeof(one));
    }
    if (type == ZMQ_DEALER) {
        int ivl = 100;
        zmq_setsockopt(s, ZMQ_IMMEDIATE, &one, sizeof(one));
        zmq_setsockopt(s, ZMQ_RECONNECT_IVL, &ivl, sizeof(ivl));
    }
    if (rid)
        zmq_setsockopt(s, ZMQ_ROUTING_ID, rid, strlen(rid));
    return s;
}

static void drain(void *sock)
{
    int more = 1;
    size_t sz = sizeof(more);
    while (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz) == 0 && more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        zmq_msg_recv(&m, sock, 0);
        zmq_msg_close(&m);
    }
}

/* zmq_msg_recv, again when a signal interrupted it: even a non-blocking receive returns
 * EINTR under a signal with a handler (a timer, a profiler), most of the time under a storm
 * of them; the fuzz targets' harnesses died of it */
static int recv_frame(zmq_msg_t *m, void *sock, int flags)
{
    int r;
    while ((r = zmq_msg_recv(m, sock, flags)) < 0 && errno == EINTR)
        ;
    return r;
}

int dsv4_zrecv(void *sock, struct dsv4_zin *in, int router, int nonblock)
{
    zmq_msg_t m;
    int more;
    size_t sz = sizeof(more);
    in->rid_len = 0;
    in->len = 0;
    zmq_msg_init(&m);
    if (recv_frame(&m, sock, nonblock ? ZMQ_DONTWAIT : 0) < 0) {
        int e = errno;
        zmq_msg_close(&m);
        /* non-blocking: nothing more now, whatever the error (ETERM, ENOTSOCK), so the
         * callers' drain loops `while (dsv4_zrecv(...) != -EAGAIN)` end; a socket that
         * stays broken fails their zmq_poll next */
        return nonblock ? -EAGAIN : -e;
    }
    if (router) {
        if (zmq_msg_size(&m) > sizeof(in->rid)) {
            zmq_msg_close(&m);
            drain(sock);
            return -EBADMSG;
        }
        in->rid_len = zmq_msg_size(&m);
        memcpy(in->rid, zmq_msg_data(&m), in->rid_len);
        zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz);
        zmq_msg_close(&m);
        if (!more)
            return -EBADMSG;
        zmq_msg_init(&m);
        if (recv_frame(&m, sock, 0) < 0) {
            zmq_msg_close(&m);
            return -EBADMSG;
        }
    }
    size_t n = zmq_msg_size(&m);
    if (n + 8 > in->cap * 8) {
        free(in->buf);
        in->cap = (n + 8 + 7) / 8;
        in->buf = dsv4_xmalloc(in->cap * 8);
    }
    memcpy(in->buf, zmq_msg_data(&m), n);
    in->len = n;
    zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz);
    zmq_msg_close(&m);
    if (more) {
        drain(sock);
        return -EBADMSG;
    }
    return 0;
}

void dsv4_zin_free(struct dsv4_zin *in)
{
    free(in->buf);
    in->buf = NULL;
    in->cap = 0;
}

int dsv4_zsend(void *sock, const void *rid, size_t rid_len, const struct dsv4_wire_buf *b,
               int nonblock)
{
    int fl = nonblock ? ZMQ_DONTWAIT : 0;
    if (rid_len && zmq_send(sock, rid, rid_len, fl | ZMQ_SNDMORE) < 0)
        return -errno;
    if (zmq_send(sock, b->p, b->len, fl) < 0)
        return -errno;
    return 0;
}
