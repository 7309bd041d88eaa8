/* SPDX-License-Identifier: MIT */
/*
 * The prefix cache's store (common/prefix_cache.c, prefix_file.c, sha256.c): SHA-256 against
 * FIPS 180-4's examples; RAM hits and LRU eviction; disk hits after a reopen, LRU by file
 * across a reopen, the longest and partial prefix; every bad file (truncated, short header,
 * flipped bit in the ids/rows or the tail, appended bytes, another model's, an old format,
 * another key's name, not private, a symbolic link, another owner) is refused with one log
 * line and deleted, never returned; a full disk turns the disk tier off and the RAM tier
 * serves on; a directory that is not private costs the disk tier; cache status/clear's walks.
 * Runs in a private temporary directory.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "prefix_cache.h"
#include "prefix_file.h"
#include "util.h"

#define B 16
#define ROWS 1000
#define TAIL 3000

static char base[256];
static int n_dir;
static const uint8_t model_a[32] = { 0xa1, 0xa2 }, model_b[32] = { 0xb1 };

/* A fresh cache directory name under base (not created). */
static const char *new_dir(char *buf, size_t n)
{
    snprintf(buf, n, "%s/c%d", base, n_dir++);
    return buf;
}

static dsv4_pcache *open_cache(const uint8_t *model, uint64_t ram, uint64_t disk, const char *dir)
{
    struct dsv4_err err = { "" };
    struct dsv4_pcache_opts o = { .model = model, .block = B, .ratio_lcm = 4, .ram_bytes = ram,
                                  .disk_bytes = disk, .dir = dir };
    dsv4_pcache *pc = NULL;
    if (dsv4_pcache_open(&o, &pc, &err) < 0)
        fail_msg("open: %s", err.msg);
    return pc;
}

/* Token ids of a sequence: block i of sequence `seq`. */
static void seq_tokens(int seq, int n, int32_t *t)
{
    for (int i = 0; i < n; i++)
        t[i] = (int32_t)(i < B ? i : seq * 1000 + i);
}

/* Payload of block i: deterministic bytes. */
static void payload(int i, uint8_t *rows, uint8_t *tail)
{
    for (int k = 0; k < ROWS; k++)
        rows[k] = (uint8_t)(i * 7 + k);
    for (int k = 0; k < TAIL; k++)
        tail[k] = (uint8_t)(i * 13 + k * 3);
}

/* Store blocks 0..nb-1 of tokens t; keys[i] their keys. */
static void put_blocks(dsv4_pcache *pc, const int32_t *t, int nb, uint8_t (*keys)[32])
{
    struct dsv4_err err = { "" };
    uint8_t parent[32], rows[ROWS], tail[TAIL];
    dsv4_pcache_root(pc, 0, parent);
    for (int i = 0; i < nb; i++) {
        struct dsv4_pcache_block b = { .p0 = (int64_t)i * B, .p1 = (int64_t)(i + 1) * B,
                                       .tokens = t + i * B, .rows = rows, .rows_len = ROWS,
                                       .tail = tail, .tail_len = TAIL };
        payload(i, rows, tail);
        dsv4_pcache_chain(parent, t + i * B, B, b.key);
        memcpy(b.parent, parent, 32);
        assert_int_equal(dsv4_pcache_put(pc, &b, &err), 0);
        memcpy(parent, b.key, 32);
        if (keys)
            memcpy(keys[i], b.key, 32);
    }
}

/* Block i read back equals what put_blocks stored. */
static void check_block(dsv4_pcache *pc, const uint8_t *key, int i, bool tail)
{
    struct dsv4_err err = { "" };
    struct dsv4_pcache_block b;
    uint8_t rows[ROWS], tl[TAIL];
    payload(i, rows, tl);
    if (dsv4_pcache_get(pc, key, tail, &b, &err) < 0)
        fail_msg("get block %d: %s", i, err.msg);
    assert_int_equal(b.p0, (int64_t)i * B);
    assert_int_equal(b.rows_len, ROWS);
    assert_memory_equal(b.rows, rows, ROWS);
    if (tail) {
        assert_int_equal(b.tail_len, TAIL);
        assert_memory_equal(b.tail, tl, TAIL);
    } else {
        assert_null(b.tail);
    }
    dsv4_pcache_put_back(pc, &b);
}

static int lookup(dsv4_pcache *pc, const int32_t *t, int64_t n)
{
    uint8_t root[32], keys[8][32];
    dsv4_pcache_root(pc, 0, root);
    return dsv4_pcache_lookup(pc, root, t, n, 8, keys);
}

static void test_sha256(void **state)
{
    (void)state;
    static const struct {
        const char *msg;
        int repeat;
        const char *hex;
    } v[] = {
        { "", 1, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
        { "abc", 1, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
        { "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 1,
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1" },
        { "a", 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0" },
    };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(v); i++) {
        struct dsv4_sha256 h;
        uint8_t out[32];
        char hex[65];
        dsv4_sha256_init(&h);
        for (int r = 0; r < v[i].repeat; r++)
            dsv4_sha256_update(&h, v[i].msg, strlen(v[i].msg));
        dsv4_sha256_final(&h, out);
        dsv4_hex(out, 32, hex);
        assert_string_equal(hex, v[i].hex);
    }
    /* the checksum sees a flipped bit anywhere, and the length */
    uint8_t buf[100] = { 0 };
    uint64_t s0 = dsv4_sum64(0, buf, sizeof(buf));
    for (int i = 0; i < 100; i++) {
        buf[i] ^= 4;
        assert_true(dsv4_sum64(0, buf, sizeof(buf)) != s0);
        buf[i] ^= 4;
    }
    assert_true(dsv4_sum64(0, buf, 99) != s0);
}

static void test_ram_lru(void **state)
{
    (void)state;
    int32_t t[4 * B];
    uint8_t keys[4][32];
    seq_tokens(1, 4 * B, t);
    /* room for two entries (an entry: the ids, rows, tail and its record) */
    dsv4_pcache *pc = open_cache(model_a, 2 * (B * 4 + ROWS + TAIL + 200), 0, NULL);
    assert_null(dsv4_pcache_dir(pc));
    put_blocks(pc, t, 2, keys);
    assert_int_equal(lookup(pc, t, 2 * B), 2);
    check_block(pc, keys[0], 0, true);     /* block 0 is now the most recent */
    put_blocks(pc, t, 3, keys);             /* block 2 in: block 1 goes */
    struct dsv4_pcache_stats st;
    dsv4_pcache_get_stats(pc, &st);
    assert_int_equal(st.ram_entries, 2);
    assert_int_equal(st.ram_evictions, 1);
    assert_true(dsv4_pcache_has(pc, keys[0]) && !dsv4_pcache_has(pc, keys[1]) &&
                dsv4_pcache_has(pc, keys[2]));
    assert_int_equal(lookup(pc, t, 3 * B), 1);     /* the chain breaks at block 1 */
    assert_int_equal(st.ram_hits, 1);
    dsv4_pcache_close(pc);
}

static void test_disk_reopen_lru_partial(void **state)
{
    (void)state;
    char dir[300];
    int32_t t[4 * B], u[4 * B];
    uint8_t keys[4][32];
    seq_tokens(1, 4 * B, t);
    new_dir(dir, sizeof(dir));
    uint64_t file = sizeof(struct dsv4_pfile_hdr) + B * 4 + ROWS + TAIL;
    dsv4_pcache *pc = open_cache(model_a, 0, 3 * file, dir);
    assert_string_equal(dsv4_pcache_dir(pc), dir);
    put_blocks(pc, t, 3, keys);
    dsv4_pcache_close(pc);
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    char path[512], hex[65];
    dsv4_hex(keys[0], 32, hex);
    snprintf(path, sizeof(path), "%s/%s.blk", dir, hex);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal((uint64_t)st.st_size, file);

    /* a new process: disk hits, rows alone or with the tail */
    pc = open_cache(model_a, 1 << 20, 3 * file, dir);
    assert_int_equal(lookup(pc, t, 4 * B), 3);
    assert_int_equal(lookup(pc, t, 3 * B - 1), 2);
    /* partial: a prompt that leaves the cached one inside block 1 */
    memcpy(u, t, sizeof(u));
    u[B + 5] += 1;
    assert_int_equal(lookup(pc, u, 4 * B), 1);
    check_block(pc, keys[1], 1, false);
    check_block(pc, keys[0], 0, true);
    struct dsv4_pcache_stats s;
    dsv4_pcache_get_stats(pc, &s);
    assert_int_equal(s.disk_hits, 2);
    assert_int_equal(s.ram_entries, 1);     /* the block read whole is in RAM now */
    check_block(pc, keys[0], 0, true);
    dsv4_pcache_get_stats(pc, &s);
    assert_int_equal(s.ram_hits, 1);
    dsv4_pcache_close(pc);

    /* LRU by file across a reopen: blocks 0 and 1 were used last, block 2 goes */
    pc = open_cache(model_a, 0, 3 * file, dir);
    int32_t v[B];
    seq_tokens(2, B, v);
    v[0] = 99;
    put_blocks(pc, v, 1, NULL);
    dsv4_pcache_get_stats(pc, &s);
    assert_int_equal(s.disk_entries, 3);
    assert_int_equal(s.disk_evictions, 1);
    assert_true(dsv4_pcache_has(pc, keys[0]) && dsv4_pcache_has(pc, keys[1]) &&
                !dsv4_pcache_has(pc, keys[2]));
    dsv4_pcache_close(pc);
    /* a smaller cap on open evicts down to it */
    pc = open_cache(model_a, 0, 2 * file, dir);
    dsv4_pcache_get_stats(pc, &s);
    assert_int_equal(s.disk_entries, 2);
    dsv4_pcache_close(pc);
}

/* stderr into a file while `fn` runs: the lines it logged that contain `what`. */
static int capture_fd = -1, saved_fd = -1;
static void capture_begin(void)
{
    char p[300];
    snprintf(p, sizeof(p), "%s/log", base);
    fflush(stderr);
    saved_fd = dup(2);
    capture_fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600);
    dup2(capture_fd, 2);
}

static int capture_end(const char *what)
{
    fflush(stderr);
    dup2(saved_fd, 2);
    close(saved_fd);
    char buf[8192] = { 0 };
    ssize_t n = pread(capture_fd, buf, sizeof(buf) - 1, 0);
    close(capture_fd);
    int lines = 0;
    for (char *p = buf; n > 0 && (p = strstr(p, what)); p++)
        lines++;
    return lines;
}

enum damage { TRUNC_HALF, TRUNC_HDR, FLIP_ROWS, FLIP_IDS, FLIP_TAIL, APPEND, OLD_VERSION,
              OTHER_ENDIAN, RENAMED, MODE, SYMLINK, OWNER, N_DAMAGE };

static void damage(const char *dir, const uint8_t *key, const uint8_t *other, enum damage d)
{
    char path[512], hex[65];
    dsv4_hex(key, 32, hex);
    snprintf(path, sizeof(path), "%s/%s.blk", dir, hex);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    uint8_t c;
    off_t hdr = sizeof(struct dsv4_pfile_hdr);
    switch (d) {
    case TRUNC_HALF:
        assert_int_equal(ftruncate(fd, st.st_size / 2), 0);
        break;
    case TRUNC_HDR:
        assert_int_equal(ftruncate(fd, 10), 0);
        break;
    case FLIP_ROWS:
    case FLIP_IDS:
    case FLIP_TAIL: {
        off_t at = d == FLIP_IDS ? hdr + 5 : d == FLIP_ROWS ? hdr + B * 4 + 17 : st.st_size - 3;
        assert_int_equal(pread(fd, &c, 1, at), 1);
        c ^= 0x10;
        assert_int_equal(pwrite(fd, &c, 1, at), 1);
        break;
    }
    case APPEND:
        assert_int_equal(pwrite(fd, "x", 1, st.st_size), 1);
        break;
    case OLD_VERSION:
    case OTHER_ENDIAN: {
        uint32_t v = d == OLD_VERSION ? DSV4_PFILE_VERSION + 1 : 0x04030201u;
        assert_int_equal(pwrite(fd, &v, 4, offsetof(struct dsv4_pfile_hdr, version) +
                                             (d == OTHER_ENDIAN ? 4 : 0)), 4);
        break;
    }
    case RENAMED: {
        char p2[512], h2[65];
        dsv4_hex(other, 32, h2);
        snprintf(p2, sizeof(p2), "%s/%s.blk", dir, h2);
        unlink(p2);
        assert_int_equal(rename(path, p2), 0);
        break;
    }
    case MODE:
        assert_int_equal(fchmod(fd, 0644), 0);
        break;
    case SYMLINK: {
        char p2[512];
        snprintf(p2, sizeof(p2), "%s/target", dir);
        assert_int_equal(rename(path, p2), 0);
        assert_int_equal(symlink(p2, path), 0);
        break;
    }
    case OWNER:
        assert_int_equal(fchown(fd, 65534, 65534), 0);
        break;
    default:
        break;
    }
    close(fd);
}

static void test_bad_files(void **state)
{
    (void)state;
    int32_t t[2 * B];
    uint8_t keys[2][32];
    seq_tokens(3, 2 * B, t);
    for (int d = 0; d < N_DAMAGE; d++) {
        if (d == OWNER && geteuid() != 0)
            continue;   /* only root can give a file away */
        for (int when = 0; when < 2; when++) {  /* damaged before the open, or after it */
            char dir[300];
            new_dir(dir, sizeof(dir));
            dsv4_pcache *pc = open_cache(model_a, 0, 1 << 20, dir);
            put_blocks(pc, t, 2, keys);
            if (when == 0) {
                dsv4_pcache_close(pc);
                damage(dir, keys[0], keys[1], (enum damage)d);
                capture_begin();
                pc = open_cache(model_a, 0, 1 << 20, dir);
            } else {
                damage(dir, keys[0], keys[1], (enum damage)d);
                capture_begin();
            }
            /* the damaged block is refused wherever it is noticed (scan, lookup or read);
             * the tail's checksum only when the tail is read */
            struct dsv4_err err = { "" };
            struct dsv4_pcache_block b;
            const uint8_t *k = d == RENAMED ? keys[1] : keys[0];
            int rc = dsv4_pcache_get(pc, k, false, &b, &err);
            if (d == FLIP_TAIL) {
                assert_int_equal(rc, 0);
                dsv4_pcache_put_back(pc, &b);
                rc = dsv4_pcache_get(pc, k, true, &b, &err);
            }
            assert_int_equal(rc, -ENOENT);
            assert_int_equal(dsv4_pcache_get(pc, k, true, &b, &err), -ENOENT);
            struct dsv4_pcache_stats st;
            dsv4_pcache_get_stats(pc, &st);
            int lines = capture_end("deleted");
            if (lines != 1 || st.bad_files != 1)
                fail_msg("damage %d (%s the open): %d log lines, %llu bad files", d,
                         when ? "after" : "before", lines, (unsigned long long)st.bad_files);
            char path[512], hex[65];
            struct stat sb;
            dsv4_hex(k, 32, hex);
            snprintf(path, sizeof(path), "%s/%s.blk", dir, hex);
            assert_int_equal(lstat(path, &sb), -1);
            /* the good block is still served, and the store takes the block again */
            if (d != RENAMED)
                check_block(pc, keys[1], 1, true);
            put_blocks(pc, t, 2, NULL);
            check_block(pc, keys[0], 0, true);
            dsv4_pcache_close(pc);
        }
    }
    /* another model's file: refused and deleted by that model's cache */
    char dir[300];
    new_dir(dir, sizeof(dir));
    dsv4_pcache *pc = open_cache(model_a, 0, 1 << 20, dir);
    put_blocks(pc, t, 1, keys);
    dsv4_pcache_close(pc);
    capture_begin();
    pc = open_cache(model_b, 0, 1 << 20, dir);
    struct dsv4_pcache_block b;
    struct dsv4_err err = { "" };
    assert_int_equal(dsv4_pcache_get(pc, keys[0], true, &b, &err), -ENOENT);
    assert_int_equal(capture_end("another model's: deleted"), 1);
    dsv4_pcache_close(pc);
}

static void test_disk_full_and_private_dir(void **state)
{
    (void)state;
    char dir[300];
    int32_t t[2 * B];
    uint8_t keys[2][32];
    seq_tokens(4, 2 * B, t);
    new_dir(dir, sizeof(dir));
    dsv4_pcache *pc = open_cache(model_a, 1 << 20, 1 << 20, dir);
    /* a file-size limit: the write fails like a full disk (EFBIG, SIGXFSZ ignored) */
    struct rlimit old, lim = { 1000, 1000 };   /* under a file, over a log line */
    getrlimit(RLIMIT_FSIZE, &old);
    lim.rlim_max = old.rlim_max;
    signal(SIGXFSZ, SIG_IGN);
    capture_begin();
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    put_blocks(pc, t, 2, keys);
    setrlimit(RLIMIT_FSIZE, &old);
    assert_int_equal(capture_end("disk tier off"), 1);
    struct dsv4_pcache_stats st;
    dsv4_pcache_get_stats(pc, &st);
    assert_false(st.disk_on);
    assert_int_equal(st.ram_entries, 2);
    check_block(pc, keys[1], 1, true);
    dsv4_pcache_close(pc);
    uint64_t n, bytes;
    struct dsv4_err err = { "" };
    assert_int_equal(dsv4_pcache_dir_stat(dir, &n, &bytes, &err), 0);
    assert_int_equal(n, 0);     /* no temp file left behind either */
    char p[400];
    snprintf(p, sizeof(p), "%s/.x.blk.tmp.1", dir);
    assert_int_equal(access(p, F_OK), -1);

    /* a directory others can read: no disk tier, the RAM tier works */
    new_dir(dir, sizeof(dir));
    assert_int_equal(mkdir(dir, 0755), 0);
    capture_begin();
    pc = open_cache(model_a, 1 << 20, 1 << 20, dir);
    assert_int_equal(capture_end("disk tier off"), 1);
    assert_null(dsv4_pcache_dir(pc));
    put_blocks(pc, t, 1, keys);
    check_block(pc, keys[0], 0, true);
    dsv4_pcache_close(pc);
    assert_int_equal(dsv4_pcache_dir_stat(dir, &n, &bytes, &err), -EPERM);
}

static void test_status_clear(void **state)
{
    (void)state;
    char dir[300], p[400];
    int32_t t[3 * B];
    seq_tokens(5, 3 * B, t);
    new_dir(dir, sizeof(dir));
    dsv4_pcache *pc = open_cache(model_a, 0, 1 << 20, dir);
    put_blocks(pc, t, 3, NULL);
    dsv4_pcache_close(pc);
    /* a crash's stale temp file is removed on open; a fresh one (a writer now) is kept */
    snprintf(p, sizeof(p), "%s/.%064d.blk.tmp.1", dir, 0);
    int fd = open(p, O_WRONLY | O_CREAT, 0600);
    close(fd);
    struct timespec old[2] = { { 1000, 0 }, { 1000, 0 } };
    assert_int_equal(utimensat(AT_FDCWD, p, old, 0), 0);
    snprintf(p, sizeof(p), "%s/.%064d.blk.tmp.2", dir, 0);
    close(open(p, O_WRONLY | O_CREAT, 0600));
    pc = open_cache(model_a, 0, 1 << 20, dir);
    dsv4_pcache_close(pc);
    snprintf(p, sizeof(p), "%s/.%064d.blk.tmp.1", dir, 0);
    assert_int_equal(access(p, F_OK), -1);
    snprintf(p, sizeof(p), "%s/.%064d.blk.tmp.2", dir, 0);
    assert_int_equal(access(p, F_OK), 0);
    uint64_t n, bytes;
    struct dsv4_err err = { "" };
    assert_int_equal(dsv4_pcache_dir_stat(dir, &n, &bytes, &err), 0);
    assert_int_equal(n, 3);
    assert_int_equal(bytes, 3 * (sizeof(struct dsv4_pfile_hdr) + B * 4 + ROWS + TAIL));
    /* clear: block and temp files go; a file that is not the cache's stays, and says so */
    snprintf(p, sizeof(p), "%s/notes.txt", dir);
    close(open(p, O_WRONLY | O_CREAT, 0600));
    assert_int_equal(dsv4_pcache_dir_remove(dir, &err), -ENOTEMPTY);
    assert_int_equal(dsv4_pcache_dir_stat(dir, &n, &bytes, &err), 0);
    assert_int_equal(n, 0);
    unlink(p);
    assert_int_equal(dsv4_pcache_dir_remove(dir, &err), 0);
    assert_int_equal(access(dir, F_OK), -1);
    assert_int_equal(dsv4_pcache_dir_stat(dir, &n, &bytes, &err), -ENOENT);
    /* the in-process clear */
    new_dir(dir, sizeof(dir));
    pc = open_cache(model_a, 1 << 20, 1 << 20, dir);
    put_blocks(pc, t, 3, NULL);
    dsv4_pcache_clear(pc);
    assert_int_equal(lookup(pc, t, 3 * B), 0);
    dsv4_pcache_close(pc);
    assert_int_equal(dsv4_pcache_dir_stat(dir, &n, &bytes, &err), 0);
    assert_int_equal(n, 0);
}

static void test_default_dir_and_block(void **state)
{
    (void)state;
    char buf[512];
    struct dsv4_err err = { "" };
    setenv("XDG_CACHE_HOME", "/x/cache", 1);
    assert_int_equal(dsv4_pcache_default_dir(model_a, buf, sizeof(buf), &err), 0);
    assert_string_equal(buf, "/x/cache/dsv4/a1a20000000000000000000000000000");
    setenv("XDG_CACHE_HOME", "relative", 1);
    setenv("HOME", "/h", 1);
    assert_int_equal(dsv4_pcache_default_dir(model_a, buf, sizeof(buf), &err), 0);
    assert_string_equal(buf, "/h/.cache/dsv4/a1a20000000000000000000000000000");
    /* the block: the smallest multiple of every ratio ≥ 128, or refused */
    struct dsv4_pcache_opts o = { .model = model_a, .ratio_lcm = 48, .ram_bytes = 1 };
    dsv4_pcache *pc;
    assert_int_equal(dsv4_pcache_open(&o, &pc, &err), 0);
    assert_int_equal(dsv4_pcache_block_tokens(pc), 144);
    dsv4_pcache_close(pc);
    o.block = 100;
    assert_int_equal(dsv4_pcache_open(&o, &pc, &err), -EINVAL);
}

int main(void)
{
    snprintf(base, sizeof(base), "/tmp/test-prefix-cache.XXXXXX");
    if (!mkdtemp(base))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256),
        cmocka_unit_test(test_ram_lru),
        cmocka_unit_test(test_disk_reopen_lru_partial),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_disk_full_and_private_dir),
        cmocka_unit_test(test_status_clear),
        cmocka_unit_test(test_default_dir_and_block),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
    if (system(cmd) != 0)
        fprintf(stderr, "test-prefix-cache: %s left behind\n", base);
    return rc;
}
