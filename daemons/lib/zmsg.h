/* SPDX-License-Identifier: MIT */
/*
 * ZeroMQ plumbing shared by the daemons and dsv4ctl: sockets with the
 * project's options (linger 0, bounded queues, a frame-size cap so an
 * oversized message is dropped by libzmq before we see it), sending a wire
 * buffer with an optional routing id, receiving one message into an
 * 8-byte-aligned buffer ready for dsv4_wire_decode().
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "dsv4_wire.h"

void *dsv4_zctx_new(void);
/* type ZMQ_ROUTER/ZMQ_DEALER; rid: routing id to present (DEALER), or NULL. */
void *dsv4_zsock(void *ctx, int type, const char *rid);

struct dsv4_zin {
    unsigned char rid[256];
    size_t rid_len;             /* 0 on a DEALER */
    uint64_t *buf;              /* aligned copy of the message frame */
    size_t len, cap;
};

/* Receive one message (ZMQ_DONTWAIT if nonblock): 0, -EAGAIN, or -EBADMSG (frames dropped).
 * A receive that a signal interrupts is retried; non-blocking, any other receive error is
 * -EAGAIN (nothing more now), blocking, it is -errno. */
int dsv4_zrecv(void *sock, struct dsv4_zin *in, int router, int nonblock);
void dsv4_zin_free(struct dsv4_zin *in);
/* Send (routing id first when rid_len > 0); 0 or -errno (-EAGAIN, -EHOSTUNREACH). */
int dsv4_zsend(void *sock, const void *rid, size_t rid_len, const struct dsv4_wire_buf *b,
               int nonblock);
