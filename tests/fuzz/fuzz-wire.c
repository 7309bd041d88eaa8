/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the wire decoder (proto/wire.c): every input is one
 * message frame as a socket would deliver it. An accepted message must be
 * self-consistent — known type, body_size equal to the frame, every array
 * its counts announce inside the frame (read here byte by byte, so a
 * sanitizer sees any overrun) — and re-encode to the same bytes. A rejected
 * one must come with a reason and an ERROR code. A violation aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4_wire.h"
#include "util.h"

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "invariant failed: %s\n", #x); abort(); } } while (0)

static volatile uint32_t sink;

static void touch(const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        sink += c[i];
}

static size_t arrays_bytes(const struct dsv4_msg *m)
{
    switch (m->type) {
    case DSV4_MSG_ERROR: return ((const struct dsv4_msg_error *)m->body)->text_len;
    case DSV4_MSG_GENERATE: {
        const struct dsv4_msg_generate *g = m->body;
        return 4 * ((size_t)g->n_prompt + g->n_done) + g->n_stop_bytes;
    }
    case DSV4_MSG_SCORE: return 4 * (size_t)((const struct dsv4_msg_score *)m->body)->n_tokens;
    case DSV4_MSG_TOKEN: return 4 * (size_t)((const struct dsv4_msg_token *)m->body)->n;
    case DSV4_MSG_SCORE_ROWS:
        return sizeof(struct dsv4_wire_row) * (size_t)((const struct dsv4_msg_score_rows *)m->body)->n;
    case DSV4_MSG_FORWARD:
        return sizeof(struct dsv4_wire_fwd_in) * (size_t)((const struct dsv4_msg_forward *)m->body)->n_rows;
    case DSV4_MSG_FORWARD_RESULT: {
        const struct dsv4_msg_forward_result *r = m->body;
        return r->n_rows * sizeof(struct dsv4_wire_row) +
               (size_t)r->n_rows * r->top_k * sizeof(struct dsv4_wire_topk) +
               4 * ((size_t)r->n_logits + r->n_taps);
    }
    default: return 0;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t *buf = dsv4_xmalloc((size / 8 + 1) * 8);    /* aligned like a received frame */
    memcpy(buf, data, size);
    struct dsv4_msg m;
    struct dsv4_err err = { "" };
    int errc = 0;
    int r = dsv4_wire_decode(buf, size, &m, &errc, &err);
    if (r < 0) {
        CHECK(err.msg[0] && (errc == DSV4_WE_PROTO || errc == DSV4_WE_ABI));
    } else {
        CHECK(strcmp(dsv4_wire_type_name(m.type), "unknown") != 0);
        CHECK(m.body_size + sizeof(struct dsv4_msg_hdr) == size);
        size_t prefix = (size_t)((const char *)m.tail - (const char *)m.body);
        size_t arrays = arrays_bytes(&m);
        CHECK(prefix + arrays <= m.body_size);
        touch(m.body, prefix + arrays);
        struct dsv4_wire_buf b = { 0 };
        dsv4_wire_simple(&b, m.type, m.body, m.body_size);
        CHECK(b.len == size);
        CHECK(memcmp(b.p + 8, data + 8, size - 8) == 0);    /* all but magic/abi words */
        dsv4_wire_buf_free(&b);
    }
    free(buf);
    return 0;
}
