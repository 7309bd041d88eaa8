/* SPDX-License-Identifier: MIT */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>

int dsv4_errf(struct dsv4_err *e, int code, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
        va_end(ap);
    }
    return code;
}
