/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the prefix cache's block file (common/prefix_file.c) and its reader
 * (common/prefix_cache.c): each input is parsed in memory for a fixed model id, then written
 * as a block file into a private cache directory and read through dsv4_pcache_get (rows
 * alone, then with the tail). An accepted file must be exactly what its header lays out, and
 * what the cache returns must be those bytes; a refused one must be gone from the directory.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "prefix_cache.h"
#include "prefix_file.h"

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "invariant failed: %s\n", #x); abort(); } } while (0)

/* The model id of the seed corpus: bytes 1, 2, ..., 32. */
static uint8_t model[DSV4_SHA256_LEN];
static char dir[64];

static void remove_dir(void)
{
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        for (int i = 0; i < DSV4_SHA256_LEN; i++)
            model[i] = (uint8_t)(i + 1);
        snprintf(dir, sizeof(dir), "/tmp/fuzz-prefix-file.XXXXXX");
        CHECK(mkdtemp(dir));
        atexit(remove_dir);
        dsv4_log_set_level(DSV4_LOG_ERROR);     /* every refusal logs a line */
    }
    struct dsv4_pfile_hdr h;
    enum dsv4_pfile_bad bad = dsv4_pfile_parse(data, size, model, &h);
    CHECK(bad <= DSV4_PFILE_FOREIGN && dsv4_pfile_bad_name(bad)[0]);
    if (bad == DSV4_PFILE_OK) {
        CHECK(dsv4_pfile_bytes(&h) == size && h.p1 > h.p0 && h.p0 >= 0);
        CHECK(dsv4_pfile_head_bytes(&h) <= size);
    }
    /* the same bytes as a file of the cache, named by its header's key (else key 0) */
    uint8_t key[DSV4_SHA256_LEN] = { 0 };
    if (size >= sizeof(h))
        memcpy(key, ((const struct dsv4_pfile_hdr *)(const void *)data)->key, sizeof(key));
    char hex[2 * DSV4_SHA256_LEN + 1], path[256];
    dsv4_hex(key, sizeof(key), hex);
    snprintf(path, sizeof(path), "%s/%s.blk", dir, hex);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    CHECK(size == 0 || write(fd, data, size) == (ssize_t)size);
    close(fd);
    struct dsv4_pcache_opts o = { .model = model, .block = 0, .ratio_lcm = 1,
                                  .disk_bytes = 1ull << 40, .dir = dir };
    dsv4_pcache *pc;
    CHECK(dsv4_pcache_open(&o, &pc, NULL) == 0);
    for (int want_tail = 0; want_tail < 2; want_tail++) {
        struct dsv4_pcache_block b;
        int rc = dsv4_pcache_get(pc, key, want_tail, &b, NULL);
        if (rc < 0) {
            CHECK(access(path, F_OK) != 0);     /* refused means deleted */
            break;
        }
        CHECK(bad == DSV4_PFILE_OK || (bad == DSV4_PFILE_CORRUPT && !want_tail));
        const uint8_t *rows = data + sizeof(h) + (size_t)(b.p1 - b.p0) * sizeof(int32_t);
        CHECK(memcmp(b.tokens, data + sizeof(h), (size_t)(b.p1 - b.p0) * 4) == 0);
        CHECK(rows + b.rows_len <= data + size && memcmp(b.rows, rows, b.rows_len) == 0);
        if (want_tail)
            CHECK(rows + b.rows_len + b.tail_len == data + size &&
                  memcmp(b.tail, rows + b.rows_len, b.tail_len) == 0);
        dsv4_pcache_put_back(pc, &b);
    }
    dsv4_pcache_close(pc);
    unlink(path);
    return 0;
}
