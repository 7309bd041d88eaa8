/* SPDX-License-Identifier: MIT */
/*
 * String map: open addressing with linear probing over a table of 64-bit
 * slots. A slot holds the upper 32 bits of the key's hash (the probe start
 * and a tag that rejects almost every mismatch without touching the entry)
 * and the entry index + 1 (0 = empty). Entries live in a dense array in
 * insertion order; key bytes live in a chunked arena, so the map makes
 * O(1) allocations per 64 KiB of keys instead of one per key. Growing the
 * table rehashes nothing: the tag is the position source.
 */
#include "strmap.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

#define ARENA_CHUNK (64u * 1024u)
#define MAX_ENTRIES ((size_t)INT32_MAX) /* index + 1 fits the slot's low 32 bits */

struct entry {
    const char *key;
    size_t len;
    uint64_t value;
};

struct chunk {
    struct chunk *next;
    size_t used, cap;
    char data[];
};

struct dsv4_strmap {
    uint64_t *slots;     /* (tag << 32) | (index + 1); 0 = empty */
    size_t mask;         /* slot count - 1 (power of two) */
    struct entry *entries;
    size_t n, cap;
    struct chunk *arena;
};

static inline uint64_t rotl64(uint64_t x, unsigned r)
{
    return (x << r) | (x >> (64 - r));
}

/* Final avalanche (a murmur-style xor-shift-multiply finalizer). */
static inline uint64_t fmix64(uint64_t x)
{
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ull;
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ull;
    x ^= x >> 32;
    return x;
}

uint64_t dsv4_strmap_hash(const void *key, size_t len)
{
    const unsigned char *p = key;
    const uint64_t k = 0x9e3779b97f4a7c15ull;
    uint64_t h = 0x243f6a8885a308d3ull ^ ((uint64_t)len * k);
    size_t n = len;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = rotl64((h ^ w) * k, 29);
        p += 8;
        n -= 8;
    }
    if (n) {
        uint64_t w = 0;
        memcpy(&w, p, n);
        h = rotl64((h ^ w ^ ((uint64_t)n << 56)) * k, 29);
    }
    return fmix64(h);
}

static inline uint32_t tag_of(uint64_t hash)
{
    return (uint32_t)(hash >> 32);
}

static const char *arena_copy(dsv4_strmap *m, const void *key, size_t len)
{
    struct chunk *c = m->arena;
    size_t need = len + 1;
    if (!c || c->cap - c->used < need) {
        size_t cap = DSV4_MAX(need, (size_t)ARENA_CHUNK);
        c = dsv4_xmalloc(sizeof(*c) + cap);
        c->cap = cap;
        c->used = 0;
        /* A big key gets its own chunk behind the current one, so the
         * current chunk's free space keeps being used. */
        if (m->arena && need > ARENA_CHUNK) {
            c->next = m->arena->next;
            m->arena->next = c;
        } else {
            c->next = m->arena;
            m->arena = c;
        }
    }
    char *dst = c->data + c->used;
    if (len)
        memcpy(dst, key, len);
    dst[len] = '\0';
    c->used += need;
    return dst;
}

static size_t slots_for(size_t entries)
{
    /* Load factor at most 3/4. */
    size_t want = entries + entries / 3 + 1, n = 16;
    while (n < want)
        n <<= 1;
    return n;
}

static void grow_table(dsv4_strmap *m, size_t nslots)
{
    uint64_t *s = dsv4_xcalloc(nslots, sizeof(*s));
    size_t mask = nslots - 1;
    if (m->slots) {
        for (size_t i = 0; i <= m->mask; i++) {
            uint64_t v = m->slots[i];
            if (!v)
                continue;
            size_t j = (size_t)(v >> 32) & mask;
            while (s[j])
                j = (j + 1) & mask;
            s[j] = v;
        }
        free(m->slots);
    }
    m->slots = s;
    m->mask = mask;
}

dsv4_strmap *dsv4_strmap_new(size_t expected)
{
    if (expected > MAX_ENTRIES)
        dsv4_die("strmap: %zu entries requested, at most %zu supported", expected, MAX_ENTRIES);
    dsv4_strmap *m = dsv4_xcalloc(1, sizeof(*m));
    grow_table(m, slots_for(expected));
    m->cap = DSV4_MAX(expected, (size_t)8);
    m->entries = dsv4_xmalloc(m->cap * sizeof(*m->entries));
    return m;
}

dsv4_strmap *dsv4_strmap_free(dsv4_strmap *m)
{
    if (!m)
        return NULL;
    for (struct chunk *c = m->arena, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(m->entries);
    free(m->slots);
    free(m);
    return NULL;
}

size_t dsv4_strmap_size(const dsv4_strmap *m)
{
    return m->n;
}

/* Slot position holding key, or of the empty slot where it would go. */
static size_t probe(const dsv4_strmap *m, const void *key, size_t len, uint32_t tag)
{
    size_t j = (size_t)tag & m->mask;
    for (;;) {
        uint64_t v = m->slots[j];
        if (!v)
            return j;
        if ((uint32_t)(v >> 32) == tag) {
            const struct entry *e = &m->entries[(uint32_t)v - 1];
            if (e->len == len && (len == 0 || memcmp(e->key, key, len) == 0))
                return j;
        }
        j = (j + 1) & m->mask;
    }
}

bool dsv4_strmap_insert(dsv4_strmap *m, const void *key, size_t len, uint64_t value,
                        size_t *index)
{
    uint32_t tag = tag_of(dsv4_strmap_hash(key, len));
    size_t j = probe(m, key, len, tag);
    if (m->slots[j]) {
        if (index)
            *index = (uint32_t)m->slots[j] - 1;
        return false;
    }
    if (m->n >= MAX_ENTRIES)
        dsv4_die("strmap: more than %zu entries", MAX_ENTRIES);
    if (slots_for(m->n + 1) > m->mask + 1) {
        grow_table(m, (m->mask + 1) * 2);
        j = probe(m, key, len, tag);
    }
    if (m->n == m->cap) {
        m->cap *= 2;
        m->entries = dsv4_xrealloc(m->entries, m->cap * sizeof(*m->entries));
    }
    size_t i = m->n++;
    m->entries[i] = (struct entry){ .key = arena_copy(m, key, len), .len = len, .value = value };
    m->slots[j] = ((uint64_t)tag << 32) | (uint64_t)(i + 1);
    if (index)
        *index = i;
    return true;
}

void dsv4_strmap_set(dsv4_strmap *m, const void *key, size_t len, uint64_t value)
{
    size_t i;
    if (!dsv4_strmap_insert(m, key, len, value, &i))
        m->entries[i].value = value;
}

size_t dsv4_strmap_index(const dsv4_strmap *m, const void *key, size_t len)
{
    uint64_t v = m->slots[probe(m, key, len, tag_of(dsv4_strmap_hash(key, len)))];
    return v ? (size_t)(uint32_t)v - 1 : SIZE_MAX;
}

bool dsv4_strmap_get(const dsv4_strmap *m, const void *key, size_t len, uint64_t *value)
{
    size_t i = dsv4_strmap_index(m, key, len);
    if (i == SIZE_MAX)
        return false;
    if (value)
        *value = m->entries[i].value;
    return true;
}

bool dsv4_strmap_get_str(const dsv4_strmap *m, const char *key, uint64_t *value)
{
    return dsv4_strmap_get(m, key, strlen(key), value);
}

const char *dsv4_strmap_key(const dsv4_strmap *m, size_t i, size_t *len)
{
    if (len)
        *len = m->entries[i].len;
    return m->entries[i].key;
}

uint64_t dsv4_strmap_value(const dsv4_strmap *m, size_t i)
{
    return m->entries[i].value;
}

void dsv4_strmap_set_value(dsv4_strmap *m, size_t i, uint64_t value)
{
    m->entries[i].value = value;
}
