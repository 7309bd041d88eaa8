/* SPDX-License-Identifier: MIT */
/* The pre-parse scan of JSON text (json_limits.h). */
#include "json_limits.h"

#include <errno.h>
#include <stdbool.h>

#define MAX_TRACKED_DEPTH 64

int dsv4_json_prescan(const char *text, size_t len, const struct dsv4_json_limits *lim,
                      const char *what, struct dsv4_err *err)
{
    /* per open container: is it an array, and how many elements/members so far */
    char is_array[MAX_TRACKED_DEPTH];
    uint64_t count[MAX_TRACKED_DEPTH];
    uint32_t depth = 0;
    uint64_t nodes = 0;
    bool value_started = false;     /* a scalar is being read (counted once) */
    uint32_t max_depth = lim->max_depth < MAX_TRACKED_DEPTH ? lim->max_depth : MAX_TRACKED_DEPTH;
    for (size_t i = 0; i < len; i++) {
        char ch = text[i];
        if (ch == '"') {
            size_t start = i++;
            while (i < len && text[i] != '"')
                i += text[i] == '\\' ? 2 : 1;
            if (i - start - 1 > lim->max_string)
                return dsv4_errf(err, -E2BIG, "%s: a string of more than %llu bytes at byte %zu",
                                 what, (unsigned long long)lim->max_string, start);
            /* an object key is not a value; a string after ':' or in an array is */
            size_t j = i + 1;
            while (j < len && (text[j] == ' ' || text[j] == '\t' || text[j] == '\n' ||
                               text[j] == '\r'))
                j++;
            bool is_key = depth > 0 && !is_array[depth - 1] && j < len && text[j] == ':';
            if (!is_key && ++nodes > lim->max_nodes)
                goto too_many;
            value_started = false;
            continue;
        }
        if (ch == '{' || ch == '[') {
            if (++nodes > lim->max_nodes)
                goto too_many;
            if (depth >= max_depth)
                return dsv4_errf(err, -E2BIG, "%s: nesting deeper than %u at byte %zu", what,
                                 max_depth, i);
            is_array[depth] = ch == '[';
            count[depth] = 0;
            depth++;
            value_started = false;
            continue;
        }
        if (ch == '}' || ch == ']') {
            if (depth)
                depth--;
            value_started = false;
            continue;
        }
        if (ch == ',' || ch == ':') {
            value_started = false;
            if (ch == ',' && depth) {
                uint64_t c = ++count[depth - 1];
                uint64_t cap = is_array[depth - 1] ? lim->max_array : lim->max_members;
                if (c >= cap)   /* c commas: c + 1 entries */
                    return dsv4_errf(err, -E2BIG, "%s: an %s of more than %llu entries at byte "
                                     "%zu", what, is_array[depth - 1] ? "array" : "object",
                                     (unsigned long long)cap, i);
            }
            continue;
        }
        if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
            value_started = false;
            continue;
        }
        if (!value_started) {   /* a number, true, false or null */
            value_started = true;
            if (++nodes > lim->max_nodes)
                goto too_many;
        }
    }
    return 0;
too_many:
    return dsv4_errf(err, -E2BIG, "%s: more than %llu JSON values", what,
                     (unsigned long long)lim->max_nodes);
}
