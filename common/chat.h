/* SPDX-License-Identifier: MIT */
/*
 * DeepSeek-V4 chat template: renders a conversation to the prompt text the
 * official encoder (`encoding_dsv4.py`, encode_messages) makes, and
 * tokenizes it. The role markers are added tokens looked up by their
 * strings in the loaded tokenizer, so any tokenizer that has them (the real
 * one, the tiny fixture's) works. Tool calls (DSML), tool results and
 * quick-instruction tasks are not rendered yet (see docs/tokenizer.md).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "err.h"
#include "tokenizer.h"

/* The markers, exactly as the official encoder writes them. */
#define DSV4_CHAT_BOS "<｜begin▁of▁sentence｜>"
#define DSV4_CHAT_EOS "<｜end▁of▁sentence｜>"
#define DSV4_CHAT_USER "<｜User｜>"
#define DSV4_CHAT_ASSISTANT "<｜Assistant｜>"
#define DSV4_CHAT_LATEST_REMINDER "<｜latest_reminder｜>"
#define DSV4_CHAT_THINK "<think>"
#define DSV4_CHAT_END_THINK "</think>"

struct dsv4_chat_msg {
    const char *role;      /* system, user, developer, assistant, latest_reminder */
    const char *content;   /* NULL = empty */
    const char *reasoning; /* assistant's reasoning_content; NULL = none */
};

struct dsv4_chat_opts {
    bool thinking;        /* thinking_mode "thinking" (else "chat") */
    bool keep_reasoning;  /* drop_thinking = false: keep earlier turns' reasoning */
    bool no_bos;          /* add_default_bos_token = false */
    bool effort_max;      /* reasoning_effort "max" (thinking mode only) */
};

/* Render to a malloc'ed NUL-terminated string. -EINVAL for an unknown
 * role or an empty developer message. */
int dsv4_chat_render(const struct dsv4_chat_msg *msgs, size_t n, const struct dsv4_chat_opts *o,
                     char **text, size_t *len, struct dsv4_err *err);

/* Render and tokenize, appending to *ids. -EINVAL if the tokenizer lacks a
 * marker the conversation needs (as an added token). */
int dsv4_chat_encode(dsv4_tokenizer *t, const struct dsv4_chat_msg *msgs, size_t n,
                     const struct dsv4_chat_opts *o, struct dsv4_ids *ids, struct dsv4_err *err);

/* What `dsv4ctl tokenize` and `run`/`gen` do with a text prompt. */
enum dsv4_prompt_kind {
    DSV4_PROMPT_RAW,        /* the text as is, no BOS */
    DSV4_PROMPT_RAW_BOS,    /* BOS + the text */
    DSV4_PROMPT_CHAT,       /* one user message, non-thinking: ends <｜Assistant｜></think> */
    DSV4_PROMPT_CHAT_THINK, /* one user message, thinking: ends <｜Assistant｜><think> */
};

/* Append the prompt's ids to *ids (text[0..len), any bytes). */
int dsv4_chat_prompt(dsv4_tokenizer *t, const char *text, size_t len, enum dsv4_prompt_kind kind,
                     struct dsv4_ids *ids, struct dsv4_err *err);
