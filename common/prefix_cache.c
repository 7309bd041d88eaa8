/* SPDX-License-Identifier: MIT */
/* The prefix cache's two tiers (prefix_cache.h). */
#include "prefix_cache.h"

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
#include "util.h"

#define TOPIC "prefix-cache"
#define NAME_LEN (2 * DSV4_SHA256_LEN + 4)      /* <64 hex>.blk */
#define TMP_STALE_NS (600ull * 1000000000ull)   /* a temp file older than this is a crash's */

struct ram_ent {
    struct ram_ent *prev, *next;    /* LRU list, most recent first */
    uint8_t key[DSV4_SHA256_LEN], parent[DSV4_SHA256_LEN];
    int64_t p0, p1;
    uint8_t *data;                  /* tokens | rows | tail */
    uint64_t rows_len, tail_len, bytes;
};

struct disk_ent {
    uint8_t key[DSV4_SHA256_LEN];
    uint64_t bytes, use;            /* file size; last use (ns, the file's mtime) */
};

struct dsv4_pcache {
    uint8_t model[DSV4_SHA256_LEN];
    int block;
    uint64_t ram_cap, disk_cap;
    struct ram_ent *head, *tail;
    uint64_t ram_used, ram_n;
    int dfd;                        /* -1: no disk tier */
    char dir[4096];
    struct disk_ent *disk;
    size_t n_disk, cap_disk;
    uint64_t disk_used;
    struct dsv4_pcache_stats st;
};

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

static struct disk_ent *disk_find(dsv4_pcache *pc, const uint8_t *key)
{
    for (size_t i = 0; i < pc->n_disk; i++)
        if (memcmp(pc->disk[i].key, key, DSV4_SHA256_LEN) == 0)
            return &pc->disk[i];
    return NULL;
}

static void disk_add(dsv4_pcache *pc, const uint8_t *key, uint64_t bytes, uint64_t use)
{
    dsv4_grow((void **)&pc->disk, &pc->cap_disk, pc->n_disk + 1, sizeof(*pc->disk));
    struct disk_ent *d = &pc->disk[pc->n_disk++];
    memcpy(d->key, key, DSV4_SHA256_LEN);
    d->bytes = bytes;
    d->use = use;
    pc->disk_used += bytes;
}

static void disk_drop(dsv4_pcache *pc, struct disk_ent *d)
{
    char name[NAME_LEN + 1];
    key_name(d->key, name);
    unlinkat(pc->dfd, name, 0);
    pc->disk_used -= d->bytes;
    *d = pc->disk[--pc->n_disk];
}

/* A refused file: one line, deleted, forgotten. */
static void disk_bad(dsv4_pcache *pc, const char *name, const char *why)
{
    dsv4_log_warn(TOPIC, "%s/%s: %s: deleted", pc->dir, name, why);
    unlinkat(pc->dfd, name, 0);
    pc->st.bad_files++;
    uint8_t key[DSV4_SHA256_LEN];
    struct disk_ent *d = name_key(name, key) ? disk_find(pc, key) : NULL;
    if (d) {
        pc->disk_used -= d->bytes;
        *d = pc->disk[--pc->n_disk];
    }
}

static void disk_evict(dsv4_pcache *pc, const uint8_t *keep)
{
    while (pc->disk_used > pc->disk_cap && pc->n_disk > 0) {
        struct disk_ent *old = NULL;
        for (size_t i = 0; i < pc->n_disk; i++)
            if ((!keep || memcmp(pc->disk[i].key, keep, DSV4_SHA256_LEN) != 0) &&
                (!old || pc->disk[i].use < old->use))
                old = &pc->disk[i];
        if (!old)
            break;
        disk_drop(pc, old);
        pc->st.disk_evictions++;
    }
}

static void disk_off(dsv4_pcache *pc)
{
    if (pc->dfd >= 0)
        close(pc->dfd);
    pc->dfd = -1;
    free(pc->disk);
    pc->disk = NULL;
    pc->n_disk = pc->cap_disk = 0;
    pc->disk_used = 0;
}

/* Index the directory: our block files; refused files deleted; stale temp files removed. */
static void disk_scan(dsv4_pcache *pc)
{
    int fd = dup(pc->dfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        dsv4_log_warn(TOPIC, "%s: cannot list: %s; disk tier off", pc->dir, strerror(errno));
        disk_off(pc);
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
        if (fstatat(pc->dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        uint64_t mt = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
        if (!blk) {
            if (now > mt + TMP_STALE_NS)
                unlinkat(pc->dfd, e->d_name, 0);
            continue;
        }
        if (!ours_alone(&st)) {
            disk_bad(pc, e->d_name, "not a private file of ours");
            continue;
        }
        disk_add(pc, key, (uint64_t)st.st_size, mt);
    }
    closedir(d);
    disk_evict(pc, NULL);
}

/* ---- the RAM tier ---- */

static struct ram_ent *ram_find(dsv4_pcache *pc, const uint8_t *key)
{
    for (struct ram_ent *r = pc->head; r; r = r->next)
        if (memcmp(r->key, key, DSV4_SHA256_LEN) == 0)
            return r;
    return NULL;
}

static void ram_unlink(dsv4_pcache *pc, struct ram_ent *r)
{
    *(r->prev ? &r->prev->next : &pc->head) = r->next;
    *(r->next ? &r->next->prev : &pc->tail) = r->prev;
    r->prev = r->next = NULL;
}

static void ram_push(dsv4_pcache *pc, struct ram_ent *r)
{
    r->next = pc->head;
    r->prev = NULL;
    *(pc->head ? &pc->head->prev : &pc->tail) = r;
    pc->head = r;
}

static void ram_free(dsv4_pcache *pc, struct ram_ent *r)
{
    ram_unlink(pc, r);
    pc->ram_used -= r->bytes;
    pc->ram_n--;
    free(r->data);
    free(r);
}

static void ram_put(dsv4_pcache *pc, const struct dsv4_pcache_block *b)
{
    uint64_t ntok = (uint64_t)(b->p1 - b->p0) * sizeof(int32_t);
    uint64_t bytes = sizeof(struct ram_ent) + ntok + b->rows_len + b->tail_len;
    if (!b->tail || bytes > pc->ram_cap || ram_find(pc, b->key))
        return;
    while (pc->ram_used + bytes > pc->ram_cap && pc->tail) {
        ram_free(pc, pc->tail);
        pc->st.ram_evictions++;
    }
    struct ram_ent *r = dsv4_xcalloc(1, sizeof(*r));
    memcpy(r->key, b->key, DSV4_SHA256_LEN);
    memcpy(r->parent, b->parent, DSV4_SHA256_LEN);
    r->p0 = b->p0;
    r->p1 = b->p1;
    r->rows_len = b->rows_len;
    r->tail_len = b->tail_len;
    r->bytes = bytes;
    r->data = dsv4_xmalloc((size_t)(ntok + b->rows_len + b->tail_len) + 1);
    memcpy(r->data, b->tokens, (size_t)ntok);
    memcpy(r->data + ntok, b->rows, (size_t)b->rows_len);
    memcpy(r->data + ntok + b->rows_len, b->tail, (size_t)b->tail_len);
    ram_push(pc, r);
    pc->ram_used += bytes;
    pc->ram_n++;
}

/* ---- open, keys, lookup ---- */

int dsv4_pcache_open(const struct dsv4_pcache_opts *o, dsv4_pcache **ret, struct dsv4_err *err)
{
    int lcm = o->ratio_lcm > 0 ? o->ratio_lcm : 1;
    int block = o->block ? o->block : (DSV4_PCACHE_DEFAULT_BLOCK + lcm - 1) / lcm * lcm;
    if (block < 1 || block % lcm != 0 || block > DSV4_PFILE_MAX_TOKENS)
        return dsv4_errf(err, -EINVAL, "prefix cache: block %d is not a multiple of every "
                         "compression ratio (%d)", block, lcm);
    dsv4_pcache *pc = dsv4_xcalloc(1, sizeof(*pc));
    memcpy(pc->model, o->model, DSV4_SHA256_LEN);
    pc->block = block;
    pc->ram_cap = o->ram_bytes;
    pc->disk_cap = o->disk_bytes;
    pc->dfd = -1;
    if (pc->disk_cap) {
        struct dsv4_err e2 = { "" };
        int rc = 0;
        if (o->dir)
            snprintf(pc->dir, sizeof(pc->dir), "%s", o->dir);
        else
            rc = dsv4_pcache_default_dir(pc->model, pc->dir, sizeof(pc->dir), &e2);
        if (rc == 0)
            rc = make_dirs(pc->dir, &e2);
        if (rc == 0)
            rc = open_private_dir(pc->dir, &e2);
        if (rc < 0) {
            dsv4_log_warn(TOPIC, "%s; disk tier off", e2.msg);
        } else {
            pc->dfd = rc;
            disk_scan(pc);
        }
    }
    *ret = pc;
    return 0;
}

dsv4_pcache *dsv4_pcache_close(dsv4_pcache *pc)
{
    if (!pc)
        return NULL;
    while (pc->head)
        ram_free(pc, pc->head);
    disk_off(pc);
    free(pc);
    return NULL;
}

int dsv4_pcache_block_tokens(const dsv4_pcache *pc)
{
    return pc->block;
}

const char *dsv4_pcache_dir(const dsv4_pcache *pc)
{
    return pc->dfd >= 0 ? pc->dir : NULL;
}

void dsv4_pcache_get_stats(const dsv4_pcache *pc, struct dsv4_pcache_stats *ret)
{
    *ret = pc->st;
    ret->ram_entries = pc->ram_n;
    ret->ram_bytes = pc->ram_used;
    ret->disk_entries = pc->n_disk;
    ret->disk_bytes = pc->disk_used;
    ret->disk_on = pc->dfd >= 0;
}

void dsv4_pcache_root(const dsv4_pcache *pc, uint32_t variant, uint8_t key[DSV4_SHA256_LEN])
{
    struct dsv4_sha256 h;
    dsv4_sha256_init(&h);
    static const char tag[] = "dsv4-prefix-root";
    dsv4_sha256_update(&h, tag, sizeof(tag));
    dsv4_sha256_update(&h, pc->model, DSV4_SHA256_LEN);
    uint32_t b = (uint32_t)pc->block;
    dsv4_sha256_update(&h, &b, sizeof(b));
    dsv4_sha256_update(&h, &variant, sizeof(variant));
    dsv4_sha256_final(&h, key);
}

void dsv4_pcache_chain(const uint8_t *parent, const int32_t *tokens, int n,
                       uint8_t key[DSV4_SHA256_LEN])
{
    struct dsv4_sha256 h;
    dsv4_sha256_init(&h);
    dsv4_sha256_update(&h, parent, DSV4_SHA256_LEN);
    dsv4_sha256_update(&h, tokens, (size_t)n * sizeof(int32_t));
    dsv4_sha256_final(&h, key);
}

/* Indexed, or written by another process since we scanned (then indexed now). */
static bool on_disk(dsv4_pcache *pc, const uint8_t *key)
{
    if (pc->dfd < 0)
        return false;
    if (disk_find(pc, key))
        return true;
    char name[NAME_LEN + 1];
    struct stat st;
    key_name(key, name);
    if (fstatat(pc->dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return false;
    disk_add(pc, key, (uint64_t)st.st_size, now_real_ns());
    return true;
}

bool dsv4_pcache_has(const dsv4_pcache *pc, const uint8_t *key)
{
    dsv4_pcache *m = (dsv4_pcache *)pc;
    return ram_find(m, key) || on_disk(m, key);
}

int dsv4_pcache_lookup(dsv4_pcache *pc, const uint8_t *root, const int32_t *tokens, int64_t n,
                       int max_blocks, uint8_t (*keys)[DSV4_SHA256_LEN])
{
    uint8_t k[DSV4_SHA256_LEN];
    memcpy(k, root, DSV4_SHA256_LEN);
    int found = 0;
    pc->st.lookups++;
    pc->st.lookup_tokens += (uint64_t)(n > 0 ? n : 0);
    while (found < max_blocks && (int64_t)(found + 1) * pc->block <= n) {
        dsv4_pcache_chain(k, tokens + (size_t)found * pc->block, pc->block, k);
        if (!dsv4_pcache_has(pc, k))
            break;
        memcpy(keys[found++], k, DSV4_SHA256_LEN);
    }
    return found;
}

void dsv4_pcache_count_hit(dsv4_pcache *pc, int64_t tokens)
{
    pc->st.hit_tokens += (uint64_t)tokens;
}

/* ---- store ---- */

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

static void disk_put(dsv4_pcache *pc, const struct dsv4_pcache_block *b)
{
    struct dsv4_pfile_hdr h;
    dsv4_pfile_make(&h, pc->model, b->key, b->parent, b->p0, b->p1, b->tokens, b->rows,
                    b->rows_len, b->tail, b->tail_len);
    uint64_t bytes = dsv4_pfile_bytes(&h);
    char name[NAME_LEN + 1], tmp[NAME_LEN + 32];
    key_name(b->key, name);
    /* the file itself, not the index: another process may have evicted it */
    struct stat st;
    struct disk_ent *d = disk_find(pc, b->key);
    bool present = fstatat(pc->dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (d && !present) {
        pc->disk_used -= d->bytes;
        *d = pc->disk[--pc->n_disk];
    }
    if (bytes > pc->disk_cap || present)
        return;
    snprintf(tmp, sizeof(tmp), ".%s.tmp.%d", name, (int)getpid());
    int fd = openat(pc->dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
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
    if (rc == 0 && renameat(pc->dfd, tmp, pc->dfd, name) < 0)
        rc = -errno;
    if (rc < 0) {
        if (fd >= 0)
            unlinkat(pc->dfd, tmp, 0);
        if (rc == -ENOSPC || rc == -EDQUOT || rc == -EFBIG) {
            dsv4_log_warn(TOPIC, "%s: disk full (%s): disk tier off, serving continues",
                          pc->dir, strerror(-rc));
            disk_off(pc);
        } else {
            dsv4_log_warn(TOPIC, "%s/%s: not written: %s", pc->dir, name, strerror(-rc));
        }
        return;
    }
    disk_add(pc, b->key, bytes, now_real_ns());
    disk_evict(pc, b->key);
}

int dsv4_pcache_put(dsv4_pcache *pc, const struct dsv4_pcache_block *b, struct dsv4_err *err)
{
    if (b->p0 < 0 || b->p1 - b->p0 != pc->block || !b->tail)
        return dsv4_errf(err, -EINVAL, "prefix cache: a block is %d tokens with its tail",
                         pc->block);
    pc->st.stores++;
    if (pc->ram_cap)
        ram_put(pc, b);
    if (pc->dfd >= 0)
        disk_put(pc, b);
    return 0;
}

/* ---- read ---- */

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

static int disk_get(dsv4_pcache *pc, const uint8_t *key, bool want_tail,
                    struct dsv4_pcache_block *b, struct dsv4_err *err)
{
    char name[NAME_LEN + 1];
    key_name(key, name);
    int fd = openat(pc->dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP)
            disk_bad(pc, name, "a symbolic link");
        else {
            struct disk_ent *d = disk_find(pc, key);
            if (d) {
                pc->disk_used -= d->bytes;
                *d = pc->disk[--pc->n_disk];
            }
        }
        return dsv4_errf(err, -ENOENT, "%s/%s: %s", pc->dir, name, strerror(e));
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
                                      : dsv4_pfile_check_hdr(hb, got, size, pc->model, &h);
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
        disk_bad(pc, name, why);
        return dsv4_errf(err, -ENOENT, "%s/%s: %s", pc->dir, name, why);
    }
    struct disk_ent *d = disk_find(pc, key);
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
    pc->st.disk_hits++;
    if (want_tail && pc->ram_cap)
        ram_put(pc, b);
    return 0;
}

int dsv4_pcache_get(dsv4_pcache *pc, const uint8_t *key, bool want_tail,
                    struct dsv4_pcache_block *b, struct dsv4_err *err)
{
    memset(b, 0, sizeof(*b));
    struct ram_ent *r = ram_find(pc, key);
    if (r) {
        ram_unlink(pc, r);
        ram_push(pc, r);
        uint64_t ntok = (uint64_t)(r->p1 - r->p0) * sizeof(int32_t);
        memcpy(b->key, r->key, DSV4_SHA256_LEN);
        memcpy(b->parent, r->parent, DSV4_SHA256_LEN);
        b->p0 = r->p0;
        b->p1 = r->p1;
        b->tokens = (const int32_t *)(void *)r->data;
        b->rows = r->data + ntok;
        b->rows_len = r->rows_len;
        b->tail = want_tail ? r->data + ntok + r->rows_len : NULL;
        b->tail_len = r->tail_len;
        pc->st.ram_hits++;
        return 0;
    }
    if (pc->dfd >= 0 && on_disk(pc, key))
        return disk_get(pc, key, want_tail, b, err);
    return dsv4_errf(err, -ENOENT, "prefix cache: no such block");
}

void dsv4_pcache_put_back(dsv4_pcache *pc, struct dsv4_pcache_block *b)
{
    (void)pc;
    free(b->own);
    b->own = NULL;
}

void dsv4_pcache_clear(dsv4_pcache *pc)
{
    while (pc->head)
        ram_free(pc, pc->head);
    while (pc->dfd >= 0 && pc->n_disk > 0)
        disk_drop(pc, &pc->disk[pc->n_disk - 1]);
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
