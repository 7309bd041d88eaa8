/* SPDX-License-Identifier: MIT */
/*
 * Growable memory, the one way the project grows a string or an array (systemd's
 * GREEDY_REALLOC habit): capacity doubles, so n appends cost O(n); allocation failure dies
 * loudly like every dsv4_x* allocator.
 */
#pragma once

#include <stddef.h>

#include "util.h"

/* Make room for `need` elements of `size` bytes in *p (capacity *cap elements). */
void dsv4_grow(void **p, size_t *cap, size_t need, size_t size);
#define DSV4_GROW(ptr, cap, need) \
    dsv4_grow((void **)&(ptr), &(cap), (need), sizeof(*(ptr)))

/* A byte string, always NUL-terminated once anything was appended. */
struct dsv4_buf {
    char *p;
    size_t len, cap;
};

void dsv4_buf_append(struct dsv4_buf *b, const void *data, size_t n);
void dsv4_buf_printf(struct dsv4_buf *b, const char *fmt, ...) DSV4_PRINTF(2, 3);
void dsv4_buf_free(struct dsv4_buf *b);
