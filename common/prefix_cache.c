/* SPDX-License-Identifier: MIT */
/* The prefix cache: keys, lookup and the RAM tier; the disk tier is prefix_disk.c. */
#include "prefix_cache.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "prefix_disk.h"
#include "prefix_file.h"
#include "util.h"

struct ram_ent {
    struct ram_ent *prev, *next;    /* LRU list, most recent first */
    uint8_t key[DSV4_SHA256_LEN], parent[DSV4_SHA256_LEN];
    int64_t p0, p1;
    uint8_t *data;                  /* tokens | rows | tail */
    uint64_t rows_len, tail_len, bytes;
};

struct dsv4_pcache {
    uint8_t model[DSV4_SHA256_LEN];
    int block;
    uint64_t ram_cap;
    struct ram_ent *head, *tail;
    uint64_t ram_used, ram_n;
    struct dsv4_pdisk disk;
    struct dsv4_pcache_stats st;
};

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
    pc->disk.dfd = -1;
    if (o->disk_bytes)
        dsv4_pdisk_open(&pc->disk, pc->model, o->disk_bytes, o->dir);
    *ret = pc;
    return 0;
}

dsv4_pcache *dsv4_pcache_close(dsv4_pcache *pc)
{
    if (!pc)
        return NULL;
    while (pc->head)
        ram_free(pc, pc->head);
    dsv4_pdisk_close(&pc->disk);
    free(pc);
    return NULL;
}

int dsv4_pcache_block_tokens(const dsv4_pcache *pc)
{
    return pc->block;
}

const char *dsv4_pcache_dir(const dsv4_pcache *pc)
{
    return pc->disk.dfd >= 0 ? pc->disk.dir : NULL;
}

void dsv4_pcache_get_stats(const dsv4_pcache *pc, struct dsv4_pcache_stats *ret)
{
    *ret = pc->st;
    ret->ram_entries = pc->ram_n;
    ret->ram_bytes = pc->ram_used;
    ret->disk_entries = pc->disk.n;
    ret->disk_bytes = pc->disk.used;
    ret->disk_on = pc->disk.dfd >= 0;
    ret->disk_hits = pc->disk.hits;
    ret->disk_evictions = pc->disk.evictions;
    ret->bad_files = pc->disk.bad_files;
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

bool dsv4_pcache_has(const dsv4_pcache *pc, const uint8_t *key)
{
    dsv4_pcache *m = (dsv4_pcache *)pc;
    return ram_find(m, key) || dsv4_pdisk_has(&m->disk, key);
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

int dsv4_pcache_put(dsv4_pcache *pc, const struct dsv4_pcache_block *b, struct dsv4_err *err)
{
    if (b->p0 < 0 || b->p1 - b->p0 < 1 || b->p1 - b->p0 > pc->block || !b->tail)
        return dsv4_errf(err, -EINVAL,
                         "prefix cache: a block is 1..%d tokens (a sequence's last may be "
                         "partial) with its tail", pc->block);
    pc->st.stores++;
    if (pc->ram_cap)
        ram_put(pc, b);
    if (pc->disk.dfd >= 0)
        dsv4_pdisk_put(&pc->disk, b);
    return 0;
}

/* ---- read ---- */

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
    if (!dsv4_pdisk_has(&pc->disk, key))
        return dsv4_errf(err, -ENOENT, "prefix cache: no such block");
    int rc = dsv4_pdisk_get(&pc->disk, key, want_tail, b, err);
    if (rc == 0 && want_tail && pc->ram_cap)
        ram_put(pc, b);     /* read whole: promoted */
    return rc;
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
    dsv4_pdisk_clear(&pc->disk);
}

