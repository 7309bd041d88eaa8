/* SPDX-License-Identifier: MIT */
/*
 * UTF-8 validation and repair. Text reaching the tokenizer is bytes from a
 * user, a file or a model; the reference tokenizer (a JS engine) only sees
 * strings, which it makes by replacing every maximal invalid subpart with
 * U+FFFD (the WHATWG / Unicode "maximal subpart" practice). dsv4 repairs
 * bytes the same way, so both sides tokenize the same text, and the
 * streaming detokenizer uses the incremental form to never emit half a
 * character.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Length of the valid UTF-8 prefix of s[0..n). */
size_t dsv4_utf8_valid_prefix(const uint8_t *s, size_t n);

/* Repair s[0..n) into out (capacity ≥ 3·n + 3 bytes): valid sequences are
 * copied, each maximal invalid subpart becomes EF BF BD. When `final` is
 * false, a trailing incomplete but still possible sequence is not
 * consumed. Returns the bytes consumed from s; *out_len gets the bytes
 * written. */
size_t dsv4_utf8_repair(const uint8_t *s, size_t n, bool final, uint8_t *out, size_t *out_len);

/* Decode the code point at s[0..n) (n ≥ 1, the sequence valid): returns its
 * length and stores it in *cp. */
size_t dsv4_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

/* Encode cp (≤ 0x10FFFF, not a surrogate) into out[0..4); returns length. */
size_t dsv4_utf8_encode(uint32_t cp, uint8_t *out);
