/* SPDX-License-Identifier: MIT */
#include "prompt.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

bool dsv4ctl_parse_ids(const char *s, struct dsv4_ids *out)
{
    size_t n0 = out->n;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v > INT32_MAX || (*end && *end != ','))
            return false;
        dsv4_ids_push(out, (uint32_t)v);
        p = *end ? end + 1 : end;
        if (*end && !*p)
            return false;
    }
    return out->n > n0;
}
