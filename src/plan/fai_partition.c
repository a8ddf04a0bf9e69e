/* Block counting and the work split (the seed's GetCalcBlockNumsOneHead and ComputeSplitNBSeq).
 *
 * A unit is (batch, kv-head group, q tile). Its weight is the exact number of kv tiles that at
 * least one of its query rows can see under causal, window and lengths: these are the tiles the
 * kernel computes, and no others, because the kernel reads its tile range from the unit. */
#include "fai_internal.h"

#include <stdlib.h>

fai_band fai__band_of(const fai_problem *pb, int64_t q_len, int64_t kv_len) {
    /* The diagonal: bottom-right aligns the last query with the last key. */
    const int64_t diagonal = pb->causal == FAI_CAUSAL_TOP_LEFT ? 0 : kv_len - q_len;
    /* causal is a window whose right side is the diagonal itself */
    const int64_t right = pb->causal != FAI_CAUSAL_NONE ? 0 : pb->window_right;
    fai_band band;
    band.kv_len = kv_len;
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

/* Keys visible from rows [q_begin, q_end): the union of their bands, which is one interval
 * because lo and hi grow with i. Returns the number of (row, key) pairs and the interval. */
static int64_t visible_span(const fai_band *band, int64_t q_begin, int64_t q_end,
                            int64_t *key_lo, int64_t *key_hi) {
    int64_t pairs = 0;
    *key_lo = INT64_MAX;
    *key_hi = -1;
    for (int64_t i = q_begin; i < q_end; i++) {
        const int64_t lo = fai__band_lo(band, i), hi = fai__band_hi(band, i);
        if (lo > hi) continue;
        pairs += hi - lo + 1;
        if (lo < *key_lo) *key_lo = lo;
        if (hi > *key_hi) *key_hi = hi;
    }
    return pairs;
}

fai_status fai__build_units(fai_plan *plan) {
    const fai_problem *pb = &plan->pb;
    const int64_t tile_q = plan->tile_q, tile_kv = plan->tile_kv;

    /* -- Step 1: count units (every sequence has at least one, to write its padding rows) -- */
    int64_t count = 0;
    for (int64_t b = 0; b < pb->batch; b++) {
        const fai_seq *seq = &plan->seqs[b];
        const int64_t q_tiles = seq->q_len > 0 ? fai__ceil_div(seq->q_len, tile_q) : 1;
        int64_t per_batch;
        if (!fai__mul_ok(q_tiles, pb->heads_kv, &per_batch) ||
            !fai__add_ok(count, per_batch, &count) || count > (INT64_C(1) << 31))
            return fai__fail(FAI_ERR_OVERFLOW,
                             "batch = %lld x heads_kv = %lld x q tiles makes more than 2^31 "
                             "work units",
                             (long long)pb->batch, (long long)pb->heads_kv);
    }
    plan->unit_count = count;
    plan->units = calloc(count ? (size_t)count : 1, sizeof *plan->units);
    if (!plan->units) return fai__fail(FAI_ERR_NO_MEMORY, "no memory for %lld units", (long long)count);

    /* -- Step 2: per unit, the exact range of valid kv tiles -- */
    int64_t u = 0;
    plan->total_weight = 0;
    plan->visible_pairs = 0;
    for (int64_t b = 0; b < pb->batch; b++) {
        const fai_seq *seq = &plan->seqs[b];
        const fai_band band = fai__band_of(pb, seq->q_len, seq->kv_len);
        const int64_t q_tiles = seq->q_len > 0 ? fai__ceil_div(seq->q_len, tile_q) : 1;
        for (int64_t h = 0; h < pb->heads_kv; h++) {
            for (int64_t t = 0; t < q_tiles; t++) {
                fai_unit *unit = &plan->units[u++];
                unit->batch = b;
                unit->head_kv = h;
                unit->q_begin = t * tile_q;
                unit->q_len = seq->q_len - unit->q_begin < tile_q ? seq->q_len - unit->q_begin
                                                                  : tile_q;
                if (unit->q_len < 0) unit->q_len = 0;
                const int last = t + 1 == q_tiles;
                unit->pad_begin = last ? seq->q_len : 0;
                unit->pad_end = last ? seq->q_rows : 0;
                int64_t key_lo, key_hi;
                const int64_t pairs = visible_span(&band, unit->q_begin,
                                                   unit->q_begin + unit->q_len, &key_lo, &key_hi);
                if (key_hi >= key_lo) {
                    unit->kv_tile_begin = key_lo / tile_kv;
                    unit->kv_tiles = key_hi / tile_kv + 1 - unit->kv_tile_begin;
                }
                plan->total_weight += unit->kv_tiles;
                plan->visible_pairs += pairs * plan->group;
            }
        }
    }
    return FAI_OK;
}

/* Contiguous ranges by weight: unit u goes to the worker whose share of the total weight holds
 * the unit's midpoint. Every worker's weight then differs from the mean by at most one unit's
 * weight, which the seed's greedy rule does not promise. Units of weight 0 (empty or fully
 * masked sequences, which only write zero rows) follow their neighbours. */
fai_status fai__split_units(fai_plan *plan) {
    const int64_t workers = plan->workers;
    plan->worker_begin = calloc((size_t)workers + 1, sizeof *plan->worker_begin);
    plan->worker_weight = calloc((size_t)workers, sizeof *plan->worker_weight);
    if (!plan->worker_begin || !plan->worker_weight)
        return fai__fail(FAI_ERR_NO_MEMORY, "no memory for %lld workers", (long long)workers);

    const int64_t total = plan->total_weight;
    int64_t prefix = 0, previous_worker = 0;
    for (int64_t u = 0; u < plan->unit_count; u++) {
        const int64_t weight = plan->units[u].kv_tiles;
        int64_t worker;
        if (total > 0) {
            /* (2*prefix + weight) / (2*total) * workers, in exact integer arithmetic */
            const __int128 midpoint = (__int128)(2 * prefix + weight) * workers;
            worker = (int64_t)(midpoint / (2 * (__int128)total));
        } else {
            worker = (int64_t)((__int128)u * workers / plan->unit_count);
        }
        if (worker >= workers) worker = workers - 1;
        if (worker < previous_worker) worker = previous_worker;
        for (int64_t w = previous_worker + 1; w <= worker; w++) plan->worker_begin[w] = u;
        previous_worker = worker;
        plan->worker_weight[worker] += weight;
        prefix += weight;
    }
    for (int64_t w = previous_worker + 1; w <= workers; w++)
        plan->worker_begin[w] = plan->unit_count;

    int64_t max_weight = 0;
    for (int64_t w = 0; w < workers; w++)
        if (plan->worker_weight[w] > max_weight) max_weight = plan->worker_weight[w];
    plan->imbalance = total > 0 ? (double)max_weight * (double)workers / (double)total : 1.0;
    return FAI_OK;
}
