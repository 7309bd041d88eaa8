/* SPDX-License-Identifier: MIT */
/*
 * KV compressors (spec §10): the main compressor of CSA/HCA layers and the
 * indexer's own compressor. Instead of the reference's rolling kv/score
 * state, the per-position inputs (kvp and score+ape) live in a
 * position-addressed ring; a window is pooled from that ring when its last
 * token arrives. The pooled arithmetic is the same as the streaming state's,
 * and rolling back is only a change of position (docs/ARCHITECTURE.md).
 */
#include <math.h>
#include <string.h>

#include "internal.h"

/* Pool window w: softmax over slots per channel, then bf16, norm, rope, QDQ; stored packed. */
static void pool_window(dsv4_session *bs, const struct compressor_w *cw, const float *cin,
                        int cin_cap, int64_t w, uint8_t *dst, bool indexer,
                        const struct rope_table *rope)
{
    const struct dsv4_config *c = &bs->e->cfg;
    float *tmp = bs->s.pooltmp, *row = bs->s.krow;
    float *check = row + DSV4_MAX(c->head_dim, c->index_head_dim);
    int r = cw->ratio, cc = cw->c, width = cw->coff * cw->c;
    int nslot = cw->coff * r;
    /* slot j < r (overlap only): previous window, A half; else current window, B half */
    for (int ch = 0; ch < cc; ch++) {
        float mx = -INFINITY;
        for (int j = 0; j < nslot; j++) {
            int64_t p;
            int off;
            if (cw->coff == 2 && j < r) {
                if (w == 0)
                    continue;
                p = (w - 1) * r + j;
                off = ch;
            } else {
                p = w * r + (j - (cw->coff - 1) * r);
                off = (cw->coff - 1) * cc + ch;
            }
            const float *in = cin + (size_t)(p % cin_cap) * 2 * width;
            tmp[2 * j] = in[width + off];
            tmp[2 * j + 1] = in[off];
            mx = fmaxf(mx, in[width + off]);
        }
        /* fp32 softmax terms, sums carried in double and rounded once (reference fsum) */
        double sum = 0.0;
        int j0 = (cw->coff == 2 && w == 0) ? r : 0;
        for (int j = j0; j < nslot; j++) {
            float ex = (float)exp((double)(tmp[2 * j] - mx));
            tmp[2 * j] = ex;
            sum += ex;
        }
        float fsum = (float)sum;
        double acc = 0.0;
        for (int j = j0; j < nslot; j++)
            acc += (double)(tmp[2 * j] / fsum * tmp[2 * j + 1]);
        row[ch] = dsv4_bf16_round((float)acc);
    }
    rmsnorm_rows(row, row, cw->norm, 1, cc, (float)c->norm_eps);
    int R = c->rope_head_dim;
    rope_apply(rope, R / 2, row + cc - R, w * r, false);
    if (indexer) {
        hadamard_inplace(row, cc);
        dsv4_fp4_qdq(row, (size_t)cc, DSV4_IDX_FP4_BLOCK);
        ikey_pack(c, row, dst, check);
    } else {
        dsv4_fp8_qdq(row, (size_t)(cc - R), DSV4_KV_FP8_BLOCK);
        kv_row_pack(c, row, dst, check);
    }
}

void compressor_project(dsv4_session *bs, const struct compressor_w *cw, const float *a, int n)
{
    int width = cw->coff * cw->c;
    linear_bf16(bs->e, &cw->wkv, a, n, bs->s.cproj);
    linear_bf16(bs->e, &cw->wgate, a, n, bs->s.cproj + (size_t)n * width);
}

void compressor_absorb(dsv4_session *bs, const struct step_seg *g, const struct compressor_w *cw,
                       float *cin, int cin_cap, uint8_t *rows, bool indexer, int n,
                       const struct rope_table *rope)
{
    const struct dsv4_config *c = &bs->e->cfg;
    size_t row_bytes = indexer ? dsv4_ikey_row_bytes(c) : dsv4_kv_row_bytes(c);
    int width = cw->coff * cw->c;
    const float *kvp = bs->s.cproj + (size_t)g->r0 * width;
    const float *sc = bs->s.cproj + ((size_t)n + g->r0) * width;
    /* each window is pooled as soon as its last position is in, so the ring never holds
     * more than the windows being filled and the rollback slack (session_layout.c), however
     * many rows a step brings: it reads only positions up to its last */
    for (int i = 0; i < g->n; i++) {
        int64_t t = g->pos0 + i;
        float *dst = cin + (size_t)(t % cin_cap) * 2 * width;
        const float *ape = cw->ape + (size_t)(t % cw->ratio) * width;
        memcpy(dst, kvp + (size_t)i * width, (size_t)width * sizeof(float));
        for (int k = 0; k < width; k++)
            dst[width + k] = sc[(size_t)i * width + k] + ape[k];
        if ((t + 1) % cw->ratio != 0)
            continue;
        int64_t w = t / cw->ratio;
        pool_window(bs, cw, cin, cin_cap, w, rows + (size_t)w * row_bytes, indexer, rope);
    }
}
