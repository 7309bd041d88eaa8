/* SPDX-License-Identifier: MIT */
/*
 * Prompt arguments shared by `run`, `score` and `gen`: one parser for
 * --prompt-ids and one mapping of --chat/--think to the prompt kind, so the
 * in-process and the daemon paths encode a prompt identically.
 */
#pragma once

#include <stdbool.h>

#include "chat.h"
#include "tokenizer.h"

/* "1,2,3" → ids appended to *out; false on anything else (empty items,
 * trailing comma, negative or > INT32_MAX values). */
bool dsv4ctl_parse_ids(const char *s, struct dsv4_ids *out);

/* A text prompt starts with BOS, as DeepSeek's prompts do; the chat template adds it. */
static inline enum dsv4_prompt_kind dsv4ctl_prompt_kind(bool chat, bool think)
{
    return !chat ? DSV4_PROMPT_RAW_BOS : think ? DSV4_PROMPT_CHAT_THINK : DSV4_PROMPT_CHAT;
}
