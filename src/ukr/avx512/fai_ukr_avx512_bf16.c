/* QK and PV with AVX512_BF16 dot products, for bf16 Q and K (QK) and bf16 V (PV) (compiled
 * with -mavx512bf16 only here). vdpbf16ps multiplies bf16 pairs and accumulates in f32, twice
 * the rate of f32 FMAs, with exact products: for bf16 inputs QK equals the f32 path's up to
 * summation order.
 *
 * Layouts: Q^T is packed in pairs, q_pairs [d/2, ld_s, 2] (lane i of a vector holds
 * Q[i][2p], Q[i][2p+1]), so that one broadcast 32-bit pair of a K row feeds a whole vector of
 * query rows. K rows are read where they are (no packing): the pair K[j][2p..2p+1] is one 32-bit
 * load. d must be even. PV pairs keys instead (fai_ukr_avx512_bf16_pv.c).
 *
 * Decode (qk_rows_bf16) has a handful of query rows, too few for a vector of them: its lanes
 * pair head-dim elements instead, a K row's 32 elements a vector against the same 32 of a Q row,
 * summed across lanes at the end, as the f32 qk_rows does with 16. */
#include "ukr/fai_simd_avx512.h"
#include "ukr/fai_ukr.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define W 16
#define QK_KEYS 12

/* Whether each of d bf16 values from row is 0 or of magnitude in [FAI_BF16_DOT_Q_LOW,
 * FAI_BF16_DOT_HIGH) (fai_ukr.h): 32 values a comparison, the last ones under a mask. */
static int bf16_row_in_dot_range(const uint16_t *row, int64_t d) {
    const __m512i low = _mm512_set1_epi16(FAI_BF16_DOT_Q_LOW);
    const __m512i high = _mm512_set1_epi16(FAI_BF16_DOT_HIGH);
    const __m512i magnitude_bits = _mm512_set1_epi16(0x7fff);
    __mmask32 out = 0;
    for (int64_t x = 0; x < d; x += 32) {
        const __mmask32 valid =
            d - x >= 32 ? (__mmask32)~0u : (__mmask32)((UINT64_C(1) << (d - x)) - 1);
        const __m512i magnitude =
            _mm512_and_si512(_mm512_maskz_loadu_epi16(valid, row + x), magnitude_bits);
        out |= _mm512_mask_cmplt_epu16_mask(_mm512_test_epi16_mask(magnitude, magnitude), magnitude,
                                            low) |
               _mm512_cmpge_epu16_mask(magnitude, high);
    }
    return out == 0;
}

/* q_pairs [d/2, ld_s, 2] from m bf16 rows of d elements; columns [m, ld_s) zero. Returns 0 if a
 * value is out of the products' range. The range is checked along the rows, with whole vectors;
 * the transposition moves blocks of 16 rows x 16 pairs through registers (v_transpose16_u32), and
 * the edges one 32-bit pair at a time. */
static int pack_q_bf16_pairs(uint16_t *q_pairs, int64_t ld_s, const void *const *rows, int64_t m,
                             int64_t d) {
    int in_range = 1;
    for (int64_t i = 0; i < m; i++)
        in_range &= bf16_row_in_dot_range(rows[i], d);
    const int64_t pairs = d / 2, block_rows = m / 16 * 16, block_pairs = pairs / 16 * 16;
    uint32_t *out = (uint32_t *)(void *)q_pairs; /* pair p of row i at out[p * ld_s + i] */
    for (int64_t i0 = 0; i0 < block_rows; i0 += 16)
        for (int64_t p0 = 0; p0 < block_pairs; p0 += 16) {
            const void *block[16];
            for (int r = 0; r < 16; r++)
                block[r] = (const uint16_t *)rows[i0 + r] + 2 * p0;
            v_transpose16_u32(block, out + p0 * ld_s + i0, ld_s);
        }
    for (int64_t p = 0; p < pairs; p++)
        for (int64_t i = p < block_pairs ? block_rows : 0; i < ld_s; i++)
            if (i < m)
                memcpy(out + p * ld_s + i, (const uint16_t *)rows[i] + 2 * p, sizeof *out);
            else
                out[p * ld_s + i] = 0;
    return in_range;
}

static inline __m512bh broadcast_pair(const void *row, int64_t p) {
    uint32_t pair;
    memcpy(&pair, (const uint16_t *)row + 2 * p, sizeof pair);
    return (__m512bh)_mm512_set1_epi32((int)pair);
}

static inline __m512bh load_pairs(const uint16_t *q_pairs, int64_t ld_s, int64_t p, int64_t i0) {
    return (__m512bh)_mm512_loadu_si512(q_pairs + 2 * (p * ld_s + i0));
}

/* KEYS keys x VECS vectors of query rows, accumulated over the d/2 pairs in registers. */
#define DEFINE_QK_BF16_BLOCK(NAME, KEYS, VECS)                                                     \
    static inline void NAME(float *s_t, int64_t ld_s, const uint16_t *q_pairs, int64_t i0,         \
                            const void *const *k_rows, int64_t pairs, __m512 scale) {              \
        __m512 acc[KEYS][VECS];                                                                    \
        for (int r = 0; r < KEYS; r++)                                                             \
            for (int c = 0; c < VECS; c++)                                                         \
                acc[r][c] = _mm512_setzero_ps();                                                   \
        for (int64_t p = 0; p < pairs; p++) {                                                      \
            __m512bh q[VECS];                                                                      \
            for (int c = 0; c < VECS; c++)                                                         \
                q[c] = load_pairs(q_pairs, ld_s, p, i0 + c * W);                                   \
            for (int r = 0; r < KEYS; r++) {                                                       \
                const __m512bh key = broadcast_pair(k_rows[r], p);                                 \
                for (int c = 0; c < VECS; c++)                                                     \
                    acc[r][c] = _mm512_dpbf16_ps(acc[r][c], key, q[c]);                            \
            }                                                                                      \
        }                                                                                          \
        for (int r = 0; r < KEYS; r++)                                                             \
            for (int c = 0; c < VECS; c++)                                                         \
                _mm512_storeu_ps(s_t + r * ld_s + i0 + c * W, _mm512_mul_ps(acc[r][c], scale));    \
    }

/* 64 query rows x 6 keys first: 24 accumulators fed by 4 loads of Q pairs and 6 broadcasts per
 * pair, where 32 rows x 12 keys take 2 and 12 (QK alone in cache: 92 % of the bf16 peak on an AMD
 * Zen 4, against 86 %) */
DEFINE_QK_BF16_BLOCK(qk_bf16_quad, 6, 4)
DEFINE_QK_BF16_BLOCK(qk_bf16_quad_4keys, 4, 4)
DEFINE_QK_BF16_BLOCK(qk_bf16_quad_1key, 1, 4)
DEFINE_QK_BF16_BLOCK(qk_bf16_wide, QK_KEYS, 2)
DEFINE_QK_BF16_BLOCK(qk_bf16_wide_4keys, 4, 2)
DEFINE_QK_BF16_BLOCK(qk_bf16_wide_1key, 1, 2)
DEFINE_QK_BF16_BLOCK(qk_bf16_narrow, (2 * QK_KEYS), 1)
DEFINE_QK_BF16_BLOCK(qk_bf16_narrow_4keys, 4, 1)
DEFINE_QK_BF16_BLOCK(qk_bf16_narrow_1key, 1, 1)

/* s_t [n, ld_s] = scale * K Q^T for bf16 K rows and pair-packed bf16 Q^T. */
static void qk_bf16(float *s_t, int64_t ld_s, const uint16_t *q_pairs, const void *const *k_rows,
                    int64_t n, int64_t d, float scale) {
    const __m512 vscale = _mm512_set1_ps(scale);
    const int64_t pairs = d / 2;
    int64_t i0 = 0;
    for (; i0 + 4 * W <= ld_s; i0 += 4 * W) {
        int64_t j = 0;
        for (; j + 6 <= n; j += 6)
            qk_bf16_quad(s_t + j * ld_s, ld_s, q_pairs, i0, k_rows + j, pairs, vscale);
        for (; j + 4 <= n; j += 4)
            qk_bf16_quad_4keys(s_t + j * ld_s, ld_s, q_pairs, i0, k_rows + j, pairs, vscale);
        for (; j < n; j++)
            qk_bf16_quad_1key(s_t + j * ld_s, ld_s, q_pairs, i0, k_rows + j, pairs, vscale);
    }
    for (; i0 + 2 * W <= ld_s; i0 += 2 * W) {
        int64_t j = 0;
        for (; j + QK_KEYS <= n; j += QK_KEYS)
            qk_bf16_wide(s_t + j * ld_s, ld_s, q_pairs, i0, k_rows + j, pairs, vscale);
        for (; j + 4 <= n; j += 4)
            qk_bf16_wide_4keys(s_t + j * ld_s, ld_s, q_pairs, i0, k_rows + j, pairs, vscale);
        for (; j < n; j++)
            qk_bf16_wide_1key(s_t + j * ld_s, ld_s, q_pairs, i0, k_rows + j, pairs, vscale);
    }
    for (; i0 < ld_s; i0 += W) {
        int64_t j = 0;
        for (; j + 2 * QK_KEYS <= n; j += 2 * QK_KEYS)
            qk_bf16_narrow(s_t + j * ld_s, ld_s, q_pairs, i0, k_rows + j, pairs, vscale);
        for (; j + 4 <= n; j += 4)
            qk_bf16_narrow_4keys(s_t + j * ld_s, ld_s, q_pairs, i0, k_rows + j, pairs, vscale);
        for (; j < n; j++)
            qk_bf16_narrow_1key(s_t + j * ld_s, ld_s, q_pairs, i0, k_rows + j, pairs, vscale);
    }
}

/* Whether every value of m query rows (bf16 values in f32, rows of ld_q with zeros past d) is 0
 * or of magnitude in [FAI_BF16_DOT_Q_LOW, FAI_BF16_DOT_HIGH): as f32 bits, [2^-100, 2^80). */
static int q_rows_in_dot_range(const float *q, int64_t ld_q, int64_t m) {
    const __m512i low = _mm512_set1_epi32(FAI_BF16_DOT_Q_LOW << 16);
    const __m512i high = _mm512_set1_epi32(FAI_BF16_DOT_HIGH << 16);
    const __m512i magnitude_bits = _mm512_set1_epi32(0x7fffffff);
    __mmask16 out = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t x = 0; x < ld_q; x += W) {
            const __m512i magnitude = _mm512_and_si512(
                _mm512_castps_si512(_mm512_loadu_ps(q + i * ld_q + x)), magnitude_bits);
            out |= _mm512_mask_cmplt_epu32_mask(_mm512_test_epi32_mask(magnitude, magnitude),
                                                magnitude, low) |
                   _mm512_cmpge_epu32_mask(magnitude, high);
        }
    return out == 0;
}

/* Decode QK for bf16 Q and K: s [m, ld_n] = scale * q . k_rows^T, -inf in columns [n, ld_n),
 * as qk_rows (fai_ukr.h), or 0 without writing when a value of Q is out of the products' range. q
 * holds bf16 values in f32 (decode's Q tile), each exactly a bf16, so converting them back is
 * exact. Blocks of 16 accumulators of 32-element dot products, reduced at the end: 4 rows x 4
 * keys, or for the 1 or 2 rows a call has left (an MHA step, a GQA group of 2) 1 x 16 or 2 x 8,
 * so no accumulator repeats another row's work; the last pairs of a row are read under a mask
 * (nothing past d), and edge blocks repeat a valid row or key and store only the valid results. */
#define QK_ROWS_BLOCK 16
#define DEFINE_QK_ROWS_BF16(NAME, ROWS, KEYS)                                                      \
    static void NAME(float *s, int64_t ld_n, const float *q, int64_t ld_q, int64_t m,              \
                     const void *const *k_rows, int64_t rows_ahead, const fai_row_fetch *fetch,    \
                     int64_t n, int64_t d, float scale) {                                          \
        uint16_t q_bf16[ROWS][FAI_MAX_HEAD_DIM + 32];                                              \
        const int64_t ahead = fai__prefetch_ahead(2 * d);                                          \
        const int64_t full = d / 32 * 32;                                                          \
        const __mmask32 tail = (__mmask32)((UINT64_C(1) << (d - full)) - 1);                       \
        for (int64_t i0 = 0; i0 < m; i0 += ROWS) {                                                 \
            for (int r = 0; r < ROWS; r++) {                                                       \
                const float *row = q + (i0 + r < m ? i0 + r : i0) * ld_q;                          \
                for (int64_t x = 0; x < d; x += 32) { /* ld_q: d padded with zeros to 16 */        \
                    const __m512 high =                                                            \
                        x + 16 < ld_q ? _mm512_loadu_ps(row + x + 16) : _mm512_setzero_ps();       \
                    _mm512_storeu_si512(q_bf16[r] + x, (__m512i)_mm512_cvtne2ps_pbh(               \
                                                           high, _mm512_loadu_ps(row + x)));       \
                }                                                                                  \
            }                                                                                      \
            for (int64_t j0 = 0; j0 < n; j0 += KEYS) {                                             \
                const uint16_t *key[KEYS];                                                         \
                for (int c = 0; c < KEYS; c++)                                                     \
                    key[c] = k_rows[j0 + c < n ? j0 + c : j0];                                     \
                for (int c = 0; i0 == 0 && c < KEYS && j0 + ahead + c < n + rows_ahead; c++)       \
                    fai__prefetch_row(k_rows[j0 + ahead + c], 2 * d);                              \
                if (i0 == 0) fai__fetch_for_keys(fetch, j0, j0 + KEYS, n);                         \
                __m512 acc[QK_ROWS_BLOCK]; /* [row][key] */                                        \
                for (int a = 0; a < QK_ROWS_BLOCK; a++)                                            \
                    acc[a] = _mm512_setzero_ps();                                                  \
                for (int64_t x = 0; x < d; x += 32) {                                              \
                    __m512bh qv[ROWS];                                                             \
                    for (int r = 0; r < ROWS; r++)                                                 \
                        qv[r] = (__m512bh)_mm512_loadu_si512(q_bf16[r] + x);                       \
                    for (int c = 0; c < KEYS; c++) {                                               \
                        const __m512bh kv =                                                        \
                            (__m512bh)(x < full ? _mm512_loadu_si512(key[c] + x)                   \
                                                : _mm512_maskz_loadu_epi16(tail, key[c] + x));     \
                        for (int r = 0; r < ROWS; r++)                                             \
                            acc[r * KEYS + c] = _mm512_dpbf16_ps(acc[r * KEYS + c], qv[r], kv);    \
                    }                                                                              \
                }                                                                                  \
                float sums[QK_ROWS_BLOCK];                                                         \
                v_hsum16(acc, sums);                                                               \
                v_store(sums, v_mul(v_load(sums), v_set1(scale)));                                 \
                if (j0 + KEYS <= n && i0 + ROWS <= m) /* a row's keys follow each other */         \
                    for (int r = 0; r < ROWS; r++)                                                 \
                        memcpy(s + (i0 + r) * ld_n + j0, sums + r * KEYS, sizeof(float) * KEYS);   \
                else                                                                               \
                    for (int r = 0; r < ROWS && i0 + r < m; r++)                                   \
                        for (int c = 0; c < KEYS && j0 + c < n; c++)                               \
                            s[(i0 + r) * ld_n + j0 + c] = sums[r * KEYS + c];                      \
            }                                                                                      \
        }                                                                                          \
    }
DEFINE_QK_ROWS_BF16(qk_rows_bf16_4, 4, 4)
DEFINE_QK_ROWS_BF16(qk_rows_bf16_2, 2, 8)
DEFINE_QK_ROWS_BF16(qk_rows_bf16_1, 1, 16)

/* The rows split by fai__decode_rows_left; the padding keys masked. */
static int qk_rows_bf16(float *s, int64_t ld_n, const float *q, int64_t ld_q, int64_t m,
                        const void *const *k_rows, int64_t rows_ahead, const fai_row_fetch *fetch,
                        int64_t n, int64_t d, float scale) {
    if (!q_rows_in_dot_range(q, ld_q, m)) return 0;
    const int64_t left = fai__decode_rows_left(m), fours = m - left;
    if (fours > 0) qk_rows_bf16_4(s, ld_n, q, ld_q, fours, k_rows, rows_ahead, fetch, n, d, scale);
    /* the rows left: prefetched and fetched already when a 4-row pass ran */
    const int64_t left_ahead = fours > 0 ? 0 : rows_ahead;
    const fai_row_fetch *left_fetch = fours > 0 ? NULL : fetch;
    if (left == 2)
        qk_rows_bf16_2(s + fours * ld_n, ld_n, q + fours * ld_q, ld_q, 2, k_rows, left_ahead,
                       left_fetch, n, d, scale);
    else if (left == 1)
        qk_rows_bf16_1(s + fours * ld_n, ld_n, q + fours * ld_q, ld_q, 1, k_rows, left_ahead,
                       left_fetch, n, d, scale);
    for (int64_t i = 0; i < m; i++) /* the padding keys: masked */
        for (int64_t j = n; j < ld_n; j++)
            s[i * ld_n + j] = -INFINITY;
    return 1;
}

void fai__cntx_add_avx512_bf16(fai_cntx *cntx) {
    cntx->pack_q_bf16 = pack_q_bf16_pairs;
    cntx->qk_bf16 = qk_bf16;
    cntx->qk_rows_bf16 = qk_rows_bf16;
    fai__cntx_add_avx512_bf16_pv(cntx);
}
