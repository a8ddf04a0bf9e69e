/* The SIMD vocabulary of fai_ukr_body.h on AArch64 Advanced SIMD (4 f32 lanes). */
#ifndef FAI_SIMD_NEON_H
#define FAI_SIMD_NEON_H

#include <arm_neon.h>

#include "util/fai_half.h"
#include <math.h>
#include <stdint.h>
#include <string.h>

#define FAI_SIMD_NAME "neon"
#define FAI_SIMD_WIDTH 4
/* Register blocks (32 vector registers). */
#define FAI_QK_KEYS 12
#define FAI_PV_ROWS 4
#define FAI_PV_VECS 4
#define FAI_QK_ROWS_KEYS 4 /* decode's QK: 4 rows x 4 keys of accumulators */
#define FAI_PV_ROWS_VECS 4 /* decode's PV: 4 rows x 4 vectors of O */

typedef float32x4_t fvec;
typedef uint32x4_t fmask;

static inline fvec v_zero(void) { return vdupq_n_f32(0.0f); }
static inline fvec v_set1(float x) { return vdupq_n_f32(x); }
static inline fvec v_load(const float *p) { return vld1q_f32(p); }
/* p[0..3] in every group of 4 lanes */
static inline fvec v_load_repeat4(const float *p) { return vld1q_f32(p); }
static inline void v_store(float *p, fvec v) { vst1q_f32(p, v); }
static inline fvec v_fma(fvec a, fvec b, fvec c) { return vfmaq_f32(c, a, b); }
static inline fvec v_mul(fvec a, fvec b) { return vmulq_f32(a, b); }
static inline fvec v_add(fvec a, fvec b) { return vaddq_f32(a, b); }
static inline fvec v_sub(fvec a, fvec b) { return vsubq_f32(a, b); }
/* NEON's max and min propagate NaN from either operand */
static inline fvec v_max(fvec a, fvec b) { return vmaxq_f32(a, b); }
static inline fvec v_min(fvec a, fvec b) { return vminq_f32(a, b); }
static inline fvec v_round(fvec a) { return vrndnq_f32(a); }
static inline fvec v_exp2i(fvec k) {
    const int32x4_t bits = vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(k), vdupq_n_s32(127)), 23);
    return vreinterpretq_f32_s32(bits);
}
static inline fmask v_lt(fvec a, fvec b) { return vcltq_f32(a, b); }
static inline fmask v_eq(fvec a, fvec b) { return vceqq_f32(a, b); }
static inline fvec v_select(fmask mask, fvec yes, fvec no) { return vbslq_f32(mask, yes, no); }
/* every lane of the mask set */
static inline int v_all(fmask mask) { return vminvq_u32(mask) != 0; }
/* 1 / a to about an ulp: the 8-bit estimate and three Newton steps (no divider on the path) */
static inline fvec v_recip(fvec a) {
    fvec r = vrecpeq_f32(a);
    r = vmulq_f32(r, vrecpsq_f32(a, r));
    r = vmulq_f32(r, vrecpsq_f32(a, r));
    return vmulq_f32(r, vrecpsq_f32(a, r));
}
static inline float v_hsum(fvec v) { return vaddvq_f32(v); }
/* NaN in any lane gives NaN */
static inline float v_hmax(fvec v) { return vmaxvq_f32(v); }
static inline fvec v_load_f16(const uint16_t *p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}
static inline fvec v_load_bf16(const uint16_t *p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}
/* W bytes, read as exactly W bytes (a row may end after them) */
static inline uint8x8_t load_4_bytes(const void *p) {
    uint32_t word;
    memcpy(&word, p, sizeof word);
    return vreinterpret_u8_u32(vdup_n_u32(word));
}
/* W int8 values as f32 (exact) */
static inline fvec v_load_i8(const int8_t *p) {
    const int16x8_t wide = vmovl_s8(vreinterpret_s8_u8(load_4_bytes(p)));
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(wide)));
}
/* W fp8 e5m2 values as f32 (exact): each is the upper byte of a binary16 */
static inline fvec v_load_e5m2(const uint8_t *p) {
    const uint16x4_t half = vshl_n_u16(vget_low_u16(vmovl_u8(load_4_bytes(p))), 8);
    return vcvt_f32_f16(vreinterpret_f16_u16(half));
}
/* W fp8 e4m3 codes as f32 values times 2^-8 (a binary16 with the bias 8 more), the NaN code as
 * +-1.875 (2^-8 of 480, which no e4m3 value is) */
static inline fvec v_load_e4m3_unit(const uint8_t *p) {
    const uint16x4_t bytes = vget_low_u16(vmovl_u8(load_4_bytes(p)));
    const uint16x4_t sign = vshl_n_u16(vand_u16(bytes, vdup_n_u16(0x80)), 8);
    const uint16x4_t rest = vshl_n_u16(vand_u16(bytes, vdup_n_u16(0x7f)), 7);
    return vcvt_f32_f16(vreinterpret_f16_u16(vorr_u16(sign, rest)));
}
/* W fp8 e4m3 values as f32 (exact), the NaN code as NaN */
static inline fvec v_load_e4m3(const uint8_t *p) {
    const fvec v = vmulq_n_f32(v_load_e4m3_unit(p), 256.0f);
    const uint32x4_t nan = vceqq_f32(vabsq_f32(v), vdupq_n_f32(480.0f));
    return vbslq_f32(nan, vdupq_n_f32(NAN), v);
}
/* v into bf16 and into f16 (saturating finite values), lane by lane with the portable rounding */
static inline void v_store_bf16(uint16_t *p, fvec v) {
    float lanes[4];
    vst1q_f32(lanes, v);
    for (int i = 0; i < 4; i++)
        p[i] = fai__f32_to_bf16(lanes[i]);
}
static inline void v_store_f16_sat(uint16_t *p, fvec v) {
    float lanes[4];
    vst1q_f32(lanes, v);
    for (int i = 0; i < 4; i++)
        p[i] = fai__f32_to_f16_sat(lanes[i]);
}

#endif
