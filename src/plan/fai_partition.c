/* Block counting and the work split (the seed's GetCalcBlockNumsOneHead and ComputeSplitNBSeq).
 *
 * A unit is (batch, kv-head group, q tile); a group of more than a tile's rows of q heads is
 * cut into slices, each its own unit. Its weight is the exact number of kv tiles that at
 * least one of its query rows can see under causal, window and lengths: these are the tiles the
 * kernel computes, and no others, because the kernel reads its tile range from the unit. */
#include "fai_internal.h"

#include <math.h>
#include <stdlib.h>

/* Keys visible from rows [q_begin, q_end): the union of their bands, which is one interval
 * because lo and hi grow with i. Returns the number of (row, key) pairs and the interval. */
static int64_t visible_span(const fai_band *band, int64_t q_begin, int64_t q_end, int64_t *key_lo,
                            int64_t *key_hi) {
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

    const int64_t slices = fai__ceil_div(plan->group, plan->group_slice);

    /* -- Step 1: count units (every sequence has at least one, to write its padding rows) -- */
    int64_t count = 0;
    for (int64_t b = 0; b < pb->batch; b++) {
        const fai_seq *seq = &plan->seqs[b];
        const int64_t q_tiles = seq->q_len > 0 ? fai__ceil_div(seq->q_len, tile_q) : 1;
        int64_t per_batch;
        if (!fai__mul_ok(q_tiles, pb->heads_kv, &per_batch) ||
            !fai__mul_ok(per_batch, slices, &per_batch) || !fai__add_ok(count, per_batch, &count) ||
            count > (INT64_C(1) << 31))
            return fai__fail(FAI_ERR_OVERFLOW,
                             "batch = %lld x heads_kv = %lld x q tiles makes more than 2^31 "
                             "work units",
                             (long long)pb->batch, (long long)pb->heads_kv);
    }
    plan->unit_count = count;
    plan->units = calloc(count ? (size_t)count : 1, sizeof *plan->units);
    if (!plan->units)
        return fai__fail(FAI_ERR_NO_MEMORY, "no memory for %lld units", (long long)count);

    /* -- Step 2: per unit, the exact range of valid kv tiles -- */
    int64_t u = 0;
    plan->total_weight = 0;
    plan->visible_pairs = 0;
    for (int64_t b = 0; b < pb->batch; b++) {
        const fai_seq *seq = &plan->seqs[b];
        const fai_band band = fai__band_of(pb, seq);
        const int64_t q_tiles = seq->q_len > 0 ? fai__ceil_div(seq->q_len, tile_q) : 1;
        for (int64_t h = 0; h < pb->heads_kv; h++) {
            for (int64_t slice = 0; slice < slices; slice++) {
                for (int64_t t = 0; t < q_tiles; t++) {
                    fai_unit *unit = &plan->units[u++];
                    unit->batch = b;
                    unit->head_kv = h;
                    unit->head_q_begin = h * plan->group + slice * plan->group_slice;
                    unit->heads = plan->group - slice * plan->group_slice < plan->group_slice
                                      ? plan->group - slice * plan->group_slice
                                      : plan->group_slice;
                    unit->q_begin = t * tile_q;
                    unit->q_len =
                        seq->q_len - unit->q_begin < tile_q ? seq->q_len - unit->q_begin : tile_q;
                    if (unit->q_len < 0) unit->q_len = 0;
                    const int last = t + 1 == q_tiles;
                    unit->pad_begin = last ? seq->q_len : 0;
                    unit->pad_end = last ? seq->q_rows : 0;
                    int64_t key_lo, key_hi;
                    const int64_t pairs = visible_span(
                        &band, unit->q_begin, unit->q_begin + unit->q_len, &key_lo, &key_hi);
                    if (key_hi >= key_lo) {
                        unit->kv_tile_begin = key_lo / tile_kv;
                        unit->kv_tiles = key_hi / tile_kv + 1 - unit->kv_tile_begin;
                    }
                    plan->total_weight += unit->kv_tiles;
                    int64_t unit_pairs;
                    if (!fai__mul_ok(pairs, unit->heads, &unit_pairs) ||
                        !fai__add_ok(plan->visible_pairs, unit_pairs, &plan->visible_pairs))
                        return fai__fail(FAI_ERR_OVERFLOW,
                                         "the problem has more than 2^63 visible (query, key) "
                                         "pairs: seq_q = %lld, seq_kv = %lld, heads_q = %lld",
                                         (long long)pb->seq_q, (long long)pb->seq_kv,
                                         (long long)pb->heads_q);
                }
            }
        }
    }
    return FAI_OK;
}

/* -- The split --------------------------------------------------------------------------------
 * Every strategy produces cuts c_0 = 0 <= c_1 <= ... <= c_W = T on the line of all units' valid
 * tiles (unit u holds [line_begin, line_begin + kv_tiles)); worker w computes [c_w, c_{w+1}).
 * A unit that a cut crosses is computed in parts, one per worker, and merged. */

/* Snap a cut to a unit edge when the edge is this close (in tiles per worker): the imbalance it
 * adds is smaller than the cost of merging partial results. */
#define SNAP_FRACTION 0.03

/* The worker computing line position p: the nonempty worker whose range holds it (p = T: the
 * last nonempty worker; no nonempty worker at all: worker 0). */
static int64_t owner_of(const int64_t *cuts, int64_t workers, int64_t p) {
    int64_t lo = 0, hi = workers; /* find the last w with cuts[w] <= p and cuts[w+1] > p */
    if (p >= cuts[workers]) {
        for (int64_t w = workers - 1; w >= 0; w--)
            if (cuts[w + 1] > cuts[w]) return w;
        return 0;
    }
    while (hi - lo > 1) { /* invariant: cuts[lo] <= p < cuts[hi] */
        const int64_t mid = (lo + hi) / 2;
        if (cuts[mid] <= p)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* The cost model of the AUTO split, in tiles: every valid tile costs 1, every page of a paged
 * K/V a unit walks costs PAGE_COST more (a block-table jump: a new TLB entry and a prefetch
 * stream restarted; the seed warns that equal block counts are not equal times under paging),
 * and cutting a unit costs a merge of its parts, which the snapping below weighs. */
#define PAGE_COST 0.05

/* Pages of the block table that unit u's valid keys span (0 for dense K/V). */
static double unit_pages(const fai_plan *plan, const fai_unit *unit) {
    if (!plan->paged || unit->kv_tiles == 0) return 0.0;
    const int64_t page_size = plan->pb.page_size, kv_len = plan->seqs[unit->batch].kv_len;
    const int64_t first_key = unit->kv_tile_begin * plan->tile_kv;
    int64_t last_key = (unit->kv_tile_begin + unit->kv_tiles) * plan->tile_kv - 1;
    if (last_key > kv_len - 1) last_key = kv_len - 1;
    return (double)(last_key / page_size - first_key / page_size + 1);
}

/* AUTO: equal shares of the cost, as cuts on the line of tiles (a unit's cost spread evenly over
 * its tiles), each snapped to a unit edge where one is near. */
static void cut_line(const fai_plan *plan, int64_t *cuts) {
    const int64_t workers = plan->workers, total = plan->total_weight;
    for (int64_t w = 0; w <= workers; w++)
        cuts[w] = 0;
    if (plan->unit_count == 0 || total == 0) return;
    double total_cost = 0.0;
    for (int64_t u = 0; u < plan->unit_count; u++)
        total_cost +=
            (double)plan->units[u].kv_tiles + PAGE_COST * unit_pages(plan, &plan->units[u]);
    const double share = (double)total / (double)workers; /* in tiles, for the snapping */
    int64_t u = 0;
    double cost_before = 0.0; /* of the units before u */
    for (int64_t w = 1; w < workers; w++) {
        const double target = total_cost * (double)w / (double)workers;
        double unit_cost =
            (double)plan->units[u].kv_tiles + PAGE_COST * unit_pages(plan, &plan->units[u]);
        while (u + 1 < plan->unit_count && cost_before + unit_cost <= target) {
            cost_before += unit_cost;
            u++;
            unit_cost =
                (double)plan->units[u].kv_tiles + PAGE_COST * unit_pages(plan, &plan->units[u]);
        }
        const fai_unit *unit = &plan->units[u];
        const double into = unit_cost > 0.0 ? (target - cost_before) / unit_cost : 0.0;
        const double ideal = (double)unit->line_begin + into * (double)unit->kv_tiles;
        /* the unit edges on either side of the ideal cut: snap when the imbalance of moving there
         * costs less than merging the parts of a cut unit */
        const int64_t below = unit->line_begin;
        const int64_t above = unit->line_begin + unit->kv_tiles;
        const int64_t edge = ideal - (double)below <= (double)above - ideal ? below : above;
        int64_t cut = (int64_t)(ideal + 0.5);
        if (fabs((double)edge - ideal) <= SNAP_FRACTION * share) cut = edge;
        cuts[w] = cut < cuts[w - 1] ? cuts[w - 1] : cut;
    }
    cuts[workers] = total;
}

/* UNITS: unit u goes to the worker whose share holds the unit's midpoint, so a worker's weight
 * differs from the mean by at most one unit's weight. Cuts fall on unit edges. */
static void cut_units(const fai_plan *plan, int64_t *cuts) {
    const int64_t workers = plan->workers, total = plan->total_weight;
    int64_t next_worker = 1;
    cuts[0] = 0;
    for (int64_t u = 0; u < plan->unit_count && total > 0; u++) {
        const fai_unit *unit = &plan->units[u];
        const __int128 midpoint = (__int128)(2 * unit->line_begin + unit->kv_tiles) * workers;
        int64_t worker = (int64_t)(midpoint / (2 * (__int128)total));
        if (worker >= workers) worker = workers - 1;
        while (next_worker <= worker)
            cuts[next_worker++] = unit->line_begin;
    }
    while (next_worker <= workers)
        cuts[next_worker++] = total;
}

/* GREEDY: the seed's ComputeSplitNBSeq on whole units. */
static void cut_greedy(const fai_plan *plan, int64_t *cuts) {
    const int64_t workers = plan->workers, total = plan->total_weight;
    int64_t worker = 0, worker_weight = 0;
    cuts[0] = 0;
    for (int64_t u = 0; u < plan->unit_count; u++) {
        const fai_unit *unit = &plan->units[u];
        const double target = (double)total * (double)(worker + 1) / (double)workers;
        const double deficit = target - (double)unit->line_begin;
        if (worker + 1 < workers && worker_weight > 0 && (double)unit->kv_tiles > 2.0 * deficit) {
            cuts[++worker] = unit->line_begin;
            worker_weight = 0;
        }
        worker_weight += unit->kv_tiles;
    }
    while (worker < workers)
        cuts[++worker] = total;
}

/* From the cuts: each worker's units, the units computed in parts and each part's index. */
static void assign_workers(fai_plan *plan, const int64_t *cuts) {
    const int64_t workers = plan->workers;
    for (int64_t w = 0; w < workers; w++) {
        fai_worker *worker = &plan->worker[w];
        worker->unit_begin = worker->unit_end = -1;
        worker->line_begin = cuts[w];
        worker->line_end = cuts[w + 1];
        worker->first_part = worker->last_part = -1;
        plan->worker_weight[w] = cuts[w + 1] - cuts[w];
    }
    plan->split_units = plan->partials = 0;
    for (int64_t u = 0; u < plan->unit_count; u++) {
        fai_unit *unit = &plan->units[u];
        const int64_t end = unit->line_begin + unit->kv_tiles;
        const int64_t first = owner_of(cuts, workers, unit->line_begin);
        const int64_t last = unit->kv_tiles > 0 ? owner_of(cuts, workers, end - 1) : first;
        unit->parts = 0;
        for (int64_t w = first; w <= last; w++) {
            if (w != first && cuts[w + 1] == cuts[w]) continue; /* an empty worker */
            fai_worker *worker = &plan->worker[w];
            if (worker->unit_begin < 0) worker->unit_begin = u;
            worker->unit_end = u + 1;
            unit->parts++;
        }
        if (unit->parts > 1) {
            int64_t part = 0;
            for (int64_t w = first; w <= last; w++) {
                if (w != first && cuts[w + 1] == cuts[w]) continue;
                fai_worker *worker = &plan->worker[w];
                if (worker->unit_begin == u) worker->first_part = part;
                if (worker->unit_end == u + 1) worker->last_part = part;
                part++;
            }
            unit->split_index = plan->split_units++;
            unit->first_slot = plan->partials;
            plan->partials += unit->parts;
        }
    }
    /* a worker with nothing to do gets the empty range where its predecessor ended */
    for (int64_t w = 0, previous_end = 0; w < workers; w++) {
        if (plan->worker[w].unit_begin < 0)
            plan->worker[w].unit_begin = plan->worker[w].unit_end = previous_end;
        previous_end = plan->worker[w].unit_end;
    }
}

fai_status fai__split_units(fai_plan *plan) {
    const int64_t workers = plan->workers;
    plan->worker = calloc((size_t)workers, sizeof *plan->worker);
    plan->worker_weight = calloc((size_t)workers, sizeof *plan->worker_weight);
    int64_t *cuts = calloc((size_t)workers + 1, sizeof *cuts);
    if (!plan->worker || !plan->worker_weight || !cuts) {
        free(cuts);
        return fai__fail(FAI_ERR_NO_MEMORY, "no memory for %lld workers", (long long)workers);
    }
    int64_t position = 0;
    for (int64_t u = 0; u < plan->unit_count; u++) {
        plan->units[u].line_begin = position;
        position += plan->units[u].kv_tiles;
    }
    if (plan->pb.split == FAI_SPLIT_GREEDY)
        cut_greedy(plan, cuts);
    else if (plan->pb.split == FAI_SPLIT_UNITS)
        cut_units(plan, cuts);
    else
        cut_line(plan, cuts);
    assign_workers(plan, cuts);
    free(cuts);

    int64_t max_weight = 0;
    for (int64_t w = 0; w < workers; w++)
        if (plan->worker_weight[w] > max_weight) max_weight = plan->worker_weight[w];
    plan->imbalance = plan->total_weight > 0
                          ? (double)max_weight * (double)workers / (double)plan->total_weight
                          : 1.0;
    return FAI_OK;
}
