/* SPDX-License-Identifier: MIT */
/*
 * Decoding and building of wire messages (proto/dsv4_wire.h). The decoder is
 * the only gate between a socket and a daemon's state: it checks the header,
 * the type, the body size against the type's prefix and every count and
 * value against its limits, so handlers can trust what they read.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4_wire.h"
#include "util.h"

const char *dsv4_role_name(int role)
{
    static const char *const names[] = { "fetcher", "compute", "scheduler", "api" };
    return role >= 0 && role < DSV4_ROLE_COUNT ? names[role] : "?";
}

const char *dsv4_wire_type_name(int type)
{
    switch (type) {
#define X(name, num, body) case num: return #name;
        DSV4_MSG_LIST(X)
#undef X
    }
    return "unknown";
}

/* Bytes after the prefix must hold exactly `need` bytes of arrays (minor-version tails excepted). */
static int tail_fits(const struct dsv4_msg *m, size_t prefix, uint64_t need, struct dsv4_err *err)
{
    uint64_t have = m->body_size - prefix;
    if (need > have)
        return dsv4_errf(err, -EBADMSG, "%s: arrays need %llu bytes, frame has %llu",
                            dsv4_wire_type_name(m->type), (unsigned long long)need,
                            (unsigned long long)have);
    if (m->abi_minor <= DSV4_WIRE_ABI_MINOR && need != have)
        return dsv4_errf(err, -EBADMSG, "%s: %llu trailing bytes",
                            dsv4_wire_type_name(m->type), (unsigned long long)(have - need));
    return 0;
}

#define BAD(...) dsv4_errf(err, -EBADMSG, __VA_ARGS__)

static int check_tokens(const void *p, uint64_t n, int what_errc, struct dsv4_err *err)
{
    const unsigned char *c = p;
    for (uint64_t i = 0; i < n; i++) {
        int32_t t;
        memcpy(&t, c + 4 * i, 4);
        if (t < 0)
            return BAD("token %llu is negative (%d)", (unsigned long long)i, (int)t);
    }
    (void)what_errc;
    return 0;
}

static int v_dsv4_msg_error(const struct dsv4_msg *m, struct dsv4_err *err)
{
    const struct dsv4_msg_error *b = m->body;
    if (b->text_len > DSV4_WIRE_MAX_TEXT)
        return BAD("ERROR: text_len %u > %u", b->text_len, DSV4_WIRE_MAX_TEXT);
    return tail_fits(m, sizeof(*b), b->text_len, err);
}

static int v_dsv4_msg_ready(const struct dsv4_msg *m, struct dsv4_err *err)
{
    const struct dsv4_msg_ready *b = m->body;
    if (b->role >= DSV4_ROLE_COUNT)
        return BAD("%s: role %u", dsv4_wire_type_name(m->type), b->role);
    return tail_fits(m, sizeof(*b), 0, err);
}

static int v_dsv4_msg_heartbeat(const struct dsv4_msg *m, struct dsv4_err *err)
{
    const struct dsv4_msg_heartbeat *b = m->body;
    if (b->role >= DSV4_ROLE_COUNT)
        return BAD("HEARTBEAT: role %u", b->role);
    return tail_fits(m, sizeof(*b), 0, err);
}

static int v_dsv4_msg_stop(const struct dsv4_msg *m, struct dsv4_err *err)
{
    const struct dsv4_msg_stop *b = m->body;
    if (b->pad)
        return BAD("STOP: padding not zero");
    return tail_fits(m, sizeof(*b), 0, err);
}

static int v_dsv4_msg_peer(const struct dsv4_msg *m, struct dsv4_err *err)
{
    const struct dsv4_msg_peer *b = m->body;
    if (b->role >= DSV4_ROLE_COUNT)
        return BAD("PEER_RESTARTED: role %u", b->role);
    return tail_fits(m, sizeof(*b), 0, err);
}

static int v_dsv4_msg_fetcher_pin(const struct dsv4_msg *m, struct dsv4_err *err)
{
    const struct dsv4_msg_fetcher_pin *b = m->body;
    if (b->pin > 1 || b->pad)
        return BAD("FETCHER_PIN: pin %u / padding invalid", b->pin);
    return tail_fits(m, sizeof(*b), 0, err);   /* layer/expert: checked by the fetcher */
}

static int v_dsv4_msg_fetcher_save_hot(const struct dsv4_msg *m, struct dsv4_err *err)
{
    return tail_fits(m, sizeof(struct dsv4_msg_fetcher_save_hot), 0, err);
}

static int v_dsv4_msg_generate(const struct dsv4_msg *m, struct dsv4_err *err)
{
    const struct dsv4_msg_generate *b = m->body;
    if (b->req_id == 0)
        return BAD("GENERATE: req_id 0");
    if (!isfinite(b->temperature) || b->temperature < 0 || b->temperature > 100)
        return BAD("GENERATE: temperature %g outside [0, 100]", (double)b->temperature);
    if (!isfinite(b->top_p) || !(b->top_p > 0) || b->top_p > 1)
        return BAD("GENERATE: top_p %g outside (0, 1]", (double)b->top_p);
    if (b->top_k < 0)
        return BAD("GENERATE: top_k %d < 0", b->top_k);
    if (b->max_tokens < 1 || b->max_tokens > DSV4_WIRE_MAX_TOKENS)
        return BAD("GENERATE: max_tokens %d outside [1, %d]", b->max_tokens, DSV4_WIRE_MAX_TOKENS);
    if (b->n_prompt < 1 || b->n_prompt > DSV4_WIRE_MAX_TOKENS)
        return BAD("GENERATE: n_prompt %u outside [1, %d]", b->n_prompt, DSV4_WIRE_MAX_TOKENS);
    if (b->n_done > (uint32_t)b->max_tokens)
        return BAD("GENERATE: n_done %u > max_tokens %d", b->n_done, b->max_tokens);
    if (b->n_stop_bytes > DSV4_WIRE_MAX_STOP_BYTES)
        return BAD("GENERATE: n_stop_bytes %u > %u", b->n_stop_bytes, DSV4_WIRE_MAX_STOP_BYTES);
    if (b->flags & ~(DSV4_GEN_SKIP_SPECIAL | DSV4_GEN_NO_DSPARK | DSV4_GEN_LOGPROBS |
                     DSV4_GEN_TOP_MASK))
        return BAD("GENERATE: unknown flags 0x%x", b->flags);
    uint32_t top = (b->flags & DSV4_GEN_TOP_MASK) >> DSV4_GEN_TOP_SHIFT;
    if (top > DSV4_WIRE_MAX_LOGPROBS || (top && !(b->flags & DSV4_GEN_LOGPROBS)))
        return BAD("GENERATE: %u top logprobs (max %d, with DSV4_GEN_LOGPROBS)", top,
                   DSV4_WIRE_MAX_LOGPROBS);
    uint64_t nt = (uint64_t)b->n_prompt + b->n_done;
    int r = tail_fits(m, sizeof(*b), 4 * nt + b->n_stop_bytes, err);
    if (r)
        return r;
    const char *stop = (const char *)m->tail + 4 * nt;
    if (b->n_stop_bytes && stop[b->n_stop_bytes - 1] != '\0')
        return BAD("GENERATE: stop strings not NUL-terminated");
    for (uint32_t i = 0; i < b->n_stop_bytes; i++)
        if (stop[i] == '\0' && (i == 0 || stop[i - 1] == '\0'))
            return BAD("GENERATE: empty stop string");
    return check_tokens(m->tail, nt, 0, err);
}

static int v_dsv4_msg_score(const struct dsv4_msg *m, struct dsv4_err *err)
{
    const struct dsv4_msg_score *b = m->body;
    if (b->req_id == 0 || b->pad)
        return BAD("SCORE: req_id 0 or padding not zero");
    if (b->n_tokens < 1 || b->n_tokens > DSV4_WIRE_MAX_TOKENS)
        return BAD("SCORE: n_tokens %u outside [1, %d]", b->n_tokens, DSV4_WIRE_MAX_TOKENS);
    int r = tail_fits(m, sizeof(*b), 4ull * b->n_tokens, err);
    return r ? r : check_tokens(m->tail, b->n_tokens, 0, err);
}

static int v_dsv4_msg_cancel(const struct dsv4_msg *m, struct dsv4_err *err)
{
    return tail_fits(m, sizeof(struct dsv4_msg_cancel), 0, err);
}

static int v_dsv4_msg_token(const struct dsv4_msg *m, struct dsv4_err *err)
{
    const struct dsv4_msg_token *b = m->body;
    if (b->n < 1 || b->n > DSV4_WIRE_MAX_TOKENS || b->index > DSV4_WIRE_MAX_TOKENS)
        return BAD("TOKEN: n %u / index %u out of range", b->n, b->index);
    int r = tail_fits(m, sizeof(*b), 4ull * b->n, err);
    return r ? r : check_tokens(m->tail, b->n, 0, err);
}

static int v_dsv4_msg_token_logprobs(const struct dsv4_msg *m, struct dsv4_err *err)
{
    const struct dsv4_msg_token_logprobs *b = m->body;
    if (b->index > DSV4_WIRE_MAX_TOKENS || b->id < 0 || b->n_top > DSV4_WIRE_MAX_LOGPROBS)
        return BAD("TOKEN_LOGPROBS: index %u / id %d / n_top %u out of range", b->index, b->id,
                   b->n_top);
    if (!(b->logprob <= 0) || !isfinite(b->logprob))
        return BAD("TOKEN_LOGPROBS: logprob %g not finite and <= 0", (double)b->logprob);
    int r = tail_fits(m, sizeof(*b), (uint64_t)b->n_top * sizeof(struct dsv4_wire_topk), err);
    if (r)
        return r;
    for (uint32_t i = 0; i < b->n_top; i++) {
        struct dsv4_wire_topk t;
        memcpy(&t, (const char *)m->tail + i * sizeof(t), sizeof(t));
        if (t.id < 0 || !(t.logprob <= 0) || !isfinite(t.logprob))
            return BAD("TOKEN_LOGPROBS: top %u: id %d logprob %g", i, t.id, (double)t.logprob);
    }
    return 0;
}

static int v_dsv4_msg_done(const struct dsv4_msg *m, struct dsv4_err *err)
{
    const struct dsv4_msg_done *b = m->body;
    if (b->reason > DSV4_DONE_CANCELLED)
        return BAD("DONE: reason %u", b->reason);
    if (b->n_cached > b->n_prompt)
        return BAD("DONE: %u cached tokens of a %u-token prompt", b->n_cached, b->n_prompt);
    return tail_fits(m, sizeof(*b), 0, err);
}

static int v_dsv4_msg_progress(const struct dsv4_msg *m, struct dsv4_err *err)
{
    const struct dsv4_msg_progress *b = m->body;
    if (b->total < 1 || b->total > 2u * DSV4_WIRE_MAX_TOKENS || b->done > b->total)
        return BAD("PROGRESS: done %u / total %u out of range", b->done, b->total);
    return tail_fits(m, sizeof(*b), 0, err);
}

static int check_rows(const void *p, uint64_t n, struct dsv4_err *err)
{
    const struct dsv4_wire_row *rows = p;
    for (uint64_t i = 0; i < n; i++) {
        if (rows[i].argmax < -1 || (uint32_t)rows[i].has_logprob > 1)
            return BAD("row %llu: argmax %d has_logprob %d", (unsigned long long)i,
                       rows[i].argmax, rows[i].has_logprob);
        if (rows[i].has_logprob && !(rows[i].logprob <= 0))
            return BAD("row %llu: logprob %g not <= 0", (unsigned long long)i, rows[i].logprob);
    }
    return 0;
}

static int v_dsv4_msg_score_rows(const struct dsv4_msg *m, struct dsv4_err *err)
{
    const struct dsv4_msg_score_rows *b = m->body;
    if (b->n < 1 || b->n > DSV4_WIRE_MAX_TOKENS || b->first > DSV4_WIRE_MAX_TOKENS)
        return BAD("SCORE_ROWS: n %u / first %u out of range", b->n, b->first);
    int r = tail_fits(m, sizeof(*b), (uint64_t)b->n * sizeof(struct dsv4_wire_row), err);
    return r ? r : check_rows(m->tail, b->n, err);
}

static int v_dsv4_msg_session_open(const struct dsv4_msg *m, struct dsv4_err *err)
{
    const struct dsv4_msg_session_open *b = m->body;
    if (b->max_ctx < 1 || b->max_ctx > 2 * DSV4_WIRE_MAX_TOKENS)
        return BAD("SESSION_OPEN: max_ctx %lld out of range", (long long)b->max_ctx);
    return tail_fits(m, sizeof(*b), 0, err);
}

static int v_dsv4_msg_session_ref(const struct dsv4_msg *m, struct dsv4_err *err)
{
    return tail_fits(m, sizeof(struct dsv4_msg_session_ref), 0, err);
}

static int v_dsv4_msg_rollback(const struct dsv4_msg *m, struct dsv4_err *err)
{
    const struct dsv4_msg_rollback *b = m->body;
    if (b->pos < 0)
        return BAD("ROLLBACK: pos %lld < 0", (long long)b->pos);
    return tail_fits(m, sizeof(*b), 0, err);
}

static int v_dsv4_msg_ack(const struct dsv4_msg *m, struct dsv4_err *err)
{
    return tail_fits(m, sizeof(struct dsv4_msg_ack), 0, err);
}

static int v_dsv4_msg_forward(const struct dsv4_msg *m, struct dsv4_err *err)
{
    const struct dsv4_msg_forward *b = m->body;
    if (b->n_rows < 1 || b->n_rows > DSV4_WIRE_MAX_TOKENS)
        return BAD("FORWARD: n_rows %u out of range", b->n_rows);
    if (b->top_k > DSV4_WIRE_MAX_TOPK)
        return BAD("FORWARD: top_k %u > %d", b->top_k, DSV4_WIRE_MAX_TOPK);
    if (b->flags & ~(DSV4_FWD_ALL_ROWS | DSV4_FWD_LOGITS | DSV4_FWD_MORE | DSV4_FWD_SPECULATIVE))
        return BAD("FORWARD: unknown flags 0x%x", b->flags);
    if (b->n_taps)
        return BAD("FORWARD: hidden-state taps not served yet (n_taps %u)", b->n_taps);
    int r = tail_fits(m, sizeof(*b), (uint64_t)b->n_rows * sizeof(struct dsv4_wire_fwd_in), err);
    if (r)
        return r;
    const struct dsv4_wire_fwd_in *rows = m->tail;
    for (uint32_t i = 0; i < b->n_rows; i++) {
        if (rows[i].token < 0 || rows[i].target < -1 || rows[0].pos < 0 ||
            rows[0].pos > INT64_MAX - DSV4_WIRE_MAX_TOKENS || rows[i].pos != rows[0].pos + i)
            return BAD("FORWARD: row %u (token %d target %d pos %lld) invalid", i,
                       rows[i].token, rows[i].target, (long long)rows[i].pos);
    }
    return 0;
}

static int v_dsv4_msg_forward_result(const struct dsv4_msg *m, struct dsv4_err *err)
{
    const struct dsv4_msg_forward_result *b = m->body;
    if (b->n_rows < 1 || b->n_rows > DSV4_WIRE_MAX_TOKENS || b->top_k > DSV4_WIRE_MAX_TOPK ||
        b->n_logits > DSV4_WIRE_MAX_LOGITS || b->n_taps > DSV4_WIRE_MAX_LOGITS)
        return BAD("FORWARD_RESULT: counts out of range");
    uint64_t need = (uint64_t)b->n_rows * sizeof(struct dsv4_wire_row) +
                    (uint64_t)b->n_rows * b->top_k * sizeof(struct dsv4_wire_topk) +
                    4ull * b->n_logits + 4ull * b->n_taps;
    int r = tail_fits(m, sizeof(*b), need, err);
    return r ? r : check_rows(m->tail, b->n_rows, err);
}

static int v_dsv4_msg_draft(const struct dsv4_msg *m, struct dsv4_err *err)
{
    const struct dsv4_msg_draft *b = m->body;
    if (b->pos < 0 || b->anchor < 0 || b->pad)
        return BAD("DRAFT: pos %lld anchor %d pad %u invalid", (long long)b->pos, b->anchor,
                   b->pad);
    return tail_fits(m, sizeof(*b), 0, err);
}

static int v_dsv4_msg_prefix_restore(const struct dsv4_msg *m, struct dsv4_err *err)
{
    const struct dsv4_msg_prefix_restore *b = m->body;
    if (b->pad)
        return BAD("PREFIX_RESTORE: padding not zero");
    if (b->n_tokens < 1 || b->n_tokens > DSV4_WIRE_MAX_TOKENS)
        return BAD("PREFIX_RESTORE: n_tokens %u outside [1, %d]", b->n_tokens,
                   DSV4_WIRE_MAX_TOKENS);
    int r = tail_fits(m, sizeof(*b), 4ull * b->n_tokens, err);
    return r ? r : check_tokens(m->tail, b->n_tokens, 0, err);
}

static int v_dsv4_msg_draft_result(const struct dsv4_msg *m, struct dsv4_err *err)
{
    const struct dsv4_msg_draft_result *b = m->body;
    if (b->n < 1 || b->n > DSV4_WIRE_MAX_DRAFT || b->pad || b->pos < 0)
        return BAD("DRAFT_RESULT: n %u pad %u pos %lld invalid", b->n, b->pad, (long long)b->pos);
    int r = tail_fits(m, sizeof(*b), 8ull * b->n, err);
    if (r)
        return r;
    const unsigned char *t = m->tail;
    for (uint32_t i = 0; i < b->n; i++) {
        int32_t id;
        float c;
        memcpy(&id, t + 4 * i, 4);
        memcpy(&c, t + 4 * (b->n + i), 4);
        if (id < 0 || !(c >= 0.0f && c <= 1.0f))
            return BAD("DRAFT_RESULT: slot %u (id %d confidence %g) invalid", i, id, (double)c);
    }
    return 0;
}

struct type_info {
    int type;
    size_t min_body;
    int (*validate)(const struct dsv4_msg *m, struct dsv4_err *err);
};

static const struct type_info types[] = {
#define X(name, num, body) { num, sizeof(struct body), v_##body },
    DSV4_MSG_LIST(X)
#undef X
};

int dsv4_wire_decode(const void *buf, size_t len, struct dsv4_msg *ret, int *errc,
                     struct dsv4_err *err)
{
    struct dsv4_msg_hdr h;
    *errc = DSV4_WE_PROTO;
    if (len < sizeof(h))
        return BAD("message of %zu bytes is shorter than the header", len);
    memcpy(&h, buf, sizeof(h));
    if (h.magic != DSV4_WIRE_MAGIC)
        return BAD("bad magic 0x%08x", h.magic);
    if (h.abi_major != DSV4_WIRE_ABI_MAJOR) {
        *errc = DSV4_WE_ABI;
        return dsv4_errf(err, -EPROTO, "abi %u.%u, this build speaks %u.%u", h.abi_major,
                            h.abi_minor, DSV4_WIRE_ABI_MAJOR, DSV4_WIRE_ABI_MINOR);
    }
    if (h.body_size != len - sizeof(h) || h.body_size > DSV4_WIRE_MAX_BODY)
        return BAD("body_size %u but frame carries %zu bytes", h.body_size, len - sizeof(h));
    if (h.flags)
        return BAD("header flags 0x%x not zero", h.flags);
    const struct type_info *ti = NULL;
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(types); i++)
        if (types[i].type == h.type)
            ti = &types[i];
    if (!ti)
        return BAD("unknown message type %u", h.type);
    if (h.body_size < ti->min_body)
        return BAD("%s: body of %u bytes, needs %zu", dsv4_wire_type_name(h.type), h.body_size,
                   ti->min_body);
    ret->type = h.type;
    ret->flags = h.flags;
    ret->abi_minor = h.abi_minor;
    ret->body_size = h.body_size;
    ret->body = (const unsigned char *)buf + sizeof(h);
    ret->tail = (const unsigned char *)ret->body + ti->min_body;
    return ti->validate(ret, err);
}

void dsv4_wire_begin(struct dsv4_wire_buf *b, int type)
{
    struct dsv4_msg_hdr h = { DSV4_WIRE_MAGIC, DSV4_WIRE_ABI_MAJOR, DSV4_WIRE_ABI_MINOR,
                              (uint16_t)type, 0, 0 };
    b->len = 0;
    dsv4_wire_put(b, &h, sizeof(h));
}

void dsv4_wire_put(struct dsv4_wire_buf *b, const void *data, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = DSV4_MAX(b->cap * 2, b->len + n + 256);
        b->p = dsv4_xrealloc(b->p, b->cap);
    }
    if (n)
        memcpy(b->p + b->len, data, n);
    b->len += n;
}

void dsv4_wire_finish(struct dsv4_wire_buf *b)
{
    uint32_t body = (uint32_t)(b->len - sizeof(struct dsv4_msg_hdr));
    memcpy(b->p + offsetof(struct dsv4_msg_hdr, body_size), &body, 4);
}

void dsv4_wire_buf_free(struct dsv4_wire_buf *b)
{
    free(b->p);
    *b = (struct dsv4_wire_buf){ 0 };
}

void dsv4_wire_simple(struct dsv4_wire_buf *b, int type, const void *body, size_t n)
{
    dsv4_wire_begin(b, type);
    dsv4_wire_put(b, body, n);
    dsv4_wire_finish(b);
}

void dsv4_wire_error(struct dsv4_wire_buf *b, uint64_t id, int code, const char *text)
{
    size_t n = DSV4_MIN(strlen(text), (size_t)DSV4_WIRE_MAX_TEXT);
    struct dsv4_msg_error e = { id, code, (uint32_t)n };
    dsv4_wire_begin(b, DSV4_MSG_ERROR);
    dsv4_wire_put(b, &e, sizeof(e));
    dsv4_wire_put(b, text, n);
    dsv4_wire_finish(b);
}
