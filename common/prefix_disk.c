/* SPDX-License-Identifier: MIT */
/* The prefix cache's disk tier (prefix_disk.h): one checked file per block, LRU by use time. */
#include "prefix_disk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "log.h"
#include "prefix_file.h"

#define TOPIC "prefix-cache"
#define NAME_LEN (2 * DSV4_SHA256_LEN + 4)      /* <64 hex>.blk */
#define TMP_STALE_NS (600ull * 1000000000ull)   /* a temp file older than this is a crash's */

/* ---- names, the directory ---- */

static uint64_t now_real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void key_name(const uint8_t *key, char name[NAME_LEN + 1])
{
    dsv4_hex(key, DSV4_SHA256_LEN, name);
    memcpy(name + 2 * DSV4_SHA256_LEN, ".blk", 5);
}

static bool hexval(char c, int *v)
{
    *v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    return *v >= 0;
}

/* A block file's name back to its key. */
static bool name_key(const char *name, uint8_t *key)
{
    if (strlen(name) != NAME_LEN || strcmp(name + 2 * DSV4_SHA256_LEN, ".blk") != 0)
        return false;
    for (int i = 0; i < DSV4_SHA256_LEN; i++) {
        int hi, lo;
        if (!hexval(name[2 * i], &hi) || !hexval(name[2 * i + 1], &lo))
            return false;
        key[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

/* Our temp files: ".<name>.tmp.<pid>". */
static bool is_tmp_name(const char *name)
{
    return name[0] == '.' && strstr(name, ".blk.tmp.") != NULL;
}

static bool ours_alone(const struct stat *st)
{
    return S_ISREG(st->st_mode) && st->st_uid == geteuid() && (st->st_mode & 077) == 0;
}

/* A private directory: ours, a directory (not a link to one), no access for anyone else. */
static int open_private_dir(const char *dir, struct dsv4_err *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return dsv4_errf(err, -errno, "%s: %s", dir, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 077)) {
        close(fd);
        return dsv4_errf(err, -EPERM, "%s: not a private directory of ours (uid %u, mode 0%o)",
                         dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
    }
    return fd;
}

int dsv4_pcache_default_dir(const uint8_t *model, char *buf, size_t n, struct dsv4_err *err)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char id[2 * DSV4_SHA256_LEN + 1];
    dsv4_hex(model, DSV4_SHA256_LEN / 2, id);
    int k;
    if (xdg && xdg[0] == '/')
        k = snprintf(buf, n, "%s/dsv4/%s", xdg, id);
    else if (home && home[0] == '/')
        k = snprintf(buf, n, "%s/.cache/dsv4/%s", home, id);
    else
        return dsv4_errf(err, -ENOENT, "prefix cache: neither XDG_CACHE_HOME nor HOME is set");
    if (k < 0 || (size_t)k >= n)
        return dsv4_errf(err, -ENAMETOOLONG, "prefix cache: directory name too long");
    return 0;
}

/* mkdir -p with mode 0700 for every component we create. */
static int make_dirs(const char *dir, struct dsv4_err *err)
{
    char p[4096];
    if (snprintf(p, sizeof(p), "%s", dir) >= (int)sizeof(p))
        return dsv4_errf(err, -ENAMETOOLONG, "%s: name too long", dir);
    for (char *s = p + 1;; s++) {
        bool end = *s == '\0';
        if (*s == '/' || end) {
            *s = '\0';
            if (mkdir(p, 0700) < 0 && errno != EEXIST)
                return dsv4_errf(err, -errno, "%s: %s", p, strerror(errno));
            if (end)
                break;
            *s = '/';
        }
    }
    return 0;
}

/* ---- the disk index ---- */

static struct dsv4_pdisk_ent *disk_find(struct dsv4_pdisk *dk, const uint8_t *key)
{
    for (size_t i = 0; i < dk->n; i++)
        if (memcmp(dk->ent[i].key, key, DSV4_SHA256_LEN) == 0)
            return &dk->ent[i];
    return NULL;
}

static void disk_add(struct dsv4_pdisk *dk, const uint8_t *key, uint64_t bytes, uint64_t use)
{
    dsv4_grow((void **)&dk->ent, &dk->cap_ent, dk->n + 1, sizeof(*dk->ent));
    struct dsv4_pdisk_ent *d = &dk->ent[dk->n++];
    memcpy(d->key, key, DSV4_SHA256_LEN);
    d->bytes = bytes;
    d->use = use;
    dk->used += bytes;
}

static void disk_drop(struct dsv4_pdisk *dk, struct dsv4_pdisk_ent *d)
{
    char name[NAME_LEN + 1];
    key_name(d->key, name);
    unlinkat(dk->dfd, name, 0);
    dk->used -= d->bytes;
    *d = dk->ent[--dk->n];
}

/* A refused file: one line, deleted, forgotten. */
static void disk_bad(struct dsv4_pdisk *dk, const char *name, const char *why)
{
    dsv4_log_warn(TOPIC, "%s/%s: %s: deleted", dk->dir, name, why);
    unlinkat(dk->dfd, name, 0);
    dk->bad_files++;
    uint8_t key[DSV4_SHA256_LEN];
    struct dsv4_pdisk_ent *d = name_key(name, key) ? disk_find(dk, key) : NULL;
    if (d) {
        dk->used -= d->bytes;
        *d = dk->ent[--dk->n];
    }
}

static void disk_evict(struct dsv4_pdisk *dk, const uint8_t *keep)
{
    while (dk->used > dk->cap && dk->n > 0) {
        struct dsv4_pdisk_ent *old = NULL;
        for (size_t i = 0; i < dk->n; i++)
            if ((!keep || memcmp(dk->ent[i].key, keep, DSV4_SHA256_LEN) != 0) &&
                (!old || dk->ent[i].use < old->use))
                old = &dk->ent[i];
        if (!old)
            break;
        disk_drop(dk, old);
        dk->evictions++;
    }
}

void dsv4_pdisk_close(struct dsv4_pdisk *dk)
{
    if (dk->dfd >= 0)
        close(dk->dfd);
    dk->dfd = -1;
    free(dk->ent);
    dk->ent = NULL;
    dk->n = dk->cap_ent = 0;
    dk->used = 0;
}

/* Index the directory: our block files; refused files deleted; stale temp files removed. */
static void disk_scan(struct dsv4_pdisk *dk)
{
    int fd = dup(dk->dfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        dsv4_log_warn(TOPIC, "%s: cannot list: %s; disk tier off", dk->dir, strerror(errno));
        dsv4_pdisk_close(dk);
        return;
    }
    uint64_t now = now_real_ns();
    struct dirent *e;
    while ((e = readdir(d))) {
        uint8_t key[DSV4_SHA256_LEN];
        struct stat st;
        bool blk = name_key(e->d_name, key);
        if (!blk && !is_tmp_name(e->d_name))
            continue;
        if (fstatat(dk->dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        uint64_t mt = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
        if (!blk) {
            if (now > mt + TMP_STALE_NS)
                unlinkat(dk->dfd, e->d_name, 0);
            continue;
        }
        if (!ours_alone(&st)) {
            disk_bad(dk, e->d_name, "not a private file of ours");
            continue;
        }
        disk_add(dk, key, (uint64_t)st.st_size, mt);
    }
    closedir(d);
    disk_evict(dk, NULL);
}

/* Indexed, or written by another process since we scanned (then indexed now). */
bool dsv4_pdisk_has(struct dsv4_pdisk *dk, const uint8_t *key)
{
    if (dk->dfd < 0)
        return false;
    if (disk_find(dk, key))
        return true;
    char name[NAME_LEN + 1];
    struct stat st;
    key_name(key, name);
    if (fstatat(dk->dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return false;
    disk_add(dk, key, (uint64_t)st.st_size, now_real_ns());
    return true;
}

void dsv4_pdisk_open(struct dsv4_pdisk *dk, const uint8_t *model, uint64_t cap, const char *dir)
{
    memset(dk, 0, sizeof(*dk));
    memcpy(dk->model, model, DSV4_SHA256_LEN);
    dk->cap = cap;
    dk->dfd = -1;
    struct dsv4_err err = { "" };
    int rc = 0;
    if (dir)
        snprintf(dk->dir, sizeof(dk->dir), "%s", dir);
    else
        rc = dsv4_pcache_default_dir(model, dk->dir, sizeof(dk->dir), &err);
    if (rc == 0)
        rc = make_dirs(dk->dir, &err);
    if (rc == 0)
        rc = open_private_dir(dk->dir, &err);
    if (rc < 0) {
        dsv4_log_warn(TOPIC, "%s; disk tier off", err.msg);
        return;
    }
    dk->dfd = rc;
    disk_scan(dk);
}

void dsv4_pdisk_clear(struct dsv4_pdisk *dk)
{
    while (dk->dfd >= 0 && dk->n > 0)
        disk_drop(dk, &dk->ent[dk->n - 1]);
}

static int write_all(int fd, const void *p, uint64_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t k = write(fd, c, n > (1u << 30) ? (1u << 30) : (size_t)n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? -errno : -EIO;
        c += k;
        n -= (uint64_t)k;
    }
    return 0;
}

void dsv4_pdisk_put(struct dsv4_pdisk *dk, const struct dsv4_pcache_block *b)
{
    struct dsv4_pfile_hdr h;
    dsv4_pfile_make(&h, dk->model, b->key, b->parent, b->p0, b->p1, b->tokens, b->rows,
                    b->rows_len, b->tail, b->tail_len);
    uint64_t bytes = dsv4_pfile_bytes(&h);
    char name[NAME_LEN + 1], tmp[NAME_LEN + 32];
    key_name(b->key, name);
    /* the file itself, not the index: another process may have evicted it */
    struct stat st;
    struct dsv4_pdisk_ent *d = disk_find(dk, b->key);
    bool present = fstatat(dk->dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (d && !present) {
        dk->used -= d->bytes;
        *d = dk->ent[--dk->n];
    }
    if (bytes > dk->cap || present)
        return;
    snprintf(tmp, sizeof(tmp), ".%s.tmp.%d", name, (int)getpid());
    int fd = openat(dk->dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    int rc = fd < 0 ? -errno : 0;
    if (rc == 0)
        rc = write_all(fd, &h, sizeof(h));
    if (rc == 0)
        rc = write_all(fd, b->tokens, (uint64_t)(b->p1 - b->p0) * sizeof(int32_t));
    if (rc == 0)
        rc = write_all(fd, b->rows, b->rows_len);
    if (rc == 0)
        rc = write_all(fd, b->tail, b->tail_len);
    if (fd >= 0 && close(fd) < 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && renameat(dk->dfd, tmp, dk->dfd, name) < 0)
        rc = -errno;
    if (rc < 0) {
        if (fd >= 0)
            unlinkat(dk->dfd, tmp, 0);
        if (rc == -ENOSPC || rc == -EDQUOT || rc == -EFBIG) {
            dsv4_log_warn(TOPIC, "%s: disk full (%s): disk tier off, serving continues",
                          dk->dir, strerror(-rc));
            dsv4_pdisk_close(dk);
        } else {
            dsv4_log_warn(TOPIC, "%s/%s: not written: %s", dk->dir, name, strerror(-rc));
        }
        return;
    }
    disk_add(dk, b->key, bytes, now_real_ns());
    disk_evict(dk, b->key);
}

static int pread_all(int fd, void *p, uint64_t n, uint64_t off)
{
    char *c = p;
    while (n > 0) {
        ssize_t k = pread(fd, c, n > (1u << 30) ? (1u << 30) : (size_t)n, (off_t)off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? -errno : -ENODATA;
        c += k;
        n -= (uint64_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

int dsv4_pdisk_get(struct dsv4_pdisk *dk, const uint8_t *key, bool want_tail,
                    struct dsv4_pcache_block *b, struct dsv4_err *err)
{
    char name[NAME_LEN + 1];
    key_name(key, name);
    int fd = openat(dk->dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP)
            disk_bad(dk, name, "a symbolic link");
        else {
            struct dsv4_pdisk_ent *d = disk_find(dk, key);
            if (d) {
                dk->used -= d->bytes;
                *d = dk->ent[--dk->n];
            }
        }
        return dsv4_errf(err, -ENOENT, "%s/%s: %s", dk->dir, name, strerror(e));
    }
    struct stat st;
    struct dsv4_pfile_hdr h;
    char hb[sizeof(h)];
    const char *why = NULL;
    uint8_t *buf = NULL;
    if (fstat(fd, &st) < 0 || !ours_alone(&st)) {
        why = "not a private file of ours";
    } else {
        uint64_t size = (uint64_t)st.st_size;
        size_t got = size < sizeof(hb) ? (size_t)size : sizeof(hb);
        enum dsv4_pfile_bad bad = pread_all(fd, hb, got, 0) < 0
                                      ? DSV4_PFILE_TRUNCATED
                                      : dsv4_pfile_check_hdr(hb, got, size, dk->model, &h);
        if (bad == DSV4_PFILE_OK && memcmp(h.key, key, DSV4_SHA256_LEN) != 0)
            bad = DSV4_PFILE_CORRUPT;
        if (bad != DSV4_PFILE_OK) {
            why = dsv4_pfile_bad_name(bad);
        } else {
            uint64_t head = dsv4_pfile_head_bytes(&h), n = head + (want_tail ? h.tail_len : 0);
            buf = malloc((size_t)n + 1);
            if (!buf)
                why = "too large to read";
            else if (pread_all(fd, buf, n, 0) < 0)
                why = dsv4_pfile_bad_name(DSV4_PFILE_TRUNCATED);
            else if (!dsv4_pfile_head_ok(&h, buf) ||
                     (want_tail && !dsv4_pfile_tail_ok(&h, buf + head)))
                why = dsv4_pfile_bad_name(DSV4_PFILE_CORRUPT);
        }
    }
    if (!why)
        futimens(fd, NULL);    /* the LRU's use time, seen by every process */
    close(fd);
    if (why) {
        free(buf);
        disk_bad(dk, name, why);
        return dsv4_errf(err, -ENOENT, "%s/%s: %s", dk->dir, name, why);
    }
    struct dsv4_pdisk_ent *d = disk_find(dk, key);
    if (d)
        d->use = now_real_ns();
    int64_t ntok = h.p1 - h.p0;
    memcpy(b->key, h.key, DSV4_SHA256_LEN);
    memcpy(b->parent, h.parent, DSV4_SHA256_LEN);
    b->p0 = h.p0;
    b->p1 = h.p1;
    b->tokens = (const int32_t *)(void *)(buf + sizeof(h));
    b->rows = buf + sizeof(h) + ntok * sizeof(int32_t);
    b->rows_len = h.rows_len;
    b->tail = want_tail ? buf + dsv4_pfile_head_bytes(&h) : NULL;
    b->tail_len = h.tail_len;
    b->own = buf;
    dk->hits++;
    return 0;
}

/* ---- a directory without a cache ---- */

static int dir_walk(const char *dir, bool remove, uint64_t *entries, uint64_t *bytes,
                    struct dsv4_err *err)
{
    int dfd = open_private_dir(dir, err);
    if (dfd < 0)
        return dfd;
    int fd = dup(dfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        close(dfd);
        return dsv4_errf(err, -e, "%s: %s", dir, strerror(e));
    }
    struct dirent *e;
    uint8_t key[DSV4_SHA256_LEN];
    while ((e = readdir(d))) {
        bool blk = name_key(e->d_name, key);
        if (!blk && !is_tmp_name(e->d_name))
            continue;
        struct stat st;
        if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (blk && S_ISREG(st.st_mode)) {
            (*entries)++;
            *bytes += (uint64_t)st.st_size;
        }
        if (remove)
            unlinkat(dfd, e->d_name, 0);    /* a link is removed, never followed */
    }
    closedir(d);
    close(dfd);
    if (remove && rmdir(dir) < 0)
        return dsv4_errf(err, -errno, "%s: %s (files not ours stay)", dir, strerror(errno));
    return 0;
}

int dsv4_pcache_dir_stat(const char *dir, uint64_t *entries, uint64_t *bytes,
                         struct dsv4_err *err)
{
    *entries = *bytes = 0;
    return dir_walk(dir, false, entries, bytes, err);
}

int dsv4_pcache_dir_remove(const char *dir, struct dsv4_err *err)
{
    uint64_t n = 0, b = 0;
    return dir_walk(dir, true, &n, &b, err);
}
