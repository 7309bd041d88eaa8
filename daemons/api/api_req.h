/* SPDX-License-Identifier: MIT */
/*
 * One generation request as the API edge understands it, whichever protocol
 * it came in (OpenAI chat/completions, Anthropic messages), and the error a
 * request is answered with. The parsers are pure functions of the body
 * bytes (tests/fuzz/fuzz-api-request.c): the JSON's structure is bounded
 * before cJSON builds a tree, every field is type- and range-checked
 * before use, and an error names the field.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat.h"
#include "dsv4_wire.h"

#define API_MAX_DEPTH 64            /* JSON nesting */
#define API_MAX_NODES (1 << 20)     /* JSON values */
#define API_MAX_MESSAGES 8192
#define API_MAX_STOP 4              /* OpenAI's limit on stop strings */
#define API_MAX_PROMPT_IDS (1 << 20)

enum api_kind { API_CHAT, API_COMPLETION, API_MESSAGES };

struct api_error {
    int status;                 /* HTTP status */
    char type[32];              /* invalid_request_error, authentication_error, ... */
    char param[64];             /* the offending field; "" = null */
    char code[40];              /* "" = null */
    char msg[512];
    int retry_after;            /* seconds for Retry-After; 0 = none */
};

struct api_req {
    enum api_kind kind;
    void *root;                 /* the parsed body (cJSON): strings below point into it */
    const char *model;
    /* chat and messages */
    struct dsv4_chat_msg *msgs;
    size_t n_msgs;
    struct dsv4_chat_opts chat;
    char **owned;               /* strings built here (joined text parts) */
    size_t n_owned;
    /* completions */
    const char *prompt;         /* NULL when given as ids */
    size_t prompt_len;
    uint32_t *prompt_ids;
    size_t n_prompt_ids;
    bool echo;
    /* sampling and stopping */
    int max_tokens;             /* 0 = the server's default */
    double temperature, top_p;
    int top_k;
    uint64_t seed;
    bool has_seed;
    char stop[DSV4_WIRE_MAX_STOP_BYTES];   /* NUL-terminated strings back to back */
    size_t n_stop;
    bool stream, include_usage;
    bool tools;                 /* tools are in the prompt: parse the model's DSML tool calls */
    bool logprobs;              /* per-token logprobs, with top_logprobs alternatives */
    int top_logprobs;           /* <= DSV4_WIRE_MAX_LOGPROBS */
};

/* Fill e; returns -1 so a parser can `return api_err(...)`. param may be NULL. */
int api_err(struct api_error *e, int status, const char *type, const char *param,
            const char *code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* 400 invalid_request_error naming param. */
int api_bad(struct api_error *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Bound depth and value count of a JSON text without building it; 0 or -1 (e: 400). */
int api_json_prescan(const char *body, size_t len, struct api_error *e);

/* Parse and validate; 0, or -1 with e filled (r is left freeable). */
int api_parse_chat(const char *body, size_t len, struct api_req *r, struct api_error *e);
int api_parse_completion(const char *body, size_t len, struct api_req *r, struct api_error *e);
int api_parse_messages(const char *body, size_t len, struct api_req *r, struct api_error *e);
void api_req_free(struct api_req *r);

/* Helpers shared by the parsers (oai_req.c). */
struct cJSON;
struct cJSON *api_parse_root(const char *body, size_t len, struct api_req *r, struct api_error *e);
int api_get_number(const struct cJSON *o, const char *key, double lo, double hi, double *out,
                   struct api_error *e);
int api_get_int(const struct cJSON *o, const char *key, double lo, double hi, long long *out,
                struct api_error *e);
int api_get_bool(const struct cJSON *o, const char *key, bool *out, struct api_error *e);
int api_add_stop(struct api_req *r, const char *s, const char *param, struct api_error *e);
char *api_own(struct api_req *r, char *s);
