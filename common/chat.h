/* SPDX-License-Identifier: MIT */
/*
 * DeepSeek-V4 chat template: renders a conversation to the prompt text the
 * official encoder (`encoding_dsv4.py`, encode_messages) makes, and
 * tokenizes it. The role markers are added tokens looked up by their
 * strings in the loaded tokenizer, so any tokenizer that has them (the real
 * one, the tiny fixture's) works. Tools (the tool section of a system or
 * developer message), assistant tool calls (DSML) and tool results
 * (merged into user turns as <tool_result> blocks, in call order) are
 * rendered; quick-instruction tasks and response_format are not.
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
#define DSV4_CHAT_DSML "｜DSML｜"
/* What starts the model's tool calls in its output (after the content). */
#define DSV4_CHAT_TOOL_CALLS_START "\n\n<" DSV4_CHAT_DSML "tool_calls>"

struct dsv4_chat_tool_call {
    const char *id;         /* NULL = none (orders the tool results) */
    const char *name;
    const char *arguments;  /* a JSON object as text (OpenAI's function.arguments) */
};

struct dsv4_chat_msg {
    const char *role;      /* system, user, developer, assistant, tool, latest_reminder */
    const char *content;   /* NULL = empty */
    const char *reasoning; /* assistant's reasoning_content; NULL = none */
    const char *tools;     /* system/developer: OpenAI's "tools" array as JSON text; NULL = none */
    const struct dsv4_chat_tool_call *tool_calls;  /* assistant */
    size_t n_tool_calls;
    const char *tool_call_id;   /* tool: the call this result answers */
};

struct dsv4_chat_opts {
    bool thinking;        /* thinking_mode "thinking" (else "chat") */
    bool keep_reasoning;  /* drop_thinking = false: keep earlier turns' reasoning */
    bool no_bos;          /* add_default_bos_token = false */
    bool effort_max;      /* reasoning_effort "max" (thinking mode only) */
};

/* Render to a malloc'ed NUL-terminated string. -EINVAL for an unknown
 * role, an empty developer message, tools that are not a list of
 * {"function": {...}} objects, or tool-call arguments that are JSON but not
 * an object. */
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
