/* QK and PV with AVX512_BF16 dot products, for bf16 Q and K (QK) and bf16 V (PV) (compiled
 * with -mavx512bf16 only here). vdpbf16ps multiplies bf16 pairs and accumulates in f32, twice
 * the rate of f32 FMAs, with exact products: for bf16 inputs QK equals the f32 path's up to
 * summation order.
 *
 * Layouts: Q^T is packed in pairs, q_pairs [d/2, ld_s, 2] (lane i of a vector holds
 * Q[i][2p], Q[i][2p+1]), so that one broadcast 32-bit pair of a K row feeds a whole vector of
 * query rows. K rows are read where they are (no packing): the pair K[j][2p..2p+1] is one 32-bit
 * load. d must be even. PV pairs keys instead (fai_ukr_avx512_bf16_pv.c). */
#include "ukr/fai_ukr.h"

#include <immintrin.h>
#include <string.h>

#define W 16
#define QK_KEYS 12

/* q_pairs [d/2, ld_s, 2] from m bf16 rows of d elements; columns [m, ld_s) zero. */
static void pack_q_bf16_pairs(uint16_t *q_pairs, int64_t ld_s, const void *const *rows, int64_t m,
                              int64_t d) {
    for (int64_t p = 0; p < d / 2; p++) {
        uint32_t *out = (uint32_t *)(q_pairs + 2 * p * ld_s);
        for (int64_t i = 0; i < m; i++) {
            uint32_t pair;
            memcpy(&pair, (const uint16_t *)rows[i] + 2 * p, sizeof pair);
            out[i] = pair;
        }
        for (int64_t i = m; i < ld_s; i++)
            out[i] = 0;
    }
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

void fai__cntx_add_avx512_bf16(fai_cntx *cntx) {
    cntx->pack_q_bf16 = pack_q_bf16_pairs;
    cntx->qk_bf16 = qk_bf16;
    fai__cntx_add_avx512_bf16_pv(cntx);
}
