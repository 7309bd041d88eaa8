/* SPDX-License-Identifier: MIT */
/*
 * The fetcher's control messages (ZeroMQ REQ/REP, one JSON object per
 * message, cJSON). Every message carries "v": DSV4_FETCHER_MSG_VERSION; a
 * reply has "ok" and, when false, "error". Requests: {"v":1,"cmd":C} with C
 * one of health, stats, pin, unpin (+ "layer", "expert"), save-hot, shutdown.
 * This file is the only place that knows the encoding (the wire-format issue
 * will move it under proto/).
 */
#pragma once

#include <stddef.h>

#include "dsv4_expert_shm.h"
#include "err.h"

#define DSV4_FETCHER_MSG_VERSION 1

enum dsv4_fetcher_cmd {
    DSV4_FETCHER_CMD_HEALTH,
    DSV4_FETCHER_CMD_STATS,
    DSV4_FETCHER_CMD_PIN,
    DSV4_FETCHER_CMD_UNPIN,
    DSV4_FETCHER_CMD_SAVE_HOT,
    DSV4_FETCHER_CMD_SHUTDOWN,
};

struct dsv4_fetcher_msg {
    enum dsv4_fetcher_cmd cmd;
    int layer, expert;
};

/* Encode a request (malloc'd text). */
char *dsv4_fetcher_msg_request(const struct dsv4_fetcher_msg *m);
/* Decode a request; -EPROTO with a message for a bad version, command or field. */
int dsv4_fetcher_msg_parse(const char *buf, size_t len, struct dsv4_fetcher_msg *ret,
                           struct dsv4_err *err);
/* Replies (malloc'd text). */
char *dsv4_fetcher_msg_error(const char *msg);
char *dsv4_fetcher_msg_ok(void);
char *dsv4_fetcher_msg_health(struct dsv4_expert_shm *s, const char *describe);
char *dsv4_fetcher_msg_stats(struct dsv4_expert_shm *s);
