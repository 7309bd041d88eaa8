/* SPDX-License-Identifier: MIT */
/* Growable memory (buf.h). */
#include "buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dsv4_grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return;
    size_t n = *cap ? *cap : 16;
    while (n < need) {
        if (n > SIZE_MAX / 2 / size)
            dsv4_die("dsv4_grow: %zu elements of %zu bytes", need, size);
        n *= 2;
    }
    *p = dsv4_xrealloc(*p, n * size);
    *cap = n;
}

void dsv4_buf_append(struct dsv4_buf *b, const void *data, size_t n)
{
    if (n > SIZE_MAX - b->len - 1)
        dsv4_die("dsv4_buf_append: %zu bytes", n);
    DSV4_GROW(b->p, b->cap, b->len + n + 1);
    if (n)
        memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void dsv4_buf_printf(struct dsv4_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    DSV4_GROW(b->p, b->cap, b->len + (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void dsv4_buf_free(struct dsv4_buf *b)
{
    free(b->p);
    *b = (struct dsv4_buf){ 0 };
}
