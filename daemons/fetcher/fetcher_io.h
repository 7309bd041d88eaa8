/* SPDX-License-Identifier: MIT */
/*
 * Block reads for the fetcher: io_uring (liburing) with several reads in
 * flight, registered buffers when the kernel takes them, or synchronous pread
 * when io_uring is unavailable or DSV4_IO=pread. Completions are returned
 * with the kernel's result; the caller verifies lengths.
 *
 * Test-only fault injection (DSV4_FETCHER_FAULT, read at open):
 *   eio:N      the N-th read (1-based) completes with -EIO
 *   short:N    the N-th read completes with half its length
 *   einval:N   the N-th read completes with -EINVAL (O_DIRECT refused by the filesystem)
 *   delay:MS   every completion is delivered MS milliseconds late (kill -9 tests)
 * Several may be given, separated by commas.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "err.h"

typedef struct dsv4_fio dsv4_fio;

enum dsv4_fio_backend { DSV4_FIO_URING, DSV4_FIO_PREAD };

struct dsv4_fio_done {
    uint64_t tag;
    int64_t res;  /* bytes read or a negative errno */
};

/* `bufs`: regions registered as fixed buffers (one per slot) when possible. */
int dsv4_fio_open(enum dsv4_fio_backend want, uint32_t queue_depth, const struct iovec *bufs,
                  uint32_t n_bufs, dsv4_fio **ret, struct dsv4_err *err);
dsv4_fio *dsv4_fio_free(dsv4_fio *io);
enum dsv4_fio_backend dsv4_fio_backend(const dsv4_fio *io);
bool dsv4_fio_registered(const dsv4_fio *io);
uint32_t dsv4_fio_in_flight(const dsv4_fio *io);
uint32_t dsv4_fio_queue_depth(const dsv4_fio *io);

/* Queue one read of len bytes at off into buf (inside fixed buffer buf_index, or -1). */
int dsv4_fio_read(dsv4_fio *io, int fd, void *buf, uint32_t len, uint64_t off, int buf_index,
                  uint64_t tag);
/* Submit what is queued, then collect up to max completions, waiting at most wait_ns for the
 * first one when none is ready (0 = do not wait). Returns the number collected. */
int dsv4_fio_reap(dsv4_fio *io, struct dsv4_fio_done *out, int max, uint64_t wait_ns);
