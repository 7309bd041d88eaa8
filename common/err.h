/* SPDX-License-Identifier: MIT */
/*
 * Errors meant for a person. Functions that can fail on user input (a
 * checkpoint, a config, a message) return a negative errno and fill a
 * struct dsv4_err with one line that names the file, the field or the
 * tensor, so `dsv4ctl` can print it as is. The struct may be NULL when the
 * caller only wants the code.
 */
#pragma once

#include "util.h"

struct dsv4_err {
    char msg[1024];
};

/* Format msg into *e (if e is non-NULL) and return `code` (a negative errno). */
int dsv4_errf(struct dsv4_err *e, int code, const char *fmt, ...) DSV4_PRINTF(3, 4);
