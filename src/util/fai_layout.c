/* Placement checks of strided tensors: fai_layout.h. */
#include "util/fai_layout.h"

#include "fai_internal.h"

#include <inttypes.h>

int fai__indices_distinct(const int64_t counts[3], const int64_t strides[3], int64_t tail) {
    for (int i = 0; i < 3; i++)
        if (counts[i] <= 0) return 1; /* no element at all (its strides are not multiplied) */
    int order[3] = {0, 1, 2};
    for (int i = 1; i < 3; i++) /* by increasing stride */
        for (int j = i; j > 0 && strides[order[j]] < strides[order[j - 1]]; j--) {
            const int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    int64_t span = tail; /* elements from the first index's to past the last one's (offsets fit) */
    for (int i = 0; i < 3; i++) {
        const int64_t count = counts[order[i]], stride = strides[order[i]];
        if (count <= 1) continue;
        if (stride < span) return 0;
        span += stride * (count - 1);
    }
    return 1;
}

fai_status fai__check_distinct_indices(const char *name, const int64_t counts[3],
                                       const int64_t strides[3], int64_t tail) {
    if (fai__indices_distinct(counts, strides, tail)) return FAI_OK;
    return fai__fail(FAI_ERR_INVALID_ARG,
                     "%s strides (batch %" PRId64 ", seq %" PRId64 ", head %" PRId64
                     ") put two of its [%" PRId64 ", %" PRId64 ", %" PRId64
                     "] %s in one place, or interleave its dimensions: each must have its own, "
                     "the dimensions by increasing stride each past all the smaller ones span",
                     name, strides[0], strides[1], strides[2], counts[0], counts[1], counts[2],
                     tail > 1 ? "rows" : "elements");
}

fai_byte_range fai__byte_range(const void *data, const int64_t counts[3], const int64_t strides[3],
                               int64_t tail, size_t element) {
    const uintptr_t begin = (uintptr_t)data;
    for (int i = 0; i < 3; i++)
        if (counts[i] <= 0) return (fai_byte_range){begin, begin}; /* no element: empty */
    int64_t last = tail;
    for (int i = 0; i < 3; i++)
        if (counts[i] > 1) last += (counts[i] - 1) * strides[i];
    return (fai_byte_range){begin, begin + (uintptr_t)last * element};
}
