/* SPDX-License-Identifier: MIT */
/*
 * A test-only LD_PRELOAD library (tests/e2e/test_rundir_eio.py): I/O errors on one directory.
 *
 *   DSV4_EIO_DIR=/abs/run/dir      the directory whose files fail
 *   DSV4_EIO_SWITCH=/abs/file      faults are on while this file exists (outside that dir)
 *   DSV4_EIO_ONLY=name,name        optional: only files whose names start so (in that dir) fail
 *
 * While on, opening a path under the directory (open*, fopen*) and reading, writing or syncing
 * a descriptor that refers to a file under it (read, pread, readv, write, pwrite, writev,
 * fsync, fdatasync) fail with EIO, as a failing disk would answer. Descriptors are tracked from
 * their open, through dup/dup2/dup3/fcntl(F_DUPFD) and close, and at load time from
 * /proc/self/fd (a daemon's stderr is its log file, inherited across exec). Sockets, shared
 * memory and everything else pass through.
 */
#undef _FILE_OFFSET_BITS     /* open and open64, pread and pread64... are each defined here */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_FD 4096

static char dir[PATH_MAX];
static size_t dir_len;
static const char *sw;
static const char *only;    /* DSV4_EIO_ONLY: a comma list of the file names that fail */
static unsigned char marked[MAX_FD];

#define REAL(ret, name, ...)                                      \
    static ret (*real_##name)(__VA_ARGS__);                       \
    if (!real_##name)                                             \
        *(void **)&real_##name = dlsym(RTLD_NEXT, #name)

static bool on(void)
{
    return dir_len && sw && access(sw, F_OK) == 0;
}

static bool under(const char *path)
{
    if (!dir_len || !path)
        return false;
    char abs[PATH_MAX];
    if (path[0] != '/') {
        if (!getcwd(abs, sizeof(abs)) || strlen(abs) + strlen(path) + 2 > sizeof(abs))
            return false;
        strcat(abs, "/");
        strcat(abs, path);
        path = abs;
    }
    if (strncmp(path, dir, dir_len) != 0 || (path[dir_len] != '/' && path[dir_len] != '\0'))
        return false;
    if (!only)
        return true;
    const char *base = strrchr(path, '/') + 1;
    size_t n = strlen(base);
    for (const char *p = only; *p;) {
        size_t k = strcspn(p, ",");
        if (k <= n && strncmp(p, base, k) == 0)  /* a prefix: model matches model.tmp too */
            return true;
        p += k + (p[k] == ',');
    }
    return false;
}

static void mark(int fd, bool v)
{
    if (fd >= 0 && fd < MAX_FD)
        marked[fd] = v;
}

static bool bad_fd(int fd)
{
    return fd >= 0 && fd < MAX_FD && marked[fd] && on();
}

__attribute__((constructor)) static void init(void)
{
    const char *d = getenv("DSV4_EIO_DIR");
    sw = getenv("DSV4_EIO_SWITCH");
    only = getenv("DSV4_EIO_ONLY");
    if (!d || !realpath(d, dir)) {
        if (d && strlen(d) < sizeof(dir))
            strcpy(dir, d);     /* not there yet (start creates it) */
        else
            return;
    }
    dir_len = strlen(dir);
    for (int fd = 0; fd < 256; fd++) {
        char link[64], target[PATH_MAX];
        snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, target, sizeof(target) - 1);
        if (n > 0) {
            target[n] = '\0';
            mark(fd, under(target));
        }
    }
}

static int opened(int fd, const char *path)
{
    if (fd >= 0)
        mark(fd, under(path));
    return fd;
}

#define OPEN_BODY()                                                   \
    if (under(path) && on()) {                                        \
        errno = EIO;                                                  \
        return -1;                                                    \
    }                                                                 \
    mode_t mode = 0;                                                  \
    if (flags & (O_CREAT | __O_TMPFILE)) {                            \
        va_list ap;                                                   \
        va_start(ap, flags);                                          \
        mode = (mode_t)va_arg(ap, int);                               \
        va_end(ap);                                                   \
    }

int open(const char *path, int flags, ...)
{
    OPEN_BODY();
    REAL(int, open, const char *, int, ...);
    return opened(real_open(path, flags, mode), path);
}

int open64(const char *path, int flags, ...)
{
    OPEN_BODY();
    REAL(int, open64, const char *, int, ...);
    return opened(real_open64(path, flags, mode), path);
}

int openat(int at, const char *path, int flags, ...)
{
    OPEN_BODY();
    REAL(int, openat, int, const char *, int, ...);
    return opened(real_openat(at, path, flags, mode), path);
}

int openat64(int at, const char *path, int flags, ...)
{
    OPEN_BODY();
    REAL(int, openat64, int, const char *, int, ...);
    return opened(real_openat64(at, path, flags, mode), path);
}

int __open_2(const char *path, int flags);
int __open_2(const char *path, int flags)
{
    return open(path, flags);
}

int __open64_2(const char *path, int flags);
int __open64_2(const char *path, int flags)
{
    return open64(path, flags);
}

FILE *fopen(const char *path, const char *m)
{
    if (under(path) && on()) {
        errno = EIO;
        return NULL;
    }
    REAL(FILE *, fopen, const char *, const char *);
    FILE *f = real_fopen(path, m);
    if (f)
        mark(fileno(f), under(path));
    return f;
}

FILE *fopen64(const char *path, const char *m)
{
    if (under(path) && on()) {
        errno = EIO;
        return NULL;
    }
    REAL(FILE *, fopen64, const char *, const char *);
    FILE *f = real_fopen64(path, m);
    if (f)
        mark(fileno(f), under(path));
    return f;
}

int close(int fd)
{
    REAL(int, close, int);
    mark(fd, false);
    return real_close(fd);
}

int dup(int fd)
{
    REAL(int, dup, int);
    int r = real_dup(fd);
    if (r >= 0 && fd >= 0 && fd < MAX_FD)
        mark(r, marked[fd]);
    return r;
}

int dup2(int fd, int to)
{
    REAL(int, dup2, int, int);
    int r = real_dup2(fd, to);
    if (r >= 0 && fd >= 0 && fd < MAX_FD)
        mark(r, marked[fd]);
    return r;
}

int dup3(int fd, int to, int flags)
{
    REAL(int, dup3, int, int, int);
    int r = real_dup3(fd, to, flags);
    if (r >= 0 && fd >= 0 && fd < MAX_FD)
        mark(r, marked[fd]);
    return r;
}

int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    long arg = va_arg(ap, long);
    va_end(ap);
    REAL(int, fcntl, int, int, ...);
    int r = real_fcntl(fd, cmd, arg);
    if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && fd >= 0 && fd < MAX_FD)
        mark(r, marked[fd]);
    return r;
}

int fcntl64(int fd, int cmd, ...);
int fcntl64(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    long arg = va_arg(ap, long);
    va_end(ap);
    return fcntl(fd, cmd, arg);
}

#define FAIL_IF_BAD(fd)     \
    if (bad_fd(fd)) {       \
        errno = EIO;        \
        return -1;          \
    }

ssize_t read(int fd, void *b, size_t n)
{
    FAIL_IF_BAD(fd);
    REAL(ssize_t, read, int, void *, size_t);
    return real_read(fd, b, n);
}

ssize_t pread(int fd, void *b, size_t n, off_t o)
{
    FAIL_IF_BAD(fd);
    REAL(ssize_t, pread, int, void *, size_t, off_t);
    return real_pread(fd, b, n, o);
}

ssize_t pread64(int fd, void *b, size_t n, off64_t o)
{
    FAIL_IF_BAD(fd);
    REAL(ssize_t, pread64, int, void *, size_t, off64_t);
    return real_pread64(fd, b, n, o);
}

ssize_t readv(int fd, const struct iovec *v, int n)
{
    FAIL_IF_BAD(fd);
    REAL(ssize_t, readv, int, const struct iovec *, int);
    return real_readv(fd, v, n);
}

ssize_t write(int fd, const void *b, size_t n)
{
    FAIL_IF_BAD(fd);
    REAL(ssize_t, write, int, const void *, size_t);
    return real_write(fd, b, n);
}

ssize_t pwrite(int fd, const void *b, size_t n, off_t o)
{
    FAIL_IF_BAD(fd);
    REAL(ssize_t, pwrite, int, const void *, size_t, off_t);
    return real_pwrite(fd, b, n, o);
}

ssize_t pwrite64(int fd, const void *b, size_t n, off64_t o)
{
    FAIL_IF_BAD(fd);
    REAL(ssize_t, pwrite64, int, const void *, size_t, off64_t);
    return real_pwrite64(fd, b, n, o);
}

ssize_t writev(int fd, const struct iovec *v, int n)
{
    FAIL_IF_BAD(fd);
    REAL(ssize_t, writev, int, const struct iovec *, int);
    return real_writev(fd, v, n);
}

int fsync(int fd)
{
    FAIL_IF_BAD(fd);
    REAL(int, fsync, int);
    return real_fsync(fd);
}

int fdatasync(int fd)
{
    FAIL_IF_BAD(fd);
    REAL(int, fdatasync, int);
    return real_fdatasync(fd);
}
