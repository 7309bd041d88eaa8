/* SPDX-License-Identifier: MIT */
/* Reading a small file safely (file.h). */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int dsv4_read_file(const char *path, size_t max, char **buf, size_t *len, struct dsv4_err *err)
{
    *buf = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return dsv4_errf(err, -errno, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    int r = 0;
    if (fstat(fd, &st) < 0) {
        r = dsv4_errf(err, -errno, "%s: cannot stat: %s", path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        r = dsv4_errf(err, -EINVAL, "%s: not a regular file", path);
    } else if ((uint64_t)st.st_size > max) {
        r = dsv4_errf(err, -EFBIG, "%s: %llu bytes, larger than the %zu-byte limit", path,
                      (unsigned long long)st.st_size, max);
    } else {
        size_t n = (size_t)st.st_size, got = 0;
        char *p = dsv4_xmalloc(n + 1);
        while (got < n) {
            ssize_t k = read(fd, p + got, n - got);
            if (k < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (k <= 0) {
                int e = k < 0 ? errno : EIO;
                r = dsv4_errf(err, -e, "%s: read failed: %s", path,
                              k < 0 ? strerror(e) : "file shrank while read");
                free(p);
                p = NULL;
                break;
            }
            got += (size_t)k;
        }
        if (p) {
            p[n] = '\0';
            *buf = p;
            *len = n;
        }
    }
    close(fd);
    return r;
}

int dsv4_write_file_atomic(const char *path, const void *data, size_t len,
                           struct dsv4_err *err)
{
    char tmp[4200];
    int k = snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    if (k < 0 || (size_t)k >= sizeof(tmp))
        return dsv4_errf(err, -ENAMETOOLONG, "%s: path too long", path);
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return dsv4_errf(err, -errno, "%s: %s", tmp, strerror(errno));
    const char *p = data;
    size_t done = 0;
    int e = 0;
    while (done < len && !e) {
        ssize_t w = write(fd, p + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            e = w < 0 ? errno : EIO;
        else
            done += (size_t)w;
    }
    if (!e && fsync(fd) < 0)
        e = errno;
    if (close(fd) < 0 && !e)
        e = errno;
    if (!e && rename(tmp, path) < 0)
        e = errno;
    if (e) {
        unlink(tmp);
        return dsv4_errf(err, -e, "%s: %s", path, strerror(e));
    }
    return 0;
}
