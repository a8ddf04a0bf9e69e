/* PV with AVX512_BF16 dot products, for bf16 V (compiled with -mavx512bf16 only here).
 *
 * vdpbf16ps sums the products of a pair, so PV pairs keys: V is packed as key pairs,
 * v_pairs [ceil(n/2), ld_o, 2] (lane x of pair row q holds V[2q][x], V[2q+1][x]), and P as the
 * 32-bit pairs (P[i][2q], P[i][2q+1]) of each query row i, one broadcast of which feeds a whole
 * vector of O's columns. P is f32; in bf16 it is held as hi + lo (hi = P rounded to bf16,
 * lo = P - hi rounded to bf16: within 2^-16 of P), two dot products per pair where f32 takes two
 * FMAs, so the exact mode runs at the f32 rate and gains from V's half-size packing only; with
 * round_p_bf16 P is rounded to bf16 (one dot product per pair: twice the f32 rate). */
#include "ukr/fai_ukr.h"

#include <immintrin.h>

#define W 16
#define PV_ROWS 4
#define PV_VECS 4

/* The 16-bit lanes holding Inf, NaN or a magnitude of FAI_BF16_DOT_HIGH or more (fai_ukr.h). */
static inline __mmask32 beyond_dot_range_bf16(__m512i pairs) {
    const __m512i magnitude = _mm512_and_si512(pairs, _mm512_set1_epi16(0x7fff));
    return _mm512_cmpge_epu16_mask(magnitude, _mm512_set1_epi16(FAI_BF16_DOT_HIGH));
}

/* Two V rows' columns [x, x + count) as 16 key pairs (a missing row b reads as zeros). */
static inline __m512i pair_rows(const uint16_t *a, const uint16_t *b, int64_t x, int64_t count) {
    const __mmask16 lanes = count >= W ? (__mmask16)0xFFFF : (__mmask16)((1u << count) - 1u);
    const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes, a + x));
    const __m512i hi =
        b ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes, b + x)) : _mm512_setzero_si512();
    return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}

/* v_pairs [ceil(n/2), ld_o, 2] from n bf16 rows of dv elements, columns [dv, ld_o) and the key
 * after an odd n zero. Returns nonzero when every value is finite and below FAI_BF16_DOT_HIGH. */
static int pack_v_bf16_pairs(uint16_t *v_pairs, int64_t ld_o, const void *const *rows, int64_t n,
                             int64_t dv) {
    __mmask32 bad = 0;
    for (int64_t j = 0; j < n; j += 2) {
        const uint16_t *a = rows[j], *b = j + 1 < n ? rows[j + 1] : NULL;
        uint16_t *out = v_pairs + j * ld_o; /* pair row j / 2 of 2 ld_o halves */
        for (int64_t x = 0; x < ld_o; x += W) {
            const __m512i pairs = x < dv ? pair_rows(a, b, x, dv - x) : _mm512_setzero_si512();
            bad |= beyond_dot_range_bf16(pairs);
            _mm512_storeu_si512(out + 2 * x, pairs);
        }
    }
    return bad == 0;
}

/* Two f32 vectors rounded to bf16 (to nearest even), lane i the pair (a[i], b[i]): one
 * conversion of both (b's 16 values above a's) and one permutation interleaving them. */
static inline __m512i bf16_pairs_of(__m512 a, __m512 b) {
    const __m512i interleave =
        _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(interleave, (__m512i)_mm512_cvtne2ps_pbh(b, a));
}

/* The low (high) bf16 of each 32-bit pair as an f32. */
static inline __m512 low_half_as_f32(__m512i pairs) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));
}

static inline __m512 high_half_as_f32(__m512i pairs) {
    return _mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32((int)0xffff0000u)));
}

/* P [n, ld_s] (key j's P of query row i at j * ld_s + i) into bf16 pairs in place: for each key
 * pair q, row 2q of the tile takes the 32-bit pairs (hi(P[i][2q]), hi(P[i][2q + 1])) and, with
 * two parts, row 2q + 1 the pairs of their lo parts (n even then). With one part, a key after an
 * odd n weighs 0. */
static void p_to_pairs(float *p_t, int64_t ld_s, int64_t n, int parts) {
    for (int64_t j = 0; j < n; j += 2) {
        float *a = p_t + j * ld_s, *b = j + 1 < n ? p_t + (j + 1) * ld_s : NULL;
        for (int64_t i = 0; i < ld_s; i += W) {
            const __m512 pa = _mm512_loadu_ps(a + i);
            const __m512 pb = b ? _mm512_loadu_ps(b + i) : _mm512_setzero_ps();
            const __m512i hi = bf16_pairs_of(pa, pb);
            _mm512_storeu_si512(a + i, hi);
            if (parts == 2) /* b is there: n is even */
                _mm512_storeu_si512(b + i, bf16_pairs_of(_mm512_sub_ps(pa, low_half_as_f32(hi)),
                                                         _mm512_sub_ps(pb, high_half_as_f32(hi))));
        }
    }
}

/* A block of ROWS rows x VECS vectors of O in registers over the tile's key pairs: per pair,
 * VECS loads of V pairs and ROWS broadcasts of P pairs (PARTS of them) feed ROWS x VECS x PARTS
 * dot products. */
#define DEFINE_PV_BF16_BLOCK(NAME, ROWS, VECS, PARTS)                                              \
    static inline void NAME(float *o, int64_t ld_o, const uint32_t *p_pairs, int64_t ld_s,         \
                            const uint16_t *v_pairs, int64_t pairs) {                              \
        __m512 acc[ROWS][VECS];                                                                    \
        for (int r = 0; r < ROWS; r++)                                                             \
            for (int c = 0; c < VECS; c++)                                                         \
                acc[r][c] = _mm512_loadu_ps(o + r * ld_o + c * W);                                 \
        for (int64_t q = 0; q < pairs; q++) {                                                      \
            __m512bh v[VECS];                                                                      \
            for (int c = 0; c < VECS; c++)                                                         \
                v[c] = (__m512bh)_mm512_loadu_si512(v_pairs + 2 * (q * ld_o + c * W));             \
            for (int r = 0; r < ROWS; r++) {                                                       \
                const uint32_t *pr = p_pairs + 2 * q * ld_s + r;                                   \
                const __m512bh hi = (__m512bh)_mm512_set1_epi32((int)pr[0]);                       \
                for (int c = 0; c < VECS; c++)                                                     \
                    acc[r][c] = _mm512_dpbf16_ps(acc[r][c], hi, v[c]);                             \
                if (PARTS == 2) {                                                                  \
                    const __m512bh lo = (__m512bh)_mm512_set1_epi32((int)pr[ld_s]);                \
                    for (int c = 0; c < VECS; c++)                                                 \
                        acc[r][c] = _mm512_dpbf16_ps(acc[r][c], lo, v[c]);                         \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        for (int r = 0; r < ROWS; r++)                                                             \
            for (int c = 0; c < VECS; c++)                                                         \
                _mm512_storeu_ps(o + r * ld_o + c * W, acc[r][c]);                                 \
    }

#define DEFINE_PV_BF16(NAME, PARTS)                                                                \
    DEFINE_PV_BF16_BLOCK(NAME##_block, PV_ROWS, PV_VECS, PARTS)                                    \
    DEFINE_PV_BF16_BLOCK(NAME##_1vec, PV_ROWS, 1, PARTS)                                           \
    DEFINE_PV_BF16_BLOCK(NAME##_1row, 1, PV_VECS, PARTS)                                           \
    DEFINE_PV_BF16_BLOCK(NAME##_1row_1vec, 1, 1, PARTS)                                            \
    static void NAME(float *o, int64_t ld_o, const uint32_t *p_pairs, int64_t ld_s,                \
                     const uint16_t *v_pairs, int64_t m, int64_t pairs) {                          \
        int64_t i = 0;                                                                             \
        for (; i + PV_ROWS <= m; i += PV_ROWS) {                                                   \
            int64_t x = 0;                                                                         \
            for (; x + PV_VECS * W <= ld_o; x += PV_VECS * W)                                      \
                NAME##_block(o + i * ld_o + x, ld_o, p_pairs + i, ld_s, v_pairs + 2 * x, pairs);   \
            for (; x < ld_o; x += W)                                                               \
                NAME##_1vec(o + i * ld_o + x, ld_o, p_pairs + i, ld_s, v_pairs + 2 * x, pairs);    \
        }                                                                                          \
        for (; i < m; i++) {                                                                       \
            int64_t x = 0;                                                                         \
            for (; x + PV_VECS * W <= ld_o; x += PV_VECS * W)                                      \
                NAME##_1row(o + i * ld_o + x, ld_o, p_pairs + i, ld_s, v_pairs + 2 * x, pairs);    \
            for (; x < ld_o; x += W)                                                               \
                NAME##_1row_1vec(o + i * ld_o + x, ld_o, p_pairs + i, ld_s, v_pairs + 2 * x,       \
                                 pairs);                                                           \
        }                                                                                          \
    }

DEFINE_PV_BF16(pv_bf16_hi_lo, 2)
DEFINE_PV_BF16(pv_bf16_rounded, 1)

/* Key j's V columns [x, x + 16) out of the pairs, as f32. */
static inline __m512 v_of_key(const uint16_t *v_pairs, int64_t ld_o, int64_t j, int64_t x) {
    const __m512i pairs = _mm512_loadu_si512(v_pairs + 2 * ((j / 2) * ld_o + x));
    return j % 2 ? high_half_as_f32(pairs) : low_half_as_f32(pairs);
}

/* V holding Inf or NaN: each row adds only the keys it weighs (P != 0), in f32, so a masked key
 * never reaches it and P is not split (a lo part of 0 times Inf would be NaN). */
static void pv_bf16_sparse(float *o, int64_t ld_o, const float *p_t, int64_t ld_s,
                           const uint16_t *v_pairs, int64_t m, int64_t n) {
    for (int64_t i = 0; i < m; i++) {
        float *o_row = o + i * ld_o;
        for (int64_t j = 0; j < n; j++) {
            const float p = p_t[j * ld_s + i];
            if (p == 0.0f) continue;
            const __m512 pv = _mm512_set1_ps(p);
            for (int64_t x = 0; x < ld_o; x += W)
                _mm512_storeu_ps(o_row + x, _mm512_fmadd_ps(pv, v_of_key(v_pairs, ld_o, j, x),
                                                            _mm512_loadu_ps(o_row + x)));
        }
    }
}

static void pv_bf16(float *o, int64_t ld_o, float *p_t, int64_t ld_s, const uint16_t *v_pairs,
                    int64_t m, int64_t n, int p_parts, int exact) {
    if (exact) {
        pv_bf16_sparse(o, ld_o, p_t, ld_s, v_pairs, m, n);
        return;
    }
    if (p_parts == 2 && n % 2) { /* the last key alone, in f32: no row past n holds its lo */
        pv_bf16_sparse(o, ld_o, p_t + (n - 1) * ld_s, 0, v_pairs + (n - 1) * ld_o, m, 1);
        n--;
    }
    p_to_pairs(p_t, ld_s, n, p_parts);
    const uint32_t *p_pairs = (const uint32_t *)(void *)p_t;
    if (p_parts == 2)
        pv_bf16_hi_lo(o, ld_o, p_pairs, ld_s, v_pairs, m, n / 2);
    else
        pv_bf16_rounded(o, ld_o, p_pairs, ld_s, v_pairs, m, (n + 1) / 2);
}

void fai__cntx_add_avx512_bf16_pv(fai_cntx *cntx) {
    cntx->pack_v_bf16 = pack_v_bf16_pairs;
    cntx->pv_bf16 = pv_bf16;
}
