/* SPDX-License-Identifier: MIT */
/*
 * The wire format of every ZeroMQ message between dsv4 processes: the single
 * definition (proto/WIRE.md explains the rules). A message is one frame:
 * a 16-byte header, then a fixed body struct of its type, then the type's
 * variable arrays (counts in the body). Everything is naturally aligned,
 * fixed-width, little-endian (the only host order we build for), with
 * explicit padding that must be zero. Every daemon comes from one build, so
 * this header is the schema; `abi_major` changes on any incompatible change,
 * `abi_minor` when a body grows at its end (older readers ignore the tail).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "err.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "wire structs are little-endian");

#define DSV4_WIRE_MAGIC 0x34565344u     /* "DSV4" as bytes */
#define DSV4_WIRE_ABI_MAJOR 1
#define DSV4_WIRE_ABI_MINOR 2    /* 1: TOKEN_LOGPROBS, GENERATE logprob flags; 2: FWD_MORE,
                                  * FWD_SPECULATIVE, PREFIX_RESTORE, DONE n_cached */
#define DSV4_WIRE_MAX_BODY (64u << 20)  /* bigger frames are dropped unread */

/* Range limits every decoder enforces (a hostile count cannot size an allocation). */
#define DSV4_WIRE_MAX_TOKENS (1 << 20)  /* prompt + done, score length, rows */
#define DSV4_WIRE_MAX_TOPK 64
#define DSV4_WIRE_MAX_STOP_BYTES 4096
#define DSV4_WIRE_MAX_TEXT 1024
#define DSV4_WIRE_MAX_LOGITS (1 << 22)
#define DSV4_WIRE_MAX_ALL_ROWS 256      /* rows with results (DSV4_FWD_ALL_ROWS) per FORWARD */

struct dsv4_msg_hdr {
    uint32_t magic;
    uint16_t abi_major, abi_minor;
    uint16_t type, flags;
    uint32_t body_size;
};
_Static_assert(sizeof(struct dsv4_msg_hdr) == 16, "ABI");

/* Roles (routing ids on the supervisor's ROUTER, stats page names). */
/* Started in this order, stopped in the reverse one; the fetcher and the api are optional. */
enum dsv4_role {
    DSV4_ROLE_FETCHER, DSV4_ROLE_COMPUTE, DSV4_ROLE_SCHEDULER, DSV4_ROLE_API, DSV4_ROLE_COUNT
};
const char *dsv4_role_name(int role);

/* Error codes of ERROR messages (stable numbers: clients map them to exit codes). */
enum dsv4_wire_errc {
    DSV4_WE_PROTO = 1,      /* malformed message */
    DSV4_WE_ABI = 2,        /* other abi_major */
    DSV4_WE_BUSY = 3,       /* queue full: retry later */
    DSV4_WE_NOSESSION = 4,  /* unknown session (compute restarted) */
    DSV4_WE_RANGE = 5,      /* position / context out of range */
    DSV4_WE_INVALID = 6,    /* well-formed but unacceptable (token outside vocab, ...) */
    DSV4_WE_INTERNAL = 7,
    DSV4_WE_UNAVAILABLE = 8,
    DSV4_WE_TOO_LARGE = 9,  /* can never be served (context, memory plan): do not retry */
};

/* ---- supervisor <-> every daemon ------------------------------------------------------ */
struct dsv4_msg_ready {         /* daemon -> supervisor once it can serve */
    uint32_t pid, role;
    uint64_t build_id;
};
struct dsv4_msg_heartbeat {     /* daemon -> supervisor, every second */
    uint32_t pid, role;
    uint64_t progress;          /* work counter: steps, forwards, fetches */
};
struct dsv4_msg_stop {          /* supervisor -> daemon: finish and exit 0 */
    uint32_t reason, pad;
};
struct dsv4_msg_peer {          /* supervisor -> daemons: `role` restarted and is ready */
    uint32_t role, pid;
    uint64_t epoch;
};

/* ---- supervisor (or a test acting as one) -> fetcher, over the control channel ------- */
struct dsv4_msg_fetcher_pin {   /* pin (load if needed, then keep) or unpin one expert */
    uint64_t seq;               /* echoed in the ACK / ERROR id */
    int32_t layer, expert;
    uint32_t pin;               /* 1 = pin, 0 = unpin */
    uint32_t pad;
};
struct dsv4_msg_fetcher_save_hot {  /* write the learned hot set to RUN_DIR/fetcher-hot.json */
    uint64_t seq;
};

/* ---- client <-> scheduler ------------------------------------------------------------- */
#define DSV4_GEN_SKIP_SPECIAL 1u        /* reserved */
struct dsv4_msg_generate {
    uint64_t req_id;            /* chosen by the client; a resubmission reuses it */
    uint64_t seed;
    float temperature;          /* 0 = greedy */
    float top_p;                /* (0, 1]; 1 = off */
    int32_t top_k;              /* 0 = off */
    int32_t max_tokens;         /* >= 1, counts the n_done tokens too */
    uint32_t n_prompt;
    uint32_t n_done;            /* generated tokens the client already has (resume) */
    uint32_t n_stop_bytes;      /* stop strings, each NUL-terminated */
    uint32_t flags;
    /* int32_t tokens[n_prompt + n_done]; char stop[n_stop_bytes]; */
};
struct dsv4_msg_score {
    uint64_t req_id;
    uint32_t n_tokens, pad;
    /* int32_t tokens[n_tokens]; */
};
struct dsv4_msg_cancel {
    uint64_t req_id;
};
struct dsv4_msg_token {         /* scheduler -> client: generated ids */
    uint64_t req_id;
    uint32_t index;             /* index of ids[0] in the generated stream */
    uint32_t n;
    /* int32_t ids[n]; */
};
enum dsv4_done_reason { DSV4_DONE_EOS, DSV4_DONE_LENGTH, DSV4_DONE_STOP, DSV4_DONE_CANCELLED };
struct dsv4_msg_progress {      /* scheduler -> client: prefill progress (also the liveness probe) */
    uint64_t req_id;
    uint32_t done, total;       /* prompt rows computed / to compute; done <= total */
};
struct dsv4_msg_done {
    uint64_t req_id;
    uint32_t reason, n_generated;
    uint32_t n_prompt;
    uint32_t n_cached;          /* prompt tokens restored from the prefix cache (abi_minor 2) */
};
struct dsv4_wire_row {          /* one position's result */
    int32_t argmax;             /* -1 when not computed */
    int32_t has_logprob;
    double logprob;             /* log-softmax of the row's target token */
};
struct dsv4_msg_score_rows {    /* scheduler -> client: rows first..first+n */
    uint64_t req_id;
    uint32_t first, n;
    /* struct dsv4_wire_row rows[n]; */
};
struct dsv4_msg_error {
    uint64_t id;                /* req_id (client) or seq (compute) it answers; 0 = none */
    int32_t code;
    uint32_t text_len;          /* <= DSV4_WIRE_MAX_TEXT, no NUL */
    /* char text[text_len]; */
};

/* ---- scheduler <-> compute ------------------------------------------------------------ */
struct dsv4_msg_session_open {
    uint64_t seq, session;
    int64_t max_ctx;
};
struct dsv4_msg_session_ref {   /* close, snapshot */
    uint64_t seq, session;
};
struct dsv4_msg_rollback {
    uint64_t seq, session;
    int64_t pos;                /* next token goes to pos */
};
struct dsv4_msg_prefix_restore {    /* scheduler -> compute, right after SESSION_OPEN: restore
                                     * the longest cached prefix of these ids; ACK pos = where
                                     * the session continues (0: nothing cached) */
    uint64_t seq, session;
    uint32_t n_tokens, pad;
    /* int32_t tokens[n_tokens]; */
};
struct dsv4_msg_ack {           /* compute -> scheduler for open/close/snapshot/rollback */
    uint64_t seq, session;
    int64_t pos;                /* session position after the command */
};
#define DSV4_FWD_ALL_ROWS 1u    /* results for every row (verification, scoring), else last */
#define DSV4_FWD_LOGITS 2u      /* ship the last row's logits (sampling) */
/* More FORWARDs of this step follow: compute runs them all in one batched step when the
 * FORWARD without MORE arrives (or any other message, or none for a while). Each still gets
 * its own FORWARD_RESULT or ERROR. */
#define DSV4_FWD_MORE 4u
/* Rows after the first are a DSpark verify's drafts (rolled back unless accepted): the prefix
 * cache stores nothing past the first row. */
#define DSV4_FWD_SPECULATIVE 8u
struct dsv4_wire_fwd_in {
    int32_t token;
    int32_t target;             /* token whose logprob to report, -1 = none */
    int64_t pos;                /* must continue the session: pos[0] = session pos */
};
struct dsv4_msg_forward {
    uint64_t seq, session;
    uint32_t n_rows;            /* >= 1 */
    uint32_t top_k;             /* <= DSV4_WIRE_MAX_TOPK per reported row */
    uint32_t flags;
    uint32_t n_taps;            /* hidden-state taps wanted by the drafter: 0 until DSpark */
    /* struct dsv4_wire_fwd_in rows[n_rows]; */
};
struct dsv4_wire_topk {
    int32_t id;
    float logprob;
};
struct dsv4_msg_forward_result {
    uint64_t seq, session;
    int64_t pos;                /* session position after the batch */
    uint32_t n_rows;            /* rows reported (all or the last one) */
    uint32_t top_k;
    uint32_t n_logits;          /* 0 or vocab */
    uint32_t n_taps;            /* floats of hidden-state taps: 0 for now */
    /* struct dsv4_wire_row rows[n_rows]; struct dsv4_wire_topk topk[n_rows * top_k];
     * float logits[n_logits]; float taps[n_taps]; */
};

#define DSV4_GEN_NO_DSPARK 2u           /* this request decodes without speculation */
/* Logprobs: TOKEN_LOGPROBS before each TOKEN, with the top (flags >> 8) & 0xff alternatives
 * (<= DSV4_WIRE_MAX_LOGPROBS); such a request decodes without speculation. */
#define DSV4_GEN_LOGPROBS 4u
#define DSV4_GEN_TOP_SHIFT 8
#define DSV4_GEN_TOP_MASK 0xff00u
#define DSV4_WIRE_MAX_LOGPROBS 20
struct dsv4_msg_token_logprobs {    /* scheduler -> client, just before the TOKEN of `index` */
    uint64_t req_id;
    uint32_t index;
    int32_t id;                 /* the token chosen */
    float logprob;              /* its log-softmax under the model (temperature 1, no top-k/p) */
    uint32_t n_top;             /* <= DSV4_WIRE_MAX_LOGPROBS */
    /* struct dsv4_wire_topk top[n_top]: most likely first */
};
struct dsv4_msg_draft {         /* scheduler -> compute: the drafter's block for `anchor` */
    uint64_t seq, session;
    int64_t pos;                /* the anchor's position: must equal the session's */
    int32_t anchor;
    uint32_t pad;
};
#define DSV4_WIRE_MAX_DRAFT 64
struct dsv4_msg_draft_result {
    uint64_t seq, session;
    int64_t pos;
    uint32_t n;                 /* the drafted block size (<= DSV4_WIRE_MAX_DRAFT) */
    uint32_t pad;
    /* int32_t ids[n]; float conf[n] (probability that ids[i] survives given ids[0..i)) */
};

/*
 * X(NAME, number, body struct): generates the type enum, the name table,
 * the minimum body sizes and the validator table (proto/wire.c).
 */
#define DSV4_MSG_LIST(X)                                              \
    X(ERROR, 1, dsv4_msg_error)                                       \
    X(READY, 2, dsv4_msg_ready)                                       \
    X(HEARTBEAT, 3, dsv4_msg_heartbeat)                               \
    X(STOP, 4, dsv4_msg_stop)                                         \
    X(PEER_RESTARTED, 5, dsv4_msg_peer)                               \
    X(FETCHER_PIN, 6, dsv4_msg_fetcher_pin)                           \
    X(FETCHER_SAVE_HOT, 7, dsv4_msg_fetcher_save_hot)                 \
    X(GENERATE, 16, dsv4_msg_generate)                                \
    X(SCORE, 17, dsv4_msg_score)                                      \
    X(CANCEL, 18, dsv4_msg_cancel)                                    \
    X(TOKEN, 19, dsv4_msg_token)                                      \
    X(DONE, 20, dsv4_msg_done)                                        \
    X(SCORE_ROWS, 21, dsv4_msg_score_rows)                            \
    X(PROGRESS, 22, dsv4_msg_progress)                                \
    X(TOKEN_LOGPROBS, 23, dsv4_msg_token_logprobs)                    \
    X(SESSION_OPEN, 32, dsv4_msg_session_open)                        \
    X(SESSION_CLOSE, 33, dsv4_msg_session_ref)                        \
    X(FORWARD, 34, dsv4_msg_forward)                                  \
    X(FORWARD_RESULT, 35, dsv4_msg_forward_result)                    \
    X(SNAPSHOT, 36, dsv4_msg_session_ref)                             \
    X(ROLLBACK, 37, dsv4_msg_rollback)                                \
    X(ACK, 38, dsv4_msg_ack)                                          \
    X(DRAFT, 39, dsv4_msg_draft)                                      \
    X(DRAFT_RESULT, 40, dsv4_msg_draft_result)                        \
    X(PREFIX_RESTORE, 41, dsv4_msg_prefix_restore)

enum dsv4_msg_type {
#define X(name, num, body) DSV4_MSG_##name = num,
    DSV4_MSG_LIST(X)
#undef X
};

/* A validated message: `body` is 8-byte aligned inside the caller's buffer. */
struct dsv4_msg {
    uint16_t type, flags;
    uint16_t abi_minor;
    uint32_t body_size;
    const void *body;
    const void *tail;           /* first byte after the known body prefix */
};

const char *dsv4_wire_type_name(int type);
/*
 * Validate buf[0..len) (must be 8-byte aligned) as one message: magic,
 * abi_major (-EPROTO with DSV4_WE_ABI in *errc), type, body size against
 * the header and the type's prefix, every count against its limit and the
 * frame, padding zero, floats finite. Returns 0 or -EBADMSG/-EPROTO and a
 * one-line reason; *errc gets the ERROR code to reply with.
 */
int dsv4_wire_decode(const void *buf, size_t len, struct dsv4_msg *ret, int *errc,
                     struct dsv4_err *err);

/* Building a message: begin, append pieces, finish (sets body_size). */
struct dsv4_wire_buf {
    unsigned char *p;
    size_t len, cap;
};
void dsv4_wire_begin(struct dsv4_wire_buf *b, int type);
void dsv4_wire_put(struct dsv4_wire_buf *b, const void *data, size_t n);
void dsv4_wire_finish(struct dsv4_wire_buf *b);
void dsv4_wire_buf_free(struct dsv4_wire_buf *b);
/* One-piece message: header + body. */
void dsv4_wire_simple(struct dsv4_wire_buf *b, int type, const void *body, size_t n);
void dsv4_wire_error(struct dsv4_wire_buf *b, uint64_t id, int code, const char *text);
