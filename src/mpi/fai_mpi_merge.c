/* Partial results: their layout in a float buffer, their exchange between ranks and their merge
 * by fai_merge_states. A part is sent as it is (O in f32 and the LSE), so the merge sees exactly
 * what each rank computed; the output dtype is applied once, by the merge. */
#include "fai_mpi_internal.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t fai_mpi__part_rows(const fai_mpi__part_shape *shape) {
    return shape->batch * shape->seq * shape->heads;
}

int64_t fai_mpi__part_floats(const fai_mpi__part_shape *shape) {
    return fai_mpi__part_rows(shape) * (shape->dim_v + 1);
}

fai_tensor fai_mpi__part_o(float *part, const fai_mpi__part_shape *shape) {
    return fai_tensor_bshd(part, FAI_DTYPE_F32, shape->seq, shape->heads, shape->dim_v);
}

fai_tensor fai_mpi__part_lse(float *part, const fai_mpi__part_shape *shape) {
    fai_tensor lse;
    memset(&lse, 0, sizeof lse);
    lse.data = part + fai_mpi__part_rows(shape) * shape->dim_v;
    lse.dtype = FAI_DTYPE_F32;
    lse.stride_batch = shape->seq * shape->heads;
    lse.stride_seq = shape->heads;
    lse.stride_head = 1;
    return lse;
}

void fai_mpi__part_empty(float *part, const fai_mpi__part_shape *shape) {
    const int64_t rows = fai_mpi__part_rows(shape);
    memset(part, 0, sizeof(float) * (size_t)(rows * shape->dim_v));
    float *lse = part + rows * shape->dim_v;
    for (int64_t r = 0; r < rows; r++)
        lse[r] = -INFINITY;
}

fai_tensor fai_mpi__sinks_per_head(const float *sinks) {
    fai_tensor lse;
    memset(&lse, 0, sizeof lse);
    lse.data = (void *)sinks;
    lse.dtype = FAI_DTYPE_F32;
    lse.stride_head = 1;
    return lse;
}

fai_status fai_mpi__merge_parts(int64_t count, float *const *parts,
                                const fai_mpi__part_shape *shape, const fai_tensor *o,
                                const fai_tensor *lse, fai_tensor *views,
                                const fai_tensor *sink_lse) {
    static const float zeros[FAI_MAX_HEAD_DIM];
    const int64_t all = count + (sink_lse != NULL);
    for (int64_t p = 0; p < count; p++) {
        views[p] = fai_mpi__part_o(parts[p], shape);
        views[all + p] = fai_mpi__part_lse(parts[p], shape);
    }
    if (sink_lse) { /* a part of O = 0 everywhere, its LSE the sinks' */
        memset(&views[count], 0, sizeof views[count]);
        views[count].data = (void *)zeros;
        views[count].dtype = FAI_DTYPE_F32;
        views[all + count] = *sink_lse;
    }
    const fai_status status = fai_merge_states(all, views, views + all, shape->batch, shape->seq,
                                               shape->heads, shape->dim_v, o, lse);
    if (status != FAI_OK) return fai_mpi__fail(status, "fai_merge_states: %s", fai_last_error());
    return FAI_OK;
}

void fai_mpi__check_sinks(fai_mpi__outcome *out, const fai_problem *pb, const fai_tensors *t) {
    if (pb->sinks && !t->sinks) {
        fai_mpi__outcome_fail(out, FAI_ERR_INVALID_ARG,
                              "sinks = NULL but the problem has sinks = 1");
        return;
    }
    if (!pb->sinks && t->sinks) {
        fai_mpi__outcome_fail(out, FAI_ERR_INVALID_ARG,
                              "sinks is set but the problem has sinks = 0: set it to use them");
        return;
    }
    for (int64_t h = 0; t->sinks && h < pb->heads_q; h++)
        if (isnan(t->sinks[h]) || t->sinks[h] == INFINITY) {
            fai_mpi__outcome_fail(out, FAI_ERR_INVALID_ARG,
                                  "sinks[%lld] = %g is not finite or -inf", (long long)h,
                                  (double)t->sinks[h]);
            return;
        }
}

fai_status fai_mpi__gather_parts(MPI_Comm comm, int root, const float *part,
                                 const fai_mpi__part_shape *shape, float *gathered,
                                 fai_mpi_stats *stats) {
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    const int64_t rows = fai_mpi__part_rows(shape);
    if (rows > INT_MAX)
        return fai_mpi__fail(FAI_ERR_OVERFLOW, "%lld rows of partial results exceed MPI's counts",
                             (long long)rows);
    /* one element per row of O plus its LSE value keeps the count within an int */
    MPI_Datatype row;
    fai_status status = fai_mpi__check_mpi(
        MPI_Type_contiguous((int)(shape->dim_v + 1), MPI_FLOAT, &row), "MPI_Type_contiguous");
    if (status != FAI_OK) return status;
    MPI_Type_commit(&row);
    const double t0 = MPI_Wtime();
    const int rc = root < 0
                       ? MPI_Allgather(part, (int)rows, row, gathered, (int)rows, row, comm)
                       : MPI_Gather(part, (int)rows, row, gathered, (int)rows, row, root, comm);
    const double waited = MPI_Wtime() - t0;
    stats->wait_seconds += waited;
    stats->exchange_seconds += waited;
    MPI_Type_free(&row);
    status = fai_mpi__check_mpi(rc, root < 0 ? "MPI_Allgather" : "MPI_Gather");
    const int64_t part_bytes = fai_mpi__part_floats(shape) * (int64_t)sizeof(float);
    stats->bytes_sent += root < 0 ? part_bytes * (size - 1) : rank == root ? 0 : part_bytes;
    return status;
}
