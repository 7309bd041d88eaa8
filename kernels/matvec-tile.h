/* SPDX-License-Identifier: MIT */
/*
 * The one tiling of the SIMD twins, included by matvec-avx2.c and
 * matvec-avx512.c after they define their vector primitives (list below).
 *
 * A call covers weight rows [row_begin, row_end) and nx activation rows, in
 * passes of up to NXC activation rows; within a pass the weight rows go tile
 * by tile, so a weight row is read from DRAM once per pass (the old tiling
 * streamed it once per 4 activation rows). Two paths:
 *  - direct (pass of fewer than TILE_BUF_FROM rows): a tile of R weight rows
 *    is decoded into registers row by row and applied to up to TILE_NXD
 *    activation rows at a time, accumulators in registers over the whole row;
 *    further groups re-decode the tile's weights from L1;
 *  - buffered: along K in chunks (the FP8 scale block, else KC columns) the
 *    chunk of R weight rows is decoded ONCE into an L1 fp32 buffer and applied
 *    to every activation row of the pass in R × TILE_NX register tiles; the
 *    x chunk is packed (rows of x lie 4 KiB multiples apart) and NT tiles
 *    share it; accumulators (16 lanes per output) live in a stack array.
 * Either way every (weight row, activation row) output sees exactly the
 * operation sequence of the scalar definition (kernels-internal.h,
 * docs/numerics.md): lane j only ever takes the columns ≡ j (mod 16) in
 * ascending order, so the result does not depend on nx, on R or on the path.
 *
 * A definition lane j lives in vector half j / VL (AVX2 has two 8-lane halves,
 * AVX-512 one 16-lane vector). From the buffer the halves are separate
 * passes, so a register tile holds R × NX vectors; decoded in place they are
 * walked together.
 *
 * Required from the includer:
 *   VL                 lanes per vf (8 or 16)
 *   vf, vf_zero(), vf_load(p), vf_store(p, v), vf_fma(a, b, c) = a·b + c fused,
 *   vf_mul(a, b), vf_set1(f)
 *   fp8_dec16(p, out)  16 E4M3 bytes → out[16/VL]: h = e4m3·2^-8 (the exact fp16 trick)
 *   fp8_nan(p, n)      whether any of n bytes (n % 16 == 0) is an E4M3 NaN code
 *   bf16_dec16(p, out) 16 bf16 → fp32
 *   TILE_R1            weight rows per tile in the direct path (one activation row)
 *   TILE_RG            weight rows per tile in the direct path (several activation rows)
 *   TILE_R, TILE_NX    weight × activation rows of a buffered register tile
 *   TILE_NXD           activation rows of a direct-path register tile (<= 4)
 *   TILE_BUF_FROM, TILE_BUF_FROM_FP8  activation rows from which the buffered path runs
 *   PREFETCH_T1(p)
 */
#ifndef VL
#error "define the vector primitives before including matvec-tile.h"
#endif

#define NH (16 / VL)
_Static_assert(TILE_NXD >= 1 && TILE_NXD <= 4, "row_tile groups are 1..4 rows");
/* activation rows per pass: their accumulators (R × NXC × 64 bytes) and a chunk of
 * their x stay in L1; beyond that the weights are decoded once per pass */
#define NXC 16
/* columns per chunk for BF16 (FP8 uses its scale block) */
#define KC 256
#define RMAX 8
/* rows of a block: NT tiles of R rows share the chunk of x in L1 */
#define RBMAX 16
#define NXMAX 8

enum src { SRC_BUF, SRC_FP8, SRC_BF16 };
enum mode {
    MODE_ACC, /* continue the lane chains in acc */
    MODE_BLK, /* FP8 block: partials from +0, then acc = fma(P, 2^(S-119), acc) */
};

/* per weight row of a tile: where its weights of the current chunk are */
struct wrow {
    const void *p;       /* SRC_BUF: decoded fp32 of the chunk; else the raw row */
    const uint8_t *e;    /* FP8: the block's scale byte */
};

/* 16 consecutive weights of row `w` at column k (SRC_BUF: chunk offset k) */
INLINE void wdec16(const int SRC, const struct wrow *w, uint32_t k, vf out[NH])
{
    if (SRC == SRC_BUF) {
        for (int h = 0; h < NH; h++)
            out[h] = vf_load((const float *)w->p + k + h * VL);
    } else if (SRC == SRC_FP8) {
        fp8_dec16((const uint8_t *)w->p + k, out);
    } else {
        bf16_dec16((const uint16_t *)w->p + k, out);
    }
}

/*
 * One register tile: R weight rows × NX activation rows over columns
 * [k0, k0 + len) (len % 16 == 0). x + n·ldx is activation row n at column k0; acc
 * holds per (r, n) 16 lanes at acc + (r·NXC + n)·16.
 */
INLINE void mac_tile(const int SRC, const int MODE, const int R, const int NX,
                     const struct wrow *w, const float *x, size_t ldx, uint32_t k0, uint32_t len,
                     float *acc)
{
    /* from the buffer each half is its own pass; decoded in place, one pass */
    const int NHI = SRC == SRC_BUF ? 1 : NH;
    for (int ho = 0; ho < NH / NHI; ho++) {
        vf a[RMAX][NXMAX][NH];
        for (int r = 0; r < R; r++)
            for (int n = 0; n < NX; n++)
                for (int hi = 0; hi < NHI; hi++) {
                    const int h = ho + hi;
                    a[r][n][hi] = MODE == MODE_ACC ? vf_load(acc + (r * NXC + n) * 16 + h * VL)
                                                   : vf_zero();
                }
        for (uint32_t t = 0; t < len; t += 16) {
            vf wv[RMAX][NH];
            for (int r = 0; r < R; r++) {
                if (SRC == SRC_BUF)
                    wv[r][0] = vf_load((const float *)w[r].p + t + ho * VL);
                else
                    wdec16(SRC, &w[r], k0 + t, wv[r]);
            }
            for (int n = 0; n < NX; n++)
                for (int hi = 0; hi < NHI; hi++) {
                    vf xv = vf_load(x + n * ldx + t + (ho + hi) * VL);
                    /* one load per x vector, reused by the R rows (else the compiler
                     * folds a load into every fma and the loads bound the loop) */
                    __asm__("" : "+x"(xv));
                    for (int r = 0; r < R; r++)
                        a[r][n][hi] = vf_fma(wv[r][hi], xv, a[r][n][hi]);
                }
        }
        for (int r = 0; r < R; r++) {
            float *ar = acc + r * NXC * 16;
            if (MODE == MODE_ACC) {
                for (int n = 0; n < NX; n++)
                    for (int hi = 0; hi < NHI; hi++)
                        vf_store(ar + n * 16 + (ho + hi) * VL, a[r][n][hi]);
                continue;
            }
            const uint8_t e = *w[r].e;
            for (int n = 0; n < NX; n++)
                for (int hi = 0; hi < NHI; hi++) {
                    float *ap = ar + n * 16 + (ho + hi) * VL;
                    if (e <= DSV4_E8M0_FAST_MAX)
                        vf_store(ap, vf_fma(a[r][n][hi], vf_set1(dsv4_fp8_fast_scale(e)),
                                            vf_load(ap)));
                    else
                        vf_store(ap, vf_fma(vf_mul(a[r][n][hi], vf_set1(256.0f)),
                                            vf_set1(dsv4_e8m0_to_f32(e)), vf_load(ap)));
                }
        }
    }
}

/*
 * The direct path: R weight rows × NX activation rows over whole rows,
 * decoded in registers, accumulators in registers (FP8: per-block partials
 * too); writes y. pfd: bytes from a row to the same place in the next tile.
 */
INLINE void row_tile(const int SRC, const int R, const int NX, const struct wrow *w,
                     const float *x, size_t ldx, uint32_t cols, uint32_t B, size_t pfd, float *y,
                     size_t ldy, uint32_t i0, const int *nan_row)
{
    /* weight bytes per 16 columns, and steps of 16 columns per 64-byte line */
    const int WB = SRC == SRC_FP8 ? 16 : 32;
    const uint32_t PFM = 64 / WB * 16 - 1;
    const int STEP = 16;
    vf c[RMAX][NXMAX][NH];
    for (int r = 0; r < R; r++)
        for (int n = 0; n < NX; n++)
            for (int h = 0; h < NH; h++)
                c[r][n][h] = vf_zero();
    const uint32_t blk = SRC == SRC_FP8 ? B : cols;
    for (uint32_t b0 = 0; b0 < cols; b0 += blk) {
        const uint32_t b1 = cols - b0 < blk ? cols : b0 + blk;
        vf p[RMAX][NXMAX][NH];
        for (int r = 0; r < R; r++)
            for (int n = 0; n < NX; n++)
                for (int h = 0; h < NH; h++)
                    p[r][n][h] = SRC == SRC_FP8 ? vf_zero() : c[r][n][h];
        for (uint32_t t = b0; t < b1; t += STEP) {
            /* row by row: only one row's decoded weights live at a time, the x loads
             * (L1) fold into the fmas */
            for (int r = 0; r < R; r++) {
                vf wv[16 / VL];
                if ((t & PFM) == 0)
                    PREFETCH_T1((const uint8_t *)w[r].p + (size_t)t / 16 * WB + pfd);
                wdec16(SRC, &w[r], t, wv);
                for (int n = 0; n < NX; n++)
                    for (int v = 0; v < STEP / VL; v++)
                        p[r][n][v % NH] =
                            vf_fma(wv[v], vf_load(x + n * ldx + t + v * VL), p[r][n][v % NH]);
            }
        }
        for (int r = 0; r < R; r++) {
            if (SRC != SRC_FP8) {
                for (int n = 0; n < NX; n++)
                    for (int h = 0; h < NH; h++)
                        c[r][n][h] = p[r][n][h];
                continue;
            }
            const uint8_t e = w[r].e[b0 / B];
            if (e <= DSV4_E8M0_FAST_MAX) {
                const vf sc = vf_set1(dsv4_fp8_fast_scale(e));
                for (int n = 0; n < NX; n++)
                    for (int h = 0; h < NH; h++)
                        c[r][n][h] = vf_fma(p[r][n][h], sc, c[r][n][h]);
            } else {
                const vf sc = vf_set1(dsv4_e8m0_to_f32(e)), k256 = vf_set1(256.0f);
                for (int n = 0; n < NX; n++)
                    for (int h = 0; h < NH; h++)
                        c[r][n][h] = vf_fma(vf_mul(p[r][n][h], k256), sc, c[r][n][h]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int n = 0; n < NX; n++) {
            float a[16] __attribute__((aligned(64)));
            for (int h = 0; h < NH; h++)
                vf_store(a + h * VL, c[r][n][h]);
            y[(size_t)n * ldy + i0 + r] = nan_row && nan_row[r] ? NAN : dsv4_lane_reduce(a);
        }
}

/* row_tile for nc activation rows in register groups of up to TILE_NXD; the
 * tile's weights are re-decoded per group from L1 */
#define ROW_GROUPS(SRC, R, nc, w, x, ldx, cols, B, pfd, y, ldy, i0, nan)                          \
    do {                                                                                           \
        for (size_t g0 = 0; g0 < (nc); g0 += TILE_NXD) {                                           \
            const float *xg = (x) + g0 * (ldx);                                                    \
            float *yg = (y) + g0 * (ldy);                                                          \
            switch ((nc) - g0 < TILE_NXD ? (nc) - g0 : TILE_NXD) {                                 \
            case 1: row_tile(SRC, R, 1, w, xg, ldx, cols, B, pfd, yg, ldy, i0, nan); break;       \
            case 2: row_tile(SRC, R, 2, w, xg, ldx, cols, B, pfd, yg, ldy, i0, nan); break;       \
            case 3: row_tile(SRC, R, 3, w, xg, ldx, cols, B, pfd, yg, ldy, i0, nan); break;       \
            default: row_tile(SRC, R, 4, w, xg, ldx, cols, B, pfd, yg, ldy, i0, nan); break;      \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* mac_tile with the activation-row count as a run-time value up to NXMAX */
#define MAC_NX(SRC, MODE, R, nxr, w, x, ldx, k0, len, acc)                                         \
    do {                                                                                           \
        switch (nxr) {                                                                             \
        case 1: mac_tile(SRC, MODE, R, 1, w, x, ldx, k0, len, acc); break;                        \
        case 2: mac_tile(SRC, MODE, R, 2, w, x, ldx, k0, len, acc); break;                        \
        case 3: mac_tile(SRC, MODE, R, 3, w, x, ldx, k0, len, acc); break;                        \
        case 4: mac_tile(SRC, MODE, R, 4, w, x, ldx, k0, len, acc); break;                        \
        case 5: mac_tile(SRC, MODE, R, 5, w, x, ldx, k0, len, acc); break;                        \
        case 6: mac_tile(SRC, MODE, R, 6, w, x, ldx, k0, len, acc); break;                        \
        case 7: mac_tile(SRC, MODE, R, 7, w, x, ldx, k0, len, acc); break;                        \
        default: mac_tile(SRC, MODE, R, 8, w, x, ldx, k0, len, acc); break;                       \
        }                                                                                          \
    } while (0)

/*
 * The buffered path for one chunk of R weight rows and nc activation rows (x at
 * column k0): the chunk decoded once into buf, then applied to all rows.
 */
INLINE void chunk(const int SRC, const int MODE, const int R, const struct wrow *raw,
                  const float *x, size_t ldx, size_t nc, uint32_t k0, uint32_t len, float *acc,
                  float *buf)
{
    struct wrow dec[RMAX];
    for (int r = 0; r < R; r++) {
        float *d = buf + (size_t)r * KC;
        for (uint32_t t = 0; t < len; t += 16) {
            vf v[16 / VL];
            wdec16(SRC, &raw[r], k0 + t, v);
            for (int h = 0; h < 16 / VL; h++)
                vf_store(d + t + h * VL, v[h]);
        }
        dec[r] = (struct wrow){d, raw[r].e};
    }
    size_t n = 0;
    for (; n + TILE_NX <= nc; n += TILE_NX)
        mac_tile(SRC_BUF, MODE, R, TILE_NX, dec, x + n * ldx, ldx, 0, len, acc + n * 16);
    if (n < nc)
        MAC_NX(SRC_BUF, MODE, R, nc - n, dec, x + n * ldx, ldx, 0, len, acc + n * 16);
}

/*
 * The chunk [k0, k0 + len) of nc activation rows, for the tiles of a row block:
 * in place for the direct path, else packed into xbuf (rows KC apart: rows of x
 * lie a multiple of 4 KiB apart and would share a few L1 sets). Returns the
 * chunk's first element and sets *ld.
 */
INLINE const float *x_chunk(const float *x, size_t cols, size_t nc, uint32_t k0, uint32_t len,
                            float *xbuf, size_t *ld)
{
    for (size_t n = 0; n < nc; n++)
        for (uint32_t t = 0; t < len; t += VL)
            vf_store(xbuf + n * KC + t, vf_load(x + n * cols + k0 + t));
    *ld = KC;
    return xbuf;
}

/* y of R rows for nc activation rows from the lane accumulators */
INLINE void fold(const int R, const float *acc, size_t nc, float *y, size_t ldy, uint32_t i0,
                 const int *nan_row)
{
    for (int r = 0; r < R; r++)
        for (size_t n = 0; n < nc; n++)
            y[n * ldy + i0 + r] =
                nan_row && nan_row[r] ? NAN : dsv4_lane_reduce(acc + ((size_t)r * NXC + n) * 16);
}

/* ---- FP8 ---- */

/*
 * FP8 rows i0 .. i0 + R·NT − 1 (NT tiles of R rows) for nc activation rows: along
 * K block by block; the block's x of the pass stays in L1 for all NT tiles.
 */
INLINE void fp8_rows(const int R, const int NT, const struct dsv4_fp8_weight *w, const float *x,
                     size_t nc, float *y, size_t ldy, uint32_t i0, const int CHECK)
{
    const uint32_t B = w->block, cols = w->cols, kblocks = (cols + B - 1) / B;
    const int RB = R * NT;
    if (nc < TILE_BUF_FROM_FP8) {
        struct wrow raw[RMAX];
        int nan_row[RMAX];
        for (int r = 0; r < R; r++) {
            raw[r] = (struct wrow){w->w + (size_t)(i0 + r) * cols,
                                   w->scale + (size_t)((i0 + r) / B) * kblocks};
            nan_row[r] = CHECK ? fp8_nan(raw[r].p, cols) : 0;
        }
        ROW_GROUPS(SRC_FP8, R, nc, raw, x, cols, cols, B, (size_t)R * cols, y, ldy, i0,
                   CHECK ? nan_row : NULL);
        return;
    }
    float acc[RBMAX * NXC * 16] __attribute__((aligned(64)));
    float buf[RMAX * KC] __attribute__((aligned(64)));
    const uint8_t *wr[RBMAX];
    int nan_row[RBMAX];
    for (int r = 0; r < RB; r++) {
        wr[r] = w->w + (size_t)(i0 + r) * cols;
        nan_row[r] = 0;
        for (size_t n = 0; n < nc; n++)
            memset(acc + (r * NXC + n) * 16, 0, 16 * sizeof(float));
    }
    float xbuf[NXC * KC] __attribute__((aligned(64)));
    for (uint32_t kb = 0; kb < kblocks; kb++) {
        const uint32_t k0 = kb * B, m = cols - k0 < B ? cols - k0 : B;
        size_t ldx = cols;
        const float *xk = B <= KC ? x_chunk(x, cols, nc, k0, m, xbuf, &ldx) : x + k0;
        for (int tl = 0; tl < NT; tl++) {
            struct wrow raw[RMAX];
            for (int r = 0; r < R; r++) {
                const int rr = tl * R + r;
                for (uint32_t u = 0; u < m; u += 64)
                    PREFETCH_T1(wr[rr] + k0 + u + (size_t)RB * cols);
                if (CHECK)
                    nan_row[rr] |= fp8_nan(wr[rr] + k0, m);
                raw[r] = (struct wrow){wr[rr], w->scale + (size_t)((i0 + rr) / B) * kblocks + kb};
            }
            float *at = acc + (size_t)tl * R * NXC * 16;
            if (B <= KC) {
                chunk(SRC_FP8, MODE_BLK, R, raw, xk, ldx, nc, k0, m, at, buf);
            } else {
                /* blocks larger than the buffer: decoded in place for every tile */
                size_t n = 0;
                for (; n + TILE_NXD <= nc; n += TILE_NXD)
                    MAC_NX(SRC_FP8, MODE_BLK, R, TILE_NXD, raw, xk + n * cols, cols, k0, m,
                           at + n * 16);
                if (n < nc)
                    MAC_NX(SRC_FP8, MODE_BLK, R, nc - n, raw, xk + n * cols, cols, k0, m,
                           at + n * 16);
            }
        }
    }
    fold(RB, acc, nc, y, ldy, i0, CHECK ? nan_row : NULL);
}

INLINE void fp8_matvec(const struct dsv4_fp8_weight *w, const float *x, size_t nx, float *y,
                       size_t ldy, uint32_t row_begin, uint32_t row_end, const int CHECK)
{
    for (size_t n0 = 0; n0 < nx; n0 += NXC) {
        const size_t nc = nx - n0 < NXC ? nx - n0 : NXC;
        const float *xc = x + n0 * w->cols;
        float *yc = y + n0 * ldy;
        uint32_t i = row_begin;
        if (nc == 1) {
            for (; i + TILE_R1 <= row_end; i += TILE_R1)
                fp8_rows(TILE_R1, 1, w, xc, nc, yc, ldy, i, CHECK);
        } else if (nc < TILE_BUF_FROM_FP8) {
            /* partials and sums of a block both in registers: fewer rows per tile */
            for (; i + TILE_RG <= row_end; i += TILE_RG)
                fp8_rows(TILE_RG, 1, w, xc, nc, yc, ldy, i, CHECK);
        } else {
            for (; i + TILE_R * TILE_NT <= row_end; i += TILE_R * TILE_NT)
                fp8_rows(TILE_R, TILE_NT, w, xc, nc, yc, ldy, i, CHECK);
            for (; i + TILE_R <= row_end; i += TILE_R)
                fp8_rows(TILE_R, 1, w, xc, nc, yc, ldy, i, CHECK);
        }
        for (; i < row_end; i++)
            fp8_rows(1, 1, w, xc, nc, yc, ldy, i, CHECK);
    }
}

/* ---- BF16: one lane chain per output over all K (FP4: matvec-fp4.h) ---- */

INLINE void lane_rows(const int SRC, const int R, const int NT, const void *wbase,
                      size_t row_bytes, uint32_t cols, const float *x,
                      size_t nc, float *y, size_t ldy, uint32_t i0)
{
    const int RB = R * NT;
    float acc[RBMAX * NXC * 16] __attribute__((aligned(64)));
    float buf[RMAX * KC] __attribute__((aligned(64)));
    struct wrow raw[RBMAX];
    for (int r = 0; r < RB; r++)
        raw[r] = (struct wrow){(const uint8_t *)wbase + (size_t)(i0 + r) * row_bytes, NULL};
    if (nc < TILE_BUF_FROM) {
        ROW_GROUPS(SRC, R, nc, raw, x, cols, cols, 0, (size_t)R * row_bytes, y, ldy, i0, NULL);
        return;
    }
    for (int r = 0; r < RB; r++) {
        for (size_t n = 0; n < nc; n++)
            memset(acc + (r * NXC + n) * 16, 0, 16 * sizeof(float));
    }
    float xbuf[NXC * KC] __attribute__((aligned(64)));
    for (uint32_t k0 = 0; k0 < cols; k0 += KC) {
        const uint32_t m = cols - k0 < KC ? cols - k0 : KC;
        size_t ldx;
        const float *xk = x_chunk(x, cols, nc, k0, m, xbuf, &ldx);
        const size_t cb = (size_t)k0 * row_bytes / cols, mb = (size_t)m * row_bytes / cols;
        for (int tl = 0; tl < NT; tl++) {
            for (int r = tl * R; r < (tl + 1) * R; r++)
                for (size_t u = 0; u < mb; u += 64)
                    PREFETCH_T1((const uint8_t *)raw[r].p + cb + u + (size_t)RB * row_bytes);
            chunk(SRC, MODE_ACC, R, raw + tl * R, xk, ldx, nc, k0, m,
                  acc + (size_t)tl * R * NXC * 16, buf);
        }
    }
    fold(RB, acc, nc, y, ldy, i0, NULL);
}

INLINE void bf16_matvec(const struct dsv4_bf16_weight *w, const float *x, size_t nx, float *y,
                        size_t ldy, uint32_t row_begin, uint32_t row_end)
{
    const size_t rb = (size_t)w->cols * 2;
    for (size_t n0 = 0; n0 < nx; n0 += NXC) {
        const size_t nc = nx - n0 < NXC ? nx - n0 : NXC;
        const float *xc = x + n0 * w->cols;
        float *yc = y + n0 * ldy;
        uint32_t i = row_begin;
        if (nc == 1) {
            for (; i + TILE_R1 <= row_end; i += TILE_R1)
                lane_rows(SRC_BF16, TILE_R1, 1, w->w, rb, w->cols, xc, nc, yc, ldy, i);
        } else if (nc < TILE_BUF_FROM) {
            for (; i + TILE_RG <= row_end; i += TILE_RG)
                lane_rows(SRC_BF16, TILE_RG, 1, w->w, rb, w->cols, xc, nc, yc, ldy, i);
        } else {
            for (; i + TILE_R * TILE_NT <= row_end; i += TILE_R * TILE_NT)
                lane_rows(SRC_BF16, TILE_R, TILE_NT, w->w, rb, w->cols, xc, nc, yc, ldy, i);
            for (; i + TILE_R <= row_end; i += TILE_R)
                lane_rows(SRC_BF16, TILE_R, 1, w->w, rb, w->cols, xc, nc, yc, ldy, i);
        }
        for (; i < row_end; i++)
            lane_rows(SRC_BF16, 1, 1, w->w, rb, w->cols, xc, nc, yc, ldy, i);
    }
}

/* ---- entry points: tails the tiles do not cover run the definition ---- */

static void matvec_fp8_simd(const struct dsv4_fp8_weight *w, const float *x, size_t nx, float *y,
                            size_t ldy, uint32_t row_begin, uint32_t row_end)
{
    if (w->block % DSV4_LANES || w->cols % DSV4_LANES)
        dsv4_kernel_ops_scalar.matvec_fp8(w, x, nx, y, ldy, row_begin, row_end);
    else
        fp8_matvec(w, x, nx, y, ldy, row_begin, row_end, 1);
}

static void matvec_fp8_nanfree_simd(const struct dsv4_fp8_weight *w, const float *x, size_t nx,
                                    float *y, size_t ldy, uint32_t row_begin, uint32_t row_end)
{
    if (w->block % DSV4_LANES || w->cols % DSV4_LANES)
        dsv4_kernel_ops_scalar.matvec_fp8_nanfree(w, x, nx, y, ldy, row_begin, row_end);
    else
        fp8_matvec(w, x, nx, y, ldy, row_begin, row_end, 0);
}

static void matvec_bf16_simd(const struct dsv4_bf16_weight *w, const float *x, size_t nx,
                             float *y, size_t ldy, uint32_t row_begin, uint32_t row_end)
{
    if (w->cols % DSV4_LANES)
        dsv4_kernel_ops_scalar.matvec_bf16(w, x, nx, y, ldy, row_begin, row_end);
    else
        bf16_matvec(w, x, nx, y, ldy, row_begin, row_end);
}
