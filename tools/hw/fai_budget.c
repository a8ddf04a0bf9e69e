/* The seed's resource model (see fai_budget.h and docs/tuning.md, "Resource model").
 *
 * The seed gives four static items and names the users of each buffer; the byte counts of the
 * users not given by a formula are fai's reading of the kernel, fixed by the seed's reference
 * point (128 x 128 x 128, f16, KERNEL_TASK_NUM 3: about 211 KiB of UB per AIV, 288 KiB of L1,
 * and L0A, L0B and L0C full on the Ascend 950). */
#include "fai_budget.h"

#include <stdio.h>

#define KIB INT64_C(1024)
#define MIB (KIB * KIB)
#define F32_BYTES 4
#define F16_BYTES 2

static int64_t ceil_div(int64_t value, int64_t divisor) { return (value + divisor - 1) / divisor; }
static int64_t align_up(int64_t value, int64_t multiple) {
    return ceil_div(value, multiple) * multiple;
}
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

ft_budget_types ft_budget_types_for(int64_t input_bytes) {
    const ft_budget_types types = {
        .input = input_bytes,
        .s = F32_BYTES,
        .o_tmp = F32_BYTES,
        .p = input_bytes,
        .mask = F16_BYTES,
    };
    return types;
}

/* The seed's formulas. Rows per vector core are CeilDiv(qSeqBase, CV_RATIO): the seed's
 * qSeqBase / CV_RATIO for the even tiles it uses, and the busier core's share otherwise. */
static void compute_static_items(const ft_budget_tile *tile, const ft_budget_types *types,
                                 int64_t rows_per_aiv, ft_budget *budget) {
    budget->mm1_result_size = rows_per_aiv * tile->kv_seq_base * types->s;
    budget->mm2_result_size = rows_per_aiv * align_up(tile->embed_base, 64) * types->o_tmp;
    budget->share_ub_size = ceil_div(tile->q_seq_base, 2) * types->s;
    budget->mm2_left_size = tile->q_seq_base * tile->kv_seq_base * types->p;
}

/* UB of one vector core: the double-buffered QK and PV results the seed names (bmm1TensorList,
 * bmm2TensorList), the softmax state of every task in flight, the P tile it writes (twice, so
 * the copy of one to L1 overlaps the softmax of the next), one mask tile, the shared scratch,
 * and the O rows it rescales, which live across the whole kv loop. */
static void compute_ub(const ft_budget_tile *tile, const ft_budget_types *types, int64_t task_num,
                       int64_t rows_per_aiv, ft_budget *budget) {
    const int64_t score_tile = rows_per_aiv * tile->kv_seq_base; /* elements of S or P */
    budget->ub_s_buffers = 2 * budget->mm1_result_size;
    budget->ub_otmp_buffers = 2 * budget->mm2_result_size;
    budget->ub_softmax_state = 3 * task_num * rows_per_aiv * types->s;
    budget->ub_p_buffers = 2 * score_tile * types->p;
    budget->ub_mask = score_tile * types->mask;
    budget->ub_share = 2 * budget->share_ub_size;
    budget->ub_o_accumulator = rows_per_aiv * align_up(tile->embed_base, 64) * types->o_tmp;
    budget->ub_bytes = budget->ub_s_buffers + budget->ub_otmp_buffers + budget->ub_softmax_state +
                       budget->ub_p_buffers + budget->ub_mask + budget->ub_share +
                       budget->ub_o_accumulator;
}

/* L1 of one matrix core: P of every task in flight (mm2AL1TensorList, the seed's), and the Q,
 * K and V tiles loaded from memory, double-buffered so the next loads overlap the matmuls. */
static void compute_l1(const ft_budget_tile *tile, const ft_budget_types *types, int64_t task_num,
                       ft_budget *budget) {
    const int64_t q_tile = tile->q_seq_base * tile->embed_base * types->input;
    const int64_t kv_tile = tile->kv_seq_base * tile->embed_base * types->input;
    budget->l1_p_buffers = task_num * budget->mm2_left_size;
    budget->l1_qkv_tiles = 2 * (q_tile + 2 * kv_tile);
    budget->l1_bytes = budget->l1_p_buffers + budget->l1_qkv_tiles;
}

/* L0 with L0TileShape = L1TileShape (the seed's setting): L0A holds the left operand (Q for QK,
 * P for PV), L0B the right one (K, then V: tiles of one shape), each twice; L0C the results of both
 * matmuls over the whole qSeqBase rows, twice each, in f32. */
static void compute_l0(const ft_budget_tile *tile, const ft_budget_types *types,
                       ft_budget *budget) {
    const int64_t q_tile = tile->q_seq_base * tile->embed_base * types->input;
    const int64_t p_tile = budget->mm2_left_size;
    const int64_t kv_tile = tile->kv_seq_base * tile->embed_base * types->input;
    budget->l0a_bytes = 2 * max64(q_tile, p_tile);
    budget->l0b_bytes = 2 * kv_tile;
    budget->l0c_bytes = 2 * tile->q_seq_base * tile->kv_seq_base * types->s +
                        2 * tile->q_seq_base * align_up(tile->embed_base, 64) * types->o_tmp;
}

void ft_budget_compute(const ft_budget_tile *tile, const ft_budget_types *types, int64_t task_num,
                       int64_t cv_ratio, ft_budget *budget) {
    const int64_t rows_per_aiv = ceil_div(tile->q_seq_base, cv_ratio);
    compute_static_items(tile, types, rows_per_aiv, budget);
    compute_ub(tile, types, task_num, rows_per_aiv, budget);
    compute_l1(tile, types, task_num, budget);
    compute_l0(tile, types, budget);
}

void ft_budget_buffers(const ft_budget *budget, const ft_hw *hw,
                       ft_budget_buffer buffers[FT_BUDGET_BUFFERS]) {
    const ft_budget_buffer table[FT_BUDGET_BUFFERS] = {
        {"UB per AIV", "ub", budget->ub_bytes, hw->ub_bytes},
        {"L1 per AIC", "l1", budget->l1_bytes, hw->l1_bytes},
        {"L0A", "l0a", budget->l0a_bytes, hw->l0a_bytes},
        {"L0B", "l0b", budget->l0b_bytes, hw->l0b_bytes},
        {"L0C", "l0c", budget->l0c_bytes, hw->l0c_bytes},
    };
    for (int i = 0; i < FT_BUDGET_BUFFERS; i++)
        buffers[i] = table[i];
}

void ft_budget_format_size(int64_t bytes, char *text, size_t size) {
    if (bytes >= MIB && bytes % MIB == 0)
        snprintf(text, size, "%lld MiB", (long long)(bytes / MIB));
    else
        snprintf(text, size, "%g KiB", (double)bytes / (double)KIB);
}

/* Appends "NAME needs B bytes (S), WHAT C (S)" to reason, after a "; " if it is not empty. */
static void append_overflow(char *reason, size_t size, const char *name, int64_t bytes,
                            const char *limit_name, int64_t limit) {
    char used[32], capacity[32];
    ft_budget_format_size(bytes, used, sizeof used);
    ft_budget_format_size(limit, capacity, sizeof capacity);
    size_t length = 0;
    while (length < size && reason[length])
        length++;
    if (length >= size) return;
    snprintf(reason + length, size - length, "%s%s needs %lld bytes (%s), %s %lld (%s)",
             length ? "; " : "", name, (long long)bytes, used, limit_name, (long long)limit,
             capacity);
}

int ft_budget_fits(const ft_budget_buffer *buffers, int count, char *reason, size_t size) {
    int fits = 1;
    if (size) reason[0] = '\0';
    for (int i = 0; i < count; i++) {
        if (buffers[i].bytes <= buffers[i].capacity) continue;
        fits = 0;
        append_overflow(reason, size, buffers[i].name, buffers[i].bytes, "capacity",
                        buffers[i].capacity);
    }
    return fits;
}

/* The planner's budgets (docs/design.md, "Choose the tile"): tiles that pack K and V keep their
 * slice within half of L2 and what the inner loops keep hot within L1d; decode tiles, which pack
 * nothing (and report no L1d bytes), keep the K/V rows in flight within a quarter of L2. */
int ft_budget_host_fits(const fai_plan_info *info, char *reason, size_t size) {
    if (size) reason[0] = '\0';
    if (info->tile_fits) return 1;
    const int packed = info->l1d_bytes > 0;
    const int64_t l2_budget = info->l2_capacity / (packed ? 2 : 4);
    if (info->l1d_bytes > info->l1d_capacity)
        append_overflow(reason, size, "L1d", info->l1d_bytes, "capacity", info->l1d_capacity);
    if (info->l2_bytes > l2_budget)
        append_overflow(reason, size, "L2", info->l2_bytes,
                        packed ? "budget (half of L2)" : "budget (a quarter of L2)", l2_budget);
    if (size && !reason[0])
        snprintf(reason, size,
                 "the planner's cache budgets refuse the tile (L1d %lld of %lld bytes, L2 %lld "
                 "of %lld bytes)",
                 (long long)info->l1d_bytes, (long long)info->l1d_capacity,
                 (long long)info->l2_bytes, (long long)info->l2_capacity);
    return 0;
}
