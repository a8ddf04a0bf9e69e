/* The vector vocabulary of fai_mx_body.h in portable C: 16 f32 lanes as an array, so that the
 * emulated matrix-engine table computes exactly what the AMX table computes, lane for lane, on
 * any CPU. */
#ifndef FAI_MXV_PORTABLE_H
#define FAI_MXV_PORTABLE_H

#include "util/fai_half.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define W 16

typedef struct fvec {
    float lane[W];
} fvec;

static inline fvec v_set1(float x) {
    fvec r;
    for (int i = 0; i < W; i++)
        r.lane[i] = x;
    return r;
}
static inline fvec v_load(const float *p) {
    fvec r;
    memcpy(r.lane, p, sizeof r.lane);
    return r;
}
static inline void v_store(float *p, fvec v) { memcpy(p, v.lane, sizeof v.lane); }
static inline fvec v_add(fvec a, fvec b) {
    for (int i = 0; i < W; i++)
        a.lane[i] += b.lane[i];
    return a;
}
static inline fvec v_mul(fvec a, fvec b) {
    for (int i = 0; i < W; i++)
        a.lane[i] *= b.lane[i];
    return a;
}
static inline fvec v_fma(fvec a, fvec b, fvec c) {
    for (int i = 0; i < W; i++)
        a.lane[i] = fmaf(a.lane[i], b.lane[i], c.lane[i]);
    return a;
}
/* the x86 rule: b when either is NaN */
static inline fvec v_max(fvec a, fvec b) {
    for (int i = 0; i < W; i++)
        a.lane[i] = a.lane[i] > b.lane[i] ? a.lane[i] : b.lane[i];
    return a;
}
static inline float v_hmax(fvec v) {
    float top = v.lane[0];
    for (int i = 1; i < W; i++)
        top = v.lane[i] > top ? v.lane[i] : top;
    return top;
}

/* x - k for an integer k <= x, rounded toward -inf as VREDUCEPS rounds it with its round-down
 * mode (the AMX table's reduction; the same value for every float x >= -150, checked against the
 * instruction, but for a zero's sign, which the polynomial after it does not see): the nearest
 * difference, one step down where it came out above the exact one (its error, by TwoSum,
 * negative). Rounded to nearest instead, the softmax's P differed from the AMX table's in about
 * one score in 250 (those of x in (-1, 0) whose difference is inexact). */
static inline float sub_rounded_down(float x, float k) {
    const float r = x - k, back = r - x;
    const float err = (x - (r - back)) + (-k - back); /* exact: x - k - r */
    return err < 0.0f ? nextafterf(r, -INFINITY) : r;
}

/* 2^t for t >= cut, 0 below (and for -inf), NaN for NaN: 2^f for f = t - floor(t) in [0, 1)
 * by the polynomial c (degree 4, c[0] first), scaled by 2^floor(t) (subnormal results too). */
static inline fvec v_exp2_cut(fvec t, const float c[5], float cut) {
    for (int i = 0; i < W; i++) {
        const float x = t.lane[i];
        if (x != x) continue; /* NaN stays */
        if (x < cut) {
            t.lane[i] = 0.0f;
            continue;
        }
        const float k = floorf(x), f = sub_rounded_down(x, k);
        float p = c[4];
        for (int e = 3; e >= 0; e--)
            p = fmaf(p, f, c[e]);
        t.lane[i] = ldexpf(p, (int)k);
    }
    return t;
}

/* nonzero when some lane of a is greater than the same lane of b */
static inline int v_any_gt(fvec a, fvec b) {
    int any = 0;
    for (int i = 0; i < W; i++)
        any |= a.lane[i] > b.lane[i];
    return any;
}

static inline uint16_t bf16_trunc(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    return (uint16_t)(bits >> 16);
}
static inline float bf16_widen(uint16_t h) {
    const uint32_t bits = (uint32_t)h << 16;
    float x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

static inline void split_store(fvec a, fvec b, uint16_t *hi, uint16_t *mid, uint16_t *lo,
                               int inputs) {
    for (int h = 0; h < 2; h++) {
        const fvec *v = h ? &b : &a;
        for (int i = 0; i < W; i++) {
            const float x = v->lane[i];
            const int keep = !inputs || isfinite(x);
            const uint16_t top = bf16_trunc(x);
            hi[h * W + i] = top;
            float rest = x - bf16_widen(top);
            if (mid) {
                const uint16_t middle = bf16_trunc(rest);
                mid[h * W + i] = keep ? middle : 0;
                rest -= bf16_widen(middle);
            }
            lo[h * W + i] = keep ? fai__f32_to_bf16(rest) : 0;
        }
    }
}

/* Splits 2 x W values x (a, then b) into bf16 hi = x truncated and lo = x - hi rounded to nearest
 * even, 2W of each, in order: hi + lo is x to 2^-16 relative. */
static inline void v_split_store(fvec a, fvec b, uint16_t *hi, uint16_t *lo) {
    split_store(a, b, hi, NULL, lo, 0);
}

/* 2 x W values (a, then b) rounded to nearest even into bf16, in order. */
static inline void v_store_bf16_rounded(fvec a, fvec b, uint16_t *out) {
    for (int i = 0; i < W; i++) {
        out[i] = fai__f32_to_bf16(a.lane[i]);
        out[W + i] = fai__f32_to_bf16(b.lane[i]);
    }
}

/* The same for input values, into two parts (mid NULL) or three (hi, mid = the rest truncated,
 * lo = what is left: exact for f32): the parts after hi are 0 for Inf and NaN, so that hi alone
 * carries them (Inf - Inf would turn an Inf into NaN). */
static inline void v_split_store_inputs(fvec a, fvec b, uint16_t *hi, uint16_t *mid, uint16_t *lo) {
    split_store(a, b, hi, mid, lo, 1);
}

/* Loads W elements of a row of dtype as f32. */
static inline fvec v_load_any(const void *row, int64_t x, fai_dtype dtype) {
    fvec r;
    for (int i = 0; i < W; i++)
        r.lane[i] = fai__load_element(row, x + i, dtype);
    return r;
}

/* dst[p * dst_stride + j] = word p of rows[j], for 16 rows of 16 32-bit words (rows of bf16
 * pairs: only 2-byte aligned). */
static inline void v_transpose16_u32(const void *const *rows, uint32_t *dst, int64_t dst_stride) {
    for (int p = 0; p < 16; p++)
        for (int j = 0; j < 16; j++)
            memcpy(dst + p * dst_stride + j, (const char *)rows[j] + 4 * p, sizeof(uint32_t));
}

/* dst[2x] = a[x], dst[2x + 1] = b[x] for x < 32. */
static inline void v_interleave32_u16(uint16_t *dst, const uint16_t *a, const uint16_t *b) {
    for (int x = 0; x < 32; x++) {
        dst[2 * x] = a[x];
        dst[2 * x + 1] = b[x];
    }
}

/* Nonzero when one of 32 bf16 values, as a magnitude's bits m, is nonzero and below `low`, or
 * `high` or more (Inf and NaN are 0x7f80 and more). */
static inline int v_outside32_bf16(const uint16_t *p, uint16_t low, uint16_t high) {
    int any = 0;
    for (int x = 0; x < 32; x++) {
        const uint16_t m = p[x] & 0x7fff;
        any |= (m != 0 && m < low) || m >= high;
    }
    return any;
}

#endif
