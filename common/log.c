/* SPDX-License-Identifier: MIT */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int log_level = -1;

static const char *const level_names[] = { "error", "warn", "info", "debug", "trace" };

static int level_from_env(void)
{
    const char *v = secure_getenv("DSV4_LOG");
    if (v)
        for (size_t i = 0; i < DSV4_ARRAY_SIZE(level_names); i++)
            if (strcmp(v, level_names[i]) == 0)
                return (int)i;
    return DSV4_LOG_INFO;
}

bool dsv4_log_enabled(enum dsv4_log_level level)
{
    if (log_level < 0)
        log_level = level_from_env();
    return (int)level <= log_level;
}

void dsv4_log_set_level(enum dsv4_log_level level)
{
    log_level = (int)level;
}

void dsv4_log(enum dsv4_log_level level, const char *topic, const char *fmt, ...)
{
    if (!dsv4_log_enabled(level))
        return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s %s: %s\n", level_names[level], topic, line);
}
