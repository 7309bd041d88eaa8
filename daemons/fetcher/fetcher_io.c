/* SPDX-License-Identifier: MIT */
/*
 * io_uring and pread backends behind one queue/reap interface, plus the
 * test-only fault injection described in fetcher_io.h.
 */
#include "fetcher_io.h"

#include <errno.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

struct dsv4_fio {
    enum dsv4_fio_backend backend;
    struct io_uring ring;
    bool registered;
    uint32_t qd, in_flight, queued;
    /* pread backend: completed reads waiting to be reaped. */
    struct dsv4_fio_done *done;
    uint32_t n_done;
    /* fault injection */
    uint64_t n_reads;
    uint64_t fault_eio, fault_short, fault_einval, delay_ms;
};

static void parse_faults(dsv4_fio *io)
{
    const char *env = getenv("DSV4_FETCHER_FAULT");
    if (!env)
        return;
    char *copy = dsv4_xstrdup(env), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        unsigned long long v = 0;
        if (sscanf(tok, "eio:%llu", &v) == 1)
            io->fault_eio = v;
        else if (sscanf(tok, "short:%llu", &v) == 1)
            io->fault_short = v;
        else if (sscanf(tok, "einval:%llu", &v) == 1)
            io->fault_einval = v;
        else if (sscanf(tok, "delay:%llu", &v) == 1)
            io->delay_ms = v;
    }
    free(copy);
}

/* Apply injected faults to the n-th read's result (n is 1-based). */
static int64_t inject(dsv4_fio *io, int64_t res)
{
    uint64_t n = ++io->n_reads;
    if (io->fault_eio && n == io->fault_eio)
        return -EIO;
    if (io->fault_einval && n == io->fault_einval)
        return -EINVAL;
    if (io->fault_short && n == io->fault_short && res > 0)
        return res / 2;
    return res;
}

int dsv4_fio_open(enum dsv4_fio_backend want, uint32_t queue_depth, const struct iovec *bufs,
                  uint32_t n_bufs, dsv4_fio **ret, struct dsv4_err *err)
{
    dsv4_fio *io = dsv4_xcalloc(1, sizeof(*io));
    io->qd = queue_depth ? queue_depth : 1;
    parse_faults(io);
    io->backend = DSV4_FIO_PREAD;
    if (want == DSV4_FIO_URING) {
        int rc = io_uring_queue_init(io->qd * 2, &io->ring, 0);
        if (rc == 0) {
            io->backend = DSV4_FIO_URING;
            /* Pins the pages (they must already carry their NUMA policy); optional. */
            if (n_bufs && io_uring_register_buffers(&io->ring, bufs, n_bufs) == 0)
                io->registered = true;
        } else {
            dsv4_errf(err, rc, "io_uring unavailable (%s), using pread", strerror(-rc));
        }
    }
    io->done = dsv4_xcalloc(io->qd, sizeof(*io->done));
    *ret = io;
    return 0;
}

dsv4_fio *dsv4_fio_free(dsv4_fio *io)
{
    if (!io)
        return NULL;
    if (io->backend == DSV4_FIO_URING)
        io_uring_queue_exit(&io->ring);
    free(io->done);
    free(io);
    return NULL;
}

enum dsv4_fio_backend dsv4_fio_backend(const dsv4_fio *io)
{
    return io->backend;
}

bool dsv4_fio_registered(const dsv4_fio *io)
{
    return io->registered;
}

uint32_t dsv4_fio_in_flight(const dsv4_fio *io)
{
    return io->in_flight;
}

uint32_t dsv4_fio_queue_depth(const dsv4_fio *io)
{
    return io->qd;
}

int dsv4_fio_read(dsv4_fio *io, int fd, void *buf, uint32_t len, uint64_t off, int buf_index,
                  uint64_t tag)
{
    if (io->in_flight >= io->qd)
        return -EBUSY;
    if (io->backend == DSV4_FIO_PREAD) {
        uint32_t got = 0;
        int64_t res = 0;
        while (got < len) { /* a regular file returns less only at end of file */
            ssize_t r = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0) {
                res = -errno;
                break;
            }
            if (r == 0)
                break;
            got += (uint32_t)r;
        }
        io->done[io->n_done++] = (struct dsv4_fio_done){ tag, res < 0 ? res : (int64_t)got };
        io->in_flight++;
        return 0;
    }
    struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
    if (!sqe)
        return -EBUSY;
    if (io->registered && buf_index >= 0)
        io_uring_prep_read_fixed(sqe, fd, buf, len, off, buf_index);
    else
        io_uring_prep_read(sqe, fd, buf, len, off);
    io_uring_sqe_set_data64(sqe, tag);
    io->in_flight++;
    io->queued++;
    return 0;
}

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

int dsv4_fio_reap(dsv4_fio *io, struct dsv4_fio_done *out, int max, uint64_t wait_ns)
{
    int n = 0;
    if (io->backend == DSV4_FIO_PREAD) {
        while (n < max && io->n_done) {
            out[n] = io->done[0];
            memmove(io->done, io->done + 1, (io->n_done - 1) * sizeof(*io->done));
            io->n_done--;
            io->in_flight--;
            n++;
        }
    } else {
        if (io->queued) {
            io_uring_submit(&io->ring);
            io->queued = 0;
        }
        struct io_uring_cqe *cqe;
        while (n < max && io->in_flight) {
            int rc = io_uring_peek_cqe(&io->ring, &cqe);
            if (rc == -EAGAIN && n == 0 && wait_ns) {
                struct __kernel_timespec ts = { (long long)(wait_ns / DSV4_NSEC_PER_SEC),
                                                (long long)(wait_ns % DSV4_NSEC_PER_SEC) };
                rc = io_uring_wait_cqe_timeout(&io->ring, &cqe, &ts);
            }
            if (rc < 0)
                break;
            out[n].tag = io_uring_cqe_get_data64(cqe);
            out[n].res = cqe->res;
            io_uring_cqe_seen(&io->ring, cqe);
            io->in_flight--;
            n++;
        }
    }
    if (n && io->delay_ms)
        sleep_ms(io->delay_ms);
    for (int i = 0; i < n; i++)
        out[i].res = inject(io, out[i].res);
    return n;
}
