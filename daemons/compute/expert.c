/* SPDX-License-Identifier: MIT */
/*
 * In-process routed-expert provider: experts are read from the checkpoint
 * with pread (one allocation per expert holding w1, w3, w2 and their
 * scales) into an LRU cache bounded by a byte budget, and dropped from the page
 * cache after the read, so the budget bounds the memory. Leased entries are
 * pinned; only unleased ones are evicted, least recently released first.
 * The expert-fetcher daemon will provide the same interface over shared
 * memory.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "expert.h"
#include "util.h"

struct entry {
    int key;                    /* layer * n_routed + expert; -1 when free */
    int leases;
    uint8_t *buf;
    uint64_t bytes;
    struct entry *prev, *next;  /* LRU list of unleased entries (head = oldest) */
    struct dsv4_expert_weights w;
};

/* Tensors of one expert: w1, w3, w2 weight and scale. */
struct expert_src {
    const struct dsv4_tensor *t[6];
};

struct dsv4_expert_cache {
    const dsv4_checkpoint *ckpt;
    const char *prefix;         /* "layers" (target) or "mtp" (DSpark stages) */
    int n_layers, n_routed, dim, inter;
    uint64_t budget;
    struct expert_src *src;     /* [n_layers * n_routed] */
    struct entry **map;         /* [n_layers * n_routed] → cached entry or NULL */
    struct entry *lru_head, *lru_tail;
    struct dsv4_expert_cache_stats stats;
    pthread_mutex_t lock;
};

static const char *const part_name[3] = { "w1", "w3", "w2" };

static int find_part(dsv4_expert_cache *c, int layer, int ex, int part, bool scale,
                     uint64_t rows, uint64_t cols_bytes, const struct dsv4_tensor **ret,
                     struct dsv4_err *err)
{
    char name[160];
    snprintf(name, sizeof(name), "%s.%d.ffn.experts.%d.%s.%s", c->prefix, layer, ex,
             part_name[part],
             scale ? "scale" : "weight");
    const struct dsv4_tensor *t = dsv4_checkpoint_find(c->ckpt, name);
    if (!t)
        return dsv4_errf(err, -ENOENT, "checkpoint: tensor %s is missing", name);
    /* FP4 payload is stored as I8 (official) or U8 bytes. */
    bool dt_ok = scale ? t->dtype == DSV4_DTYPE_F8_E8M0
                       : (t->dtype == DSV4_DTYPE_I8 || t->dtype == DSV4_DTYPE_U8);
    if (!dt_ok || t->rank != 2 || t->shape[0] != rows || t->shape[1] != cols_bytes)
        return dsv4_errf(err, -EINVAL,
                         "checkpoint: tensor %s must be %s [%llu, %llu] (got %s rank %u)", name,
                         scale ? "F8_E8M0" : "I8", (unsigned long long)rows,
                         (unsigned long long)cols_bytes, dsv4_dtype_name(t->dtype), t->rank);
    *ret = t;
    return 0;
}

int dsv4_expert_cache_new(const dsv4_checkpoint *ckpt, const struct dsv4_config *cfg,
                          uint64_t budget_bytes, dsv4_expert_cache **ret, struct dsv4_err *err)
{
    return dsv4_expert_cache_new_blocks(ckpt, cfg, "layers", cfg->n_layers, budget_bytes, ret,
                                        err);
}

int dsv4_expert_cache_new_blocks(const dsv4_checkpoint *ckpt, const struct dsv4_config *cfg,
                                 const char *prefix, int n_blocks, uint64_t budget_bytes,
                                 dsv4_expert_cache **ret, struct dsv4_err *err)
{
    dsv4_expert_cache *c = dsv4_xcalloc(1, sizeof(*c));
    c->ckpt = ckpt;
    c->prefix = prefix;
    c->n_layers = n_blocks;
    c->n_routed = cfg->n_routed_experts;
    c->dim = cfg->dim;
    c->inter = cfg->moe_inter_dim;
    c->budget = budget_bytes;
    size_t n = (size_t)c->n_layers * c->n_routed;
    c->src = dsv4_xcalloc(n, sizeof(*c->src));
    c->map = dsv4_xcalloc(n, sizeof(*c->map));
    pthread_mutex_init(&c->lock, NULL);
    for (int l = 0; l < c->n_layers; l++)
        for (int x = 0; x < c->n_routed; x++) {
            struct expert_src *s = &c->src[(size_t)l * c->n_routed + x];
            for (int p = 0; p < 3; p++) {
                uint64_t rows = p == 2 ? (uint64_t)c->dim : (uint64_t)c->inter;
                uint64_t cols = p == 2 ? (uint64_t)c->inter : (uint64_t)c->dim;
                int rc = find_part(c, l, x, p, false, rows, cols / 2, &s->t[2 * p], err);
                if (rc == 0)
                    rc = find_part(c, l, x, p, true, rows, cols / 32, &s->t[2 * p + 1], err);
                if (rc < 0) {
                    dsv4_expert_cache_free(c);
                    return rc;
                }
            }
        }
    *ret = c;
    return 0;
}

static void lru_unlink(dsv4_expert_cache *c, struct entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        c->lru_head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->lru_tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_push(dsv4_expert_cache *c, struct entry *e)
{
    e->prev = c->lru_tail;
    e->next = NULL;
    if (c->lru_tail)
        c->lru_tail->next = e;
    else
        c->lru_head = e;
    c->lru_tail = e;
}

static void drop(dsv4_expert_cache *c, struct entry *e)
{
    c->map[e->key] = NULL;
    c->stats.bytes_cached -= e->bytes;
    free(e->buf);
    free(e);
}

static void evict_to_budget(dsv4_expert_cache *c)
{
    while (c->stats.bytes_cached > c->budget && c->lru_head) {
        struct entry *e = c->lru_head;
        lru_unlink(c, e);
        drop(c, e);
        c->stats.evictions++;
    }
}

static int load_entry(dsv4_expert_cache *c, int key, struct entry **ret, struct dsv4_err *err)
{
    const struct expert_src *s = &c->src[key];
    uint64_t total = 0, off[6];
    for (int i = 0; i < 6; i++) {
        off[i] = total;
        total += DSV4_ALIGN_UP(s->t[i]->nbytes, 64);
    }
    struct entry *e = dsv4_xcalloc(1, sizeof(*e));
    e->key = key;
    e->bytes = total;
    e->buf = dsv4_xaligned_alloc(64, total);
    for (int i = 0; i < 6; i++) {
        int rc = dsv4_checkpoint_read(c->ckpt, s->t[i], 0, e->buf + off[i], s->t[i]->nbytes, err);
        if (rc < 0) {
            free(e->buf);
            free(e);
            return rc;
        }
        /* The budget bounds this cache's memory: no second copy in the page cache (the
         * fetcher daemon reads O_DIRECT for the same reason). */
        dsv4_checkpoint_forget(c->ckpt, s->t[i]);
    }
    struct dsv4_fp4_weight *parts[3] = { &e->w.w1, &e->w.w3, &e->w.w2 };
    for (int p = 0; p < 3; p++) {
        parts[p]->w = e->buf + off[2 * p];
        parts[p]->scale = e->buf + off[2 * p + 1];
        parts[p]->rows = (uint32_t)s->t[2 * p]->shape[0];
        parts[p]->cols = (uint32_t)s->t[2 * p]->shape[1] * 2;
    }
    c->stats.bytes_read += total;
    *ret = e;
    return 0;
}

static void release_locked(dsv4_expert_cache *c, int layer, const int *ids, int n)
{
    for (int i = 0; i < n; i++) {
        struct entry *e = c->map[(size_t)layer * c->n_routed + ids[i]];
        if (e && --e->leases == 0)
            lru_push(c, e);
    }
}

static int cache_acquire(void *ctx, int layer, const int *ids, int n,
                         const struct dsv4_expert_weights **ret, struct dsv4_err *err)
{
    dsv4_expert_cache *c = ctx;
    if (layer < 0 || layer >= c->n_layers)
        return dsv4_errf(err, -EINVAL, "experts: layer %d out of range", layer);
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= c->n_routed) {
            release_locked(c, layer, ids, i);
            pthread_mutex_unlock(&c->lock);
            return dsv4_errf(err, -EINVAL, "experts: expert %d out of range", ids[i]);
        }
        int key = layer * c->n_routed + ids[i];
        struct entry *e = c->map[key];
        if (e) {
            c->stats.hits++;
            if (e->leases == 0)
                lru_unlink(c, e);
        } else {
            int rc = load_entry(c, key, &e, err);
            if (rc < 0) {
                release_locked(c, layer, ids, i);
                pthread_mutex_unlock(&c->lock);
                return rc;
            }
            c->stats.misses++;
            c->map[key] = e;
            c->stats.bytes_cached += e->bytes;
            if (c->stats.bytes_cached > c->stats.peak_bytes)
                c->stats.peak_bytes = c->stats.bytes_cached;
        }
        e->leases++;
        ret[i] = &e->w;
        evict_to_budget(c);
    }
    pthread_mutex_unlock(&c->lock);
    return 0;
}

static void cache_release(void *ctx, int layer, const int *ids, int n)
{
    dsv4_expert_cache *c = ctx;
    pthread_mutex_lock(&c->lock);
    release_locked(c, layer, ids, n);
    evict_to_budget(c);
    pthread_mutex_unlock(&c->lock);
}

struct dsv4_expert_provider dsv4_expert_cache_provider(dsv4_expert_cache *c)
{
    return (struct dsv4_expert_provider){ c, cache_acquire, cache_release, NULL };
}

void dsv4_expert_cache_get_stats(const dsv4_expert_cache *c, struct dsv4_expert_cache_stats *ret)
{
    *ret = c->stats;
}

dsv4_expert_cache *dsv4_expert_cache_free(dsv4_expert_cache *c)
{
    if (!c)
        return NULL;
    size_t n = (size_t)c->n_layers * c->n_routed;
    for (size_t i = 0; i < n; i++)
        if (c->map[i])
            drop(c, c->map[i]);
    free(c->map);
    free(c->src);
    pthread_mutex_destroy(&c->lock);
    free(c);
    return NULL;
}
