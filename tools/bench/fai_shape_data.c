/* Random tensors for a shape (`fai bench`, `fai tune`, `fai demo`): the shape judged by the planner
 * first, then Q, K, V (on huge pages), O, LSE and what the shape's modifiers and quantized K/V
 * read, K/V pages in shuffled order (the shape's options: fai_shape.c). */
/* madvise(MADV_HUGEPAGE) is a Linux extension */
#define _DEFAULT_SOURCE
#include "fai_shape.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Codes of a quantized dtype: int8 uniform in [-127, 127]; fp8 of either sign with magnitudes
 * spread evenly over the binades [2^-6, 4) (e4m3) or [2^-7, 4) (e5m2), never NaN or Inf. With
 * the scales ft_shape_data_create gives, the values lie within about [-1, 1]. */
static void fill_codes(uint8_t *data, fai_dtype dtype, size_t count, uint64_t *state) {
    for (size_t i = 0; i < count; i++) {
        const uint64_t r = next_random(state);
        const uint8_t sign = (uint8_t)((r >> 63) << 7);
        if (dtype == FAI_DTYPE_I8)
            data[i] = (uint8_t)(int8_t)((int)(r % 255) - 127);
        else if (dtype == FAI_DTYPE_E4M3) /* exponent fields 1..8 (bias 7), any mantissa */
            data[i] = (uint8_t)(sign | (((r >> 8) % 8 + 1) << 3) | (r & 7));
        else /* e5m2: exponent fields 8..16 (bias 15) */
            data[i] = (uint8_t)(sign | (((r >> 8) % 9 + 8) << 2) | (r & 3));
    }
}

/* Uniform values in [-1, 1) that are exact in every float dtype (multiples of 2^-7); codes for
 * the quantized ones. */
static void fill_random(void *data, fai_dtype dtype, size_t count, uint64_t *state) {
    if (fai_dtype_is_quantized(dtype)) {
        fill_codes(data, dtype, count, state);
        return;
    }
    for (size_t i = 0; i < count; i++) {
        const int step = (int)(next_random(state) >> 56) - 128; /* -128..127 */
        const float value = (float)step / 128.0f;
        if (dtype == FAI_DTYPE_F32) {
            ((float *)data)[i] = value;
        } else if (dtype == FAI_DTYPE_BF16) {
            uint32_t bits;
            memcpy(&bits, &value, sizeof bits);
            ((uint16_t *)data)[i] = (uint16_t)(bits >> 16);
        } else { /* f16 of k/128: sign, exponent, mantissa built exactly */
            uint16_t h = 0;
            int magnitude = step < 0 ? -step : step;
            if (magnitude) {
                int exponent = 0;
                while ((magnitude << exponent) < 128)
                    exponent++;
                /* value = magnitude/128 = 1.f * 2^-exponent */
                const int mantissa = ((magnitude << exponent) - 128) << 3;
                h = (uint16_t)(((15 - exponent) << 10) | mantissa);
            }
            ((uint16_t *)data)[i] = (uint16_t)(h | (step < 0 ? 0x8000u : 0));
        }
    }
}

/* K/V caches of serving engines are large, long-lived buffers, usually on huge pages; the
 * benchmark gives its K/V the same, so decode is not measured through a TLB miss every few
 * rows. */
void *ft_shape_alloc_huge(size_t bytes) {
    const size_t huge = (size_t)2 << 20;
    const size_t rounded = (bytes + huge - 1) / huge * huge;
    void *memory = aligned_alloc(huge, rounded ? rounded : huge);
#if defined(MADV_HUGEPAGE)
    if (memory) madvise(memory, rounded, MADV_HUGEPAGE);
#endif
    return memory;
}

static char data_error[256];

const char *ft_shape_data_error(void) { return data_error; }

/* The product of n factors, or -1 past 2^60 elements (the planner's own bound on a tensor): the
 * bytes of such a count, up to 8 an element, cannot wrap a 64-bit size. */
static int64_t product(const int64_t *factors, int n) {
    int64_t result = 1;
    for (int i = 0; i < n; i++)
        if (factors[i] < 0 || __builtin_mul_overflow(result, factors[i], &result) ||
            result > (INT64_C(1) << 60))
            return -1;
    return result;
}

/* Whether the planner takes the shape's problem, judged before anything is sized by it: the
 * dense problem first (its batch bounds the lengths array a paged one needs; a paged pool's
 * size is bounded by `product` below). */
static int shape_plannable(const ft_shape *shape) {
    ft_shape dense = *shape;
    dense.page_size = 0;
    fai_problem pb;
    ft_shape_problem(&dense, &pb, NULL);
    pb.ignore_tuning = 1, pb.threads = 1, pb.workers = 1;
    fai_plan *plan = NULL;
    const fai_status status = fai_plan_create(&pb, &plan);
    fai_plan_free(plan);
    if (status != FAI_OK) snprintf(data_error, sizeof data_error, "%s", fai_last_error());
    return status == FAI_OK;
}

int ft_shape_data_create(const ft_shape *shape, uint64_t seed, ft_shape_data *data) {
    memset(data, 0, sizeof *data);
    data_error[0] = '\0';
    if (!shape_plannable(shape)) return -1;
    const int64_t dv = shape->dv;
    const int paged = shape->page_size > 0;
    data->seqlens_kv = calloc((size_t)shape->b + 1, sizeof(int32_t));
    if (!data->seqlens_kv) {
        snprintf(data_error, sizeof data_error, "out of memory for %lld sequence lengths",
                 (long long)shape->b);
        return -1;
    }
    ft_shape_problem(shape, &data->problem, data->seqlens_kv);
    const fai_problem *pb = &data->problem;
    const int64_t kv_rows = paged ? product((const int64_t[]){pb->num_pages, shape->page_size}, 2)
                                  : product((const int64_t[]){shape->b, shape->skv}, 2);
    const int64_t counts[5] = {
        product((const int64_t[]){shape->b, shape->sq, shape->hq, shape->d}, 4),
        product((const int64_t[]){shape->b, shape->sq, shape->hq, dv}, 4),
        product((const int64_t[]){kv_rows, shape->hkv, shape->d}, 3),
        product((const int64_t[]){kv_rows, shape->hkv, dv}, 3),
        product((const int64_t[]){shape->b, shape->hq, shape->sq}, 3)};
    for (int i = 0; i < 5; i++)
        if (kv_rows < 0 || counts[i] < 0) {
            snprintf(data_error, sizeof data_error,
                     "its tensors would hold more than 2^60 elements");
            return -1;
        }
    const size_t q_count = (size_t)counts[0], o_count = (size_t)counts[1];
    const size_t k_count = (size_t)counts[2], v_count = (size_t)counts[3];
    data->q = malloc(q_count * fai_dtype_size(shape->q_dtype) + 1);
    data->k = ft_shape_alloc_huge(k_count * fai_dtype_size(shape->kv_dtype) + 1);
    data->v = ft_shape_alloc_huge(v_count * fai_dtype_size(shape->kv_dtype) + 1);
    data->o = malloc(o_count * fai_dtype_size(shape->out_dtype) + 1);
    data->lse = malloc((size_t)counts[4] * sizeof(float) + 1);
    data->alibi_slopes = malloc((size_t)shape->hq * sizeof(float) + 1);
    data->sinks = malloc((size_t)shape->hq * sizeof(float) + 1);
    /* quantized K/V: a scale per token and kv head, [rows, Hkv] like their rows */
    const size_t scale_count = (size_t)(kv_rows * shape->hkv);
    const int quantized = fai_dtype_is_quantized(shape->kv_dtype);
    if (quantized) data->kv_scales = ft_shape_alloc_huge(2 * scale_count * sizeof(float) + 1);
    if (!data->q || !data->k || !data->v || !data->o || !data->lse || !data->alibi_slopes ||
        !data->sinks || (quantized && !data->kv_scales)) {
        snprintf(data_error, sizeof data_error, "out of memory for its tensors (%.3g GB of K/V)",
                 (double)(k_count + v_count) * (double)fai_dtype_size(shape->kv_dtype) / 1e9);
        return -1;
    }
    /* scales that bring the codes to about [-1, 1], varying from row to row */
    const double code_range = shape->kv_dtype == FAI_DTYPE_I8 ? 127.0 : 4.0;
    for (size_t r = 0; quantized && r < 2 * scale_count; r++)
        data->kv_scales[r] = (float)((1.0 + (double)(r % 7) / 16.0) / code_range);
    /* the standard slopes, and sinks around the scores' own size */
    if (shape->hq > 0) fai_alibi_slopes(shape->hq, data->alibi_slopes);
    for (int64_t h = 0; h < shape->hq; h++)
        data->sinks[h] = (float)(h % 5) * 0.5f - 1.0f;
    uint64_t state = seed;
    fill_random(data->q, shape->q_dtype, q_count, &state);
    fill_random(data->k, shape->kv_dtype, k_count, &state);
    fill_random(data->v, shape->kv_dtype, v_count, &state);

    fai_tensors *t = &data->tensors;
    memset(t, 0, sizeof *t);
    const int64_t k_seq = paged ? shape->page_size : shape->skv;
    t->q = fai_tensor_bshd(data->q, shape->q_dtype, shape->sq, shape->hq, shape->d);
    t->k = fai_tensor_bshd(data->k, shape->kv_dtype, k_seq, shape->hkv, shape->d);
    t->v = fai_tensor_bshd(data->v, shape->kv_dtype, k_seq, shape->hkv, dv);
    t->o = fai_tensor_bshd(data->o, shape->out_dtype, shape->sq, shape->hq, dv);
    t->lse.data = data->lse;
    t->lse.dtype = FAI_DTYPE_F32;
    t->lse.stride_batch = shape->hq * shape->sq;
    t->lse.stride_head = shape->sq;
    t->lse.stride_seq = 1;
    t->alibi_slopes = shape->alibi ? data->alibi_slopes : NULL;
    t->sinks = shape->sinks ? data->sinks : NULL;
    if (paged && shape->head_major) { /* each kv head's rows of a page follow each other */
        fai_tensor *kv[2] = {&t->k, &t->v};
        for (int i = 0; i < 2; i++) {
            const int64_t dim = i == 0 ? shape->d : dv;
            kv[i]->stride_seq = dim;
            kv[i]->stride_head = k_seq * dim;
        }
    }
    if (quantized) {
        fai_scale per_token = {data->kv_scales, k_seq * shape->hkv, shape->hkv, 1};
        if (paged && shape->head_major) {
            per_token.stride_seq = 1;
            per_token.stride_head = k_seq;
        }
        t->k_scale = per_token;
        t->v_scale = per_token;
        t->v_scale.data = data->kv_scales + scale_count;
    }
    if (pb->k_channel_scales) { /* from 1/2 to 2, channel by channel */
        data->k_channels = malloc((size_t)(shape->hkv * shape->d) * sizeof(float));
        if (!data->k_channels) {
            snprintf(data_error, sizeof data_error, "out of memory for %lld channel scales",
                     (long long)(shape->hkv * shape->d));
            return -1;
        }
        for (int64_t x = 0; x < shape->hkv * shape->d; x++)
            data->k_channels[x] = (float)(0.5 + 1.5 * (double)((x * 37) % 64) / 63.0);
        t->k_channel_scale.data = data->k_channels;
        t->k_channel_scale.stride_head = shape->d;
    }
    if (paged) {
        /* a shuffled block table: page order in memory is not sequence order */
        const int64_t pages = pb->num_pages;
        data->block_table = malloc((size_t)(pages ? pages : 1) * sizeof(int32_t));
        if (!data->block_table) {
            snprintf(data_error, sizeof data_error, "out of memory for a block table of %lld pages",
                     (long long)pages);
            return -1;
        }
        for (int64_t p = 0; p < pages; p++)
            data->block_table[p] = (int32_t)p;
        for (int64_t p = pages - 1; p > 0; p--) {
            const int64_t other = (int64_t)(next_random(&state) % (uint64_t)(p + 1));
            const int32_t keep = data->block_table[p];
            data->block_table[p] = data->block_table[other];
            data->block_table[other] = keep;
        }
        t->block_table = data->block_table;
    }
    return 0;
}

void ft_shape_data_free(ft_shape_data *data) {
    free(data->seqlens_kv);
    free(data->block_table);
    free(data->q);
    free(data->k);
    free(data->v);
    free(data->o);
    free(data->lse);
    free(data->alibi_slopes);
    free(data->sinks);
    free(data->kv_scales);
    free(data->k_channels);
    memset(data, 0, sizeof *data);
}

double ft_shape_channel_scale(const fai_channel_scale *channels, int64_t h, int64_t x) {
    return channels && channels->data ? (double)channels->data[h * channels->stride_head + x] : 1.0;
}

double ft_shape_scale(const fai_tensor *kv, const fai_scale *scale, int64_t b, int64_t s,
                      int64_t h) {
    if (!fai_dtype_is_quantized(kv->dtype)) return 1.0;
    return (double)
        scale->data[b * scale->stride_batch + s * scale->stride_seq + h * scale->stride_head];
}
