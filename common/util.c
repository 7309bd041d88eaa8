/* SPDX-License-Identifier: MIT */
#include "exitcode.h"
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void dsv4_die(const char *fmt, ...)
{
    va_list ap;
    fputs("dsv4: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(DSV4_EXIT_SOFTWARE);
}

void *dsv4_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        dsv4_die("out of memory allocating %zu bytes", n);
    return p;
}

void *dsv4_xcalloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        dsv4_die("out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

void *dsv4_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        dsv4_die("out of memory reallocating %zu bytes", n);
    return q;
}

char *dsv4_xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = dsv4_xmalloc(n);
    memcpy(p, s, n);
    return p;
}

void *dsv4_xaligned_alloc(size_t alignment, size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, alignment, n ? n : alignment) != 0)
        dsv4_die("out of memory allocating %zu bytes aligned to %zu", n, alignment);
    return p;
}

uint64_t dsv4_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * DSV4_NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

void dsv4_cpu_model(char *out, size_t n)
{
    snprintf(out, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            const char *c = strchr(line, ':');
            if (c) {
                snprintf(out, n, "%s", c[1] == ' ' ? c + 2 : c + 1);
                out[strcspn(out, "\n")] = '\0';
            }
            break;
        }
    fclose(f);
}
