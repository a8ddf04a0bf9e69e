/* fai_run: checks the tensors against the plan, then runs the plan's workers on its pool. */
#include "fai_internal.h"
#include "kernel/fai_profile.h"
#include "util/fai_layout.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

fai_tensor fai_tensor_bshd(void *data, fai_dtype dtype, int64_t seq, int64_t heads, int64_t dim) {
    fai_tensor tensor;
    tensor.data = data;
    tensor.dtype = dtype;
    /* a product past int64 saturates (fai_run then refuses the strides) instead of wrapping */
    int64_t row, batch;
    if (!fai__mul_ok(heads, dim, &row)) row = INT64_MAX;
    if (!fai__mul_ok(seq, row, &batch)) batch = INT64_MAX;
    tensor.stride_head = dim;
    tensor.stride_seq = row;
    tensor.stride_batch = batch;
    tensor.stride_dim = 1;
    return tensor;
}

fai_status fai__check_not_negative(const char *name, int64_t stride_batch, int64_t stride_seq,
                                   int64_t stride_head) {
    if (stride_batch < 0 || stride_seq < 0 || stride_head < 0)
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "%s strides (batch %" PRId64 ", seq %" PRId64 ", head %" PRId64
                         ") must not be negative",
                         name, stride_batch, stride_seq, stride_head);
    return FAI_OK;
}

fai_status fai__check_aligned(const char *name, const void *data, size_t element) {
    if (element > 1 && (uintptr_t)data % element != 0)
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "%s.data = %p is not aligned to its %zu-byte elements (an array of "
                         "them is)",
                         name, data, element);
    return FAI_OK;
}

fai_status fai__check_strides(const char *name, const fai_tensor *tensor) {
    FAI_TRY(fai__check_aligned(name, tensor->data, fai_dtype_size(tensor->dtype)));
    if (tensor->stride_dim != 0 && tensor->stride_dim != 1)
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "%s.stride_dim = %" PRId64 ": the head dimension must be contiguous (1)",
                         name, tensor->stride_dim);
    return fai__check_not_negative(name, tensor->stride_batch, tensor->stride_seq,
                                   tensor->stride_head);
}

static fai_status check_tensor(const char *name, const fai_tensor *tensor, fai_dtype dtype,
                               int needed) {
    if (!needed) return FAI_OK;
    if (!tensor->data) return fai__fail(FAI_ERR_INVALID_ARG, "%s.data = NULL", name);
    if (tensor->dtype != dtype)
        return fai__fail(FAI_ERR_INVALID_ARG, "%s.dtype = %s does not match the plan's %s", name,
                         fai_dtype_name(tensor->dtype), fai_dtype_name(dtype));
    return fai__check_strides(name, tensor);
}

/* A per-head array of a modifier: given exactly when the problem asks for it, and every value
 * finite (sinks may also be -inf: no sink for that head). */
static fai_status check_head_values(const char *name, const float *values, int wanted,
                                    int64_t heads, int minus_inf_ok) {
    if (wanted && !values)
        return fai__fail(FAI_ERR_INVALID_ARG, "%s = NULL but the problem has %s = 1", name,
                         minus_inf_ok ? "sinks" : "alibi");
    if (!wanted && values)
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "%s is set but the problem has %s = 0: set it to use them", name,
                         minus_inf_ok ? "sinks" : "alibi");
    for (int64_t h = 0; values && h < heads; h++)
        if (!isfinite(values[h]) && !(minus_inf_ok && values[h] == -INFINITY))
            return fai__fail(FAI_ERR_INVALID_ARG, "%s[%" PRId64 "] = %g is not %s", name, h,
                             (double)values[h], minus_inf_ok ? "finite or -inf" : "finite");
    return FAI_OK;
}

/* Every page a sequence's length reaches must be inside the pool. */
static fai_status check_block_table(const fai_plan *plan, const fai_tensors *t) {
    const fai_problem *pb = &plan->pb;
    const int64_t stride = t->block_table_stride ? t->block_table_stride : pb->pages_per_seq;
    for (int64_t b = 0; b < pb->batch; b++) {
        const int64_t pages = fai__ceil_div(plan->seqs[b].kv_len, pb->page_size);
        const int32_t *row = t->block_table + b * stride;
        for (int64_t p = 0; p < pages; p++)
            if (row[p] < 0 || row[p] >= pb->num_pages)
                return fai__fail(FAI_ERR_INVALID_ARG,
                                 "block_table[%" PRId64 "][%" PRId64
                                 "] = %d is outside the pool of num_pages = %" PRId64,
                                 b, p, (int)row[p], pb->num_pages);
    }
    return FAI_OK;
}

/* Whether count scales `stride` apart are all finite and > 0, branch-free, as the scales of a
 * long cache are many: a run (stride 1) by two float comparisons the compiler vectorises (NaN
 * fails both), scattered scales as bits, 0 < bits < +inf's (a sign bit or a NaN is above). */
static int scales_ok(const float *at, int64_t count, int64_t stride) {
    if (stride == 1) {
        int bad = 0;
        for (int64_t i = 0; i < count; i++)
            bad |= !(at[i] > 0.0f) | !(at[i] <= FLT_MAX);
        return !bad;
    }
    uint32_t worst[4] = {0, 0, 0, 0}; /* four chains: the loop runs at the loads' rate */
    int64_t i = 0;
    for (; i + 4 <= count; i += 4)
        for (int c = 0; c < 4; c++) {
            uint32_t bits;
            memcpy(&bits, at + (i + c) * stride, sizeof bits);
            const uint32_t shifted = bits - 1u; /* 0 wraps above everything */
            worst[c] = shifted > worst[c] ? shifted : worst[c];
        }
    for (; i < count; i++) {
        uint32_t bits;
        memcpy(&bits, at + i * stride, sizeof bits);
        worst[0] = bits - 1u > worst[0] ? bits - 1u : worst[0];
    }
    return worst[0] < 0x7f7fffffu && worst[1] < 0x7f7fffffu && worst[2] < 0x7f7fffffu &&
           worst[3] < 0x7f7fffffu;
}

/* Element offset of key `key` of sequence b in a scale tensor (as the kernel addresses it). */
static int64_t scale_offset(const fai_plan *plan, const fai_tensors *t, const fai_scale *scale,
                            int64_t b, int64_t key) {
    const fai_problem *pb = &plan->pb;
    if (plan->paged) {
        const int64_t stride = t->block_table_stride ? t->block_table_stride : pb->pages_per_seq;
        return (int64_t)t->block_table[b * stride + key / pb->page_size] * scale->stride_batch +
               (key % pb->page_size) * scale->stride_seq;
    }
    if (plan->packed_kv) return (plan->seqs[b].kv_row0 + key) * scale->stride_seq;
    return b * scale->stride_batch + key * scale->stride_seq;
}

/* The first bad scale of keys [key, key + count) of sequence b, named. */
static fai_status name_bad_scale(const fai_plan *plan, const fai_tensors *t, const char *name,
                                 const fai_scale *scale, int64_t b, int64_t key, int64_t count) {
    for (int64_t k = key; k < key + count; k++)
        for (int64_t h = 0; h < plan->pb.heads_kv; h++) {
            const float value =
                scale->data[scale_offset(plan, t, scale, b, k) + h * scale->stride_head];
            if (!scales_ok(&value, 1, 1))
                return fai__fail(FAI_ERR_INVALID_ARG,
                                 "%s of sequence %" PRId64 ", key %" PRId64 ", kv head %" PRId64
                                 " = %g: a scale must be finite and > 0",
                                 name, b, k, h, (double)value);
        }
    return FAI_OK;
}

static fai_status check_scale_strides(const char *name, const fai_scale *scale) {
    return fai__check_not_negative(name, scale->stride_batch, scale->stride_seq,
                                   scale->stride_head);
}

/* A quantized K's or V's scales (fai_scale): given exactly when the dtype is quantized, strides
 * not negative, and every scale some query reads finite and > 0, read through the block table
 * (checked before, unless the plan trusts it) as the kernel will read them. Keys whose scales
 * lie in one run (a page's or a sequence's rows of a [rows, Hkv] tensor) are checked as one. */
static fai_status check_scales(const fai_plan *plan, const fai_tensors *t, const char *name,
                               const fai_scale *scale, fai_dtype dtype, int64_t kv_rows,
                               int check_values) {
    const fai_problem *pb = &plan->pb;
    if (!fai_dtype_is_quantized(dtype)) {
        if (scale->data)
            return fai__fail(FAI_ERR_INVALID_ARG,
                             "%s.data is set but the plan's dtype is %s: scales belong to int8, "
                             "e4m3 and e5m2",
                             name, fai_dtype_name(dtype));
        return FAI_OK;
    }
    if (kv_rows == 0) return FAI_OK;
    if (!scale->data)
        return fai__fail(FAI_ERR_INVALID_ARG, "%s.data = NULL: a %s K/V needs its scales", name,
                         fai_dtype_name(dtype));
    FAI_TRY(check_scale_strides(name, scale));
    if (!check_values) return FAI_OK;
    const int64_t heads = pb->heads_kv;
    /* the heads of a key, and the keys of a run, follow each other in memory */
    const int rows_contiguous = scale->stride_head == 1 && scale->stride_seq == heads;
    for (int64_t b = 0; b < pb->batch; b++) {
        const fai_seq *seq = &plan->seqs[b];
        if (seq->q_len == 0) continue;
        /* keys of a run share a base address: a page (dense: the sequence); with stride_seq 0
         * they share their scales too */
        const int64_t run_keys = plan->paged ? pb->page_size : seq->kv_len;
        for (int64_t key = 0; key < seq->kv_len; key += run_keys) {
            const int64_t keys = seq->kv_len - key < run_keys ? seq->kv_len - key : run_keys;
            const float *at = scale->data + scale_offset(plan, t, scale, b, key);
            int ok;
            if (scale->stride_seq == 0)
                ok = scales_ok(at, heads, scale->stride_head);
            else if (rows_contiguous)
                ok = scales_ok(at, keys * heads, 1);
            else if (scale->stride_seq == 1) { /* head-major: each head's keys in a row */
                ok = 1;
                for (int64_t h = 0; h < heads; h++)
                    ok &= scales_ok(at + h * scale->stride_head, keys, 1);
            } else {
                ok = 1;
                for (int64_t k = 0; k < keys; k++)
                    ok &= scales_ok(at + k * scale->stride_seq, heads, scale->stride_head);
            }
            if (!ok) return name_bad_scale(plan, t, name, scale, b, key, keys);
        }
    }
    return FAI_OK;
}

/* K's per-channel scales (fai_channel_scale): given exactly when the problem has them, the stride
 * not negative, and each head's head_dim scales finite and > 0. */
static fai_status check_channel_scales(const fai_plan *plan, const fai_channel_scale *scale,
                                       int64_t kv_rows, int check_values) {
    const fai_problem *pb = &plan->pb;
    if (!pb->k_channel_scales) {
        if (scale->data)
            return fai__fail(FAI_ERR_INVALID_ARG,
                             "k_channel_scale.data is set but the problem's k_channel_scales is "
                             "0: set it to have K's channels scaled");
        return FAI_OK;
    }
    if (kv_rows == 0) return FAI_OK;
    if (!scale->data)
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "k_channel_scale.data = NULL: the problem has k_channel_scales");
    if (scale->stride_head < 0)
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "k_channel_scale.stride_head = %" PRId64 " must not be negative",
                         scale->stride_head);
    const int64_t heads_reached[3] = {1, 1, pb->heads_kv};
    FAI_TRY(fai__check_reach("k_channel_scale", heads_reached, 0, 0, scale->stride_head,
                             pb->head_dim, sizeof(float)));
    if (!check_values) return FAI_OK;
    const int64_t heads = scale->stride_head == 0 ? 1 : pb->heads_kv;
    for (int64_t h = 0; h < heads; h++) {
        const float *at = scale->data + h * scale->stride_head;
        if (scales_ok(at, pb->head_dim, 1)) continue;
        for (int64_t d = 0; d < pb->head_dim; d++)
            if (!scales_ok(at + d, 1, 1))
                return fai__fail(FAI_ERR_INVALID_ARG,
                                 "k_channel_scale of kv head %" PRId64 ", channel %" PRId64
                                 " = %g: a scale must be finite and > 0",
                                 h, d, (double)at[d]);
    }
    return FAI_OK;
}

/* How many batches, rows and heads a run addresses in a tensor of one side (Q/O/LSE, or K/V and
 * their scales): the batch count (pool pages when paged; 1 when packed, whose batch stride is
 * not used), the rows (a page's, the packed rows, or the padded length) and the heads. */
static void side_extent(const fai_plan *plan, int kv_side, int64_t heads, int64_t counts[3]) {
    const fai_problem *pb = &plan->pb;
    if (kv_side && plan->paged) {
        counts[0] = pb->num_pages, counts[1] = pb->page_size;
    } else if (kv_side ? plan->packed_kv : plan->packed_q) { /* rows up to the last sequence's */
        counts[0] = 1, counts[1] = 0;
        for (int64_t b = 0; b < pb->batch; b++) {
            const fai_seq *seq = &plan->seqs[b];
            const int64_t end = kv_side ? seq->kv_row0 + seq->kv_len : seq->q_row0 + seq->q_rows;
            if (end > counts[1]) counts[1] = end;
        }
    } else {
        counts[0] = pb->batch, counts[1] = kv_side ? pb->seq_kv : pb->seq_q;
    }
    counts[2] = heads;
}

fai_status fai__check_reach(const char *name, const int64_t counts[3], int64_t stride_batch,
                            int64_t stride_seq, int64_t stride_head, int64_t tail, size_t element) {
    const int64_t strides[3] = {stride_batch, stride_seq, stride_head};
    int64_t last = tail, bytes = 0;
    int fits = 1;
    for (int i = 0; i < 3 && fits; i++) {
        int64_t step = 0;
        if (counts[i] > 1)
            fits = fai__mul_ok(counts[i] - 1, strides[i], &step) && fai__add_ok(last, step, &last);
    }
    if (fits && fai__mul_ok(last, (int64_t)element, &bytes)) return FAI_OK;
    return fai__fail(FAI_ERR_OVERFLOW,
                     "%s strides (batch %" PRId64 ", seq %" PRId64 ", head %" PRId64
                     ") address past 2^63 bytes over [%" PRId64 ", %" PRId64 ", %" PRId64 "]",
                     name, stride_batch, stride_seq, stride_head, counts[0], counts[1], counts[2]);
}

static fai_status check_tensor_reach(const char *name, const int64_t counts[3], const fai_tensor *x,
                                     int64_t dim) {
    return fai__check_reach(name, counts, x->stride_batch, x->stride_seq, x->stride_head, dim,
                            fai_dtype_size(x->dtype));
}

/* What a run reads of the mask: rows up to the longest query length of every batch and head
 * (counts), each of `row` elements of `element` bytes (keys up to the longest key length: bytes
 * of them for KEEP_BITS, floats for ADD). */
static void mask_extent(const fai_plan *plan, int64_t counts[3], int64_t *row, size_t *element) {
    const fai_problem *pb = &plan->pb;
    const int64_t max_kv = plan->max_kv_len;
    counts[0] = pb->batch, counts[1] = plan->max_q_len, counts[2] = pb->heads_q;
    *row = pb->mask_kind == FAI_MASK_KEEP_BITS ? max_kv / 8 + (max_kv % 8 != 0) : max_kv;
    *element = pb->mask_kind == FAI_MASK_ADD ? sizeof(float) : 1;
}

/* The mask tensor of a plan with a mask_kind: given, strides not negative, and every element a
 * run reads (mask_extent) addressable. */
static fai_status check_mask(const fai_plan *plan, const fai_tensors *t) {
    const fai_problem *pb = &plan->pb;
    const fai_mask *mask = &t->mask;
    if (!mask->data)
        return fai__fail(FAI_ERR_INVALID_ARG, "mask.data = NULL with mask_kind = %d",
                         (int)pb->mask_kind);
    /* its q stride steps along the sequence, as the tensors' seq stride does */
    FAI_TRY(fai__check_not_negative("mask", mask->stride_batch, mask->stride_q, mask->stride_head));
    if (pb->mask_kind == FAI_MASK_ADD)
        FAI_TRY(fai__check_aligned("mask", mask->data, sizeof(float)));
    int64_t counts[3], row;
    size_t element;
    mask_extent(plan, counts, &row, &element);
    return fai__check_reach("mask", counts, mask->stride_batch, mask->stride_q, mask->stride_head,
                            row, element);
}

/* The outputs' places: each row of O and each element of LSE its own (a stride of 0, or rows
 * that overlap, would keep whichever thread wrote last), and O and LSE apart from each other and
 * from everything the run reads (Q, K, V, the mask, the scales, the channel scales, ALiBi slopes,
 * sinks, the block table): fai would read values it has already overwritten. Spans compared whole
 * (the bytes from a tensor's first element to past its last); the offsets are known to fit. */
static fai_status check_outputs_apart(const fai_plan *plan, const fai_tensors *t,
                                      const int64_t q_side[3], const int64_t kv_side[3],
                                      int64_t kv_rows) {
    const fai_problem *pb = &plan->pb;
    const int64_t o_strides[3] = {t->o.stride_batch, t->o.stride_seq, t->o.stride_head};
    const int64_t lse_strides[3] = {t->lse.stride_batch, t->lse.stride_seq, t->lse.stride_head};
    FAI_TRY(fai__check_distinct_indices("o", q_side, o_strides, plan->head_dim_v));
    if (t->lse.data) FAI_TRY(fai__check_distinct_indices("lse", q_side, lse_strides, 1));
    struct {
        const char *name;
        fai_byte_range bytes;
    } read[10];
    int count = 0;
    const fai_tensor *qkv[3] = {&t->q, &t->k, &t->v};
    const int64_t dims[3] = {pb->head_dim, pb->head_dim, plan->head_dim_v};
    for (int i = 0; i < 3; i++) {
        if (i > 0 && kv_rows == 0) break;
        const int64_t strides[3] = {qkv[i]->stride_batch, qkv[i]->stride_seq, qkv[i]->stride_head};
        read[count].name = i == 0 ? "q" : i == 1 ? "k" : "v";
        read[count++].bytes = fai__byte_range(qkv[i]->data, i ? kv_side : q_side, strides, dims[i],
                                              fai_dtype_size(qkv[i]->dtype));
    }
    const fai_scale *scales[2] = {&t->k_scale, &t->v_scale};
    for (int i = 0; i < 2 && kv_rows > 0; i++)
        if (scales[i]->data) {
            const int64_t strides[3] = {scales[i]->stride_batch, scales[i]->stride_seq,
                                        scales[i]->stride_head};
            read[count].name = i ? "v_scale" : "k_scale";
            read[count++].bytes = fai__byte_range(scales[i]->data, kv_side, strides, 1, 4);
        }
    if (pb->mask_kind != FAI_MASK_NONE && kv_rows > 0) {
        const fai_mask *mask = &t->mask;
        const int64_t strides[3] = {mask->stride_batch, mask->stride_q, mask->stride_head};
        int64_t counts[3], row;
        size_t element;
        mask_extent(plan, counts, &row, &element);
        read[count].name = "mask";
        read[count++].bytes = fai__byte_range(mask->data, counts, strides, row, element);
    }
    /* the small arrays: each as a span of its elements */
    const int64_t one[3] = {1, 1, 1}, none[3] = {0, 0, 0};
    if (pb->k_channel_scales && t->k_channel_scale.data && kv_rows > 0) {
        const int64_t heads[3] = {1, 1, pb->heads_kv};
        const int64_t strides[3] = {0, 0, t->k_channel_scale.stride_head};
        read[count].name = "k_channel_scale";
        read[count++].bytes =
            fai__byte_range(t->k_channel_scale.data, heads, strides, pb->head_dim, 4);
    }
    const float *heads_arrays[2] = {pb->alibi ? t->alibi_slopes : NULL,
                                    pb->sinks ? t->sinks : NULL};
    for (int i = 0; i < 2; i++)
        if (heads_arrays[i]) {
            read[count].name = i ? "sinks" : "alibi_slopes";
            read[count++].bytes = fai__byte_range(heads_arrays[i], one, none, pb->heads_q, 4);
        }
    if (plan->paged && t->block_table && kv_rows > 0) {
        const int64_t rows[3] = {pb->batch, 1, 1};
        const int64_t strides[3] = {
            t->block_table_stride ? t->block_table_stride : pb->pages_per_seq, 0, 0};
        read[count].name = "block_table";
        read[count++].bytes =
            fai__byte_range(t->block_table, rows, strides, pb->pages_per_seq, sizeof(int32_t));
    }
    const fai_byte_range o =
        fai__byte_range(t->o.data, q_side, o_strides, plan->head_dim_v, fai_dtype_size(t->o.dtype));
    const fai_byte_range lse =
        t->lse.data ? fai__byte_range(t->lse.data, q_side, lse_strides, 1, sizeof(float))
                    : (fai_byte_range){0, 0};
    if (fai__ranges_meet(o, lse))
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "o and lse overlap in memory (bytes [%p, %p) and [%p, %p)): each needs "
                         "its own",
                         (void *)o.begin, (void *)o.end, (void *)lse.begin, (void *)lse.end);
    for (int i = 0; i < count; i++) {
        const int on_o = fai__ranges_meet(o, read[i].bytes);
        if (!on_o && !fai__ranges_meet(lse, read[i].bytes)) continue;
        const fai_byte_range out = on_o ? o : lse;
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "%s and %s overlap in memory (bytes [%p, %p) and [%p, %p)): a run reads "
                         "%s while it writes %s",
                         on_o ? "o" : "lse", read[i].name, (void *)out.begin, (void *)out.end,
                         (void *)read[i].bytes.begin, (void *)read[i].bytes.end, read[i].name,
                         on_o ? "o" : "lse");
    }
    return FAI_OK;
}

/* check_table, check_scales_too: whether the block table's entries and the quantized K/V's
 * scales are read and checked (fai_run skips what the problem trusts). */
static fai_status validate_tensors(const fai_plan *plan, const fai_tensors *t, int check_table,
                                   int check_scales_too) {
    const fai_problem *pb = &plan->pb;
    /* kv_rows: keys some query reads; K, V, the mask and the block table are needed only then */
    int64_t q_rows = 0, kv_rows = 0;
    for (int64_t b = 0; b < pb->batch; b++) {
        q_rows += plan->seqs[b].q_rows;
        if (plan->seqs[b].q_len > 0) kv_rows += plan->seqs[b].kv_len;
    }
    FAI_TRY(check_tensor("q", &t->q, pb->q_dtype, q_rows > 0));
    FAI_TRY(check_tensor("k", &t->k, pb->k_dtype, kv_rows > 0));
    FAI_TRY(check_tensor("v", &t->v, pb->v_dtype, kv_rows > 0));
    FAI_TRY(check_tensor("o", &t->o, pb->o_dtype, q_rows > 0));
    if (t->lse.data) FAI_TRY(check_tensor("lse", &t->lse, FAI_DTYPE_F32, 1));
    /* each side's extent once: Q, O and LSE; K, V and their scales */
    int64_t q_side[3], kv_side[3];
    side_extent(plan, 0, pb->heads_q, q_side);
    side_extent(plan, 1, pb->heads_kv, kv_side);
    if (q_rows > 0) {
        FAI_TRY(check_tensor_reach("q", q_side, &t->q, pb->head_dim));
        FAI_TRY(check_tensor_reach("o", q_side, &t->o, plan->head_dim_v));
    }
    if (kv_rows > 0) {
        FAI_TRY(check_tensor_reach("k", kv_side, &t->k, pb->head_dim));
        FAI_TRY(check_tensor_reach("v", kv_side, &t->v, plan->head_dim_v));
    }
    if (t->lse.data && q_rows > 0) /* element (b, h, i): i along stride_seq, h stride_head */
        FAI_TRY(fai__check_reach("lse", q_side, t->lse.stride_batch, t->lse.stride_seq,
                                 t->lse.stride_head, 1, sizeof(float)));
    const fai_scale *scales[2] = {&t->k_scale, &t->v_scale};
    for (int i = 0; i < 2 && kv_rows > 0; i++)
        if (scales[i]->data) {
            FAI_TRY(check_scale_strides(i ? "v_scale" : "k_scale", scales[i]));
            FAI_TRY(fai__check_reach(i ? "v_scale" : "k_scale", kv_side, scales[i]->stride_batch,
                                     scales[i]->stride_seq, scales[i]->stride_head, 1,
                                     sizeof(float)));
        }
    if (pb->mask_kind == FAI_MASK_NONE && t->mask.data)
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "mask.data is set but the problem's mask_kind is NONE: set it to use "
                         "the mask");
    if (pb->mask_kind != FAI_MASK_NONE && q_rows > 0 && kv_rows > 0) FAI_TRY(check_mask(plan, t));
    FAI_TRY(check_head_values("alibi_slopes", t->alibi_slopes, pb->alibi, pb->heads_q, 0));
    FAI_TRY(check_head_values("sinks", t->sinks, pb->sinks, pb->heads_q, 1));
    if (plan->paged && kv_rows > 0 && !t->block_table)
        return fai__fail(FAI_ERR_INVALID_ARG, "block_table = NULL");
    if (!plan->paged && t->block_table)
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "block_table is set but the problem's K/V are dense (page_size = 0)");
    /* a table that is given is checked whole (every entry a length reaches), also when no query
     * reads it in this run: a caller checks a table once and then runs it trusted */
    if (plan->paged && t->block_table) {
        if (t->block_table_stride < 0)
            return fai__fail(FAI_ERR_INVALID_ARG, "block_table_stride = %" PRId64 " is negative",
                             t->block_table_stride);
        const int64_t rows[3] = {pb->batch, 1, 1};
        const int64_t stride = t->block_table_stride ? t->block_table_stride : pb->pages_per_seq;
        FAI_TRY(fai__check_reach("block_table", rows, stride, 0, 0, pb->pages_per_seq,
                                 sizeof(int32_t)));
    }
    if (plan->paged && t->block_table && check_table) FAI_TRY(check_block_table(plan, t));
    FAI_TRY(check_scales(plan, t, "k_scale", &t->k_scale, pb->k_dtype, kv_rows, check_scales_too));
    FAI_TRY(check_scales(plan, t, "v_scale", &t->v_scale, pb->v_dtype, kv_rows, check_scales_too));
    FAI_TRY(check_channel_scales(plan, &t->k_channel_scale, kv_rows, check_scales_too));
    /* last: every span it compares is known to be addressable */
    if (q_rows > 0) FAI_TRY(check_outputs_apart(plan, t, q_side, kv_side, kv_rows));
    return FAI_OK;
}

fai_status fai__validate_tensors(const fai_plan *plan, const fai_tensors *t) {
    return validate_tensors(plan, t, !plan->pb.trust_block_table, !plan->pb.trust_scales);
}

fai_status fai_check_tensors(const fai_plan *plan, const fai_tensors *tensors) {
    fai__clear_error();
    if (!plan) return fai__fail(FAI_ERR_INVALID_ARG, "plan = NULL");
    if (!tensors) return fai__fail(FAI_ERR_INVALID_ARG, "tensors = NULL");
    return validate_tensors(plan, tensors, 1, 1);
}

typedef struct run_job {
    const fai_plan *plan;
    const fai_tensors *tensors;
    unsigned char *workspace;
    int64_t threads;
    /* fai_run_profiled only: the threads' stage ticks are summed here, busy times per thread */
    fai_profile *profile;
    unsigned left_out; /* the stages the profiled kernel leaves out (fai_run_profiled_without) */
    _Atomic uint64_t stage_ticks[FAI_STAGE_COUNT];
    atomic_llong next_worker; /* the next worker no thread has taken yet */
} run_job;

/* Threads take workers in order, each the next one nobody has taken, so a thread on a slower or
 * busier core simply takes fewer. Which thread runs a worker never changes what the worker
 * computes, so the output is the same for any thread count and any timing. */
static int64_t take_worker(run_job *job) {
    return atomic_fetch_add_explicit(&job->next_worker, 1, memory_order_relaxed);
}

static void run_thread(void *arg, int64_t thread_index) {
    run_job *job = arg;
    unsigned char *ws = job->workspace + (size_t)thread_index * job->plan->ws.per_thread;
    if (!job->profile) {
        for (int64_t w = take_worker(job); w < job->plan->workers; w = take_worker(job))
            fai__kernel_run_worker(job->plan, job->tensors, w, ws, job->workspace);
        return;
    }
    memset(&fai__stage_clock, 0, sizeof fai__stage_clock);
    fai__left_out = job->left_out;
    const double start = now_seconds();
    for (int64_t w = take_worker(job); w < job->plan->workers; w = take_worker(job))
        fai__kernel_run_worker_profiled(job->plan, job->tensors, w, ws, job->workspace);
    fai__left_out = 0;
    job->profile->busy_seconds[thread_index] = now_seconds() - start;
    for (int s = 0; s < FAI_STAGE_COUNT; s++)
        atomic_fetch_add_explicit(&job->stage_ticks[s], fai__stage_clock.ticks[s],
                                  memory_order_relaxed);
}

static fai_status run(const fai_plan *plan, const fai_tensors *tensors, void *workspace,
                      size_t workspace_size, fai_profile *profile, unsigned left_out) {
    if (!plan) return fai__fail(FAI_ERR_INVALID_ARG, "plan = NULL");
    if (!tensors) return fai__fail(FAI_ERR_INVALID_ARG, "tensors = NULL");
    if (plan->workspace_size > 0 && (!workspace || workspace_size < plan->workspace_size))
        return fai__fail(FAI_ERR_WORKSPACE_TOO_SMALL,
                         "workspace = %p of %zu bytes; the plan needs %zu bytes", workspace,
                         workspace_size, plan->workspace_size);
    FAI_TRY(fai__validate_tensors(plan, tensors));

    fai_pool *pool = plan->pool ? plan->pool : fai__default_pool();
    int64_t threads = plan->threads;
    if (!pool)
        threads = 1; /* no pool could be started: the caller runs everything */
    else if (threads > fai__pool_size(pool))
        threads = fai__pool_size(pool);
    /* any pointer works: the segments start at the next cache line (the size includes 63
     * bytes for it) */
    unsigned char *aligned = (unsigned char *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
    /* split units count their finished parts: start every count at zero */
    atomic_llong *done = (atomic_llong *)(aligned + plan->ws.counters);
    for (int64_t u = 0; u < plan->split_units; u++)
        atomic_init(&done[u], 0);
    run_job job = {plan, tensors, aligned, threads < 1 ? 1 : threads, profile, left_out, {0}, 0};
    for (int s = 0; s < FAI_STAGE_COUNT; s++)
        atomic_init(&job.stage_ticks[s], 0);
    atomic_init(&job.next_worker, 0);
    double start = 0.0;
    uint64_t start_ticks = 0;
    if (profile) {
        memset(profile, 0, sizeof *profile);
        profile->threads = job.threads;
        start = now_seconds();
        start_ticks = fai__ticks();
    }
    if (job.threads == 1)
        run_thread(&job, 0);
    else
        fai__pool_run(pool, job.threads, run_thread, &job);
    if (profile) {
        /* the cycle counter's rate, from this very run */
        profile->wall_seconds = now_seconds() - start;
        const uint64_t ticks = fai__ticks() - start_ticks;
        const double seconds_per_tick = ticks ? profile->wall_seconds / (double)ticks : 0.0;
        for (int s = 0; s < FAI_STAGE_COUNT; s++)
            profile->stage_seconds[s] = (double)atomic_load(&job.stage_ticks[s]) * seconds_per_tick;
    }
    return FAI_OK;
}

fai_status fai_run(const fai_plan *plan, const fai_tensors *tensors, void *workspace,
                   size_t workspace_size) {
    fai__clear_error();
    return run(plan, tensors, workspace, workspace_size, NULL, 0);
}

fai_status fai_run_profiled(const fai_plan *plan, const fai_tensors *tensors, void *workspace,
                            size_t workspace_size, fai_profile *profile) {
    fai__clear_error();
    if (!profile) return fai__fail(FAI_ERR_INVALID_ARG, "profile = NULL");
    return run(plan, tensors, workspace, workspace_size, profile, 0);
}

fai_status fai_run_profiled_without(const fai_plan *plan, const fai_tensors *tensors,
                                    void *workspace, size_t workspace_size, unsigned left_out,
                                    fai_profile *profile) {
    fai__clear_error();
    const unsigned stages = FAI_LEAVE_OUT_QK | FAI_LEAVE_OUT_SOFTMAX | FAI_LEAVE_OUT_PV;
    if (left_out & ~stages)
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "left_out = 0x%x: only FAI_LEAVE_OUT_QK (0x%x), FAI_LEAVE_OUT_SOFTMAX "
                         "(0x%x) and FAI_LEAVE_OUT_PV (0x%x) may be left out",
                         left_out, FAI_LEAVE_OUT_QK, FAI_LEAVE_OUT_SOFTMAX, FAI_LEAVE_OUT_PV);
    if (!profile) return fai__fail(FAI_ERR_INVALID_ARG, "profile = NULL");
    /* the store goes with any of them: the numbers are not the attention's, so none is written */
    return run(plan, tensors, workspace, workspace_size, profile,
               left_out | (1u << FAI_STAGE_STORE));
}

const char *fai_stage_name(fai_stage stage) {
    static const char *const names[FAI_STAGE_COUNT] = {
        "pack_q", "pack_kv", "qk", "softmax", "rescale", "pv", "store", "merge", "other"};
    return (unsigned)stage < FAI_STAGE_COUNT ? names[stage] : "?";
}
