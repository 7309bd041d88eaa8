/* SPDX-License-Identifier: MIT */
/*
 * Reading a small file from a model directory safely: the open cannot hang (O_NONBLOCK: a FIFO
 * or a device named config.json returns at once), only a regular file is read (after symlinks:
 * Hugging Face cache snapshots are symlinks into blobs/, so links are followed — the target
 * must be a regular file), and its size is capped before anything is allocated.
 */
#pragma once

#include <stddef.h>

#include "err.h"

/* The whole file into a NUL-terminated malloc'd *buf of *len bytes. -ENOENT as is (callers
 * treat a missing optional file as absent); -EINVAL not a regular file; -EFBIG over max. */
int dsv4_read_file(const char *path, size_t max, char **buf, size_t *len, struct dsv4_err *err);
/* Replace `path` with exactly data[0..len): a private temp file (0600, O_EXCL) written in full,
 * fsync'ed and renamed over it; on any failure (a full disk) the temp file is removed and
 * `path` is left as it was. */
int dsv4_write_file_atomic(const char *path, const void *data, size_t len,
                           struct dsv4_err *err);
