/* fuzz_cache.c - fai_cache_write on arbitrary calls, checked against a reference written here.
 *
 * The input decodes into one call: a few tokens, heads and channels (now and then 2^16 elements,
 * the fewest the pool's threads share a write of), every source dtype and every cache dtype (and
 * values that are neither), dense or paged caches (blocks x block_rows), slots that are valid,
 * skipped (-1), repeated or outside the cache, regular and arbitrary strides (zero, negative,
 * overflowing, rows that share memory, a source or per-token scales placed inside the cache, a
 * source just past it and scales just past the source), per-token or fixed scales (NaN, Inf, 0,
 * negative, subnormal, huge, missing or ambiguous), source values with NaN, Inf, subnormals and
 * values past every format's range, NULL pointers, and the pool (the default one, 1 or 2 threads).
 * The cache, the scales and the source live in buffers between guard bytes of a known pattern.
 * Whatever the call:
 *   - no crash, no undefined behaviour (ASan, UBSan);
 *   - a call fai.h says is refused (a size, dtype, pointer, stride, slot or scale out of its
 *     domain, two cache rows or per-token scales in one place, a source or per-token scales on
 *     the cache's elements, a non-finite source value for a quantized cache) fails, and a valid
 *     call in a regular layout (each tensor in its own buffer, strides nested) succeeds;
 *   - a failure has a status with a name and a printable one-line fai_last_error(), and leaves
 *     every byte of every buffer (guards included), the source and the slots as they were;
 *   - a success clears fai_last_error(), changes only the rows of the tokens written and their
 *     per-token scales, and each stored value, dequantized (code x scale), equals the source
 *     value within the format's rounding: half a unit in the last place of f16, bf16 and fp8
 *     codes (relative to the scale; f32 takes the value exactly), half a step for int8; a
 *     per-token scale is max |x| / qmax rounded to f32 (1 for a row of zeros, the smallest
 *     subnormal when the quotient rounds to 0); past a fixed scale's range the code is +-qmax,
 *     past f16's range a finite value is +-65504;
 *   - the same call on 1 and on 2 threads writes the same bytes. */
#include "fai.h"
#include "fuzz_formats.h"
#include "fuzz_input.h"

#include <inttypes.h>
#include <stdio.h>

/* Payload bytes per buffer; larger layouts (valid strides far apart) are skipped. */
#define BUDGET (INT64_C(1) << 21)

static fai_pool *pools[2]; /* 1 and 2 threads; NULL (the default pool) is the third choice */

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_pools_create(pools, "fuzz_cache");
    return 0;
}

/* The input's layout: one byte per field, then 8 bytes of the seed of the values, the slots'
 * order and the buffers' previous contents. Missing bytes read as zero. */
enum {
    F_TOKENS,
    F_HEADS,
    F_DIM,
    F_BLOCKS,
    F_BLOCK_ROWS,
    F_SRC_DTYPE,
    F_CACHE_DTYPE,
    F_SRC_LAYOUT, /* SRC_* */
    F_SRC_A,
    F_SRC_B,
    F_CACHE_LAYOUT, /* CACHE_* */
    F_CACHE_A,
    F_CACHE_B,
    F_CACHE_C,
    F_DIM_STRIDE, /* >= 224: a stride_dim other than 1 */
    F_SCALE_MODE, /* SCALE_* for quantized caches; for the others >= 200 passes a scale */
    F_SCALE_A,
    F_SCALE_B,
    F_SCALE_C,
    F_FIXED_KIND, /* the fixed scales' values */
    F_FIXED_BAD,  /* < 96: one head's fixed scale 0, -0, negative, NaN or +-Inf */
    F_SKIP,       /* >= 128: tokens skipped (slot -1) by its bits */
    F_BAD_SLOT,   /* >= 160: one slot repeated, outside the cache, or at its edge */
    F_BAD_SLOT_AT,
    F_VALUES,  /* the source values' distribution */
    F_SPECIAL, /* < 200: up to 4 values NaN, Inf, -0, FLT_MAX, ... at random places */
    F_NULLS,   /* >= 240: one NULL pointer */
    F_POOL,
    F_BIG, /* 254, 255: 32 tokens x 4 heads x 512 channels */
    F_COUNT
};

enum {
    SRC_DENSE,
    SRC_HEAD_MAJOR,
    SRC_PADDED,
    SRC_RAW,
    SRC_NEGATIVE,
    SRC_OVERFLOW,
    SRC_IN_CACHE,
    SRC_PAST_CACHE,
    SRC_MODES
};
enum {
    CACHE_DENSE,
    CACHE_HEAD_MAJOR,
    CACHE_PADDED,
    CACHE_OFFSET,
    CACHE_RAW,
    CACHE_SHARED,
    CACHE_NEGATIVE,
    CACHE_OVERFLOW,
    CACHE_MODES
};
enum {
    SCALE_DENSE,
    SCALE_HEAD_MAJOR,
    SCALE_PADDED,
    SCALE_FIXED_HEADS,
    SCALE_FIXED_ONE,
    SCALE_PAST_SRC,
    SCALE_RAW,
    SCALE_NULL,
    SCALE_DATA_NULL,
    SCALE_AMBIGUOUS,
    SCALE_NEGATIVE,
    SCALE_IN_CACHE,
    SCALE_SHARED,
    SCALE_OVERFLOW,
    SCALE_MODES
};
enum { B_CACHE, B_SCALE, B_SRC, B_COUNT };

typedef struct cache_call {
    int64_t tokens, heads, dim, blocks, block_rows, rows;
    fai_dtype src_dtype, cache_dtype;
    fai_tensor src, cache;
    fai_scale scale;
    /* the arguments as passed (NULL where the input asks for it) */
    const fai_tensor *src_arg, *cache_arg;
    const fai_scale *scale_arg;
    const int64_t *slots_arg;
    int64_t *slots;
    int quantized, per_token; /* per_token: stride_seq != 0; fixed: stride_batch = seq = 0 */
    int src_mode, cache_mode, scale_mode, pool;
} cache_call;

static int src_dtype_ok(fai_dtype d) { return d >= FAI_DTYPE_F32 && d <= FAI_DTYPE_BF16; }
static int cache_dtype_ok(fai_dtype d) { return d >= FAI_DTYPE_F32 && d <= FAI_DTYPE_E5M2; }

/* Bytes of an element; 4 for a value that is no dtype (the call is refused; the buffer is sized
 * as if it were f32). */
static int64_t element_size(fai_dtype d) {
    return d == FAI_DTYPE_F16 || d == FAI_DTYPE_BF16                         ? 2
           : d == FAI_DTYPE_I8 || d == FAI_DTYPE_E4M3 || d == FAI_DTYPE_E5M2 ? 1
                                                                             : 4;
}

static int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

static int64_t src_extent(const cache_call *c) {
    const int64_t counts[3] = {c->tokens, c->heads, 1};
    const int64_t strides[3] = {c->src.stride_seq, c->src.stride_head, 0};
    return fuzz_extent(counts, strides, c->dim, element_size(c->src_dtype));
}

static int64_t cache_extent(const cache_call *c) {
    const int64_t counts[3] = {c->blocks, c->block_rows, c->heads};
    const int64_t strides[3] = {c->cache.stride_batch, c->cache.stride_seq, c->cache.stride_head};
    return fuzz_extent(counts, strides, c->dim, element_size(c->cache_dtype));
}

/* The scales' extent in the layout their strides give: one per (block, row, head) where
 * stride_seq moves, else one per head. */
static int64_t scale_extent(const cache_call *c) {
    const fai_scale *s = &c->scale;
    const int per_token = s->stride_seq != 0;
    const int64_t counts[3] = {per_token ? c->blocks : 1, per_token ? c->block_rows : 1, c->heads};
    const int64_t strides[3] = {per_token ? s->stride_batch : 0, s->stride_seq, s->stride_head};
    return fuzz_extent(counts, strides, 1, 4);
}

static int64_t cache_at(const cache_call *c, int64_t block, int64_t row, int64_t head) {
    return block * c->cache.stride_batch + row * c->cache.stride_seq + head * c->cache.stride_head;
}

static int64_t scale_at(const cache_call *c, int64_t block, int64_t row, int64_t head) {
    if (!c->per_token) return head * c->scale.stride_head;
    return block * c->scale.stride_batch + row * c->scale.stride_seq + head * c->scale.stride_head;
}

static int64_t src_at(const cache_call *c, int64_t token, int64_t head) {
    return token * c->src.stride_seq + head * c->src.stride_head;
}

static void describe(const cache_call *c) {
    fprintf(stderr,
            "fuzz_cache: tokens %" PRId64 " heads %" PRId64 " dim %" PRId64 " blocks %" PRId64
            " block_rows %" PRId64 ", src %d (mode %d, strides seq %" PRId64 " head %" PRId64
            " dim %" PRId64 "), cache %d (mode %d, strides %" PRId64 " %" PRId64 " %" PRId64
            " dim %" PRId64 "), scale mode %d (strides %" PRId64 " %" PRId64 " %" PRId64
            "), pool %d\nfuzz_cache: slots",
            c->tokens, c->heads, c->dim, c->blocks, c->block_rows, (int)c->src_dtype, c->src_mode,
            c->src.stride_seq, c->src.stride_head, c->src.stride_dim, (int)c->cache_dtype,
            c->cache_mode, c->cache.stride_batch, c->cache.stride_seq, c->cache.stride_head,
            c->cache.stride_dim, c->scale_mode, c->scale.stride_batch, c->scale.stride_seq,
            c->scale.stride_head, c->pool);
    for (int64_t t = 0; t < c->tokens && t < 64; t++)
        fprintf(stderr, " %" PRId64, c->slots[t]);
    fprintf(stderr, "\n");
}

/* -- what fai.h says must be refused ----------------------------------------------------------- */

static int buffer_of(const fuzz_buffer *buf, const void *p) {
    for (int i = 0; i < B_COUNT; i++)
        if (fuzz_buffer_holds(&buf[i], p, 1)) return i;
    return -1;
}

/* Whether two of the cache's rows (every block, row and head, written or not) have an element in
 * one place: all elements lie at whole elements from cache.data, so counting them per element
 * index finds it. */
static int rows_share(const cache_call *c, int64_t bytes) {
    const int64_t size = element_size(c->cache_dtype), count = bytes / size;
    unsigned char *seen = calloc((size_t)(count > 0 ? count : 1), 1);
    CHECK(seen != NULL);
    int shared = 0;
    for (int64_t b = 0; b < c->blocks && !shared; b++)
        for (int64_t r = 0; r < c->block_rows && !shared; r++)
            for (int64_t h = 0; h < c->heads && !shared; h++)
                for (int64_t d = 0, at = cache_at(c, b, r, h); d < c->dim && !shared; d++)
                    shared = seen[at + d]++ != 0;
    free(seen);
    return shared;
}

static int scales_share(const cache_call *c, int64_t bytes) {
    unsigned char *seen = calloc((size_t)(bytes / 4 + 1), 1);
    CHECK(seen != NULL);
    int shared = 0;
    for (int64_t b = 0; b < c->blocks && !shared; b++)
        for (int64_t r = 0; r < c->block_rows && !shared; r++)
            for (int64_t h = 0; h < c->heads && !shared; h++)
                shared = seen[scale_at(c, b, r, h)]++ != 0;
    free(seen);
    return shared;
}

/* Whether a written token's source element or a scale (per token, or a fixed one, read while
 * the cache is written) lies on a byte of a cache element. Only where the input put them inside
 * the cache's buffer. */
static const char *overlaps_cache(const cache_call *c, fuzz_buffer *buf) {
    const int src_inside = buffer_of(buf, c->src.data) == B_CACHE;
    const int scale_inside = c->quantized && buffer_of(buf, c->scale.data) == B_CACHE;
    if (!src_inside && !scale_inside) return NULL;
    fuzz_buffer *cb = &buf[B_CACHE];
    const int64_t size = element_size(c->cache_dtype);
    unsigned char *cache = c->cache.data;
    memset(cb->mark, 0, fuzz_total(cb));
    for (int64_t b = 0; b < c->blocks; b++)
        for (int64_t r = 0; r < c->block_rows; r++)
            for (int64_t h = 0; h < c->heads; h++)
                fuzz_mark(cb, 1, cache + cache_at(c, b, r, h) * size, (size_t)(c->dim * size));
    const char *why = NULL;
    const int64_t src_size = element_size(c->src_dtype);
    for (int64_t t = 0; src_inside && t < c->tokens && !why; t++) {
        if (c->slots[t] < 0) continue;
        for (int64_t h = 0; h < c->heads && !why; h++) {
            const unsigned char *row = (unsigned char *)c->src.data + src_at(c, t, h) * src_size;
            for (int64_t x = 0; x < c->dim * src_size && !why; x++)
                if (cb->mark[row + x - cb->base])
                    why = "a written token's source lies on the cache";
        }
    }
    for (int64_t b = 0; scale_inside && c->per_token && b < c->blocks && !why; b++)
        for (int64_t r = 0; r < c->block_rows && !why; r++)
            for (int64_t h = 0; h < c->heads && !why; h++) {
                const unsigned char *s = (unsigned char *)(c->scale.data + scale_at(c, b, r, h));
                for (int x = 0; x < 4; x++)
                    if (cb->mark[s + x - cb->base]) why = "a per-token scale lies on the cache";
            }
    for (int64_t h = 0; scale_inside && !c->per_token && h < c->heads && !why; h++) {
        const unsigned char *s = (unsigned char *)(c->scale.data + h * c->scale.stride_head);
        for (int x = 0; x < 4; x++)
            if (cb->mark[s + x - cb->base]) why = "a fixed scale lies on the cache";
    }
    memset(cb->mark, 0, fuzz_total(cb));
    return why;
}

/* The reason fai.h gives for refusing the call, or NULL when it allows it. */
static const char *refusal(const cache_call *c, fuzz_buffer *buf) {
    if (c->tokens < 0) return "tokens < 0";
    if (c->heads < 1) return "heads < 1";
    if (c->dim < 1 || c->dim > FAI_MAX_HEAD_DIM) return "dim outside [1, FAI_MAX_HEAD_DIM]";
    if (c->blocks < 0) return "blocks < 0";
    if (c->block_rows < 1) return "block_rows < 1";
    if (!c->src_arg) return "src = NULL";
    if (!c->cache_arg) return "cache = NULL";
    if (!src_dtype_ok(c->src_dtype)) return "the source is not f32, f16 or bf16";
    if (!cache_dtype_ok(c->cache_dtype)) return "the cache's dtype is no fai_dtype";
    if (c->tokens > 0 && !c->src.data) return "src.data = NULL";
    if (c->tokens > 0 && !c->slots_arg) return "slots = NULL";
    if (c->rows > 0 && !c->cache.data) return "cache.data = NULL";
    if ((c->src.stride_dim != 0 && c->src.stride_dim != 1) ||
        (c->cache.stride_dim != 0 && c->cache.stride_dim != 1))
        return "a stride_dim other than 0 or 1";
    if (c->src.stride_seq < 0 || c->src.stride_head < 0 || c->cache.stride_batch < 0 ||
        c->cache.stride_seq < 0 || c->cache.stride_head < 0)
        return "a negative stride";
    const int given = c->scale_arg && c->scale.data;
    if (c->quantized && !given) return "a quantized cache without scales";
    if (!c->quantized && c->scale_arg && c->scale.data) return "scales for an unquantized cache";
    if (c->quantized) {
        if (c->scale.stride_batch < 0 || c->scale.stride_seq < 0 || c->scale.stride_head < 0)
            return "a negative scale stride";
        if (c->scale.stride_seq == 0 && c->scale.stride_batch != 0)
            return "scale strides neither per token nor fixed";
    }
    const int64_t src_bytes = src_extent(c), cache_bytes = cache_extent(c);
    if (src_bytes < 0) return "the source's offsets overflow";
    if (cache_bytes < 0) return "the cache's offsets overflow";
    if (c->quantized && scale_extent(c) < 0) return "the scales' offsets overflow";
    for (int64_t t = 0; t < c->tokens; t++)
        if (c->slots[t] < -1 || c->slots[t] >= c->rows) return "a slot outside the cache";
    for (int64_t t = 0; t < c->tokens; t++)
        for (int64_t u = t + 1; u < c->tokens; u++)
            if (c->slots[t] >= 0 && c->slots[t] == c->slots[u]) return "two tokens in one slot";
    if (c->quantized && !c->per_token)
        for (int64_t h = 0; h < c->heads; h++) {
            const float s = c->scale.data[h * c->scale.stride_head];
            if (!isfinite(s) || !(s > 0.0f)) return "a fixed scale not finite and > 0";
        }
    if (c->quantized)
        for (int64_t t = 0; t < c->tokens; t++)
            for (int64_t h = 0; h < c->heads && c->slots[t] >= 0; h++)
                for (int64_t d = 0; d < c->dim; d++)
                    if (!isfinite(fuzz_load(c->src.data, src_at(c, t, h) + d, c->src_dtype)))
                        return "a non-finite source value for a quantized cache";
    if (rows_share(c, cache_bytes)) return "two cache rows share memory";
    if (c->per_token && scales_share(c, scale_extent(c)))
        return "two per-token scales share memory";
    return overlaps_cache(c, buf);
}

/* -- the reference ----------------------------------------------------------------------------- */

static void row_failed(const cache_call *c, int64_t t, int64_t h, int64_t d, double x,
                       double stored, double scale, const char *why) {
    describe(c);
    fprintf(stderr,
            "fuzz_cache: token %" PRId64 " head %" PRId64 " d %" PRId64
            ": source %.9g, stored %.9g, scale %.9g: %s\n",
            t, h, d, x, stored, scale, why);
    abort();
}

/* An f32, f16 or bf16 cache: the source value rounded to nearest even (f32 holds it exactly);
 * f16 saturates finite values at +-65504; bf16 past its range may be +-Inf (IEEE overflow) or
 * saturate. NaN stays NaN, +-Inf stays. */
static const char *plain_value_wrong(fai_dtype dtype, double x, double stored) {
    if (isnan(x)) return isnan(stored) ? NULL : "a NaN source is not NaN in the cache";
    if (isinf(x)) return stored == x ? NULL : "an infinite source is not the same infinity";
    if (dtype == FAI_DTYPE_F32) return stored == x ? NULL : "an f32 cache changed the value";
    const double max = fuzz_max(dtype);
    if (dtype == FAI_DTYPE_F16 && fabs(x) > max)
        return stored == copysign(max, x) ? NULL : "not saturated at +-65504";
    if (dtype == FAI_DTYPE_BF16 && isinf(fuzz_round(dtype, x)))
        return stored == copysign(max, x) || stored == copysign(INFINITY, x)
                   ? NULL
                   : "past bf16's range, neither +-Inf nor saturated";
    if (!isfinite(stored)) return "a finite source stored as NaN or Inf";
    return fabs(stored - x) <= 0.5 * fuzz_ulp(dtype, x) ? NULL : "off by more than half an ulp";
}

/* A quantized code against the source value x and the scale s: within half an ulp of the code
 * (half a step for int8) of x / s, plus the f32 rounding of the quotient that is quantized;
 * exactly +-qmax where |x / s| is beyond qmax (a fixed scale's saturation, or a per-token scale
 * so deep in the subnormals that f32 rounded max |x| / qmax down by a large fraction). */
static const char *code_wrong(fai_dtype dtype, double x, double code, double s) {
    const double qmax = fuzz_max(dtype);
    if (!isfinite(code) || fabs(code) > qmax) return "a code that is not finite or beyond qmax";
    const double v = x / s;
    if (fabs(v) > qmax) return code == copysign(qmax, v) ? NULL : "not saturated at +-qmax";
    const double bound = 0.5 * fuzz_ulp(dtype, v) + fabs(v) * 0x1p-24;
    return fabs(code - v) <= bound ? NULL
                                   : "the dequantized value is off by more than the rounding";
}

static void check_row(const cache_call *c, int64_t t, int64_t h, int64_t block, int64_t row) {
    double x[FAI_MAX_HEAD_DIM];
    double amax = 0.0;
    for (int64_t d = 0; d < c->dim; d++) {
        x[d] = fuzz_load(c->src.data, src_at(c, t, h) + d, c->src_dtype);
        amax = fmax(amax, fabs(x[d]));
    }
    const int64_t at = cache_at(c, block, row, h);
    if (!c->quantized) {
        for (int64_t d = 0; d < c->dim; d++) {
            const double stored = fuzz_load(c->cache.data, at + d, c->cache_dtype);
            const char *why = plain_value_wrong(c->cache_dtype, x[d], stored);
            if (why) row_failed(c, t, h, d, x[d], stored, 1.0, why);
        }
        return;
    }
    const double s = c->scale.data[scale_at(c, block, row, h)];
    if (c->per_token) {
        /* max |x| / qmax rounded to f32: the double quotient of two floats rounds to the f32
         * quotient (53 >= 2 x 24 + 2 bits) */
        const float quotient = (float)(amax / fuzz_max(c->cache_dtype));
        const float want = amax == 0.0 ? 1.0f : quotient > 0.0f ? quotient : FLT_TRUE_MIN;
        if (s != (double)want)
            row_failed(c, t, h, -1, amax, s, (double)want, "per-token scale is not max|x| / qmax");
    }
    for (int64_t d = 0; d < c->dim; d++) {
        const double code = fuzz_load(c->cache.data, at + d, c->cache_dtype);
        const char *why = code_wrong(c->cache_dtype, x[d], code, s);
        if (why) row_failed(c, t, h, d, x[d], code * s, s, why);
    }
}

static void check_success(const cache_call *c, fuzz_buffer *buf) {
    for (int i = 0; i < B_COUNT; i++)
        if (buf[i].base) memset(buf[i].mark, 0, fuzz_total(&buf[i]));
    const int64_t size = element_size(c->cache_dtype);
    for (int64_t t = 0; t < c->tokens; t++) {
        if (c->slots[t] < 0) continue;
        const int64_t block = c->slots[t] / c->block_rows, row = c->slots[t] % c->block_rows;
        for (int64_t h = 0; h < c->heads; h++) {
            CHECK(fuzz_mark(buf, B_COUNT,
                            (unsigned char *)c->cache.data + cache_at(c, block, row, h) * size,
                            (size_t)(c->dim * size)));
            if (c->per_token)
                CHECK(fuzz_mark(buf, B_COUNT, c->scale.data + scale_at(c, block, row, h), 4));
        }
    }
    int which;
    ptrdiff_t offset;
    if (fuzz_changed(buf, B_COUNT, 0, &which, &offset)) {
        static const char *names[] = {"cache", "scale", "source"};
        describe(c);
        fprintf(stderr,
                "fuzz_cache: accepted, and byte %td of the %s buffer changed outside the "
                "rows written and their scales\n",
                offset, names[which]);
        abort();
    }
    for (int64_t t = 0; t < c->tokens; t++) {
        if (c->slots[t] < 0) continue;
        for (int64_t h = 0; h < c->heads; h++)
            check_row(c, t, h, c->slots[t] / c->block_rows, c->slots[t] % c->block_rows);
    }
}

/* -- decoding ---------------------------------------------------------------------------------- */

/* The cache's strides in its layout mode (CACHE_*): [blocks, block_rows, heads, dim] unless the
 * mode says otherwise. */
static void cache_strides(cache_call *c, const uint8_t *f) {
    const int64_t dim = c->dim > 0 ? c->dim : 1, heads = c->heads > 0 ? c->heads : 1;
    const int64_t rows = c->block_rows > 0 ? c->block_rows : 1;
    int64_t *sb = &c->cache.stride_batch, *ss = &c->cache.stride_seq, *sh = &c->cache.stride_head;
    int64_t *pick[3] = {sb, ss, sh};
    const uint8_t a = f[F_CACHE_A], b = f[F_CACHE_B], cc = f[F_CACHE_C];
    *sh = dim, *ss = heads * dim, *sb = rows * heads * dim;
    switch (c->cache_mode) {
    case CACHE_HEAD_MAJOR: /* [blocks, heads, block_rows, dim], vLLM's value cache */
        *ss = dim, *sh = rows * dim, *sb = heads * rows * dim;
        break;
    case CACHE_PADDED:
        *sh = dim + a % 9, *ss = heads * *sh + b % 9, *sb = rows * *ss + cc % 9;
        break;
    case CACHE_RAW: /* anything small: zero, overlapping, interleaved or nested */
        *sh = (cc & 1 ? 1 : dim) * ((cc >> 1) % 5);
        *ss = (b & 1 ? 1 : heads * dim) * ((b >> 1) % 5);
        *sb = (a & 1 ? 1 : rows * heads * dim) * ((a >> 1) % 5);
        break;
    case CACHE_SHARED: /* one stride shorter than a row */
        *pick[a % 3] = b % dim;
        break;
    case CACHE_NEGATIVE:
        *pick[a % 3] = b & 1 ? -1 : -*pick[a % 3] - 1;
        break;
    case CACHE_OVERFLOW: {
        const int64_t huge[] = {INT64_MAX, INT64_MAX / 2 + 1, INT64_MAX / 3, INT64_MIN};
        *pick[a % 3] = huge[b % 4];
        break;
    }
    default:
        break;
    }
}

/* The source's strides in its layout mode (SRC_*): [tokens, heads, dim] unless it says otherwise.
 */
static void src_strides(cache_call *c, const uint8_t *f) {
    const int64_t dim = c->dim > 0 ? c->dim : 1, heads = c->heads > 0 ? c->heads : 1;
    const int64_t tokens = c->tokens > 0 ? c->tokens : 1;
    const uint8_t a = f[F_SRC_A], b = f[F_SRC_B];
    int64_t *ss = &c->src.stride_seq, *sh = &c->src.stride_head;
    *sh = dim, *ss = heads * dim;
    switch (c->src_mode) {
    case SRC_HEAD_MAJOR:
        *ss = dim, *sh = tokens * dim;
        break;
    case SRC_PADDED:
        *sh = dim + a % 7, *ss = heads * *sh + b % 7;
        break;
    case SRC_RAW: /* a source may be read through any strides: zero ones repeat rows */
        *sh = (a & 1 ? 1 : dim) * ((a >> 1) % 4);
        *ss = (b & 1 ? 1 : heads * dim) * ((b >> 1) % 4);
        break;
    case SRC_NEGATIVE:
        if (a & 1)
            *ss = -(int64_t)(b % 3) - 1;
        else
            *sh = -(int64_t)(b % 3) - 1;
        break;
    case SRC_OVERFLOW:
        if (a & 1)
            *ss = b & 1 ? INT64_MAX : INT64_MAX / 2 + 1;
        else
            *sh = b & 1 ? INT64_MAX : INT64_MAX / 2 + 1;
        break;
    default:
        break;
    }
}

/* The scales' strides in their mode (SCALE_*): per token [blocks, block_rows, heads] unless it
 * says otherwise. */
static void scale_strides(cache_call *c, const uint8_t *f) {
    const int64_t heads = c->heads > 0 ? c->heads : 1;
    const int64_t rows = c->block_rows > 0 ? c->block_rows : 1;
    const uint8_t a = f[F_SCALE_A], b = f[F_SCALE_B], cc = f[F_SCALE_C];
    fai_scale *s = &c->scale;
    s->stride_head = 1, s->stride_seq = heads, s->stride_batch = rows * heads;
    switch (c->scale_mode) {
    case SCALE_HEAD_MAJOR:
        s->stride_seq = 1, s->stride_head = rows, s->stride_batch = heads * rows;
        break;
    case SCALE_PADDED:
        s->stride_head = 1 + a % 3, s->stride_seq = heads * s->stride_head + b % 3;
        s->stride_batch = rows * s->stride_seq + cc % 3;
        break;
    case SCALE_FIXED_HEADS:
        s->stride_batch = s->stride_seq = 0;
        break;
    case SCALE_FIXED_ONE:
        s->stride_batch = s->stride_seq = s->stride_head = 0;
        break;
    case SCALE_RAW: /* stride_seq 0 makes it fixed, or ambiguous with stride_batch */
        s->stride_head = a % 6;
        s->stride_seq = b % 6;
        s->stride_batch = cc % (2 * rows * heads + 1);
        break;
    case SCALE_AMBIGUOUS:
        s->stride_seq = 0, s->stride_batch = 1 + a % 4;
        break;
    case SCALE_NEGATIVE:
        if (a % 3 == 0) s->stride_batch = -1;
        if (a % 3 == 1) s->stride_seq = -1;
        if (a % 3 == 2) s->stride_head = -1;
        break;
    case SCALE_SHARED:
        s->stride_head = 0;
        break;
    case SCALE_OVERFLOW: {
        int64_t *pick[3] = {&s->stride_batch, &s->stride_seq, &s->stride_head};
        *pick[a % 3] = b & 1 ? INT64_MAX : INT64_MAX / 4 + 1;
        break;
    }
    default:
        break;
    }
}

static const double specials[] = {NAN,      INFINITY, -INFINITY, -0.0,    FLT_MAX,
                                  -FLT_MAX, 0x1p-149, 65520.0,   65519.0, -464.0,
                                  61440.0,  0x1p-126, 0x1p-24,   0x1p-16, -0x1.fep127};
#define SPECIAL_COUNT ((int)(sizeof specials / sizeof specials[0]))

/* A source value of the distribution `kind` (F_VALUES). */
static double source_value(uint64_t *rng, int kind, int row_kind) {
    switch (kind == 7 ? row_kind : kind) {
    case 0:
        return 2.0 * fuzz_unit(rng) - 1.0;
    case 1: /* around f16's and e5m2's largest values */
        return (2.0 * fuzz_unit(rng) - 1.0) * 7e4;
    case 2: /* f32 subnormals and the smallest normals */
        return fuzz_log_uniform(rng, -149, -100);
    case 3: /* every binade of f32 */
        return fuzz_log_uniform(rng, -149, 127);
    case 4:
        return fuzz_log_uniform(rng, 120, 127);
    case 5:
        return 0.0;
    default: /* halves: ties of int8 and fp8 under a scale of 1 */
        return (double)fuzz_pick(rng, -600, 600) / 2.0;
    }
}

static void fill_source(cache_call *c, const uint8_t *f, uint64_t *rng) {
    if (!src_dtype_ok(c->src_dtype) || c->tokens <= 0 || c->heads < 1 || c->dim < 1 ||
        c->dim > FAI_MAX_HEAD_DIM || c->src.stride_seq < 0 || c->src.stride_head < 0 ||
        src_extent(c) <= 0)
        return;
    const int kind = f[F_VALUES] % 8;
    for (int64_t t = 0; t < c->tokens; t++)
        for (int64_t h = 0; h < c->heads; h++) {
            const int row_kind = (int)fuzz_pick(rng, 0, 6);
            for (int64_t d = 0; d < c->dim; d++)
                fuzz_store(c->src.data, src_at(c, t, h) + d, c->src_dtype,
                           fuzz_round(c->src_dtype, source_value(rng, kind, row_kind)));
        }
    /* the first special value is the byte's choice (NaN for 1 to 4), the others random */
    const int count = f[F_SPECIAL] < 200 ? f[F_SPECIAL] % 5 : 0;
    for (int i = 0; i < count; i++) {
        const int64_t t = fuzz_pick(rng, 0, c->tokens - 1), h = fuzz_pick(rng, 0, c->heads - 1);
        const int64_t d = fuzz_pick(rng, 0, c->dim - 1);
        const double v = specials[i == 0 ? f[F_SPECIAL] / 5 % SPECIAL_COUNT
                                         : fuzz_pick(rng, 0, SPECIAL_COUNT - 1)];
        fuzz_store(c->src.data, src_at(c, t, h) + d, c->src_dtype, fuzz_round(c->src_dtype, v));
    }
}

static void fill_fixed_scales(cache_call *c, const uint8_t *f, uint64_t *rng) {
    if (!c->quantized || c->per_token || !c->scale.data || c->heads < 1 ||
        c->scale.stride_head < 0 || scale_extent(c) <= 0)
        return;
    static const double bad[] = {0.0, -0.0, -1.0, NAN, INFINITY, -INFINITY};
    for (int64_t h = 0; h < c->heads; h++) {
        double s;
        switch (f[F_FIXED_KIND] % 8) {
        case 0:
            s = fabs(fuzz_log_uniform(rng, -8, 8));
            break;
        case 1:
            s = 1.0;
            break;
        case 2: /* x / s past f32's range for large x */
            s = 1e-30;
            break;
        case 3:
            s = 0x1p-149;
            break;
        case 4:
            s = 1e30;
            break;
        case 5:
            s = fabs(fuzz_log_uniform(rng, -149, 127));
            break;
        case 6: /* per-token-like: the row's range maps onto the codes */
            s = 1.0 / fuzz_max(c->cache_dtype);
            break;
        default:
            s = FLT_MIN;
            break;
        }
        c->scale.data[h * c->scale.stride_head] = (float)s;
    }
    if (f[F_FIXED_BAD] < 96)
        c->scale.data[(f[F_FIXED_BAD] % c->heads) * c->scale.stride_head] =
            (float)bad[(f[F_FIXED_BAD] / 16) % 6];
}

static void make_slots(cache_call *c, const uint8_t *f, uint64_t *rng) {
    const int64_t rows = c->rows;
    int64_t *order = malloc((size_t)(rows > 0 ? rows : 1) * sizeof *order);
    CHECK(order != NULL);
    for (int64_t i = 0; i < rows; i++)
        order[i] = i;
    for (int64_t i = rows - 1; i > 0; i--) {
        const int64_t j = fuzz_pick(rng, 0, i), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    for (int64_t t = 0; t < c->tokens; t++)
        c->slots[t] = t < rows ? order[t] : -1;
    free(order);
    if (f[F_SKIP] >= 128)
        for (int64_t t = 0; t < c->tokens; t++)
            if ((f[F_SKIP] >> (t % 7)) & 1) c->slots[t] = -1;
    if (f[F_BAD_SLOT] >= 160 && c->tokens > 0) {
        const int64_t i = f[F_BAD_SLOT_AT] % c->tokens;
        const int64_t values[] = {
            c->slots[(i + 1) % c->tokens], rows, rows + 3, -2, INT64_MIN, INT64_MAX, rows - 1, -1};
        c->slots[i] = values[f[F_BAD_SLOT] % 8];
    }
}

static fai_status write_cache(const cache_call *c, fai_pool *pool) {
    return fai_cache_write(c->tokens, c->heads, c->dim, c->src_arg, c->slots_arg, c->blocks,
                           c->block_rows, c->cache_arg, c->scale_arg, pool);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_input in = {data, size, 0};
    uint8_t f[F_COUNT];
    fuzz_fields(&in, f, F_COUNT);
    uint64_t rng = fuzz_u64(&in);

    cache_call c;
    memset(&c, 0, sizeof c);
    c.tokens = f[F_TOKENS] < 250 ? f[F_TOKENS] % 9 : f[F_TOKENS] - 252;
    c.heads = f[F_HEADS] < 250 ? 1 + f[F_HEADS] % 4 : f[F_HEADS] - 253;
    static const int64_t wide[] = {48, 64, 96, 128, 256, 576, 577, 0};
    c.dim = f[F_DIM] < 200 ? 1 + f[F_DIM] % 40 : wide[f[F_DIM] % 8];
    c.blocks = f[F_BLOCKS] < 250 ? f[F_BLOCKS] % 5 : f[F_BLOCKS] - 252;
    c.block_rows = f[F_BLOCK_ROWS] < 250 ? 1 + f[F_BLOCK_ROWS] % 8 : f[F_BLOCK_ROWS] - 253;
    if (f[F_BIG] >= 254) { /* 2^16 elements, the fewest the pool's threads share (milliseconds) */
        c.tokens = 32, c.heads = 4, c.dim = 512;
        c.blocks = f[F_BIG] & 1 ? 2 : 4, c.block_rows = f[F_BIG] & 1 ? 32 : 8;
    }
    static const int bad_src[] = {3, 4, 5, 6, -1, 1000};
    static const int bad_cache[] = {6, 7, -1, 1000, 255, INT32_MIN};
    c.src_dtype =
        (fai_dtype)(f[F_SRC_DTYPE] < 240 ? f[F_SRC_DTYPE] % 3 : bad_src[f[F_SRC_DTYPE] % 6]);
    c.cache_dtype = (fai_dtype)(f[F_CACHE_DTYPE] < 240 ? f[F_CACHE_DTYPE] % 6
                                                       : bad_cache[f[F_CACHE_DTYPE] % 6]);
    c.quantized = c.cache_dtype >= FAI_DTYPE_I8 && c.cache_dtype <= FAI_DTYPE_E5M2;
    c.rows = c.blocks > 0 && c.block_rows > 0 ? c.blocks * c.block_rows : 0;
    c.src_mode = f[F_SRC_LAYOUT] % SRC_MODES;
    c.cache_mode = f[F_CACHE_LAYOUT] % CACHE_MODES;
    c.scale_mode = c.quantized             ? f[F_SCALE_MODE] % SCALE_MODES
                   : f[F_SCALE_MODE] < 200 ? SCALE_NULL
                   : f[F_SCALE_MODE] < 228 ? SCALE_DATA_NULL
                                           : SCALE_DENSE;
    c.pool = f[F_POOL] % 3;
    c.src.dtype = c.src_dtype, c.cache.dtype = c.cache_dtype;
    c.src.stride_dim = c.cache.stride_dim = 1;
    cache_strides(&c, f);
    src_strides(&c, f);
    scale_strides(&c, f);
    c.per_token = c.quantized && c.scale.stride_seq != 0;
    if (f[F_DIM_STRIDE] >= 224) {
        static const int64_t values[] = {0, 2, -1, 3, INT64_MIN, 0, 1, 64};
        *(f[F_DIM_STRIDE] & 8 ? &c.src.stride_dim : &c.cache.stride_dim) =
            values[f[F_DIM_STRIDE] % 8];
    }

    /* where everything lies: sizes of the buffers, offsets of aliased tensors */
    const int64_t src_size = element_size(c.src_dtype), cache_size = element_size(c.cache_dtype);
    int64_t src_bytes = src_extent(&c), cache_bytes = cache_extent(&c);
    int64_t scale_bytes = c.quantized || c.scale_mode == SCALE_DENSE ? scale_extent(&c) : 0;
    /* an overflowing tensor must be refused: its buffer is sized as if it were dense */
    if (src_bytes < 0) src_bytes = 64 * src_size;
    if (cache_bytes < 0) cache_bytes = 64 * cache_size;
    if (scale_bytes < 0) scale_bytes = 64 * 4;
    if (src_bytes > BUDGET || cache_bytes > BUDGET || scale_bytes > BUDGET) return 0;
    const int64_t cache_offset =
        c.cache_mode == CACHE_OFFSET ? (f[F_CACHE_B] % 16) * cache_size : 0;
    int64_t cache_need = cache_offset + cache_bytes, src_need = src_bytes, scale_need = scale_bytes;
    int64_t src_offset = 0, scale_offset = 0;
    int src_home = B_SRC, scale_home = B_SCALE;
    if (c.src_mode == SRC_IN_CACHE) {
        src_home = B_CACHE, src_offset = (f[F_SRC_A] % 64) * src_size;
    } else if (c.src_mode == SRC_PAST_CACHE) {
        src_home = B_CACHE, src_offset = round_up(cache_need, 16) + (f[F_SRC_A] % 8) * src_size;
    }
    if (src_home == B_CACHE && src_offset + src_bytes > cache_need)
        cache_need = src_offset + src_bytes;
    if (c.scale_mode == SCALE_IN_CACHE) {
        scale_home = B_CACHE, scale_offset = (f[F_SCALE_A] % 64) * 4;
        if (scale_offset + scale_bytes > cache_need) cache_need = scale_offset + scale_bytes;
    } else if (c.scale_mode == SCALE_PAST_SRC) { /* apart from the source, in its buffer */
        scale_home = src_home;
        scale_offset = round_up(src_offset + src_bytes, 4) + (f[F_SCALE_A] % 8) * 4;
        int64_t *need = src_home == B_CACHE ? &cache_need : &src_need;
        if (scale_offset + scale_bytes > *need) *need = scale_offset + scale_bytes;
    }
    if (cache_need > BUDGET) return 0;

    fuzz_buffer buf[B_COUNT];
    memset(buf, 0, sizeof buf);
    int64_t *slots = malloc((size_t)(c.tokens > 0 ? c.tokens : 1) * sizeof *slots);
    int64_t *slots_before = malloc((size_t)(c.tokens > 0 ? c.tokens : 1) * sizeof *slots);
    CHECK(slots && slots_before);
    CHECK(fuzz_buffer_alloc(&buf[B_CACHE], (size_t)cache_need, &rng));
    CHECK(fuzz_buffer_alloc(&buf[B_SCALE], (size_t)scale_need, &rng));
    CHECK(fuzz_buffer_alloc(&buf[B_SRC], (size_t)src_need, &rng));
    c.cache.data = fuzz_payload(&buf[B_CACHE]) + cache_offset;
    c.src.data = fuzz_payload(&buf[src_home]) + src_offset;
    c.scale.data = (float *)(void *)(fuzz_payload(&buf[scale_home]) + scale_offset);
    c.slots = slots;
    c.src_arg = &c.src, c.cache_arg = &c.cache, c.scale_arg = &c.scale, c.slots_arg = slots;
    if (c.scale_mode == SCALE_NULL) c.scale_arg = NULL;
    if (c.scale_mode == SCALE_DATA_NULL) c.scale.data = NULL;
    make_slots(&c, f, &rng);
    fill_source(&c, f, &rng);
    fill_fixed_scales(&c, f, &rng);
    if (f[F_NULLS] >= 240) {
        switch (f[F_NULLS] % 5) {
        case 0:
            c.src_arg = NULL;
            break;
        case 1:
            c.cache_arg = NULL;
            break;
        case 2:
            c.slots_arg = NULL;
            break;
        case 3:
            c.src.data = NULL;
            break;
        default:
            c.cache.data = NULL;
            break;
        }
    }
    for (int i = 0; i < B_COUNT; i++)
        fuzz_buffer_snapshot(&buf[i]);
    memcpy(slots_before, slots, (size_t)(c.tokens > 0 ? c.tokens : 0) * sizeof *slots);

    const char *must_refuse = refusal(&c, buf);
    /* each tensor apart from the others, the cache's and the scales' strides nested: a valid
     * call in such a layout must be accepted (others, e.g. interleaved strides, may be refused) */
    const int regular = f[F_NULLS] < 240 && c.src.stride_dim >= 0 && c.src.stride_dim <= 1 &&
                        c.cache.stride_dim >= 0 && c.cache.stride_dim <= 1 &&
                        c.cache_mode <= CACHE_OFFSET &&
                        (c.src_mode <= SRC_RAW || c.src_mode == SRC_PAST_CACHE) &&
                        (c.quantized ? c.scale_mode <= SCALE_PAST_SRC : c.scale_mode == SCALE_NULL);
    fai_pool *pool = c.pool < 2 ? pools[c.pool] : NULL;
    const fai_status status = write_cache(&c, pool);
    CHECK(memcmp(slots, slots_before, (size_t)(c.tokens > 0 ? c.tokens : 0) * sizeof *slots) == 0);
    if (status != FAI_OK) {
        const char *message = fai_last_error();
        if (!fuzz_message_ok(message) ||
            strcmp(fai_status_string(status), "FAI_ERR_UNKNOWN") == 0) {
            describe(&c);
            fprintf(stderr, "fuzz_cache: refused with status %d and a bad message \"%s\"\n",
                    (int)status, message ? message : "(null)");
            abort();
        }
        int which;
        ptrdiff_t offset;
        if (fuzz_changed(buf, B_COUNT, 1, &which, &offset)) {
            describe(&c);
            fprintf(stderr, "fuzz_cache: refused (%s) but byte %td of buffer %d changed\n", message,
                    offset, which);
            abort();
        }
        if (!must_refuse && regular) {
            describe(&c);
            fprintf(stderr, "fuzz_cache: a valid call refused: %s \"%s\"\n",
                    fai_status_string(status), message);
            abort();
        }
    } else {
        if (must_refuse) {
            describe(&c);
            fprintf(stderr, "fuzz_cache: accepted although %s\n", must_refuse);
            abort();
        }
        CHECK(fai_last_error()[0] == '\0');
        check_success(&c, buf);
        /* the same call on 1 and 2 threads writes the same bytes */
        unsigned char *after[B_COUNT];
        for (int i = 0; i < B_COUNT; i++) {
            after[i] = malloc(fuzz_total(&buf[i]));
            CHECK(after[i] != NULL);
            memcpy(after[i], buf[i].base, fuzz_total(&buf[i]));
        }
        for (int p = 0; p < 2; p++) {
            if (pools[p] == pool) continue;
            for (int i = 0; i < B_COUNT; i++)
                fuzz_buffer_restore(&buf[i]);
            CHECK(write_cache(&c, pools[p]) == FAI_OK);
            for (int i = 0; i < B_COUNT; i++)
                if (memcmp(after[i], buf[i].base, fuzz_total(&buf[i])) != 0) {
                    describe(&c);
                    fprintf(stderr, "fuzz_cache: buffer %d differs on %d thread(s)\n", i, p + 1);
                    abort();
                }
        }
        for (int i = 0; i < B_COUNT; i++)
            free(after[i]);
    }
    for (int i = 0; i < B_COUNT; i++)
        fuzz_buffer_free(&buf[i]);
    free(slots);
    free(slots_before);
    return 0;
}
