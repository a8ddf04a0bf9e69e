/* Tensor views, output checks, packing and sizes shared by the two kinds of sharding. */
#include "fai_mpi_internal.h"

#include "fai_internal.h"
#include "util/fai_layout.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

fai_tensor fai_mpi__tensor_from_row(const fai_tensor *tensor, int64_t row) {
    fai_tensor view = *tensor;
    if (view.data)
        view.data =
            (char *)view.data + (size_t)(row * view.stride_seq) * fai_dtype_size(view.dtype);
    return view;
}

int fai_mpi__output_ok(fai_mpi__outcome *outcome, const fai_tensor *tensor, fai_dtype dtype,
                       int is_lse, const char *name, const fai_mpi__part_shape *shape) {
    if (!tensor->data) {
        fai_mpi__outcome_fail(outcome, FAI_ERR_INVALID_ARG, "tensors.%s.data = NULL", name);
        return 0;
    }
    if (tensor->dtype != dtype) {
        fai_mpi__outcome_fail(outcome, FAI_ERR_INVALID_ARG, "tensors.%s.dtype = %d is not %s", name,
                              (int)tensor->dtype, is_lse ? "f32" : "the problem's o_dtype");
        return 0;
    }
    if (!is_lse && tensor->stride_dim != 0 && tensor->stride_dim != 1) {
        fai_mpi__outcome_fail(outcome, FAI_ERR_INVALID_ARG,
                              "tensors.%s.stride_dim = %lld: the head dimension must be "
                              "contiguous (1)",
                              name, (long long)tensor->stride_dim);
        return 0;
    }
    if (tensor->stride_batch < 0 || tensor->stride_seq < 0 || tensor->stride_head < 0) {
        fai_mpi__outcome_fail(outcome, FAI_ERR_INVALID_ARG, "tensors.%s has a negative stride",
                              name);
        return 0;
    }
    /* aligned, every element addressable (as fai_merge_states checks them) and each row its own
     * place (the merge writes every one): fai_run's rules for its outputs, in fai's words */
    char label[32];
    snprintf(label, sizeof label, "tensors.%s", name);
    const int64_t counts[3] = {shape->batch, shape->seq, shape->heads};
    const int64_t strides[3] = {tensor->stride_batch, tensor->stride_seq, tensor->stride_head};
    const int64_t tail = is_lse ? 1 : shape->dim_v;
    fai_status status = fai__check_aligned(label, tensor->data, fai_dtype_size(dtype));
    if (status == FAI_OK)
        status = fai__check_reach(label, counts, strides[0], strides[1], strides[2], tail,
                                  fai_dtype_size(dtype));
    if (status == FAI_OK) status = fai__check_distinct_indices(label, counts, strides, tail);
    fai_mpi__outcome_fai(outcome, status);
    return status == FAI_OK;
}

int fai_mpi__outputs_apart(fai_mpi__outcome *outcome, const fai_tensor *o, const fai_tensor *lse,
                           const fai_mpi__part_shape *shape) {
    if (!lse->data) return 1;
    const int64_t counts[3] = {shape->batch, shape->seq, shape->heads};
    const int64_t o_strides[3] = {o->stride_batch, o->stride_seq, o->stride_head};
    const int64_t lse_strides[3] = {lse->stride_batch, lse->stride_seq, lse->stride_head};
    if (!fai__ranges_meet(
            fai__byte_range(o->data, counts, o_strides, shape->dim_v, fai_dtype_size(o->dtype)),
            fai__byte_range(lse->data, counts, lse_strides, 1, sizeof(float))))
        return 1;
    fai_mpi__outcome_fail(outcome, FAI_ERR_INVALID_ARG,
                          "tensors.o and tensors.lse overlap in memory: each needs its own");
    return 0;
}

void fai_mpi__pack_rows(void *dst, const fai_tensor *src, int64_t batch, int64_t rows,
                        int64_t heads, int64_t dim) {
    const size_t esize = fai_dtype_size(src->dtype);
    const size_t row_bytes = (size_t)dim * esize;
    char *out = dst;
    const char *in = src->data;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t s = 0; s < rows; s++)
            for (int64_t h = 0; h < heads; h++) {
                const int64_t at =
                    b * src->stride_batch + s * src->stride_seq + h * src->stride_head;
                memcpy(out, in + (size_t)at * esize, row_bytes);
                out += row_bytes;
            }
}

void *fai_mpi__alloc(size_t bytes) {
    if (bytes > SIZE_MAX - 64) return NULL;
    return aligned_alloc(64, (bytes + 63) / 64 * 64 + (bytes ? 0 : 64));
}
