/* SPDX-License-Identifier: MIT */
/*
 * Logging: one line per event, `LEVEL topic: message`, to stderr (the
 * daemons' stderr is their log file in the run directory). The level comes
 * from DSV4_LOG (error, warn, info, debug, trace; default info). Library
 * code logs at debug at most; the layer that decides logs once.
 */
#pragma once

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
