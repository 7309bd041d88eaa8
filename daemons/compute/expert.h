/* SPDX-License-Identifier: MIT */
/*
 * Routed experts reach the forward pass only through this interface, so the
 * expert-fetcher daemon can serve them later. The MoE step of a layer asks
 * once per chunk for the union of the experts its rows selected, computes,
 * then releases them: a leased expert stays valid (never evicted) until
 * released. The in-process provider reads experts from the checkpoint with
 * pread into a bounded LRU cache.
 */
#pragma once

#include <stdint.h>

#include "err.h"
#include "kernels.h"
#include "safetensors.h"

struct dsv4_config;

/* One routed expert in its native FP4 form: w1 gate, w3 up, w2 down. */
struct dsv4_expert_weights {
    struct dsv4_fp4_weight w1, w3, w2;
};

struct dsv4_expert_provider {
    void *ctx;
    /*
     * Lease experts ids[0..n) of `layer`: ret[i] points at expert ids[i].
     * Ids are distinct. All-or-nothing: on error nothing stays leased.
     */
    int (*acquire)(void *ctx, int layer, const int *ids, int n,
                   const struct dsv4_expert_weights **ret, struct dsv4_err *err);
    /* Give back the leases taken by one acquire (same layer and ids). */
    void (*release)(void *ctx, int layer, const int *ids, int n);
    /*
     * Optional (NULL: none): a hint that experts ids[0..n) of `layer` will be asked for soon
     * (hash-routed layers from the token ids, router lookahead elsewhere), so a provider that
     * reads asynchronously can load them while the engine computes. Never blocks.
     */
    void (*prefetch)(void *ctx, int layer, const int *ids, int n);
};

struct dsv4_expert_cache_stats {
    uint64_t hits, misses, evictions, bytes_read, bytes_cached, peak_bytes;
};

typedef struct dsv4_expert_cache dsv4_expert_cache;

/*
 * In-process provider over an open checkpoint (borrowed; must outlive the
 * cache). Validates every routed expert tensor of every layer up front.
 * `budget_bytes` bounds the unleased entries; leased entries are never
 * evicted, so a batch larger than the budget temporarily exceeds it.
 */
int dsv4_expert_cache_new(const dsv4_checkpoint *ckpt, const struct dsv4_config *cfg,
                          uint64_t budget_bytes, dsv4_expert_cache **ret, struct dsv4_err *err);
/* The same over the blocks PREFIX.0..n_blocks-1 ("mtp": the DSpark stages); layer = block. */
int dsv4_expert_cache_new_blocks(const dsv4_checkpoint *ckpt, const struct dsv4_config *cfg,
                                 const char *prefix, int n_blocks, uint64_t budget_bytes,
                                 dsv4_expert_cache **ret, struct dsv4_err *err);
dsv4_expert_cache *dsv4_expert_cache_free(dsv4_expert_cache *c);
/* The provider view (ctx = the cache). */
struct dsv4_expert_provider dsv4_expert_cache_provider(dsv4_expert_cache *c);
void dsv4_expert_cache_get_stats(const dsv4_expert_cache *c, struct dsv4_expert_cache_stats *ret);
