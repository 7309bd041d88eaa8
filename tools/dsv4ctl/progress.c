/* SPDX-License-Identifier: MIT */
/* Prefill progress display (progress.h). */
#include "progress.h"

#include <stdio.h>
#include <unistd.h>

#include "util.h"

void progress_init(struct prefill_progress *p, int mode)
{
    p->tty = isatty(STDERR_FILENO);
    p->on = mode < 0 ? p->tty : mode > 0;
    p->shown = false;
    p->t0 = dsv4_now_ns();
}

void progress_update(struct prefill_progress *p, uint64_t done, uint64_t total)
{
    if (!p->on || total == 0)
        return;
    double s = (double)(dsv4_now_ns() - p->t0) / 1e9, rate = s > 0 ? (double)done / s : 0;
    char eta[32] = "?";
    if (rate > 0)
        snprintf(eta, sizeof(eta), "%.1f s", (double)(total - done) / rate);
    fprintf(stderr, "%sprefill %llu/%llu tokens (%.0f%%), %.1f tok/s, ETA %s%s", p->tty ? "\r" : "",
            (unsigned long long)done, (unsigned long long)total, 100.0 * (double)done / (double)total,
            rate, eta, p->tty ? "\033[K" : "\n");
    fflush(stderr);
    p->shown = true;
}

void progress_end(struct prefill_progress *p)
{
    if (p->shown && p->tty) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    p->shown = false;
    p->on = false;
}
