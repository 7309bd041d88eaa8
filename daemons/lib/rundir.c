/* SPDX-License-Identifier: MIT */
/*
 * Run directory resolution and creation, socket endpoints, stats pages
 * (rundir.h). Stats pages are named POSIX shm so a reader needs only the
 * run directory, and the supervisor creates them before any daemon starts.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dsv4_wire.h"
#include "parse.h"
#include "rundir.h"
#include "shm.h"

void dsv4_rundir_resolve(const char *arg, char *out)
{
    const char *env = getenv("DSV4_RUN_DIR"), *xdg = getenv("XDG_RUNTIME_DIR");
    if (arg && *arg)
        snprintf(out, DSV4_PATH_MAX, "%s", arg);
    else if (env && *env)
        snprintf(out, DSV4_PATH_MAX, "%s", env);
    else if (xdg && *xdg)
        snprintf(out, DSV4_PATH_MAX, "%s/dsv4", xdg);
    else
        snprintf(out, DSV4_PATH_MAX, "/tmp/dsv4-%u", (unsigned)getuid());
}

int dsv4_rundir_create(const char *dir, struct dsv4_err *err)
{
    char tmp[DSV4_PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
            return dsv4_errf(err, -errno, "%s: %s", tmp, strerror(errno));
        *p = '/';
    }
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return dsv4_errf(err, -errno, "%s: %s", dir, strerror(errno));
    struct stat st;
    if (lstat(dir, &st) < 0)
        return dsv4_errf(err, -errno, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return dsv4_errf(err, -ENOTDIR, "%s: not a directory (symlinks refused)", dir);
    if (st.st_uid != getuid())
        return dsv4_errf(err, -EPERM, "%s: owned by uid %u, not us", dir, (unsigned)st.st_uid);
    /* an existing directory others can enter is refused, never chmod'ed: it may be the
     * user's own directory pointed at by mistake */
    if (st.st_mode & 077)
        return dsv4_errf(err, -EPERM, "%s: mode 0%o lets others in: a run dir must be private "
                         "(chmod 700 it, or choose a new path)", dir,
                         (unsigned)(st.st_mode & 07777));
    return 0;
}

int dsv4_rundir_endpoint(const char *dir, const char *name, char *out, struct dsv4_err *err)
{
    int n = snprintf(out, DSV4_PATH_MAX, "ipc://%s/%s.sock", dir, name);
    if (n - 6 > 107)
        return dsv4_errf(err, -ENAMETOOLONG,
                         "%s/%s.sock: %d bytes, ipc sockets allow 107 (use a shorter --run-dir)",
                         dir, name, n - 6);
    return 0;
}

int dsv4_stats_name(const char *dir, int role, char *out, size_t n, struct dsv4_err *err)
{
    char id[DSV4_SHM_ID_LEN + 1];
    int rc = dsv4_shm_id_read(dir, id, err);
    return rc < 0 ? rc : dsv4_shm_name(id, dsv4_role_name(role), out, n, err);
}

static int map_fd(int fd, bool writable, struct dsv4_stats_shm **ret, const char *name,
                  struct dsv4_err *err)
{
    void *p = mmap(NULL, sizeof(struct dsv4_stats_shm), PROT_READ | (writable ? PROT_WRITE : 0),
                   MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return dsv4_errf(err, -errno, "mmap %s: %s", name, strerror(errno));
    *ret = p;
    return 0;
}

static bool layout_ok(const struct dsv4_stats_shm *s)
{
    return s->hdr.magic == DSV4_SHM_MAGIC && s->hdr.abi_major == DSV4_STATS_ABI_MAJOR &&
           s->hdr.kind == DSV4_SHM_KIND_STATS && s->hdr.size == sizeof(*s);
}

int dsv4_stats_create(const char *dir, int role, struct dsv4_stats_shm **ret,
                      struct dsv4_err *err)
{
    char name[128];
    int r = dsv4_stats_name(dir, role, name, sizeof(name), err);
    if (r < 0)
        return r;
    int fd = dsv4_shm_open_own(name, O_RDWR | O_CREAT | O_EXCL, err);   /* a new page, ours */
    if (fd < 0)
        return fd;
    if (ftruncate(fd, sizeof(**ret)) < 0) {
        r = dsv4_errf(err, -errno, "%s: ftruncate: %s", name, strerror(errno));
        close(fd);
        shm_unlink(name);
        return r;
    }
    r = map_fd(fd, true, ret, name, err);
    close(fd);
    if (r)
        return r;
    struct dsv4_stats_shm *s = *ret;
    {
        memset(s, 0, sizeof(*s));
        s->hdr.magic = DSV4_SHM_MAGIC;
        s->hdr.abi_major = DSV4_STATS_ABI_MAJOR;
        s->hdr.abi_minor = DSV4_STATS_ABI_MINOR;
        s->hdr.hdr_size = sizeof(s->hdr);
        s->hdr.kind = DSV4_SHM_KIND_STATS;
        s->hdr.size = sizeof(*s);
    }
    return 0;
}

int dsv4_stats_map(const char *dir, int role, bool writable, struct dsv4_stats_shm **ret,
                   struct dsv4_err *err)
{
    char name[128];
    int rc = dsv4_stats_name(dir, role, name, sizeof(name), err);
    if (rc < 0)
        return rc;
    int fd = dsv4_shm_open_own(name, writable ? O_RDWR : O_RDONLY, err);
    if (fd < 0)
        return fd;
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_size != sizeof(**ret)) {
        close(fd);
        return dsv4_errf(err, -EINVAL, "%s: not a stats page of this build", name);
    }
    int r = map_fd(fd, writable, ret, name, err);
    close(fd);
    if (r == 0 && !layout_ok(*ret)) {
        dsv4_stats_unmap(*ret);
        return dsv4_errf(err, -EPROTO, "%s: stats layout of another version", name);
    }
    return r;
}

void dsv4_stats_unmap(struct dsv4_stats_shm *s)
{
    if (s)
        munmap(s, sizeof(*s));
}

void dsv4_stats_unlink(const char *dir, int role)
{
    char name[128];
    if (dsv4_stats_name(dir, role, name, sizeof(name), NULL) == 0)
        shm_unlink(name);
}

static void hist_add(struct dsv4_hist_shm *h, const uint64_t *bounds, size_t nb, uint64_t v)
{
    size_t i = 0;
    while (i < nb && v > bounds[i])
        i++;
    atomic_fetch_add_explicit(&h->bucket[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, v, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
}

void dsv4_hist_add(struct dsv4_hist_shm *h, uint64_t us)
{
    static const uint64_t bounds[] = DSV4_HIST_BOUNDS_US;
    hist_add(h, bounds, DSV4_ARRAY_SIZE(bounds), us);
}

void dsv4_count_hist_add(struct dsv4_hist_shm *h, uint64_t n)
{
    static const uint64_t bounds[] = DSV4_COUNT_BOUNDS;
    hist_add(h, bounds, DSV4_ARRAY_SIZE(bounds), n);
}

int dsv4_rundir_supervisor_pid(const char *dir)
{
    char path[DSV4_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/supervisor.lock", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {   /* none there (or not ours to see): no set; anything else: cannot tell */
        int e = errno;
        if (e == ENOENT || e == EACCES || e == EPERM || e == ENOTDIR || e == ELOOP ||
            e == ENAMETOOLONG)
            return 0;
        errno = e;
        return DSV4_SUPERVISOR_UNREADABLE;
    }
    int pid = 0;
    if (flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK) {
        char buf[32] = { 0 };
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
        if (n < 0) {
            int e = errno;
            close(fd);
            errno = e;
            return DSV4_SUPERVISOR_UNREADABLE;
        }
        if (n > 0) {
            buf[strcspn(buf, "\n")] = '\0';
            if (dsv4_parse_int(buf, 1, INT32_MAX, &pid) < 0)
                pid = 0;
        }
        if (pid <= 0)
            pid = -1;   /* held, pid not written yet */
    }
    close(fd);
    return pid;
}

const char *dsv4_daemon_exe(const char *name, char *buf, size_t n)
{
    char self[DSV4_PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (k <= 0)
        return NULL;
    self[k] = '\0';
    const char *env = getenv("DSV4_LIBEXEC_DIR"), *dir = dirname(self);
    const char *sub = strncmp(name, "dsv4-", 5) == 0 ? name + 5 : name;
    for (int i = 0; i < 4; i++) {
        int len;
        if (i == 0 && !(env && *env))
            continue;
        if (i == 0)
            len = snprintf(buf, n, "%s/%s", env, name);
        else if (i == 1)
            len = snprintf(buf, n, "%s/%s", dir, name);
        else if (i == 2)
            len = snprintf(buf, n, "%s/../../daemons/%s/%s", dir, sub, name);
        else
            len = snprintf(buf, n, "%s/../%s/%s", dir, sub, name);
        if (len > 0 && (size_t)len < n && access(buf, X_OK) == 0)
            return buf;
    }
    return NULL;
}

/* Names the set writes in its run dir: the only entries a run dir may hold, and so the only
 * ones stop and cleanup delete. */
static const char *const own_files[] = { "ctl.sock", "sched.sock", "compute.sock", "model",
                                         "metrics-addr", "api-addr", "supervisor.lock", "shm-id",
                                         "fetcher-hot.json", "fetcher.lock" };

static bool own_entry(const char *name)
{
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(own_files); i++)
        if (!strcmp(name, own_files[i]))
            return true;
    size_t n = strlen(name);
    return (n > 4 && !strcmp(name + n - 4, ".log")) || !strncmp(name, ".shm-id.", 8) ||
           !strncmp(name, "fetcher-hot.json.", 17);
}

int dsv4_rundir_check_dedicated(const char *dir, struct dsv4_err *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return dsv4_errf(err, -errno, "%s: %s", dir, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (!own_entry(e->d_name))
            rc = dsv4_errf(err, -EEXIST, "%s holds '%s', which is not a dsv4 file: a run dir "
                           "must be dedicated to one daemon set (choose a new path)", dir,
                           e->d_name);
    }
    closedir(d);
    return rc;
}

int dsv4_rundir_remove_leftovers(const char *dir, bool all_files)
{
    int n = 0;
    char id[DSV4_SHM_ID_LEN + 1], name[96], path[DSV4_PATH_MAX + 32];
    if (dsv4_shm_id_read(dir, id, NULL) == 0) {
        for (int r = 0; r < DSV4_ROLE_COUNT; r++)
            if (dsv4_shm_name(id, dsv4_role_name(r), name, sizeof(name), NULL) == 0 &&
                shm_unlink(name) == 0)
                n++;
        if (dsv4_shm_name(id, "experts", name, sizeof(name), NULL) == 0 && shm_unlink(name) == 0)
            n++;
    }
    static const char *const run_files[] = { "ctl.sock", "sched.sock", "compute.sock", "model",
                                             "metrics-addr", "api-addr" };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(run_files); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, run_files[i]);
        if (unlink(path) == 0 && (all_files || strstr(run_files[i], ".sock")))
            n++;
    }
    return n;
}
