/* SPDX-License-Identifier: MIT */
/*
 * The prefix cache's store (docs/ARCHITECTURE.md "Prefix cache"): blocks of B tokens keyed by
 * a SHA-256 chain over the token ids (key_0 = root(model id, B); key_i = H(key_{i-1}, ids of
 * block i)), each holding opaque "rows" (what the block adds) and "tail" (the state at its
 * end) — the engine's dsv4_session_export_rows/_tail, plus the drafter's taps. Two tiers:
 * RAM (byte-bounded LRU) and disk (one file per block, common/prefix_file.h, in a private
 * 0700 directory, byte-bounded, LRU by file use time). A bad file (truncated, corrupt, old
 * format, another model's, not ours alone) is skipped with one log line and deleted; a full
 * disk turns the disk tier off with a warning. Files are written to a temp name and renamed,
 * so a reader sees a whole file or none; they are never rewritten, so several processes can
 * share a directory (one evicting a file another indexed is a miss).
 *
 * One thread uses a cache (the engine's thread). Lookups index both tiers without reading
 * files; dsv4_pcache_get reads and verifies.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "sha256.h"

#define DSV4_PCACHE_DEFAULT_BLOCK 128

typedef struct dsv4_pcache dsv4_pcache;

struct dsv4_pcache_opts {
    const uint8_t *model;   /* [32] model_id.h */
    int block;              /* tokens per block; 0 → the smallest multiple of `ratio_lcm` ≥ 128 */
    int ratio_lcm;          /* lcm of the model's compression ratios (blocks end on windows) */
    uint64_t ram_bytes;     /* RAM tier cap; 0: no RAM tier */
    uint64_t disk_bytes;    /* disk tier cap; 0: no disk tier */
    const char *dir;        /* disk directory; NULL → dsv4_pcache_default_dir */
};

struct dsv4_pcache_stats {
    uint64_t ram_entries, ram_bytes, disk_entries, disk_bytes;
    uint64_t lookups, lookup_tokens, hit_tokens;    /* dsv4_pcache_lookup */
    uint64_t ram_hits, disk_hits;                   /* dsv4_pcache_get */
    uint64_t stores, ram_evictions, disk_evictions, bad_files;
    bool disk_on;
};

/* One block as stored or read. */
struct dsv4_pcache_block {
    uint8_t key[DSV4_SHA256_LEN], parent[DSV4_SHA256_LEN];
    int64_t p0, p1;
    const int32_t *tokens;
    const void *rows, *tail;        /* tail NULL when not asked for */
    uint64_t rows_len, tail_len;
    void *own;                      /* dsv4_pcache_get's buffer (dsv4_pcache_put_back frees) */
};

/* "$XDG_CACHE_HOME/dsv4/<first 32 hex digits of the model id>" (else ~/.cache/dsv4/...). */
int dsv4_pcache_default_dir(const uint8_t *model, char *buf, size_t n, struct dsv4_err *err);

/* Open; a disk directory that cannot be made private costs the disk tier (a warning), not the
 * cache. */
int dsv4_pcache_open(const struct dsv4_pcache_opts *o, dsv4_pcache **ret, struct dsv4_err *err);
dsv4_pcache *dsv4_pcache_close(dsv4_pcache *pc);
int dsv4_pcache_block_tokens(const dsv4_pcache *pc);
const char *dsv4_pcache_dir(const dsv4_pcache *pc);     /* NULL without a disk tier */
void dsv4_pcache_get_stats(const dsv4_pcache *pc, struct dsv4_pcache_stats *ret);

/* key_0 of a chain: model id, block size and `variant` (what the caller's tails hold, e.g.
 * with or without the drafter's taps: chains of different variants never meet). */
void dsv4_pcache_root(const dsv4_pcache *pc, uint32_t variant, uint8_t key[DSV4_SHA256_LEN]);
/* The chain step: the key of the block of `tokens` after the block `parent`. */
void dsv4_pcache_chain(const uint8_t *parent, const int32_t *tokens, int n,
                       uint8_t key[DSV4_SHA256_LEN]);

/* Whether the block `key` is held (either tier). */
bool dsv4_pcache_has(const dsv4_pcache *pc, const uint8_t *key);

/*
 * The longest cached prefix of tokens[0..n) on the chain from `root`: k blocks (keys[0..k)
 * their keys; keys holds up to max_blocks), k·B ≤ n. Counts the lookup in the stats; hit tokens are counted by the
 * caller that restored them (dsv4_pcache_count_hit).
 */
int dsv4_pcache_lookup(dsv4_pcache *pc, const uint8_t *root, const int32_t *tokens, int64_t n, int max_blocks,
                       uint8_t (*keys)[DSV4_SHA256_LEN]);
void dsv4_pcache_count_hit(dsv4_pcache *pc, int64_t tokens);

/* Store a block (both tiers, each if it fits its cap). The data is copied. */
int dsv4_pcache_put(dsv4_pcache *pc, const struct dsv4_pcache_block *b, struct dsv4_err *err);

/*
 * Read block `key`: rows always, the tail when want_tail. Pointers stay valid until
 * dsv4_pcache_put_back(b) (call it for every successful get) and are read-only. -ENOENT when
 * absent or refused (a bad file is deleted and logged).
 */
int dsv4_pcache_get(dsv4_pcache *pc, const uint8_t *key, bool want_tail,
                    struct dsv4_pcache_block *b, struct dsv4_err *err);
void dsv4_pcache_put_back(dsv4_pcache *pc, struct dsv4_pcache_block *b);

/* Drop every block of both tiers (the directory stays). */
void dsv4_pcache_clear(dsv4_pcache *pc);

/*
 * A model's directory without opening a cache (dsv4ctl cache status|clear): count the block
 * files (entries, bytes); remove them and the directory. Only our own regular files named
 * like blocks or their temp files are touched; -ENOENT when there is no directory, -EPERM when
 * it is not ours alone.
 */
int dsv4_pcache_dir_stat(const char *dir, uint64_t *entries, uint64_t *bytes,
                         struct dsv4_err *err);
int dsv4_pcache_dir_remove(const char *dir, struct dsv4_err *err);
