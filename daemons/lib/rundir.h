/* SPDX-License-Identifier: MIT */
/*
 * The run directory: where the supervisor's lock and pid file, the daemons'
 * logs and the ipc:// sockets live, and what names the stats pages. One
 * resolution rule for every process: --run-dir, else $DSV4_RUN_DIR, else
 * $XDG_RUNTIME_DIR/dsv4, else /tmp/dsv4-$UID. Mode 0700, owned by us.
 */
#pragma once

#include <stdbool.h>

#include "dsv4_stats.h"
#include "err.h"

#define DSV4_PATH_MAX 256

/* Resolve (arg may be NULL) into out[DSV4_PATH_MAX]; no filesystem access. */
void dsv4_rundir_resolve(const char *arg, char *out);
/* Create it (and parents) mode 0700; refuse a symlink, another owner or group/other access. */
int dsv4_rundir_create(const char *dir, struct dsv4_err *err);
/* "ipc://DIR/NAME.sock" into out; -ENAMETOOLONG past the 107-byte ipc limit. */
int dsv4_rundir_endpoint(const char *dir, const char *name, char *out, struct dsv4_err *err);
/* The POSIX shm name of a role's stats page: "/dsv4-<uid>-<the set's id>-<role>" (shm.h). */
int dsv4_stats_name(const char *dir, int role, char *out, size_t n, struct dsv4_err *err);
/* Create (supervisor: a new zeroed page, O_EXCL, 0600) or map (owner and mode checked). */
int dsv4_stats_create(const char *dir, int role, struct dsv4_stats_shm **ret,
                      struct dsv4_err *err);
int dsv4_stats_map(const char *dir, int role, bool writable, struct dsv4_stats_shm **ret,
                   struct dsv4_err *err);
void dsv4_stats_unmap(struct dsv4_stats_shm *s);
void dsv4_stats_unlink(const char *dir, int role);
void dsv4_hist_add(struct dsv4_hist_shm *h, uint64_t us);
/* A count histogram (DSV4_COUNT_BOUNDS); sum_us holds the sum of the counts. */
void dsv4_count_hist_add(struct dsv4_hist_shm *h, uint64_t n);
/*
 * Path of a daemon executable ("dsv4-compute"): $DSV4_LIBEXEC_DIR/NAME, else next to the
 * running executable (installed: one bindir), else in the build tree (daemons/<role>/NAME seen
 * from tools/dsv4ctl/ or from another daemons/<role>/). NULL if none is executable.
 */
const char *dsv4_daemon_exe(const char *name, char *buf, size_t n);
/* The run dir holds nothing but the set's own files (refuse to run in a directory of the
 * user's, whose files stop would delete): -EEXIST naming the first foreign entry. */
int dsv4_rundir_check_dedicated(const char *dir, struct dsv4_err *err);
/* Remove what a set leaves in shared memory and in its run dir (segments under its id,
 * sockets, the model and address files); returns how many segments and sockets were there. */
int dsv4_rundir_remove_leftovers(const char *dir, bool all_files);
/* Pid of the live supervisor holding DIR/supervisor.lock, or 0 (none), -1 (the lock is held
 * but names no pid yet), or DSV4_SUPERVISOR_UNREADABLE with errno set (the lock file cannot be
 * opened or read: EIO...; whether a set runs is unknown). */
#define DSV4_SUPERVISOR_UNREADABLE (-2)
int dsv4_rundir_supervisor_pid(const char *dir);
