/* SPDX-License-Identifier: MIT */
/*
 * Shared-memory segments that are ours alone. /dev/shm is one namespace for every local user,
 * so a predictable name can be pre-created (or squatted) by someone else. Every segment of a
 * daemon set is named from a random 128-bit id kept in the set's run directory (mode 0700,
 * ours: nobody else can read it), created O_EXCL with mode 0600, and checked on every open:
 * a regular object owned by our effective uid with mode exactly 0600, else refused.
 */
#pragma once

#include <stddef.h>

#include "err.h"

#define DSV4_SHM_ID_LEN 32      /* hex digits of the 128-bit id */

/*
 * The set's id from RUN_DIR/shm-id (a regular file of ours, mode 0600, 32 hex digits) into
 * id[DSV4_SHM_ID_LEN + 1]. -ENOENT when there is none, -EPERM/-EPROTO when it is not ours or
 * malformed (the message names the file).
 */
int dsv4_shm_id_read(const char *run_dir, char *id, struct dsv4_err *err);
/*
 * A fresh id for a new start: written to RUN_DIR/shm-id (replacing the old file, O_EXCL on a
 * new inode, mode 0600). If `old` is non-NULL it receives the previous id ("" if none), so the
 * caller can remove what a crashed set left under it.
 */
int dsv4_shm_id_new(const char *run_dir, char *id, char *old, struct dsv4_err *err);
/* "/dsv4-<uid>-<id>-<what>" into buf[n]. */
int dsv4_shm_name(const char *id, const char *what, char *buf, size_t n, struct dsv4_err *err);
/*
 * shm_open(name, flags) that only returns segments that are ours alone: with O_CREAT the
 * caller must pass O_EXCL (a new object, mode 0600 whatever the umask); without, the existing
 * object must be a regular object of our euid with mode 0600 (-EPERM naming owner and mode).
 * Returns the fd (O_CLOEXEC) or a negative errno.
 */
int dsv4_shm_open_own(const char *name, int flags, struct dsv4_err *err);
