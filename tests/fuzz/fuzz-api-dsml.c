/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for dsv4-api's DSML tool-call parser (daemons/api/dsml.c): the
 * input is what a model wrote after its content, behind the tool-call start
 * marker. Accepted calls must have names and an arguments text that begins
 * with '{' and ends with '}'; the parser must never read outside the input
 * (the copy is exactly its size).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "dsml.h"

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "invariant failed: %s\n", #x); abort(); } } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const size_t ml = strlen(DSV4_CHAT_TOOL_CALLS_START) - 1;  /* the parser expects ">\n" next */
    char *text = malloc(ml + size + 1);
    memcpy(text, DSV4_CHAT_TOOL_CALLS_START, ml);
    memcpy(text + ml, data, size);
    struct api_tool_call *calls;
    int n = api_dsml_parse(text, ml + size, &calls);
    CHECK(n == -1 || n >= 1);
    for (int i = 0; i < n; i++) {
        size_t al = strlen(calls[i].arguments);
        CHECK(calls[i].name != NULL && al >= 2);
        CHECK(calls[i].arguments[0] == '{' && calls[i].arguments[al - 1] == '}');
    }
    if (n > 0)
        api_dsml_free(calls, n);
    else
        CHECK(calls == NULL);
    free(text);
    return 0;
}
