/* SPDX-License-Identifier: MIT */
/* Test helper: a whole JSON file parsed (goldens), or NULL with the reason on stderr. */
#pragma once

#include <cJSON.h>
#include <stdlib.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

static inline cJSON *load_json_file(const char *prog, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open %s: %s\n", prog, path, strerror(errno));
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = dsv4_xmalloc((size_t)(len > 0 ? len : 0) + 1);
    size_t got = fread(text, 1, (size_t)(len > 0 ? len : 0), f);
    fclose(f);
    text[got] = 0;
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j)
        fprintf(stderr, "%s: %s is not JSON\n", prog, path);
    return j;
}
