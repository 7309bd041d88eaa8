/* SPDX-License-Identifier: MIT */
/*
 * The prefix cache's disk tier (used by prefix_cache.c only; the behaviour is described in
 * prefix_cache.h): a private directory opened O_NOFOLLOW and used through its descriptor, one
 * block file per key (prefix_file.h) written to a temp name and renamed, an in-memory index of
 * the files (size, use time = mtime) kept under a byte cap by deleting the least recently used,
 * bad files refused with one log line and deleted, a full disk turning the tier off.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "prefix_cache.h"

struct dsv4_pdisk_ent {
    uint8_t key[DSV4_SHA256_LEN];
    uint64_t bytes, use;            /* file size; last use (ns, the file's mtime) */
};

struct dsv4_pdisk {
    uint8_t model[DSV4_SHA256_LEN];
    uint64_t cap, used;
    int dfd;                        /* -1: the tier is off */
    char dir[4096];
    struct dsv4_pdisk_ent *ent;
    size_t n, cap_ent;
    uint64_t hits, evictions, bad_files;
};

/* Open (dir NULL: dsv4_pcache_default_dir), index and trim to cap; a directory that cannot be
 * made or is not private leaves the tier off after one warning. */
void dsv4_pdisk_open(struct dsv4_pdisk *dk, const uint8_t *model, uint64_t cap,
                     const char *dir);
void dsv4_pdisk_close(struct dsv4_pdisk *dk);
/* Indexed, or written by another process since the scan (indexed now). */
bool dsv4_pdisk_has(struct dsv4_pdisk *dk, const uint8_t *key);
void dsv4_pdisk_put(struct dsv4_pdisk *dk, const struct dsv4_pcache_block *b);
/* Read and verify (b->own is the buffer); -ENOENT when absent or refused. */
int dsv4_pdisk_get(struct dsv4_pdisk *dk, const uint8_t *key, bool want_tail,
                   struct dsv4_pcache_block *b, struct dsv4_err *err);
/* Delete every indexed file. */
void dsv4_pdisk_clear(struct dsv4_pdisk *dk);
