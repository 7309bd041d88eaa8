/* SPDX-License-Identifier: MIT */
/*
 * The FP4 matvec of the SIMD twins, in integers: included by matvec-avx2.c and
 * matvec-avx512.c (256-bit AVX2 code in both, so the two are one code).
 *
 * The definition (matvec-c.c, docs/numerics.md) sums, per 32-column scale block
 * and lane j, four unscaled E2M1 products, then applies the block scale once.
 * Activations reach FP4 linears FP8-QDQ'd (E4M3 codes times a power of two per
 * 128 columns), and then every such partial is exact. So each activation block
 * is first turned into integers q = x·2^σ (σ per block, from its largest
 * magnitude): 16-bit when that is exact, else 18-bit as 9-bit halves, else (any
 * x that is not QDQ'd, NaN, inf, or so large, ≥ 2^123, that a partial of the
 * definition could overflow) the row takes the scalar definition. Weights
 * decode as doubled E2M1 int8 through one vpshufb and multiply-add in int32 with
 * vpmaddwd; the pairing of vpmaddwd is what fixes the definition's lanes
 * (column base, base + 1, base + 8, base + 9). The exact integer partial,
 * converted to fp32 (exact, < 2^24), times 2^(S − 127 − σ − 1 [− 8]) in one fma
 * gives the definition's fma(P, 2^(S−127), acc) bit for bit whenever that power
 * of two is a normal fp32; rows where it is not (or S = 0xFF) take the
 * definition too.
 *
 * Needs INLINE from the includer.
 */
#include <stdlib.h>

/* bytes per 32-column block of a prepared activation row: qA, qB (16-bit class) or
 * loA, loB, hiA, hiB (18-bit), 16 int16 each. Blocks are laid out in pairs, each
 * part of the even block beside the same part of the odd one (qA0 qA1 qB0 qB1 hiA0
 * hiA1 hiB0 hiB1), so a 512-bit load takes one part of two blocks; a row holds an
 * even number of blocks' room. */
#define FP4_QB 128
/* activation rows prepared per pass */
#define FP4_NXP 16
#ifdef FP4_ZMM
#define FP4_HAS_Z 1
/* the float path (fp4_block_f): activation rows per tile (at most), weight rows per
 * block, pairs of blocks per chunk of K (8: 32 KiB of X for 16 rows, and half the
 * accumulator loads and stores of 4; w2 at nx = 16 1.07× faster, w1 level), and the call
 * size from which it runs (fewer rows: the integer tiles, tuned for decode) */
#define FP4_FNX 16
#define FP4_FRB 16
#define FP4_KCP 8
#ifdef FP4_BF16
#define FP4_F_FROM 4 /* bf16 passes from 4 rows: 1.03-1.3x the integer tiles at 4-7 rows */
#else
#define FP4_F_FROM 8
#endif
#define FP4_F32_FROM 8 /* fp32 passes from 8 rows (at 4-7 the integer tiles are 1.1-1.4x) */
/* segments ahead that the block tiles prefetch (fp4_seg_ahead; 1-6 measured alike) */
#define FP4_PF_AHEAD 2
#else
#define FP4_HAS_Z 0
#endif

enum { FP4_Q16, FP4_Q18, FP4_INEXACT };

/* one prepared activation row */
struct fp4_x {
    const int16_t *q;   /* [blocks][64] */
    const int32_t *eo;  /* [blocks]: c = 2^(S + eo − 127) */
    const uint8_t *cls; /* [blocks] */
    int inexact;
    int all16;          /* every block in the 16-bit class */
    int eo_lo, eo_hi;   /* the range of eo */
};

/* where block b's qA lies in a prepared row (qB 32, hiA 64, hiB 96 int16 further) */
INLINE int16_t *fp4_qat(int16_t *q, uint32_t b)
{
    return q + (size_t)(b >> 1) * FP4_QB + (b & 1) * 16;
}
INLINE const int16_t *fp4_qat_c(const int16_t *q, uint32_t b)
{
    return q + (size_t)(b >> 1) * FP4_QB + (b & 1) * 16;
}

/* the 16 int16 of a word vector in the decoded weights' order: cols 0-7 | 16-23
 * from v0 (cols 0-7) and v2 (16-23) at d; same for 8-15 | 24-31 at d + 32 */
INLINE void fp4_store_pair(int16_t *d, __m256i v0, __m256i v1, __m256i v2, __m256i v3)
{
    _mm256_storeu_si256((__m256i *)d, _mm256_permute4x64_epi64(_mm256_packs_epi32(v0, v2), 0xD8));
    _mm256_storeu_si256((__m256i *)(d + 32),
                        _mm256_permute4x64_epi64(_mm256_packs_epi32(v1, v3), 0xD8));
}

/* x·2^σ of 4 vectors as integers; whether all are exact */
INLINE int fp4_ints(const __m256 v[4], int sigma, __m256i q[4])
{
    const __m256 s = _mm256_castsi256_ps(_mm256_set1_epi32((sigma + 127) << 23));
    __m256 eq = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    for (int i = 0; i < 4; i++) {
        __m256 f = _mm256_mul_ps(v[i], s);
        q[i] = _mm256_cvttps_epi32(f);
        eq = _mm256_and_ps(eq, _mm256_cmp_ps(_mm256_cvtepi32_ps(q[i]), f, _CMP_EQ_OQ));
    }
    return _mm256_movemask_ps(eq) == 0xFF;
}

#if !FP4_HAS_Z
/*
 * The pair layout of an all-16-bit row (AVX2, fp4_tile_p), written into the pair's hi
 * area (unused in the 16-bit class): for blocks b (even, low 128 bits) and b + 1 (high),
 * XL0 = cols 0 8 2 10 4 12 6 14, XH0 = 1 9 3 11 5 13 7 15, XL1 = XL0 + 16, XH1 = XH0 + 16,
 * 16 int16 each. Dword k of XL0 and XH0 then holds the four columns of the definition's
 * lane k, of XL1 and XH1 those of lane k + 4, in the order that fp4_decode_p gives the
 * weights; a lone last block's odd half is zero.
 */
static void fp4_prep_pairs(int16_t *q, uint32_t blocks)
{
    for (uint32_t b = 0; b < ((blocks + 1) & ~1u); b++) {
        int16_t *d = q + (size_t)(b >> 1) * FP4_QB + 64 + (b & 1) * 8;
        __m256i l = _mm256_setzero_si256(), h = l;
        if (b < blocks) {
            const int16_t *s = fp4_qat(q, b);
            const __m256i qa = _mm256_loadu_si256((const __m256i *)s);        /* 0-7 | 16-23 */
            const __m256i qb = _mm256_loadu_si256((const __m256i *)(s + 32)); /* 8-15 | 24-31 */
            const __m256 lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(qa, qb));
            const __m256 hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(qa, qb));
            l = _mm256_castps_si256(_mm256_shuffle_ps(lo, hi, 0x88)); /* XL0 | XL1 */
            h = _mm256_castps_si256(_mm256_shuffle_ps(lo, hi, 0xDD)); /* XH0 | XH1 */
        }
        _mm_storeu_si128((__m128i *)d, _mm256_castsi256_si128(l));
        _mm_storeu_si128((__m128i *)(d + 16), _mm256_castsi256_si128(h));
        _mm_storeu_si128((__m128i *)(d + 32), _mm256_extracti128_si256(l, 1));
        _mm_storeu_si128((__m128i *)(d + 48), _mm256_extracti128_si256(h, 1));
    }
}
#endif

static void fp4_prep(const float *x, uint32_t blocks, int16_t *q, int32_t *eo, uint8_t *cls,
                     struct fp4_x *out)
{
    const __m256i abs = _mm256_set1_epi32(0x7FFFFFFF);
    out->q = q, out->eo = eo, out->cls = cls;
    out->inexact = 0;
    out->all16 = 1;
    out->eo_lo = INT32_MAX, out->eo_hi = INT32_MIN;
    for (uint32_t b = 0; b < blocks; b++) {
        __m256 v[4];
        __m256i mx = _mm256_setzero_si256();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + (size_t)b * 32 + i * 8);
            /* magnitudes compare as integers; NaN and inf land above 0x7F800000 */
            mx = _mm256_max_epi32(mx, _mm256_and_si256(_mm256_castps_si256(v[i]), abs));
        }
        __m128i m = _mm_max_epi32(_mm256_castsi256_si128(mx), _mm256_extracti128_si256(mx, 1));
        m = _mm_max_epi32(m, _mm_shuffle_epi32(m, 0x4E));
        m = _mm_max_epi32(m, _mm_shuffle_epi32(m, 0xB1));
        const uint32_t mb = (uint32_t)_mm_cvtsi128_si32(m);
        const int M = (int)(mb >> 23) - 127;
        int16_t *qb = fp4_qat(q, b);
        __m256i qi[4];
        uint8_t c = FP4_INEXACT;
        int e = 0;
        if (mb == 0) {
            /* all zero: any finite c will do */
            for (int i = 0; i < 4; i++)
                qi[i] = _mm256_setzero_si256();
            fp4_store_pair(qb, qi[0], qi[1], qi[2], qi[3]);
            c = FP4_Q16;
        } else if (mb >= 0x00800000u && M >= -110 && M <= 122) {
            /* M <= 122: |w·x| < 6·2^123, so no partial of the definition overflows (an
             * overflowing one is inf or NaN there, finite in integers) */
            if (fp4_ints(v, 14 - M, qi)) { /* |q| < 2^15 */
                fp4_store_pair(qb, qi[0], qi[1], qi[2], qi[3]);
                c = FP4_Q16, e = -9 - (14 - M);
            } else if (fp4_ints(v, 17 - M, qi)) { /* |q| < 2^18: q = hi·2^9 + lo */
                __m256i lo[4], hi[4];
                for (int i = 0; i < 4; i++) {
                    lo[i] = _mm256_and_si256(qi[i], _mm256_set1_epi32(511));
                    hi[i] = _mm256_srai_epi32(qi[i], 9);
                }
                fp4_store_pair(qb, lo[0], lo[1], lo[2], lo[3]);
                fp4_store_pair(qb + 64, hi[0], hi[1], hi[2], hi[3]);
                c = FP4_Q18, e = -1 - (17 - M);
            }
        }
        cls[b] = c;
        eo[b] = e;
        out->eo_lo = e < out->eo_lo ? e : out->eo_lo;
        out->eo_hi = e > out->eo_hi ? e : out->eo_hi;
        if (c == FP4_INEXACT)
            out->inexact = 1;
        if (c != FP4_Q16)
            out->all16 = 0;
    }
#if !FP4_HAS_Z
    if (out->all16)
        fp4_prep_pairs(q, blocks);
#endif
}

/* 32 codes of a block → doubled E2M1 values ·256 as int16: wA = cols 0-7 | 16-23,
 * wB = cols 8-15 | 24-31 */
INLINE void fp4_decode(const uint8_t *p, __m256i *wa, __m256i *wb)
{
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
    /* byte j → the 16-bit word lo(b_j) | hi(b_j) << 8: the 32 codes in column order */
    __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p));
    __m256i c = _mm256_and_si256(_mm256_or_si256(w, _mm256_slli_epi16(w, 4)),
                                 _mm256_set1_epi16(0x0F0F));
    __m256i v = _mm256_shuffle_epi8(table, c);
    *wa = _mm256_unpacklo_epi8(_mm256_setzero_si256(), v);
    *wb = _mm256_unpackhi_epi8(_mm256_setzero_si256(), v);
}

/* the 8 lane partials of one block as fp32 (exact): ·2^8 in the 16-bit class */
INLINE __m256 fp4_partial(__m256i wa, __m256i wb, const int16_t *qb, uint8_t cls)
{
    const __m256i *qv = (const __m256i *)qb;   /* qA, then qB, hiA, hiB 2 vectors apart */
    __m256i m = _mm256_add_epi32(_mm256_madd_epi16(wa, _mm256_loadu_si256(qv)),
                                 _mm256_madd_epi16(wb, _mm256_loadu_si256(qv + 2)));
    if (__builtin_expect(cls != FP4_Q16, 0)) {
        __m256i h = _mm256_add_epi32(_mm256_madd_epi16(wa, _mm256_loadu_si256(qv + 4)),
                                     _mm256_madd_epi16(wb, _mm256_loadu_si256(qv + 6)));
        m = _mm256_add_epi32(_mm256_slli_epi32(h, 1), _mm256_srai_epi32(m, 8));
    }
    return _mm256_cvtepi32_ps(m);
}

/* the block factors 2^(S + eo − 127) of blocks [b, b + n) (n <= 8) into c; the biased
 * exponents' range into lo/hi and the largest scale byte into sm (checked at the row's end) */
INLINE void fp4_factors(const uint8_t *s, const int32_t *eo, uint32_t n, float *c, __m256i *lo,
                        __m256i *hi, __m256i *sm)
{
    __m256i sv, e;
    if (n == 8) {
        sv = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)s));
        e = _mm256_add_epi32(sv, _mm256_loadu_si256((const __m256i *)eo));
    } else {
        int32_t st[8], et[8];
        for (uint32_t t = 0; t < 8; t++) {
            st[t] = t < n ? s[t] : 127;
            et[t] = t < n ? s[t] + eo[t] : 127;
        }
        sv = _mm256_loadu_si256((const __m256i *)st);
        e = _mm256_loadu_si256((const __m256i *)et);
    }
    *lo = _mm256_min_epi32(*lo, e);
    *hi = _mm256_max_epi32(*hi, e);
    *sm = _mm256_max_epi32(*sm, sv);
    _mm256_storeu_ps(c, _mm256_castsi256_ps(_mm256_slli_epi32(e, 23)));
}

INLINE int hmin8(__m256i v)
{
    __m128i m = _mm_min_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    m = _mm_min_epi32(m, _mm_shuffle_epi32(m, 0x4E));
    return _mm_cvtsi128_si32(_mm_min_epi32(m, _mm_shuffle_epi32(m, 0xB1)));
}

INLINE int hmax8(__m256i v)
{
    __m128i m = _mm_max_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    m = _mm_max_epi32(m, _mm_shuffle_epi32(m, 0x4E));
    return _mm_cvtsi128_si32(_mm_max_epi32(m, _mm_shuffle_epi32(m, 0xB1)));
}

/* whether every block factor of an (r, n) output was a normal fp32 and no scale NaN */
INLINE int fp4_ok(__m256i lo, __m256i hi, __m256i sm)
{
    return hmax8(sm) < 255 && hmin8(lo) >= 1 && hmax8(hi) <= 254;
}

/* block b (parity H) of R weight rows × NX activation rows into acc[r][n][H] */
INLINE void fp4_block(const int R, const int NX, const int H, const uint8_t *const wr[4],
                      const struct fp4_x *xp, uint32_t b, float cf[4][4][8], uint32_t t,
                      __m256 acc[4][4][2])
{
    for (int r = 0; r < R; r++) {
        __m256i wa, wb;
        fp4_decode(wr[r] + (size_t)b * 16, &wa, &wb);
        for (int n = 0; n < NX; n++) {
            __m256 p = fp4_partial(wa, wb, fp4_qat_c(xp[n].q, b), xp[n].cls[b]);
            acc[r][n][H] = _mm256_fmadd_ps(p, _mm256_broadcast_ss(&cf[r][n][t]), acc[r][n][H]);
        }
    }
}

/* a tile's weight rows and scales, and its (r, n) factor-range trackers emptied */
INLINE void fp4_tile_begin(const int R, const int NX, const struct dsv4_fp4_weight *w,
                           const uint32_t *rows, const uint8_t *wr[4], const uint8_t *sr[4],
                           __m256i lo[4][4], __m256i hi[4][4], __m256i sm[4][4])
{
    const uint32_t nb = w->cols / 32;
    for (int r = 0; r < R; r++) {
        wr[r] = w->w + (size_t)rows[r] * (w->cols / 2);
        sr[r] = w->scale + (size_t)rows[r] * nb;
        for (int n = 0; n < NX; n++) {
            lo[r][n] = _mm256_set1_epi32(INT32_MAX);
            hi[r][n] = sm[r][n] = _mm256_set1_epi32(INT32_MIN);
        }
    }
}

/* the block factors of blocks [b0, b0 + m) for every (r, n) of a tile */
INLINE void fp4_tile_factors(const int R, const int NX, const uint8_t *const sr[4],
                             const struct fp4_x *xp, uint32_t b0, uint32_t m, float cf[4][4][8],
                             __m256i lo[4][4], __m256i hi[4][4], __m256i sm[4][4])
{
    for (int r = 0; r < R; r++)
        for (int n = 0; n < NX; n++)
            fp4_factors(sr[r] + b0, xp[n].eo + b0, m, cf[r][n], &lo[r][n], &hi[r][n], &sm[r][n]);
}

/*
 * R weight rows from i0 × NX prepared activation rows, whole rows, accumulators in
 * registers; *ok cleared for an (r, n) whose block factors are not all normal fp32
 * (S = 0xFF included): those take the definition.
 */
INLINE void fp4_tile(const int R, const int NX, const struct dsv4_fp4_weight *w,
                     const uint32_t *rows, const struct fp4_x *xp, float *y, size_t ldy,
                     int ok[4][4])
{
    const uint32_t nb = w->cols / 32;
    const uint8_t *wr[4], *sr[4];
    __m256i lo[4][4], hi[4][4], sm[4][4];
    __m256 acc[4][4][2];
    fp4_tile_begin(R, NX, w, rows, wr, sr, lo, hi, sm);
    for (int r = 0; r < R; r++)
        for (int n = 0; n < NX; n++)
            acc[r][n][0] = acc[r][n][1] = _mm256_setzero_ps();
    for (uint32_t b0 = 0; b0 < nb; b0 += 8) {
        const uint32_t m = nb - b0 < 8 ? nb - b0 : 8;
        float cf[4][4][8] __attribute__((aligned(32)));
        fp4_tile_factors(R, NX, sr, xp, b0, m, cf, lo, hi, sm);
        uint32_t t = 0;
        for (; t + 2 <= m; t += 2) {
            fp4_block(R, NX, 0, wr, xp, b0 + t, cf, t, acc);
            fp4_block(R, NX, 1, wr, xp, b0 + t + 1, cf, t + 1, acc);
        }
        if (t < m)
            fp4_block(R, NX, 0, wr, xp, b0 + t, cf, t, acc);
    }
    for (int r = 0; r < R; r++)
        for (int n = 0; n < NX; n++) {
            ok[r][n] = fp4_ok(lo[r][n], hi[r][n], sm[r][n]);
            float a[16] __attribute__((aligned(32)));
            _mm256_store_ps(a, acc[r][n][0]);
            _mm256_store_ps(a + 8, acc[r][n][1]);
            y[(size_t)n * ldy + rows[r]] = dsv4_lane_reduce(a);
        }
}

/* whether every factor 2^(S + eo − 127) of a weight row (scales s, nb blocks) and an
 * activation row is a normal fp32 and no S is 0xFF, from the ranges of S and eo: a
 * sufficient test (a row that fails it takes the definition) */
static int fp4_ok_p(const uint8_t *s, uint32_t nb, const struct fp4_x *x)
{
    __m256i mn = _mm256_set1_epi8(-1), mx = _mm256_setzero_si256();
    uint32_t b = 0;
    for (; b + 32 <= nb; b += 32) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(s + b));
        mn = _mm256_min_epu8(mn, v);
        mx = _mm256_max_epu8(mx, v);
    }
    /* the 32 per-position minima and maxima folded to 8 each, then min and ~max as words
     * through one vphminposuw each */
    __m128i v = _mm_min_epu8(_mm256_castsi256_si128(mn), _mm256_extracti128_si256(mn, 1));
    __m128i u = _mm_max_epu8(_mm256_castsi256_si128(mx), _mm256_extracti128_si256(mx, 1));
    v = _mm_min_epu8(v, _mm_srli_si128(v, 8));
    u = _mm_max_epu8(u, _mm_srli_si128(u, 8));
    v = _mm_unpacklo_epi64(v, _mm_xor_si128(u, _mm_set1_epi8(-1)));
    v = _mm_min_epu8(v, _mm_srli_epi16(v, 8));
    v = _mm_and_si128(v, _mm_set1_epi16(0xFF));
    int lo = _mm_extract_epi16(_mm_minpos_epu16(_mm_unpacklo_epi64(v, v)), 0);
    int hi = 255 - _mm_extract_epi16(_mm_minpos_epu16(_mm_unpackhi_epi64(v, v)), 0);
    for (; b < nb; b++) {
        lo = s[b] < lo ? s[b] : lo;
        hi = s[b] > hi ? s[b] : hi;
    }
    return hi < 255 && lo + x->eo_lo >= 1 && hi + x->eo_hi <= 254;
}

#if !FP4_HAS_Z
/*
 * The 256-bit tile of all-16-bit activation rows (AVX2): two blocks per vector, block b
 * in the low 128 bits and b + 1 in the high, as the pair layout (fp4_prep_pairs). The
 * codes' bytes are first reordered 0 8 4 12 1 9 5 13 ... in each half (one vpshufb), so
 * that after the two nibble lookups the even bytes hold lanes 0-3 (columns base and
 * base + 8 side by side) and the odd bytes lanes 4-7: a shift or a mask then widens
 * them to the ·256 words of four vpmaddwd, whose dwords are the definition's lanes
 * (e = lanes 0-3 of both blocks, o = lanes 4-7). Per pair and weight row: 10 decode
 * operations, 3 of them shuffles, 4 vpmaddwd, 2 conversions, 2 fma and a factor insert,
 * against 2·(7 decode with 4 shuffles, one cross-lane, 2 vpmaddwd, a conversion, an fma,
 * a class test) in fp4_tile.
 */
INLINE void fp4_decode_p(__m256i raw, __m256i wt[4])
{
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
    const __m256i perm = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(0, 8, 4, 12, 1, 9, 5, 13, 2, 10, 6, 14, 3, 11, 7, 15));
    const __m256i nib = _mm256_set1_epi8(0x0F), odd = _mm256_set1_epi16(-256);
    const __m256i r = _mm256_shuffle_epi8(raw, perm);
    const __m256i lv = _mm256_shuffle_epi8(table, _mm256_and_si256(r, nib));
    const __m256i hv = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(r, 4), nib));
    wt[0] = _mm256_slli_epi16(lv, 8);     /* even bytes ·256, as XL0 */
    wt[1] = _mm256_slli_epi16(hv, 8);     /* XH0 */
    wt[2] = _mm256_and_si256(lv, odd);    /* odd bytes ·256, as XL1 */
    wt[3] = _mm256_and_si256(hv, odd);    /* XH1 */
}

/* pair p (blocks 2p, 2p + 1; raw: their 32 code bytes, the odd half zero for a lone
 * block) of R weight rows × NX rows: f[r][n] the pair's factors, 4 lanes each */
INLINE void fp4_pair_p(const int R, const int NX, const __m256i raw[4],
                       const int16_t *const xq[4], __m256 f[4][4], __m256 e[4][4],
                       __m256 o[4][4])
{
    for (int r = 0; r < R; r++) {
        __m256i wt[4];
        fp4_decode_p(raw[r], wt);
        for (int n = 0; n < NX; n++) {
            const __m256i *x = (const __m256i *)xq[n];
            const __m256i pe = _mm256_add_epi32(_mm256_madd_epi16(wt[0], _mm256_loadu_si256(x)),
                                                _mm256_madd_epi16(wt[1], _mm256_loadu_si256(x + 1)));
            const __m256i po = _mm256_add_epi32(_mm256_madd_epi16(wt[2], _mm256_loadu_si256(x + 2)),
                                                _mm256_madd_epi16(wt[3], _mm256_loadu_si256(x + 3)));
            e[r][n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pe), f[r][n], e[r][n]);
            o[r][n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(po), f[r][n], o[r][n]);
        }
    }
}

/* the block factors 2^(S + eo − 127) of blocks [b, b + n) (n <= 8) into c, unchecked
 * (the pair tile checks a row's ranges once: fp4_ok_p) */
INLINE void fp4_factors_p(const uint8_t *s, const int32_t *eo, uint32_t n, float *c)
{
    __m256i e;
    if (n == 8) {
        e = _mm256_add_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)s)),
                             _mm256_loadu_si256((const __m256i *)eo));
    } else {
        int32_t et[8];
        for (uint32_t t = 0; t < 8; t++)
            et[t] = t < n ? s[t] + eo[t] : 127;
        e = _mm256_loadu_si256((const __m256i *)et);
    }
    _mm256_storeu_ps(c, _mm256_castsi256_ps(_mm256_slli_epi32(e, 23)));
}

/* the codes and factors of pair t (blocks b0 + t, b0 + t + 1) of a chunk of a pair tile:
 * lone = 1 for a lone last block, whose odd half is zero (weights and factor) */
INLINE void fp4_load_p(const int R, const int NX, const uint8_t *const wr[4], uint32_t b0,
                       uint32_t t, int lone, float cf[4][4][8], __m256i raw[4], __m256 f[4][4])
{
    const uint32_t b = b0 + t;
    for (int r = 0; r < R; r++) {
        if (!lone)
            raw[r] = _mm256_loadu_si256((const __m256i *)(wr[r] + (size_t)b * 16));
        else
            raw[r] = _mm256_zextsi128_si256(
                _mm_loadu_si128((const __m128i *)(wr[r] + (size_t)b * 16)));
        for (int n = 0; n < NX; n++)
            f[r][n] = lone ? _mm256_zextps128_ps256(_mm_broadcast_ss(&cf[r][n][t]))
                           : _mm256_insertf128_ps(
                                 _mm256_castps128_ps256(_mm_broadcast_ss(&cf[r][n][t])),
                                 _mm_broadcast_ss(&cf[r][n][t + 1]), 1);
    }
}

INLINE void fp4_tile_p(const int R, const int NX, const struct dsv4_fp4_weight *w,
                       const uint32_t *rows, const struct fp4_x *xp, float *y, size_t ldy,
                       int ok[4][4])
{
    const uint32_t nb = w->cols / 32;
    const uint8_t *wr[4], *sr[4];
    __m256 e[4][4], o[4][4];
    for (int r = 0; r < R; r++) {
        wr[r] = w->w + (size_t)rows[r] * (w->cols / 2);
        sr[r] = w->scale + (size_t)rows[r] * nb;
    }
    for (int r = 0; r < R; r++)
        for (int n = 0; n < NX; n++)
            e[r][n] = o[r][n] = _mm256_setzero_ps();
    for (uint32_t b0 = 0; b0 < nb; b0 += 8) {
        const uint32_t m = nb - b0 < 8 ? nb - b0 : 8;
        float cf[4][4][8] __attribute__((aligned(32)));
        for (int r = 0; r < R; r++)
            for (int n = 0; n < NX; n++)
                fp4_factors_p(sr[r] + b0, xp[n].eo + b0, m, cf[r][n]);
        const int16_t *xq[4];
        __m256i raw[4];
        __m256 f[4][4];
        if (m == 8) { /* whole chunks apart, so their four pairs unroll */
#pragma GCC unroll 4
            for (uint32_t t = 0; t < 8; t += 2) {
                for (int n = 0; n < NX; n++)
                    xq[n] = xp[n].q + (size_t)((b0 + t) >> 1) * FP4_QB + 64;
                fp4_load_p(R, NX, wr, b0, t, 0, cf, raw, f);
                fp4_pair_p(R, NX, raw, xq, f, e, o);
            }
        } else {
            for (uint32_t t = 0; t < m; t += 2) {
                for (int n = 0; n < NX; n++)
                    xq[n] = xp[n].q + (size_t)((b0 + t) >> 1) * FP4_QB + 64;
                fp4_load_p(R, NX, wr, b0, t, t + 1 == m, cf, raw, f);
                fp4_pair_p(R, NX, raw, xq, f, e, o);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int n = 0; n < NX; n++) {
            ok[r][n] = fp4_ok_p(sr[r], nb, &xp[n]);
            /* the definition's lanes: 0-3 and 8-11 from e, 4-7 and 12-15 from o */
            float a[16] __attribute__((aligned(32)));
            _mm256_store_ps(a, _mm256_permute2f128_ps(e[r][n], o[r][n], 0x20));
            _mm256_store_ps(a + 8, _mm256_permute2f128_ps(e[r][n], o[r][n], 0x31));
            y[(size_t)n * ldy + rows[r]] = dsv4_lane_reduce(a);
        }
}
#endif

#ifdef FP4_ZMM
/*
 * 512-bit variant for activation rows whose blocks are all in the 16-bit class: two
 * blocks per vector, the even block's 8 lanes low, the odd block's high — exactly the
 * halves H = 0 and H = 1 of the 256-bit code, so one register holds the 16 lanes of an
 * (r, n) output and each pair costs two vpmaddwd, an add, a conversion, a permute of
 * the block factors and one fma (fp4_tile_z, below).
 */

/* the codes of blocks b, b + 1 (32 bytes): wa = [wa(b) | wa(b + 1)], wb likewise */
INLINE void fp4_decode2(const uint8_t *p, __m512i *wa, __m512i *wb)
{
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
    __m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)p));
    __m512i c = _mm512_and_si512(_mm512_or_si512(w, _mm512_slli_epi16(w, 4)),
                                 _mm512_set1_epi16(0x0F0F));
    __m512i v = _mm512_shuffle_epi8(table, c);
    *wa = _mm512_unpacklo_epi8(_mm512_setzero_si512(), v);
    *wb = _mm512_unpackhi_epi8(_mm512_setzero_si512(), v);
}

#ifdef FP4_VNNI
/*
 * The pair's decode and multiply-adds with AVX-512 VBMI and VNNI (the avx512bf16 twin:
 * Sapphire Rapids, Zen 4 and later): the same lanes and integers in fewer operations.
 * One vpermq spreads the pair's 32 code bytes so that each qword holds the 8 bytes its
 * output qword needs (even block in qwords 0-3, odd in 4-7); vpmultishiftqb moves each
 * column's nibble into the high byte of its word (bit offset 4·(col mod 16)); a
 * zero-masked vpermb looks it up in a
 * 64-entry table that repeats the 16 doubled E2M1 values (vpermb reads 6 index bits,
 * the two above the nibble are the next code's), zeroing the low bytes: the words are
 * the doubled values ·256, as fp4_decode2's. vpdpwssd then adds both halves' products
 * into the partial (exact, as vpmaddwd + vpaddd). 5 decode operations per pair where
 * fp4_decode2 takes 7, and 2 multiply-adds where vpmaddwd takes 3 with the add.
 */
INLINE void fp4_decode_v(const uint8_t *p, __m512i *wa, __m512i *wb)
{
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
    /* wa's words: cols 0-3 | 4-7 | 16-19 | 20-23 of each block (offsets in the qword of
     * bytes 0-7 or 8-15); wb's: the same + 8 columns */
    const __m512i ca = _mm512_set_epi64(0x1C1C181814141010ll, 0x0C0C080804040000ll,
                                        0x1C1C181814141010ll, 0x0C0C080804040000ll,
                                        0x1C1C181814141010ll, 0x0C0C080804040000ll,
                                        0x1C1C181814141010ll, 0x0C0C080804040000ll);
    const __m512i cb = _mm512_add_epi8(ca, _mm512_set1_epi8(32));
    const __m512i spread = _mm512_permutexvar_epi64(
        _mm512_setr_epi64(0, 0, 1, 1, 2, 2, 3, 3),
        _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p)));
    const __mmask64 hi = 0xAAAAAAAAAAAAAAAAull;
    *wa = _mm512_maskz_permutexvar_epi8(hi, _mm512_multishift_epi64_epi8(ca, spread), table);
    *wb = _mm512_maskz_permutexvar_epi8(hi, _mm512_multishift_epi64_epi8(cb, spread), table);
}
#endif

/*
 * The 512-bit tile. Chunks of 16 blocks: their factors 2^(S + eo − 127) as fp32 bits
 * in one vector per (r, n), unchecked (a row's ranges are checked once, fp4_ok_p, as
 * the AVX2 pair tile does; a row that fails takes the definition); pair t's lanes take
 * them with one vpermps (indices 2t in lanes 0-7, 2t + 1 in 8-15). Per pair and
 * output: the two multiply-adds, a conversion, that permute and one fma (the factors
 * were 8 floats stored per 8 blocks and tracked per output: 1.2-1.3x at one row).
 */
#ifdef FP4_VNNI
#define FP4_DECODE2 fp4_decode_v
#define FP4_MADD2(wa, qa, wb, qb) _mm512_dpwssd_epi32(_mm512_madd_epi16(wa, qa), wb, qb)
#else
#define FP4_DECODE2 fp4_decode2
#define FP4_MADD2(wa, qa, wb, qb)                                                              \
    _mm512_add_epi32(_mm512_madd_epi16(wa, qa), _mm512_madd_epi16(wb, qb))
#endif
INLINE void fp4_tile_z(const int R, const int NX, const struct dsv4_fp4_weight *w,
                       const uint32_t *rows, const struct fp4_x *xp, float *y, size_t ldy,
                       int ok[4][4])
{
    const uint32_t nb = w->cols / 32;
    const uint8_t *wr[4], *sr[4];
    __m512 acc[4][4];
    for (int r = 0; r < R; r++) {
        wr[r] = w->w + (size_t)rows[r] * (w->cols / 2);
        sr[r] = w->scale + (size_t)rows[r] * nb;
        for (int n = 0; n < NX; n++)
            acc[r][n] = _mm512_setzero_ps();
    }
    for (uint32_t b0 = 0; b0 < nb; b0 += 16) {
        const uint32_t m = nb - b0 < 16 ? nb - b0 : 16;
        const __mmask16 lm = (__mmask16)((1u << m) - 1);
        __m512 f[4][4];
        for (int r = 0; r < R; r++) {
            const __m512i sv = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(lm, sr[r] + b0));
            for (int n = 0; n < NX; n++)
                f[r][n] = _mm512_castsi512_ps(_mm512_slli_epi32(
                    _mm512_add_epi32(sv, _mm512_maskz_loadu_epi32(lm, xp[n].eo + b0)), 23));
        }
        __m512i idx = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi32(1), 1);
        uint32_t t = 0;
        for (; t + 2 <= m; t += 2) {
            __m512i qa[4], qb[4];
            for (int n = 0; n < NX; n++) {
                const int16_t *q = fp4_qat_c(xp[n].q, b0 + t);
                qa[n] = _mm512_loadu_si512((const void *)q);
                qb[n] = _mm512_loadu_si512((const void *)(q + 32));
            }
            for (int r = 0; r < R; r++) {
                __m512i wa, wb;
                FP4_DECODE2(wr[r] + (size_t)(b0 + t) * 16, &wa, &wb);
                for (int n = 0; n < NX; n++) {
                    const __m512i p = FP4_MADD2(wa, qa[n], wb, qb[n]);
                    acc[r][n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p),
                                                _mm512_permutexvar_ps(idx, f[r][n]), acc[r][n]);
                }
            }
            idx = _mm512_add_epi32(idx, _mm512_set1_epi32(2));
        }
        if (t < m) { /* an odd count: the last block is even, lanes 0-7 */
            for (int r = 0; r < R; r++) {
                __m256i wa, wb;
                fp4_decode(wr[r] + (size_t)(b0 + t) * 16, &wa, &wb);
                for (int n = 0; n < NX; n++) {
                    __m256 p = fp4_partial(wa, wb, fp4_qat_c(xp[n].q, b0 + t), FP4_Q16);
                    acc[r][n] = _mm512_mask3_fmadd_ps(_mm512_castps256_ps512(p),
                                                      _mm512_permutexvar_ps(idx, f[r][n]),
                                                      acc[r][n], 0x00FF);
                }
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int n = 0; n < NX; n++) {
            ok[r][n] = fp4_ok_p(sr[r], nb, &xp[n]);
            float a[16] __attribute__((aligned(64)));
            _mm512_store_ps(a, acc[r][n]);
            y[(size_t)n * ldy + rows[r]] = dsv4_lane_reduce(a);
        }
}
/*
 * Many activation rows (prefill, batches): the definition itself, vectorised along
 * its lanes, in fp32. For a pair of blocks, lane j (0-7: the even block, 8-15: the
 * odd one) of X_t holds the activation at column base_j + off_t (off = 0, 1, 8, 9),
 * and of W_t the decoded E2M1 weight there; then per lane P = W0·X0, fma(W1, X1, P),
 * fma(W2, X2, P), fma(W3, X3, P) and acc = fma(P, 2^(S − 127), acc) are exactly the
 * definition's operations in its order, so the result is its bits for any input (NaN,
 * inf, rows that are not QDQ'd): no class, range or factor check. The activation rows
 * are permuted into X once per call (fp4_xperm); a weight row's pair is decoded once
 * per tile (two byte shuffles, four 16-entry vpermps) and used by the NX rows, so an
 * (r, n) output costs five fp32 operations per 64 products, where the integer tile
 * (fp4_tile_z) needs six and its per-output factor work.
 */

/* 16 E2M1 codes → fp32: vpermps reads the low 4 bits of each index */
#define FP4_F32_TABLE                                                                              \
    _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f,  \
                   -2.0f, -3.0f, -4.0f, -6.0f)

/* the weights W0..W3 of a pair of blocks (p: the even block's 16 bytes, then the odd
 * one's; odd = 0: no odd block, its lanes decode as zero) */
INLINE void fp4_wdec_f(const uint8_t *p, int odd, __m512 wt[4])
{
    const __m512 table = FP4_F32_TABLE;
    const __m256i v = odd ? _mm256_loadu_si256((const __m256i *)p)
                          : _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p));
    /* per block: bytes 0-3, 8-11 (columns base_j and base_j + 1), then 4-7, 12-15 (+ 8, + 9) */
    const __m256i sh = _mm256_shuffle_epi8(
        v, _mm256_broadcastsi128_si256(
               _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15)));
    /* qwords even.lo, odd.lo | even.hi, odd.hi (the odd half of a lone block is zero) */
    const __m256i q = _mm256_permute4x64_epi64(odd ? sh : _mm256_and_si256(sh, _mm256_setr_epi64x(-1, -1, 0, 0)),
                                               0xD8);
    const __m512i c01 = _mm512_cvtepu8_epi32(_mm256_castsi256_si128(q));
    const __m512i c23 = _mm512_cvtepu8_epi32(_mm256_extracti128_si256(q, 1));
    wt[0] = _mm512_permutexvar_ps(c01, table);
    wt[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(c01, 4), table);
    wt[2] = _mm512_permutexvar_ps(c23, table);
    wt[3] = _mm512_permutexvar_ps(_mm512_srli_epi32(c23, 4), table);
}

/* the definition's scale 2^(S − 127) (0 → 2^-127, 0xFF → NaN) as fp32 bits */
INLINE int32_t fp4_sbits(uint8_t b)
{
    return b == 0 ? 0x00400000 : b == 0xFF ? 0x7FC00000 : (int32_t)b << 23;
}

/*
 * The layout of X: chunks of FP4_KCP pairs of blocks; in a chunk, row n's pairs lie
 * together (n·FP4_KCP·64 floats on), so a chunk of all the call's rows is one run of
 * memory that the tiles of a row block reuse from L1 (rows a whole K apart would share
 * a few L1 sets). A pair holds X0..X3 (16 floats each).
 */
INLINE float *fp4_xat(float *X, size_t np, uint32_t pair, size_t n)
{
    return X + (((size_t)(pair / FP4_KCP) * np + n) * FP4_KCP + pair % FP4_KCP) * 64;
}

/* activation row n of np permuted into X; a lone last block's odd lanes are zero */
static void fp4_xperm(const float *x, uint32_t nb, float *X, size_t np, size_t n)
{
    /* lane j < 8 of X_t: column 16·(j / 4) + 2·(j % 4) + off_t of the first source pair */
    static const int off[4] = {0, 1, 8, 9};
    for (uint32_t b = 0; b < nb; b += 2) {
        const float *e = x + (size_t)b * 32;
        const __m512 e0 = _mm512_loadu_ps(e), e1 = _mm512_loadu_ps(e + 16);
        const __m512 o0 = b + 1 < nb ? _mm512_loadu_ps(e + 32) : _mm512_setzero_ps();
        const __m512 o1 = b + 1 < nb ? _mm512_loadu_ps(e + 48) : _mm512_setzero_ps();
        float *d = fp4_xat(X, np, b / 2, n);
        for (int t = 0; t < 4; t++) {
            const int o = off[t];
            const __m512i idx = _mm512_setr_epi32(o, 2 + o, 4 + o, 6 + o, 16 + o, 18 + o, 20 + o,
                                                  22 + o, o, 2 + o, 4 + o, 6 + o, 16 + o, 18 + o,
                                                  20 + o, 22 + o);
            const __m512 a = _mm512_permutex2var_ps(e0, idx, e1);
            const __m512 c = _mm512_permutex2var_ps(o0, idx, o1);
            _mm512_store_ps(d + t * 16, _mm512_shuffle_f32x4(a, c, 0x44));
        }
    }
}

/*
 * The block tiles walk the weights in segments (chunk c0, row r): a chunk's pairs of one
 * row, the rows in turn, then the next chunk. The hardware prefetchers do not follow that
 * walk: a 12-row bf16 call at 16 pairs a chunk spent a third of its time waiting for the
 * first load of each pair (perf, 2026-12-05). So each segment prefetches the segment
 * FP4_PF_AHEAD on in the walk: its scales here, its weights a pair's 32 bytes per pair by the
 * caller (w1 at 12 rows: 1.75 → 1.08 ms). Returns the segment's weights, or NULL past the
 * last segment.
 */
INLINE const uint8_t *fp4_seg_ahead(const struct dsv4_fp4_weight *w, uint32_t r0, uint32_t nr,
                                    uint32_t c0, uint32_t r, uint32_t kcp, uint32_t npair)
{
    const uint32_t ra = (r + FP4_PF_AHEAD) % nr, ca = c0 + (r + FP4_PF_AHEAD) / nr * kcp;
    if (ca >= npair)
        return NULL;
    _mm_prefetch((const char *)(w->scale + (size_t)(r0 + ra) * (w->cols / 32) + 2 * (size_t)ca),
                 _MM_HINT_T0);
    return w->w + (size_t)(r0 + ra) * (w->cols / 2) + (size_t)ca * 32;
}

/* y of a block tile's nr weight rows × NX activation rows from their lane accumulators:
 * 8 weight rows at once (lane_reduce8, the definition's fold, results stored together) */
INLINE void fp4_block_fold(__m512 accm[FP4_FRB][FP4_FNX], uint32_t nr, int NX, float *y,
                           size_t ldy, uint32_t r0)
{
    for (int n = 0; n < NX; n++) {
        float *yn = y + (size_t)n * ldy + r0;
        uint32_t r = 0;
        for (; r + 8 <= nr; r += 8)
            lane_reduce8((const float *)&accm[r][n], FP4_FNX * 16, yn + r);
        for (; r < nr; r++) {
            float a[16] __attribute__((aligned(64)));
            _mm512_store_ps(a, accm[r][n]);
            yn[r] = dsv4_lane_reduce(a);
        }
    }
}

/*
 * Weight rows [r0, r1) (at most FP4_FRB) × NX permuted rows (np in X), along K chunk by
 * chunk: per weight row the chunk's pairs are decoded once for the NX rows, the NX
 * accumulators live in registers over the chunk and in acc between chunks, and the
 * chunk of X stays in L1 for the whole row block.
 */
INLINE void fp4_block_f(const int NX, const struct dsv4_fp4_weight *w, uint32_t r0, uint32_t r1,
                        const float *X, size_t np, float *y, size_t ldy)
{
    const uint32_t nb = w->cols / 32, npair = (nb + 1) / 2;
    __m512 accm[FP4_FRB][FP4_FNX];
    for (uint32_t r = 0; r < r1 - r0; r++)
        for (int n = 0; n < NX; n++)
            accm[r][n] = _mm512_setzero_ps();
    for (uint32_t c0 = 0; c0 < npair; c0 += FP4_KCP) {
        const uint32_t c1 = npair - c0 < FP4_KCP ? npair : c0 + FP4_KCP;
        const float *Xc = X + (size_t)c0 * np * 64;
        for (uint32_t r = 0; r < r1 - r0; r++) {
            const uint8_t *wr = w->w + (size_t)(r0 + r) * (w->cols / 2);
            const uint8_t *sr = w->scale + (size_t)(r0 + r) * nb;
            const uint8_t *pfw = fp4_seg_ahead(w, r0, r1 - r0, c0, r, FP4_KCP, npair);
            __m512 acc[FP4_FNX];
            for (int n = 0; n < NX; n++)
                acc[n] = accm[r][n];
            /* c1 > c0: a loop that may run zero times made GCC keep acc in a stack array */
            uint32_t pr = c0;
            do {
                const uint32_t b = 2 * pr;
                const int odd = b + 1 < nb;
                /* a lone last block adds lanes 0-7 only; one masked fma either way (a
                 * branch there made GCC compute all NX partials first: spills at 16) */
                const __mmask16 om = odd ? 0xFFFF : 0x00FF;
                if (pfw)
                    _mm_prefetch((const char *)(pfw + (size_t)(pr - c0) * 32), _MM_HINT_T0);
                __m512 wt[4];
                fp4_wdec_f(wr + (size_t)b * 16, odd, wt);
                const __m512 ws = _mm512_castsi512_ps(
                    _mm512_inserti64x4(_mm512_set1_epi32(fp4_sbits(sr[b])),
                                       _mm256_set1_epi32(odd ? fp4_sbits(sr[b + 1]) : 0), 1));
                const float *xb = Xc + (size_t)(pr - c0) * 64;
                for (int n = 0; n < NX; n++) {
                    const float *xn = xb + (size_t)n * FP4_KCP * 64;
                    __m512 p = _mm512_mul_ps(wt[0], _mm512_load_ps(xn));
                    p = _mm512_fmadd_ps(wt[1], _mm512_load_ps(xn + 16), p);
                    p = _mm512_fmadd_ps(wt[2], _mm512_load_ps(xn + 32), p);
                    p = _mm512_fmadd_ps(wt[3], _mm512_load_ps(xn + 48), p);
                    acc[n] = _mm512_mask3_fmadd_ps(p, ws, acc[n], om);
                }
            } while (++pr < c1);
            for (int n = 0; n < NX; n++)
                accm[r][n] = acc[n];
        }
    }
    fp4_block_fold(accm, r1 - r0, NX, y, ldy, r0);
}

#ifdef FP4_BF16
/*
 * Many rows with AVX512-BF16 (the avx512bf16 twin): the definition's partial P of a
 * lane is the exact four-term dot whenever the activations are FP8-QDQ'd (see the
 * integer path above), so any order of its four products gives its bits, including
 * vdpbf16ps's two products per step. Rows are taken this way only when every block
 * satisfies what that proof needs: each x is exact in bf16 (low 16 bits zero), the
 * block's x are integers at 18 bits after the scaling 2^(17 − M) (M: the exponent of
 * its largest magnitude), and -108 <= M <= 122: every nonzero x is then a multiple of
 * 2^(M − 17) and every product and partial a multiple of 2^(M − 18) >= 2^-126, so none
 * is subnormal (vdpbf16ps flushes those to zero), and none overflows in any order. Then per pair and output:
 * P = dpbf16(dpbf16(+0, Wa, Xa), Wb, Xb) (Wa, Xa: lane j's columns base_j, base_j + 1;
 * Wb, Xb: + 8, + 9) and acc = fma(P, 2^(S − 127), acc) as in fp4_block_f: 3 operations
 * per 64 products where the fp32 path needs 5, and half the bytes of X. P may be a
 * zero of another sign than the definition's; acc starts at +0 and adding either zero
 * leaves it unchanged, so the outputs are the same bits. Any other row (not QDQ'd,
 * tests' raw x, NaN, inf) keeps the fp32 path.
 */
#define FP4_KCPB 16 /* pairs per chunk of K: 16 rows × 16 pairs × 128 bytes = 32 KiB */

/* the bf16 X of pair `pair`, row n: 64 bf16 (Xa, Xb), the np rows of a pair together,
 * so a tile's loads walk the chunk in order */
INLINE uint16_t *fp4_xbat(uint16_t *X, size_t np, uint32_t pair, size_t n)
{
    return X + ((size_t)pair * np + n) * 64;
}

/* whether a block (32 x in v0, v1) meets the conditions above */
INLINE int fp4_bf16_block_ok(__m512 v0, __m512 v1)
{
    const __m512i b0 = _mm512_castps_si512(v0), b1 = _mm512_castps_si512(v1);
    const __m512i lo = _mm512_set1_epi32(0xFFFF), abs = _mm512_set1_epi32(0x7FFFFFFF);
    if (_mm512_test_epi32_mask(b0, lo) | _mm512_test_epi32_mask(b1, lo))
        return 0;
    const uint32_t mb = (uint32_t)_mm512_reduce_max_epi32(
        _mm512_max_epi32(_mm512_and_si512(b0, abs), _mm512_and_si512(b1, abs)));
    if (mb == 0)
        return 1;
    const int M = (int)(mb >> 23) - 127;
    if (mb >= 0x7F800000u || M < -108 || M > 122)
        return 0;
    const __m512 s = _mm512_castsi512_ps(_mm512_set1_epi32((17 - M + 127) << 23));
    const __m512 f0 = _mm512_mul_ps(v0, s), f1 = _mm512_mul_ps(v1, s);
    return _mm512_cmp_ps_mask(_mm512_roundscale_ps(f0, _MM_FROUND_TO_ZERO), f0, _CMP_NEQ_UQ) ==
               0 &&
           _mm512_cmp_ps_mask(_mm512_roundscale_ps(f1, _MM_FROUND_TO_ZERO), f1, _CMP_NEQ_UQ) == 0;
}

/* activation row n of np into the bf16 X; 0 when a block does not qualify */
static int fp4_xprep_b(const float *x, uint32_t nb, uint16_t *X, size_t np, size_t n)
{
    const __m512i ia = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    const __m512i ib = _mm512_add_epi32(ia, _mm512_set1_epi32(8));
    for (uint32_t b = 0; b < nb; b += 2) {
        const float *e = x + (size_t)b * 32;
        const __m512 e0 = _mm512_loadu_ps(e), e1 = _mm512_loadu_ps(e + 16);
        const __m512 o0 = b + 1 < nb ? _mm512_loadu_ps(e + 32) : _mm512_setzero_ps();
        const __m512 o1 = b + 1 < nb ? _mm512_loadu_ps(e + 48) : _mm512_setzero_ps();
        if (!fp4_bf16_block_ok(e0, e1) || !fp4_bf16_block_ok(o0, o1))
            return 0;
        uint16_t *d = fp4_xbat(X, np, b / 2, n);
        /* 32 bf16: the even block's columns low, the odd block's high */
        _mm512_store_si512((void *)d, (__m512i)_mm512_cvtne2ps_pbh(
                                          _mm512_permutex2var_ps(o0, ia, o1),
                                          _mm512_permutex2var_ps(e0, ia, e1)));
        _mm512_store_si512((void *)(d + 32), (__m512i)_mm512_cvtne2ps_pbh(
                                                 _mm512_permutex2var_ps(o0, ib, o1),
                                                 _mm512_permutex2var_ps(e0, ib, e1)));
    }
    return 1;
}

/* Wa, Wb of a pair as bf16 (odd = 0: no odd block, its lanes +0): fp4_decode_v's spread
 * and nibble fields, looked up in a 32-word table (the 16 E2M1 values twice: vpermw
 * reads 5 index bits) */
INLINE void fp4_wdec_b(const uint8_t *p, int odd, __m512i *wa, __m512i *wb)
{
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_setr_epi16(0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0));
    const __m512i ntable = _mm512_or_si512(table, _mm512_set1_epi16((short)0x8000));
    const __m512i tab = _mm512_mask_blend_epi64(0xCC, table, ntable); /* + | − | + | − */
    const __m512i ca = _mm512_set_epi64(0x1C1C181814141010ll, 0x0C0C080804040000ll,
                                        0x1C1C181814141010ll, 0x0C0C080804040000ll,
                                        0x1C1C181814141010ll, 0x0C0C080804040000ll,
                                        0x1C1C181814141010ll, 0x0C0C080804040000ll);
    const __m512i cb = _mm512_add_epi8(ca, _mm512_set1_epi8(32));
    const __m256i raw = odd ? _mm256_loadu_si256((const __m256i *)p)
                            : _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)p));
    const __m512i spread =
        _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 0, 1, 1, 2, 2, 3, 3),
                                 _mm512_castsi256_si512(raw));
    *wa = _mm512_permutexvar_epi16(_mm512_multishift_epi64_epi8(ca, spread), tab);
    *wb = _mm512_permutexvar_epi16(_mm512_multishift_epi64_epi8(cb, spread), tab);
}

/* fp4_block_f over the bf16 X */
INLINE void fp4_block_b(const int NX, const struct dsv4_fp4_weight *w, uint32_t r0, uint32_t r1,
                        const uint16_t *X, size_t np, float *y, size_t ldy)
{
    const uint32_t nb = w->cols / 32, npair = (nb + 1) / 2;
    __m512 accm[FP4_FRB][FP4_FNX];
    for (uint32_t r = 0; r < r1 - r0; r++)
        for (int n = 0; n < NX; n++)
            accm[r][n] = _mm512_setzero_ps();
    for (uint32_t c0 = 0; c0 < npair; c0 += FP4_KCPB) {
        const uint32_t c1 = npair - c0 < FP4_KCPB ? npair : c0 + FP4_KCPB;
        const uint16_t *Xc = X + (size_t)c0 * np * 64;
        for (uint32_t r = 0; r < r1 - r0; r++) {
            const uint8_t *wr = w->w + (size_t)(r0 + r) * (w->cols / 2);
            const uint8_t *sr = w->scale + (size_t)(r0 + r) * nb;
            const uint8_t *pfw = fp4_seg_ahead(w, r0, r1 - r0, c0, r, FP4_KCPB, npair);
            __m512 acc[FP4_FNX];
            for (int n = 0; n < NX; n++)
                acc[n] = accm[r][n];
            uint32_t pr = c0;
            do {
                const uint32_t b = 2 * pr;
                const int odd = b + 1 < nb;
                /* a lone last block adds lanes 0-7 only; one masked fma either way (a
                 * branch there made GCC compute all NX partials first: spills at 16) */
                const __mmask16 om = odd ? 0xFFFF : 0x00FF;
                if (pfw)
                    _mm_prefetch((const char *)(pfw + (size_t)(pr - c0) * 32), _MM_HINT_T0);
                __m512i wa, wb;
                fp4_wdec_b(wr + (size_t)b * 16, odd, &wa, &wb);
                const __m512 ws = _mm512_castsi512_ps(
                    _mm512_inserti64x4(_mm512_set1_epi32(fp4_sbits(sr[b])),
                                       _mm256_set1_epi32(odd ? fp4_sbits(sr[b + 1]) : 0), 1));
                const uint16_t *xb = Xc + (size_t)(pr - c0) * np * 64;
                for (int n = 0; n < NX; n++) {
                    const uint16_t *xn = xb + (size_t)n * 64;
                    /* P from +0 by a zeroing idiom (renamed, no execution port): GCC
                     * copied one zero register into every P (1-2 % at 12 rows) */
                    __m512 p;
                    __asm__ volatile("vpxord %0, %0, %0" : "=v"(p));
                    p = _mm512_dpbf16_ps(p, (__m512bh)wa,
                                                (__m512bh)_mm512_load_si512((const void *)xn));
                    p = _mm512_dpbf16_ps(p, (__m512bh)wb,
                                         (__m512bh)_mm512_load_si512((const void *)(xn + 32)));
                    acc[n] = _mm512_mask3_fmadd_ps(p, ws, acc[n], om);
                }
            } while (++pr < c1);
            for (int n = 0; n < NX; n++)
                accm[r][n] = acc[n];
        }
    }
    fp4_block_fold(accm, r1 - r0, NX, y, ldy, r0);
}
#endif

/* the float path for nx ≥ FP4_F_FROM rows: permuted in passes of near-equal size, at most
 * FP4_NXP rows (so 8 to 16 rows: nx ÷ ⌈nx / 16⌉ ≥ 8, or one pass of 4-7), each pass one
 * row-block tile of exactly its rows (until 2026-12-05 passes of 16 and a remainder, padded
 * to 4, 8, 12 or 16 rows: 17 rows cost 16 + 4); returns 0 without memory, or for fewer than
 * FP4_F32_FROM rows that are not all bf16-exact (the caller runs the integer path) */
#define FP4_BLOCK_NG(F, ng, w, r0, r1, X, np, yb, ld)                                              \
    do {                                                                                           \
        switch (ng) {                                                                              \
        case 4: F(4, w, r0, r1, X, np, yb, ld); break;                                        \
        case 5: F(5, w, r0, r1, X, np, yb, ld); break;                                        \
        case 6: F(6, w, r0, r1, X, np, yb, ld); break;                                        \
        case 7: F(7, w, r0, r1, X, np, yb, ld); break;                                        \
        case 8: F(8, w, r0, r1, X, np, yb, ld); break;                                        \
        case 9: F(9, w, r0, r1, X, np, yb, ld); break;                                        \
        case 10: F(10, w, r0, r1, X, np, yb, ld); break;                                      \
        case 11: F(11, w, r0, r1, X, np, yb, ld); break;                                      \
        case 12: F(12, w, r0, r1, X, np, yb, ld); break;                                      \
        case 13: F(13, w, r0, r1, X, np, yb, ld); break;                                      \
        case 14: F(14, w, r0, r1, X, np, yb, ld); break;                                      \
        case 15: F(15, w, r0, r1, X, np, yb, ld); break;                                      \
        default: F(16, w, r0, r1, X, np, yb, ld); break;                                      \
        }                                                                                          \
    } while (0)
_Static_assert(FP4_F_FROM >= 4 && FP4_F32_FROM == 8 && FP4_NXP == 16 && FP4_FNX == 16,
               "fp4_matvec_f's tile sizes");

static int fp4_matvec_f(const struct dsv4_fp4_weight *w, const float *x, size_t nx, float *y,
                        size_t ldy, uint32_t row_begin, uint32_t row_end)
{
    const uint32_t nb = w->cols / 32, npair = (nb + 1) / 2;
    const size_t nchunk = (npair + FP4_KCP - 1) / FP4_KCP;
    const size_t np = FP4_NXP;
    float *X = aligned_alloc(64, nchunk * np * FP4_KCP * 64 * sizeof(float));
#ifdef FP4_BF16
    const size_t nchunkb = (npair + FP4_KCPB - 1) / FP4_KCPB;
    uint16_t *Xb = aligned_alloc(64, nchunkb * np * FP4_KCPB * 64 * sizeof(uint16_t));
#else
    uint16_t *Xb = NULL;
#endif
    if (!X || nx < FP4_F_FROM) {
        free(X);
        free(Xb);
        return 0;
    }
    const size_t passes = (nx + FP4_NXP - 1) / FP4_NXP;
    for (size_t pi = 0, n0 = 0; pi < passes; pi++) {
        /* pass pi takes ⌊nx / passes⌋ rows, one more while the remainder lasts */
        const size_t nc = nx / passes + (pi < nx % passes);
        /* the pass in bf16 when every row qualifies, else in fp32 */
        int bf = Xb != NULL;
#ifdef FP4_BF16
        for (size_t n = 0; bf && n < nc; n++)
            bf = fp4_xprep_b(x + (n0 + n) * w->cols, nb, Xb, np, n);
#endif
        if (!bf && nx < FP4_F32_FROM) { /* one pass, nothing written yet */
            free(X);
            free(Xb);
            return 0;
        }
        for (size_t n = 0; !bf && n < nc; n++)
            fp4_xperm(x + (n0 + n) * w->cols, nb, X, np, n);
        for (uint32_t r0 = row_begin; r0 < row_end; r0 += FP4_FRB) {
            const uint32_t r1 = row_end - r0 < FP4_FRB ? row_end : r0 + FP4_FRB;
            float *yb = y + n0 * ldy;
#ifdef FP4_BF16
            if (bf)
                FP4_BLOCK_NG(fp4_block_b, nc, w, r0, r1, Xb, np, yb, ldy);
            else
#endif
                FP4_BLOCK_NG(fp4_block_f, nc, w, r0, r1, X, np, yb, ldy);
        }
        n0 += nc;
    }
    free(X);
    free(Xb);
    return 1;
}

#define FP4_TILE(Z, R, NX, w, rows, xp, y, ldy, ok)                                          \
    ((Z) ? fp4_tile_z(R, NX, w, rows, xp, y, ldy, ok) : fp4_tile(R, NX, w, rows, xp, y, ldy, ok))
#else
#define FP4_TILE(Z, R, NX, w, rows, xp, y, ldy, ok)                                          \
    ((Z) ? fp4_tile_p(R, NX, w, rows, xp, y, ldy, ok) : fp4_tile(R, NX, w, rows, xp, y, ldy, ok))
#endif

/* rows [row_begin, row_end) for NX prepared activation rows; a tile's R rows lie a
 * quarter of the range apart, so the weights stream from R places at once (one
 * sequential stream left the one-row call at about a third of the read ceiling) */
INLINE void fp4_rows(const int Z, const int R, const int NX, const struct dsv4_fp4_weight *w,
                     const struct fp4_x *xp, const float *x, float *y, size_t ldy,
                     uint32_t row_begin, uint32_t row_end)
{
    const uint32_t q = (row_end - row_begin) / (uint32_t)R;
    int ok[4][4];
    uint32_t rows[4];
    for (uint32_t t = 0; t < q + (row_end - row_begin) % (uint32_t)R; t++) {
        const int full = t < q;
        for (int r = 0; r < R; r++)
            rows[r] = full ? row_begin + (uint32_t)r * q + t : row_begin + (uint32_t)R * q + (t - q);
        if (full)
            FP4_TILE(Z, R, NX, w, rows, xp, y, ldy, ok);
        else
            FP4_TILE(Z, 1, NX, w, rows, xp, y, ldy, ok);
        for (int r = 0; r < (full ? R : 1); r++)
            for (int n = 0; n < NX; n++)
                if (!ok[r][n])
                    dsv4_kernel_ops_scalar.matvec_fp4(w, x + (size_t)n * w->cols, 1,
                                                      y + (size_t)n * ldy, ldy, rows[r],
                                                      rows[r] + 1);
    }
}

static void matvec_fp4_simd(const struct dsv4_fp4_weight *w, const float *x, size_t nx, float *y,
                            size_t ldy, uint32_t row_begin, uint32_t row_end)
{
    const uint32_t nb = w->cols / 32;
    /* one prepared row: q (int16, room for an even number of blocks), eo (int32), cls
     * (bytes); rows 64-byte apart so every row's eo array stays aligned whatever nb is */
    const size_t qbytes = (size_t)((nb + 1) & ~1u) * FP4_QB;
    const size_t per = (qbytes + (size_t)nb * (sizeof(int32_t) + 1) + 63) & ~(size_t)63;
    const size_t np = nx < FP4_NXP ? nx : FP4_NXP;
    if (row_end <= row_begin || nx == 0)
        return;
#ifdef FP4_ZMM
    if (nx >= FP4_F_FROM && nb && fp4_matvec_f(w, x, nx, y, ldy, row_begin, row_end))
        return;
#endif
    uint8_t *buf = nb ? malloc(np * per) : NULL;
    if (!buf) { /* nothing to prepare, or no memory: the definition */
        dsv4_kernel_ops_scalar.matvec_fp4(w, x, nx, y, ldy, row_begin, row_end);
        return;
    }
    for (size_t n0 = 0; n0 < nx; n0 += FP4_NXP) {
        const size_t nc = nx - n0 < FP4_NXP ? nx - n0 : FP4_NXP;
        /* activation rows that are not integers at 18 bits take the definition;
         * the others are gathered into xp */
        struct fp4_x xp[FP4_NXP];
        size_t idx[FP4_NXP], nq = 0;
        for (size_t n = 0; n < nc; n++) {
            uint8_t *p = buf + n * per;
            const float *xr = x + (n0 + n) * w->cols;
            fp4_prep(xr, nb, (int16_t *)(void *)p, (int32_t *)(void *)(p + qbytes),
                     p + qbytes + (size_t)nb * sizeof(int32_t), &xp[nq]);
            if (xp[nq].inexact)
                dsv4_kernel_ops_scalar.matvec_fp4(w, xr, 1, y + (n0 + n) * ldy, ldy, row_begin,
                                                  row_end);
            else
                idx[nq++] = n0 + n;
        }
        /* groups of up to 4 rows; contiguous ones of one kind share a tile */
        for (size_t g = 0; g < nq;) {
            const int z = xp[g].all16;
            size_t k = 1;
            while (k < 4 && g + k < nq && idx[g + k] == idx[g] + k && xp[g + k].all16 == z)
                k++;
            const float *xg = x + idx[g] * w->cols;
            float *yg = y + idx[g] * ldy;
            if (z && !FP4_HAS_Z) { /* pair tiles: 2·R·NX accumulators of 16 registers */
                switch (k) {
                case 1: fp4_rows(1, 4, 1, w, xp + g, xg, yg, ldy, row_begin, row_end); break;
                case 2: fp4_rows(1, 2, 2, w, xp + g, xg, yg, ldy, row_begin, row_end); break;
                case 3: fp4_rows(1, 1, 3, w, xp + g, xg, yg, ldy, row_begin, row_end); break;
                default: fp4_rows(1, 1, 4, w, xp + g, xg, yg, ldy, row_begin, row_end); break;
                }
            } else if (z) {
                switch (k) {
                case 1: fp4_rows(1, 4, 1, w, xp + g, xg, yg, ldy, row_begin, row_end); break;
                case 2: fp4_rows(1, 4, 2, w, xp + g, xg, yg, ldy, row_begin, row_end); break;
                case 3: fp4_rows(1, 2, 3, w, xp + g, xg, yg, ldy, row_begin, row_end); break;
                default: fp4_rows(1, 2, 4, w, xp + g, xg, yg, ldy, row_begin, row_end); break;
                }
            } else {
                switch (k) {
                case 1: fp4_rows(0, 4, 1, w, xp + g, xg, yg, ldy, row_begin, row_end); break;
                case 2: fp4_rows(0, 2, 2, w, xp + g, xg, yg, ldy, row_begin, row_end); break;
                case 3: fp4_rows(0, 1, 3, w, xp + g, xg, yg, ldy, row_begin, row_end); break;
                default: fp4_rows(0, 1, 4, w, xp + g, xg, yg, ldy, row_begin, row_end); break;
                }
            }
            g += k;
        }
    }
    free(buf);
}
