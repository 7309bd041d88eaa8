/* SPDX-License-Identifier: MIT */
/* The prefix-cache block file (prefix_file.h). */
#include "prefix_file.h"

#include <string.h>

const char *dsv4_pfile_bad_name(enum dsv4_pfile_bad b)
{
    static const char *const names[] = { "ok", "truncated", "corrupt", "old format",
                                         "another model's" };
    return (unsigned)b < sizeof(names) / sizeof(names[0]) ? names[b] : "?";
}

uint64_t dsv4_pfile_head_bytes(const struct dsv4_pfile_hdr *h)
{
    return sizeof(*h) + (uint64_t)(h->p1 - h->p0) * sizeof(int32_t) + h->rows_len;
}

uint64_t dsv4_pfile_bytes(const struct dsv4_pfile_hdr *h)
{
    return dsv4_pfile_head_bytes(h) + h->tail_len;
}

static uint64_t head_sum(const struct dsv4_pfile_hdr *h, const void *tokens, const void *rows)
{
    struct dsv4_pfile_hdr z = *h;
    z.sum_head = z.sum_tail = 0;
    uint64_t s = dsv4_sum64(0, &z, sizeof(z));
    s = dsv4_sum64(s, tokens, (size_t)(h->p1 - h->p0) * sizeof(int32_t));
    return dsv4_sum64(s, rows, (size_t)h->rows_len);
}

void dsv4_pfile_make(struct dsv4_pfile_hdr *h, const uint8_t *model, const uint8_t *key,
                     const uint8_t *parent, int64_t p0, int64_t p1, const int32_t *tokens,
                     const void *rows, uint64_t rows_len, const void *tail, uint64_t tail_len)
{
    memset(h, 0, sizeof(*h));
    memcpy(h->magic, DSV4_PFILE_MAGIC, 8);
    h->version = DSV4_PFILE_VERSION;
    h->endian = DSV4_PFILE_ENDIAN;
    memcpy(h->model, model, DSV4_SHA256_LEN);
    memcpy(h->key, key, DSV4_SHA256_LEN);
    memcpy(h->parent, parent, DSV4_SHA256_LEN);
    h->p0 = p0;
    h->p1 = p1;
    h->rows_len = rows_len;
    h->tail_len = tail_len;
    h->sum_head = head_sum(h, tokens, rows);
    h->sum_tail = dsv4_sum64(1, tail, (size_t)tail_len);
}

enum dsv4_pfile_bad dsv4_pfile_check_hdr(const void *buf, size_t len, uint64_t file_size,
                                         const uint8_t *model, struct dsv4_pfile_hdr *h)
{
    if (len < sizeof(*h) || file_size < sizeof(*h))
        return DSV4_PFILE_TRUNCATED;
    memcpy(h, buf, sizeof(*h));
    if (memcmp(h->magic, DSV4_PFILE_MAGIC, 8) != 0)
        return DSV4_PFILE_CORRUPT;
    if (h->version != DSV4_PFILE_VERSION || h->endian != DSV4_PFILE_ENDIAN)
        return DSV4_PFILE_OLD;
    if (memcmp(h->model, model, DSV4_SHA256_LEN) != 0)
        return DSV4_PFILE_FOREIGN;
    if (h->p0 < 0 || h->p1 <= h->p0 || h->p1 - h->p0 > DSV4_PFILE_MAX_TOKENS ||
        h->p1 > INT32_MAX || h->rows_len > DSV4_PFILE_MAX_SECTION ||
        h->tail_len > DSV4_PFILE_MAX_SECTION)
        return DSV4_PFILE_CORRUPT;
    uint64_t want = dsv4_pfile_bytes(h);
    if (file_size < want)
        return DSV4_PFILE_TRUNCATED;
    return file_size == want ? DSV4_PFILE_OK : DSV4_PFILE_CORRUPT;
}

bool dsv4_pfile_head_ok(const struct dsv4_pfile_hdr *h, const void *head)
{
    const char *p = head;
    return head_sum(h, p + sizeof(*h), p + sizeof(*h) + (h->p1 - h->p0) * sizeof(int32_t)) ==
           h->sum_head;
}

bool dsv4_pfile_tail_ok(const struct dsv4_pfile_hdr *h, const void *tail)
{
    return dsv4_sum64(1, tail, (size_t)h->tail_len) == h->sum_tail;
}

enum dsv4_pfile_bad dsv4_pfile_parse(const void *buf, size_t len, const uint8_t *model,
                                     struct dsv4_pfile_hdr *h)
{
    enum dsv4_pfile_bad b = dsv4_pfile_check_hdr(buf, len, len, model, h);
    if (b != DSV4_PFILE_OK)
        return b;
    const char *p = buf;
    if (!dsv4_pfile_head_ok(h, p) || !dsv4_pfile_tail_ok(h, p + dsv4_pfile_head_bytes(h)))
        return DSV4_PFILE_CORRUPT;
    return DSV4_PFILE_OK;
}
