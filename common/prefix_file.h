/* SPDX-License-Identifier: MIT */
/*
 * One prefix-cache block as a file (common/prefix_cache.c's disk tier): a fixed header, the
 * block's token ids, the session rows of the block, the tail state at its end. Native byte
 * order (recorded, and refused when it differs); every length is checked against the file's
 * size before anything is read; the header, ids and rows carry one checksum and the tail its
 * own, so restoring k blocks reads k heads and one tail.
 *
 *   offset 0    struct dsv4_pfile_hdr (192 bytes)
 *   192         int32 tokens[p1 - p0]
 *   …           rows[rows_len]
 *   …           tail[tail_len]        (end of file)
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "sha256.h"

#define DSV4_PFILE_MAGIC "DSV4PFX\n"
#define DSV4_PFILE_VERSION 1
#define DSV4_PFILE_ENDIAN 0x01020304u
#define DSV4_PFILE_MAX_TOKENS (1 << 20)
#define DSV4_PFILE_MAX_SECTION (1ull << 40)

struct dsv4_pfile_hdr {
    char magic[8];
    uint32_t version, endian;
    uint8_t model[DSV4_SHA256_LEN];     /* model_id.h */
    uint8_t key[DSV4_SHA256_LEN];       /* this block's chain key (also the file name) */
    uint8_t parent[DSV4_SHA256_LEN];    /* the previous block's (the root for p0 = 0) */
    int64_t p0, p1;                     /* positions [p0, p1) */
    uint64_t rows_len, tail_len;
    uint64_t sum_head;                  /* header with both sums 0, then tokens, then rows */
    uint64_t sum_tail;
    uint8_t reserved[32];
};
_Static_assert(sizeof(struct dsv4_pfile_hdr) == 192, "prefix file header is 192 bytes");

/* Why a file is refused (each deletes it; the cache logs one line naming the reason). */
enum dsv4_pfile_bad {
    DSV4_PFILE_OK,
    DSV4_PFILE_TRUNCATED,   /* shorter than its header says, or than a header */
    DSV4_PFILE_CORRUPT,     /* bad magic, lengths, checksum, or not what its name says */
    DSV4_PFILE_OLD,         /* another format version or byte order */
    DSV4_PFILE_FOREIGN,     /* another model's */
};
const char *dsv4_pfile_bad_name(enum dsv4_pfile_bad b);

/* Bytes of the head (header + tokens + rows) and of the whole file. */
uint64_t dsv4_pfile_head_bytes(const struct dsv4_pfile_hdr *h);
uint64_t dsv4_pfile_bytes(const struct dsv4_pfile_hdr *h);

/* Fill h (sums included) for a block. */
void dsv4_pfile_make(struct dsv4_pfile_hdr *h, const uint8_t *model, const uint8_t *key,
                     const uint8_t *parent, int64_t p0, int64_t p1, const int32_t *tokens,
                     const void *rows, uint64_t rows_len, const void *tail, uint64_t tail_len);

/* Check a header read from a file of file_size bytes (buf: at least sizeof(hdr) bytes, else
 * TRUNCATED) for model `model`; *h gets a copy. */
enum dsv4_pfile_bad dsv4_pfile_check_hdr(const void *buf, size_t len, uint64_t file_size,
                                         const uint8_t *model, struct dsv4_pfile_hdr *h);
/* Check the head's checksum (head: dsv4_pfile_head_bytes(h) bytes from offset 0). */
bool dsv4_pfile_head_ok(const struct dsv4_pfile_hdr *h, const void *head);
bool dsv4_pfile_tail_ok(const struct dsv4_pfile_hdr *h, const void *tail);

/* The whole file in memory (the fuzz target): header, sums, lengths. */
enum dsv4_pfile_bad dsv4_pfile_parse(const void *buf, size_t len, const uint8_t *model,
                                     struct dsv4_pfile_hdr *h);
