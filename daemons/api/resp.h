/* SPDX-License-Identifier: MIT */
/*
 * Response writing: the JSON bodies and the server-sent events of each
 * protocol, behind one table of functions (struct api_writer) so the HTTP
 * layer drives OpenAI chat, OpenAI completions and Anthropic messages the
 * same way: start, pieces of text as gen_take() releases them, finish (or
 * an error once the stream has begun), or the whole body at once.
 */
#pragma once

#include "buf.h"

#include <stdbool.h>
#include <stddef.h>

#include "api_req.h"
#include "gen.h"


struct cJSON;
/* "event: EVENT\n" (when not NULL) "data: <obj>\n\n"; deletes obj. */
void sb_sse(struct dsv4_buf *b, const char *event, struct cJSON *obj);
/* A string with embedded length (text need not be NUL-terminated). */
struct cJSON *api_json_strn(const char *p, size_t n);

struct api_meta {
    char id[48];
    long long created;
    const char *model;
    const struct api_req *req;
    uint32_t lp_sent;           /* tokens whose logprobs a chunk carried */
    size_t lp_offset;           /* completions: text_offset of the next token */
    /* Anthropic: the open content block */
    int block;
    bool block_open, block_reasoning;
};

struct api_writer {
    void (*start)(struct dsv4_buf *o, const struct gen *g, struct api_meta *m);
    void (*piece)(struct dsv4_buf *o, const struct gen *g, struct api_meta *m, bool reasoning,
                  const char *p, size_t n);
    void (*finish)(struct dsv4_buf *o, const struct gen *g, struct api_meta *m);
    void (*error)(struct dsv4_buf *o, const struct api_error *e);
    /* the non-streamed response body (malloc'ed) */
    char *(*body)(struct gen *g, struct api_meta *m);
    /* an error response body (malloc'ed) */
    char *(*error_body)(const struct api_error *e);
};

extern const struct api_writer api_oai_chat, api_oai_completion, api_anthropic;

char *api_oai_error_body(const struct api_error *e);
