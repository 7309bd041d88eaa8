/* SPDX-License-Identifier: MIT */
/*
 * SHA-256 (FIPS 180-4), for identities that must not collide: the prefix cache's model id and
 * the hash chain over token ids that keys its blocks (a colliding key would restore another
 * prompt's state). Not for bulk data: the cache's file checksums use dsv4_sum64.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define DSV4_SHA256_LEN 32

struct dsv4_sha256 {
    uint32_t h[8];
    uint64_t len;           /* bytes hashed so far */
    uint8_t buf[64];
    size_t fill;
};

void dsv4_sha256_init(struct dsv4_sha256 *c);
void dsv4_sha256_update(struct dsv4_sha256 *c, const void *data, size_t n);
void dsv4_sha256_final(struct dsv4_sha256 *c, uint8_t out[DSV4_SHA256_LEN]);
/* Lower-case hex of n bytes into out[2n+1]. */
void dsv4_hex(const uint8_t *b, size_t n, char *out);

/*
 * A fast 64-bit checksum of bytes (four independent multiply-xor lanes over 8-byte words,
 * folded with the length): detects torn, truncated and bit-flipped files, not adversaries.
 */
uint64_t dsv4_sum64(uint64_t seed, const void *data, size_t n);
