/* fai_merge_states: the LSE-weighted merge of partial attention results. */
#include "fai_internal.h"
#include "util/fai_half.h"
#include "util/fai_layout.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#define MAX_MERGE_PARTS (INT64_C(1) << 20)

/* A part or an output of rows [batch, seq, heads] (of head_dim elements, or one LSE each), named
 * name[index], or name alone for index < 0 (an output, or apply_sinks' o and lse). */
static fai_status check_part(const char *name, int64_t index, const fai_tensor *t, int lse,
                             const int64_t counts[3], int64_t head_dim) {
    char label[64];
    if (index < 0)
        snprintf(label, sizeof label, "%s", name);
    else
        snprintf(label, sizeof label, "%s[%" PRId64 "]", name, index);
    if (!t->data) return fai__fail(FAI_ERR_INVALID_ARG, "%s.data = NULL", label);
    if (lse ? t->dtype != FAI_DTYPE_F32
            : t->dtype != FAI_DTYPE_F32 && t->dtype != FAI_DTYPE_F16 && t->dtype != FAI_DTYPE_BF16)
        return fai__fail(FAI_ERR_INVALID_ARG, "%s.dtype = %s (%d) is not %s", label,
                         fai_dtype_name(t->dtype), (int)t->dtype, lse ? "f32" : "f32, f16 or bf16");
    FAI_TRY(fai__check_aligned(label, t->data, fai_dtype_size(t->dtype)));
    if (!lse && t->stride_dim != 0 && t->stride_dim != 1)
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "%s.stride_dim = %" PRId64 ": the head dimension must be contiguous (1)",
                         label, t->stride_dim);
    FAI_TRY(fai__check_not_negative(label, t->stride_batch, t->stride_seq, t->stride_head));
    return fai__check_reach(label, counts, t->stride_batch, t->stride_seq, t->stride_head,
                            lse ? 1 : head_dim, fai_dtype_size(t->dtype));
}

static int64_t tail_of(int lse, int64_t head_dim) { return lse ? 1 : head_dim; }

static fai_byte_range span_of(const fai_tensor *t, int lse, const int64_t counts[3],
                              int64_t head_dim) {
    const int64_t strides[3] = {t->stride_batch, t->stride_seq, t->stride_head};
    return fai__byte_range(t->data, counts, strides, tail_of(lse, head_dim),
                           fai_dtype_size(t->dtype));
}

/* The same tensor: an output merged in place over a part (a stride along a dimension of one
 * index is never followed, and may differ). */
static int same_tensor(const fai_tensor *a, const fai_tensor *b, const int64_t counts[3]) {
    return a->data == b->data && a->dtype == b->dtype &&
           (counts[0] < 2 || a->stride_batch == b->stride_batch) &&
           (counts[1] < 2 || a->stride_seq == b->stride_seq) &&
           (counts[2] < 2 || a->stride_head == b->stride_head);
}

/* An output apart from what the merge reads, or the very tensor it replaces: a row written
 * over another part's row (or LSE) would change the rows merged after it. */
static fai_status check_apart(const char *name, const fai_tensor *out, int out_lse,
                              const char *part_name, int64_t p, const fai_tensor *part,
                              int part_lse, const int64_t counts[3], int64_t head_dim) {
    if (out_lse == part_lse && same_tensor(out, part, counts)) return FAI_OK;
    if (!fai__ranges_meet(span_of(out, out_lse, counts, head_dim),
                          span_of(part, part_lse, counts, head_dim)))
        return FAI_OK;
    return fai__fail(FAI_ERR_INVALID_ARG,
                     "%s overlaps %s[%" PRId64 "] (their bytes meet): an output is either one of "
                     "the parts itself (the same data, dtype and strides) or apart from them",
                     name, part_name, p);
}

/* Each output row its own place, the outputs apart from each other, and each apart from every
 * part it does not replace (checked by the bytes each spans: an output interleaved with a part
 * without touching it is refused too). */
static fai_status check_outputs_placed(int64_t count, const fai_tensor *o_parts,
                                       const fai_tensor *lse_parts, const int64_t counts[3],
                                       int64_t head_dim, const fai_tensor *o_out,
                                       const fai_tensor *lse_out) {
    const int64_t o_strides[3] = {o_out->stride_batch, o_out->stride_seq, o_out->stride_head};
    FAI_TRY(fai__check_distinct_indices("o_out", counts, o_strides, head_dim));
    if (lse_out) {
        const int64_t lse_strides[3] = {lse_out->stride_batch, lse_out->stride_seq,
                                        lse_out->stride_head};
        FAI_TRY(fai__check_distinct_indices("lse_out", counts, lse_strides, 1));
        if (fai__ranges_meet(span_of(o_out, 0, counts, head_dim),
                             span_of(lse_out, 1, counts, head_dim)))
            return fai__fail(FAI_ERR_INVALID_ARG, "o_out and lse_out overlap (their bytes meet)");
    }
    for (int64_t p = 0; p < count; p++) {
        FAI_TRY(check_apart("o_out", o_out, 0, "o_parts", p, &o_parts[p], 0, counts, head_dim));
        FAI_TRY(check_apart("o_out", o_out, 0, "lse_parts", p, &lse_parts[p], 1, counts, head_dim));
        if (!lse_out) continue;
        FAI_TRY(
            check_apart("lse_out", lse_out, 1, "lse_parts", p, &lse_parts[p], 1, counts, head_dim));
        FAI_TRY(check_apart("lse_out", lse_out, 1, "o_parts", p, &o_parts[p], 0, counts, head_dim));
    }
    return FAI_OK;
}

static double lse_at(const fai_tensor *lse, int64_t b, int64_t i, int64_t h) {
    return ((const float *)
                lse->data)[b * lse->stride_batch + i * lse->stride_seq + h * lse->stride_head];
}

/* acc += weight * one part's row of O (f32 parts in a loop the compiler vectorises). */
static void add_weighted_row(double *acc, const fai_tensor *o, int64_t row, int64_t head_dim,
                             double weight) {
    if (o->dtype == FAI_DTYPE_F32) {
        const float *src = (const float *)o->data + row;
        for (int64_t x = 0; x < head_dim; x++)
            acc[x] += weight * (double)src[x];
        return;
    }
    for (int64_t x = 0; x < head_dim; x++)
        acc[x] += weight * fai__load_element(o->data, row + x, o->dtype);
}

/* The sizes of merged or rescaled rows: none negative, head_dim in range, and the element count
 * (in *rows) without overflow. */
static fai_status check_sizes(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                              int64_t *rows) {
    if (batch < 0 || seq < 0 || heads < 0)
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "batch = %" PRId64 ", seq = %" PRId64 ", heads = %" PRId64
                         ": sizes must not be negative",
                         batch, seq, heads);
    if (head_dim < 1 || head_dim > FAI_MAX_HEAD_DIM)
        return fai__fail(FAI_ERR_INVALID_ARG, "head_dim = %" PRId64 " is outside [1, %d]", head_dim,
                         FAI_MAX_HEAD_DIM);
    if (!fai__mul_ok(batch, seq, rows) || !fai__mul_ok(*rows, heads, rows) ||
        !fai__mul_ok(*rows, head_dim, rows) || *rows > (INT64_MAX >> 3))
        return fai__fail(FAI_ERR_OVERFLOW,
                         "batch = %" PRId64 " x seq = %" PRId64 " x heads = %" PRId64
                         " x head_dim = %" PRId64 " overflows",
                         batch, seq, heads, head_dim);
    return FAI_OK;
}

fai_status fai_merge_states(int64_t count, const fai_tensor *o_parts, const fai_tensor *lse_parts,
                            int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                            const fai_tensor *o_out, const fai_tensor *lse_out) {
    fai__clear_error();
    if (count < 1 || count > MAX_MERGE_PARTS)
        return fai__fail(FAI_ERR_INVALID_ARG, "count = %" PRId64 " is outside [1, %" PRId64 "]",
                         count, MAX_MERGE_PARTS);
    if (!o_parts) return fai__fail(FAI_ERR_INVALID_ARG, "o_parts = NULL");
    if (!lse_parts) return fai__fail(FAI_ERR_INVALID_ARG, "lse_parts = NULL");
    if (!o_out) return fai__fail(FAI_ERR_INVALID_ARG, "o_out = NULL");
    int64_t rows;
    FAI_TRY(check_sizes(batch, seq, heads, head_dim, &rows));
    if (rows == 0) return FAI_OK;
    const int64_t counts[3] = {batch, seq, heads};
    for (int64_t p = 0; p < count; p++) {
        fai_status status = check_part("o_parts", p, &o_parts[p], 0, counts, head_dim);
        if (status == FAI_OK)
            status = check_part("lse_parts", p, &lse_parts[p], 1, counts, head_dim);
        if (status != FAI_OK) return status;
    }
    fai_status status = check_part("o_out", -1, o_out, 0, counts, head_dim);
    if (status == FAI_OK && lse_out && lse_out->data)
        status = check_part("lse_out", -1, lse_out, 1, counts, head_dim);
    if (status == FAI_OK)
        status = check_outputs_placed(count, o_parts, lse_parts, counts, head_dim, o_out,
                                      lse_out && lse_out->data ? lse_out : NULL);
    if (status != FAI_OK) return status;

    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < seq; i++)
            for (int64_t h = 0; h < heads; h++) {
                double max = -INFINITY;
                for (int64_t p = 0; p < count; p++) {
                    const double value = lse_at(&lse_parts[p], b, i, h);
                    if (value > max || isnan(value)) max = value;
                }
                const int64_t out_row =
                    b * o_out->stride_batch + i * o_out->stride_seq + h * o_out->stride_head;
                const int any = max > -INFINITY || isnan(max);
                double sum = 0.0;
                /* accumulated in double: the merge adds no rounding of its own beyond the
                 * final store */
                double acc[FAI_MAX_HEAD_DIM];
                for (int64_t x = 0; x < head_dim; x++)
                    acc[x] = 0.0;
                for (int64_t p = 0; p < count && any; p++) {
                    const double value = lse_at(&lse_parts[p], b, i, h);
                    if (value == -INFINITY) continue;
                    const double weight = exp(value - max);
                    const fai_tensor *o = &o_parts[p];
                    const int64_t row =
                        b * o->stride_batch + i * o->stride_seq + h * o->stride_head;
                    sum += weight;
                    add_weighted_row(acc, o, row, head_dim, weight);
                }
                /* a row no part sees stays 0 (LSE -inf): acc is 0 there */
                const double denom = any ? sum : 1.0;
                if (o_out->dtype == FAI_DTYPE_F32) {
                    float *dst = (float *)o_out->data + out_row;
                    for (int64_t x = 0; x < head_dim; x++)
                        dst[x] = (float)(acc[x] / denom);
                } else {
                    for (int64_t x = 0; x < head_dim; x++)
                        fai__store_element_f64(o_out->data, out_row + x, o_out->dtype,
                                               acc[x] / denom);
                }
                if (lse_out && lse_out->data)
                    ((float *)lse_out->data)[b * lse_out->stride_batch + i * lse_out->stride_seq +
                                             h * lse_out->stride_head] =
                        any ? (float)(max + log(sum)) : -INFINITY;
            }
    return FAI_OK;
}

/* A sink is a part whose O is 0 and whose LSE is the sink: merging it in is a rescaling of O by
 * exp(LSE - LSE') with LSE' = log(exp(LSE) + exp(sink)), computed in double. */
fai_status fai_apply_sinks(const float *sinks, int64_t batch, int64_t seq, int64_t heads,
                           int64_t head_dim, const fai_tensor *o, const fai_tensor *lse) {
    fai__clear_error();
    if (!sinks) return fai__fail(FAI_ERR_INVALID_ARG, "sinks = NULL");
    if (!o) return fai__fail(FAI_ERR_INVALID_ARG, "o = NULL");
    if (!lse) return fai__fail(FAI_ERR_INVALID_ARG, "lse = NULL: the rescaling needs the LSE");
    int64_t rows;
    FAI_TRY(check_sizes(batch, seq, heads, head_dim, &rows));
    for (int64_t h = 0; h < heads; h++)
        if (isnan(sinks[h]) || sinks[h] == INFINITY)
            return fai__fail(FAI_ERR_INVALID_ARG,
                             "sinks[%" PRId64 "] = %g: a sink is finite or -inf (no sink)", h,
                             (double)sinks[h]);
    if (rows == 0) return FAI_OK;
    const int64_t counts[3] = {batch, seq, heads};
    FAI_TRY(check_part("o", -1, o, 0, counts, head_dim));
    if (!lse->data) return fai__fail(FAI_ERR_INVALID_ARG, "lse.data = NULL");
    FAI_TRY(check_part("lse", -1, lse, 1, counts, head_dim));

    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < seq; i++)
            for (int64_t h = 0; h < heads; h++) {
                const double sink = sinks[h];
                float *lse_row = (float *)lse->data + b * lse->stride_batch + i * lse->stride_seq +
                                 h * lse->stride_head;
                const double value = *lse_row;
                /* +inf: the sink weighs nothing beside it (LSE' = +inf, O kept) */
                if (sink == -INFINITY || isnan(value) || value == INFINITY) continue;
                if (value == -INFINITY) { /* O is 0: only the LSE moves */
                    *lse_row = (float)sink;
                    continue;
                }
                /* O' = O kept / (kept + added), both relative to the larger: one of them is 1,
                 * and no large LSE is subtracted from a rounded total */
                const double top = value > sink ? value : sink;
                const double kept = exp(value - top), added = exp(sink - top);
                const double total = top + log(kept + added);
                const double mul = kept / (kept + added);
                const int64_t row = b * o->stride_batch + i * o->stride_seq + h * o->stride_head;
                for (int64_t x = 0; x < head_dim; x++)
                    fai__store_element_f64(o->data, row + x, o->dtype,
                                           fai__load_element(o->data, row + x, o->dtype) * mul);
                *lse_row = (float)total;
            }
    return FAI_OK;
}

static void geometric_slopes(int64_t n, float *slopes) {
    for (int64_t h = 0; h < n; h++)
        slopes[h] = (float)exp2(-8.0 * (double)(h + 1) / (double)n);
}

fai_status fai_alibi_slopes(int64_t heads, float *slopes) {
    fai__clear_error();
    if (heads < 1)
        return fai__fail(FAI_ERR_INVALID_ARG, "heads = %" PRId64 " must be at least 1", heads);
    if (!slopes) return fai__fail(FAI_ERR_INVALID_ARG, "slopes = NULL");
    int64_t n = 1;
    while (n <= heads / 2) /* (n * 2 <= heads would overflow past 2^62 heads) */
        n *= 2;
    geometric_slopes(n, slopes);
    /* the rest: the odd-numbered slopes of 2n heads, 2^(-8 (2k + 1) / 2n) */
    for (int64_t k = 0; n + k < heads; k++)
        slopes[n + k] = (float)exp2(-4.0 * (double)(2 * k + 1) / (double)n);
    return FAI_OK;
}
