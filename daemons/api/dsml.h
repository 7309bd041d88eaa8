/* SPDX-License-Identifier: MIT */
/*
 * The model's tool calls back out of its text: the DSML block that follows
 * the content ("\n\n<｜DSML｜tool_calls>" ... "</｜DSML｜tool_calls>"), read
 * with the official decoder's grammar (parse_tool_calls: invoke name=,
 * parameter name= string="true|false", ">\n" between tags, no duplicate
 * parameter, nothing after the block). Each call's arguments become the
 * JSON object OpenAI clients expect: a string="true" value as a JSON
 * string, any other value as the JSON text the model wrote. Anything that
 * does not follow the grammar is refused (the caller returns the text as
 * content instead).
 */
#pragma once

#include <stddef.h>

struct api_tool_call {
    char *name;
    char *arguments;            /* a JSON object as text */
};

/*
 * text[0..len) starts with DSV4_CHAT_TOOL_CALLS_START. Returns the number
 * of calls (>= 1) with *calls malloc'ed, or -1 when it is not well-formed.
 */
int api_dsml_parse(const char *text, size_t len, struct api_tool_call **calls);
void api_dsml_free(struct api_tool_call *calls, int n);
