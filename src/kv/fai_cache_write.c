/* fai_cache_write: the K or V rows of new tokens stored at their slots of a cache, converted to
 * the cache's dtype or quantized with per-token or fixed scales.
 *
 * Everything a write could trip on is checked first (sizes, pointers, strides, every slot, the
 * scales, and for quantized caches every source value), so a failing call leaves the cache as it
 * was. The rows are then written by the pool's threads, a chunk of tokens at a time; each token
 * is computed by one thread from its own row alone, so the bytes written do not depend on how
 * many threads run. */
#include "fai_internal.h"
#include "util/fai_half.h"
#include "util/fai_layout.h"
#include "util/fai_quant.h"

#include <inttypes.h>
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Writes of fewer elements stay on the calling thread: a decode step writes one token per
 * sequence, and waking the pool would cost more than the write. */
#define PARALLEL_MIN_ELEMENTS (INT64_C(1) << 16)
/* Each thread's share is cut into this many chunks, taken in turn, so a thread on a busy core
 * takes fewer. */
#define CHUNKS_PER_THREAD 4
/* Offsets are counted in elements of up to 4 bytes and turned into byte addresses. */
#define MAX_OFFSET (INT64_MAX >> 3)

typedef enum scale_mode { SCALE_NONE, SCALE_PER_TOKEN, SCALE_FIXED } scale_mode;

typedef struct cache_job {
    int64_t tokens, heads, dim, block_rows;
    const fai_tensor *src, *cache;
    const int64_t *slots;
    const fai_scale *scale;
    scale_mode mode;
    float qmax;
    int64_t chunks, chunk_tokens;
    atomic_llong next_chunk;
    /* the finiteness pass: the first non-finite source element in token order, as
     * (token * heads + head) * dim + d; INT64_MAX while none is found */
    atomic_llong first_bad;
} cache_job;

/* -- checks ------------------------------------------------------------------------------------ */

static fai_status check_sizes(int64_t tokens, int64_t heads, int64_t dim, int64_t blocks,
                              int64_t block_rows, int64_t *rows) {
    if (tokens < 0)
        return fai__fail(FAI_ERR_INVALID_ARG, "tokens = %" PRId64 " is negative", tokens);
    if (heads < 1)
        return fai__fail(FAI_ERR_INVALID_ARG, "heads = %" PRId64 " must be at least 1", heads);
    if (dim < 1 || dim > FAI_MAX_HEAD_DIM)
        return fai__fail(FAI_ERR_INVALID_ARG, "dim = %" PRId64 " is outside [1, %d]", dim,
                         FAI_MAX_HEAD_DIM);
    if (blocks < 0)
        return fai__fail(FAI_ERR_INVALID_ARG, "blocks = %" PRId64 " is negative", blocks);
    if (block_rows < 1)
        return fai__fail(FAI_ERR_INVALID_ARG, "block_rows = %" PRId64 " must be at least 1",
                         block_rows);
    if (!fai__mul_ok(blocks, block_rows, rows))
        return fai__fail(FAI_ERR_OVERFLOW,
                         "blocks = %" PRId64 " x block_rows = %" PRId64 " overflows", blocks,
                         block_rows);
    /* elements are numbered (token x heads + head) x dim + d when a bad one is reported */
    int64_t elements;
    if (!fai__mul_ok(tokens, heads, &elements) || !fai__mul_ok(elements, dim, &elements))
        return fai__fail(FAI_ERR_OVERFLOW,
                         "tokens = %" PRId64 " x heads = %" PRId64 " x dim = %" PRId64 " overflows",
                         tokens, heads, dim);
    return FAI_OK;
}

/* A row tensor's pointer, dtype and strides; `src` restricts the dtype to f32, f16, bf16. */
static fai_status check_tensor(const char *name, const fai_tensor *tensor, int src) {
    if (!tensor) return fai__fail(FAI_ERR_INVALID_ARG, "%s = NULL", name);
    if (fai_dtype_size(tensor->dtype) == 0)
        return fai__fail(FAI_ERR_INVALID_ARG, "%s.dtype = %d is not a fai_dtype", name,
                         (int)tensor->dtype);
    if (src && fai_dtype_is_quantized(tensor->dtype))
        return fai__fail(FAI_ERR_INVALID_ARG, "%s.dtype = %s is not f32, f16 or bf16", name,
                         fai_dtype_name(tensor->dtype));
    return fai__check_strides(name, tensor);
}

/* Whether the last element of counts[i] indices along strides[i] (i < 3), plus `tail` elements,
 * stays addressable. A count of 0 addresses nothing. */
static int offsets_fit(const int64_t counts[3], const int64_t strides[3], int64_t tail) {
    int64_t last = tail;
    for (int i = 0; i < 3; i++) {
        if (counts[i] == 0) return 1;
        int64_t step;
        if (!fai__mul_ok(counts[i] - 1, strides[i], &step) || !fai__add_ok(last, step, &last))
            return 0;
    }
    return last <= MAX_OFFSET;
}

static fai_status check_offsets(const char *name, const int64_t counts[3], const int64_t strides[3],
                                int64_t tail) {
    if (offsets_fit(counts, strides, tail)) return FAI_OK;
    return fai__fail(FAI_ERR_OVERFLOW,
                     "%s: [%" PRId64 ", %" PRId64 ", %" PRId64 "] by strides (%" PRId64 ", %" PRId64
                     ", %" PRId64 ") addresses past %" PRId64 " elements",
                     name, counts[0], counts[1], counts[2], strides[0], strides[1], strides[2],
                     MAX_OFFSET);
}

/* The refusal of two spans that meet: `what`, then both spans' bytes. */
static fai_status overlap(fai_byte_range a, fai_byte_range b, const char *what) {
    return fai__fail(FAI_ERR_INVALID_ARG, "%s (bytes [%p, %p) and [%p, %p))", what, (void *)a.begin,
                     (void *)a.end, (void *)b.begin, (void *)b.end);
}

/* Whether the cache takes scales, and how they are laid out: per token where stride_seq moves,
 * fixed per head where neither stride_batch nor stride_seq does. */
static fai_status check_scale(const fai_tensor *cache, const fai_scale *scale, scale_mode *mode) {
    const int given = scale && scale->data;
    *mode = SCALE_NONE;
    if (!fai_dtype_is_quantized(cache->dtype)) {
        if (given)
            return fai__fail(FAI_ERR_INVALID_ARG,
                             "scale is given but the cache is %s: only int8, e4m3 and e5m2 "
                             "caches take scales (NULL otherwise)",
                             fai_dtype_name(cache->dtype));
        return FAI_OK;
    }
    if (!given)
        return fai__fail(FAI_ERR_INVALID_ARG, "scale%s = NULL: an %s cache needs its scales",
                         scale ? "->data" : "", fai_dtype_name(cache->dtype));
    FAI_TRY(fai__check_not_negative("scale", scale->stride_batch, scale->stride_seq,
                                    scale->stride_head));
    if (scale->stride_seq == 0 && scale->stride_batch != 0)
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "scale strides (batch %" PRId64 ", seq 0, head %" PRId64
                         ") are ambiguous: per-token scales need stride_seq != 0, fixed scales "
                         "stride_batch = stride_seq = 0",
                         scale->stride_batch, scale->stride_head);
    *mode = scale->stride_seq != 0 ? SCALE_PER_TOKEN : SCALE_FIXED;
    return FAI_OK;
}

static fai_status check_fixed_scales(const fai_scale *scale, int64_t heads) {
    for (int64_t h = 0; h < heads; h++) {
        const float value = scale->data[h * scale->stride_head];
        if (!isfinite(value) || !(value > 0.0f))
            return fai__fail(FAI_ERR_INVALID_ARG,
                             "scale[%" PRId64 "] = %g: a fixed scale must be finite and > 0", h,
                             (double)value);
    }
    return FAI_OK;
}

static int compare_int64(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Two tokens with one slot would race for it (and the result would depend on the threads). */
static fai_status check_distinct(const int64_t *slots, int64_t tokens) {
    int64_t count = 0;
    for (int64_t t = 0; t < tokens; t++)
        count += slots[t] >= 0;
    if (count < 2) return FAI_OK;
    int64_t *sorted = malloc((size_t)count * sizeof *sorted);
    if (!sorted) return fai__fail(FAI_ERR_NO_MEMORY, "no memory to check %" PRId64 " slots", count);
    count = 0;
    for (int64_t t = 0; t < tokens; t++)
        if (slots[t] >= 0) sorted[count++] = slots[t];
    qsort(sorted, (size_t)count, sizeof *sorted, compare_int64);
    int64_t twice = -1;
    for (int64_t i = 1; i < count && twice < 0; i++)
        if (sorted[i] == sorted[i - 1]) twice = sorted[i];
    free(sorted);
    if (twice < 0) return FAI_OK;
    int64_t first = 0;
    while (slots[first] != twice)
        first++;
    int64_t second = first + 1;
    while (slots[second] != twice)
        second++;
    return fai__fail(FAI_ERR_INVALID_ARG,
                     "slots[%" PRId64 "] = %" PRId64 " and slots[%" PRId64 "] = %" PRId64
                     ": two tokens write one slot",
                     first, twice, second, twice);
}

static fai_status check_slots(const int64_t *slots, int64_t tokens, int64_t rows) {
    for (int64_t t = 0; t < tokens; t++)
        if (slots[t] < -1 || slots[t] >= rows)
            return fai__fail(FAI_ERR_INVALID_ARG,
                             "slots[%" PRId64 "] = %" PRId64 " is outside the cache's %" PRId64
                             " rows (blocks x block_rows; -1 skips the token)",
                             t, slots[t], rows);
    return check_distinct(slots, tokens);
}

/* -- rows -------------------------------------------------------------------------------------- */

/* Row `at` of a source tensor as f32 (exact: the source is f32, f16 or bf16). */
static void load_row(const fai_tensor *src, int64_t at, int64_t dim, float *row) {
    if (src->dtype == FAI_DTYPE_F32) {
        memcpy(row, (const float *)src->data + at, (size_t)dim * sizeof *row);
        return;
    }
    for (int64_t x = 0; x < dim; x++)
        row[x] = fai__load_element(src->data, at + x, src->dtype);
}

/* An unquantized row: the same dtype is copied bit for bit, another rounded as fai_run's output
 * is (to nearest even; f16 saturating finite values at +-65504). */
static void copy_row(const fai_tensor *src, int64_t src_at, const fai_tensor *cache,
                     int64_t cache_at, int64_t dim) {
    if (src->dtype == cache->dtype) {
        const size_t size = fai_dtype_size(src->dtype);
        memcpy((char *)cache->data + (size_t)cache_at * size,
               (const char *)src->data + (size_t)src_at * size, (size_t)dim * size);
        return;
    }
    for (int64_t x = 0; x < dim; x++)
        fai__store_element(cache->data, cache_at + x, cache->dtype,
                           fai__load_element(src->data, src_at + x, src->dtype));
}

/* The symmetric scale that maps the row's largest magnitude onto qmax; 1 for a row of zeros,
 * which then stores zeros. A row so small that amax / qmax rounds to 0 (below about 64
 * subnormal steps) gets the smallest subnormal instead: its values are then whole multiples of
 * the scale, stored exactly, and the scale stays one fai_run reads (finite and > 0). */
static float row_scale(const float *row, int64_t dim, float qmax) {
    float amax = 0.0f;
    for (int64_t x = 0; x < dim; x++)
        amax = fmaxf(amax, fabsf(row[x]));
    if (!(amax > 0.0f)) return 1.0f;
    const float scale = amax / qmax;
    return scale > 0.0f ? scale : FLT_TRUE_MIN;
}

/* row / scale, rounded to nearest even and saturated by the dtype's encoder (fai_quant.h). A
 * quotient past f32's range (a tiny fixed scale) is the largest finite f32, which every encoder
 * saturates: as infinity e5m2 would store its infinity code. */
static void quantize_row(const float *row, int64_t dim, float scale, const fai_tensor *cache,
                         int64_t cache_at) {
    for (int64_t x = 0; x < dim; x++) {
        const float q = row[x] / scale;
        fai__store_element(cache->data, cache_at + x, cache->dtype,
                           isinf(q) ? copysignf(FLT_MAX, q) : q);
    }
}

static void write_token(const cache_job *job, int64_t t) {
    const int64_t slot = job->slots[t];
    if (slot < 0) return;
    const int64_t block = slot / job->block_rows, row = slot % job->block_rows;
    const fai_tensor *src = job->src, *cache = job->cache;
    const fai_scale *scale = job->scale;
    for (int64_t h = 0; h < job->heads; h++) {
        const int64_t src_at = t * src->stride_seq + h * src->stride_head;
        const int64_t cache_at =
            block * cache->stride_batch + row * cache->stride_seq + h * cache->stride_head;
        if (job->mode == SCALE_NONE) {
            copy_row(src, src_at, cache, cache_at, job->dim);
            continue;
        }
        float values[FAI_MAX_HEAD_DIM];
        load_row(src, src_at, job->dim, values);
        float s;
        if (job->mode == SCALE_PER_TOKEN) {
            s = row_scale(values, job->dim, job->qmax);
            scale->data[block * scale->stride_batch + row * scale->stride_seq +
                        h * scale->stride_head] = s;
        } else {
            s = scale->data[h * scale->stride_head];
        }
        quantize_row(values, job->dim, s, cache, cache_at);
    }
}

/* -- the passes over the tokens ---------------------------------------------------------------- */

static int64_t take_chunk(cache_job *job) {
    return atomic_fetch_add_explicit(&job->next_chunk, 1, memory_order_relaxed);
}

static void chunk_tokens(const cache_job *job, int64_t chunk, int64_t *begin, int64_t *end) {
    *begin = chunk * job->chunk_tokens;
    *end = *begin + job->chunk_tokens < job->tokens ? *begin + job->chunk_tokens : job->tokens;
}

static void write_chunks(void *arg, int64_t thread_index) {
    cache_job *job = arg;
    (void)thread_index;
    for (int64_t chunk = take_chunk(job); chunk < job->chunks; chunk = take_chunk(job)) {
        int64_t begin, end;
        chunk_tokens(job, chunk, &begin, &end);
        for (int64_t t = begin; t < end; t++)
            write_token(job, t);
    }
}

/* Lowers job->first_bad to `index` unless a smaller one is there already. */
static void record_bad(cache_job *job, long long index) {
    long long seen = atomic_load_explicit(&job->first_bad, memory_order_relaxed);
    while (index < seen &&
           !atomic_compare_exchange_weak_explicit(&job->first_bad, &seen, index,
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
}

/* The first non-finite element of token t (written tokens only), or -1. */
static int64_t first_nonfinite(const cache_job *job, int64_t t) {
    if (job->slots[t] < 0) return -1;
    float values[FAI_MAX_HEAD_DIM];
    for (int64_t h = 0; h < job->heads; h++) {
        load_row(job->src, t * job->src->stride_seq + h * job->src->stride_head, job->dim, values);
        for (int64_t x = 0; x < job->dim; x++)
            if (!isfinite(values[x])) return (t * job->heads + h) * job->dim + x;
    }
    return -1;
}

static void find_nonfinite_chunks(void *arg, int64_t thread_index) {
    cache_job *job = arg;
    (void)thread_index;
    for (int64_t chunk = take_chunk(job); chunk < job->chunks; chunk = take_chunk(job)) {
        int64_t begin, end;
        chunk_tokens(job, chunk, &begin, &end);
        /* tokens go in order: the chunk's first find is its smallest */
        for (int64_t t = begin; t < end; t++) {
            const int64_t bad = first_nonfinite(job, t);
            if (bad >= 0) {
                record_bad(job, (long long)bad);
                break;
            }
        }
    }
}

/* Runs fn over all chunks of tokens on `threads` threads of the pool. */
static void run_chunks(cache_job *job, fai_pool *pool, int64_t threads, fai_pool_task_fn fn) {
    atomic_store(&job->next_chunk, 0);
    if (threads > 1)
        fai__pool_run(pool, threads, fn, job);
    else
        fn(job, 0);
}

/* A quantized cache stores finite values only: every written source value is looked at before
 * anything is written, and the first non-finite one in token order is reported. */
static fai_status check_finite(cache_job *job, fai_pool *pool, int64_t threads) {
    atomic_store(&job->first_bad, INT64_MAX);
    run_chunks(job, pool, threads, find_nonfinite_chunks);
    const int64_t bad = (int64_t)atomic_load(&job->first_bad);
    if (bad == INT64_MAX) return FAI_OK;
    const int64_t x = bad % job->dim, h = bad / job->dim % job->heads;
    const int64_t t = bad / job->dim / job->heads;
    const float value = fai__load_element(
        job->src->data, t * job->src->stride_seq + h * job->src->stride_head + x, job->src->dtype);
    return fai__fail(FAI_ERR_INVALID_ARG,
                     "src (token %" PRId64 ", head %" PRId64 ", d %" PRId64
                     ") = %g is not finite: an %s cache stores finite values only",
                     t, h, x, (double)value, fai_dtype_name(job->cache->dtype));
}

/* Threads for the write: the calling thread alone for small writes, else up to the pool's. */
static int64_t choose_threads(fai_pool *pool, int64_t tokens, int64_t heads, int64_t dim) {
    if (!pool || tokens < 2 || tokens * heads * dim < PARALLEL_MIN_ELEMENTS) return 1;
    const int64_t threads = fai__pool_size(pool);
    return threads < tokens ? threads : tokens;
}

static fai_status check_arguments(int64_t tokens, int64_t heads, int64_t dim, const fai_tensor *src,
                                  const int64_t *slots, int64_t blocks, int64_t block_rows,
                                  const fai_tensor *cache, const fai_scale *scale, int64_t *rows,
                                  scale_mode *mode) {
    FAI_TRY(check_sizes(tokens, heads, dim, blocks, block_rows, rows));
    FAI_TRY(check_tensor("src", src, 1));
    if (tokens > 0 && !src->data) return fai__fail(FAI_ERR_INVALID_ARG, "src.data = NULL");
    if (tokens > 0 && !slots) return fai__fail(FAI_ERR_INVALID_ARG, "slots = NULL");
    FAI_TRY(check_tensor("cache", cache, 0));
    if (!cache->data) return fai__fail(FAI_ERR_INVALID_ARG, "cache.data = NULL");
    FAI_TRY(check_scale(cache, scale, mode));

    const int64_t src_counts[3] = {tokens, heads, 1};
    const int64_t src_strides[3] = {src->stride_seq, src->stride_head, 0};
    FAI_TRY(check_offsets("src", src_counts, src_strides, dim));
    const int64_t cache_counts[3] = {blocks, block_rows, heads};
    const int64_t cache_strides[3] = {cache->stride_batch, cache->stride_seq, cache->stride_head};
    FAI_TRY(check_offsets("cache", cache_counts, cache_strides, dim));
    FAI_TRY(fai__check_distinct_indices("cache", cache_counts, cache_strides, dim));
    /* what is written must not be what is read, nor the other thing written */
    const fai_byte_range src_bytes =
        tokens > 0
            ? fai__byte_range(src->data, src_counts, src_strides, dim, fai_dtype_size(src->dtype))
            : (fai_byte_range){0, 0};
    const fai_byte_range cache_bytes = fai__byte_range(cache->data, cache_counts, cache_strides,
                                                       dim, fai_dtype_size(cache->dtype));
    if (fai__ranges_meet(src_bytes, cache_bytes))
        return overlap(src_bytes, cache_bytes, "src and cache overlap in memory");
    fai_byte_range scale_bytes = {0, 0}; /* the per-token scales written, if any */
    if (*mode == SCALE_PER_TOKEN) {
        const int64_t scale_strides[3] = {scale->stride_batch, scale->stride_seq,
                                          scale->stride_head};
        FAI_TRY(check_offsets("scale", cache_counts, scale_strides, 1));
        FAI_TRY(fai__check_distinct_indices("per-token scale", cache_counts, scale_strides, 1));
        scale_bytes = fai__byte_range(scale->data, cache_counts, scale_strides, 1, sizeof(float));
        if (fai__ranges_meet(scale_bytes, cache_bytes))
            return overlap(scale_bytes, cache_bytes,
                           "the per-token scales (scale) overlap the cache in memory");
        if (fai__ranges_meet(scale_bytes, src_bytes))
            return overlap(scale_bytes, src_bytes,
                           "the per-token scales (scale) overlap the src in memory");
    } else if (*mode == SCALE_FIXED) {
        const int64_t head_counts[3] = {heads, 1, 1};
        const int64_t head_strides[3] = {scale->stride_head, 0, 0};
        FAI_TRY(check_offsets("scale", head_counts, head_strides, 1));
        /* read while the cache is written: a scale inside it would change under the write */
        const fai_byte_range fixed_bytes =
            fai__byte_range(scale->data, head_counts, head_strides, 1, sizeof(float));
        if (fai__ranges_meet(fixed_bytes, cache_bytes))
            return overlap(fixed_bytes, cache_bytes,
                           "the fixed scales (scale) overlap the cache in memory");
        FAI_TRY(check_fixed_scales(scale, heads));
    }
    /* the slots are read again as each token is written: inside what is written, a token's
     * row (or scale) would change the slot of a token after it, unchecked */
    if (tokens > 0) {
        const fai_byte_range slot_bytes = {(uintptr_t)slots, (uintptr_t)(slots + tokens)};
        if (fai__ranges_meet(slot_bytes, cache_bytes))
            return overlap(slot_bytes, cache_bytes, "slots and cache overlap in memory");
        if (fai__ranges_meet(slot_bytes, scale_bytes))
            return overlap(slot_bytes, scale_bytes,
                           "slots and the per-token scales (scale) overlap in memory");
    }
    return check_slots(slots, tokens, *rows);
}

fai_status fai_cache_write(int64_t tokens, int64_t heads, int64_t dim, const fai_tensor *src,
                           const int64_t *slots, int64_t blocks, int64_t block_rows,
                           const fai_tensor *cache, const fai_scale *scale, fai_pool *pool) {
    fai__clear_error();
    int64_t rows = 0;
    scale_mode mode = SCALE_NONE;
    FAI_TRY(check_arguments(tokens, heads, dim, src, slots, blocks, block_rows, cache, scale, &rows,
                            &mode));
    if (tokens == 0) return FAI_OK;

    if (!pool) pool = fai__default_pool();
    const int64_t threads = choose_threads(pool, tokens, heads, dim);
    cache_job job;
    memset(&job, 0, sizeof job);
    job.tokens = tokens, job.heads = heads, job.dim = dim, job.block_rows = block_rows;
    job.src = src, job.cache = cache, job.slots = slots, job.scale = scale;
    job.mode = mode;
    job.qmax = fai__quant_max(cache->dtype);
    job.chunks = threads > 1 ? threads * CHUNKS_PER_THREAD : 1;
    if (job.chunks > tokens) job.chunks = tokens;
    job.chunk_tokens = fai__ceil_div(tokens, job.chunks);
    job.chunks = fai__ceil_div(tokens, job.chunk_tokens);
    atomic_init(&job.next_chunk, 0);
    atomic_init(&job.first_bad, INT64_MAX);

    if (mode != SCALE_NONE) FAI_TRY(check_finite(&job, pool, threads));
    run_chunks(&job, pool, threads, write_chunks);
    return FAI_OK;
}
