/* SPDX-License-Identifier: MIT */
/*
 * String map: byte-string key (explicit length, any bytes including NUL)
 * → uint64_t value. Used for the checkpoint's tensor-name index and the
 * tokenizer (vocab → id, merge pair → rank), so it must hold millions of
 * entries compactly. Keys are copied into the map (NUL-terminated, so a
 * key that is a C string can be used as one). Entries are kept in
 * insertion order and addressed by a dense index, which doubles as a
 * stable id for the key. There is no deletion. Store a pointer as a value
 * with (uint64_t)(uintptr_t)p.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dsv4_strmap dsv4_strmap;

/* `expected` entries are reserved up front (0 is fine); the map grows past it. */
dsv4_strmap *dsv4_strmap_new(size_t expected);
dsv4_strmap *dsv4_strmap_free(dsv4_strmap *m);

size_t dsv4_strmap_size(const dsv4_strmap *m);

/* Insert key → value if the key is absent: returns true. If present the map
 * is unchanged and false is returned (with the existing entry's index in
 * *index when index is non-NULL; on insert *index is the new entry's). */
bool dsv4_strmap_insert(dsv4_strmap *m, const void *key, size_t len, uint64_t value,
                        size_t *index);
/* Insert, or overwrite the value of an existing key. */
void dsv4_strmap_set(dsv4_strmap *m, const void *key, size_t len, uint64_t value);

/* True and *value (when non-NULL) set if present. */
bool dsv4_strmap_get(const dsv4_strmap *m, const void *key, size_t len, uint64_t *value);
/* Same for a NUL-terminated key. */
bool dsv4_strmap_get_str(const dsv4_strmap *m, const char *key, uint64_t *value);
/* Index of the entry holding key, or SIZE_MAX if absent. */
size_t dsv4_strmap_index(const dsv4_strmap *m, const void *key, size_t len);

/* Entry i in insertion order, i < dsv4_strmap_size(). The key pointer stays
 * valid until the map is freed and is followed by a NUL byte. */
const char *dsv4_strmap_key(const dsv4_strmap *m, size_t i, size_t *len);
uint64_t dsv4_strmap_value(const dsv4_strmap *m, size_t i);
void dsv4_strmap_set_value(dsv4_strmap *m, size_t i, uint64_t value);

/* The hash the map uses (64-bit, seeded), exposed for tests. */
uint64_t dsv4_strmap_hash(const void *key, size_t len);
