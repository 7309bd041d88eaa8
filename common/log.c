/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdatomic.h>

#include "log.h"
#include "parse.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int log_level = -1;
static int tee_fd = -2;     /* -2: not read from the environment yet */
static int stamp = -1;      /* timestamps unless stderr is a terminal */

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

static _Atomic uint64_t lost_lines; /* lines lost since the last successful write */
static _Atomic int lost_errno;

static void vlog(enum dsv4_log_level level, const char *topic, const char *suffix,
                 const char *fmt, va_list ap) DSV4_PRINTF(4, 0);

static void vlog(enum dsv4_log_level level, const char *topic, const char *suffix,
                 const char *fmt, va_list ap)
{
    char line[2304];
    int n = 0;
    if (stamp < 0)
        stamp = !isatty(2);
    if (stamp) {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        n = (int)strftime(line, 32, "%Y-%m-%dT%H:%M:%S", &tm);
        n += snprintf(line + n, sizeof(line) - (size_t)n, ".%03ldZ ", ts.tv_nsec / 1000000);
    }
    n += snprintf(line + n, sizeof(line) - (size_t)n, "%s %s: ", level_names[level], topic);
    int k = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    n = k < 0 ? n : DSV4_MIN(n + k, (int)sizeof(line) - 2);
    if (suffix && n < (int)sizeof(line) - 2)
        n += snprintf(line + n, sizeof(line) - (size_t)n - 1, "%s", suffix);
    n = DSV4_MIN(n, (int)sizeof(line) - 2);
    line[n++] = '\n';
    /* Lines that could not be written (a full disk under the log file) are counted and owned
     * up to by the first line that can be: never dropped silently. */
    uint64_t lost = atomic_exchange(&lost_lines, 0);
    if (lost) {
        char note[160];
        int m = snprintf(note, sizeof(note), "%s: %llu log line(s) were lost: %s\n",
                         level_names[DSV4_LOG_WARN], (unsigned long long)lost,
                         strerror(atomic_load(&lost_errno)));
        if (m <= 0 || write(2, note, (size_t)m) < 0)
            atomic_fetch_add(&lost_lines, lost);
    }
    /* one write per line: lines of concurrent threads never interleave */
    if (write(2, line, (size_t)n) < 0) {
        atomic_store(&lost_errno, errno);
        atomic_fetch_add(&lost_lines, 1);
        return;
    }
    if (tee_fd == -2) {
        const char *t = secure_getenv("DSV4_LOG_TEE_FD");
        if (!t || dsv4_parse_int(t, 3, 1 << 20, &tee_fd) < 0)
            tee_fd = -1;
    }
    if (tee_fd > 2 && write(tee_fd, line, (size_t)n) < 0)
        tee_fd = -1;
}

void dsv4_log(enum dsv4_log_level level, const char *topic, const char *fmt, ...)
{
    if (!dsv4_log_enabled(level))
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, topic, NULL, fmt, ap);
    va_end(ap);
}

uint32_t dsv4_log_limit_check(struct dsv4_log_limit *rl, uint64_t now_ns, uint32_t *dropped)
{
    uint64_t start = atomic_load_explicit(&rl->window_ns, memory_order_relaxed);
    *dropped = 0;
    if (start == 0 || now_ns - start >= DSV4_LOG_LIMIT_WINDOW_NS) {
        if (atomic_compare_exchange_strong(&rl->window_ns, &start, now_ns ? now_ns : 1)) {
            *dropped = atomic_exchange(&rl->dropped, 0);
            atomic_store(&rl->n, 1);
            return 1;
        }
    }
    if (atomic_fetch_add(&rl->n, 1) < DSV4_LOG_LIMIT_BURST)
        return 1;
    atomic_fetch_add(&rl->dropped, 1);
    return 0;
}

void dsv4_log_limited(struct dsv4_log_limit *rl, enum dsv4_log_level level, const char *topic,
                      const char *fmt, ...)
{
    if (!dsv4_log_enabled(level))
        return;
    uint32_t dropped;
    if (!dsv4_log_limit_check(rl, dsv4_now_ns(), &dropped))
        return;
    char suffix[64] = "";
    if (dropped)
        snprintf(suffix, sizeof(suffix), " (%u like it suppressed)", dropped);
    va_list ap;
    va_start(ap, fmt);
    vlog(level, topic, suffix, fmt, ap);
    va_end(ap);
}
