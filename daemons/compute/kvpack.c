/* SPDX-License-Identifier: MIT */
/*
 * The stored forms of KV rows and indexer keys (common/session_layout.h). Every value the
 * session keeps of a KV row has already been rounded by the forward pass: the rope dims to
 * bf16 (rope_apply), the nope dims by the FP8 QDQ with block DSV4_KV_FP8_BLOCK
 * (attention_kv_rows, pool_window); an indexer key by the FP4 QDQ with block
 * DSV4_IDX_FP4_BLOCK. So the packed row holds exactly the same numbers (Flash's 512-dim KV
 * row: 584 bytes instead of 2048; an indexer key: 68 instead of 512), and unpacking gives
 * the fp32 row bit for bit (kernels' formats.c says why); each pack checks that.
 */
#include <assert.h>
#include <string.h>

#include "internal.h"

/* Packed KV row: [R bf16 rope dims][D−R E4M3 codes][E8M0 scales][pad]. */
void kv_row_pack(const struct dsv4_config *c, const float *row, uint8_t *dst, float *check)
{
    int D = c->head_dim, R = c->rope_head_dim, nope = D - R;
    for (int i = 0; i < R; i++) {
        uint16_t h = dsv4_f32_to_bf16(row[nope + i]);
        memcpy(dst + 2 * (size_t)i, &h, 2);
    }
    uint8_t *codes = dst + 2 * (size_t)R;
    dsv4_fp8_pack(row, (size_t)nope, DSV4_KV_FP8_BLOCK, codes, codes + nope);
    size_t used = 2 * (size_t)R + (size_t)nope + (size_t)(nope + DSV4_KV_FP8_BLOCK - 1) /
                  DSV4_KV_FP8_BLOCK;
    if (used < dsv4_kv_row_bytes(c))
        dst[used] = 0;
    kv_row_unpack(c, dst, check);
    assert(!memcmp(check, row, (size_t)D * sizeof(float)) && "KV row not exactly packable");
    (void)check;
}

void kv_row_unpack(const struct dsv4_config *c, const uint8_t *src, float *row)
{
    int D = c->head_dim, R = c->rope_head_dim, nope = D - R;
    const uint8_t *codes = src + 2 * (size_t)R;
    dsv4_fp8_unpack(codes, codes + nope, (size_t)nope, DSV4_KV_FP8_BLOCK, row);
    /* the bf16 lead a row, and rows are an even number of bytes apart */
    dsv4_bf16_unpack((const uint16_t *)(const void *)src, (size_t)R, row + nope);
}

/* Packed indexer key: [ceil(d/2) E2M1 code bytes][E8M0 scales]. */
void ikey_pack(const struct dsv4_config *c, const float *key, uint8_t *dst, float *check)
{
    size_t d = (size_t)c->index_head_dim;
    dsv4_fp4_pack(key, d, DSV4_IDX_FP4_BLOCK, dst, dst + (d + 1) / 2);
    ikey_unpack(c, dst, check);
    assert(!memcmp(check, key, d * sizeof(float)) && "indexer key not exactly packable");
    (void)check;
}

void ikey_unpack(const struct dsv4_config *c, const uint8_t *src, float *key)
{
    size_t d = (size_t)c->index_head_dim;
    dsv4_fp4_unpack(src, src + (d + 1) / 2, d, DSV4_IDX_FP4_BLOCK, key);
}
