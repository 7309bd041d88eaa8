/* SPDX-License-Identifier: MIT */
/* Shared-memory segments that are ours alone (shm.h). */
#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

static bool is_hex_id(const char *s, size_t n)
{
    if (n != DSV4_SHM_ID_LEN)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

int dsv4_shm_id_read(const char *run_dir, char *id, struct dsv4_err *err)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/shm-id", run_dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return dsv4_errf(err, -errno, "%s: %s", path, strerror(errno));
    struct stat st;
    char buf[DSV4_SHM_ID_LEN + 2];
    ssize_t n = -1;
    int rc = 0;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 077))
        rc = dsv4_errf(err, -EPERM, "%s: not a private file of ours (uid %u, mode 0%o)", path,
                       (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
    else if ((n = pread(fd, buf, sizeof(buf), 0)) < DSV4_SHM_ID_LEN ||
             !is_hex_id(buf, DSV4_SHM_ID_LEN) || (n > DSV4_SHM_ID_LEN && buf[DSV4_SHM_ID_LEN] != '\n'))
        rc = dsv4_errf(err, -EPROTO, "%s: not a set id (%d hex digits)", path, DSV4_SHM_ID_LEN);
    close(fd);
    if (rc == 0) {
        memcpy(id, buf, DSV4_SHM_ID_LEN);
        id[DSV4_SHM_ID_LEN] = '\0';
    }
    return rc;
}

int dsv4_shm_id_new(const char *run_dir, char *id, char *old, struct dsv4_err *err)
{
    if (old && dsv4_shm_id_read(run_dir, old, NULL) < 0)
        old[0] = '\0';
    unsigned char r[DSV4_SHM_ID_LEN / 2];
    size_t got = 0;
    while (got < sizeof(r)) {
        ssize_t k = getrandom(r + got, sizeof(r) - got, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return dsv4_errf(err, -errno, "getrandom: %s", strerror(errno));
        got += (size_t)k;
    }
    for (size_t i = 0; i < sizeof(r); i++)
        snprintf(id + 2 * i, 3, "%02x", r[i]);
    char path[4096], tmp[4200];
    snprintf(path, sizeof(path), "%s/shm-id", run_dir);
    snprintf(tmp, sizeof(tmp), "%s/.shm-id.%d", run_dir, (int)getpid());
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return dsv4_errf(err, -errno, "%s: %s", tmp, strerror(errno));
    char line[DSV4_SHM_ID_LEN + 1];
    memcpy(line, id, DSV4_SHM_ID_LEN);
    line[DSV4_SHM_ID_LEN] = '\n';
    bool ok = write(fd, line, sizeof(line)) == (ssize_t)sizeof(line) && fsync(fd) == 0;
    int e = errno;
    close(fd);
    if (!ok || rename(tmp, path) < 0) {
        e = ok ? errno : e;
        unlink(tmp);
        return dsv4_errf(err, -(e ? e : EIO), "%s: %s", path, strerror(e ? e : EIO));
    }
    return 0;
}

int dsv4_shm_name(const char *id, const char *what, char *buf, size_t n, struct dsv4_err *err)
{
    int k = snprintf(buf, n, "/dsv4-%u-%s-%s", (unsigned)geteuid(), id, what);
    if (k < 0 || (size_t)k >= n)
        return dsv4_errf(err, -ENAMETOOLONG, "shm name for %s too long", what);
    return 0;
}

int dsv4_shm_open_own(const char *name, int flags, struct dsv4_err *err)
{
    if ((flags & O_CREAT) && !(flags & O_EXCL))
        return dsv4_errf(err, -EINVAL, "shm %s: create only with O_EXCL", name);
    int fd = shm_open(name, flags | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return dsv4_errf(err, -errno, "shm %s: %s", name, strerror(errno));
    if ((flags & O_CREAT) && fchmod(fd, 0600) < 0) {
        int e = errno;
        close(fd);
        return dsv4_errf(err, -e, "shm %s: chmod: %s", name, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 07777) != 0600) {
        close(fd);
        return dsv4_errf(err, -EPERM, "shm %s: owned by uid %u with mode 0%o, not ours alone: "
                         "refused", name, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
    }
    return fd;
}
