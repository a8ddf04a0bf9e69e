/* The SIMD micro-kernels, written once against the small vocabulary of fai_simd_<isa>.h and
 * compiled once per ISA (each ukr/<isa>/ file includes its vocabulary, then this body, under its
 * own compiler flags). Entries not defined here come from the reference table. */
#include "ukr/fai_ukr.h"
#include "util/fai_half.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define W FAI_SIMD_WIDTH

/* Register blocks are arrays of vectors indexed by small constant loops. Unrolled before the
 * compiler decides what lives in registers, every accumulator stays in one; left to the later
 * unroller, gcc 12 copied a block's accumulators through the stack before storing them. */
#if defined(__clang__)
#define FAI_UNROLL _Pragma("unroll")
#elif defined(__GNUC__) && __GNUC__ >= 8
#define FAI_UNROLL _Pragma("GCC unroll 32")
#else
#define FAI_UNROLL
#endif

#if !defined(FAI_SIMD_SCALE2I)
/* p x 2^k for integral k in [-150, 128], subnormal results included: as one power of two where
 * every k is at least -126, else as two normal ones (where the vocabulary has no instruction for
 * it, FAI_SIMD_SCALE2I). */
static inline fvec v_scale2i(fvec p, fvec k) {
    if (v_all(v_lt(v_set1(-127.0f), k))) return v_mul(p, v_exp2i(k));
    const fvec half = v_round(v_mul(k, v_set1(0.5f))); /* a subnormal (or NaN) lane */
    return v_mul(v_mul(p, v_exp2i(half)), v_exp2i(v_sub(k, half)));
}
#endif

#if !defined(FAI_SIMD_EXP_MASKED)
/* t rounded to an integer, and p x 2^k, in the lanes not `gone`, 0 in the others: by selects,
 * where the vocabulary has no masked forms of them (FAI_SIMD_EXP_MASKED) */
static inline fvec v_round_unless(fmask gone, fvec t) {
    return v_select(gone, v_zero(), v_round(t));
}
static inline fvec v_scale2i_unless(fmask gone, fvec p, fvec k) {
    return v_select(gone, v_zero(), v_scale2i(p, k));
}
#endif

/* exp(x), vectorised: x = k ln2 + r with |r| <= ln2/2 (Cody-Waite split of ln2), exp(r) by a
 * degree-6 polynomial (FAI_EXP_C2..C6 in fai_ukr.h), times 2^k (v_scale2i). Measured maximum
 * relative error against exp in double: see the test ukr_exp_accuracy (2e-7 enforced). x below
 * -103.97 (where e^x rounds to 0 in f32), including -inf, gives exactly 0: its k is 0, so it never
 * scales into the subnormal range (a subnormal result costs a microcode assist on some CPUs, which
 * masked scores must not pay). Between -103.97 and -87.3 e^x is subnormal and is computed: weights
 * that small still count where V is large (e^-90 times 2^126 is 0.07). NaN stays NaN. */
static inline fvec v_exp(fvec x) {
    const fmask gone = v_lt(x, v_set1(-103.97f)); /* NaN is not */
    const fvec clamped = v_min(v_set1(88.0f), x); /* NaN kept (second operand) */
    const fvec k = v_round_unless(gone, v_mul(clamped, v_set1(1.44269504088896341f)));
    fvec r = v_fma(k, v_set1(-0.693359375f), clamped);
    r = v_fma(k, v_set1(2.12194440e-4f), r);
    fvec p = v_set1(FAI_EXP_C6);
    p = v_fma(p, r, v_set1(FAI_EXP_C5));
    p = v_fma(p, r, v_set1(FAI_EXP_C4));
    p = v_fma(p, r, v_set1(FAI_EXP_C3));
    p = v_fma(p, r, v_set1(FAI_EXP_C2));
    p = v_fma(p, r, v_set1(1.0f));
    p = v_fma(p, r, v_set1(1.0f));
    return v_scale2i_unless(gone, p, k);
}

/* Vector exp over an array, for the accuracy test: n a multiple of W. */
static void exp_array_simd(float *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i + W <= n; i += W)
        v_store(dst + i, v_exp(v_load(src + i)));
}

/* a / b and |a|, written with the compilers' vector operators, which every table's fvec (an
 * AVX, AVX-512 or NEON vector of floats) supports, so the vocabularies need no entry for them */
static inline fvec v_div(fvec a, fvec b) { return a / b; }
static inline fvec v_abs(fvec a) { return v_max(a, v_sub(v_zero(), a)); }

/* tanh(x), vectorised, for the soft-capping: below |x| = 0.625 the odd Taylor polynomial to x^19
 * (truncation below 8e-9 relative there), above it 1 - 2 / (e^(2|x|) + 1) with v_exp (no
 * cancellation: the quotient is at most 0.45), the sign restored. Measured maximum relative error
 * against tanh in double: see the test ukr_tanh_accuracy (1.4e-7 measured on AVX-512 and
 * AVX2, 4e-7 enforced). +-Inf gives +-1 (|x| is clamped to 10, where tanh rounds to 1 in f32), NaN
 * stays NaN. Soft-capped logits are mostly well under the cap: a vector whose lanes are all
 * below 0.625 takes the polynomial alone, and the quotient is a refined reciprocal, not a
 * division (a divider's throughput would make the soft-capping cost as much as the softmax). */
static inline fvec v_tanh(fvec x) {
    const fvec ax = v_abs(x);
    const fvec x2 = v_mul(x, x);
    fvec p = v_set1(-443861162.0f / 1856156927625.0f);
    p = v_fma(p, x2, v_set1(6404582.0f / 10854718875.0f));
    p = v_fma(p, x2, v_set1(-929569.0f / 638512875.0f));
    p = v_fma(p, x2, v_set1(21844.0f / 6081075.0f));
    p = v_fma(p, x2, v_set1(-1382.0f / 155925.0f));
    p = v_fma(p, x2, v_set1(62.0f / 2835.0f));
    p = v_fma(p, x2, v_set1(-17.0f / 315.0f));
    p = v_fma(p, x2, v_set1(2.0f / 15.0f));
    p = v_fma(p, x2, v_set1(-1.0f / 3.0f));
    const fvec small = v_fma(v_mul(x, x2), p, x);
    const fmask is_small = v_lt(ax, v_set1(0.625f));
    if (v_all(is_small)) return small;
    const fvec clamped = v_min(v_set1(10.0f), ax); /* NaN stays (the second operand) */
    const fvec e = v_exp(v_add(clamped, clamped));
    const fvec t = v_sub(v_set1(1.0f), v_mul(v_set1(2.0f), v_recip(v_add(e, v_set1(1.0f)))));
    const fvec large = v_select(v_lt(x, v_zero()), v_sub(v_zero(), t), t);
    return v_select(is_small, small, large);
}

static void tanh_array_simd(float *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i + W <= n; i += W)
        v_store(dst + i, v_tanh(v_load(src + i)));
}

/* -- score modifiers ------------------------------------------------------------------------- */

/* One vector of scores through the modifiers: dist the query-key distances, slope the ALiBi
 * slopes (both unused without ALiBi). */
static inline fvec mod_vec(fvec s, const fai_score_mods *mods, fvec scale, fvec cap, fvec inv_cap,
                           fvec slope, fvec dist) {
    if (mods->scale != 1.0f) s = v_mul(s, scale);
    if (mods->softcap > 0.0f) s = v_mul(cap, v_tanh(v_mul(s, inv_cap)));
    if (mods->slope) s = v_sub(s, v_mul(slope, dist));
    return s;
}

/* S^T [n, ld_s]: W query rows per vector, one key at a time. */
static void mods_t_simd(float *s_t, int64_t ld_s, int64_t n, const fai_score_mods *mods) {
    const fvec scale = v_set1(mods->scale), cap = v_set1(mods->softcap);
    const fvec inv_cap = v_set1(mods->softcap > 0.0f ? 1.0f / mods->softcap : 0.0f);
    for (int64_t i = 0; i < ld_s; i += W) {
        const fvec slope = mods->slope ? v_load(mods->slope + i) : v_zero();
        const fvec offset = mods->slope ? v_load(mods->offset + i) : v_zero();
        for (int64_t c = 0; c < n; c++) {
            float *at = s_t + c * ld_s + i;
            const fvec dist = v_abs(v_add(offset, v_set1((float)c)));
            v_store(at, mod_vec(v_load(at), mods, scale, cap, inv_cap, slope, dist));
        }
    }
}

/* Row-major s [m, ld_n]: W keys per vector, the last few through a copy. */
static void mods_rows_simd(float *s, int64_t ld_n, int64_t m, int64_t n,
                           const fai_score_mods *mods) {
    static const float iota[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    const fvec scale = v_set1(mods->scale), cap = v_set1(mods->softcap);
    const fvec inv_cap = v_set1(mods->softcap > 0.0f ? 1.0f / mods->softcap : 0.0f);
    const fvec lanes = v_load(iota);
    for (int64_t r = 0; r < m; r++) {
        float *row = s + r * ld_n;
        const fvec slope = v_set1(mods->slope ? mods->slope[r] : 0.0f);
        const fvec offset = v_add(lanes, v_set1(mods->slope ? mods->offset[r] : 0.0f));
        int64_t c = 0;
        for (; c + W <= n; c += W) {
            const fvec dist = v_abs(v_add(offset, v_set1((float)c)));
            v_store(row + c, mod_vec(v_load(row + c), mods, scale, cap, inv_cap, slope, dist));
        }
        if (c < n) {
            float part[W];
            for (int64_t k = 0; k < W; k++)
                part[k] = c + k < n ? row[c + k] : 0.0f;
            const fvec dist = v_abs(v_add(offset, v_set1((float)c)));
            v_store(part, mod_vec(v_load(part), mods, scale, cap, inv_cap, slope, dist));
            for (int64_t k = 0; c + k < n; k++)
                row[c + k] = part[k];
        }
    }
}

/* -- packing ---------------------------------------------------------------------------------- */

/* W elements of a row of `dtype` from x on, as f32 (quantized ones unscaled). */
static inline fvec load_row_full(const void *row, int64_t x, fai_dtype dtype) {
    switch (dtype) {
    case FAI_DTYPE_F16:
        return v_load_f16((const uint16_t *)row + x);
    case FAI_DTYPE_BF16:
        return v_load_bf16((const uint16_t *)row + x);
    case FAI_DTYPE_I8:
        return v_load_i8((const int8_t *)row + x);
    case FAI_DTYPE_E4M3:
        return v_load_e4m3((const uint8_t *)row + x);
    case FAI_DTYPE_E5M2:
        return v_load_e5m2((const uint8_t *)row + x);
    default:
        return v_load((const float *)row + x);
    }
}

/* load_row_full, except that e4m3 reads as 2^-8 of its values with the NaN code as a number
 * (v_load_e4m3_unit: fewer instructions). The decode kernels, which convert every code they
 * read, use it on rows e4m3_nan_in has cleared (or mark NaN rows' results afterwards) and scale
 * by 2^8 where the sum or the product needs it. */
static inline fvec load_row_unit(const void *row, int64_t x, fai_dtype dtype) {
    if (dtype == FAI_DTYPE_E4M3) return v_load_e4m3_unit((const uint8_t *)row + x);
    return load_row_full(row, x, dtype);
}

/* Two load_row_unit vectors, x and x + W: e4m3 converts them together where the vocabulary can
 * (FAI_SIMD_E4M3_PAIR). */
static inline void load_row_unit2(const void *row, int64_t x, fai_dtype dtype, fvec out[2]) {
#if defined(FAI_SIMD_E4M3_PAIR)
    if (dtype == FAI_DTYPE_E4M3) {
        v_load_e4m3_unit2((const uint8_t *)row + x, out);
        return;
    }
#endif
    out[0] = load_row_unit(row, x, dtype);
    out[1] = load_row_unit(row, x + W, dtype);
}

/* 2^8 for e4m3 (what load_row_unit's values are short of), else 1. */
static inline float unit_of(fai_dtype dtype) { return dtype == FAI_DTYPE_E4M3 ? 256.0f : 1.0f; }

/* Whether any of n e4m3 codes from p is the NaN code S.1111.111: with the vocabulary's whole-vector
 * comparison where it has one (FAI_SIMD_E4M3_NAN), else eight codes a word: masked to 7 bits and
 * plus one, the NaN code is the only one to reach bit 7. */
static inline int e4m3_nan_in(const uint8_t *p, int64_t n) {
#if defined(FAI_SIMD_E4M3_NAN)
    return v_e4m3_nan_in(p, n);
#else
    const uint64_t low7 = 0x7f7f7f7f7f7f7f7fu, one = 0x0101010101010101u;
    uint64_t seen = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t word;
        memcpy(&word, p + i, sizeof word);
        seen |= (word & low7) + one;
    }
    int nan = (seen & 0x8080808080808080u) != 0;
    for (; i < n; i++)
        nan |= (p[i] & 0x7f) == 0x7f;
    return nan;
#endif
}

/* A running check for the e4m3 NaN code across many rows, branch-free until e4m3_nan_any: decode's
 * PV folds every row it reads, QK a block's keys (e4m3_nan_in_keys), and each goes back to the
 * rows one by one only when a NaN code was among them. With the vocabulary's vectors where it has
 * them (FAI_SIMD_E4M3_FOLD), else e4m3_nan_in's scan. */
#if defined(FAI_SIMD_E4M3_FOLD)
typedef v_nan_state nan_state;
static inline nan_state e4m3_nan_none(void) { return v_e4m3_nan_none(); }
static inline nan_state e4m3_nan_fold(nan_state seen, const uint8_t *p, int64_t n) {
    return v_e4m3_nan_fold(seen, p, n);
}
static inline int e4m3_nan_any(nan_state seen) { return v_e4m3_nan_any(seen); }
#else
typedef int nan_state;
static inline nan_state e4m3_nan_none(void) { return 0; }
static inline nan_state e4m3_nan_fold(nan_state seen, const uint8_t *p, int64_t n) {
    return seen | e4m3_nan_in(p, n);
}
static inline int e4m3_nan_any(nan_state seen) { return seen; }
#endif

/* Whether any of `count` rows of n e4m3 codes holds the NaN code: the rows side by side, a
 * vocabulary step of each per pass (one loop for all of them), else one scan each. */
static inline int e4m3_nan_in_keys(const void *const *rows, int64_t count, int64_t n) {
#if defined(FAI_SIMD_E4M3_FOLD)
    nan_state seen = e4m3_nan_none();
    int64_t x = 0;
    for (; x + FAI_SIMD_E4M3_FOLD_BYTES <= n; x += FAI_SIMD_E4M3_FOLD_BYTES)
        for (int64_t c = 0; c < count; c++)
            seen = e4m3_nan_fold(seen, (const uint8_t *)rows[c] + x, FAI_SIMD_E4M3_FOLD_BYTES);
    for (int64_t c = 0; x < n && c < count; c++)
        seen = e4m3_nan_fold(seen, (const uint8_t *)rows[c] + x, n - x);
    return e4m3_nan_any(seen);
#else
    int nan = 0;
    for (int64_t c = 0; c < count; c++)
        nan |= e4m3_nan_in(rows[c], n);
    return nan;
#endif
}

/* The count (< W) elements of a row from x on, zero-filled to W; nothing past them is read. */
static inline fvec load_row_tail(const void *row, int64_t x, int64_t count, fai_dtype dtype) {
    float part[W];
    for (int64_t k = 0; k < W; k++)
        part[k] = 0.0f;
    for (int64_t k = 0; k < count; k++)
        part[k] = fai__load_element(row, x + k, dtype);
    return v_load(part);
}

/* Bytes of `elements` elements of a dtype (a constant where the dtype is one). */
static inline int64_t row_bytes_of(int64_t elements, fai_dtype dtype) {
    return elements * (dtype == FAI_DTYPE_F32                              ? 4
                       : dtype == FAI_DTYPE_F16 || dtype == FAI_DTYPE_BF16 ? 2
                                                                           : 1);
}

/* Q^T [d, ld_s] from m rows, PACK_Q_ROWS rows at a time: the rows converted with whole vectors
 * into a small buffer (the reference converts element by element through a call), then each
 * of its columns written as a contiguous run of Q^T: 16 x 16 blocks through registers where the
 * vocabulary transposes them (FAI_SIMD_TRANSPOSE16), else element by element. */
#define PACK_Q_ROWS 16
static void pack_q_simd(float *q_t, int64_t ld_s, const void *const *rows, int64_t m, int64_t d,
                        fai_dtype dtype) {
    float block[PACK_Q_ROWS][FAI_MAX_HEAD_DIM];
    for (int64_t i0 = 0; i0 < ld_s; i0 += PACK_Q_ROWS) {
        const int64_t count = ld_s - i0 < PACK_Q_ROWS ? ld_s - i0 : PACK_Q_ROWS;
        for (int64_t i = 0; i < count; i++) {
            int64_t x = 0;
            if (i0 + i >= m) { /* the lanes past the rows */
                memset(block[i], 0, (size_t)d * sizeof(float));
                continue;
            }
            for (; x + W <= d; x += W)
                v_store(block[i] + x, load_row_full(rows[i0 + i], x, dtype));
            for (; x < d; x++)
                block[i][x] = fai__load_element(rows[i0 + i], x, dtype);
        }
        int64_t x = 0;
#if defined(FAI_SIMD_TRANSPOSE16)
        if (count == 16) { /* 16 x 16 blocks through registers */
            const void *block_rows[16];
            for (; x + 16 <= d; x += 16) {
                for (int i = 0; i < 16; i++)
                    block_rows[i] = block[i] + x;
                v_transpose16_u32(block_rows, (uint32_t *)(void *)(q_t + x * ld_s + i0), ld_s);
            }
        }
#endif
        for (; x < d; x++)
            for (int64_t i = 0; i < count; i++)
                q_t[x * ld_s + i0 + i] = block[i][x];
    }
}

/* One instance per dtype (the load's switch folds away; only quantized dtypes multiply by a
 * scale). Each converted vector is stored and checked at once: x * 0 is 0 for finite x and NaN
 * for Inf or NaN, one FMA per vector, into four sums in turn (one would chain every FMA of the
 * tile behind the one before). An int8 row whose scale times 128 is finite cannot hold anything
 * else and is not checked: the FMA was a fifth of its packing's instructions. Nor is an e4m3 row
 * without the NaN code (one comparison per vector of codes) whose scale times 512 is finite:
 * its codes are read as 2^-8 of their values and the scale taken times 2^8 (exact, so the
 * product is the same), which leaves out the NaN code's test, a multiply and the check, 5 of 11
 * instructions a vector. */
#define DEFINE_PACK_ROWS(NAME, DTYPE)                                                              \
    static int NAME(float *dst, int64_t ld_dst, const void *const *rows, int64_t n, int64_t dim,   \
                    const float *scales) {                                                         \
        const int quantized =                                                                      \
            (DTYPE == FAI_DTYPE_I8 || DTYPE == FAI_DTYPE_E4M3 || DTYPE == FAI_DTYPE_E5M2) &&       \
            scales;                                                                                \
        fvec non_finite[4] = {v_zero(), v_zero(), v_zero(), v_zero()};                             \
        int finite = 1;                                                                            \
        for (int64_t r = 0; r < n; r++) {                                                          \
            float *out = dst + r * ld_dst;                                                         \
            const float scale = quantized ? scales[r] : 1.0f;                                      \
            const int e4m3_unit = DTYPE == FAI_DTYPE_E4M3 && fabsf(scale) <= FLT_MAX / 512.0f &&   \
                                  !e4m3_nan_in(rows[r], dim);                                      \
            const int checked =                                                                    \
                !(DTYPE == FAI_DTYPE_I8 && fabsf(scale) <= FLT_MAX / 128.0f) && !e4m3_unit;        \
            int64_t x = 0;                                                                         \
            for (; e4m3_unit && x + W <= dim; x += W)                                              \
                v_store(out + x, v_mul(load_row_unit(rows[r], x, DTYPE), v_set1(scale * 256.0f))); \
            for (; x + W <= dim; x += W) {                                                         \
                fvec v = load_row_full(rows[r], x, DTYPE);                                         \
                if (quantized) v = v_mul(v, v_set1(scale));                                        \
                v_store(out + x, v);                                                               \
                if (checked) non_finite[x / W % 4] = v_fma(v, v_zero(), non_finite[x / W % 4]);    \
            }                                                                                      \
            for (; x < dim; x++) {                                                                 \
                out[x] = fai__load_element(rows[r], x, DTYPE) * scale;                             \
                finite &= isfinite(out[x]) != 0;                                                   \
            }                                                                                      \
            for (; x < ld_dst; x++)                                                                \
                out[x] = 0.0f;                                                                     \
        }                                                                                          \
        const fvec all =                                                                           \
            v_add(v_add(non_finite[0], non_finite[1]), v_add(non_finite[2], non_finite[3]));       \
        return finite && v_hsum(all) == 0.0f;                                                      \
    }

/* Dequantization scales on the scores (and on P): S^T [n, ld_s] row j (key j) times scale[j],
 * all ld_s columns; row-major s [m, ld_n] column j times scale[j], keys j < n. */
static void scale_keys_t_simd(float *s_t, int64_t ld_s, int64_t n, const float *scale) {
    for (int64_t j = 0; j < n; j++) {
        const fvec c = v_set1(scale[j]);
        for (int64_t i = 0; i < ld_s; i += W)
            v_store(s_t + j * ld_s + i, v_mul(v_load(s_t + j * ld_s + i), c));
    }
}

static void scale_keys_rows_simd(float *s, int64_t ld_n, int64_t m, int64_t n, const float *scale) {
    for (int64_t i = 0; i < m; i++) {
        float *row = s + i * ld_n;
        int64_t j = 0;
        for (; j + W <= n; j += W)
            v_store(row + j, v_mul(v_load(row + j), v_load(scale + j)));
        for (; j < n; j++)
            row[j] *= scale[j];
    }
}

/* -- stage 1: S^T = scale * K Q^T --------------------------------------------------------------
 * A block of KEYS keys x VECS vectors of query rows stays in registers over the whole d loop:
 * per d, VECS loads of Q^T and KEYS broadcasts of K feed KEYS * VECS FMAs. */
#define DEFINE_QK_BLOCK(NAME, KEYS, VECS)                                                          \
    static inline void NAME(float *s_t, int64_t ld_s, const float *q_t, const float *k, int64_t d, \
                            fvec scale) {                                                          \
        fvec acc[KEYS][VECS];                                                                      \
        FAI_UNROLL for (int r = 0; r < KEYS; r++) {                                                \
            FAI_UNROLL for (int c = 0; c < VECS; c++) { acc[r][c] = v_zero(); }                    \
        }                                                                                          \
        for (int64_t x = 0; x < d; x++) {                                                          \
            fvec q[VECS];                                                                          \
            FAI_UNROLL for (int c = 0; c < VECS; c++) { q[c] = v_load(q_t + x * ld_s + c * W); }   \
            FAI_UNROLL for (int r = 0; r < KEYS; r++) {                                            \
                const fvec key = v_set1(k[r * d + x]);                                             \
                FAI_UNROLL for (int c = 0; c < VECS; c++) {                                        \
                    acc[r][c] = v_fma(key, q[c], acc[r][c]);                                       \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        FAI_UNROLL for (int r = 0; r < KEYS; r++) {                                                \
            FAI_UNROLL for (int c = 0; c < VECS; c++) {                                            \
                v_store(s_t + r * ld_s + c * W, v_mul(acc[r][c], scale));                          \
            }                                                                                      \
        }                                                                                          \
    }

/* The remainder of a tile's keys runs in blocks of 4, then of 1: a 64-key tile is 5 x 12 + 4.
 * Where the vocabulary names FAI_QK_KEYS_4VECS, tiles of 4 vectors of rows or more run blocks of
 * that many keys x 4 vectors first: half the broadcasts per FMA and half the K rows in flight
 * (avx512: 6 x 4 ran at 95-100 % of the FMA peak in cache on a Sapphire Rapids Xeon, 12 x 2 at
 * 80-91 %). */
#if defined(FAI_QK_KEYS_4VECS)
DEFINE_QK_BLOCK(qk_block_4vecs, FAI_QK_KEYS_4VECS, 4)
DEFINE_QK_BLOCK(qk_block_4vecs_4keys, 4, 4)
DEFINE_QK_BLOCK(qk_block_4vecs_1key, 1, 4)
#endif
DEFINE_QK_BLOCK(qk_block_wide, FAI_QK_KEYS, 2)
DEFINE_QK_BLOCK(qk_block_wide_4keys, 4, 2)
DEFINE_QK_BLOCK(qk_block_wide_1key, 1, 2)
DEFINE_QK_BLOCK(qk_block_narrow, (2 * FAI_QK_KEYS), 1)
DEFINE_QK_BLOCK(qk_block_narrow_4keys, 4, 1)
DEFINE_QK_BLOCK(qk_block_narrow_1key, 1, 1)

/* A band of query-row vectors of S^T over a tile's keys: blocks of KEYS keys, then 4, then 1. */
#define DEFINE_QK_BAND(NAME, KEYS, BLOCK, BLOCK_4KEYS, BLOCK_1KEY)                                 \
    static inline void NAME(float *s_t, int64_t ld_s, const float *q_t, const float *k, int64_t n, \
                            int64_t d, fvec scale) {                                               \
        int64_t j = 0;                                                                             \
        for (; j + (KEYS) <= n; j += (KEYS))                                                       \
            BLOCK(s_t + j * ld_s, ld_s, q_t, k + j * d, d, scale);                                 \
        for (; j + 4 <= n; j += 4)                                                                 \
            BLOCK_4KEYS(s_t + j * ld_s, ld_s, q_t, k + j * d, d, scale);                           \
        for (; j < n; j++)                                                                         \
            BLOCK_1KEY(s_t + j * ld_s, ld_s, q_t, k + j * d, d, scale);                            \
    }

#if defined(FAI_QK_KEYS_4VECS)
DEFINE_QK_BAND(qk_band_4vecs, FAI_QK_KEYS_4VECS, qk_block_4vecs, qk_block_4vecs_4keys,
               qk_block_4vecs_1key)
#endif
DEFINE_QK_BAND(qk_band_wide, FAI_QK_KEYS, qk_block_wide, qk_block_wide_4keys, qk_block_wide_1key)
DEFINE_QK_BAND(qk_band_narrow, 2 * FAI_QK_KEYS, qk_block_narrow, qk_block_narrow_4keys,
               qk_block_narrow_1key)

static void qk_simd(float *s_t, int64_t ld_s, const float *q_t, const float *k, int64_t n,
                    int64_t d, float scale) {
    const fvec vscale = v_set1(scale);
    int64_t i0 = 0;
#if defined(FAI_QK_KEYS_4VECS)
    for (; i0 + 4 * W <= ld_s; i0 += 4 * W)
        qk_band_4vecs(s_t + i0, ld_s, q_t + i0, k, n, d, vscale);
#endif
    for (; i0 + 2 * W <= ld_s; i0 += 2 * W)
        qk_band_wide(s_t + i0, ld_s, q_t + i0, k, n, d, vscale);
    for (; i0 < ld_s; i0 += W)
        qk_band_narrow(s_t + i0, ld_s, q_t + i0, k, n, d, vscale);
}

/* -- stage 2: online softmax, W query rows at a time ---------------------------------------
 * NaN costs nothing in the key loops: the tile max skips NaN scores (x86's max returns its
 * second operand, the running max, when either is NaN), a NaN score still gives P = NaN and so
 * a NaN sum, and the sum then turns the row's max into NaN once per tile. A NaN max marks the
 * row from then on (it wins the next tile's max and the split-KV merge), so a row whose visible
 * scores are all NaN never reads as "saw nothing" (max -inf). NEON's max keeps NaN from either
 * operand: there the row goes NaN at once, with the same result. */
static void softmax_simd(float *s_t, int64_t ld_s, int64_t m, int64_t n, float *row_max,
                         float *row_sum, float *row_alpha) {
    const fvec minus_inf = v_set1(-INFINITY);
    for (int64_t i0 = 0; i0 < m; i0 += W) {
        const fvec old_max = v_load(row_max + i0);
        fvec tile_max = minus_inf;
        for (int64_t j = 0; j < n; j++)
            tile_max = v_max(v_load(s_t + j * ld_s + i0), tile_max);
        const fvec new_max = v_max(tile_max, old_max); /* a NaN max (second operand) stays */
        /* rows that have seen nothing keep max -inf: subtract 0 instead, so P = exp(-inf) = 0 */
        const fmask empty = v_eq(new_max, minus_inf);
        const fvec shift = v_select(empty, v_zero(), new_max);
        fvec sum = v_zero();
        for (int64_t j = 0; j < n; j++) {
            float *s = s_t + j * ld_s + i0;
            const fvec p = v_exp(v_sub(v_load(s), shift));
            v_store(s, p);
            sum = v_add(sum, p);
        }
        const fvec alpha = v_select(empty, v_set1(1.0f), v_exp(v_sub(old_max, shift)));
        const fvec new_sum = v_fma(v_load(row_sum + i0), alpha, sum);
        v_store(row_alpha + i0, alpha);
        v_store(row_sum + i0, new_sum);
        /* sum x 0 + max: NaN where the sum is NaN (the sum is never infinite: P <= 1) */
        v_store(row_max + i0, v_fma(new_sum, v_zero(), new_max));
    }
}

/* -- stage 4: rescale O where the running max moved ------------------------------------------ */
static void rescale_o_simd(float *o, int64_t ld_o, int64_t m, const float *row_alpha) {
    for (int64_t i = 0; i < m; i++) {
        if (row_alpha[i] == 1.0f) continue;
        const fvec alpha = v_set1(row_alpha[i]);
        for (int64_t x = 0; x < ld_o; x += W)
            v_store(o + i * ld_o + x, v_mul(v_load(o + i * ld_o + x), alpha));
    }
}

/* -- stage 3: O += P V -------------------------------------------------------------------------
 * A block of ROWS rows x VECS vectors of O stays in registers over the tile's keys: per key,
 * VECS loads of V and ROWS broadcasts of P feed ROWS * VECS FMAs. */
#define DEFINE_PV_BLOCK(NAME, ROWS, VECS)                                                          \
    static inline void NAME(float *o, int64_t ld_o, const float *p_t, int64_t ld_s,                \
                            const float *v, int64_t n) {                                           \
        fvec acc[ROWS][VECS];                                                                      \
        FAI_UNROLL for (int r = 0; r < ROWS; r++) {                                                \
            FAI_UNROLL for (int c = 0; c < VECS; c++) {                                            \
                acc[r][c] = v_load(o + r * ld_o + c * W);                                          \
            }                                                                                      \
        }                                                                                          \
        for (int64_t j = 0; j < n; j++) {                                                          \
            fvec values[VECS];                                                                     \
            FAI_UNROLL for (int c = 0; c < VECS; c++) {                                            \
                values[c] = v_load(v + j * ld_o + c * W);                                          \
            }                                                                                      \
            FAI_UNROLL for (int r = 0; r < ROWS; r++) {                                            \
                const fvec p = v_set1(p_t[j * ld_s + r]);                                          \
                FAI_UNROLL for (int c = 0; c < VECS; c++) {                                        \
                    acc[r][c] = v_fma(p, values[c], acc[r][c]);                                    \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        FAI_UNROLL for (int r = 0; r < ROWS; r++) {                                                \
            FAI_UNROLL for (int c = 0; c < VECS; c++) {                                            \
                v_store(o + r * ld_o + c * W, acc[r][c]);                                          \
            }                                                                                      \
        }                                                                                          \
    }

DEFINE_PV_BLOCK(pv_block, FAI_PV_ROWS, FAI_PV_VECS)
DEFINE_PV_BLOCK(pv_block_1vec, FAI_PV_ROWS, 1)
DEFINE_PV_BLOCK(pv_block_2rows, 2, FAI_PV_VECS)
DEFINE_PV_BLOCK(pv_block_2rows_1vec, 2, 1)
DEFINE_PV_BLOCK(pv_block_1row, 1, FAI_PV_VECS)
DEFINE_PV_BLOCK(pv_block_1row_1vec, 1, 1)

/* A band of rows of O, every column block of it. */
#define DEFINE_PV_BAND(NAME, BLOCK, BLOCK_1VEC)                                                    \
    static inline void NAME(float *o, int64_t ld_o, const float *p_t, int64_t ld_s,                \
                            const float *v, int64_t n) {                                           \
        int64_t x = 0;                                                                             \
        for (; x + FAI_PV_VECS * W <= ld_o; x += FAI_PV_VECS * W)                                  \
            BLOCK(o + x, ld_o, p_t, ld_s, v + x, n);                                               \
        for (; x < ld_o; x += W)                                                                   \
            BLOCK_1VEC(o + x, ld_o, p_t, ld_s, v + x, n);                                          \
    }

DEFINE_PV_BAND(pv_band, pv_block, pv_block_1vec)
DEFINE_PV_BAND(pv_band_2rows, pv_block_2rows, pv_block_2rows_1vec)
DEFINE_PV_BAND(pv_band_1row, pv_block_1row, pv_block_1row_1vec)

/* Bands of FAI_PV_ROWS rows, the rest in bands of 2 and 1 (avx512: 32 rows are 5 x 6 + 2). */
static void pv_dense(float *o, int64_t ld_o, const float *p_t, int64_t ld_s, const float *v,
                     int64_t m, int64_t n) {
    int64_t i = 0;
    for (; i + FAI_PV_ROWS <= m; i += FAI_PV_ROWS)
        pv_band(o + i * ld_o, ld_o, p_t + i, ld_s, v, n);
    for (; i + 2 <= m; i += 2)
        pv_band_2rows(o + i * ld_o, ld_o, p_t + i, ld_s, v, n);
    for (; i < m; i++)
        pv_band_1row(o + i * ld_o, ld_o, p_t + i, ld_s, v, n);
}

/* Masked tiles: a row adds only the keys it sees (P != 0), so NaN or Inf in V at positions it
 * cannot see never reach it. */
static void pv_sparse(float *o, int64_t ld_o, const float *p_t, int64_t ld_s, const float *v,
                      int64_t m, int64_t n) {
    for (int64_t i = 0; i < m; i++) {
        float *o_row = o + i * ld_o;
        for (int64_t j = 0; j < n; j++) {
            const float p_scalar = p_t[j * ld_s + i];
            if (p_scalar == 0.0f) continue;
            const fvec p = v_set1(p_scalar);
            for (int64_t x = 0; x < ld_o; x += W)
                v_store(o_row + x, v_fma(p, v_load(v + j * ld_o + x), v_load(o_row + x)));
        }
    }
}

static void pv_simd(float *o, int64_t ld_o, const float *p_t, int64_t ld_s, const float *v,
                    int64_t m, int64_t n, int masked) {
    if (masked)
        pv_sparse(o, ld_o, p_t, ld_s, v, m, n);
    else
        pv_dense(o, ld_o, p_t, ld_s, v, m, n);
}

/* -- small Q tiles: K and V straight from their rows ---------------------------------------- */

/* Rows some keys ahead (fai__prefetch_ahead) are fetched while the current ones are computed: with
 * paged K/V the next rows may sit on another page, where the hardware prefetchers cannot
 * follow. The row lists carry rows_ahead pointers past the tile for this. */

/* Decode's QK works on blocks of QK_ROWS_BLOCK accumulators: 4 query rows x FAI_QK_ROWS_KEYS
 * keys, or, where a call has fewer rows (an MHA step has one, a GQA group of 2 two), 2 rows x
 * twice the keys or 1 row x four times them, so no accumulator repeats another row's work. */
#define QK_ROWS_BLOCK (4 * FAI_QK_ROWS_KEYS)

/* The lane sums of a block of accumulators, sums[k] of acc[k] (acc[r * keys + c] is row r, key
 * c): 16 or 8 at once where the vocabulary can (FAI_SIMD_HSUM16, FAI_SIMD_HSUM8), else one
 * reduction each. */
static inline void hsum_block(const fvec acc[QK_ROWS_BLOCK], float sums[QK_ROWS_BLOCK]) {
#if defined(FAI_SIMD_HSUM16)
    if (QK_ROWS_BLOCK == 16) {
        v_hsum16(acc, sums);
        return;
    }
#endif
#if defined(FAI_SIMD_HSUM8)
    if (QK_ROWS_BLOCK == 8) {
        v_hsum8(acc, sums);
        return;
    }
#endif
    for (int k = 0; k < QK_ROWS_BLOCK; k++)
        sums[k] = v_hsum(acc[k]);
}

/* Stores a block of lane sums (hsum_block's: `rows` rows from i0, `keys` keys from j0) as
 * scores: times the dtype's unit, the softmax scale and each key's scale, in that order, in one
 * pass. The key scales are looked up only now (nothing more is live): a vector of them at a time
 * where the block has all its keys and its lanes repeat 4 keys or hold whole vectors of them, else
 * one by one. Rows and keys past m and n are not stored; keys holding the e4m3 NaN code get NaN
 * scores, as their dot products would. */
static inline void store_score_block(float *s, int64_t ld_n, float sums[QK_ROWS_BLOCK], int rows,
                                     int keys, int64_t i0, int64_t m, int64_t j0, int64_t n,
                                     float unit, float scale, const float *key_scale,
                                     const int *nan_key) {
    enum { STEP = W < QK_ROWS_BLOCK ? W : QK_ROWS_BLOCK };
    const int whole_keys = j0 + keys <= n;
    const int scale_lanes = key_scale && whole_keys && (keys == 4 || keys % W == 0);
    for (int k = 0; k < QK_ROWS_BLOCK; k += STEP) {
        fvec v = v_mul(v_mul(v_load(sums + k), v_set1(unit)), v_set1(scale));
        if (scale_lanes)
            v = v_mul(v, keys == 4 ? v_load_repeat4(key_scale + j0)
                                   : v_load(key_scale + j0 + k % keys));
        v_store(sums + k, v);
    }
    if (key_scale && !scale_lanes) /* an edge block repeats a valid key's scale */
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < keys; c++)
                sums[r * keys + c] *= key_scale[j0 + c < n ? j0 + c : j0];
    if (whole_keys && i0 + rows <= m) /* a row's keys follow each other */
        for (int r = 0; r < rows; r++)
            memcpy(s + (i0 + r) * ld_n + j0, sums + r * keys, (size_t)keys * sizeof(float));
    else
        for (int c = 0; c < keys && j0 + c < n; c++)
            for (int r = 0; r < rows && i0 + r < m; r++)
                s[(i0 + r) * ld_n + j0 + c] = sums[r * keys + c];
    for (int c = 0; c < keys; c++)
        for (int r = 0; nan_key[c] && r < rows && i0 + r < m; r++)
            s[(i0 + r) * ld_n + j0 + c] = NAN;
}

/* ROWS query rows x KEYS keys (ROWS x KEYS = QK_ROWS_BLOCK) of dot products over d, in as many
 * vector accumulators, reduced at the end. Edge blocks repeat a valid row or key and store only
 * the valid results. The dtype is a constant in each instance, so the load's branch folds away.
 * e4m3 keys are read as 2^-8 of their values (load_row_unit; the sums are scaled back, exactly)
 * and a key holding the NaN code gets NaN scores, as its dot products would. Each key's vector
 * is converted once and taken by the block's rows at once, so few are live. A head dim with a
 * partial last vector takes the instance with TAIL set: without the tail's code, the compiler
 * keeps the accumulators in registers (with it they went through the stack, two stores a vector
 * each block, and the kernel ran at 56-60 % of the FMA peak instead of 70-72 %). */
#define DEFINE_QK_ROWS_BLOCK(NAME, DTYPE, ROWS, KEYS, TAIL)                                        \
    static void NAME(float *s, int64_t ld_n, const float *q, int64_t ld_q, int64_t m,              \
                     const void *const *k_rows, int64_t rows_ahead, const fai_row_fetch *fetch,    \
                     int64_t n, int64_t d, float scale, const float *key_scale) {                  \
        const int64_t row_bytes = row_bytes_of(d, DTYPE);                                          \
        const int64_t ahead = fai__prefetch_ahead(row_bytes);                                      \
        const int64_t full = d / W * W;                                                            \
        for (int64_t j0 = 0; j0 < n; j0 += KEYS) {                                                 \
            const void *key[KEYS];                                                                 \
            for (int c = 0; c < KEYS; c++)                                                         \
                key[c] = k_rows[j0 + c < n ? j0 + c : j0];                                         \
            for (int c = 0; c < KEYS && j0 + ahead + c < n + rows_ahead; c++)                      \
                fai__prefetch_row(k_rows[j0 + ahead + c], row_bytes);                              \
            fai__fetch_for_keys(fetch, j0, j0 + KEYS, n);                                          \
            int nan_key[KEYS] = {0};                                                               \
            if (DTYPE == FAI_DTYPE_E4M3 &&                                                         \
                e4m3_nan_in_keys(key, n - j0 < KEYS ? n - j0 : KEYS, d))                           \
                for (int c = 0; c < KEYS && j0 + c < n; c++)                                       \
                    nan_key[c] = e4m3_nan_in(key[c], d);                                           \
            for (int64_t i0 = 0; i0 < m; i0 += ROWS) {                                             \
                const float *query[ROWS];                                                          \
                for (int r = 0; r < ROWS; r++)                                                     \
                    query[r] = q + (i0 + r < m ? i0 + r : i0) * ld_q;                              \
                fvec acc[QK_ROWS_BLOCK]; /* [row][key] */                                          \
                for (int k = 0; k < QK_ROWS_BLOCK; k++)                                            \
                    acc[k] = v_zero();                                                             \
                int64_t x = 0;                                                                     \
                for (; DTYPE == FAI_DTYPE_E4M3 && x + 2 * W <= full; x += 2 * W) {                 \
                    /* two vectors a key: their codes converted together */                        \
                    fvec q0[ROWS], q1[ROWS];                                                       \
                    for (int r = 0; r < ROWS; r++)                                                 \
                        q0[r] = v_load(query[r] + x), q1[r] = v_load(query[r] + x + W);            \
                    for (int c = 0; c < KEYS; c++) {                                               \
                        fvec kv[2];                                                                \
                        load_row_unit2(key[c], x, DTYPE, kv);                                      \
                        for (int r = 0; r < ROWS; r++)                                             \
                            acc[r * KEYS + c] =                                                    \
                                v_fma(q1[r], kv[1], v_fma(q0[r], kv[0], acc[r * KEYS + c]));       \
                    }                                                                              \
                }                                                                                  \
                for (; x < full; x += W) {                                                         \
                    fvec qv[ROWS];                                                                 \
                    for (int r = 0; r < ROWS; r++)                                                 \
                        qv[r] = v_load(query[r] + x);                                              \
                    for (int c = 0; c < KEYS; c++) {                                               \
                        const fvec kv = load_row_unit(key[c], x, DTYPE);                           \
                        for (int r = 0; r < ROWS; r++)                                             \
                            acc[r * KEYS + c] = v_fma(qv[r], kv, acc[r * KEYS + c]);               \
                    }                                                                              \
                }                                                                                  \
                if (TAIL && full < d) {                                                            \
                    fvec qv[ROWS];                                                                 \
                    for (int r = 0; r < ROWS; r++)                                                 \
                        qv[r] = v_load(query[r] + full);                                           \
                    for (int c = 0; c < KEYS; c++) {                                               \
                        const fvec kv = v_mul(load_row_tail(key[c], full, d - full, DTYPE),        \
                                              v_set1(1.0f / unit_of(DTYPE)));                      \
                        for (int r = 0; r < ROWS; r++)                                             \
                            acc[r * KEYS + c] = v_fma(qv[r], kv, acc[r * KEYS + c]);               \
                    }                                                                              \
                }                                                                                  \
                float sums[QK_ROWS_BLOCK];                                                         \
                hsum_block(acc, sums);                                                             \
                store_score_block(s, ld_n, sums, ROWS, KEYS, i0, m, j0, n, unit_of(DTYPE), scale,  \
                                  key_scale, nan_key);                                             \
            }                                                                                      \
        }                                                                                          \
    }

/* The blocks of one row count, whole vectors or with a tail, chosen by the head dim. */
#define DEFINE_QK_ROWS_BLOCKS(NAME, DTYPE, ROWS, KEYS)                                             \
    DEFINE_QK_ROWS_BLOCK(NAME##_whole, DTYPE, ROWS, KEYS, 0)                                       \
    DEFINE_QK_ROWS_BLOCK(NAME##_tail, DTYPE, ROWS, KEYS, 1)                                        \
    static void NAME(float *s, int64_t ld_n, const float *q, int64_t ld_q, int64_t m,              \
                     const void *const *k_rows, int64_t rows_ahead, const fai_row_fetch *fetch,    \
                     int64_t n, int64_t d, float scale, const float *key_scale) {                  \
        (d % W == 0 ? NAME##_whole : NAME##_tail)(s, ld_n, q, ld_q, m, k_rows, rows_ahead, fetch,  \
                                                  n, d, scale, key_scale);                         \
    }

/* qk_rows for one K dtype: its rows split by fai__decode_rows_left; the padding keys masked. */
#define DEFINE_QK_ROWS(NAME, DTYPE)                                                                \
    DEFINE_QK_ROWS_BLOCKS(NAME##_4, DTYPE, 4, FAI_QK_ROWS_KEYS)                                    \
    DEFINE_QK_ROWS_BLOCKS(NAME##_2, DTYPE, 2, (2 * FAI_QK_ROWS_KEYS))                              \
    DEFINE_QK_ROWS_BLOCKS(NAME##_1, DTYPE, 1, (4 * FAI_QK_ROWS_KEYS))                              \
    static void NAME(float *s, int64_t ld_n, const float *q, int64_t ld_q, int64_t m,              \
                     const void *const *k_rows, int64_t rows_ahead, const fai_row_fetch *fetch,    \
                     int64_t n, int64_t d, float scale, const float *key_scale) {                  \
        const int64_t left = fai__decode_rows_left(m), fours = m - left;                           \
        if (fours > 0)                                                                             \
            NAME##_4(s, ld_n, q, ld_q, fours, k_rows, rows_ahead, fetch, n, d, scale, key_scale);  \
        /* the rows left: prefetched and fetched already when a 4-row pass ran */                  \
        const int first = fours == 0;                                                              \
        if (left == 2)                                                                             \
            NAME##_2(s + fours * ld_n, ld_n, q + fours * ld_q, ld_q, 2, k_rows,                    \
                     first ? rows_ahead : 0, first ? fetch : NULL, n, d, scale, key_scale);        \
        else if (left == 1)                                                                        \
            NAME##_1(s + fours * ld_n, ld_n, q + fours * ld_q, ld_q, 1, k_rows,                    \
                     first ? rows_ahead : 0, first ? fetch : NULL, n, d, scale, key_scale);        \
        for (int64_t i = 0; i < m; i++) /* the padding keys: masked */                             \
            for (int64_t j = n; j < ld_n; j++)                                                     \
                s[i * ld_n + j] = -INFINITY;                                                       \
    }

/* The K/V dtypes the row kernels are instantiated for: X(suffix, dtype). */
#define FAI_KV_DTYPES(X)                                                                           \
    X(f32, FAI_DTYPE_F32)                                                                          \
    X(f16, FAI_DTYPE_F16)                                                                          \
    X(bf16, FAI_DTYPE_BF16)                                                                        \
    X(i8, FAI_DTYPE_I8)                                                                            \
    X(e4m3, FAI_DTYPE_E4M3)                                                                        \
    X(e5m2, FAI_DTYPE_E5M2)

#define PACK_ROWS_INSTANCE(SUFFIX, DTYPE) DEFINE_PACK_ROWS(pack_rows_##SUFFIX, DTYPE)
FAI_KV_DTYPES(PACK_ROWS_INSTANCE)
#undef PACK_ROWS_INSTANCE

typedef int (*pack_rows_fn)(float *dst, int64_t ld_dst, const void *const *rows, int64_t n,
                            int64_t dim, const float *scales);

/* The dtype is checked by the plan: every fai_dtype has its instance. */
static int pack_rows_simd(float *dst, int64_t ld_dst, const void *const *rows, int64_t n,
                          int64_t dim, fai_dtype dtype, const float *scales) {
#define PACK_ROWS_ENTRY(SUFFIX, DTYPE) [DTYPE] = pack_rows_##SUFFIX,
    static const pack_rows_fn by_dtype[] = {FAI_KV_DTYPES(PACK_ROWS_ENTRY)};
#undef PACK_ROWS_ENTRY
    return by_dtype[dtype](dst, ld_dst, rows, n, dim, scales);
}

#define QK_ROWS_INSTANCE(SUFFIX, DTYPE) DEFINE_QK_ROWS(qk_rows_##SUFFIX, DTYPE)
FAI_KV_DTYPES(QK_ROWS_INSTANCE)
#undef QK_ROWS_INSTANCE

typedef void (*qk_rows_fn)(float *s, int64_t ld_n, const float *q, int64_t ld_q, int64_t m,
                           const void *const *k_rows, int64_t rows_ahead,
                           const fai_row_fetch *fetch, int64_t n, int64_t d, float scale,
                           const float *key_scale);

/* The dtype is checked by the plan: every fai_dtype has its instance. */
static void qk_rows_simd(float *s, int64_t ld_n, const float *q, int64_t ld_q, int64_t m,
                         const void *const *k_rows, int64_t rows_ahead, const fai_row_fetch *fetch,
                         fai_dtype k_dtype, int64_t n, int64_t d, float scale,
                         const float *key_scale) {
#define QK_ROWS_ENTRY(SUFFIX, DTYPE) [DTYPE] = qk_rows_##SUFFIX,
    static const qk_rows_fn by_dtype[] = {FAI_KV_DTYPES(QK_ROWS_ENTRY)};
#undef QK_ROWS_ENTRY
    by_dtype[k_dtype](s, ld_n, q, ld_q, m, k_rows, rows_ahead, fetch, n, d, scale, key_scale);
}

/* O rows in blocks of ROWS rows (4, or the 1 or 2 a call has left) x VECS vectors held in
 * registers across the tile's keys; each V row segment is converted once per block of rows. Edge
 * rows repeat row 0 of the block and are not stored. With `masked`, a row skips keys with P = 0.
 * e4m3 rows are folded into a NaN check as they are read (e4m3_nan_fold): when one held the NaN
 * code, a block returns 1 and stores nothing, and is run again `exact`, checking each row and
 * reading those with the code as NaN. */
#define PV_ROWS_KEYS 4
#define DEFINE_PV_ROWS_BLOCK(NAME, DTYPE, ROWS, VECS, TAIL)                                        \
    static inline int NAME(float *o, int64_t ld_o, const float *p, int64_t ld_n, int64_t rows,     \
                           const void *const *v_rows, int64_t prefetch_end,                        \
                           const fai_row_fetch *fetch, int64_t n, int64_t x0, int64_t dv,          \
                           int exact) {                                                            \
        const int64_t row_bytes = row_bytes_of(dv, DTYPE);                                         \
        const int64_t ahead = fai__prefetch_ahead(row_bytes);                                      \
        const float *o_row[ROWS];                                                                  \
        for (int r = 0; r < ROWS; r++)                                                             \
            o_row[r] = o + (r < rows ? r : 0) * ld_o + x0;                                         \
        /* e4m3 sums in units of 2^8 (the values load_row_unit gives), scaled back when stored:    \
         * powers of two, exact */                                                                 \
        const fvec to_unit = v_set1(1.0f / unit_of(DTYPE)), from_unit = v_set1(unit_of(DTYPE));    \
        fvec acc[ROWS][VECS];                                                                      \
        for (int r = 0; r < ROWS; r++)                                                             \
            for (int c = 0; c < VECS; c++)                                                         \
                acc[r][c] = DTYPE == FAI_DTYPE_E4M3 ? v_mul(v_load(o_row[r] + c * W), to_unit)     \
                                                    : v_load(o_row[r] + c * W);                    \
        const float *p_row[ROWS];                                                                  \
        for (int r = 0; r < ROWS; r++)                                                             \
            p_row[r] = p + (r < rows ? r : 0) * ld_n;                                              \
        nan_state seen = e4m3_nan_none();                                                          \
        /* the prefetches a block of keys at a time, out of the loop the vectors run in */         \
        for (int64_t j0 = 0; j0 < n; j0 += PV_ROWS_KEYS) {                                         \
            const int64_t j_end = j0 + PV_ROWS_KEYS < n ? j0 + PV_ROWS_KEYS : n;                   \
            if (x0 == 0) {                                                                         \
                for (int64_t j = j0 + ahead; j < j_end + ahead && j < prefetch_end; j++)           \
                    fai__prefetch_row(v_rows[j], row_bytes);                                       \
                fai__fetch_for_keys(fetch, j0, j_end, n);                                          \
            }                                                                                      \
            for (int64_t j = j0; j < j_end; j++) {                                                 \
                fvec values[VECS];                                                                 \
                if (TAIL)                                                                          \
                    values[0] = v_mul(load_row_tail(v_rows[j], x0, dv - x0, DTYPE), to_unit);      \
                else if (DTYPE == FAI_DTYPE_E4M3 && exact &&                                       \
                         e4m3_nan_in((const uint8_t *)v_rows[j] + x0, VECS * W))                   \
                    for (int c = 0; c < VECS; c++) /* the NaN code read as NaN */                  \
                        values[c] = v_mul(load_row_full(v_rows[j], x0 + c * W, DTYPE), to_unit);   \
                else {                                                                             \
                    if (DTYPE == FAI_DTYPE_E4M3 && !exact)                                         \
                        seen = e4m3_nan_fold(seen, (const uint8_t *)v_rows[j] + x0, VECS * W);     \
                    for (int c = 0; c < VECS; c++)                                                 \
                        values[c] = load_row_unit(v_rows[j], x0 + c * W, DTYPE);                   \
                }                                                                                  \
                for (int r = 0; r < ROWS; r++) {                                                   \
                    const fvec p_r = v_set1(p_row[r][j]);                                          \
                    for (int c = 0; c < VECS; c++)                                                 \
                        acc[r][c] = v_fma(p_r, values[c], acc[r][c]);                              \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        if (DTYPE == FAI_DTYPE_E4M3 && !TAIL && !exact && e4m3_nan_any(seen)) return 1;            \
        for (int r = 0; r < ROWS; r++)                                                             \
            if (r < rows)                                                                          \
                for (int c = 0; c < VECS; c++)                                                     \
                    v_store(o + r * ld_o + x0 + c * W,                                             \
                            DTYPE == FAI_DTYPE_E4M3 ? v_mul(acc[r][c], from_unit) : acc[r][c]);    \
        return 0;                                                                                  \
    }

/* The blocks of one row count: FAI_PV_ROWS_VECS vectors wide for 4 rows, twice that for 1 or 2
 * (no more accumulators than the 4-row block holds), then one vector, then the tail. */
#define DEFINE_PV_ROWS_BLOCKS(NAME, DTYPE, ROWS)                                                   \
    DEFINE_PV_ROWS_BLOCK(NAME##_wide, DTYPE, ROWS,                                                 \
                         ((ROWS) == 4 ? FAI_PV_ROWS_VECS : 2 * FAI_PV_ROWS_VECS), 0)               \
    DEFINE_PV_ROWS_BLOCK(NAME##_one, DTYPE, ROWS, 1, 0)                                            \
    DEFINE_PV_ROWS_BLOCK(NAME##_tail, DTYPE, ROWS, 1, 1)                                           \
    static void NAME(float *o_block, int64_t ld_o, const float *p_block, int64_t ld_n,             \
                     int64_t rows, const void *const *v_rows, int64_t list_end,                    \
                     const fai_row_fetch *fetch_block, int64_t n, int64_t dv) {                    \
        enum { WIDE = (ROWS) == 4 ? FAI_PV_ROWS_VECS : 2 * FAI_PV_ROWS_VECS };                     \
        int64_t x0 = 0;                                                                            \
        for (; x0 + WIDE * W <= dv; x0 += WIDE * W)                                                \
            if (NAME##_wide(o_block, ld_o, p_block, ld_n, rows, v_rows, list_end, fetch_block, n,  \
                            x0, dv, 0))                                                            \
                NAME##_wide(o_block, ld_o, p_block, ld_n, rows, v_rows, list_end, fetch_block, n,  \
                            x0, dv, 1);                                                            \
        for (; x0 + W <= dv; x0 += W)                                                              \
            if (NAME##_one(o_block, ld_o, p_block, ld_n, rows, v_rows, list_end, fetch_block, n,   \
                           x0, dv, 0))                                                             \
                NAME##_one(o_block, ld_o, p_block, ld_n, rows, v_rows, list_end, fetch_block, n,   \
                           x0, dv, 1);                                                             \
        if (x0 < dv)                                                                               \
            NAME##_tail(o_block, ld_o, p_block, ld_n, rows, v_rows, list_end, fetch_block, n, x0,  \
                        dv, 0);                                                                    \
    }

#define DEFINE_PV_ROWS(NAME, DTYPE)                                                                \
    DEFINE_PV_ROWS_BLOCKS(NAME##_4, DTYPE, 4)                                                      \
    DEFINE_PV_ROWS_BLOCKS(NAME##_2, DTYPE, 2)                                                      \
    DEFINE_PV_ROWS_BLOCKS(NAME##_1, DTYPE, 1)                                                      \
    static void NAME(float *o, int64_t ld_o, const float *p, int64_t ld_n, int64_t m,              \
                     const void *const *v_rows, int64_t rows_ahead, const fai_row_fetch *fetch,    \
                     int64_t n, int64_t dv, int masked) {                                          \
        const int64_t row_bytes = row_bytes_of(dv, DTYPE);                                         \
        const int64_t ahead = fai__prefetch_ahead(row_bytes);                                      \
        if (masked) {                                                                              \
            for (int64_t i = 0; i < m; i++)                                                        \
                for (int64_t j = 0; j < n; j++) {                                                  \
                    if (i == 0 && j + ahead < n + rows_ahead)                                      \
                        fai__prefetch_row(v_rows[j + ahead], row_bytes);                           \
                    if (i == 0) fai__fetch_for_keys(fetch, j, j + 1, n);                           \
                    const float p_scalar = p[i * ld_n + j];                                        \
                    if (p_scalar == 0.0f) continue;                                                \
                    const fvec p_v = v_set1(p_scalar);                                             \
                    float *o_row = o + i * ld_o;                                                   \
                    int64_t x = 0;                                                                 \
                    for (; x + W <= dv; x += W)                                                    \
                        v_store(o_row + x, v_fma(p_v, load_row_full(v_rows[j], x, DTYPE),          \
                                                 v_load(o_row + x)));                              \
                    if (x < dv)                                                                    \
                        v_store(o_row + x, v_fma(p_v, load_row_tail(v_rows[j], x, dv - x, DTYPE),  \
                                                 v_load(o_row + x)));                              \
                }                                                                                  \
            return;                                                                                \
        }                                                                                          \
        for (int64_t i0 = 0; i0 < m; i0 += 4) {                                                    \
            const int64_t rows = m - i0 < 4 ? m - i0 : 4;                                          \
            float *o_block = o + i0 * ld_o;                                                        \
            const float *p_block = p + i0 * ld_n;                                                  \
            const int64_t list_end = n + rows_ahead;                                               \
            const fai_row_fetch *fetch_block = i0 == 0 ? fetch : NULL; /* once */                  \
            if (rows == 1)                                                                         \
                NAME##_1(o_block, ld_o, p_block, ld_n, rows, v_rows, list_end, fetch_block, n,     \
                         dv);                                                                      \
            else if (rows == 2)                                                                    \
                NAME##_2(o_block, ld_o, p_block, ld_n, rows, v_rows, list_end, fetch_block, n,     \
                         dv);                                                                      \
            else /* 3 rows repeat one, as fai__decode_rows_left splits */                          \
                NAME##_4(o_block, ld_o, p_block, ld_n, rows, v_rows, list_end, fetch_block, n,     \
                         dv);                                                                      \
        }                                                                                          \
    }

#define PV_ROWS_INSTANCE(SUFFIX, DTYPE) DEFINE_PV_ROWS(pv_rows_##SUFFIX, DTYPE)
FAI_KV_DTYPES(PV_ROWS_INSTANCE)
#undef PV_ROWS_INSTANCE

typedef void (*pv_rows_fn)(float *o, int64_t ld_o, const float *p, int64_t ld_n, int64_t m,
                           const void *const *v_rows, int64_t rows_ahead,
                           const fai_row_fetch *fetch, int64_t n, int64_t dv, int masked);

static void pv_rows_simd(float *o, int64_t ld_o, const float *p, int64_t ld_n, int64_t m,
                         const void *const *v_rows, int64_t rows_ahead, const fai_row_fetch *fetch,
                         fai_dtype v_dtype, int64_t n, int64_t dv, int masked) {
#define PV_ROWS_ENTRY(SUFFIX, DTYPE) [DTYPE] = pv_rows_##SUFFIX,
    static const pv_rows_fn by_dtype[] = {FAI_KV_DTYPES(PV_ROWS_ENTRY)};
#undef PV_ROWS_ENTRY
    by_dtype[v_dtype](o, ld_o, p, ld_n, m, v_rows, rows_ahead, fetch, n, dv, masked);
}

/* The online softmax on row-major scores (decode tiles): one row at a time, W keys per vector;
 * columns [n, ld_n) hold -inf. NaN as in softmax_simd: the max skips NaN scores, their P and so
 * the sum are NaN, and a NaN sum makes the row's max NaN. */
static void softmax_rows_simd(float *s, int64_t ld_n, int64_t m, float *row_max, float *row_sum,
                              float *row_alpha, const float *p_scale) {
    for (int64_t i = 0; i < m; i++) {
        float *row = s + i * ld_n;
        fvec tile_max = v_set1(-INFINITY);
        for (int64_t j = 0; j < ld_n; j += W)
            tile_max = v_max(v_load(row + j), tile_max);
        const float old_max = row_max[i], top = v_hmax(tile_max);
        /* a NaN top (NEON's max keeps NaN) or a NaN old max (the comparison fails) wins */
        const float new_max = top > old_max || isnan(top) ? top : old_max;
        if (new_max == -INFINITY) {
            /* nothing visible yet, unless a score is NaN: scores here are -inf (P = 0) or NaN
             * (P = NaN, which reaches O through PV) */
            fvec sum = v_zero();
            for (int64_t j = 0; j < ld_n; j += W) {
                const fvec x = v_load(row + j);
                const fvec p = v_select(v_eq(x, x), v_zero(), x);
                v_store(row + j, p_scale ? v_mul(p, v_load(p_scale + j)) : p);
                sum = v_add(sum, p);
            }
            row_alpha[i] = 1.0f;
            row_sum[i] += v_hsum(sum);
            if (isnan(row_sum[i])) row_max[i] = row_sum[i];
            continue;
        }
        const fvec shift = v_set1(new_max);
        fvec sum = v_zero();
        for (int64_t j = 0; j < ld_n; j += W) {
            const fvec p = v_exp(v_sub(v_load(row + j), shift));
            v_store(row + j, p_scale ? v_mul(p, v_load(p_scale + j)) : p);
            sum = v_add(sum, p);
        }
        const float alpha = old_max == new_max ? 1.0f : expf(old_max - new_max);
        row_alpha[i] = alpha;
        row_sum[i] = row_sum[i] * alpha + v_hsum(sum);
        row_max[i] = isnan(row_sum[i]) ? row_sum[i] : new_max;
    }
}

static void store_row_simd(void *dst, fai_dtype dtype, const float *src, int64_t dim, float mul) {
    const fvec scale = v_set1(mul);
    int64_t x = 0;
    if (dtype == FAI_DTYPE_F32) {
        float *out = dst;
        for (; x + W <= dim; x += W)
            v_store(out + x, v_mul(v_load(src + x), scale));
    } else if (dtype == FAI_DTYPE_BF16) {
        for (; x + W <= dim; x += W)
            v_store_bf16((uint16_t *)dst + x, v_mul(v_load(src + x), scale));
    } else {
        for (; x + W <= dim; x += W)
            v_store_f16_sat((uint16_t *)dst + x, v_mul(v_load(src + x), scale));
    }
    for (; x < dim; x++) /* the tail with the portable rounding, which the vectors match */
        fai__store_element(dst, x, dtype, src[x] * mul);
}

static void init_simd_table(fai_cntx *cntx) {
    fai__cntx_init_ref(cntx);
    cntx->name = FAI_SIMD_NAME;
    cntx->simd_width = W;
    cntx->pack_q = pack_q_simd;
    cntx->pack_rows = pack_rows_simd;
    cntx->qk = qk_simd;
    cntx->softmax = softmax_simd;
    cntx->rescale_o = rescale_o_simd;
    cntx->pv = pv_simd;
    cntx->store_row = store_row_simd;
    cntx->exp_array = exp_array_simd;
    cntx->qk_rows = qk_rows_simd;
    cntx->softmax_rows = softmax_rows_simd;
    cntx->pv_rows = pv_rows_simd;
    cntx->mods_t = mods_t_simd;
    cntx->mods_rows = mods_rows_simd;
    cntx->tanh_array = tanh_array_simd;
    cntx->scale_keys_t = scale_keys_t_simd;
    cntx->scale_keys_rows = scale_keys_rows_simd;
}
