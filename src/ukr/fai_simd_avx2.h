/* The SIMD vocabulary of fai_ukr_body.h on AVX2 + FMA (8 f32 lanes) with F16C conversions. */
#ifndef FAI_SIMD_AVX2_H
#define FAI_SIMD_AVX2_H

#include <immintrin.h>
#include <string.h>
#include <math.h>
#include <stdint.h>

#define FAI_SIMD_NAME "avx2"
#define FAI_SIMD_WIDTH 8
/* Register blocks (16 vector registers). */
#define FAI_QK_KEYS 6
#define FAI_PV_ROWS 3
#define FAI_PV_VECS 4
#define FAI_QK_ROWS_KEYS 2 /* decode's QK: 4 rows x 2 keys of accumulators */
#define FAI_PV_ROWS_VECS 2 /* decode's PV: 4 rows x 2 vectors of O, 2 of V, the broadcast P */

typedef __m256 fvec;
typedef __m256 fmask;

static inline fvec v_zero(void) { return _mm256_setzero_ps(); }
static inline fvec v_set1(float x) { return _mm256_set1_ps(x); }
static inline fvec v_load(const float *p) { return _mm256_loadu_ps(p); }
/* p[0..3] in every group of 4 lanes */
static inline fvec v_load_repeat4(const float *p) { return _mm256_broadcast_ps((const __m128 *)p); }
static inline void v_store(float *p, fvec v) { _mm256_storeu_ps(p, v); }
static inline fvec v_fma(fvec a, fvec b, fvec c) { return _mm256_fmadd_ps(a, b, c); }
static inline fvec v_mul(fvec a, fvec b) { return _mm256_mul_ps(a, b); }
static inline fvec v_add(fvec a, fvec b) { return _mm256_add_ps(a, b); }
static inline fvec v_sub(fvec a, fvec b) { return _mm256_sub_ps(a, b); }
/* max(a, b) with NaN in b propagated (x86 returns the second operand when either is NaN) */
static inline fvec v_max(fvec a, fvec b) { return _mm256_max_ps(a, b); }
static inline fvec v_min(fvec a, fvec b) { return _mm256_min_ps(a, b); }
static inline fvec v_round(fvec a) {
    return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline fvec v_exp2i(fvec k) {
    const __m256i bits =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_castsi256_ps(bits);
}
static inline fmask v_lt(fvec a, fvec b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
static inline fmask v_eq(fvec a, fvec b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
static inline fvec v_select(fmask mask, fvec yes, fvec no) {
    return _mm256_blendv_ps(no, yes, mask);
}
/* every lane of the mask set */
static inline int v_all(fmask mask) { return _mm256_movemask_ps(mask) == 0xFF; }
/* 1 / a to about an ulp: the 12-bit estimate and two Newton steps (no divider on the path) */
static inline fvec v_recip(fvec a) {
    const fvec one = _mm256_set1_ps(1.0f);
    fvec r = _mm256_rcp_ps(a);
    r = _mm256_fmadd_ps(r, _mm256_fnmadd_ps(a, r, one), r);
    return _mm256_fmadd_ps(r, _mm256_fnmadd_ps(a, r, one), r);
}
static inline float v_hsum(fvec v) {
    const __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 quarter = _mm_add_ps(half, _mm_movehl_ps(half, half));
    return _mm_cvtss_f32(_mm_add_ss(quarter, _mm_movehdup_ps(quarter)));
}
/* The lane sums of 8 vectors at once, out[k] of v[k]: pairwise additions within 128-bit halves,
 * then the halves added, 21 instructions where 8 v_hsum take 48. */
#define FAI_SIMD_HSUM8 1
static inline void v_hsum8(const fvec v[8], float out[8]) {
    const __m256 low = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const __m256 high = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    /* low: v0..v3's sums over lanes 0-3, then over lanes 4-7; high likewise for v4..v7 */
    v_store(out, _mm256_add_ps(_mm256_permute2f128_ps(low, high, 0x20),
                               _mm256_permute2f128_ps(low, high, 0x31)));
}
/* NaN in v may or may not show, by lane: the softmax keeps NaN out of the vectors it reduces */
static inline float v_hmax(fvec v) {
    const __m128 half = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 quarter = _mm_max_ps(half, _mm_movehl_ps(half, half));
    return _mm_cvtss_f32(_mm_max_ss(quarter, _mm_movehdup_ps(quarter)));
}
static inline fvec v_load_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}
static inline fvec v_load_bf16(const uint16_t *p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
/* W int8 values as f32 (exact) */
static inline fvec v_load_i8(const int8_t *p) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)));
}
/* W fp8 e5m2 values as f32 (exact): each is the upper byte of a binary16 */
static inline fvec v_load_e5m2(const uint8_t *p) {
    const __m128i bytes = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)p));
    return _mm256_cvtph_ps(_mm_slli_epi16(bytes, 8));
}
/* W fp8 e4m3 codes as f32 values times 2^-8, the NaN code as +-1.875, as the AVX-512 vocabulary
 * reads them (each code sign-extended to 16 bits, shifted left by 7, the sign's copy in bit 14
 * cleared: a binary16 with the bias 8 more) */
static inline fvec v_load_e4m3_unit(const uint8_t *p) {
    const __m128i codes = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)p));
    return _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(codes, 7), _mm_set1_epi16((short)0xBF80)));
}
/* 2W codes as v_load_e4m3_unit reads them, into out[0] and out[1]: the widening, shift and mask
 * done once on 16 codes */
#define FAI_SIMD_E4M3_PAIR 1
static inline void v_load_e4m3_unit2(const uint8_t *p, fvec out[2]) {
    const __m256i codes = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)p));
    const __m256i halves =
        _mm256_and_si256(_mm256_slli_epi16(codes, 7), _mm256_set1_epi16((short)0xBF80));
    out[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(halves));
    out[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(halves, 1));
}
/* Whether any of n e4m3 codes from p is the NaN code S.1111.111: 32 codes a comparison, the
 * rest one by one */
#define FAI_SIMD_E4M3_NAN 1
static inline int v_e4m3_nan_in(const uint8_t *p, int64_t n) {
    const __m256i low7 = _mm256_set1_epi8(0x7f);
    __m256i seen = _mm256_setzero_si256();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        seen = _mm256_or_si256(
            seen,
            _mm256_cmpeq_epi8(
                _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(const void *)(p + i)), low7),
                low7));
    int nan = _mm256_movemask_epi8(seen) != 0;
    for (; i < n; i++)
        nan |= (p[i] & 0x7f) == 0x7f;
    return nan;
}
/* A running check for the e4m3 NaN code across many rows, as the AVX-512 vocabulary's: 32 codes
 * a step, the last ones copied out (bytes past n are not read). */
#define FAI_SIMD_E4M3_FOLD 1
#define FAI_SIMD_E4M3_FOLD_BYTES 32 /* a vector of codes */
typedef __m256i v_nan_state;
static inline v_nan_state v_e4m3_nan_none(void) { return _mm256_setzero_si256(); }
static inline v_nan_state v_e4m3_nan_fold(v_nan_state seen, const uint8_t *p, int64_t n) {
    const __m256i sign = _mm256_set1_epi8((char)0x80);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        seen = _mm256_max_epu8(
            seen,
            _mm256_or_si256(_mm256_loadu_si256((const __m256i *)(const void *)(p + i)), sign));
    if (i + 16 <= n) { /* (decode's PV folds 16 codes a row) */
        const __m128i half = _mm_loadu_si128((const __m128i *)(const void *)(p + i));
        seen = _mm256_max_epu8(
            seen, _mm256_or_si256(_mm256_inserti128_si256(_mm256_setzero_si256(), half, 0), sign));
        i += 16;
    }
    if (i < n) {
        uint8_t rest[32] = {0};
        memcpy(rest, p + i, (size_t)(n - i));
        seen = _mm256_max_epu8(
            seen, _mm256_or_si256(_mm256_loadu_si256((const __m256i *)(const void *)rest), sign));
    }
    return seen;
}
static inline int v_e4m3_nan_any(v_nan_state seen) {
    return _mm256_movemask_epi8(_mm256_cmpeq_epi8(seen, _mm256_set1_epi8(-1))) != 0;
}
/* W fp8 e4m3 values as f32 (exact), the NaN code as NaN */
static inline fvec v_load_e4m3(const uint8_t *p) {
    const fvec v = _mm256_mul_ps(v_load_e4m3_unit(p), v_set1(256.0f));
    const fvec magnitude = _mm256_andnot_ps(v_set1(-0.0f), v);
    const fvec nan = _mm256_cmp_ps(magnitude, v_set1(480.0f), _CMP_EQ_OQ);
    return _mm256_blendv_ps(v, v_set1(NAN), nan);
}
/* 8 32-bit lanes (each below 2^16) as 8 16-bit values */
static inline __m128i narrow_u32(__m256i x) {
    const __m256i packed = _mm256_packus_epi32(x, x); /* lanes 0-3, 0-3 | 4-7, 4-7 */
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}
/* v rounded to nearest even into bf16 (a NaN stays a quiet NaN), as fai__f32_to_bf16 does */
static inline void v_store_bf16(uint16_t *p, fvec v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i upper = _mm256_srli_epi32(bits, 16);
    const __m256i rounding =
        _mm256_add_epi32(_mm256_and_si256(upper, _mm256_set1_epi32(1)), _mm256_set1_epi32(0x7fff));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, rounding), 16);
    const __m256i quiet = _mm256_or_si256(upper, _mm256_set1_epi32(0x40));
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    const __m256i r = _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(rounded), _mm256_castsi256_ps(quiet), nan));
    _mm_storeu_si128((__m128i *)(void *)p, narrow_u32(r));
}
/* v rounded to nearest even into f16, finite values saturated at +-65504, +-Inf kept and NaN as
 * the canonical quiet NaN of its sign, as fai__f32_to_f16_sat does */
static inline void v_store_f16_sat(uint16_t *p, fvec v) {
    const __m256 magnitude = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
    const __m256 finite = _mm256_cmp_ps(magnitude, _mm256_set1_ps(INFINITY), _CMP_LT_OQ);
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    const fvec clamped = _mm256_min_ps(_mm256_max_ps(v, v_set1(-65504.0f)), v_set1(65504.0f));
    const __m128i h =
        _mm256_cvtps_ph(_mm256_blendv_ps(v, clamped, finite), _MM_FROUND_TO_NEAREST_INT);
    const __m256i sign =
        _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(v), 16), _mm256_set1_epi32(0x8000));
    const __m128i quiet = narrow_u32(_mm256_or_si256(sign, _mm256_set1_epi32(0x7e00)));
    const __m128i nan16 = narrow_u32(_mm256_srli_epi32(_mm256_castps_si256(nan), 16));
    _mm_storeu_si128((__m128i *)(void *)p, _mm_blendv_epi8(h, quiet, nan16));
}

#endif
