/* Plan properties against brute force, on many random small problems: the kv tiles of every
 * unit, the weights and the split across workers, the visible pair count, tile overrides and
 * the coverage of every query row. Only the public inspection API is used. */
#include "fai.h"
#include "test_util.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

/* -- a seeded PRNG (splitmix64) ------------------------------------------------------------ */

static uint64_t rng_state;

static uint64_t rng_next(void) {
    uint64_t z = (rng_state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* uniform in [lo, hi] */
static int64_t rng_range(int64_t lo, int64_t hi) {
    return lo + (int64_t)(rng_next() % (uint64_t)(hi - lo + 1));
}

/* -- random problems ----------------------------------------------------------------------- */

#define MAX_B 5

typedef struct case_desc {
    fai_problem pb;
    int32_t seqlens_q[MAX_B], seqlens_kv[MAX_B];
    int32_t cu_q[MAX_B + 1], cu_kv[MAX_B + 1];
    int q_mode, kv_mode; /* q: 0 padded, 1 seqlens, 2 packed; kv: same, 3 paged */
    /* resolved per-sequence lengths, computed here independently of the library */
    int64_t lq[MAX_B], lk[MAX_B];
} case_desc;

static void random_case(case_desc *c) {
    memset(c, 0, sizeof *c);
    fai_problem *pb = &c->pb;
    fai_problem_init(pb);
    pb->batch = rng_range(0, 9) == 0 ? 0 : rng_range(1, 4);
    pb->heads_kv = rng_range(1, 3);
    pb->heads_q = pb->heads_kv * rng_range(1, 4);
    pb->head_dim = rng_range(1, 16);
    pb->head_dim_v = rng_range(0, 16);
    if (pb->head_dim_v == 0) pb->head_dim_v = FAI_HEAD_DIM_V_DEFAULT;
    pb->causal = (fai_causal)rng_range(0, 2);
    pb->window_left = rng_range(0, 1) ? -1 : rng_range(0, 12);
    pb->window_right = rng_range(0, 1) ? -1 : rng_range(0, 12);
    pb->workers = rng_range(0, 3) ? rng_range(1, 8) : rng_range(1, FAI_MAX_WORKERS);
    pb->split = (fai_split)rng_range(0, 2);
    pb->threads = 1;
    const int64_t tile_choice = rng_range(0, 5);
    pb->tile_q = tile_choice < 3 ? 0 : tile_choice < 5 ? rng_range(1, 20) : 4096;
    const int64_t tile_kv_choice = rng_range(0, 5);
    pb->tile_kv = tile_kv_choice < 3 ? 0 : tile_kv_choice < 5 ? rng_range(1, 20) : 4096;
    const int64_t B = pb->batch;

    /* query lengths; decode-like (1 query) problems are common */
    const int64_t max_q = rng_range(0, 2) ? rng_range(0, 40) : 1;
    c->q_mode = (int)rng_range(0, 2);
    if (c->q_mode == 0) {
        pb->seq_q = max_q;
        for (int64_t b = 0; b < B; b++)
            c->lq[b] = pb->seq_q;
    } else if (c->q_mode == 1) {
        pb->seq_q = max_q;
        for (int64_t b = 0; b < B; b++)
            c->lq[b] = c->seqlens_q[b] = (int32_t)rng_range(0, max_q);
        pb->seqlens_q = c->seqlens_q;
    } else {
        c->cu_q[0] = 0;
        for (int64_t b = 0; b < B; b++) {
            c->lq[b] = rng_range(0, max_q < 20 ? max_q : 20);
            c->cu_q[b + 1] = c->cu_q[b] + (int32_t)c->lq[b];
        }
        pb->seq_q = B > 0 ? c->cu_q[B] + rng_range(0, 3) : 0; /* trailing padding rows */
        pb->cu_seqlens_q = c->cu_q;
    }

    /* key lengths */
    const int64_t max_kv = rng_range(0, 50);
    c->kv_mode = (int)rng_range(0, 3);
    if (c->kv_mode == 0) {
        pb->seq_kv = max_kv;
        for (int64_t b = 0; b < B; b++)
            c->lk[b] = pb->seq_kv;
    } else if (c->kv_mode == 1) {
        pb->seq_kv = max_kv;
        for (int64_t b = 0; b < B; b++)
            c->lk[b] = c->seqlens_kv[b] = (int32_t)rng_range(0, max_kv);
        pb->seqlens_kv = c->seqlens_kv;
    } else if (c->kv_mode == 2) {
        c->cu_kv[0] = 0;
        for (int64_t b = 0; b < B; b++) {
            c->lk[b] = rng_range(0, max_kv);
            c->cu_kv[b + 1] = c->cu_kv[b] + (int32_t)c->lk[b];
        }
        pb->seq_kv = B > 0 ? c->cu_kv[B] + rng_range(0, 3) : 0;
        pb->cu_seqlens_kv = c->cu_kv;
    } else {
        pb->page_size = rng_range(1, 8);
        int64_t longest = 0;
        for (int64_t b = 0; b < B; b++) {
            c->lk[b] = c->seqlens_kv[b] = (int32_t)rng_range(0, max_kv);
            if (c->lk[b] > longest) longest = c->lk[b];
        }
        pb->pages_per_seq = (longest + pb->page_size - 1) / pb->page_size + rng_range(0, 2);
        pb->num_pages = rng_range(1, 20);
        pb->seq_kv = rng_range(0, 5); /* unused when paged */
        pb->seqlens_kv = c->seqlens_kv;
    }
}

static void describe_case(const case_desc *c) {
    const fai_problem *pb = &c->pb;
    fprintf(stderr,
            "    problem: B %" PRId64 " Hq %" PRId64 " Hkv %" PRId64 " Sq %" PRId64 " Skv %" PRId64
            " causal %d window (%" PRId64 ", %" PRId64 ") tile (%" PRId64 ", %" PRId64
            ") workers %" PRId64 " q_mode %d kv_mode %d page_size %" PRId64 "\n    lengths:",
            pb->batch, pb->heads_q, pb->heads_kv, pb->seq_q, pb->seq_kv, (int)pb->causal,
            pb->window_left, pb->window_right, pb->tile_q, pb->tile_kv, pb->workers, c->q_mode,
            c->kv_mode, pb->page_size);
    for (int64_t b = 0; b < pb->batch; b++)
        fprintf(stderr, " (%" PRId64 ", %" PRId64 ")", c->lq[b], c->lk[b]);
    fprintf(stderr, "\n");
}

/* -- brute force --------------------------------------------------------------------------- */

/* Query i of a sequence with lq queries and lk keys sees key j. */
static int visible(const fai_problem *pb, int64_t lq, int64_t lk, int64_t i, int64_t j) {
    if (i < 0 || i >= lq || j < 0 || j >= lk) return 0;
    const int64_t diagonal = pb->causal == FAI_CAUSAL_TOP_LEFT ? i : i + lk - lq;
    if (pb->causal != FAI_CAUSAL_NONE && j > diagonal) return 0;
    if (pb->window_right >= 0 && j > diagonal + pb->window_right) return 0;
    if (pb->window_left >= 0 && j < diagonal - pb->window_left) return 0;
    return 1;
}

static int64_t visible_pairs_of_sequence(const fai_problem *pb, int64_t lq, int64_t lk) {
    int64_t pairs = 0;
    for (int64_t i = 0; i < lq; i++)
        for (int64_t j = 0; j < lk; j++)
            pairs += visible(pb, lq, lk, i, j);
    return pairs;
}

/* The kv tiles with at least one visible pair from rows [q_begin, q_begin + q_len): how many,
 * and the first and last of them (-1 when none). */
static int64_t visible_tiles(const fai_problem *pb, int64_t lq, int64_t lk, int64_t q_begin,
                             int64_t q_len, int64_t tile_kv, int64_t *first, int64_t *last) {
    int64_t count = 0;
    *first = *last = -1;
    for (int64_t tile = 0; tile * tile_kv < lk; tile++) {
        int any = 0;
        for (int64_t i = q_begin; i < q_begin + q_len && !any; i++)
            for (int64_t j = tile * tile_kv; j < (tile + 1) * tile_kv && j < lk && !any; j++)
                any = visible(pb, lq, lk, i, j);
        if (!any) continue;
        count++;
        if (*first < 0) *first = tile;
        *last = tile;
    }
    return count;
}

/* -- the properties -------------------------------------------------------------------------- */

enum {
    PROP_TILES,     /* (a) each unit's kv tiles are exactly the visible ones */
    PROP_WEIGHTS,   /* (b) total weight, worker ranges and imbalance */
    PROP_PAIRS,     /* (c) visible_pairs */
    PROP_BOUND,     /* (e) max worker weight <= mean + max unit weight */
    PROP_TILE_SIZE, /* (f) overrides honoured, tile_rows = tile_q * group */
    PROP_COVERAGE,  /* (g) every query row in exactly one unit per kv head */
    PROP_COUNT
};

static const char *const prop_names[PROP_COUNT] = {"unit kv tiles", "weights and worker ranges",
                                                   "visible_pairs", "split bound",
                                                   "tile shape",    "row coverage"};

typedef struct prop_result {
    int ok[PROP_COUNT];
    char why[PROP_COUNT][200];
} prop_result;

static void prop_fail(prop_result *r, int prop, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void prop_fail(prop_result *r, int prop, const char *fmt, ...) {
    if (!r->ok[prop]) return; /* keep the first reason */
    r->ok[prop] = 0;
    va_list args;
    va_start(args, fmt);
    vsnprintf(r->why[prop], sizeof r->why[prop], fmt, args);
    va_end(args);
}

#define MAX_HKV 4
#define MAX_ROWS 64

/* Checks every property of `plan` against the case; 1 when all hold. */
static int verify_plan(const case_desc *c, const fai_plan *plan, prop_result *r) {
    const fai_problem *pb = &c->pb;
    for (int p = 0; p < PROP_COUNT; p++)
        r->ok[p] = 1, r->why[p][0] = '\0';

    fai_plan_info info;
    if (fai_plan_get_info(plan, &info) != FAI_OK) {
        prop_fail(r, PROP_WEIGHTS, "fai_plan_get_info failed: %s", fai_last_error());
        return 0;
    }
    const int64_t group = pb->heads_q / pb->heads_kv;
    if (pb->batch > MAX_B || pb->heads_kv > MAX_HKV) {
        prop_fail(r, PROP_COVERAGE, "case too large for the checker");
        return 0;
    }
    for (int64_t b = 0; b < pb->batch; b++)
        if (c->lq[b] > MAX_ROWS) {
            prop_fail(r, PROP_COVERAGE, "case too large for the checker");
            return 0;
        }

    /* (f) tile shape */
    if (pb->tile_q > 0 && info.tile_q != pb->tile_q)
        prop_fail(r, PROP_TILE_SIZE, "tile_q %" PRId64 ", asked %" PRId64, info.tile_q, pb->tile_q);
    if (pb->tile_kv > 0 && info.tile_kv != pb->tile_kv)
        prop_fail(r, PROP_TILE_SIZE, "tile_kv %" PRId64 ", asked %" PRId64, info.tile_kv,
                  pb->tile_kv);
    if (info.tile_q < 1 || info.tile_kv < 1)
        prop_fail(r, PROP_TILE_SIZE, "tile (%" PRId64 ", %" PRId64 ") not positive", info.tile_q,
                  info.tile_kv);
    if (info.tile_rows != info.tile_q * group)
        prop_fail(r, PROP_TILE_SIZE, "tile_rows %" PRId64 " != tile_q %" PRId64 " x %" PRId64,
                  info.tile_rows, info.tile_q, group);
    if (info.tile_q < 1 || info.tile_kv < 1) return 0;
    if (info.workers != (pb->workers ? pb->workers : info.workers) || info.workers < 1 ||
        info.workers > FAI_MAX_WORKERS)
        prop_fail(r, PROP_WEIGHTS, "workers %" PRId64 ", asked %" PRId64, info.workers,
                  pb->workers);
    if (info.threads < 1 || info.threads > info.workers)
        prop_fail(r, PROP_WEIGHTS, "threads %" PRId64 " with %" PRId64 " workers", info.threads,
                  info.workers);

    /* (a), (g): every unit */
    static int cover[MAX_B][MAX_HKV][MAX_ROWS];
    memset(cover, 0, sizeof cover);
    int64_t unit_weight_sum = 0, max_unit_weight = 0;
    for (int64_t u = 0; u < info.units; u++) {
        fai_unit_info unit;
        if (fai_plan_get_unit(plan, u, &unit) != FAI_OK) {
            prop_fail(r, PROP_TILES, "fai_plan_get_unit(%" PRId64 ") failed", u);
            continue;
        }
        if (unit.batch < 0 || unit.batch >= pb->batch || unit.head_kv < 0 ||
            unit.head_kv >= pb->heads_kv) {
            prop_fail(r, PROP_COVERAGE, "unit %" PRId64 ": batch %" PRId64 " head_kv %" PRId64, u,
                      unit.batch, unit.head_kv);
            continue;
        }
        const int64_t lq = c->lq[unit.batch], lk = c->lk[unit.batch];
        if (unit.q_begin < 0 || unit.q_len < 0 || unit.q_begin + unit.q_len > lq ||
            unit.q_len > info.tile_q) {
            prop_fail(r, PROP_COVERAGE,
                      "unit %" PRId64 ": rows [%" PRId64 ", +%" PRId64 ") of a sequence of %" PRId64
                      " (tile_q %" PRId64 ")",
                      u, unit.q_begin, unit.q_len, lq, info.tile_q);
            continue;
        }
        for (int64_t i = unit.q_begin; i < unit.q_begin + unit.q_len; i++)
            cover[unit.batch][unit.head_kv][i]++;

        int64_t first, last;
        const int64_t tiles =
            visible_tiles(pb, lq, lk, unit.q_begin, unit.q_len, info.tile_kv, &first, &last);
        if (unit.kv_tiles != tiles)
            prop_fail(r, PROP_TILES,
                      "unit %" PRId64 " (b %" PRId64 ", rows [%" PRId64 ", +%" PRId64
                      ")): kv_tiles %" PRId64 ", brute force %" PRId64,
                      u, unit.batch, unit.q_begin, unit.q_len, unit.kv_tiles, tiles);
        else if (tiles > 0 && (unit.kv_tile_begin != first || last - first + 1 != tiles))
            prop_fail(r, PROP_TILES,
                      "unit %" PRId64 ": tiles [%" PRId64 ", +%" PRId64 "), visible [%" PRId64
                      ", %" PRId64 "]",
                      u, unit.kv_tile_begin, unit.kv_tiles, first, last);
        unit_weight_sum += unit.kv_tiles;
        if (unit.kv_tiles > max_unit_weight) max_unit_weight = unit.kv_tiles;
    }
    for (int64_t b = 0; b < pb->batch; b++)
        for (int64_t h = 0; h < pb->heads_kv; h++)
            for (int64_t i = 0; i < c->lq[b]; i++)
                if (cover[b][h][i] != 1)
                    prop_fail(r, PROP_COVERAGE,
                              "row %" PRId64 " of batch %" PRId64 " kv head %" PRId64
                              " is in %d units",
                              i, b, h, cover[b][h][i]);

    /* (c) */
    int64_t pairs = 0;
    for (int64_t b = 0; b < pb->batch; b++)
        pairs += visible_pairs_of_sequence(pb, c->lq[b], c->lk[b]) * pb->heads_q;
    if (info.visible_pairs != pairs)
        prop_fail(r, PROP_PAIRS, "visible_pairs %" PRId64 ", brute force %" PRId64,
                  info.visible_pairs, pairs);

    /* (b), (e) */
    if (info.total_weight != unit_weight_sum)
        prop_fail(r, PROP_WEIGHTS, "total_weight %" PRId64 ", units sum to %" PRId64,
                  info.total_weight, unit_weight_sum);
    /* The units' tiles in unit order form a line; worker ranges cut it in order. A unit cut by
     * a worker boundary (split-KV, AUTO only) is the last unit of one range and the first of
     * the next; otherwise ranges of units follow each other exactly. */
    int64_t next_unit = 0, next_line = 0, worker_weight_sum = 0, max_worker_weight = 0;
    for (int64_t w = 0; w < info.workers; w++) {
        fai_worker_range range;
        if (fai_plan_get_worker(plan, w, &range) != FAI_OK) {
            prop_fail(r, PROP_WEIGHTS, "fai_plan_get_worker(%" PRId64 ") failed", w);
            return 0;
        }
        const int shares_unit = range.unit_begin == next_unit - 1 &&
                                range.unit_end > range.unit_begin && pb->split == FAI_SPLIT_AUTO;
        if ((range.unit_begin != next_unit && !shares_unit) || range.unit_end < range.unit_begin)
            prop_fail(r, PROP_WEIGHTS,
                      "worker %" PRId64 ": [%" PRId64 ", %" PRId64 ") does not start at %" PRId64,
                      w, range.unit_begin, range.unit_end, next_unit);
        if (range.line_begin != next_line || range.line_end < range.line_begin ||
            range.weight != range.line_end - range.line_begin)
            prop_fail(r, PROP_WEIGHTS,
                      "worker %" PRId64 ": line [%" PRId64 ", %" PRId64 ") weight %" PRId64
                      " after %" PRId64,
                      w, range.line_begin, range.line_end, range.weight, next_line);
        /* the weight is the worker's share of its units' tiles on the line */
        int64_t weight = 0, line = 0;
        for (int64_t u = 0; u < range.unit_end && u < info.units; u++) {
            fai_unit_info unit;
            if (fai_plan_get_unit(plan, u, &unit) != FAI_OK) continue;
            if (u >= range.unit_begin) {
                const int64_t lo = line > range.line_begin ? line : range.line_begin;
                const int64_t hi =
                    line + unit.kv_tiles < range.line_end ? line + unit.kv_tiles : range.line_end;
                if (hi > lo) weight += hi - lo;
            }
            line += unit.kv_tiles;
        }
        if (range.weight != weight)
            prop_fail(r, PROP_WEIGHTS,
                      "worker %" PRId64 ": weight %" PRId64 ", its units sum to %" PRId64, w,
                      range.weight, weight);
        if (range.unit_end > range.unit_begin) next_unit = range.unit_end;
        next_line = range.line_end;
        worker_weight_sum += range.weight;
        if (range.weight > max_worker_weight) max_worker_weight = range.weight;
    }
    if (next_line != info.total_weight)
        prop_fail(r, PROP_WEIGHTS, "worker lines end at %" PRId64 " of %" PRId64, next_line,
                  info.total_weight);
    if (next_unit != info.units)
        prop_fail(r, PROP_WEIGHTS, "worker ranges end at %" PRId64 " of %" PRId64 " units",
                  next_unit, info.units);
    if (worker_weight_sum != info.total_weight)
        prop_fail(r, PROP_WEIGHTS, "worker weights sum to %" PRId64 ", total_weight %" PRId64,
                  worker_weight_sum, info.total_weight);
    const double expected_imbalance =
        info.total_weight > 0
            ? (double)max_worker_weight / ((double)info.total_weight / (double)info.workers)
            : 1.0;
    if (!(fabs(info.imbalance - expected_imbalance) <= 1e-9 * expected_imbalance))
        prop_fail(r, PROP_WEIGHTS, "imbalance %.17g, max/mean %.17g", info.imbalance,
                  expected_imbalance);
    /* max <= total / workers + max unit, in integers (the seed's greedy rule promises nothing;
     * the line split promises one tile over the mean, plus 3 % of it where a cut snapped to a
     * unit's edge) */
    const int over_bound =
        pb->split == FAI_SPLIT_AUTO
            ? 100 * max_worker_weight * info.workers > 103 * info.total_weight + 100 * info.workers
            : max_worker_weight * info.workers > info.total_weight + max_unit_weight * info.workers;
    if (pb->split != FAI_SPLIT_GREEDY && over_bound)
        prop_fail(r, PROP_BOUND,
                  "max worker weight %" PRId64 " > mean %" PRId64 "/%" PRId64
                  " + max unit weight %" PRId64,
                  max_worker_weight, info.total_weight, info.workers, max_unit_weight);

    for (int p = 0; p < PROP_COUNT; p++)
        if (!r->ok[p]) return 0;
    return 1;
}

/* Failures of one property across many problems: the first few are printed in full. */
typedef struct prop_tally {
    int failures[PROP_COUNT];
    int printed;
    int create_failures;
} prop_tally;

static void tally(prop_tally *t, const case_desc *c, const prop_result *r, int64_t index) {
    int printed_case = 0;
    for (int p = 0; p < PROP_COUNT; p++) {
        if (r->ok[p]) continue;
        t->failures[p]++;
        if (t->printed < 8) {
            fprintf(stderr, "  case %" PRId64 ": %s: %s\n", index, prop_names[p], r->why[p]);
            if (!printed_case) describe_case(c);
            printed_case = 1;
            t->printed++;
        }
    }
}

/* -- tests ------------------------------------------------------------------------------------ */

#define RANDOM_CASES 10000

TEST(plan_random_properties) {
    prop_tally t;
    memset(&t, 0, sizeof t);
    rng_state = UINT64_C(0x5EED0FA1);
    int kinds[3][4] = {{0}};
    int64_t q_shorter = 0, q_longer = 0;
    for (int64_t n = 0; n < RANDOM_CASES; n++) {
        case_desc c;
        random_case(&c);
        kinds[c.q_mode][c.kv_mode]++;
        for (int64_t b = 0; b < c.pb.batch; b++) {
            q_shorter += c.lq[b] < c.lk[b];
            q_longer += c.lq[b] > c.lk[b];
        }
        fai_plan *plan = NULL;
        if (fai_plan_create(&c.pb, &plan) != FAI_OK) {
            if (t.create_failures++ < 4) {
                fprintf(stderr, "  case %" PRId64 ": fai_plan_create: %s\n", n, fai_last_error());
                describe_case(&c);
            }
            continue;
        }
        prop_result r;
        verify_plan(&c, plan, &r);
        tally(&t, &c, &r, n);
        fai_plan_free(plan);
    }
    CHECK(t.create_failures == 0);
    CHECK(t.failures[PROP_TILES] == 0);
    CHECK(t.failures[PROP_WEIGHTS] == 0);
    CHECK(t.failures[PROP_PAIRS] == 0);
    CHECK(t.failures[PROP_BOUND] == 0);
    CHECK(t.failures[PROP_TILE_SIZE] == 0);
    CHECK(t.failures[PROP_COVERAGE] == 0);
    /* the generator reaches every combination of length modes, and both Sq < Skv and Sq > Skv */
    for (int q = 0; q < 3; q++)
        for (int kv = 0; kv < 4; kv++)
            CHECK(kinds[q][kv] > 0);
    CHECK(q_shorter > 0 && q_longer > 0);
}

/* Hand-picked shapes the random cases may visit rarely. */
static void fixed_case(case_desc *c, int64_t B, int64_t lq, int64_t lk, fai_causal causal,
                       int64_t wl, int64_t wr, int64_t tile_q, int64_t tile_kv) {
    memset(c, 0, sizeof *c);
    fai_problem_init(&c->pb);
    c->pb.batch = B;
    c->pb.heads_q = 4;
    c->pb.heads_kv = 2;
    c->pb.seq_q = lq;
    c->pb.seq_kv = lk;
    c->pb.head_dim = 8;
    c->pb.causal = causal;
    c->pb.window_left = wl;
    c->pb.window_right = wr;
    c->pb.tile_q = tile_q;
    c->pb.tile_kv = tile_kv;
    c->pb.workers = 4;
    c->pb.threads = 1;
    for (int64_t b = 0; b < B; b++)
        c->lq[b] = lq, c->lk[b] = lk;
}

TEST(plan_fixed_shapes) {
    static const struct {
        int64_t lq, lk;
        fai_causal causal;
        int64_t wl, wr, tile_q, tile_kv;
    } shapes[] = {
        {1, 50, FAI_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 0},  /* decode: sees everything */
        {1, 50, FAI_CAUSAL_TOP_LEFT, -1, -1, 0, 8},      /* top-left decode: key 0 only */
        {50, 10, FAI_CAUSAL_BOTTOM_RIGHT, -1, -1, 7, 3}, /* first 40 rows see nothing */
        {50, 10, FAI_CAUSAL_TOP_LEFT, -1, -1, 7, 3},
        {10, 50, FAI_CAUSAL_TOP_LEFT, -1, -1, 4, 5},
        {30, 30, FAI_CAUSAL_NONE, 0, 0, 5, 4},         /* the diagonal only */
        {30, 30, FAI_CAUSAL_NONE, 3, 2, 1, 1},         /* single rows and keys */
        {20, 45, FAI_CAUSAL_NONE, -1, 0, 6, 9},        /* window_right 0 is causal */
        {20, 45, FAI_CAUSAL_BOTTOM_RIGHT, 4, 7, 6, 9}, /* causal overrides window_right */
        {45, 20, FAI_CAUSAL_NONE, 2, -1, 16, 16},
        {40, 40, FAI_CAUSAL_BOTTOM_RIGHT, 0, -1, 4096, 4096},
        {0, 40, FAI_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 0}, /* empty queries */
        {12, 0, FAI_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 0}, /* empty keys */
        {33, 33, FAI_CAUSAL_NONE, 40, 40, 0, 0},        /* window wider than the sequence */
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        case_desc c;
        fixed_case(&c, 2, shapes[s].lq, shapes[s].lk, shapes[s].causal, shapes[s].wl, shapes[s].wr,
                   shapes[s].tile_q, shapes[s].tile_kv);
        fai_plan *plan = NULL;
        if (fai_plan_create(&c.pb, &plan) != FAI_OK) {
            fprintf(stderr, "  shape %zu: %s\n", s, fai_last_error());
            CHECK(0);
            continue;
        }
        prop_result r;
        const int ok = verify_plan(&c, plan, &r);
        if (!ok) {
            for (int p = 0; p < PROP_COUNT; p++)
                if (!r.ok[p]) fprintf(stderr, "  shape %zu: %s: %s\n", s, prop_names[p], r.why[p]);
            describe_case(&c);
        }
        CHECK(ok);
        fai_plan_free(plan);
    }

    /* exact weights of two shapes worked by hand */
    case_desc c;
    fai_plan_info info;
    fai_plan *plan = NULL;
    /* decode against 50 keys, tiles of 8: 7 tiles per unit, 1 unit per (batch, kv head) */
    fixed_case(&c, 2, 1, 50, FAI_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 8);
    REQUIRE(fai_plan_create(&c.pb, &plan) == FAI_OK);
    REQUIRE(fai_plan_get_info(plan, &info) == FAI_OK);
    CHECK(info.units == 4);
    CHECK(info.total_weight == 4 * 7);
    CHECK(info.visible_pairs == 2 * 4 * 50);
    fai_plan_free(plan);
    /* causal 8 x 8 in 4 x 4 tiles: tiles (0,0), (1,0), (1,1) per (batch, kv head) */
    fixed_case(&c, 1, 8, 8, FAI_CAUSAL_BOTTOM_RIGHT, -1, -1, 4, 4);
    REQUIRE(fai_plan_create(&c.pb, &plan) == FAI_OK);
    REQUIRE(fai_plan_get_info(plan, &info) == FAI_OK);
    CHECK(info.units == 2 * 2);
    CHECK(info.total_weight == 2 * 3);
    CHECK(info.visible_pairs == 4 * 36);
    fai_plan_free(plan);
}

TEST(plan_every_worker_count) {
    /* a few problems, each split into 1..FAI_MAX_WORKERS workers, including far more workers
     * than units */
    rng_state = UINT64_C(0xC0FFEE);
    prop_tally t;
    memset(&t, 0, sizeof t);
    for (int n = 0; n < 4; n++) {
        case_desc c;
        if (n == 0) {
            fixed_case(&c, 1, 1, 40, FAI_CAUSAL_NONE, -1, -1, 0, 8); /* 2 units */
        } else if (n == 1) {
            fixed_case(&c, 3, 37, 29, FAI_CAUSAL_BOTTOM_RIGHT, 5, -1, 3, 2);
        } else {
            do
                random_case(&c);
            while (c.pb.batch == 0);
        }
        for (int64_t workers = 1; workers <= FAI_MAX_WORKERS; workers++) {
            c.pb.workers = workers;
            fai_plan *plan = NULL;
            if (fai_plan_create(&c.pb, &plan) != FAI_OK) {
                if (t.create_failures++ < 4)
                    fprintf(stderr, "  workers %" PRId64 ": %s\n", workers, fai_last_error());
                continue;
            }
            fai_plan_info info;
            if (fai_plan_get_info(plan, &info) != FAI_OK || info.workers != workers)
                t.create_failures++;
            prop_result r;
            verify_plan(&c, plan, &r);
            tally(&t, &c, &r, workers);
            fai_plan_free(plan);
        }
    }
    CHECK(t.create_failures == 0);
    for (int p = 0; p < PROP_COUNT; p++)
        CHECK(t.failures[p] == 0);
}

TEST(plan_tile_overrides) {
    case_desc c;
    const int64_t tiles[] = {1, 2, 3, 7, 16, 64, 100, 4096};
    for (size_t a = 0; a < sizeof tiles / sizeof tiles[0]; a++) {
        for (size_t b = 0; b < sizeof tiles / sizeof tiles[0]; b++) {
            for (int64_t group = 1; group <= 8; group *= 2) {
                fixed_case(&c, 1, 20, 30, FAI_CAUSAL_BOTTOM_RIGHT, -1, -1, tiles[a], tiles[b]);
                c.pb.heads_kv = 2;
                c.pb.heads_q = 2 * group;
                fai_plan *plan = NULL;
                REQUIRE(fai_plan_create(&c.pb, &plan) == FAI_OK);
                fai_plan_info info;
                CHECK(fai_plan_get_info(plan, &info) == FAI_OK);
                CHECK(info.tile_q == tiles[a]);
                CHECK(info.tile_kv == tiles[b]);
                CHECK(info.tile_rows == tiles[a] * group);
                prop_result r;
                CHECK(verify_plan(&c, plan, &r));
                fai_plan_free(plan);
            }
        }
    }
    /* the planner's own choice also stacks the group */
    for (int64_t group = 1; group <= 16; group *= 2) {
        fixed_case(&c, 1, 100, 100, FAI_CAUSAL_NONE, -1, -1, 0, 0);
        c.pb.heads_kv = 1;
        c.pb.heads_q = group;
        fai_plan *plan = NULL;
        REQUIRE(fai_plan_create(&c.pb, &plan) == FAI_OK);
        fai_plan_info info;
        CHECK(fai_plan_get_info(plan, &info) == FAI_OK);
        CHECK(info.tile_q >= 1 && info.tile_kv >= 1);
        CHECK(info.tile_rows == info.tile_q * group);
        fai_plan_free(plan);
    }
}

/* The cache sizes fai_cpu_cache_bytes reports are the ones the planner sizes tiles by (the plan
 * info's capacities), within the planner's sane range; an L3 is informational; other levels 0. */
TEST(cpu_cache_bytes_are_the_planners) {
    case_desc c;
    fixed_case(&c, 1, 8, 8, FAI_CAUSAL_NONE, -1, -1, 0, 0);
    fai_plan *plan = NULL;
    REQUIRE(fai_plan_create(&c.pb, &plan) == FAI_OK);
    fai_plan_info info;
    CHECK(fai_plan_get_info(plan, &info) == FAI_OK);
    fai_plan_free(plan);
    CHECK(fai_cpu_cache_bytes(1) == info.l1d_capacity);
    CHECK(fai_cpu_cache_bytes(2) == info.l2_capacity);
    CHECK(fai_cpu_cache_bytes(1) >= 4096 && fai_cpu_cache_bytes(2) >= 65536);
    CHECK(fai_cpu_cache_bytes(3) >= 0);
    CHECK(fai_cpu_cache_bytes(0) == 0 && fai_cpu_cache_bytes(4) == 0 &&
          fai_cpu_cache_bytes(-1) == 0);
}

/* An all-bf16 or f32 prefill problem like P1 (128 rows a tile, D 128), planned by the rule
 * (tuning cache ignored) or with a tile given. */
static fai_plan_info prefill_tile_info(fai_dtype dtype, int64_t tile_q, int64_t tile_kv) {
    fai_problem pb;
    fai_problem_init(&pb);
    pb.batch = 1, pb.heads_q = 32, pb.heads_kv = 8, pb.seq_q = pb.seq_kv = 2048;
    pb.head_dim = 128, pb.causal = FAI_CAUSAL_BOTTOM_RIGHT;
    pb.q_dtype = pb.o_dtype = dtype == FAI_DTYPE_BF16 ? dtype : FAI_DTYPE_F32;
    pb.k_dtype = pb.v_dtype = dtype;
    pb.tile_q = tile_q, pb.tile_kv = tile_kv;
    pb.ignore_tuning = 1;
    fai_plan_info info;
    memset(&info, 0, sizeof info);
    fai_plan *plan = NULL;
    if (fai_plan_create(&pb, &plan) == FAI_OK) fai_plan_get_info(plan, &info);
    fai_plan_free(plan);
    return info;
}

/* The tile rule: a 64-key prefill tile is taken whenever L2 holds its slice, whatever L1d holds
 * (the hot-set budget alone gave 32-key tiles on a 32 KiB L1d, measured slower); where QK and PV
 * multiply bf16 pairs (p_parts set, off the matrix engine), the hot set counts half the bytes of
 * the f32 one for the same tile. */
TEST(tile_rule_takes_64_keys_and_counts_bf16_pairs_at_half) {
    const fai_plan_info given = prefill_tile_info(FAI_DTYPE_F16, 32, 64);
    REQUIRE(given.tile_kv == 64 && given.l2_bytes > 0);
    const fai_plan_info chosen = prefill_tile_info(FAI_DTYPE_F16, 0, 0);
    REQUIRE(chosen.tile_kv > 0);
    if (strncmp(chosen.isa, "amx", 3) != 0 && given.l2_bytes <= given.l2_capacity / 2)
        CHECK(chosen.tile_kv >= 64);
    const fai_plan_info f32_tile = prefill_tile_info(FAI_DTYPE_F32, 32, 64);
    const fai_plan_info bf16_tile = prefill_tile_info(FAI_DTYPE_BF16, 32, 64);
    REQUIRE(f32_tile.l1d_bytes > 0 && bf16_tile.l1d_bytes > 0);
    const int matrix_engine = strncmp(bf16_tile.isa, "amx", 3) == 0; /* its own budget */
    if (bf16_tile.p_parts != 0 && !matrix_engine)
        CHECK(2 * bf16_tile.l1d_bytes == f32_tile.l1d_bytes);
    else if (!matrix_engine)
        CHECK(bf16_tile.l1d_bytes == f32_tile.l1d_bytes);
}

TEST(plan_inspection_errors) {
    case_desc c;
    fixed_case(&c, 1, 8, 8, FAI_CAUSAL_NONE, -1, -1, 4, 4);
    fai_plan *plan = NULL;
    REQUIRE(fai_plan_create(&c.pb, &plan) == FAI_OK);
    fai_plan_info info;
    fai_worker_range range;
    fai_unit_info unit;
    REQUIRE(fai_plan_get_info(plan, &info) == FAI_OK);
    CHECK(fai_plan_get_info(NULL, &info) == FAI_ERR_INVALID_ARG);
    CHECK(fai_plan_get_info(plan, NULL) == FAI_ERR_INVALID_ARG);
    CHECK(fai_plan_get_worker(plan, -1, &range) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "worker") && strstr(fai_last_error(), "-1"));
    CHECK(fai_plan_get_worker(plan, info.workers, &range) == FAI_ERR_INVALID_ARG);
    CHECK(fai_plan_get_worker(plan, 0, NULL) == FAI_ERR_INVALID_ARG);
    CHECK(fai_plan_get_worker(NULL, 0, &range) == FAI_ERR_INVALID_ARG);
    CHECK(fai_plan_get_unit(plan, -1, &unit) == FAI_ERR_INVALID_ARG);
    CHECK(fai_plan_get_unit(plan, info.units, &unit) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "unit") != NULL);
    CHECK(fai_plan_get_unit(plan, 0, NULL) == FAI_ERR_INVALID_ARG);
    CHECK(fai_plan_get_unit(NULL, 0, &unit) == FAI_ERR_INVALID_ARG);
    CHECK(fai_plan_get_unit(plan, info.units - 1, &unit) == FAI_OK);
    CHECK(fai_last_error()[0] == '\0');
    CHECK(fai_plan_workspace_size(NULL) == 0);
    CHECK(fai_plan_workspace_size(plan) == info.workspace_bytes);
    fai_plan_free(plan);
    fai_plan_free(NULL);
}
