/* fai_plan_create: the host-side tiling step. Validates the problem, resolves lengths, chooses
 * one tile shape (used by block counting and by the kernel alike), builds and splits the units,
 * and lays out the per-thread workspace. */
#include "arch/fai_cpuid.h"
#include "fai_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void fai_problem_init(fai_problem *pb) {
    if (!pb) return;
    memset(pb, 0, sizeof *pb);
    pb->q_dtype = FAI_DTYPE_F32;
    pb->k_dtype = FAI_DTYPE_F16;
    pb->v_dtype = FAI_DTYPE_F16;
    pb->o_dtype = FAI_DTYPE_F32;
    pb->head_dim_v = FAI_HEAD_DIM_V_DEFAULT;
    pb->scale = FAI_SCALE_DEFAULT;
    pb->window_left = FAI_WINDOW_UNBOUNDED;
    pb->window_right = FAI_WINDOW_UNBOUNDED;
}

/* Waking a thread costs microseconds: with automatic threads (threads = 0) a thread is worth it
 * only for this much work, so small problems (a decode step on a short context) run on the
 * calling thread alone. Threads asked for explicitly are kept, up to the busy workers. */
#define MIN_FLOPS_PER_THREAD 4e6

static void limit_threads(fai_plan *plan) {
    int64_t busy_workers = 0;
    for (int64_t w = 0; w < plan->workers; w++)
        busy_workers += plan->worker[w].unit_end > plan->worker[w].unit_begin;
    const double flops =
        (double)plan->visible_pairs * 2.0 * (double)(plan->pb.head_dim + plan->head_dim_v);
    double by_work = flops / MIN_FLOPS_PER_THREAD;
    if (by_work < 1.0) by_work = 1.0;
    if (plan->threads > busy_workers) plan->threads = busy_workers > 0 ? busy_workers : 1;
    if (plan->pb.threads == 0 && (double)plan->threads > by_work) plan->threads = (int64_t)by_work;
}

static size_t align64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

/* The matrix engine's per-unit scratch (see fai_mx_body.h and fai_kernel_mx.h): Q in parts
 * [m_pad, d_pad] (by blocks of FAI_MX_BLOCK_ROWS rows), K pairs in parts [d_pad / 2, n_pad, 2]
 * and V pairs in parts [n_pad / 2, dv_pad, 2] for each tile in flight (mx_pipeline), S [m_pad,
 * ld_n] f32 with P hi and lo [m_pad, n_pad] (by blocks) after it, O [m_pad, dv_pad] f32, and
 * the rows' sums. */
static void layout_mx_slot(fai_plan *plan, size_t *offset) {
    const size_t m_pad = (size_t)plan->ld_s, n_pad = (size_t)plan->ld_n;
    const size_t d_pad = (size_t)plan->d_pad, dv_pad = (size_t)plan->ld_o;
    const size_t half = sizeof(uint16_t);
    fai_ws_layout *ws = &plan->ws;
    ws->q_tile = *offset, *offset += align64(m_pad * d_pad * half * (size_t)plan->mx_q_parts);
    /* K and V of the tiles in flight: the one computed (and the next one packed) */
    const size_t tiles = (size_t)plan->mx_pipeline;
    ws->k_tile = *offset,
    *offset += align64(tiles * n_pad * d_pad * half * (size_t)plan->mx_k_parts);
    ws->v_tile = *offset,
    *offset += align64(tiles * n_pad * dv_pad * half * (size_t)plan->mx_v_parts);
    ws->s_tile = *offset, *offset += align64(m_pad * n_pad * (sizeof(float) + 2 * half));
    ws->o_acc = *offset, *offset += align64(m_pad * dv_pad * sizeof(float));
    ws->unit_flags = *offset, *offset += 64;
    ws->mx_row_sums = *offset, *offset += align64(m_pad * FAI_MX_SUM_LANES * sizeof(float));
}

/* The vector tables' per-unit scratch: Q^T, packed K and V tiles, S^T and O (f32); decode
 * tiles read K and V in place and keep Q and S row-major. */
static void layout_vector_slot(fai_plan *plan, size_t *offset_io) {
    const size_t rows = (size_t)plan->tile_rows, keys = (size_t)plan->tile_kv;
    const size_t d = (size_t)plan->pb.head_dim, ld_o = (size_t)plan->ld_o;
    const size_t ld_s = (size_t)plan->ld_s;
    fai_ws_layout *ws = &plan->ws;
    size_t offset = *offset_io;
    /* Q^T [d, ld_s], or Q [rows, ld_q] when K and V are read directly */
    const size_t q_floats = plan->direct_kv ? rows * (size_t)plan->ld_q : d * ld_s;
    ws->q_tile = offset, offset += align64(q_floats * sizeof(float));
    /* K [keys, d] and V [keys, ld_o] packed tiles (none when K and V are read in place) */
    const size_t packed_keys = plan->direct_kv ? 0 : keys;
    ws->k_tile = offset, offset += align64(packed_keys * d * sizeof(float));
    ws->v_tile = offset, offset += align64(packed_keys * ld_o * sizeof(float));
    /* S^T [keys, ld_s], or S [rows, ld_n] row-major on the direct path */
    const size_t s_floats = plan->direct_kv ? rows * (size_t)plan->ld_n : keys * ld_s;
    ws->s_tile = offset, offset += align64(s_floats * sizeof(float));
    ws->o_acc = offset, offset += align64(rows * ld_o * sizeof(float)); /* O [rows, ld_o] */
    ws->unit_flags = offset, offset += 64;
    *offset_io = offset;
}

/* Whether the matrix engine takes the plan: prefill tiles (decode streams K and V and is bound
 * by memory) of a plan whose table and dtypes it serves (fai__mx_serves). */
static int use_matrix_engine(const fai_plan *plan) {
    return fai__mx_serves(plan) && !plan->direct_kv;
}

/* The packed K/V cache pays when some sequence has more than one q tile (or a group is cut into
 * slices): the units after the first of a kv head then find its tiles packed. It holds the first
 * tiles of a sequence, up to this many bytes per thread. */
#define KV_CACHE_BYTES (INT64_C(8) << 20)

static void layout_kv_cache(fai_plan *plan, size_t *offset) {
    const size_t half = sizeof(uint16_t), f32 = sizeof(float);
    const size_t n_pad = (size_t)plan->ld_n, keys = (size_t)plan->tile_kv;
    fai_ws_layout *ws = &plan->ws;
    int64_t max_kv = 0, reuse = plan->group_slice < plan->group;
    for (int64_t b = 0; b < plan->pb.batch; b++) {
        if (plan->seqs[b].kv_len > max_kv) max_kv = plan->seqs[b].kv_len;
        reuse |= plan->seqs[b].q_len > plan->tile_q;
    }
    /* a tile as the path packs it: the matrix engine's K and V pairs in bf16 parts, or the
     * vector tables' f32 K [tile_kv, d] (none where bf16 QK reads the K rows in place) and V
     * [tile_kv, ld_o] */
    size_t v_bytes;
    if (plan->mx) {
        ws->kv_cache_k_bytes =
            align64(n_pad * (size_t)plan->d_pad * half * (size_t)plan->mx_k_parts);
        v_bytes = align64(n_pad * (size_t)plan->ld_o * half * (size_t)plan->mx_v_parts);
    } else {
        ws->kv_cache_k_bytes = plan->bf16_qk ? 0 : align64(keys * (size_t)plan->pb.head_dim * f32);
        v_bytes = align64(keys * (size_t)plan->ld_o * f32);
    }
    ws->kv_cache_tile_bytes = ws->kv_cache_k_bytes + v_bytes;
    const int64_t most = KV_CACHE_BYTES / (int64_t)ws->kv_cache_tile_bytes;
    const int64_t tiles = fai__ceil_div(max_kv, plan->tile_kv);
    plan->kv_cache_tiles = !reuse ? 0 : tiles < most ? tiles : most;
    ws->kv_cache = *offset;
    ws->kv_cache_tiles_at = *offset + align64(64 + (size_t)plan->kv_cache_tiles);
    if (plan->kv_cache_tiles > 0)
        *offset = ws->kv_cache_tiles_at + (size_t)plan->kv_cache_tiles * ws->kv_cache_tile_bytes;
}

/* bf16 parts that hold a dtype exactly: its significand in slices of 8 bits (a quantized
 * element's own value fits one; its scale is applied to S or P) */
static int mx_parts(fai_dtype dtype) {
    if (dtype == FAI_DTYPE_BF16 || fai_dtype_is_quantized(dtype)) return 1;
    return dtype == FAI_DTYPE_F16 ? 2 : 3;
}

/* S in f32, P in two bf16 parts, K, V and Q in their parts, O in f32 (fai_internal.h) */
int64_t fai__mx_block_bytes(const fai_plan *plan, int64_t tile_kv) {
    const int64_t block = FAI_MX_BLOCK_ROWS, ld_n = fai__ceil_div(tile_kv, 32) * 32;
    const int64_t d_pad = fai__ceil_div(plan->pb.head_dim, 32) * 32;
    const int64_t ld_o = fai__ceil_div(plan->head_dim_v, 32) * 32;
    const int64_t half = (int64_t)sizeof(uint16_t);
    return block * ld_n * (int64_t)sizeof(float) + 2 * block * ld_n * half +
           ld_n * d_pad * half * mx_parts(plan->pb.k_dtype) +
           ld_n * ld_o * half * mx_parts(plan->pb.v_dtype) +
           block * d_pad * half * mx_parts(plan->pb.q_dtype) +
           block * ld_o * (int64_t)sizeof(float);
}

/* The matrix engine's budget, in place of the vector tables' (fai_tile.c): L1d holds what one row
 * block's stages touch per kv tile (its S and P rows, the tile's packed K and V, the block's Q and
 * O rows: the tile unit reads them from there, or from L2 when they do not fit); L2 the unit's
 * slot (the packed K/V cache, which holds a kv head's tiles, may run past it into L3). The slot
 * must fit half of L2 for the tile to count as fitting. */
static void budget_mx(fai_plan *plan) {
    plan->l1d_bytes = fai__mx_block_bytes(plan, plan->tile_kv);
    plan->l2_bytes = (int64_t)plan->ws.slot;
    plan->tile_fits = plan->l2_bytes <= fai__cache_sizes()->l2 / 2;
}

/* The vector tables' leading dimensions of the plan's tile (its rows and keys padded to the
 * vector width) and whether it is a decode tile. */
static void set_vector_dims(fai_plan *plan) {
    const int64_t width = plan->cntx->simd_width;
    plan->ld_s = fai__ceil_div(plan->tile_rows, width) * width;
    plan->ld_o = fai__ceil_div(plan->head_dim_v, width) * width;
    plan->ld_q = fai__ceil_div(plan->pb.head_dim, width) * width;
    plan->direct_kv = fai__is_decode_tile(plan->tile_rows);
    plan->ld_n = fai__ceil_div(plan->tile_kv, width) * width;
}

int64_t fai__vector_slot_bytes(const fai_plan *plan, int64_t rows, int64_t tile_kv) {
    fai_plan trial = *plan; /* only its tile, dimensions and layout change */
    trial.tile_rows = rows;
    trial.tile_kv = tile_kv;
    set_vector_dims(&trial);
    size_t offset = 0;
    layout_vector_slot(&trial, &offset);
    return (int64_t)offset;
}

/* One unit's slot of the plan's tile: its leading dimensions, the paths it takes (bf16 dot
 * products, the matrix engine) and the scratch they lay out; ws.slot is its size. The matrix
 * engine's budget follows from it. */
static void layout_slot(fai_plan *plan) {
    set_vector_dims(plan);
    /* (K's channel scales turn Q into f32 values: no bf16 products of Q then) */
    const fai_dtype q_dtype = plan->k_channel_scaled ? FAI_DTYPE_F32 : plan->pb.q_dtype;
    plan->bf16_qk = !plan->direct_kv && fai__bf16_qk_serves(plan);
    plan->bf16_pv = !plan->direct_kv && fai__bf16_pv_serves(plan);
    plan->bf16_qk_rows = plan->cntx->qk_rows_bf16 && plan->direct_kv && q_dtype == FAI_DTYPE_BF16 &&
                         plan->pb.k_dtype == FAI_DTYPE_BF16 && fai__dot_products_scale_ok(plan);
    plan->p_parts = plan->pb.round_p_bf16 ? 1 : 2;
    plan->mx = use_matrix_engine(plan);
    plan->prefetch_spread = !plan->direct_kv && !plan->mx &&
                            plan->pb.head_dim * (int64_t)fai_dtype_size(plan->pb.k_dtype) +
                                    plan->head_dim_v * (int64_t)fai_dtype_size(plan->pb.v_dtype) <=
                                FAI_SPREAD_ROW_BYTES;
    if (plan->mx) {
        plan->bf16_qk = plan->bf16_pv = 0;
        plan->ld_s = fai__ceil_div(plan->tile_rows, 32) * 32;
        plan->ld_o = fai__ceil_div(plan->head_dim_v, 32) * 32;
        plan->ld_n = fai__ceil_div(plan->tile_kv, 32) * 32;
        plan->d_pad = fai__ceil_div(plan->pb.head_dim, 32) * 32;
        plan->mx_q_parts = mx_parts(q_dtype);
        plan->mx_k_parts = mx_parts(plan->pb.k_dtype);
        plan->mx_v_parts = mx_parts(plan->pb.v_dtype);
        /* one tile in flight where a row block's operands fit L1d (the small tiles of
         * fai_tile.c): the next tile's K and V beside them pushed them out (all-bf16 P2 1.07x
         * with one); two where they do not fit anyway */
        plan->mx_pipeline = plan->pb.pipeline_tiles != FAI_AUTO ? plan->pb.pipeline_tiles
                            : fai__mx_block_bytes(plan, plan->tile_kv) <= fai__cache_sizes()->l1d
                                ? 1
                                : 2;
    }
    const size_t rows = (size_t)plan->tile_rows, keys = (size_t)plan->tile_kv;
    const size_t ld_s = (size_t)plan->ld_s;
    fai_ws_layout *ws = &plan->ws;
    size_t offset = 0;
    if (plan->mx)
        layout_mx_slot(plan, &offset);
    else
        layout_vector_slot(plan, &offset);
    ws->row_max = offset, offset += align64(ld_s * sizeof(float));
    ws->row_sum = offset, offset += align64(ld_s * sizeof(float));
    ws->row_alpha = offset, offset += align64(ld_s * sizeof(float));
    const size_t alibi_rows = plan->pb.alibi ? ld_s : 0;
    ws->row_slope = offset, offset += align64(alibi_rows * sizeof(float));
    ws->row_offset = offset, offset += align64(alibi_rows * sizeof(float));
    /* a quantized K's and V's scales of one kv tile's keys */
    const size_t scaled_keys = plan->k_scaled || plan->v_scaled ? (size_t)plan->ld_n : 0;
    ws->key_scales = offset, offset += align64(2 * scaled_keys * sizeof(float));
    /* row pointers of a Q tile, or of a kv tile and the rows prefetched past it */
    const size_t pointers = keys + FAI_PREFETCH_ROWS > rows ? keys + FAI_PREFETCH_ROWS : rows;
    ws->kv_rows = offset, offset += align64(pointers * sizeof(void *));
    /* decode: a second list, so that each stream's rows are at hand while the other computes */
    ws->fetch_rows = offset, offset += align64((plan->direct_kv ? pointers : 0) * sizeof(void *));
    /* K's channel scales: Q times them (decode scales its Q tile in place) */
    const size_t scaled_q =
        plan->k_channel_scaled && !plan->direct_kv ? rows * (size_t)plan->ld_q : 0;
    ws->q_scaled = offset, offset += align64(scaled_q * sizeof(float));
    ws->slot = offset;
    if (plan->mx) budget_mx(plan);
}

int fai__mx_slot_fits_l2(const fai_plan *plan, int64_t rows, int64_t tile_kv) {
    fai_plan trial = *plan; /* only its tile, dimensions and layout change */
    trial.tile_rows = rows;
    trial.tile_kv = tile_kv;
    layout_slot(&trial);
    return trial.mx && trial.tile_fits;
}

static fai_status layout_workspace(fai_plan *plan) {
    layout_slot(plan);
    fai_ws_layout *ws = &plan->ws;
    const size_t rows = (size_t)plan->tile_rows, ld_o = (size_t)plan->ld_o;
    const size_t ld_s = (size_t)plan->ld_s, offset = ws->slot;
    ws->per_thread = offset * (size_t)fai__slots_per_thread(plan);
    if (!plan->direct_kv) layout_kv_cache(plan, &ws->per_thread);
    int64_t total;
    if (!fai__mul_ok((int64_t)ws->per_thread, plan->threads, &total))
        return fai__fail(FAI_ERR_OVERFLOW, "workspace of %" PRId64 " threads overflows",
                         plan->threads);
    /* split-KV: one slot per part (O [rows, ld_o], m and l [ld_s]), one counter per split unit */
    ws->partial_bytes = align64((rows * ld_o + 2 * ld_s) * sizeof(float));
    ws->partials = (size_t)total;
    ws->counters = ws->partials + (size_t)plan->partials * ws->partial_bytes;
    /* + 63: fai_run aligns the caller's pointer up to a cache line */
    plan->workspace_size = ws->counters + align64((size_t)plan->split_units * sizeof(int64_t)) + 63;
    return FAI_OK;
}

fai_status fai_plan_create(const fai_problem *problem, fai_plan **out) {
    fai__clear_error();
    if (!out) return fai__fail(FAI_ERR_INVALID_ARG, "plan = NULL: nowhere to return the plan");
    *out = NULL;
    fai_status status = fai__validate_problem(problem);
    if (status != FAI_OK) return status;

    const fai_cntx *cntx;
    status = fai__cntx_select(&cntx);
    if (status != FAI_OK) return status;

    fai_plan *plan = calloc(1, sizeof *plan);
    if (!plan) return fai__fail(FAI_ERR_NO_MEMORY, "no memory for the plan");
    plan->pb = *problem;
    plan->pb.seqlens_q = plan->pb.seqlens_kv = NULL;
    plan->pb.cu_seqlens_q = plan->pb.cu_seqlens_kv = NULL;
    plan->pb.q_positions = plan->pb.kv_positions = NULL; /* kept as each seq's diagonal */
    plan->cntx = cntx;
    plan->group = problem->heads_q / problem->heads_kv;
    fai__problem_defaults(problem, &plan->head_dim_v, &plan->scale);
    plan->pb.head_dim_v = plan->head_dim_v;
    plan->pb.scale = plan->scale;
    plan->paged = problem->page_size > 0;
    plan->packed_q = problem->cu_seqlens_q != NULL;
    plan->packed_kv = problem->cu_seqlens_kv != NULL;
    plan->has_positions = problem->q_positions != NULL;
    plan->mods = problem->softcap > 0.0f || problem->alibi;
    plan->k_scaled = fai_dtype_is_quantized(problem->k_dtype);
    plan->k_channel_scaled = problem->k_channel_scales != 0;
    plan->v_scaled = fai_dtype_is_quantized(problem->v_dtype);
    plan->workers = problem->workers ? problem->workers : fai_cpu_count();
    if (plan->workers > FAI_MAX_WORKERS) plan->workers = FAI_MAX_WORKERS;
    plan->threads = problem->threads ? problem->threads : fai_cpu_count();
    if (plan->threads > plan->workers) plan->threads = plan->workers;

    plan->seqs = calloc(problem->batch ? (size_t)problem->batch : 1, sizeof *plan->seqs);
    if (!plan->seqs) {
        fai_plan_free(plan);
        return fai__fail(FAI_ERR_NO_MEMORY, "no memory for %" PRId64 " sequences", problem->batch);
    }
    status = fai__resolve_seqs(problem, plan->seqs);
    if (status == FAI_OK) {
        fai__choose_tile(plan);
        status = fai__build_units(plan);
    }
    if (status == FAI_OK) status = fai__split_units(plan);
    if (status == FAI_OK) {
        limit_threads(plan);
        status = layout_workspace(plan);
    }
    if (status != FAI_OK) {
        fai_plan_free(plan);
        return status;
    }
    *out = plan;
    return FAI_OK;
}

void fai_plan_free(fai_plan *plan) {
    if (!plan) return;
    free(plan->seqs);
    free(plan->units);
    free(plan->worker);
    free(plan->worker_weight);
    free(plan);
}

size_t fai_plan_workspace_size(const fai_plan *plan) { return plan ? plan->workspace_size : 0; }

void fai_plan_wake(const fai_plan *plan) {
    if (!plan || plan->threads <= 1) return;
    fai_pool *pool = plan->pool ? plan->pool : fai__default_pool();
    if (pool) fai__pool_wake(pool);
}

void fai_plan_set_pool(fai_plan *plan, fai_pool *pool) {
    if (plan) plan->pool = pool;
}

fai_status fai_plan_get_info(const fai_plan *plan, fai_plan_info *info) {
    fai__clear_error();
    if (!plan) return fai__fail(FAI_ERR_INVALID_ARG, "plan = NULL");
    if (!info) return fai__fail(FAI_ERR_INVALID_ARG, "info = NULL");
    memset(info, 0, sizeof *info);
    info->tile_q = plan->tile_q;
    info->tile_kv = plan->tile_kv;
    info->tile_rows = plan->tile_rows;
    info->units = plan->unit_count;
    info->workers = plan->workers;
    info->threads = plan->threads;
    info->total_weight = plan->total_weight;
    info->imbalance = plan->imbalance;
    info->split_kv = plan->split_units > 0;
    info->split_units = plan->split_units;
    info->partials = plan->partials;
    info->visible_pairs = plan->visible_pairs;
    info->workspace_bytes = plan->workspace_size;
    info->isa = plan->cntx->name;
    info->tile_source = plan->tile_source;
    info->tile_class = plan->tile_class;
    info->p_parts = plan->mx || plan->bf16_pv ? plan->p_parts : 0;
    info->pipeline_tiles = plan->mx ? plan->mx_pipeline : 1;
    info->l1d_bytes = plan->l1d_bytes;
    info->l2_bytes = plan->l2_bytes;
    info->l1d_capacity = fai__cache_sizes()->l1d;
    info->l2_capacity = fai__cache_sizes()->l2;
    info->tile_fits = plan->tile_fits;
    return FAI_OK;
}

fai_status fai_plan_get_worker(const fai_plan *plan, int64_t worker, fai_worker_range *range) {
    fai__clear_error();
    if (!plan) return fai__fail(FAI_ERR_INVALID_ARG, "plan = NULL");
    if (!range) return fai__fail(FAI_ERR_INVALID_ARG, "range = NULL");
    if (worker < 0 || worker >= plan->workers)
        return fai__fail(FAI_ERR_INVALID_ARG, "worker = %" PRId64 " is outside [0, %" PRId64 ")",
                         worker, plan->workers);
    range->unit_begin = plan->worker[worker].unit_begin;
    range->unit_end = plan->worker[worker].unit_end;
    range->weight = plan->worker_weight[worker];
    range->line_begin = plan->worker[worker].line_begin;
    range->line_end = plan->worker[worker].line_end;
    return FAI_OK;
}

fai_status fai_plan_get_unit(const fai_plan *plan, int64_t unit, fai_unit_info *info) {
    fai__clear_error();
    if (!plan) return fai__fail(FAI_ERR_INVALID_ARG, "plan = NULL");
    if (!info) return fai__fail(FAI_ERR_INVALID_ARG, "info = NULL");
    if (unit < 0 || unit >= plan->unit_count)
        return fai__fail(FAI_ERR_INVALID_ARG, "unit = %" PRId64 " is outside [0, %" PRId64 ")",
                         unit, plan->unit_count);
    const fai_unit *u = &plan->units[unit];
    info->batch = u->batch;
    info->head_kv = u->head_kv;
    info->q_begin = u->q_begin;
    info->q_len = u->q_len;
    info->kv_tile_begin = u->kv_tile_begin;
    info->kv_tiles = u->kv_tiles;
    info->head_q_begin = u->head_q_begin;
    info->heads_q = u->heads;
    return FAI_OK;
}
