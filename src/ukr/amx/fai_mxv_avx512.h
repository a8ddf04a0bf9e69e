/* The vector vocabulary of fai_mx_body.h on AVX-512 (F, BW, DQ, BF16): the operations of
 * fai_simd_avx512.h and the few the matrix engine's packing and softmax add. Each computes what
 * its fai_mxv_portable.h counterpart computes. */
#ifndef FAI_MXV_AVX512_H
#define FAI_MXV_AVX512_H

#include "fai.h"
#include "ukr/fai_simd_avx512.h"

#define W FAI_SIMD_WIDTH

/* 2^t for t >= cut, 0 below (and for -inf), NaN for NaN: 2^f for f = t - floor(t) in [0, 1) by
 * the polynomial c (degree 4, c[0] first), scaled by 2^floor(t) with vscalefps (subnormal results
 * too); vreduceps gives f in one instruction. The lanes below the cut are masked off, never
 * computed: a result in or near the denormal range costs a microcode assist of hundreds of
 * cycles, and masked scores (-inf) are common (see mx_softmax for the cuts). */
static inline fvec v_exp2_cut(fvec t, const float c[5], float cut) {
    const __mmask16 keep = _mm512_cmp_ps_mask(t, _mm512_set1_ps(cut), _CMP_NLT_UQ);
    const fvec f = _mm512_maskz_reduce_ps(keep, t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    fvec p = _mm512_set1_ps(c[4]);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c[3]));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c[2]));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c[1]));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c[0]));
    return _mm512_maskz_scalef_ps(keep, p, t);
}

/* nonzero when some lane of a is greater than the same lane of b */
static inline int v_any_gt(fvec a, fvec b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ) != 0; }

/* the odd 16-bit words of a then b: the bf16 truncations of 32 f32 values, in order */
static inline __m512i bf16_trunc32(fvec a, fvec b) {
    const __m512i odd =
        _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,
                         25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    return _mm512_permutex2var_epi16(_mm512_castps_si512(a), odd, _mm512_castps_si512(b));
}

static inline fvec bf16_trunc_f32(fvec a) {
    return _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32((int)0xffff0000u)));
}

/* Splits 2 x W values x (a, then b) into bf16 hi = x truncated and lo = x - hi rounded to nearest
 * even, 2W of each, in order: hi + lo is x to 2^-16 relative. */
static inline void v_split_store(fvec a, fvec b, uint16_t *hi, uint16_t *lo) {
    _mm512_storeu_si512(hi, bf16_trunc32(a, b));
    const fvec lo_a = _mm512_sub_ps(a, bf16_trunc_f32(a));
    const fvec lo_b = _mm512_sub_ps(b, bf16_trunc_f32(b));
    _mm512_storeu_si512(lo, (__m512i)_mm512_cvtne2ps_pbh(lo_b, lo_a));
}

/* 2 x W values (a, then b) rounded to nearest even into bf16, in order (P above 2^-118 is
 * normal, so the instruction's flushing of denormals never applies). */
static inline void v_store_bf16_rounded(fvec a, fvec b, uint16_t *out) {
    _mm512_storeu_si512(out, (__m512i)_mm512_cvtne2ps_pbh(b, a));
}

/* The same for input values, into two parts (mid NULL) or three (hi, mid = the rest truncated,
 * lo = what is left: exact for f32): the parts after hi are 0 for Inf and NaN, so that hi alone
 * carries them. */
static inline void v_split_store_inputs(fvec a, fvec b, uint16_t *hi, uint16_t *mid, uint16_t *lo) {
    _mm512_storeu_si512(hi, bf16_trunc32(a, b));
    /* fpclass 0x99: quiet NaN, +Inf, -Inf, signalling NaN */
    const __mmask16 finite_a = (__mmask16)~_mm512_fpclass_ps_mask(a, 0x99);
    const __mmask16 finite_b = (__mmask16)~_mm512_fpclass_ps_mask(b, 0x99);
    fvec rest_a = _mm512_maskz_sub_ps(finite_a, a, bf16_trunc_f32(a));
    fvec rest_b = _mm512_maskz_sub_ps(finite_b, b, bf16_trunc_f32(b));
    if (mid) {
        _mm512_storeu_si512(mid, bf16_trunc32(rest_a, rest_b));
        rest_a = _mm512_sub_ps(rest_a, bf16_trunc_f32(rest_a));
        rest_b = _mm512_sub_ps(rest_b, bf16_trunc_f32(rest_b));
    }
    _mm512_storeu_si512(lo, (__m512i)_mm512_cvtne2ps_pbh(rest_b, rest_a));
}

/* Loads W elements of a row of dtype as f32. */
static inline fvec v_load_any(const void *row, int64_t x, fai_dtype dtype) {
    if (dtype == FAI_DTYPE_F32) return _mm512_loadu_ps((const float *)row + x);
    if (dtype == FAI_DTYPE_F16) return v_load_f16((const uint16_t *)row + x);
    if (dtype == FAI_DTYPE_I8) return v_load_i8((const int8_t *)row + x);
    if (dtype == FAI_DTYPE_E4M3) return v_load_e4m3((const uint8_t *)row + x);
    if (dtype == FAI_DTYPE_E5M2) return v_load_e5m2((const uint8_t *)row + x);
    return v_load_bf16((const uint16_t *)row + x);
}

/* dst[2x] = a[x], dst[2x + 1] = b[x] for x < 32. */
static inline void v_interleave32_u16(uint16_t *dst, const uint16_t *a, const uint16_t *b) {
    const __m512i va = _mm512_loadu_si512(a), vb = _mm512_loadu_si512(b);
    const __m512i first =
        _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                         37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i second = _mm512_add_epi16(first, _mm512_set1_epi16(16));
    _mm512_storeu_si512(dst, _mm512_permutex2var_epi16(va, first, vb));
    _mm512_storeu_si512(dst + 32, _mm512_permutex2var_epi16(va, second, vb));
}

/* Nonzero when one of 32 bf16 values, as a magnitude's bits m, is nonzero and below `low`, or
 * `high` or more (Inf and NaN are 0x7f80 and more). */
static inline int v_outside32_bf16(const uint16_t *p, uint16_t low, uint16_t high) {
    const __m512i m = _mm512_and_si512(_mm512_loadu_si512(p), _mm512_set1_epi16(0x7fff));
    const __mmask32 small = _mm512_mask_cmplt_epu16_mask(_mm512_test_epi16_mask(m, m), m,
                                                         _mm512_set1_epi16((short)low));
    return (small | _mm512_cmpge_epu16_mask(m, _mm512_set1_epi16((short)high))) != 0;
}

#endif
