/* The band of keys a query row sees: causal and the sliding window as an interval around the
 * sequence's diagonal, clipped to its keys. Used by the block counting (fai_partition.c) and by
 * the kernel's masks alike, so that both agree on every tile. */
#include "fai_internal.h"

#include <stdint.h>

fai_band fai__band_of(const fai_problem *pb, const fai_seq *seq) {
    const int64_t diagonal = seq->diagonal;
    /* causal is a window whose right side is the diagonal itself */
    const int64_t right = pb->causal != FAI_CAUSAL_NONE ? 0 : pb->window_right;
    fai_band band;
    band.kv_len = seq->kv_len;
    band.lo_offset = pb->window_left >= 0 ? diagonal - pb->window_left : INT64_MIN;
    band.hi_offset = right >= 0 ? diagonal + right : INT64_MAX;
    return band;
}

int64_t fai__band_lo(const fai_band *band, int64_t i) {
    if (band->lo_offset == INT64_MIN) return 0;
    const int64_t lo = i + band->lo_offset;
    return lo < 0 ? 0 : lo;
}

int64_t fai__band_hi(const fai_band *band, int64_t i) {
    if (band->hi_offset == INT64_MAX) return band->kv_len - 1;
    const int64_t hi = i + band->hi_offset;
    return hi > band->kv_len - 1 ? band->kv_len - 1 : hi;
}
