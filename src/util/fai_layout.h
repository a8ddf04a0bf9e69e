/* Where a strided tensor's elements lie, for the checks made before anything is written: whether
 * its indices address distinct places (an output's rows each their own), and the bytes it spans
 * (an output apart from what is read). A tensor here is `counts[i]` indices along `strides[i]`
 * (i < 3, in elements) of `tail` contiguous elements, its offsets already known to fit int64. */
#ifndef FAI_LAYOUT_H
#define FAI_LAYOUT_H

#include "fai.h"

#include <stdint.h>

/* Whether distinct indices address distinct elements: taken by increasing stride, each
 * dimension must step past all that the smaller ones span. (A layout that interleaves its
 * dimensions without overlapping fails too; no tensor fai writes is laid out so.) */
int fai__indices_distinct(const int64_t counts[3], const int64_t strides[3], int64_t tail);

/* FAI_OK, or FAI_ERR_INVALID_ARG naming `name`, its strides and its counts when two indices
 * meet (fai__indices_distinct): whichever was written last would stay, with threads any. */
fai_status fai__check_distinct_indices(const char *name, const int64_t counts[3],
                                       const int64_t strides[3], int64_t tail);

/* The bytes [begin, end) a tensor spans (empty when a count is 0). */
typedef struct fai_byte_range {
    uintptr_t begin, end;
} fai_byte_range;

fai_byte_range fai__byte_range(const void *data, const int64_t counts[3], const int64_t strides[3],
                               int64_t tail, size_t element);

static inline int fai__ranges_meet(fai_byte_range a, fai_byte_range b) {
    return a.begin < b.end && b.begin < a.end;
}

#endif
