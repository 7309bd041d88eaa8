/* SPDX-License-Identifier: MIT */
/*
 * Logging: one line per event, `2026-12-02T16:28:07.123Z LEVEL topic: message`
 * (UTC; no time stamp when stderr is a terminal), written to stderr in one write (the daemons' stderr is their log
 * file in the run directory; under `dsv4ctl start --foreground` the line is
 * also written to the descriptor named by DSV4_LOG_TEE_FD, the terminal).
 * The level comes from DSV4_LOG (error, warn, info, debug, trace; default
 * info). Library code logs at debug at most; the layer that decides logs
 * once. Messages a peer or the hot path can repeat at will go through
 * dsv4_log_rl: at most DSV4_LOG_LIMIT_BURST per call site per window, the
 * next line that passes says how many were suppressed.
 */
#pragma once

#include <stdatomic.h>
#include <stdint.h>

#include "util.h"

enum dsv4_log_level {
    DSV4_LOG_ERROR,
    DSV4_LOG_WARN,
    DSV4_LOG_INFO,
    DSV4_LOG_DEBUG,
    DSV4_LOG_TRACE,
};

void dsv4_log(enum dsv4_log_level level, const char *topic, const char *fmt, ...)
    DSV4_PRINTF(3, 4);
bool dsv4_log_enabled(enum dsv4_log_level level);
void dsv4_log_set_level(enum dsv4_log_level level);

#define dsv4_log_error(topic, ...) dsv4_log(DSV4_LOG_ERROR, topic, __VA_ARGS__)
#define dsv4_log_warn(topic, ...) dsv4_log(DSV4_LOG_WARN, topic, __VA_ARGS__)
#define dsv4_log_info(topic, ...) dsv4_log(DSV4_LOG_INFO, topic, __VA_ARGS__)
#define dsv4_log_debug(topic, ...) dsv4_log(DSV4_LOG_DEBUG, topic, __VA_ARGS__)

#define DSV4_LOG_LIMIT_BURST 10
#define DSV4_LOG_LIMIT_WINDOW_NS (5ull * 1000000000ull)

struct dsv4_log_limit {
    _Atomic uint64_t window_ns;     /* start of the current window (0: none yet) */
    _Atomic uint32_t n, dropped;
};

/* 1 if a message may go out at now_ns; *dropped = messages suppressed since the last one that
 * went out, reported once when a new window opens. */
uint32_t dsv4_log_limit_check(struct dsv4_log_limit *rl, uint64_t now_ns, uint32_t *dropped);
void dsv4_log_limited(struct dsv4_log_limit *rl, enum dsv4_log_level level, const char *topic,
                      const char *fmt, ...) DSV4_PRINTF(4, 5);

/* Rate-limited per call site. */
#define dsv4_log_rl(level, topic, ...)                                      \
    do {                                                                    \
        static struct dsv4_log_limit dsv4_log_limit_;                       \
        dsv4_log_limited(&dsv4_log_limit_, level, topic, __VA_ARGS__);      \
    } while (0)
