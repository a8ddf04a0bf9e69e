/* fai_cache_write and fai_cache_alloc. Rows written to random slots of dense and paged caches of
 * every dtype, with per-token and fixed scales, on one and several threads, are checked element
 * by element with the oracle's own decoders: a float cache holds the source rounded to nearest
 * even, a quantized one scale x q within half a step of the source (or saturated at the type's
 * largest value); every byte not written keeps its sentinel, and the bytes do not depend on the
 * thread count. Every refusal names its field and writes nothing. Attention over K and V written
 * this way into paged int8 and e4m3 caches agrees with the oracle. */
#include "test_util.h"

#include "fai.h"
#include "fai_cases.h"
#include "fai_oracle.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Largest magnitudes of int8, e4m3 and e5m2 (fai.h). */
static double quant_max(fai_dtype dtype) {
    return dtype == FAI_DTYPE_I8 ? 127.0 : dtype == FAI_DTYPE_E4M3 ? 448.0 : 57344.0;
}

static int is_quantized(fai_dtype dtype) {
    return dtype == FAI_DTYPE_I8 || dtype == FAI_DTYPE_E4M3 || dtype == FAI_DTYPE_E5M2;
}

/* -- buffers ----------------------------------------------------------------------------------- */

/* A cache [blocks, block_rows, heads, dim] with gaps between heads, rows and blocks, and its
 * scales: per token [blocks, block_rows, heads] with gaps too, or fixed [heads] every other
 * float. Every byte starts as a sentinel. */
typedef struct test_cache {
    fai_dtype dtype;
    int64_t blocks, block_rows, heads, dim;
    int per_token;
    fai_tensor tensor;
    fai_scale scale;
    unsigned char *data;
    size_t bytes;
    float *scales;
    size_t scale_count;
} test_cache;

static void fill_sentinel(test_cache *c) {
    for (size_t i = 0; i < c->bytes; i++)
        c->data[i] = (unsigned char)(i * 131 + 7);
    if (c->per_token)
        for (size_t i = 0; i < c->scale_count; i++)
            c->scales[i] = -3.0f;
}

static int cache_init(test_cache *c, fai_dtype dtype, int64_t blocks, int64_t block_rows,
                      int64_t heads, int64_t dim, int per_token, fai_rng *rng) {
    memset(c, 0, sizeof *c);
    c->dtype = dtype, c->blocks = blocks, c->block_rows = block_rows;
    c->heads = heads, c->dim = dim, c->per_token = per_token;
    const int64_t stride_head = dim + 2, stride_seq = heads * stride_head + 1;
    const int64_t stride_batch = block_rows * stride_seq + 3;
    c->tensor = (fai_tensor){NULL, dtype, stride_batch, stride_seq, stride_head, 1};
    c->bytes = (size_t)(blocks * stride_batch) * fai_dtype_size(dtype);
    c->data = malloc(c->bytes);
    if (is_quantized(dtype) && per_token) {
        const int64_t seq = heads + 1, batch = block_rows * seq + 2;
        c->scale_count = (size_t)(blocks * batch);
        c->scale = (fai_scale){NULL, batch, seq, 1};
    } else if (is_quantized(dtype)) {
        c->scale_count = (size_t)(2 * heads);
        c->scale = (fai_scale){NULL, 0, 0, 2};
    }
    c->scales = malloc((c->scale_count + 1) * sizeof(float));
    if (!c->data || !c->scales) return 0;
    c->tensor.data = c->data;
    c->scale.data = c->scale_count ? c->scales : NULL;
    fill_sentinel(c);
    /* fixed scales: the largest source magnitude (3000) lands around qmax, so some values
     * saturate and small rows reach the subnormals */
    if (is_quantized(dtype) && !per_token)
        for (int64_t h = 0; h < heads; h++) {
            c->scales[2 * h] = (float)(3000.0 / quant_max(dtype) * (0.5 + fai_rng_uniform(rng)));
            c->scales[2 * h + 1] = NAN; /* the gap is never read */
        }
    return 1;
}

static void cache_free(test_cache *c) {
    free(c->data);
    free(c->scales);
}

/* New rows [tokens, heads, dim] of `dtype` with gaps; each (token, head) row has its own
 * magnitude, from all zeros to 3000, and some rows go to slot -1. */
typedef struct test_rows {
    int64_t tokens, heads, dim;
    fai_tensor tensor;
    unsigned char *data;
    int64_t *slots;
} test_rows;

static int rows_init(test_rows *r, fai_dtype dtype, int64_t tokens, int64_t heads, int64_t dim,
                     int64_t cache_rows, fai_rng *rng) {
    static const double magnitudes[] = {0.0, 1e-3, 0.7, 1.0, 100.0, 3000.0};
    memset(r, 0, sizeof *r);
    r->tokens = tokens, r->heads = heads, r->dim = dim;
    const int64_t stride_head = dim + 1, stride_seq = heads * stride_head + 5;
    r->tensor = (fai_tensor){NULL, dtype, 12345, stride_seq, stride_head, 1};
    const size_t count = (size_t)(tokens * stride_seq);
    r->data = calloc(count + 1, fai_dtype_size(dtype));
    r->slots = malloc((size_t)(tokens + 1) * sizeof *r->slots);
    int64_t *order = malloc((size_t)(cache_rows + 1) * sizeof *order);
    if (!r->data || !r->slots || !order) {
        free(order);
        return 0;
    }
    r->tensor.data = r->data;
    for (int64_t t = 0; t < tokens; t++)
        for (int64_t h = 0; h < heads; h++) {
            const double amp = magnitudes[fai_rng_range(rng, 0, 5)];
            for (int64_t x = 0; x < dim; x++) {
                const double value = (2.0 * fai_rng_uniform(rng) - 1.0) * amp;
                fai_oracle_store(r->data, dtype, t * stride_seq + h * stride_head + x, value);
            }
        }
    /* distinct slots: a shuffle of all rows of the cache */
    for (int64_t i = 0; i < cache_rows; i++)
        order[i] = i;
    for (int64_t i = cache_rows - 1; i > 0; i--) {
        const int64_t j = fai_rng_range(rng, 0, i), swap = order[i];
        order[i] = order[j], order[j] = swap;
    }
    for (int64_t t = 0; t < tokens; t++)
        r->slots[t] = t % 7 == 3 ? -1 : order[t];
    free(order);
    return 1;
}

static void rows_free(test_rows *r) {
    free(r->data);
    free(r->slots);
}

/* -- checks ------------------------------------------------------------------------------------ */

/* Whether q (decoded, the quantized cache's own value) stands for source value x at scale s:
 * saturated at +-qmax where |x / s| reaches it, else within half a step of x / s: 1/2 for int8;
 * for fp8 half an ulp of the binade x / s lies in (2^(e - 4) for e4m3's 3 mantissa bits, 2^(e -
 * 3) for e5m2's 2, |x / s| in [2^e, 2^(e+1))), or half the subnormal step (2^-10, 2^-17) below
 * the normal range. The small factor covers the rounding of x / s in f32. */
static int quantized_ok(fai_dtype dtype, double x, double s, double q) {
    const double y = x / s, qmax = quant_max(dtype);
    if (fabs(y) >= qmax) return q == copysign(qmax, y);
    double half_step = 0.5;
    if (dtype != FAI_DTYPE_I8) {
        const int mantissa_bits = dtype == FAI_DTYPE_E4M3 ? 3 : 2;
        const double subnormal_half = dtype == FAI_DTYPE_E4M3 ? 0x1.0p-10 : 0x1.0p-17;
        int exponent = 0;
        frexp(y, &exponent); /* |y| in [2^(exponent - 1), 2^exponent) */
        half_step = fmax(ldexp(1.0, exponent - 1 - mantissa_bits - 1), subnormal_half);
    }
    return fabs(y - q) <= half_step * (1.0 + 1e-5) + 1e-30;
}

/* Whether the cache element at `at` holds source value x (unquantized: rounded to nearest even
 * by the oracle's encoders; f32 exactly). */
static int float_ok(const test_cache *c, int64_t at, double x) {
    if (c->dtype == FAI_DTYPE_F32) return fai_oracle_load(c->data, FAI_DTYPE_F32, at) == x;
    const uint16_t bits = ((const uint16_t *)c->data)[at];
    return bits ==
           (c->dtype == FAI_DTYPE_F16 ? fai_oracle_f16_encode(x) : fai_oracle_bf16_encode(x));
}

static int64_t cache_offset(const test_cache *c, int64_t slot, int64_t h) {
    const fai_tensor *t = &c->tensor;
    return slot / c->block_rows * t->stride_batch + slot % c->block_rows * t->stride_seq +
           h * t->stride_head;
}

static int64_t scale_offset(const test_cache *c, int64_t slot, int64_t h) {
    const fai_scale *s = &c->scale;
    return slot / c->block_rows * s->stride_batch + slot % c->block_rows * s->stride_seq +
           h * s->stride_head;
}

/* Checks one written (token, head) row; marks the bytes it may have written in `touched`
 * (cache) and `touched_scales`. Returns the number of wrong elements (the scale counts as one). */
static int64_t check_row(const test_cache *c, const test_rows *r, int64_t t, int64_t h,
                         unsigned char *touched, unsigned char *touched_scales) {
    const int64_t slot = r->slots[t], at = cache_offset(c, slot, h);
    const int64_t src_at = t * r->tensor.stride_seq + h * r->tensor.stride_head;
    const size_t size = fai_dtype_size(c->dtype);
    memset(touched + (size_t)at * size, 1, (size_t)r->dim * size);
    int64_t wrong = 0;
    double s = 1.0, amax = 0.0;
    for (int64_t x = 0; x < r->dim; x++)
        amax = fmax(amax, fabs(fai_oracle_load(r->data, r->tensor.dtype, src_at + x)));
    if (is_quantized(c->dtype) && c->per_token) {
        const int64_t scale_at = scale_offset(c, slot, h);
        touched_scales[scale_at] = 1;
        s = c->scales[scale_at];
        /* amax is an f32 value: the scale is its f32 quotient by qmax */
        const float want = amax > 0.0 ? (float)amax / (float)quant_max(c->dtype) : 1.0f;
        wrong += (float)s != want;
    } else if (is_quantized(c->dtype)) {
        s = c->scales[2 * h];
    }
    for (int64_t x = 0; x < r->dim; x++) {
        const double value = fai_oracle_load(r->data, r->tensor.dtype, src_at + x);
        if (is_quantized(c->dtype))
            wrong += !quantized_ok(c->dtype, value, s, fai_oracle_load(c->data, c->dtype, at + x));
        else
            wrong += !float_ok(c, at + x, value);
    }
    return wrong;
}

/* Every written element right, every other byte of the cache and its scales as before. */
static void check_cache(int *test_failed_, const test_cache *c, const test_rows *r,
                        const unsigned char *data_before, const float *scales_before,
                        const char *what) {
    unsigned char *touched = calloc(c->bytes, 1);
    unsigned char *touched_scales = calloc(c->scale_count + 1, 1);
    REQUIRE(touched && touched_scales);
    int64_t wrong = 0, changed = 0;
    for (int64_t t = 0; t < r->tokens; t++)
        for (int64_t h = 0; r->slots[t] >= 0 && h < r->heads; h++)
            wrong += check_row(c, r, t, h, touched, touched_scales);
    for (size_t i = 0; i < c->bytes; i++)
        changed += !touched[i] && c->data[i] != data_before[i];
    for (size_t i = 0; i < c->scale_count; i++)
        changed += !touched_scales[i] && memcmp(&c->scales[i], &scales_before[i], 4) != 0;
    CHECK(wrong == 0);
    CHECK(changed == 0);
    if (wrong || changed)
        printf("  %s: %lld wrong elements, %lld bytes or scales changed outside the rows\n", what,
               (long long)wrong, (long long)changed);
    free(touched);
    free(touched_scales);
}

/* -- written rows against the oracle ----------------------------------------------------------- */

typedef struct write_case {
    fai_dtype cache_dtype, src_dtype;
    int per_token;
    int64_t blocks, block_rows; /* dense: a few long blocks; paged: many pages */
    int64_t tokens, heads, dim;
} write_case;

static void describe(const write_case *wc, char *buf, size_t size) {
    snprintf(buf, size, "%s cache from %s, %s scales, %lld x %lld rows, %lld tokens x %lld x %lld",
             fai_dtype_name(wc->cache_dtype), fai_dtype_name(wc->src_dtype),
             is_quantized(wc->cache_dtype) ? (wc->per_token ? "per-token" : "fixed") : "no",
             (long long)wc->blocks, (long long)wc->block_rows, (long long)wc->tokens,
             (long long)wc->heads, (long long)wc->dim);
}

/* Writes the case's rows with each pool (NULL: the default one), checks every result, and
 * checks that all pools wrote the same bytes. */
static void run_write_case(int *test_failed_, const write_case *wc, fai_pool *const *pools,
                           int pool_count, uint64_t seed) {
    char what[256];
    describe(wc, what, sizeof what);
    fai_rng rng = {seed};
    test_cache c;
    test_rows r;
    const int cache_ok = cache_init(&c, wc->cache_dtype, wc->blocks, wc->block_rows, wc->heads,
                                    wc->dim, wc->per_token, &rng);
    const int rows_ok = rows_init(&r, wc->src_dtype, wc->tokens, wc->heads, wc->dim,
                                  wc->blocks * wc->block_rows, &rng);
    unsigned char *before = malloc(c.bytes), *first = malloc(c.bytes);
    float *scales_before = malloc((c.scale_count + 1) * sizeof(float));
    float *first_scales = malloc((c.scale_count + 1) * sizeof(float));
    if (cache_ok && rows_ok && before && first && scales_before && first_scales) {
        memcpy(before, c.data, c.bytes);
        memcpy(scales_before, c.scales, c.scale_count * sizeof(float));
        for (int p = 0; p < pool_count; p++) {
            memcpy(c.data, before, c.bytes);
            memcpy(c.scales, scales_before, c.scale_count * sizeof(float));
            const fai_status status = fai_cache_write(
                wc->tokens, wc->heads, wc->dim, &r.tensor, r.slots, wc->blocks, wc->block_rows,
                &c.tensor, c.scale_count ? &c.scale : NULL, pools[p]);
            CHECK(status == FAI_OK);
            if (status != FAI_OK) {
                printf("  %s: %s\n", what, fai_last_error());
                break;
            }
            check_cache(test_failed_, &c, &r, before, scales_before, what);
            if (p == 0) {
                memcpy(first, c.data, c.bytes);
                memcpy(first_scales, c.scales, c.scale_count * sizeof(float));
            } else {
                CHECK(memcmp(first, c.data, c.bytes) == 0);
                CHECK(memcmp(first_scales, c.scales, c.scale_count * sizeof(float)) == 0);
            }
        }
    } else {
        CHECK(!"out of memory");
    }
    free(before), free(first), free(scales_before), free(first_scales);
    cache_free(&c);
    rows_free(&r);
}

TEST(cache_write_every_dtype_scale_and_geometry) {
    static const fai_dtype dtypes[] = {FAI_DTYPE_F32, FAI_DTYPE_F16,  FAI_DTYPE_BF16,
                                       FAI_DTYPE_I8,  FAI_DTYPE_E4M3, FAI_DTYPE_E5M2};
    static const fai_dtype sources[] = {FAI_DTYPE_F32, FAI_DTYPE_F16, FAI_DTYPE_BF16};
    /* blocks, block_rows: a dense cache [B, Skv] and a page pool */
    static const int64_t geometry[2][2] = {{3, 70}, {40, 16}};
    /* tokens, heads, dim: a decode-sized write (the calling thread) and one large enough for
     * the pool's threads */
    static const int64_t sizes[2][3] = {{9, 3, 17}, {150, 4, 112}};
    fai_pool *one = NULL, *two = NULL;
    REQUIRE(fai_pool_create(1, &one) == FAI_OK);
    REQUIRE(fai_pool_create(2, &two) == FAI_OK);
    fai_pool *const pools[3] = {one, two, NULL};
    uint64_t seed = 1;
    for (int d = 0; d < 6; d++)
        for (int per_token = 0; per_token <= is_quantized(dtypes[d]); per_token++)
            for (int g = 0; g < 2; g++)
                for (int z = 0; z < 2; z++) {
                    const write_case wc = {dtypes[d],      sources[seed % 3], per_token,
                                           geometry[g][0], geometry[g][1],    sizes[z][0],
                                           sizes[z][1],    sizes[z][2]};
                    run_write_case(test_failed_, &wc, pools, 3, seed++);
                }
    fai_pool_free(one);
    fai_pool_free(two);
}

/* Fixed scales saturate at the type's largest value and round to nearest even. */
TEST(cache_write_fixed_scales_saturate) {
    const float src[8] = {100.0f, -100.0f, 63.5f, 63.25f, 0.25f, -0.75f, 1e9f, -1e9f};
    const fai_tensor rows = {(void *)src, FAI_DTYPE_F32, 0, 8, 8, 1};
    const int64_t slot = 0;
    int8_t q8[8];
    fai_tensor cache = {q8, FAI_DTYPE_I8, 8, 8, 8, 1};
    float half = 0.5f;
    fai_scale fixed = {&half, 0, 0, 0};
    REQUIRE(fai_cache_write(1, 1, 8, &rows, &slot, 1, 1, &cache, &fixed, NULL) == FAI_OK);
    /* 200, -200, 127, 126.5, 0.5, -1.5, 2e9, -2e9 */
    const int8_t want8[8] = {127, -127, 127, 126, 0, -2, 127, -127};
    CHECK(memcmp(q8, want8, 8) == 0);

    uint8_t q[8];
    float one = 1.0f;
    fixed.data = &one;
    cache = (fai_tensor){q, FAI_DTYPE_E4M3, 8, 8, 8, 1};
    REQUIRE(fai_cache_write(1, 1, 8, &rows, &slot, 1, 1, &cache, &fixed, NULL) == FAI_OK);
    CHECK(fai_oracle_load(q, FAI_DTYPE_E4M3, 0) == 96.0); /* 100: steps of 8 from 64 to 128 */
    CHECK(fai_oracle_load(q, FAI_DTYPE_E4M3, 6) == 448.0);
    CHECK(fai_oracle_load(q, FAI_DTYPE_E4M3, 7) == -448.0);
    cache.dtype = FAI_DTYPE_E5M2;
    REQUIRE(fai_cache_write(1, 1, 8, &rows, &slot, 1, 1, &cache, &fixed, NULL) == FAI_OK);
    CHECK(fai_oracle_load(q, FAI_DTYPE_E5M2, 0) == 96.0); /* steps of 16 from 64 to 128 */
    CHECK(fai_oracle_load(q, FAI_DTYPE_E5M2, 6) == 57344.0);
    CHECK(fai_oracle_load(q, FAI_DTYPE_E5M2, 7) == -57344.0);
    /* a quotient past f32's range (a tiny fixed scale) saturates too, never e5m2's infinity */
    float tiny = 1e-30f;
    fixed.data = &tiny;
    REQUIRE(fai_cache_write(1, 1, 8, &rows, &slot, 1, 1, &cache, &fixed, NULL) == FAI_OK);
    CHECK(q[6] == 0x7b && q[7] == 0xfb);
    cache.dtype = FAI_DTYPE_E4M3;
    REQUIRE(fai_cache_write(1, 1, 8, &rows, &slot, 1, 1, &cache, &fixed, NULL) == FAI_OK);
    CHECK(q[6] == 0x7e && q[7] == 0xfe);
}

/* A cache of no blocks holds no element: every token skipped is a valid call, whatever its
 * strides (never multiplied out) and wherever the source lies, and it writes nothing. */
TEST(cache_write_zero_blocks_is_an_empty_cache) {
    float buffer[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const int64_t skipped = -1;
    fai_tensor cache = {buffer, FAI_DTYPE_F32, 8, 4, 4, 1};
    const fai_tensor src = {buffer, FAI_DTYPE_F32, 0, 4, 4, 1}; /* where the cache starts */
    CHECK(fai_cache_write(1, 1, 4, &src, &skipped, 0, 2, &cache, NULL, NULL) == FAI_OK);
    cache = (fai_tensor){buffer, FAI_DTYPE_F32, 3, 3, INT64_MAX, 1};
    const fai_tensor three = {buffer + 4, FAI_DTYPE_F32, 0, 3, 1, 1};
    CHECK(fai_cache_write(1, 3, 1, &three, &skipped, 0, 1, &cache, NULL, NULL) == FAI_OK);
    for (int i = 0; i < 8; i++)
        CHECK(buffer[i] == (float)(i + 1));
    const int64_t slot = 0; /* and no slot is inside it */
    CHECK(fai_cache_write(1, 1, 4, &src, &slot, 0, 2, &cache, NULL, NULL) == FAI_ERR_INVALID_ARG);
}

/* A token whose values are all a few subnormal steps (amax / qmax rounds to 0 in f32) gets a
 * scale fai_run takes (finite and > 0: the smallest subnormal) and its values back exactly. */
TEST(cache_write_tiny_rows_keep_a_usable_scale) {
    const float tiny = 1e-44f; /* 7 subnormal steps */
    const float src[4] = {tiny, -tiny, 0.0f, 2 * tiny};
    const fai_tensor rows = {(void *)src, FAI_DTYPE_F32, 0, 4, 4, 1};
    const int64_t slot = 0;
    static const fai_dtype dtypes[] = {FAI_DTYPE_I8, FAI_DTYPE_E4M3, FAI_DTYPE_E5M2};
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        unsigned char codes[4];
        float scale = -1.0f;
        const fai_tensor cache = {codes, dtypes[d], 4, 4, 4, 1};
        const fai_scale per_token = {&scale, 1, 1, 1};
        REQUIRE(fai_cache_write(1, 1, 4, &rows, &slot, 1, 1, &cache, &per_token, NULL) == FAI_OK);
        CHECK(isfinite(scale) && scale > 0.0f);
        for (int x = 0; x < 4; x++)
            CHECK(fai_oracle_load(codes, dtypes[d], x) * scale == (double)src[x]);
    }
}

/* Unquantized caches take the values as they are: f16 saturates finite values (as fai_run's
 * output does) and keeps +-Inf and NaN. */
TEST(cache_write_float_caches_keep_nonfinite) {
    const float src[4] = {1e6f, -INFINITY, NAN, 1.0f};
    const fai_tensor rows = {(void *)src, FAI_DTYPE_F32, 0, 4, 4, 1};
    const int64_t slot = 1;
    uint16_t h[8] = {0};
    const fai_tensor cache = {h, FAI_DTYPE_F16, 8, 4, 4, 1};
    REQUIRE(fai_cache_write(1, 1, 4, &rows, &slot, 1, 2, &cache, NULL, NULL) == FAI_OK);
    CHECK(h[4] == 0x7bff);
    CHECK(h[5] == 0xfc00);
    CHECK(isnan(fai_oracle_f16_decode(h[6])));
    CHECK(h[7] == 0x3c00);
    CHECK(h[0] == 0 && h[3] == 0);
}

/* -- refusals ---------------------------------------------------------------------------------- */

/* A small int8 cache with per-token scales, fixed scales beside it, and four tokens. */
typedef struct error_fixture {
    float src[4 * 2 * 8];
    int64_t slots[4];
    int8_t cache[2 * 4 * 2 * 8];
    float scales[2 * 4 * 2];
    float fixed[2];
    int8_t cache_before[sizeof(int8_t) * 2 * 4 * 2 * 8];
    float scales_before[2 * 4 * 2];
    fai_tensor src_tensor, cache_tensor;
    fai_scale per_token, fixed_scale;
} error_fixture;

static void fixture_init(error_fixture *f) {
    for (int i = 0; i < 64; i++)
        f->src[i] = (float)(i % 13) - 6.0f;
    const int64_t slots[4] = {5, 0, 7, 2};
    memcpy(f->slots, slots, sizeof slots);
    memset(f->cache, 0x55, sizeof f->cache);
    for (int i = 0; i < 16; i++)
        f->scales[i] = -3.0f;
    f->fixed[0] = f->fixed[1] = 0.25f;
    memcpy(f->cache_before, f->cache, sizeof f->cache);
    memcpy(f->scales_before, f->scales, sizeof f->scales);
    f->src_tensor = (fai_tensor){f->src, FAI_DTYPE_F32, 0, 16, 8, 1};
    f->cache_tensor = (fai_tensor){f->cache, FAI_DTYPE_I8, 64, 16, 8, 1};
    f->per_token = (fai_scale){f->scales, 8, 2, 1};
    f->fixed_scale = (fai_scale){f->fixed, 0, 0, 1};
}

static fai_status fixture_write(error_fixture *f, const fai_scale *scale) {
    return fai_cache_write(4, 2, 8, &f->src_tensor, f->slots, 2, 4, &f->cache_tensor, scale, NULL);
}

/* The call was refused with `want` and a message containing `text`, and nothing was written. */
static void check_refused(int *test_failed_, const error_fixture *f, fai_status got,
                          fai_status want, const char *text) {
    const int named = strstr(fai_last_error(), text) != NULL;
    CHECK(got == want);
    CHECK(named);
    if (got != want || !named)
        printf("  expected %s naming \"%s\", got %s: %s\n", fai_status_string(want), text,
               fai_status_string(got), fai_last_error());
    CHECK(memcmp(f->cache, f->cache_before, sizeof f->cache) == 0);
    CHECK(memcmp(f->scales, f->scales_before, sizeof f->scales) == 0);
}

TEST(cache_write_refuses_bad_slots) {
    error_fixture f;
    fixture_init(&f);
    f.slots[2] = 8;
    check_refused(test_failed_, &f, fixture_write(&f, &f.per_token), FAI_ERR_INVALID_ARG,
                  "slots[2] = 8");
    f.slots[2] = 7, f.slots[1] = -2;
    check_refused(test_failed_, &f, fixture_write(&f, &f.per_token), FAI_ERR_INVALID_ARG,
                  "slots[1] = -2");
    f.slots[1] = 0, f.slots[3] = 5;
    check_refused(test_failed_, &f, fixture_write(&f, &f.per_token), FAI_ERR_INVALID_ARG,
                  "slots[0] = 5 and slots[3] = 5");
    f.slots[3] = 2;
    /* the same through fixed scales, which take another path */
    f.slots[0] = INT64_MIN;
    check_refused(test_failed_, &f, fixture_write(&f, &f.fixed_scale), FAI_ERR_INVALID_ARG,
                  "slots[0] = -9223372036854775808");
    f.slots[0] = 5;
    /* a slot of -1 is skipped: several of them are no duplicates */
    f.slots[1] = f.slots[2] = -1;
    CHECK(fixture_write(&f, &f.per_token) == FAI_OK);
    CHECK(f.scales[10] != -3.0f && f.scales[0] == -3.0f); /* slot 5 written, slot 0 not */
    CHECK(memcmp(f.cache, f.cache_before, 16) == 0);      /* slot 0 (block 0, row 0) unchanged */
}

/* Strides that put two tokens, heads or rows of the cache, or two per-token scales, in one
 * place, and a source or scales that overlap the cache, are refused: the cache would keep
 * whichever was written last (with threads, any of them). */
TEST(cache_write_refuses_places_written_twice) {
    error_fixture f;
    fixture_init(&f);
    const fai_tensor cache = f.cache_tensor;
    static const struct {
        int64_t batch, seq, head;
        const char *named;
    } cache_strides[] = {
        {64, 0, 8, "cache strides (batch 64, seq 0, head 8)"},   /* rows of a block in one */
        {64, 16, 0, "cache strides (batch 64, seq 16, head 0)"}, /* heads in one */
        {64, 16, 4, "cache strides (batch 64, seq 16, head 4)"}, /* heads half overlapping */
        {8, 16, 4, "cache strides (batch 8, seq 16, head 4)"},
    };
    for (size_t c = 0; c < sizeof cache_strides / sizeof cache_strides[0]; c++) {
        f.cache_tensor.stride_batch = cache_strides[c].batch;
        f.cache_tensor.stride_seq = cache_strides[c].seq;
        f.cache_tensor.stride_head = cache_strides[c].head;
        check_refused(test_failed_, &f, fixture_write(&f, &f.per_token), FAI_ERR_INVALID_ARG,
                      cache_strides[c].named);
    }
    f.cache_tensor = cache;
    fai_scale shared = f.per_token;
    shared.stride_head = 0; /* both heads' scales in one */
    check_refused(test_failed_, &f, fixture_write(&f, &shared), FAI_ERR_INVALID_ARG,
                  "per-token scale strides (batch 8, seq 2, head 0)");
    shared = f.per_token;
    shared.stride_batch = 0; /* both blocks' scales in one */
    check_refused(test_failed_, &f, fixture_write(&f, &shared), FAI_ERR_INVALID_ARG,
                  "per-token scale strides (batch 0, seq 2, head 1)");
    /* the source read from the cache's own memory */
    f.cache_tensor.dtype = FAI_DTYPE_F32;
    float floats[2 * 4 * 2 * 8];
    memset(floats, 0, sizeof floats);
    f.cache_tensor.data = floats;
    f.src_tensor.data = floats + 8;
    const float floats_before = floats[0];
    CHECK(fai_cache_write(4, 2, 8, &f.src_tensor, f.slots, 2, 4, &f.cache_tensor, NULL, NULL) ==
          FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "src and cache overlap") != NULL);
    CHECK(floats[0] == floats_before);
    /* per-token scales inside the cache */
    fixture_init(&f);
    fai_scale inside = f.per_token;
    inside.data = (float *)(void *)f.cache;
    check_refused(test_failed_, &f, fixture_write(&f, &inside), FAI_ERR_INVALID_ARG,
                  "the per-token scales (scale) overlap the cache");
    /* fixed scales inside the cache: read while the cache is written, they would change under
     * the write (the first token's codes over them, every later token quantized with those) */
    fai_scale fixed_inside = f.fixed_scale;
    const float small[2] = {0.01f, 0.01f};
    memcpy(f.cache + 4, small, sizeof small);
    memcpy(f.cache_before, f.cache, sizeof f.cache);
    fixed_inside.data = (float *)(void *)(f.cache + 4);
    check_refused(test_failed_, &f, fixture_write(&f, &fixed_inside), FAI_ERR_INVALID_ARG,
                  "the fixed scales (scale) overlap the cache");
    /* slots inside what is written: a token's row (or scale) would change a later token's
     * slot after the checks (valid slots, 0 and 1, placed in the cache and in the scales) */
    fixture_init(&f);
    const int64_t two_slots[2] = {0, 1};
    memcpy(f.cache + 64, two_slots, sizeof two_slots); /* 8-byte aligned in the fixture */
    const int64_t *in_cache = (const int64_t *)(const void *)(f.cache + 64);
    memcpy(f.cache_before, f.cache, sizeof f.cache);
    CHECK(fai_cache_write(2, 2, 8, &f.src_tensor, in_cache, 2, 4, &f.cache_tensor, &f.per_token,
                          NULL) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "slots and cache overlap") != NULL);
    CHECK(memcmp(f.cache, f.cache_before, sizeof f.cache) == 0);
    memcpy(f.scales + 4, two_slots, sizeof two_slots);
    const int64_t *in_scales = (const int64_t *)(const void *)(f.scales + 4);
    memcpy(f.scales_before, f.scales, sizeof f.scales);
    CHECK(fai_cache_write(2, 2, 8, &f.src_tensor, in_scales, 2, 4, &f.cache_tensor, &f.per_token,
                          NULL) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "slots and the per-token scales (scale) overlap") != NULL);
    CHECK(memcmp(f.scales, f.scales_before, sizeof f.scales) == 0);
}

TEST(cache_write_refuses_nonfinite_values_and_bad_scales) {
    error_fixture f;
    fixture_init(&f);
    f.src[1 * 16 + 1 * 8 + 3] = NAN;
    check_refused(test_failed_, &f, fixture_write(&f, &f.per_token), FAI_ERR_INVALID_ARG,
                  "src (token 1, head 1, d 3) = nan");
    check_refused(test_failed_, &f, fixture_write(&f, &f.fixed_scale), FAI_ERR_INVALID_ARG,
                  "token 1, head 1, d 3");
    f.src[1 * 16 + 1 * 8 + 3] = 0.0f;
    f.src[3 * 16 + 0 * 8 + 7] = -INFINITY;
    check_refused(test_failed_, &f, fixture_write(&f, &f.per_token), FAI_ERR_INVALID_ARG,
                  "src (token 3, head 0, d 7) = -inf");
    /* a token that is skipped is never read */
    f.slots[3] = -1;
    CHECK(fixture_write(&f, &f.per_token) == FAI_OK);
    fixture_init(&f);

    const float bad[] = {0.0f, -1.0f, NAN, INFINITY};
    const char *names[] = {"scale[1] = 0", "scale[1] = -1", "scale[1] = nan", "scale[1] = inf"};
    for (int i = 0; i < 4; i++) {
        f.fixed[1] = bad[i];
        check_refused(test_failed_, &f, fixture_write(&f, &f.fixed_scale), FAI_ERR_INVALID_ARG,
                      names[i]);
    }
    f.fixed[1] = 0.25f;
    check_refused(test_failed_, &f, fixture_write(&f, NULL), FAI_ERR_INVALID_ARG, "scale = NULL");
    fai_scale empty = {NULL, 8, 2, 1};
    check_refused(test_failed_, &f, fixture_write(&f, &empty), FAI_ERR_INVALID_ARG,
                  "scale->data = NULL");
    fai_scale ambiguous = {f.scales, 8, 0, 1};
    check_refused(test_failed_, &f, fixture_write(&f, &ambiguous), FAI_ERR_INVALID_ARG,
                  "ambiguous");
    fai_scale negative = {f.scales, 8, 2, -1};
    check_refused(test_failed_, &f, fixture_write(&f, &negative), FAI_ERR_INVALID_ARG,
                  "scale strides");
    f.cache_tensor.dtype = FAI_DTYPE_F16;
    check_refused(test_failed_, &f, fixture_write(&f, &f.per_token), FAI_ERR_INVALID_ARG,
                  "scale is given but the cache is f16");
}

TEST(cache_write_refuses_bad_arguments) {
    error_fixture f;
    fixture_init(&f);
    const fai_scale *s = &f.per_token;
    fai_tensor *src = &f.src_tensor, *cache = &f.cache_tensor;
    check_refused(test_failed_, &f, fai_cache_write(4, 2, 8, NULL, f.slots, 2, 4, cache, s, NULL),
                  FAI_ERR_INVALID_ARG, "src = NULL");
    check_refused(test_failed_, &f, fai_cache_write(4, 2, 8, src, NULL, 2, 4, cache, s, NULL),
                  FAI_ERR_INVALID_ARG, "slots = NULL");
    check_refused(test_failed_, &f, fai_cache_write(4, 2, 8, src, f.slots, 2, 4, NULL, s, NULL),
                  FAI_ERR_INVALID_ARG, "cache = NULL");
    src->data = NULL;
    check_refused(test_failed_, &f, fixture_write(&f, s), FAI_ERR_INVALID_ARG, "src.data = NULL");
    src->data = f.src, cache->data = NULL;
    check_refused(test_failed_, &f, fixture_write(&f, s), FAI_ERR_INVALID_ARG, "cache.data = NULL");
    cache->data = f.cache;

    const struct {
        int64_t tokens, heads, dim, blocks, block_rows;
        const char *name;
    } sizes[] = {{-1, 2, 8, 2, 4, "tokens = -1"}, {4, 0, 8, 2, 4, "heads = 0"},
                 {4, 2, 0, 2, 4, "dim = 0"},      {4, 2, 577, 2, 4, "dim = 577"},
                 {4, 2, 8, -1, 4, "blocks = -1"}, {4, 2, 8, 2, 0, "block_rows = 0"}};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        check_refused(test_failed_, &f,
                      fai_cache_write(sizes[i].tokens, sizes[i].heads, sizes[i].dim, src, f.slots,
                                      sizes[i].blocks, sizes[i].block_rows, cache, s, NULL),
                      FAI_ERR_INVALID_ARG, sizes[i].name);
    check_refused(test_failed_, &f,
                  fai_cache_write(4, 2, 8, src, f.slots, INT64_MAX / 2, 4, cache, s, NULL),
                  FAI_ERR_OVERFLOW, "blocks = 4611686018427387903 x block_rows = 4");
    check_refused(test_failed_, &f,
                  fai_cache_write(INT64_MAX / 4, 2, 8, src, f.slots, 2, 4, cache, s, NULL),
                  FAI_ERR_OVERFLOW, "tokens = 2305843009213693951 x heads = 2 x dim = 8");
    cache->stride_batch = INT64_MAX / 2;
    check_refused(test_failed_, &f, fixture_write(&f, s), FAI_ERR_OVERFLOW, "cache: [2, 4, 2]");
    cache->stride_batch = 64, src->stride_seq = INT64_MAX / 3;
    check_refused(test_failed_, &f, fixture_write(&f, s), FAI_ERR_OVERFLOW, "src: [4, 2, 1]");
    src->stride_seq = 16;
    fai_scale far = {f.scales, INT64_MAX / 2, 2, 1};
    check_refused(test_failed_, &f, fixture_write(&f, &far), FAI_ERR_OVERFLOW, "scale: [2, 4, 2]");
    fai_scale far_fixed = {f.fixed, 0, 0, INT64_MAX / 2};
    check_refused(test_failed_, &f, fixture_write(&f, &far_fixed), FAI_ERR_OVERFLOW,
                  "scale: [2, 1, 1]");

    src->dtype = FAI_DTYPE_I8;
    check_refused(test_failed_, &f, fixture_write(&f, s), FAI_ERR_INVALID_ARG,
                  "src.dtype = int8 is not f32, f16 or bf16");
    src->dtype = FAI_DTYPE_F32, cache->dtype = (fai_dtype)42;
    check_refused(test_failed_, &f, fixture_write(&f, s), FAI_ERR_INVALID_ARG, "cache.dtype = 42");
    cache->dtype = FAI_DTYPE_I8, src->stride_head = -8;
    check_refused(test_failed_, &f, fixture_write(&f, s), FAI_ERR_INVALID_ARG, "src strides");
    src->stride_head = 8, cache->stride_dim = 2;
    check_refused(test_failed_, &f, fixture_write(&f, s), FAI_ERR_INVALID_ARG,
                  "cache.stride_dim = 2");
    cache->stride_dim = 0; /* read as 1 */
    /* elements are read and written as what they are: at a multiple of their size */
    src->data = (char *)f.src + 2;
    check_refused(test_failed_, &f, fixture_write(&f, s), FAI_ERR_INVALID_ARG,
                  "not aligned to its 4-byte elements");
    src->data = f.src;

    /* nothing to write: no pointers needed but the cache's */
    CHECK(fai_cache_write(0, 2, 8, &(fai_tensor){NULL, FAI_DTYPE_F32, 0, 0, 0, 1}, NULL, 2, 4,
                          cache, s, NULL) == FAI_OK);
    const int64_t skip[4] = {-1, -1, -1, -1};
    CHECK(fai_cache_write(4, 2, 8, src, skip, 2, 4, cache, s, NULL) == FAI_OK);
    CHECK(memcmp(f.cache, f.cache_before, sizeof f.cache) == 0);
    CHECK(memcmp(f.scales, f.scales_before, sizeof f.scales) == 0);
    CHECK(fixture_write(&f, s) == FAI_OK);
    CHECK(fai_last_error()[0] == '\0');
}

/* -- fai_cache_alloc --------------------------------------------------------------------------- */

TEST(cache_alloc_aligned_zeroed_writable) {
    const size_t huge = (size_t)2 << 20;
    fai_pool *pool = NULL;
    REQUIRE(fai_pool_create(2, &pool) == FAI_OK);
    const size_t sizes[] = {1, huge, 3 * huge + 5, 9 * huge};
    for (int p = 0; p < 2; p++)
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
            void *memory = NULL;
            REQUIRE(fai_cache_alloc(sizes[i], p ? pool : NULL, &memory) == FAI_OK);
            REQUIRE(memory != NULL);
            CHECK((uintptr_t)memory % huge == 0);
            /* zeroed and writable up to the whole 2 MiB pages */
            const size_t rounded = (sizes[i] + huge - 1) / huge * huge;
            unsigned char *bytes = memory;
            size_t nonzero = 0;
            for (size_t b = 0; b < rounded; b++)
                nonzero += bytes[b] != 0;
            CHECK(nonzero == 0);
            memset(bytes, 0xa5, rounded);
            CHECK(bytes[rounded - 1] == 0xa5);
            fai_cache_free(memory, sizes[i]);
        }
    fai_pool_free(pool);

    void *memory = (void *)&memory;
    CHECK(fai_cache_alloc(0, NULL, &memory) == FAI_ERR_INVALID_ARG);
    CHECK(memory == NULL);
    CHECK(strstr(fai_last_error(), "bytes = 0") != NULL);
    CHECK(fai_cache_alloc(16, NULL, NULL) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "memory = NULL") != NULL);
    CHECK(fai_cache_alloc(SIZE_MAX, NULL, &memory) == FAI_ERR_OVERFLOW);
    CHECK(strstr(fai_last_error(), "bytes = ") != NULL);
    /* more than any address space */
    CHECK(fai_cache_alloc((size_t)1 << 62, NULL, &memory) == FAI_ERR_NO_MEMORY);
    CHECK(memory == NULL);
    CHECK(strstr(fai_last_error(), "could not map") != NULL);
    fai_cache_free(NULL, 16); /* a no-op */
}

/* -- attention over written caches ------------------------------------------------------------- */

enum { E2E_B = 3, E2E_HQ = 4, E2E_HKV = 2, E2E_SQ = 2, E2E_D = 32 };
enum { E2E_PAGE = 16, E2E_PAGES = 14, E2E_PER_SEQ = 4 };

/* A paged K or V cache [pages, page, Hkv, D] of `dtype` and its per-token scales [pages, page,
 * Hkv], in fai_cache_alloc memory, written from f32 rows [tokens, Hkv, D] at `slots`. */
typedef struct e2e_cache {
    void *data, *scales;
    size_t bytes, scale_bytes;
    fai_tensor tensor;
    fai_scale scale;
} e2e_cache;

static fai_status e2e_write(e2e_cache *c, fai_dtype dtype, const float *rows, const int64_t *slots,
                            int64_t tokens, fai_pool *pool) {
    const int64_t elements = E2E_PAGES * E2E_PAGE * E2E_HKV * E2E_D;
    c->bytes = (size_t)elements * fai_dtype_size(dtype);
    c->scale_bytes = (size_t)(E2E_PAGES * E2E_PAGE * E2E_HKV) * sizeof(float);
    fai_status status = fai_cache_alloc(c->bytes, pool, &c->data);
    if (status == FAI_OK) status = fai_cache_alloc(c->scale_bytes, pool, &c->scales);
    if (status != FAI_OK) return status;
    c->tensor = (fai_tensor){c->data, dtype, E2E_PAGE * E2E_HKV * E2E_D, E2E_HKV * E2E_D, E2E_D, 1};
    c->scale = (fai_scale){c->scales, E2E_PAGE * E2E_HKV, E2E_HKV, 1};
    const fai_tensor src = {(void *)rows, FAI_DTYPE_F32, 0, E2E_HKV * E2E_D, E2E_D, 1};
    return fai_cache_write(tokens, E2E_HKV, E2E_D, &src, slots, E2E_PAGES, E2E_PAGE, &c->tensor,
                           &c->scale, pool);
}

static void e2e_free(e2e_cache *c) {
    fai_cache_free(c->data, c->bytes);
    fai_cache_free(c->scales, c->scale_bytes);
}

/* fai_run of (pb, t) against the oracle on (ref_pb, ref_t), O and LSE within the project's
 * tolerances for pb's dtypes. */
static void run_against_oracle(int *test_failed_, const fai_problem *pb, fai_tensors *t,
                               const fai_problem *ref_pb, const fai_tensors *ref_t, fai_pool *pool,
                               const char *what) {
    fai_plan *plan = NULL;
    const fai_status status = fai_plan_create(pb, &plan);
    if (status != FAI_OK) {
        printf("  %s: %s\n", what, fai_last_error());
        CHECK(status == FAI_OK);
        return;
    }
    fai_plan_set_pool(plan, pool);
    static float o[E2E_B * E2E_SQ * E2E_HQ * E2E_D], lse[E2E_B * E2E_SQ * E2E_HQ];
    t->o = fai_tensor_bshd(o, FAI_DTYPE_F32, E2E_SQ, E2E_HQ, E2E_D);
    t->lse = (fai_tensor){lse, FAI_DTYPE_F32, E2E_SQ * E2E_HQ, E2E_HQ, 1, 0};
    const size_t ws_bytes = fai_plan_workspace_size(plan);
    void *ws = malloc(ws_bytes ? ws_bytes : 1);
    const fai_status run = ws ? fai_run(plan, t, ws, ws_bytes) : FAI_ERR_NO_MEMORY;
    free(ws);
    fai_plan_free(plan);
    CHECK(run == FAI_OK);
    if (run != FAI_OK) {
        printf("  %s: %s\n", what, fai_last_error());
        return;
    }
    fai_oracle_out ref;
    char err[256];
    REQUIRE(fai_oracle_run(ref_pb, ref_t, &ref, err, sizeof err) == FAI_OK);
    const double tol = fai_case_tolerance(pb->q_dtype, pb->k_dtype, pb->v_dtype, pb->o_dtype);
    double worst = 0.0;
    for (int64_t b = 0; b < E2E_B; b++)
        for (int64_t i = 0; i < E2E_SQ; i++)
            for (int64_t h = 0; h < E2E_HQ; h++) {
                const int64_t row = (b * E2E_SQ + i) * E2E_HQ + h;
                for (int64_t x = 0; x < E2E_D; x++)
                    worst = fmax(worst, fabs(o[row * E2E_D + x] - ref.o[row * E2E_D + x]) /
                                            fai_case_o_limit(&ref, (size_t)row, x, tol));
                const double want = ref.lse[(b * E2E_HQ + h) * E2E_SQ + i];
                worst = fmax(worst, fabs(lse[row] - want) /
                                        fai_case_lse_limit(&ref, (size_t)row, want, tol));
            }
    CHECK(worst <= 1.0);
    if (worst > 1.0) printf("  %s: error / tolerance %.3g\n", what, worst);
    fai_oracle_out_free(&ref);
}

/* The cache dequantized into an f32 page pool by the oracle's decoders: scale x q. */
static float *dequantize(const e2e_cache *c) {
    const int64_t rows = E2E_PAGES * E2E_PAGE * E2E_HKV;
    float *out = malloc((size_t)(rows * E2E_D) * sizeof *out);
    for (int64_t r = 0; out && r < rows; r++)
        for (int64_t x = 0; x < E2E_D; x++)
            out[r * E2E_D + x] = (float)(((const float *)c->scales)[r] *
                                         fai_oracle_load(c->data, c->tensor.dtype, r * E2E_D + x));
    return out;
}

static void attend_written_cache(int *test_failed_, fai_dtype dtype, fai_pool *pool) {
    static const int32_t lengths[E2E_B] = {37, 5, 64};
    fai_rng rng = {(uint64_t)dtype * 977 + 5};
    /* a shuffled block table; entries past a length point into the pool too */
    int32_t pages[E2E_PAGES], table[E2E_B * E2E_PER_SEQ];
    for (int p = 0; p < E2E_PAGES; p++)
        pages[p] = p;
    for (int p = E2E_PAGES - 1; p > 0; p--) {
        const int j = (int)fai_rng_range(&rng, 0, p);
        const int32_t swap = pages[p];
        pages[p] = pages[j], pages[j] = swap;
    }
    memcpy(table, pages, sizeof table);
    /* every sequence's tokens, in one write: slot = page x page_size + row */
    enum { TOKENS = 37 + 5 + 64 };
    static float k_rows[TOKENS * E2E_HKV * E2E_D], v_rows[TOKENS * E2E_HKV * E2E_D];
    static float q[E2E_B * E2E_SQ * E2E_HQ * E2E_D];
    int64_t slots[TOKENS];
    int64_t token = 0;
    for (int b = 0; b < E2E_B; b++)
        for (int j = 0; j < lengths[b]; j++, token++)
            slots[token] = (int64_t)table[b * E2E_PER_SEQ + j / E2E_PAGE] * E2E_PAGE + j % E2E_PAGE;
    for (int i = 0; i < TOKENS * E2E_HKV * E2E_D; i++) {
        k_rows[i] = (float)(3.0 * (2.0 * fai_rng_uniform(&rng) - 1.0));
        v_rows[i] = (float)(2.0 * fai_rng_uniform(&rng) - 1.0);
    }
    for (int i = 0; i < E2E_B * E2E_SQ * E2E_HQ * E2E_D; i++)
        q[i] = (float)(2.0 * fai_rng_uniform(&rng) - 1.0);
    e2e_cache k, v;
    memset(&k, 0, sizeof k), memset(&v, 0, sizeof v);
    const int written = e2e_write(&k, dtype, k_rows, slots, TOKENS, pool) == FAI_OK &&
                        e2e_write(&v, dtype, v_rows, slots, TOKENS, pool) == FAI_OK;
    CHECK(written);
    if (!written) printf("  %s: %s\n", fai_dtype_name(dtype), fai_last_error());

    fai_problem pb;
    fai_problem_init(&pb);
    pb.batch = E2E_B, pb.heads_q = E2E_HQ, pb.heads_kv = E2E_HKV, pb.seq_q = E2E_SQ;
    pb.head_dim = E2E_D, pb.k_dtype = pb.v_dtype = dtype;
    pb.page_size = E2E_PAGE, pb.num_pages = E2E_PAGES, pb.pages_per_seq = E2E_PER_SEQ;
    pb.seqlens_kv = lengths;
    fai_tensors t;
    memset(&t, 0, sizeof t);
    t.q = fai_tensor_bshd(q, FAI_DTYPE_F32, E2E_SQ, E2E_HQ, E2E_D);
    t.k = k.tensor, t.v = v.tensor;
    t.k_scale = k.scale, t.v_scale = v.scale;
    t.block_table = table;
    char what[64];
    if (written) {
        /* the caches as the kernels read them */
        snprintf(what, sizeof what, "%s K/V", fai_dtype_name(dtype));
        fai_tensors run = t;
        run_against_oracle(test_failed_, &pb, &run, &pb, &t, pool, what);
        /* and dequantized first, which any build runs: the scales sit where the oracle (and
         * so fai_run) looks for a page pool's (page, row, head) */
        float *k32 = dequantize(&k), *v32 = dequantize(&v);
        CHECK(k32 && v32);
        if (k32 && v32) {
            fai_problem pb32 = pb;
            pb32.k_dtype = pb32.v_dtype = FAI_DTYPE_F32;
            fai_tensors t32 = t;
            t32.k.data = k32, t32.v.data = v32;
            t32.k.dtype = t32.v.dtype = FAI_DTYPE_F32;
            memset(&t32.k_scale, 0, sizeof t32.k_scale);
            memset(&t32.v_scale, 0, sizeof t32.v_scale);
            snprintf(what, sizeof what, "%s K/V dequantized to f32", fai_dtype_name(dtype));
            run_against_oracle(test_failed_, &pb32, &t32, &pb, &t, pool, what);
        }
        free(k32);
        free(v32);
    }
    e2e_free(&k);
    e2e_free(&v);
}

TEST(cache_write_then_attention_matches_oracle) {
    fai_pool *pool = NULL;
    REQUIRE(fai_pool_create(2, &pool) == FAI_OK);
    attend_written_cache(test_failed_, FAI_DTYPE_I8, pool);
    attend_written_cache(test_failed_, FAI_DTYPE_E4M3, pool);
    fai_pool_free(pool);
}
