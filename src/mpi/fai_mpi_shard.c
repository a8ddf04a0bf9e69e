/* Where each rank's shard lies: contiguous ranges, and the zig-zag chunks of ring attention. */
#include "fai_mpi_internal.h"

fai_status fai_mpi_split_range(int64_t total, int ranks, int rank, int64_t *start, int64_t *len) {
    fai_mpi__clear_error();
    if (!start || !len) return fai_mpi__fail(FAI_ERR_INVALID_ARG, "start or len = NULL");
    if (total < 0)
        return fai_mpi__fail(FAI_ERR_INVALID_ARG, "total = %lld is negative", (long long)total);
    if (ranks < 1) return fai_mpi__fail(FAI_ERR_INVALID_ARG, "ranks = %d is below 1", ranks);
    if (rank < 0 || rank >= ranks)
        return fai_mpi__fail(FAI_ERR_INVALID_ARG, "rank = %d is outside [0, ranks = %d)", rank,
                             ranks);
    const int64_t base = total / ranks, extra = total % ranks;
    *start = rank * base + (rank < extra ? rank : extra);
    *len = base + (rank < extra ? 1 : 0);
    return FAI_OK;
}

fai_status fai_mpi_zigzag_layout(int64_t seq, int ranks, int rank, fai_mpi_zigzag *layout) {
    fai_mpi__clear_error();
    if (!layout) return fai_mpi__fail(FAI_ERR_INVALID_ARG, "layout = NULL");
    if (ranks < 1 || ranks > (1 << 29))
        return fai_mpi__fail(FAI_ERR_INVALID_ARG, "ranks = %d is outside [1, 2^29]", ranks);
    if (rank < 0 || rank >= ranks)
        return fai_mpi__fail(FAI_ERR_INVALID_ARG, "rank = %d is outside [0, ranks = %d)", rank,
                             ranks);
    if (seq < 0)
        return fai_mpi__fail(FAI_ERR_INVALID_ARG, "seq = %lld is negative", (long long)seq);
    /* 2R chunks by the contiguous rule: the first seq % 2R chunks are one row longer */
    const int chunks[2] = {rank, 2 * ranks - 1 - rank};
    layout->rows = 0;
    for (int c = 0; c < 2; c++) {
        const fai_status status =
            fai_mpi_split_range(seq, 2 * ranks, chunks[c], &layout->start[c], &layout->len[c]);
        if (status != FAI_OK) return status;
        layout->chunk[c] = chunks[c];
        layout->rows += layout->len[c];
    }
    return FAI_OK;
}
