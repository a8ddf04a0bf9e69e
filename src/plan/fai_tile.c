/* The tile shape (the seed's qSeqBase x kvSeqBase), chosen once per plan and used by block
 * counting and by the kernel alike. Candidates are checked against this core's cache budgets,
 * as the seed checks UB / L1 / L0 budgets before a tile shape may be used:
 *   L2:  the thread's workspace slice (Q^T, K, V, S^T and O tiles) within half of L2, leaving
 *        the other half to the K/V rows streaming through;
 *   L1d: what the inner loops keep hot: a block of Q^T (d x 2 vectors) for QK, and a column block
 *        of the V tile (tile_kv x 4 vectors) for PV, within three quarters of L1d, leaving the
 *        rest to the S^T rows streaming through (a hot set of all of L1d measured 10-30 % slower
 *        on an Intel Xeon with 48 KiB L1d). Kv tiles of 64 keys pass whatever L1d holds: each
 *        tile costs O's loads and stores and a step of the online softmax, and on an AMD Zen 4
 *        (32 KiB L1d, where the budget allows 32 keys) f32 P1 ran 1.07x faster with 64 (1.09x
 *        with 128) and P2 1.06x (two threads, fai.attention with tile=, 11 interleaved rounds).
 * The matrix engine takes 64-row tiles of 128 keys (fai_plan.c checks its own budget): the
 * vector tables' choice measured 2-6 % slower there. Where one 32-row block's operands for a
 * kv tile of 64 keys fit L1d (fai__mx_block_bytes: head dim 64 with 16-bit Q), it takes
 * 32 x 64 tiles instead: the tile unit then reads its operands from L1d, and all-bf16 P2 ran
 * 1.04-1.07x faster and O1 1.17x on an Intel Xeon (with Q f32, whose parts do not fit, 64 x 128
 * stays faster: P2 0.92x at 32 x 64).
 * Decode-like tiles (a few rows: K and V read directly, see DIRECT_KV_MAX_ROWS) need no packed
 * tiles; their kv tile is sized so that the tile being computed and the one being prefetched fit
 * in a quarter of L2. */
#include "arch/fai_cpuid.h"
#include "fai_internal.h"

/* Rows of a Q tile (query positions x q heads of a group) for prefill and chunked prefill, and
 * the most q heads of one group a unit takes (larger groups are sliced). Each unit packs its kv
 * tiles again, so more rows spread that cost (and the K/V reads from L3 or memory) over more
 * scores: 128 rows measured 1.1-1.3x faster than 64 on an Intel Xeon (f32 P1, P2). */
#define TARGET_TILE_ROWS 128
#define TARGET_TILE_ROWS_MX 64
#define SMALL_TILE_ROWS_MX 32
#define SMALL_TILE_KV_MX 64
#define MAX_GROUP_SLICE 64
/* The kv tile a prefill tile of the vector tables takes if L2 holds its slice (see the top). */
#define MIN_PREFILL_TILE_KV 64
/* Decode tiles are also the grain of the split: with at least this many tiles per worker, cutting
 * the line into equal shares leaves each within 5 % of the mean. */
#define MIN_TILES_PER_WORKER 20

/* Bytes of one thread's packed tiles for a tile shape, as the plan lays them out. */
static int64_t slice_bytes(const fai_plan *plan, int64_t rows, int64_t tile_kv) {
    return fai__vector_slot_bytes(plan, rows, tile_kv);
}

/* The QK kernels hold Q^T (d x 2 vectors of rows) and PV a column block of V (tile_kv x 4
 * vectors), in f32; where both multiply on bf16 dot products, as bf16 pairs of half the bytes:
 * all-bf16 P1 ran 1.10x faster with the 128-key tiles that then fit an AMD Zen 4's 32 KiB L1d
 * than with the 32-key tiles the f32 count allowed (fai.attention with tile=, 9 interleaved
 * rounds, 1 and 2 threads). */
static int64_t hot_bytes(const fai_plan *plan, int64_t tile_kv) {
    const int64_t width = plan->cntx->simd_width;
    const int64_t element = fai__bf16_pv_serves(plan) && !fai__mx_serves(plan) ? 2 : 4;
    return (plan->pb.head_dim * 2 * width + tile_kv * 4 * width) * element;
}

/* Decode: the K and V rows of two kv tiles (computed and prefetched) in bytes. */
static int64_t stream_bytes(const fai_plan *plan, int64_t tile_kv) {
    const fai_problem *pb = &plan->pb;
    return 2 * tile_kv *
           (pb->head_dim * (int64_t)fai_dtype_size(pb->k_dtype) +
            plan->head_dim_v * (int64_t)fai_dtype_size(pb->v_dtype));
}

/* What the chooser aims at on a path: the rows of a prefill Q tile, the largest prefill kv tile
 * it tries, and the L1d bytes the vector tables' inner loops may keep hot (a quarter of L1d left
 * to the S^T rows streaming through). The matrix engine, whose tiles stream from L1d and L2
 * themselves, takes 64-row tiles of 128 keys, or 32 x 64 where a row block's operands then fit
 * L1d (see the top of this file), whatever the vector kernels' hot set would be. */
typedef struct tile_policy {
    int64_t target_rows;
    int64_t max_prefill_kv;
    int64_t hot_budget;
} tile_policy;

static tile_policy policy_of(const fai_plan *plan) {
    const int64_t l1d = fai__cache_sizes()->l1d;
    tile_policy policy = {TARGET_TILE_ROWS, 128, l1d / 4 * 3};
    if (fai__mx_serves(plan)) {
        const int small = fai__mx_block_bytes(plan, SMALL_TILE_KV_MX) <= l1d;
        policy.target_rows = small ? SMALL_TILE_ROWS_MX : TARGET_TILE_ROWS_MX;
        policy.max_prefill_kv = small ? SMALL_TILE_KV_MX : 128;
    }
    return policy;
}

/* Whether a tile shape fits this core's L2 budget (see the top of this file): what `fai tune`
 * measures, and what a tuned tile must pass (on the matrix engine its own slot's,
 * fai__mx_slot_fits_l2). */
static int fits_l2(const fai_plan *plan, int decode, int64_t rows, int64_t tile_kv) {
    const fai_cache_sizes *caches = fai__cache_sizes();
    if (decode) return stream_bytes(plan, tile_kv) <= caches->l2 / 4;
    return slice_bytes(plan, rows, tile_kv) <= caches->l2 / 2;
}

/* Whether a tile shape fits this core's cache budgets (see the top of this file). */
static int fits_caches(const fai_plan *plan, int decode, int64_t rows, int64_t tile_kv) {
    if (!fits_l2(plan, decode, rows, tile_kv)) return 0;
    if (decode) return 1;
    /* the matrix engine's L1d budget is its row block's (policy_of, fai__mx_block_bytes), not
     * the vector kernels' hot set */
    if (fai__mx_serves(plan) || tile_kv <= MIN_PREFILL_TILE_KV) return 1;
    return hot_bytes(plan, tile_kv) <= policy_of(plan).hot_budget;
}

void fai__choose_tile(fai_plan *plan) {
    const fai_problem *pb = &plan->pb;
    int64_t max_q = 0, max_kv = 0;
    for (int64_t b = 0; b < pb->batch; b++) {
        if (plan->seqs[b].q_len > max_q) max_q = plan->seqs[b].q_len;
        if (plan->seqs[b].kv_len > max_kv) max_kv = plan->seqs[b].kv_len;
    }
    plan->group_slice = plan->group <= MAX_GROUP_SLICE ? plan->group : MAX_GROUP_SLICE;

    /* a measured choice for this CPU and shape class, unless the problem gives its own */
    plan->max_q_len = max_q, plan->max_kv_len = max_kv;
    fai__tuning_class(plan, max_q, max_kv);
    int64_t tuned_q = 0, tuned_kv = 0;
    const int user = pb->tile_q != 0 || pb->tile_kv != 0;
    int tuned = !user && !pb->ignore_tuning && fai__tuning_lookup(plan, &tuned_q, &tuned_kv);
    if (tuned) { /* clamped to the lengths, and taken only within the L2 budget `fai tune` keeps
                    to: the file is anyone's to edit */
        tuned_q = tuned_q < max_q ? tuned_q : max_q > 0 ? max_q : 1;
        tuned_kv = tuned_kv < max_kv ? tuned_kv : max_kv > 0 ? max_kv : 1;
        const int64_t tuned_rows = tuned_q * plan->group_slice;
        const int tuned_decode = fai__is_decode_tile(tuned_rows);
        tuned = fai__mx_serves(plan) && !tuned_decode
                    ? fai__mx_slot_fits_l2(plan, tuned_rows, tuned_kv)
                    : fits_l2(plan, tuned_decode, tuned_rows, tuned_kv);
    }
    plan->tile_source = user ? "user" : tuned ? "tuned" : "heuristic";

    int64_t tile_q = tuned ? tuned_q : pb->tile_q;
    if (tile_q == 0) {
        tile_q = policy_of(plan).target_rows / plan->group_slice;
        if (tile_q < 1) tile_q = 1;
        if (tile_q > max_q) tile_q = max_q > 0 ? max_q : 1;
    }
    const int64_t rows = tile_q * plan->group_slice;
    const int decode = fai__is_decode_tile(rows);
    /* decode: the keys all units stream, to size the tiles for the split */
    double keys = 0.0;
    for (int64_t b = 0; b < pb->batch; b++)
        keys += (double)plan->seqs[b].kv_len;
    keys *= (double)pb->heads_kv * (double)fai__ceil_div(plan->group, plan->group_slice);

    static const int64_t candidates[] = {256, 128, 64, 32, 16};
    const int count = (int)(sizeof candidates / sizeof candidates[0]);
    int64_t tile_kv = tuned ? tuned_kv : pb->tile_kv;
    if (tile_kv == 0) {
        tile_kv = candidates[count - 1];
        const int64_t max_prefill_kv = policy_of(plan).max_prefill_kv;
        for (int c = 0; c < count; c++) {
            if (!decode && candidates[c] > max_prefill_kv) continue;
            /* decode tiles are also the grain of the split (the smallest always qualifies) */
            const int fine_enough =
                !decode || c == count - 1 ||
                keys / (double)candidates[c] >= (double)(MIN_TILES_PER_WORKER * plan->workers);
            if (fine_enough && fits_caches(plan, decode, rows, candidates[c])) {
                tile_kv = candidates[c];
                break;
            }
        }
        if (tile_kv > max_kv) tile_kv = max_kv > 0 ? max_kv : 1;
    }
    plan->tile_q = tile_q;
    plan->tile_kv = tile_kv;
    plan->tile_rows = rows;
    plan->l1d_bytes = decode ? 0 : hot_bytes(plan, tile_kv);
    plan->l2_bytes = decode ? stream_bytes(plan, tile_kv) : slice_bytes(plan, rows, tile_kv);
    plan->tile_fits = fits_caches(plan, decode, rows, tile_kv);
}
