/* SPDX-License-Identifier: MIT */
/*
 * A scan of JSON text before any tree is built: cJSON allocates a ~64-byte node per value, so
 * a hostile 4 MB header of "[1,1,1,…]" becomes hundreds of MB before a single field can be
 * checked. This pass counts values, nesting, array and object sizes and string lengths in
 * O(1) memory and refuses text past the limits the caller sets for that kind of document.
 * It does not validate JSON (cJSON still does); it only bounds what parsing may cost.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "err.h"

struct dsv4_json_limits {
    uint64_t max_nodes;     /* values in the whole document */
    uint32_t max_depth;     /* nesting of arrays/objects (the top level is 1) */
    uint64_t max_array;     /* elements of one array */
    uint64_t max_members;   /* members of one object */
    uint64_t max_string;    /* bytes of one string (escapes counted as written) */
};

/* 0, or -E2BIG naming `what`, the limit and the byte offset where it was passed. */
int dsv4_json_prescan(const char *text, size_t len, const struct dsv4_json_limits *lim,
                      const char *what, struct dsv4_err *err);
