/* SPDX-License-Identifier: MIT */
/*
 * The prefill progress display of `dsv4ctl gen` and `dsv4ctl run`: tokens
 * done / total, rate and ETA on stderr (never stdout, so `--format ids`
 * output stays clean). On a terminal it is one line rewritten in place and
 * erased when the first token arrives; forced on elsewhere (--progress) it
 * prints one line per update. Auto (the default) shows it only on a tty.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct prefill_progress {
    bool on, tty, shown;
    uint64_t t0;                /* when the prefill was submitted */
};

/* mode: -1 auto (stderr is a tty), 0 off (--no-progress), 1 on (--progress). */
void progress_init(struct prefill_progress *p, int mode);
void progress_update(struct prefill_progress *p, uint64_t done, uint64_t total);
/* Erase the terminal line (call before the first output token). */
void progress_end(struct prefill_progress *p);
