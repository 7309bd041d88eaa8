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
 *    to every activation row of the pass in R × TILE_NX register tiles
 *    (mac_buf, one function per tile shape); the pass's x is packed once per
 *    call, chunk by chunk, rows KC floats apart (x_pack); accumulators (16
 *    lanes per output) live in a stack array.
 * Either way every (weight row, activation row) output sees exactly the
 * operation sequence of the scalar definition (kernels-internal.h,
 * docs/numerics.md): lane j only ever takes the columns ≡ j (mod 16) in
 * ascending order (FP8: in each 32-column group from the block start the upper one
 * first, fp8_step), so the result does not depend on nx, on R or on the path. The
 * avx512bf16 twin runs FP8 passes whose activations are bf16 values (FP8-QDQ'd rows)
 * through vdpbf16ps, whose pair order is that one (mac_b).
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
 *   fp8_dec16x(p, out) the same as e4m3·2^-120 in integer ops (fp32 subnormals included), for
 *                      activations taken ×2^112 (the direct path, x_scale112)
 *   fp8_nan(p, n)      whether any of n bytes (n % 16 == 0) is an E4M3 NaN code
 *   bf16_dec16(p, out) 16 bf16 → fp32
 *   TILE_R1            weight rows per tile in the direct path (one activation row)
 *   TILE_RG            weight rows per tile in the direct path (several activation rows)
 *   TILE_R, TILE_NX    weight × activation rows of a buffered register tile
 *   TILE_NXD           activation rows of a direct-path register tile (<= 4)
 *   TILE_BUF_FROM, TILE_BUF_FROM_FP8  activation rows from which the buffered path runs
 *   TILE_NXC           activation rows per FP8 pass (the weights are decoded once per pass)
 *   PREFETCH_T1(p), PREFETCH_T0(p)
 * Optional: LANE_REDUCE8 and lane_reduce8(acc, stride, y): dsv4_lane_reduce of 8 outputs'
 *   accumulators stride floats apart, at once, into y[0..7]
 */
#ifndef VL
#error "define the vector primitives before including matvec-tile.h"
#endif

#define NH (16 / VL)
_Static_assert(TILE_NXD >= 1 && TILE_NXD <= 4, "row_tile groups are 1..4 rows");
/* activation rows per pass: their accumulators (R × NXC × 64 bytes) and a chunk of
 * their x stay in L1; beyond that the weights are decoded once per pass. FP8 passes take
 * NXC = TILE_NXC rows (AVX-512: 32; a block of 128 columns of 32 rows is 16 KiB of x, and
 * decoding a weight block once for 32 rows instead of 16 made nx = 64 calls 1.2× faster),
 * BF16 passes at most NXC_BF16 (its chunks are KC columns: 32 rows would be 32 KiB of x).
 * NXC is also the accumulators' row stride. */
#define NXC TILE_NXC
#define NXC_BF16 (NXC < 16 ? NXC : 16)
/* columns per chunk for BF16 (FP8 uses its scale block, packed KC8 floats apart: blocks
 * of more columns are decoded in place) */
#define KC 256
#define KC8 128
#define RMAX 8
/* rows of a block: NT tiles of R rows share the chunk of x in L1 */
#define RBMAX 16
#define NXMAX 8

/* SRC_FP8X: FP8 weights by fp8_dec16x against x·2^112, the same products as SRC_FP8 */
enum src { SRC_FP8, SRC_BF16, SRC_FP8X };
enum mode {
    MODE_ACC,  /* continue the lane chains in acc */
    MODE_BLK,  /* FP8 block: partials from +0, then acc = fma(P, 2^(S-119), acc) */
    MODE_BLK0, /* the first FP8 block: MODE_BLK with acc = +0, not read (no memset) */
};

/* per weight row of a tile: where its weights of the current chunk are */
struct wrow {
    const void *p;       /* the raw row */
    const uint8_t *e;    /* FP8: the block's scale byte */
};

/* an FP8 block's factors per weight row of a tile, found once per block (not per register
 * tile; no call to dsv4_e8m0_to_f32 while accumulators are live, which made GCC spill them):
 * acc = fma(P, sc, acc) where fast, else fma(P·256, sc, acc) */
struct bfac {
    float sc[RMAX];
    int fast[RMAX];
};

/* a pass's activation rows split into register tiles of as equal sizes as TILE_NX allows
 * (16 rows: 6, 5, 5, not 6, 6, 4), found once per call */
struct split {
    int nt;
    int k[NXC];
};

static inline struct split split_rows(size_t nc)
{
    struct split sp = {.nt = (int)((nc + TILE_NX - 1) / TILE_NX)};
    for (int i = 0; i < sp.nt; i++)
        sp.k[i] = (int)(nc / (size_t)sp.nt + ((size_t)i < nc % (size_t)sp.nt));
    return sp;
}

/* The FP8 definition takes each 32-column group of a block upper half first (the pair order
 * of vdpbf16ps): the u-th step of 16 columns from the block's start covers columns
 * fp8_step(u) .. + 15, i.e. steps 1, 0, 3, 2, …, a lone last step in place. BF16 rows go in
 * order. */
INLINE uint32_t fp8_step(const int SRC, uint32_t u, uint32_t len)
{
    if (SRC == SRC_BF16)
        return u;
    const uint32_t g = u & ~31u;
    return g + 16 >= len ? u : g + 16 - (u & 16);
}

/* 16 consecutive weights of row `w` at column k */
INLINE void wdec16(const int SRC, const struct wrow *w, uint32_t k, vf out[NH])
{
    if (SRC == SRC_FP8)
        fp8_dec16((const uint8_t *)w->p + k, out);
    else if (SRC == SRC_FP8X)
        fp8_dec16x((const uint8_t *)w->p + k, out);
    else
        bf16_dec16((const uint16_t *)w->p + k, out);
}

/*
 * One register tile decoded in place (FP8 blocks larger than the buffer): R weight
 * rows × NX activation rows over columns [k0, k0 + len) (len % 16 == 0). x + n·ldx is
 * activation row n at column k0; acc holds per (r, n) 16 lanes at acc + (r·NXC + n)·16.
 */
INLINE void mac_tile(const int SRC, const int MODE, const int R, const int NX,
                     const struct wrow *w, const float *x, size_t ldx, uint32_t k0, uint32_t len,
                     float *acc)
{
    vf a[RMAX][NXMAX][NH];
    for (int r = 0; r < R; r++)
        for (int n = 0; n < NX; n++)
            for (int h = 0; h < NH; h++)
                a[r][n][h] = MODE == MODE_ACC ? vf_load(acc + (r * NXC + n) * 16 + h * VL)
                                              : vf_zero();
    for (uint32_t u = 0; u < len; u += 16) {
        const uint32_t t = fp8_step(SRC, u, len);
        vf wv[RMAX][NH];
        for (int r = 0; r < R; r++)
            wdec16(SRC, &w[r], k0 + t, wv[r]);
        for (int n = 0; n < NX; n++)
            for (int h = 0; h < NH; h++) {
                vf xv = vf_load(x + n * ldx + t + h * VL);
                /* one load per x vector, reused by the R rows (else the compiler
                 * folds a load into every fma and the loads bound the loop) */
                __asm__("" : "+x"(xv));
                for (int r = 0; r < R; r++)
                    a[r][n][h] = vf_fma(wv[r][h], xv, a[r][n][h]);
            }
    }
    for (int r = 0; r < R; r++) {
        float *ar = acc + r * NXC * 16;
        if (MODE == MODE_ACC) {
            for (int n = 0; n < NX; n++)
                for (int h = 0; h < NH; h++)
                    vf_store(ar + n * 16 + h * VL, a[r][n][h]);
            continue;
        }
        const uint8_t e = *w[r].e;
        for (int n = 0; n < NX; n++)
            for (int h = 0; h < NH; h++) {
                float *ap = ar + n * 16 + h * VL;
                if (e <= DSV4_E8M0_FAST_MAX)
                    vf_store(ap, vf_fma(a[r][n][h], vf_set1(dsv4_fp8_fast_scale(e)),
                                        vf_load(ap)));
                else
                    vf_store(ap, vf_fma(vf_mul(a[r][n][h], vf_set1(256.0f)),
                                        vf_set1(dsv4_e8m0_to_f32(e)), vf_load(ap)));
            }
    }
}

/*
 * mac_tile from the buffer: R decoded weight rows at wb + r·KC and NX packed
 * activation rows at xb + n·XS (XS = KC, or KC8 for FP8 blocks; both strides
 * compile-time constants, so every load
 * is a base plus a fixed offset and no pointer per row ties up a register), columns
 * [0, len). MODE_BLK(0): the block scale bytes in e[r].
 */
INLINE void mac_buf(const int MODE, const int R, const int NX, const float *wb, const float *xb,
                    uint32_t len, const struct bfac *bf, float *acc)
{
    for (int h = 0; h < NH; h++) {
        vf a[RMAX][NXMAX];
        for (int r = 0; r < R; r++)
            for (int n = 0; n < NX; n++)
                a[r][n] = MODE == MODE_ACC ? vf_load(acc + (r * NXC + n) * 16 + h * VL) : vf_zero();
        /* len ≥ 16: a loop that may run zero times made GCC keep the accumulators in a
         * stack array (zeroed, stored after the loop, reloaded by the epilogue) */
        const int XS = MODE == MODE_ACC ? KC : KC8;
        uint32_t u = 0;
        do {
            const uint32_t t = h * VL + fp8_step(MODE == MODE_ACC ? SRC_BF16 : SRC_FP8, u, len);
            vf wv[RMAX];
            for (int r = 0; r < R; r++)
                wv[r] = vf_load(wb + r * KC + t);
            for (int n = 0; n < NX; n++) {
                vf xv = vf_load(xb + n * XS + t);
                __asm__("" : "+v"(xv)); /* one load per x vector, reused by the R rows */
                for (int r = 0; r < R; r++)
                    a[r][n] = vf_fma(wv[r], xv, a[r][n]);
            }
            u += 16;
        } while (u < len);
        for (int r = 0; r < R; r++) {
            float *ar = acc + r * NXC * 16 + h * VL;
            if (MODE == MODE_ACC) {
                for (int n = 0; n < NX; n++)
                    vf_store(ar + n * 16, a[r][n]);
                continue;
            }
            const vf s = vf_set1(bf->sc[r]);
            for (int n = 0; n < NX; n++) {
                const vf old = MODE == MODE_BLK0 ? vf_zero() : vf_load(ar + n * 16);
                vf_store(ar + n * 16, bf->fast[r] ? vf_fma(a[r][n], s, old)
                                                  : vf_fma(vf_mul(a[r][n], vf_set1(256.0f)), s, old));
            }
        }
    }
}

/* mac_buf for run-time (MODE, R, NX), each variant its own function: inlined into the
 * caller, GCC spilled the accumulators of the smaller tiles */
#define MAC_BUF_FN(M, TAG, R, NX)                                                                  \
    static __attribute__((noinline)) void mac_buf_##M##_##TAG##_##NX(                              \
        const float *wb, const float *xb, uint32_t len, const struct bfac *bf, float *acc)        \
    {                                                                                              \
        mac_buf(M, R, NX, wb, xb, len, bf, acc);                                                   \
    }
#define MAC_BUF_NX(M, TAG, R)                                                                      \
    MAC_BUF_FN(M, TAG, R, 1) MAC_BUF_FN(M, TAG, R, 2) MAC_BUF_FN(M, TAG, R, 3)                   \
    MAC_BUF_FN(M, TAG, R, 4) MAC_BUF_FN(M, TAG, R, 5) MAC_BUF_FN(M, TAG, R, 6)
/* R = 1 (tails) and R = TILE_R */
MAC_BUF_NX(0, 1, 1) MAC_BUF_NX(0, T, TILE_R) MAC_BUF_NX(1, 1, 1) MAC_BUF_NX(1, T, TILE_R)
MAC_BUF_NX(2, 1, 1) MAC_BUF_NX(2, T, TILE_R)
_Static_assert(MODE_ACC == 0 && MODE_BLK == 1 && MODE_BLK0 == 2 && TILE_NX <= 6,
               "mac_buf variants");

#define MAC_BUF_CASE(M, TAG)                                                                       \
    switch (nx) {                                                                                  \
    case 1: mac_buf_##M##_##TAG##_1(wb, xb, len, bf, acc); return;                                \
    case 2: mac_buf_##M##_##TAG##_2(wb, xb, len, bf, acc); return;                                \
    case 3: mac_buf_##M##_##TAG##_3(wb, xb, len, bf, acc); return;                                \
    case 4: mac_buf_##M##_##TAG##_4(wb, xb, len, bf, acc); return;                                \
    case 5: mac_buf_##M##_##TAG##_5(wb, xb, len, bf, acc); return;                                \
    default: mac_buf_##M##_##TAG##_6(wb, xb, len, bf, acc); return;                               \
    }

INLINE void mac_buf_any(const int MODE, const int R, int nx, const float *wb, const float *xb,
                        uint32_t len, const struct bfac *bf, float *acc)
{
    _Static_assert(TILE_R != 1, "R = 1 and R = TILE_R are separate variants");
    if (MODE == MODE_ACC && R == 1)
        MAC_BUF_CASE(0, 1)
    else if (MODE == MODE_ACC)
        MAC_BUF_CASE(0, T)
    else if (MODE == MODE_BLK && R == 1)
        MAC_BUF_CASE(1, 1)
    else if (MODE == MODE_BLK)
        MAC_BUF_CASE(1, T)
    else if (R == 1)
        MAC_BUF_CASE(2, 1)
    else
        MAC_BUF_CASE(2, T)
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
    const int WB = SRC != SRC_BF16 ? 16 : 32;
    const uint32_t PFM = 64 / WB * 16 - 1;
    const int STEP = 16;
    vf c[RMAX][NXMAX][NH];
    for (int r = 0; r < R; r++)
        for (int n = 0; n < NX; n++)
            for (int h = 0; h < NH; h++)
                c[r][n][h] = vf_zero();
    const uint32_t blk = SRC != SRC_BF16 ? B : cols;
    for (uint32_t b0 = 0; b0 < cols; b0 += blk) {
        const uint32_t b1 = cols - b0 < blk ? cols : b0 + blk;
        vf p[RMAX][NXMAX][NH];
        for (int r = 0; r < R; r++)
            for (int n = 0; n < NX; n++)
                for (int h = 0; h < NH; h++)
                    p[r][n][h] = SRC != SRC_BF16 ? vf_zero() : c[r][n][h];
        /* FP8 steps of 32 columns: both halves decoded in address order (the weights
         * stream from DRAM here: the loads stay in the order the prefetchers follow),
         * then applied upper half first, as the definition takes them; a lone last 16
         * columns alone. Straight-line per step: a run-time half count or index made GCC
         * keep the decoded weights on the stack. */
        const uint32_t GS = SRC != SRC_BF16 ? 2 * STEP : STEP;
        uint32_t u = b0;
        for (; u + GS <= b1; u += GS) {
            /* row by row: only one row's decoded weights live at a time, the x loads
             * (L1) fold into the fmas */
            for (int r = 0; r < R; r++) {
                const int H = SRC != SRC_BF16 ? 2 : 1;
                vf wv[2][16 / VL];
                if ((u & PFM) == 0)
                    PREFETCH_T1((const uint8_t *)w[r].p + (size_t)u / 16 * WB + pfd);
                for (int g = 0; g < H; g++)
                    wdec16(SRC, &w[r], u + (uint32_t)g * STEP, wv[g]);
                for (int g = H - 1; g >= 0; g--)
                    for (int n = 0; n < NX; n++)
                        for (int v = 0; v < STEP / VL; v++)
                            p[r][n][v % NH] =
                                vf_fma(wv[g][v], vf_load(x + n * ldx + u + g * STEP + v * VL),
                                       p[r][n][v % NH]);
            }
        }
        if (u < b1) /* FP8: a lone last 16 columns */
            for (int r = 0; r < R; r++) {
                vf lo[16 / VL];
                wdec16(SRC, &w[r], u, lo);
                for (int n = 0; n < NX; n++)
                    for (int v = 0; v < STEP / VL; v++)
                        p[r][n][v % NH] =
                            vf_fma(lo[v], vf_load(x + n * ldx + u + v * VL), p[r][n][v % NH]);
            }
        for (int r = 0; r < R; r++) {
            if (SRC == SRC_BF16) {
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
/* len (% 16 == 0) weights of row w decoded to d */
INLINE void decode_run(const int SRC, const struct wrow *w, uint32_t len, float *d)
{
    for (uint32_t t = 0; t < len; t += 16) {
        vf v[16 / VL];
        wdec16(SRC, w, t, v);
        for (int h = 0; h < 16 / VL; h++)
            vf_store(d + t + h * VL, v[h]);
    }
}

INLINE void chunk(const int SRC, const int MODE, const int R, const struct wrow *raw,
                  const float *x, const struct split *sp, uint32_t k0, uint32_t len, float *acc,
                  float *buf)
{
    struct bfac bf;
    for (int r = 0; r < R; r++) {
        float *d = buf + (size_t)r * KC;
        struct wrow w = {(const uint8_t *)raw[r].p + (SRC == SRC_FP8 ? k0 : 2 * (size_t)k0),
                         NULL};
        /* a constant trip count for the common 128-column FP8 block: unrolled, no
         * per-step index arithmetic */
        if (SRC == SRC_FP8 && len == KC8)
            decode_run(SRC, &w, KC8, d);
        else
            decode_run(SRC, &w, len, d);
        if (MODE != MODE_ACC) {
            const uint8_t e = *raw[r].e;
            bf.fast[r] = e <= DSV4_E8M0_FAST_MAX;
            bf.sc[r] = bf.fast[r] ? dsv4_fp8_fast_scale(e) : dsv4_e8m0_to_f32(e);
        }
    }
    const size_t XS = MODE == MODE_ACC ? KC : KC8;
    for (int i = 0, n = 0; i < sp->nt; i++) {
        mac_buf_any(MODE, R, sp->k[i], buf, x + n * XS, len, &bf, acc + n * 16);
        n += sp->k[i];
    }
}

/*
 * The nc activation rows of a pass packed once per call, chunk by chunk of C <= S
 * columns: chunk j holds row n at (j·nc + n)·S, so a chunk's rows lie S floats apart
 * (a compile-time stride: a run-time one measured 1.5× slower in the tiles) (rows of x
 * lie a multiple of 4 KiB apart: they would share a few L1 sets, and copying a chunk per
 * tile, as before, stalled on 4 KiB aliasing between its loads and stores). NULL when
 * there is no memory (the caller then runs the definition).
 */
static float *x_pack(const float *x, size_t cols, size_t nc, uint32_t C, uint32_t S)
{
    const size_t nch = (cols + C - 1) / C;
    float *p = aligned_alloc(64, nch * nc * S * sizeof(float));
    if (!p)
        return NULL;
    for (size_t j = 0; j < nch; j++) {
        const uint32_t k0 = (uint32_t)j * C, m = cols - k0 < C ? (uint32_t)(cols - k0) : C;
        for (size_t n = 0; n < nc; n++)
            for (uint32_t t = 0; t < m; t += VL)
                vf_store(p + (j * nc + n) * S + t, vf_load(x + n * cols + k0 + t));
    }
    return p;
}

/* y of R rows for nc activation rows from the lane accumulators */
INLINE void fold(const int R, const float *acc, size_t nc, float *y, size_t ldy, uint32_t i0,
                 const int *nan_row)
{
#ifdef LANE_REDUCE8
    if (R == 8) {
        for (size_t n = 0; n < nc; n++) {
            lane_reduce8(acc + n * 16, (size_t)NXC * 16, y + n * ldy + i0);
            for (int r = 0; r < R && nan_row; r++)
                if (nan_row[r])
                    y[n * ldy + i0 + r] = NAN;
        }
        return;
    }
#endif
    for (int r = 0; r < R; r++)
        for (size_t n = 0; n < nc; n++)
            y[n * ldy + i0 + r] =
                nan_row && nan_row[r] ? NAN : dsv4_lane_reduce(acc + ((size_t)r * NXC + n) * 16);
}

/* ---- FP8 ---- */

#ifdef FP8_BF16
/*
 * The FP8 buffered path in bf16 (the avx512bf16 twin): vdpbf16ps takes, per lane j of a
 * 32-column group, the product of its upper column first, then its lower one, each added
 * with a rounding (Intel's pseudo-code; fp8_bf16_ok checks this CPU) — the definition's pair
 * order. Its products are exact when both factors are bf16 values: the decoded weights are
 * (e4m3·2^-8, three mantissa bits), and so is an activation row that was FP8-QDQ'd. The
 * instruction flushes subnormal inputs and results; a pass takes this path only when every
 * nonzero x has an exponent in [−90, 90]: then every product is a multiple of
 * 2^(−9−8−90−7) = 2^−114 and below 2^92, so no nonzero partial is subnormal and none
 * overflows, and the sums are the fp32 path's bit for bit. Other passes take the fp32 path.
 * A 32-column group of a row lies in one vector: dword j = (column j, column 16 + j).
 */
#define FP8B_EMIN (127 - 90)
#define FP8B_EMAX (127 + 90)

/* whether vdpbf16ps adds the upper product first, then the lower, rounding each time (as the
 * definition's two fmas do): checked once on lanes where the orders and a single rounding
 * differ */
static int fp8_bf16_ok(void)
{
    static _Atomic int state; /* 0 unknown, 1 yes, −1 no (a race only repeats the check) */
    int st = state;
    if (st)
        return st > 0;
    uint32_t seed = 12345;
    int ok = 1;
    for (int it = 0; it < 64 && ok; it++) {
        float c[16], w[32], x[32];
        uint16_t wb[32], xb[32];
        for (int i = 0; i < 32; i++) {
            seed = seed * 1664525u + 1013904223u;
            const uint32_t wbits = ((seed >> 8) & 0x807Fu) | ((uint32_t)(120 + (seed >> 24) % 16) << 7);
            seed = seed * 1664525u + 1013904223u;
            const uint32_t xbits = ((seed >> 8) & 0x807Fu) | ((uint32_t)(110 + (seed >> 24) % 32) << 7);
            wb[i] = (uint16_t)wbits;
            xb[i] = (uint16_t)xbits;
            const uint32_t wf = wbits << 16, xf = xbits << 16;
            memcpy(&w[i], &wf, 4);
            memcpy(&x[i], &xf, 4);
        }
        for (int j = 0; j < 16; j++) {
            seed = seed * 1664525u + 1013904223u;
            c[j] = (float)(int32_t)seed * 0x1p-20f;
        }
        float r[16];
        _mm512_storeu_ps(r, _mm512_dpbf16_ps(_mm512_loadu_ps(c), (__m512bh)_mm512_loadu_si512(wb),
                                             (__m512bh)_mm512_loadu_si512(xb)));
        for (int j = 0; j < 16 && ok; j++) {
            const float d = fmaf(w[2 * j], x[2 * j], fmaf(w[2 * j + 1], x[2 * j + 1], c[j]));
            ok = memcmp(&d, &r[j], 4) == 0;
        }
    }
    state = ok ? 1 : -1;
    return ok;
}

/*
 * The nc activation rows of a pass as bf16 in the group layout, block by block: block kb of
 * row n at (kb·nc + n)·KC8 uint16s. NULL when a value is not a bf16 with its exponent in
 * range (or zero), or without memory: the caller then packs fp32.
 */
static uint16_t *x_pack_b(const float *x, size_t cols, size_t nc, uint32_t B)
{
    const size_t nch = (cols + B - 1) / B;
    uint16_t *p = aligned_alloc(64, nch * nc * KC8 * sizeof(uint16_t));
    if (!p)
        return NULL;
    const __m512i lo16 = _mm512_set1_epi32(0xFFFF), abs = _mm512_set1_epi32(0x7FFFFFFF);
    const __m512i emin = _mm512_set1_epi32(FP8B_EMIN << 23);
    const __m512i erange = _mm512_set1_epi32((FP8B_EMAX - FP8B_EMIN + 1) << 23);
    __mmask16 bad = 0;
    for (size_t j = 0; j < nch; j++) {
        const uint32_t k0 = (uint32_t)j * B, m = cols - k0 < B ? (uint32_t)(cols - k0) : B;
        for (size_t n = 0; n < nc; n++)
            for (uint32_t g = 0; g < m; g += 32) {
                const float *s = x + n * cols + k0 + g;
                const __m512i a = _mm512_loadu_si512(s), b = _mm512_loadu_si512(s + 16);
                /* nonzero: low half zero and (|v| − 2^EMIN) unsigned below the range */
                const __m512i aa = _mm512_and_si512(a, abs), ba = _mm512_and_si512(b, abs);
                bad |= _mm512_test_epi32_mask(_mm512_or_si512(a, b), lo16);
                bad |= _mm512_mask_cmpge_epu32_mask(_mm512_test_epi32_mask(aa, aa),
                                                    _mm512_sub_epi32(aa, emin), erange);
                bad |= _mm512_mask_cmpge_epu32_mask(_mm512_test_epi32_mask(ba, ba),
                                                    _mm512_sub_epi32(ba, emin), erange);
                _mm512_store_si512(p + (j * nc + n) * KC8 + g,
                                   _mm512_or_si512(_mm512_andnot_si512(lo16, b),
                                                   _mm512_srli_epi32(a, 16)));
            }
    }
    if (bad) {
        free(p);
        return NULL;
    }
    return p;
}

/* R decoded rows (bf16 group layout, KC8 apart) × NX packed rows (KC8 apart), one block of
 * len columns (len % 32 == 0): partials from +0, then the block factor as in mac_buf */
INLINE void mac_b(const int MODE, const int R, const int NX, const uint16_t *wb,
                  const uint16_t *xb, uint32_t len, const struct bfac *bf, float *acc)
{
    __m512 a[RMAX][NXMAX];
    for (int r = 0; r < R; r++)
        for (int n = 0; n < NX; n++)
            a[r][n] = vf_zero();
    uint32_t t = 0;
    do {
        __m512i wv[RMAX];
        for (int r = 0; r < R; r++)
            wv[r] = _mm512_load_si512(wb + r * KC8 + t);
        for (int n = 0; n < NX; n++) {
            __m512i xv = _mm512_load_si512(xb + n * KC8 + t);
            __asm__("" : "+v"(xv));
            for (int r = 0; r < R; r++)
                a[r][n] = _mm512_dpbf16_ps(a[r][n], (__m512bh)wv[r], (__m512bh)xv);
        }
        t += 32;
    } while (t < len);
    for (int r = 0; r < R; r++) {
        float *ar = acc + r * NXC * 16;
        const vf s = vf_set1(bf->sc[r]);
        for (int n = 0; n < NX; n++) {
            const vf old = MODE == MODE_BLK0 ? vf_zero() : vf_load(ar + n * 16);
            vf_store(ar + n * 16, bf->fast[r] ? vf_fma(a[r][n], s, old)
                                              : vf_fma(vf_mul(a[r][n], vf_set1(256.0f)), s, old));
        }
    }
}

#define MAC_B_FN(M, TAG, R, NX)                                                                    \
    static __attribute__((noinline)) void mac_b_##M##_##TAG##_##NX(                                \
        const uint16_t *wb, const uint16_t *xb, uint32_t len, const struct bfac *bf, float *acc)  \
    {                                                                                              \
        mac_b(M, R, NX, wb, xb, len, bf, acc);                                                     \
    }
#define MAC_B_NX(M, TAG, R)                                                                        \
    MAC_B_FN(M, TAG, R, 1) MAC_B_FN(M, TAG, R, 2) MAC_B_FN(M, TAG, R, 3)                          \
    MAC_B_FN(M, TAG, R, 4) MAC_B_FN(M, TAG, R, 5) MAC_B_FN(M, TAG, R, 6)
MAC_B_NX(1, 1, 1) MAC_B_NX(1, T, TILE_R) MAC_B_NX(2, 1, 1) MAC_B_NX(2, T, TILE_R)

#define MAC_B_CASE(M, TAG)                                                                         \
    switch (nx) {                                                                                  \
    case 1: mac_b_##M##_##TAG##_1(wb, xb, len, bf, acc); return;                                  \
    case 2: mac_b_##M##_##TAG##_2(wb, xb, len, bf, acc); return;                                  \
    case 3: mac_b_##M##_##TAG##_3(wb, xb, len, bf, acc); return;                                  \
    case 4: mac_b_##M##_##TAG##_4(wb, xb, len, bf, acc); return;                                  \
    case 5: mac_b_##M##_##TAG##_5(wb, xb, len, bf, acc); return;                                  \
    default: mac_b_##M##_##TAG##_6(wb, xb, len, bf, acc); return;                                 \
    }

INLINE void mac_b_any(const int MODE, const int R, int nx, const uint16_t *wb, const uint16_t *xb,
                      uint32_t len, const struct bfac *bf, float *acc)
{
    if (MODE == MODE_BLK && R == 1)
        MAC_B_CASE(1, 1)
    else if (MODE == MODE_BLK)
        MAC_B_CASE(1, T)
    else if (R == 1)
        MAC_B_CASE(2, 1)
    else
        MAC_B_CASE(2, T)
}

/* chunk() in bf16: the block of R weight rows decoded once into the group layout */
INLINE void chunk_b(const int MODE, const int R, const struct wrow *raw, const uint16_t *xb,
                    const struct split *sp, uint32_t k0, uint32_t len, float *acc, uint16_t *buf)
{
    struct bfac bf;
    const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
    for (int r = 0; r < R; r++) {
        const uint8_t *p = (const uint8_t *)raw[r].p + k0;
        for (uint32_t g = 0; g < len; g += 32) {
            vf lo[1], hi[1];
            fp8_dec16(p + g, lo);
            fp8_dec16(p + g + 16, hi);
            _mm512_store_si512(buf + (size_t)r * KC8 + g,
                               _mm512_or_si512(_mm512_andnot_si512(lo16, _mm512_castps_si512(hi[0])),
                                               _mm512_srli_epi32(_mm512_castps_si512(lo[0]), 16)));
        }
        const uint8_t e = *raw[r].e;
        bf.fast[r] = e <= DSV4_E8M0_FAST_MAX;
        bf.sc[r] = bf.fast[r] ? dsv4_fp8_fast_scale(e) : dsv4_e8m0_to_f32(e);
    }
    for (int i = 0, n = 0; i < sp->nt; i++) {
        mac_b_any(MODE, R, sp->k[i], buf, xb + n * KC8, len, &bf, acc + n * 16);
        n += sp->k[i];
    }
}
#endif


/* the direct path's integer-decode tiles as functions of their own: inlined into the large
 * matvec functions, GCC kept one accumulator of the 4-row tile on the stack, a store-to-load
 * chain that took a quarter of a one-row call */
#define FP8X_GROUPS_FN(R)                                                                          \
    static __attribute__((noinline)) void fp8x_groups_##R(                                        \
        const struct wrow *raw, const float *x, size_t nc, uint32_t cols, uint32_t B, float *y,    \
        size_t ldy, uint32_t i0, const int *nan_row)                                               \
    {                                                                                              \
        ROW_GROUPS(SRC_FP8X, R, nc, raw, x, cols, cols, B, (size_t)(R) * cols, y, ldy, i0,          \
                   nan_row);                                                                       \
    }
FP8X_GROUPS_FN(TILE_R1)
FP8X_GROUPS_FN(TILE_RG)
FP8X_GROUPS_FN(1)

/*
 * FP8 rows i0 .. i0 + R·NT − 1 (NT tiles of R rows) for nc activation rows: along
 * K block by block; the block's x of the pass stays in L1 for all NT tiles.
 */
INLINE void fp8_rows(const int R, const int NT, const struct dsv4_fp8_weight *w, const float *x,
                     const float *xp, const uint16_t *xpb, size_t nc, float *y, size_t ldy,
                     uint32_t i0, const int CHECK)
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
        if (xp && R == TILE_R1) /* x·2^112 (x_scale112): the integer decode */
            fp8x_groups_TILE_R1(raw, xp, nc, cols, B, y, ldy, i0, CHECK ? nan_row : NULL);
        else if (xp && R == TILE_RG)
            fp8x_groups_TILE_RG(raw, xp, nc, cols, B, y, ldy, i0, CHECK ? nan_row : NULL);
        else if (xp && R == 1)
            fp8x_groups_1(raw, xp, nc, cols, B, y, ldy, i0, CHECK ? nan_row : NULL);
        else /* (another tile height, or no x·2^112: the fp16 decode against x) */
            ROW_GROUPS(SRC_FP8, R, nc, raw, x, cols, cols, B, (size_t)R * cols, y, ldy, i0,
                       CHECK ? nan_row : NULL);
        return;
    }
    float acc[RBMAX * NXC * 16] __attribute__((aligned(64)));
    float buf[RMAX * KC] __attribute__((aligned(64)));
    const uint8_t *wr[RBMAX], *er[RBMAX];
    int nan_row[RBMAX];
    for (int r = 0; r < RB; r++) {
        wr[r] = w->w + (size_t)(i0 + r) * cols;
        er[r] = w->scale + (size_t)((i0 + r) / B) * kblocks; /* (a division per row, once) */
        nan_row[r] = 0;
        for (size_t n = 0; n < nc && !xp && !xpb; n++) /* (buffered: MODE_BLK0 sets it) */
            memset(acc + (r * NXC + n) * 16, 0, 16 * sizeof(float));
    }
    const struct split sp = split_rows(nc);
    for (uint32_t kb = 0; kb < kblocks; kb++) {
        const uint32_t k0 = kb * B, m = cols - k0 < B ? cols - k0 : B;
        /* bytes of this row's next block */
        const uint32_t mn = cols - k0 - m < B ? cols - k0 - m : B;
        const float *xk = xp ? xp + (size_t)kb * nc * KC8 : x + k0;
        for (int tl = 0; tl < NT; tl++) {
            struct wrow raw[RMAX];
            for (int r = 0; r < R; r++) {
                const int rr = tl * R + r;
                const uint8_t *p = wr[rr] + k0;
                for (uint32_t u = 0; u < m; u += 64)
                    PREFETCH_T1(p + u + (size_t)RB * cols);
                /* and this row's next block into L1: the decode's loads had waited for
                 * L2 (a sixth of the call's own time at 32 rows, perf 2026-12-05) */
                for (uint32_t u = 0; u < mn; u += 64)
                    PREFETCH_T0(p + m + u);
                if (CHECK)
                    nan_row[rr] |= fp8_nan(p, m);
                raw[r] = (struct wrow){wr[rr], er[rr] + kb};
            }
            float *at = acc + (size_t)tl * R * NXC * 16;
#ifdef FP8_BF16
            if (xpb) {
                chunk_b(kb == 0 ? MODE_BLK0 : MODE_BLK, R, raw, xpb + (size_t)kb * nc * KC8, &sp,
                        k0, m, at, (uint16_t *)buf);
                continue;
            }
#endif
            if (xp && kb == 0) {
                chunk(SRC_FP8, MODE_BLK0, R, raw, xk, &sp, k0, m, at, buf);
            } else if (xp) {
                chunk(SRC_FP8, MODE_BLK, R, raw, xk, &sp, k0, m, at, buf);
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

/*
 * The direct path's activations ×2^112 for fp8_dec16x, or NULL where that would not give
 * fp8_dec16's products: a finite |x| ≥ 2^16 (×2^112 overflows), the denormals-are-zero mode
 * (it would read the subnormal weight codes as 0), or no memory. Scaling by a power of two
 * is exact, and (e4m3·2^-120)·(x·2^112) is the same exact product as (e4m3·2^-8)·x, so the
 * fma chains round identically; NaN and ±inf stay what they were.
 */
static float *x_scale112(const float *x, size_t n)
{
    if (_mm_getcsr() & 0x0040) /* DAZ */
        return NULL;
    float *xs = aligned_alloc(64, (n * sizeof(float) + 63) & ~(size_t)63);
    if (!xs)
        return NULL;
    uint32_t big = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, x + i, sizeof b);
        b &= 0x7FFFFFFFu;
        big |= (uint32_t)(b >= 0x47800000u) & (uint32_t)(b < 0x7F800000u);
        xs[i] = x[i] * 0x1p112f;
    }
    if (big) {
        free(xs);
        return NULL;
    }
    return xs;
}

INLINE void fp8_matvec(const struct dsv4_fp8_weight *w, const float *x, size_t nx, float *y,
                       size_t ldy, uint32_t row_begin, uint32_t row_end, const int CHECK)
{
    for (size_t n0 = 0; n0 < nx; n0 += NXC) {
        const size_t nc = nx - n0 < NXC ? nx - n0 : NXC;
        const float *xc = x + n0 * w->cols;
        float *yc = y + n0 * ldy;
        uint32_t i = row_begin;
        float *xs = NULL;
        if (nc == 1) {
            xs = x_scale112(xc, w->cols);
            for (; i + TILE_R1 <= row_end; i += TILE_R1)
                fp8_rows(TILE_R1, 1, w, xc, xs, NULL, nc, yc, ldy, i, CHECK);
        } else if (nc < TILE_BUF_FROM_FP8) {
            xs = x_scale112(xc, nc * w->cols);
            /* partials and sums of a block both in registers: fewer rows per tile */
            for (; i + TILE_RG <= row_end; i += TILE_RG)
                fp8_rows(TILE_RG, 1, w, xc, xs, NULL, nc, yc, ldy, i, CHECK);
        } else {
            /* blocks larger than the buffer (or no memory) are decoded in place */
            uint16_t *xpb = NULL;
#ifdef FP8_BF16
            if (w->block % 32 == 0 && w->block <= KC8 && w->cols % 32 == 0 && fp8_bf16_ok())
                xpb = x_pack_b(xc, w->cols, nc, w->block);
#endif
            float *xp = !xpb && w->block <= KC8 ? x_pack(xc, w->cols, nc, w->block, KC8) : NULL;
            for (; i + TILE_R * TILE_NT <= row_end; i += TILE_R * TILE_NT)
                fp8_rows(TILE_R, TILE_NT, w, xc, xp, xpb, nc, yc, ldy, i, CHECK);
            for (; i + TILE_R <= row_end; i += TILE_R)
                fp8_rows(TILE_R, 1, w, xc, xp, xpb, nc, yc, ldy, i, CHECK);
            for (; i < row_end; i++)
                fp8_rows(1, 1, w, xc, xp, xpb, nc, yc, ldy, i, CHECK);
            free(xp);
            free(xpb);
        }
        for (; i < row_end; i++)
            fp8_rows(1, 1, w, xc, xs, NULL, nc, yc, ldy, i, CHECK);
        free(xs);
    }
}

/* ---- BF16: one lane chain per output over all K (FP4: matvec-fp4.h) ---- */

INLINE void lane_rows(const int SRC, const int R, const int NT, const void *wbase,
                      size_t row_bytes, uint32_t cols, const float *x, const float *xp,
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
    const struct split sp = split_rows(nc);
    for (uint32_t k0 = 0; k0 < cols; k0 += KC) {
        const uint32_t m = cols - k0 < KC ? cols - k0 : KC;
        const float *xk = xp + (size_t)k0 * nc;
        const size_t cb = (size_t)k0 * row_bytes / cols, mb = (size_t)m * row_bytes / cols;
        /* bytes of the row's next chunk */
        const size_t mn = row_bytes - cb - mb < mb ? row_bytes - cb - mb : mb;
        for (int tl = 0; tl < NT; tl++) {
            for (int r = tl * R; r < (tl + 1) * R; r++) {
                const uint8_t *p = (const uint8_t *)raw[r].p + cb;
                for (size_t u = 0; u < mb; u += 64)
                    PREFETCH_T1(p + u + (size_t)RB * row_bytes);
                /* and the row's next chunk into L1, as the FP8 tiles do */
                for (size_t u = 0; u < mn; u += 64)
                    PREFETCH_T0(p + mb + u);
            }
            chunk(SRC, MODE_ACC, R, raw + tl * R, xk, &sp, k0, m,
                  acc + (size_t)tl * R * NXC * 16, buf);
        }
    }
    fold(RB, acc, nc, y, ldy, i0, NULL);
}

INLINE void bf16_matvec(const struct dsv4_bf16_weight *w, const float *x, size_t nx, float *y,
                        size_t ldy, uint32_t row_begin, uint32_t row_end)
{
    const size_t rb = (size_t)w->cols * 2;
    for (size_t n0 = 0; n0 < nx; n0 += NXC_BF16) {
        const size_t nc = nx - n0 < NXC_BF16 ? nx - n0 : NXC_BF16;
        const float *xc = x + n0 * w->cols;
        float *yc = y + n0 * ldy;
        uint32_t i = row_begin;
        if (nc == 1) {
            for (; i + TILE_R1 <= row_end; i += TILE_R1)
                lane_rows(SRC_BF16, TILE_R1, 1, w->w, rb, w->cols, xc, NULL, nc, yc, ldy, i);
        } else if (nc < TILE_BUF_FROM) {
            for (; i + TILE_RG <= row_end; i += TILE_RG)
                lane_rows(SRC_BF16, TILE_RG, 1, w->w, rb, w->cols, xc, NULL, nc, yc, ldy, i);
        } else {
            float *xp = x_pack(xc, w->cols, nc, KC, KC);
            if (!xp) { /* no memory: the definition */
                dsv4_kernel_ops_scalar.matvec_bf16(w, xc, nc, yc, ldy, row_begin, row_end);
                continue;
            }
            for (; i + TILE_R * TILE_NT <= row_end; i += TILE_R * TILE_NT)
                lane_rows(SRC_BF16, TILE_R, TILE_NT, w->w, rb, w->cols, xc, xp, nc, yc, ldy, i);
            for (; i + TILE_R <= row_end; i += TILE_R)
                lane_rows(SRC_BF16, TILE_R, 1, w->w, rb, w->cols, xc, xp, nc, yc, ldy, i);
            for (; i < row_end; i++)
                lane_rows(SRC_BF16, 1, 1, w->w, rb, w->cols, xc, xp, nc, yc, ldy, i);
            free(xp);
        }
        for (; i < row_end; i++)
            lane_rows(SRC_BF16, 1, 1, w->w, rb, w->cols, xc, NULL, nc, yc, ldy, i);
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
