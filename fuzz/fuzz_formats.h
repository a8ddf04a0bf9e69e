/* fuzz_formats.h - what fuzz_cache and fuzz_merge share: the element formats of fai.h decoded,
 * rounded and bounded independently of the library (fp64 arithmetic), a generator of values,
 * buffers with guard bytes whose every byte can be compared with a snapshot, and the check of a
 * failing call's message. */
#ifndef FAI_FUZZ_FORMATS_H
#define FAI_FUZZ_FORMATS_H

#include "fai.h"

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* -- element formats --------------------------------------------------------------------------- */

/* A binary floating-point format: significand bits (the implicit one included), smallest normal
 * exponent and largest finite value. int8 is handled apart (a step of 1, largest 127). */
typedef struct fuzz_format {
    int precision, emin;
    double max;
} fuzz_format;

static inline fuzz_format fuzz_format_of(fai_dtype dtype) {
    switch (dtype) {
    case FAI_DTYPE_F16:
        return (fuzz_format){11, -14, 65504.0};
    case FAI_DTYPE_BF16:
        return (fuzz_format){8, -126, 0x1.fep127};
    case FAI_DTYPE_E4M3:
        return (fuzz_format){4, -6, 448.0};
    case FAI_DTYPE_E5M2:
        return (fuzz_format){3, -14, 57344.0};
    default:
        return (fuzz_format){24, -126, FLT_MAX};
    }
}

/* Largest finite magnitude of a dtype (127 for int8). */
static inline double fuzz_max(fai_dtype dtype) {
    return dtype == FAI_DTYPE_I8 ? 127.0 : fuzz_format_of(dtype).max;
}

/* The spacing of the dtype's values at |v| (in the binade of |v|, the subnormal spacing below
 * the normal range); 1 for int8. */
static inline double fuzz_ulp(fai_dtype dtype, double v) {
    if (dtype == FAI_DTYPE_I8) return 1.0;
    const fuzz_format f = fuzz_format_of(dtype);
    int e = v != 0.0 && isfinite(v) ? ilogb(v) : f.emin;
    if (e < f.emin) e = f.emin;
    return ldexp(1.0, e - (f.precision - 1));
}

/* v rounded to nearest even in the dtype, with an unbounded exponent above; a result beyond the
 * largest finite value is an infinity (IEEE overflow). int8: the nearest integer, unclamped. */
static inline double fuzz_round(fai_dtype dtype, double v) {
    if (!isfinite(v) || v == 0.0) return v;
    if (dtype == FAI_DTYPE_I8) return nearbyint(v);
    const double q = fuzz_ulp(dtype, v);
    const double r = nearbyint(v / q) * q; /* both scalings by powers of two are exact */
    return fabs(r) > fuzz_format_of(dtype).max ? copysign(INFINITY, v) : r;
}

static inline double fuzz_f16_value(uint16_t h) {
    const int e = (h >> 10) & 31, m = h & 1023;
    const double v = e == 0    ? ldexp((double)m, -24)
                     : e == 31 ? (m ? NAN : INFINITY)
                               : ldexp((double)(1024 + m), e - 25);
    return h & 0x8000 ? -v : v;
}

static inline double fuzz_e4m3_value(uint8_t b) {
    const int e = (b >> 3) & 15, m = b & 7;
    const double v = e == 15 && m == 7 ? NAN
                     : e == 0          ? ldexp((double)m, -9)
                                       : ldexp((double)(8 + m), e - 10);
    return b & 0x80 ? -v : v;
}

static inline double fuzz_e5m2_value(uint8_t b) {
    const int e = (b >> 2) & 31, m = b & 3;
    const double v = e == 31  ? (m ? NAN : INFINITY)
                     : e == 0 ? ldexp((double)m, -16)
                              : ldexp((double)(4 + m), e - 17);
    return b & 0x80 ? -v : v;
}

/* Element `index` of an array of `dtype`: a quantized element's own value (its code, unscaled). */
static inline double fuzz_load(const void *data, int64_t index, fai_dtype dtype) {
    const unsigned char *p = (const unsigned char *)data;
    switch (dtype) {
    case FAI_DTYPE_F16:
    case FAI_DTYPE_BF16: {
        uint16_t h;
        memcpy(&h, p + 2 * index, 2);
        if (dtype == FAI_DTYPE_F16) return fuzz_f16_value(h);
        const uint32_t bits = (uint32_t)h << 16;
        float f;
        memcpy(&f, &bits, 4);
        return f;
    }
    case FAI_DTYPE_I8:
        return (double)(int8_t)p[index];
    case FAI_DTYPE_E4M3:
        return fuzz_e4m3_value(p[index]);
    case FAI_DTYPE_E5M2:
        return fuzz_e5m2_value(p[index]);
    default: {
        float f;
        memcpy(&f, p + 4 * index, 4);
        return f;
    }
    }
}

/* Stores v, which must be a value of the dtype (from fuzz_round) or an infinity or NaN, into an
 * f32, f16 or bf16 array. */
static inline void fuzz_store(void *data, int64_t index, fai_dtype dtype, double v) {
    unsigned char *p = (unsigned char *)data;
    if (dtype == FAI_DTYPE_F32) {
        const float f = (float)v;
        memcpy(p + 4 * index, &f, 4);
        return;
    }
    uint16_t h;
    if (dtype == FAI_DTYPE_BF16) {
        const float f = isnan(v) ? NAN : (float)v; /* exact: v is a bf16 value */
        uint32_t bits;
        memcpy(&bits, &f, 4);
        h = (uint16_t)(bits >> 16);
    } else {
        const double a = fabs(v);
        if (isnan(v)) {
            h = 0x7e00;
        } else if (isinf(v)) {
            h = 0x7c00;
        } else if (a < 0x1p-14) {
            h = (uint16_t)(a * 0x1p24);
        } else {
            const int e = ilogb(a);
            h = (uint16_t)(((e + 15) << 10) | (int)(ldexp(a, 10 - e) - 1024.0));
        }
        if (signbit(v) && !isnan(v)) h |= 0x8000;
    }
    memcpy(p + 2 * index, &h, 2);
}

/* -- values ------------------------------------------------------------------------------------ */

/* Bytes from data to one past the last element that counts[i] indices along strides[i] (by
 * magnitude) and `tail` elements of `size` bytes address; 0 when a count is not positive, -1
 * when the byte offset overflows int64 (such a call must be refused). */
static inline int64_t fuzz_extent(const int64_t counts[3], const int64_t strides[3], int64_t tail,
                                  int64_t size) {
    for (int i = 0; i < 3; i++)
        if (counts[i] <= 0) return 0;
    int64_t last = tail > 1 ? tail - 1 : 0;
    for (int i = 0; i < 3; i++) {
        if (strides[i] == INT64_MIN) return -1;
        const int64_t s = strides[i] < 0 ? -strides[i] : strides[i];
        int64_t step;
        if (__builtin_mul_overflow(counts[i] - 1, s, &step) ||
            __builtin_add_overflow(last, step, &last))
            return -1;
    }
    int64_t bytes;
    if (__builtin_add_overflow(last, 1, &bytes) || __builtin_mul_overflow(bytes, size, &bytes))
        return -1;
    return bytes;
}

static inline uint64_t fuzz_next(uint64_t *state) { /* splitmix64 */
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double fuzz_unit(uint64_t *state) {
    return (double)(fuzz_next(state) >> 11) * 0x1p-53;
}

/* Uniform in [lo, hi]. */
static inline int64_t fuzz_pick(uint64_t *state, int64_t lo, int64_t hi) {
    return lo + (int64_t)(fuzz_next(state) % (uint64_t)(hi - lo + 1));
}

/* +-2^e with e uniform in [lo, hi] and a uniform significand in [1, 2): every binade alike. */
static inline double fuzz_log_uniform(uint64_t *state, int lo, int hi) {
    const double v = ldexp(1.0 + fuzz_unit(state), (int)fuzz_pick(state, lo, hi));
    return fuzz_next(state) & 1 ? -v : v;
}

/* -- buffers with guards ----------------------------------------------------------------------- */

/* Bytes of a known pattern before and after every buffer's payload. */
#define FUZZ_GUARD 64

/* A payload of `size` bytes between two guards. The payload starts with arbitrary bytes (what
 * a cache or an output held before the call); `before` is the snapshot compared with after the
 * call and `mark` flags the bytes a successful call may write. */
typedef struct fuzz_buffer {
    unsigned char *base; /* guard, payload, guard */
    size_t size;
    unsigned char *before, *mark;
} fuzz_buffer;

static inline unsigned char *fuzz_payload(const fuzz_buffer *b) { return b->base + FUZZ_GUARD; }

static inline size_t fuzz_total(const fuzz_buffer *b) { return b->size + 2 * FUZZ_GUARD; }

/* 0 when out of memory. */
static inline int fuzz_buffer_alloc(fuzz_buffer *b, size_t size, uint64_t *state) {
    b->size = size;
    b->base = malloc(fuzz_total(b));
    b->before = malloc(fuzz_total(b));
    b->mark = calloc(fuzz_total(b), 1);
    if (!b->base || !b->before || !b->mark) return 0;
    for (size_t i = 0; i < fuzz_total(b); i++)
        b->base[i] = (unsigned char)(0xa5 ^ (i & 0x3c)); /* the guards' pattern */
    for (size_t i = 0; i < size; i += 8) {
        const uint64_t bytes = fuzz_next(state);
        memcpy(b->base + FUZZ_GUARD + i, &bytes, size - i < 8 ? size - i : 8);
    }
    return 1;
}

static inline void fuzz_buffer_free(fuzz_buffer *b) {
    free(b->base);
    free(b->before);
    free(b->mark);
    memset(b, 0, sizeof *b);
}

static inline void fuzz_buffer_snapshot(fuzz_buffer *b) {
    if (b->base) memcpy(b->before, b->base, fuzz_total(b));
}

static inline void fuzz_buffer_restore(fuzz_buffer *b) {
    if (b->base) memcpy(b->base, b->before, fuzz_total(b));
}

/* Whether [p, p + bytes) lies in the buffer (guards included). */
static inline int fuzz_buffer_holds(const fuzz_buffer *b, const void *p, size_t bytes) {
    const uintptr_t at = (uintptr_t)p, begin = (uintptr_t)b->base;
    return b->base && at >= begin && at - begin <= fuzz_total(b) &&
           bytes <= fuzz_total(b) - (at - begin);
}

/* Flags [p, p + bytes) in whichever of the buffers holds it; 0 if none does. */
static inline int fuzz_mark(fuzz_buffer *buffers, int count, const void *p, size_t bytes) {
    for (int i = 0; i < count; i++)
        if (fuzz_buffer_holds(&buffers[i], p, bytes)) {
            memset(buffers[i].mark + ((uintptr_t)p - (uintptr_t)buffers[i].base), 1, bytes);
            return 1;
        }
    return 0;
}

/* The first byte of the buffers that differs from the snapshot and is not marked (every byte
 * when `all`): its buffer in *which and offset from the payload in *offset; 0 if none. */
static inline int fuzz_changed(const fuzz_buffer *buffers, int count, int all, int *which,
                               ptrdiff_t *offset) {
    for (int i = 0; i < count; i++) {
        const fuzz_buffer *b = &buffers[i];
        if (!b->base) continue;
        for (size_t j = 0; j < fuzz_total(b); j++)
            if (b->base[j] != b->before[j] && (all || !b->mark[j])) {
                *which = i;
                *offset = (ptrdiff_t)j - FUZZ_GUARD;
                return 1;
            }
    }
    return 0;
}

/* -- messages ---------------------------------------------------------------------------------- */

/* A failing call's fai_last_error(): one non-empty line of printable characters. */
static inline int fuzz_message_ok(const char *message) {
    if (!message || !message[0]) return 0;
    size_t n = 0;
    for (; message[n]; n++)
        if (message[n] < 0x20 || message[n] > 0x7e || n >= 1024) return 0;
    return 1;
}

#endif
