/* The SIMD vocabulary of fai_ukr_body.h on AVX-512F (16 f32 lanes) with F16C conversions. */
#ifndef FAI_SIMD_AVX512_H
#define FAI_SIMD_AVX512_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#define FAI_SIMD_NAME "avx512"
#define FAI_SIMD_WIDTH 16
/* Register blocks (32 vector registers): QK keys x vectors of query rows, PV rows x vectors. */
#define FAI_QK_KEYS 12
#define FAI_QK_KEYS_4VECS 6 /* and 6 keys x 4 vectors where the tile has 4 vectors of rows */
#define FAI_PV_ROWS 6       /* 6 x 4 vectors of O: 24 FMAs for 10 loads per key */
#define FAI_PV_VECS 4
#define FAI_QK_ROWS_KEYS 4 /* decode's QK: 4 rows x 4 keys of accumulators */
#define FAI_PV_ROWS_VECS 4 /* decode's PV: 4 rows x 4 vectors of O */

typedef __m512 fvec;
typedef __mmask16 fmask;

static inline fvec v_zero(void) { return _mm512_setzero_ps(); }
static inline fvec v_set1(float x) { return _mm512_set1_ps(x); }
static inline fvec v_load(const float *p) { return _mm512_loadu_ps(p); }
/* p[0..3] in every group of 4 lanes */
static inline fvec v_load_repeat4(const float *p) {
    return _mm512_broadcast_f32x4(_mm_loadu_ps(p));
}
static inline void v_store(float *p, fvec v) { _mm512_storeu_ps(p, v); }
static inline fvec v_fma(fvec a, fvec b, fvec c) { return _mm512_fmadd_ps(a, b, c); }
static inline fvec v_mul(fvec a, fvec b) { return _mm512_mul_ps(a, b); }
static inline fvec v_add(fvec a, fvec b) { return _mm512_add_ps(a, b); }
static inline fvec v_sub(fvec a, fvec b) { return _mm512_sub_ps(a, b); }
/* max(a, b) with NaN in b propagated (x86 returns the second operand when either is NaN) */
static inline fvec v_max(fvec a, fvec b) { return _mm512_max_ps(a, b); }
static inline fvec v_min(fvec a, fvec b) { return _mm512_min_ps(a, b); }
static inline fvec v_round(fvec a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
/* 2^k for integral k in [-126, 127] */
static inline fvec v_exp2i(fvec k) {
    const __m512i bits =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23);
    return _mm512_castsi512_ps(bits);
}
/* p x 2^k for integral k, subnormal results included (see v_scale2i in fai_ukr_body.h) */
#define FAI_SIMD_SCALE2I 1
static inline fvec v_scale2i(fvec p, fvec k) { return _mm512_scalef_ps(p, k); }
/* v_exp's rounding and scaling with its cut lanes masked off (see fai_ukr_body.h) */
#define FAI_SIMD_EXP_MASKED 1
static inline fvec v_round_unless(fmask gone, fvec t) {
    return _mm512_maskz_roundscale_ps((__mmask16)~gone, t,
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline fvec v_scale2i_unless(fmask gone, fvec p, fvec k) {
    return _mm512_maskz_scalef_ps((__mmask16)~gone, p, k);
}
static inline fmask v_lt(fvec a, fvec b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
static inline fmask v_eq(fvec a, fvec b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
/* where mask: yes, else no */
static inline fvec v_select(fmask mask, fvec yes, fvec no) {
    return _mm512_mask_blend_ps(mask, no, yes);
}
/* every lane of the mask set */
static inline int v_all(fmask mask) { return mask == 0xFFFF; }
/* 1 / a to about an ulp: the 14-bit estimate and a Newton step (no divider on the path) */
static inline fvec v_recip(fvec a) {
    const fvec r = _mm512_rcp14_ps(a);
    return _mm512_fmadd_ps(r, _mm512_fnmadd_ps(a, r, _mm512_set1_ps(1.0f)), r);
}
static inline float v_hsum(fvec v) { return _mm512_reduce_add_ps(v); }
/* The sums of 16 vectors' lanes at once, out[k] = sum of v[k]: a tree of pairwise adds of
 * interleaved halves (45 instructions, where 16 separate reductions take about 130). */
#define FAI_SIMD_HSUM16 1
static inline void v_hsum16(const fvec v[16], float out[16]) {
    fvec pairs[8], quads[4], eights[2];
    for (int k = 0; k < 8; k++) /* per 128-bit block: [a0+a2, b0+b2, a1+a3, b1+b3] */
        pairs[k] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]),
                                 _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
    for (int k = 0; k < 4; k++) { /* per block: the block's sums of 4 vectors */
        const __m512d a = _mm512_castps_pd(pairs[2 * k]), b = _mm512_castps_pd(pairs[2 * k + 1]);
        quads[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                                 _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    for (int k = 0; k < 2; k++) /* blocks 0+1 and 2+3 of each of two */
        eights[k] = _mm512_add_ps(_mm512_shuffle_f32x4(quads[2 * k], quads[2 * k + 1], 0x88),
                                  _mm512_shuffle_f32x4(quads[2 * k], quads[2 * k + 1], 0xDD));
    v_store(out, _mm512_add_ps(_mm512_shuffle_f32x4(eights[0], eights[1], 0x88),
                               _mm512_shuffle_f32x4(eights[0], eights[1], 0xDD)));
}
/* NaN in v may or may not show, by lane: the softmax keeps NaN out of the vectors it reduces */
static inline float v_hmax(fvec v) { return _mm512_reduce_max_ps(v); }
static inline fvec v_load_f16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
}
static inline fvec v_load_bf16(const uint16_t *p) {
    const __m512i wide =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
/* W int8 values as f32 (exact) */
static inline fvec v_load_i8(const int8_t *p) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)));
}
/* W fp8 e5m2 values as f32 (exact): each is the upper byte of a binary16 */
static inline fvec v_load_e5m2(const uint8_t *p) {
    const __m256i bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm512_cvtph_ps(_mm256_slli_epi16(bytes, 8));
}
/* W fp8 e4m3 codes as f32 values times 2^-8 (exact, subnormals included), the NaN code
 * S.1111.111 as +-1.875 (2^-8 of 480, which no e4m3 value is). Each code sign-extended to 16 bits
 * and shifted left by 7 holds the code's exponent and mantissa where a binary16 has them (whose
 * bias is 8 more than e4m3's) and its sign in the sign bit; bit 14, a copy of the sign, is
 * cleared. */
static inline fvec v_load_e4m3_unit(const uint8_t *p) {
    const __m256i codes = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm512_cvtph_ps(
        _mm256_and_si256(_mm256_slli_epi16(codes, 7), _mm256_set1_epi16((short)0xBF80)));
}
/* 2W codes as v_load_e4m3_unit reads them, into out[0] and out[1]: the widening, shift and mask
 * done once on 32 codes, 3 instructions per W codes instead of 4 */
#define FAI_SIMD_E4M3_PAIR 1
static inline void v_load_e4m3_unit2(const uint8_t *p, fvec out[2]) {
    const __m512i codes =
        _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)p));
    const __m512i halves =
        _mm512_and_si512(_mm512_slli_epi16(codes, 7), _mm512_set1_epi16((short)0xBF80));
    out[0] = _mm512_cvtph_ps(_mm512_castsi512_si256(halves));
    out[1] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(halves, 1));
}
/* Whether any of n e4m3 codes from p is the NaN code S.1111.111: 64 codes a comparison (bytes
 * past n are not read) */
#define FAI_SIMD_E4M3_NAN 1
static inline int v_e4m3_nan_in(const uint8_t *p, int64_t n) {
    const __m512i low7 = _mm512_set1_epi8(0x7f);
    __mmask64 seen = 0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
        seen |= _mm512_cmpeq_epi8_mask(
            _mm512_and_si512(_mm512_loadu_si512((const void *)(p + i)), low7), low7);
    if (i < n) {
        const __mmask64 rest = (__mmask64)((UINT64_C(1) << (n - i)) - 1);
        seen |= _mm512_mask_cmpeq_epi8_mask(
            rest, _mm512_and_si512(_mm512_maskz_loadu_epi8(rest, p + i), low7), low7);
    }
    return seen != 0;
}
/* A running check for the e4m3 NaN code across many rows, one branch at the end instead of one
 * per row: each code or-ed with 0x80 is 0xff only for the NaN code, and the bytes' maximum keeps
 * it; 2 instructions per 64 codes (bytes past n are not read). */
#define FAI_SIMD_E4M3_FOLD 1
#define FAI_SIMD_E4M3_FOLD_BYTES 64 /* a vector of codes */
typedef __m512i v_nan_state;
static inline v_nan_state v_e4m3_nan_none(void) { return _mm512_setzero_si512(); }
static inline v_nan_state v_e4m3_nan_fold(v_nan_state seen, const uint8_t *p, int64_t n) {
    const __m512i sign = _mm512_set1_epi8((char)0x80);
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
        seen =
            _mm512_max_epu8(seen, _mm512_or_si512(_mm512_loadu_si512((const void *)(p + i)), sign));
    if (i < n) {
        const __mmask64 rest = (__mmask64)((UINT64_C(1) << (n - i)) - 1);
        seen = _mm512_max_epu8(seen, _mm512_or_si512(_mm512_maskz_loadu_epi8(rest, p + i), sign));
    }
    return seen;
}
static inline int v_e4m3_nan_any(v_nan_state seen) {
    return _mm512_cmpeq_epi8_mask(seen, _mm512_set1_epi8(-1)) != 0;
}
/* W fp8 e4m3 values as f32 (exact), the NaN code as NaN */
static inline fvec v_load_e4m3(const uint8_t *p) {
    const fvec v = _mm512_mul_ps(v_load_e4m3_unit(p), v_set1(256.0f));
    const __mmask16 nan = _mm512_cmp_ps_mask(_mm512_abs_ps(v), v_set1(480.0f), _CMP_EQ_OQ);
    return _mm512_mask_blend_ps(nan, v, v_set1(NAN));
}
/* v rounded to nearest even into bf16 (a NaN stays a quiet NaN), as fai__f32_to_bf16 does */
static inline void v_store_bf16(uint16_t *p, fvec v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i upper = _mm512_srli_epi32(bits, 16);
    const __m512i rounding =
        _mm512_add_epi32(_mm512_and_si512(upper, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7fff));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(bits, rounding), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_or_epi32(r, nan, upper, _mm512_set1_epi32(0x40));
    _mm256_storeu_si256((__m256i *)(void *)p, _mm512_cvtepi32_epi16(r));
}
/* v rounded to nearest even into f16, finite values saturated at +-65504, +-Inf kept and NaN as
 * the canonical quiet NaN of its sign, as fai__f32_to_f16_sat does */
static inline void v_store_f16_sat(uint16_t *p, fvec v) {
    const __mmask16 finite = _mm512_cmp_ps_mask(_mm512_abs_ps(v), v_set1(INFINITY), _CMP_LT_OQ);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const fvec clamped = _mm512_min_ps(_mm512_max_ps(v, v_set1(-65504.0f)), v_set1(65504.0f));
    const fvec y = _mm512_mask_blend_ps(finite, v, clamped);
    const __m256i h = _mm512_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512i sign =
        _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(v), 16), _mm512_set1_epi32(0x8000));
    const __m256i quiet = _mm512_cvtepi32_epi16(_mm512_or_si512(sign, _mm512_set1_epi32(0x7e00)));
    _mm256_storeu_si256((__m256i *)(void *)p, _mm256_mask_blend_epi16(nan, h, quiet));
}

/* dst[p * dst_stride + j] = word p of rows[j], for 16 rows of 16 32-bit words (f32 values, or
 * bf16 pairs: only 2-byte aligned). */
#define FAI_SIMD_TRANSPOSE16 1
static inline void v_transpose16_u32(const void *const *rows, uint32_t *dst, int64_t dst_stride) {
    __m512i r[16], t[16];
    for (int j = 0; j < 16; j++)
        r[j] = _mm512_loadu_si512(rows[j]);
    for (int j = 0; j < 16; j += 2) { /* 2 x 2 blocks of words */
        t[j] = _mm512_unpacklo_epi32(r[j], r[j + 1]);
        t[j + 1] = _mm512_unpackhi_epi32(r[j], r[j + 1]);
    }
    for (int j = 0; j < 16; j += 4) { /* 4 x 4 blocks */
        r[j] = _mm512_unpacklo_epi64(t[j], t[j + 2]);
        r[j + 1] = _mm512_unpackhi_epi64(t[j], t[j + 2]);
        r[j + 2] = _mm512_unpacklo_epi64(t[j + 1], t[j + 3]);
        r[j + 3] = _mm512_unpackhi_epi64(t[j + 1], t[j + 3]);
    }
    /* r[4b + c] now holds, in 128-bit lane L, words p = 4L + c of rows 4b .. 4b + 3 */
    for (int c = 0; c < 4; c++) {
        /* lanes (L0, L1) of rows 0-3 and 4-7, then of 8-11 and 12-15 */
        const __m512i a0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x44);
        const __m512i a1 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xee);
        const __m512i b0 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x44);
        const __m512i b1 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xee);
        /* word p = 4L + c of all 16 rows: lane L of blocks 0, 1, 2, 3 */
        t[c] = _mm512_shuffle_i32x4(a0, b0, 0x88);      /* L = 0 */
        t[4 + c] = _mm512_shuffle_i32x4(a0, b0, 0xdd);  /* L = 1 */
        t[8 + c] = _mm512_shuffle_i32x4(a1, b1, 0x88);  /* L = 2 */
        t[12 + c] = _mm512_shuffle_i32x4(a1, b1, 0xdd); /* L = 3 */
    }
    for (int p = 0; p < 16; p++)
        _mm512_storeu_si512(dst + p * dst_stride, t[p]);
}

#endif
