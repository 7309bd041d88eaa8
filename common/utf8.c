/* SPDX-License-Identifier: MIT */
/*
 * UTF-8 per Unicode table 3-7: the second byte's range depends on the lead
 * byte (E0: A0..BF, ED: 80..9F, F0: 90..BF, F4: 80..8F), which is what
 * rules out overlongs, surrogates and values above U+10FFFF. A maximal
 * subpart is the longest prefix of a well-formed sequence; it is replaced
 * by one U+FFFD, and a byte that cannot start anything by one U+FFFD.
 */
#include "utf8.h"

#include <string.h>

/* Expected sequence length from the lead byte, 0 if it cannot lead. */
static unsigned seq_len(uint8_t b)
{
    if (b < 0x80)
        return 1;
    if (b >= 0xC2 && b <= 0xDF)
        return 2;
    if (b >= 0xE0 && b <= 0xEF)
        return 3;
    if (b >= 0xF0 && b <= 0xF4)
        return 4;
    return 0;
}

/* Is `b` acceptable as byte number `i` (1-based continuation index) after `lead`? */
static bool cont_ok(uint8_t lead, unsigned i, uint8_t b)
{
    if (i == 1) {
        switch (lead) {
        case 0xE0: return b >= 0xA0 && b <= 0xBF;
        case 0xED: return b >= 0x80 && b <= 0x9F;
        case 0xF0: return b >= 0x90 && b <= 0xBF;
        case 0xF4: return b >= 0x80 && b <= 0x8F;
        default: break;
        }
    }
    return b >= 0x80 && b <= 0xBF;
}

/* Length of the well-formed prefix of the sequence at s (≤ its expected
 * length); *need gets the expected length (0 for an impossible lead). */
static unsigned subpart(const uint8_t *s, size_t n, unsigned *need)
{
    unsigned len = seq_len(s[0]);
    *need = len;
    if (len == 0)
        return 0;
    unsigned i = 1;
    while (i < len && i < n && cont_ok(s[0], i, s[i]))
        i++;
    return i;
}

size_t dsv4_utf8_valid_prefix(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        unsigned need, got = subpart(s + i, n - i, &need);
        if (need == 0 || got < need)
            return i;
        i += got;
    }
    return n;
}

size_t dsv4_utf8_repair(const uint8_t *s, size_t n, bool final, uint8_t *out, size_t *out_len)
{
    size_t i = 0, o = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            out[o++] = s[i++];
            continue;
        }
        unsigned need, got = subpart(s + i, n - i, &need);
        if (need != 0 && got == need) {
            memcpy(out + o, s + i, got);
            o += got;
            i += got;
            continue;
        }
        /* An incomplete sequence cut by the end of the input may still
         * complete: keep it for the next call. */
        if (!final && need != 0 && i + got == n)
            break;
        out[o++] = 0xEF;
        out[o++] = 0xBF;
        out[o++] = 0xBD;
        i += got ? got : 1;
    }
    *out_len = o;
    return i;
}

size_t dsv4_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp)
{
    unsigned len = seq_len(s[0]);
    if (len <= 1 || len > n) {
        *cp = s[0];
        return 1;
    }
    uint32_t c = s[0] & (0x7F >> len);
    for (unsigned i = 1; i < len; i++)
        c = (c << 6) | (s[i] & 0x3F);
    *cp = c;
    return len;
}

size_t dsv4_utf8_encode(uint32_t cp, uint8_t *out)
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}
