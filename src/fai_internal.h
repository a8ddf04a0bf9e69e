/* Private structures shared by the plan, the kernel driver and the entry points. */
#ifndef FAI_INTERNAL_H
#define FAI_INTERNAL_H

#include "fai.h"
#include "ukr/fai_ukr.h"

#include <stdint.h>

/* Records status and a formatted message (naming the field and the value) for fai_last_error,
 * and returns status. */
fai_status fai__fail(fai_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fai__clear_error(void);

/* Returns from the calling function with the status of `expr` unless it is FAI_OK. */
#define FAI_TRY(expr)                                                                              \
    do {                                                                                           \
        const fai_status try_status_ = (expr);                                                     \
        if (try_status_ != FAI_OK) return try_status_;                                             \
    } while (0)

/* One sequence of the batch after lengths are resolved. Rows of sequence b live at tensor row
 * q_row0 + i (packed) or at batch b, row i (padded); q_rows is how many rows the tensor holds for
 * it (lengths plus padding), all of which the run writes. */
typedef struct fai_seq {
    int64_t q_len, kv_len;
    int64_t q_row0, kv_row0; /* packed offsets (cu_seqlens), else 0 */
    int64_t q_rows;          /* rows owned in O: q_len plus trailing padding */
    /* key index on query 0's causal diagonal: kv_len - q_len (bottom-right), 0 (top-left), or
     * q_position - kv_position with global positions */
    int64_t diagonal;
} fai_seq;

/* A unit of work: the q heads of one kv-head group, for q positions [q_begin, q_begin + q_len)
 * of one sequence, against kv tiles [kv_tile_begin, kv_tile_begin + kv_tiles). Rows
 * [pad_begin, pad_end) of the sequence are zero rows this unit writes. */
typedef struct fai_unit {
    int64_t batch, head_kv;
    int64_t head_q_begin, heads; /* the q heads of the unit: the kv head's group, or a slice */
    int64_t q_begin, q_len;
    int64_t pad_begin, pad_end;
    int64_t kv_tile_begin, kv_tiles;
    int64_t line_begin; /* position of the unit's first valid tile in the line of all tiles */
    int64_t parts;      /* workers computing it: 1, or more with split-KV */
    int64_t first_slot; /* parts > 1: its partial results' first slot, and its counter index */
    int64_t split_index;
} fai_unit;

/* One worker's share: units [unit_begin, unit_end) and the tiles [line_begin, line_end) of the
 * line; `first_part` / `last_part` are the part indices of its first and last unit when it
 * computes only part of them (-1: the whole unit). */
typedef struct fai_worker {
    int64_t unit_begin, unit_end;
    int64_t line_begin, line_end;
    int64_t first_part, last_part;
} fai_worker;

/* Visibility of keys from query rows under causal, window and lengths: query i sees keys
 * [lo(i), hi(i)] with lo(i) = i + lo_offset and hi(i) = i + hi_offset before clipping to
 * [0, kv_len). INT64_MIN / INT64_MAX offsets mean unbounded. */
typedef struct fai_band {
    int64_t lo_offset, hi_offset;
    int64_t kv_len;
} fai_band;

/* (fai_band.c) */
fai_band fai__band_of(const fai_problem *pb, const fai_seq *seq);
int64_t fai__band_lo(const fai_band *band, int64_t i); /* clipped to >= 0 */
int64_t fai__band_hi(const fai_band *band, int64_t i); /* clipped to <= kv_len - 1 */

/* Per-thread scratch, carved from the caller's workspace (64-byte aligned segments). */
typedef struct fai_ws_layout {
    size_t q_tile, k_tile, v_tile, s_tile, o_acc, row_max, row_sum, row_alpha, kv_rows;
    size_t row_slope, row_offset; /* ALiBi: each row's slope, and its offset in the tile */
    size_t key_scales;            /* quantized K/V: the tile's K scales [ld_n], then V's */
    size_t fetch_rows;            /* decode: the rows of the stream read next (fai_row_fetch) */
    size_t q_scaled; /* K's channel scales: the unit's Q rows times them, f32 [rows, ld_q] */
    size_t slot;     /* bytes of one unit's scratch, a multiple of 64 */
    /* the packed K/V cache after the slots: its state at kv_cache, its tiles from
     * kv_cache_tiles_at, each kv_cache_tile_bytes (K, then V at kv_cache_k_bytes) */
    size_t kv_cache, kv_cache_tiles_at, kv_cache_k_bytes, kv_cache_tile_bytes;
    size_t unit_flags;  /* whether the unit's Q is in range for bf16 dot or tile products */
    size_t mx_row_sums; /* the matrix engine's rows' running sums, FAI_MX_SUM_LANES wide */
    size_t
        per_thread; /* bytes of one thread's slice: fai__slots_per_thread slots (and the cache) */
    /* after the threads' slices: the split units' partial results and completion counters */
    size_t partials, partial_bytes; /* offset, and bytes of one slot: O [rows, ld_o], m, l */
    size_t counters;
} fai_ws_layout;

struct fai_plan {
    fai_problem pb; /* the problem, with its array pointers cleared */
    int64_t group;  /* Hq / Hkv */
    int64_t head_dim_v;
    float scale;
    int paged, packed_q, packed_kv;

    fai_seq *seqs; /* [batch] */

    int64_t tile_q, tile_kv, tile_rows;
    int64_t group_slice; /* q heads of a group per unit: the group, unless it is very large */
    int64_t max_q_len, max_kv_len; /* the longest sequence's query and key lengths */
    int64_t l1d_bytes, l2_bytes;   /* the tile's hot set and per-thread slice, against the caches */
    int tile_fits;
    const char *tile_source; /* "user", "tuned" or "heuristic" */
    char tile_class[128];    /* the tuning cache's shape class */
    int has_positions;       /* global positions were given */
    int mods;                /* softcap or ALiBi: the scores pass through the mods_ entries */
    /* K (V) is quantized: its per-key scales multiply S (P) after QK (the softmax) */
    int k_scaled, v_scaled;
    /* K has per-channel scales too (fai_problem.k_channel_scales): each unit's Q rows are
     * multiplied by its kv head's, in f32 (ws.q_scaled, or decode's Q tile), before packing */
    int k_channel_scaled;
    int64_t ld_s; /* tile_rows padded to the micro-kernels' vector width: S^T and Q^T rows */
    int64_t ld_o; /* dv padded likewise: V tile and O accumulator rows */
    /* Small Q tiles (decode) read K and V rows directly instead of packing them; Q is then
     * row-major with rows of ld_q (d padded to the vector width). */
    int direct_kv;
    int64_t ld_q;
    int64_t ld_n;     /* direct: scores are row-major [rows, ld_n], tile_kv padded to the width */
    int bf16_qk;      /* bf16 Q and K with an even d on a CPU with bf16 dot products */
    int bf16_qk_rows; /* decode's QK on bf16 dot products: bf16 Q and K, and the CPU has them */
    int bf16_pv;      /* and bf16 V: PV on the same dot products (pack_v_bf16, pv_bf16) */
    /* Packed prefill on the vector tables with K and V rows of at most FAI_SPREAD_ROW_BYTES a
     * key together: the next tile's rows are asked for a chunk of QK at a time, not at once
     * (the kernel's qk_prefetching says why) */
    int prefetch_spread;
    /* The matrix engine (the table's mx_ entries) runs QK and PV: prefill tiles with 16-bit K
     * and V. ld_s is then the Q tile's rows padded to 32 (m_pad), ld_o Dv padded to 32, ld_n the
     * kv tile padded to 32, d_pad D padded to 32; the *_parts say in how many bf16 parts each
     * operand is held (1 for bf16, 2 for f16, 3 for f32). */
    int mx;
    int mx_q_parts, mx_k_parts, mx_v_parts;
    /* kv tiles in flight per unit on the matrix engine (fai_problem.pipeline_tiles): 1, or 2
     * with the next tile's QK behind this one's PV and a second K/V buffer */
    int mx_pipeline;
    /* The bf16 parts of P where PV multiplies in bf16 (the matrix engine, bf16_pv): 2 (hi +
     * lo), or 1 with round_p_bf16 */
    int p_parts;
    int64_t d_pad;
    /* The packed K/V cache of prefill plans: kv tiles [0, kv_cache_tiles) of one (batch, kv
     * head) stay packed (in the layout of the path: f32 rows, or the matrix engine's bf16
     * pairs) in the thread's workspace, so the q tiles of a sequence after the first reuse them
     * instead of packing them again (0: no cache; see fai_kernel_body.h). */
    int64_t kv_cache_tiles;
    fai_unit *units;
    int64_t unit_count;
    int64_t total_weight;
    int64_t visible_pairs;

    int64_t workers;
    fai_worker *worker;     /* [workers] */
    int64_t *worker_weight; /* [workers] */
    double imbalance;
    int64_t split_units, partials; /* split-KV: units computed in parts, and their parts */

    int64_t threads;
    fai_ws_layout ws;
    size_t workspace_size;

    const fai_cntx *cntx;
    fai_pool *pool; /* NULL: the default pool */
};

/* Rows of a Q tile the matrix engine takes at a time (a 2 x 2 block of its 16-row tiles). */
#define FAI_MX_BLOCK_ROWS 32

/* Q tiles of at most this many rows (decode: one position times the GQA group) stream K and V
 * rows straight from memory: packing them would cost more than the few rows that reuse them. */
#define FAI_DIRECT_KV_MAX_ROWS 8
/* Whether a Q tile of `rows` rows is a decode tile (the tile chooser and the workspace layout
 * decide by this one rule). */
static inline int fai__is_decode_tile(int64_t rows) { return rows <= FAI_DIRECT_KV_MAX_ROWS; }
/* Packed prefill asks for the next kv tile's rows a chunk of QK at a time when a key's K and V
 * rows together are at most this many bytes (16-bit rows of 128 and less); longer rows keep
 * the one burst at the tile's start (measured on AMD Zen 5: docs/design.md, "Run"). */
#define FAI_SPREAD_ROW_BYTES 512
/* Decode units of one sequence run in lockstep up to this many at a time (each its own scratch
 * slot), so that a token's K/V of all kv heads is streamed together. */
#define FAI_LOCKSTEP_UNITS 8
/* Prefill units (larger scratch) of one sequence and q tile run in lockstep up to this many. */
#define FAI_LOCKSTEP_PACKED_UNITS 4

/* Unit scratch slots in a thread's slice: decode runs FAI_LOCKSTEP_UNITS units in lockstep, the
 * other vector plans FAI_LOCKSTEP_PACKED_UNITS, the matrix engine one unit at a time. */
static inline int64_t fai__slots_per_thread(const fai_plan *plan) {
    return plan->direct_kv ? FAI_LOCKSTEP_UNITS : plan->mx ? 1 : FAI_LOCKSTEP_PACKED_UNITS;
}

/* Plan steps (plan/). */
void fai__choose_tile(fai_plan *plan);

/* bf16 dot products (AVX512_BF16) and tile products (AMX) read subnormal inputs as zero. QK on
 * them stays within the tolerance when every Q value is 0 or of magnitude in [2^-100, 2^80)
 * (then no bf16 part of Q is subnormal: each part is at least 2^-24 of its value) and |scale| <
 * 2^10: a product lost to a subnormal K part is below 2^-126 |q_d|, and scale * sum_d |q_d| <
 * 2^10 * 576 * 2^80 < 2^100 keeps their sum below 2^-26 of a logit. A unit whose Q is out of that
 * range takes an f32 QK; a plan whose scale is, the FMA tables. PV: a lost P part (below 2^-126)
 * times a V of magnitude below 2^80 is below 2^-46, so V tiles holding larger values (or Inf
 * or NaN) take an f32 PV. The tables check values against FAI_BF16_DOT_Q_LOW and
 * FAI_BF16_DOT_HIGH (ukr/fai_ukr.h). */
static inline int fai__dot_products_scale_ok(const fai_plan *plan) {
    return plan->scale < 0x1p10f && plan->scale > -0x1p10f;
}

/* Whether prefill tiles of the plan multiply QK on the table's bf16 dot products (Q and K bf16
 * values: K's channel scales make Q f32 values), and PV too (V bf16 as well). Decode tiles read
 * K and V in place and take qk_rows_bf16 instead; the matrix engine, where it serves, takes over
 * both (fai_plan.c). */
static inline int fai__bf16_qk_serves(const fai_plan *plan) {
    return plan->cntx->qk_bf16 && !plan->k_channel_scaled && plan->pb.q_dtype == FAI_DTYPE_BF16 &&
           plan->pb.k_dtype == FAI_DTYPE_BF16 && plan->pb.head_dim % 2 == 0 &&
           fai__dot_products_scale_ok(plan);
}

static inline int fai__bf16_pv_serves(const fai_plan *plan) {
    return fai__bf16_qk_serves(plan) && plan->cntx->pv_bf16 && plan->pb.v_dtype == FAI_DTYPE_BF16;
}

/* Whether the plan's table has a matrix engine and its K and V are 16-bit: f32 K/V would need
 * three passes of each product for f32 accuracy, and stay on the FMA tables. Prefill tiles of
 * such a plan run on the matrix engine. */
static inline int fai__mx_serves(const fai_plan *plan) {
    return plan->cntx->mx_qk && plan->pb.k_dtype != FAI_DTYPE_F32 &&
           plan->pb.v_dtype != FAI_DTYPE_F32 && fai__dot_products_scale_ok(plan);
}

/* The L1d bytes one row block of the matrix engine touches per kv tile of tile_kv keys: its S and
 * P rows, the tile's packed K and V, the block's Q and O rows (fai_plan.c). */
int64_t fai__mx_block_bytes(const fai_plan *plan, int64_t tile_kv);

/* The tuning cache (fai_tuning.c): the plan's shape class, and the tuned tile for it. */
void fai__tuning_class(fai_plan *plan, int64_t max_q, int64_t max_kv);
int fai__tuning_lookup(const fai_plan *plan, int64_t *tile_q, int64_t *tile_kv);
/* Bytes of a vector-table unit slot (Q^T, packed K and V, S^T, O) for a tile of `rows` rows and
 * tile_kv keys, exactly as the workspace lays it out (fai_plan.c): the tile chooser's L2
 * footprint. */
int64_t fai__vector_slot_bytes(const fai_plan *plan, int64_t rows, int64_t tile_kv);
/* Whether the plan, with this tile, runs on the matrix engine and its slot fits the matrix
 * engine's L2 budget (half of L2: plan info's tile_fits there). */
int fai__mx_slot_fits_l2(const fai_plan *plan, int64_t rows, int64_t tile_kv);
/* The problem's checks (fai_validate.c). */
fai_status fai__validate_problem(const fai_problem *pb);
/* Dv and the scale a valid problem asks for, its defaults (fai.h) resolved. */
void fai__problem_defaults(const fai_problem *pb, int64_t *head_dim_v, float *scale);
/* Each sequence's lengths, first rows and diagonal (fai_seqs.c). */
fai_status fai__resolve_seqs(const fai_problem *pb, fai_seq *seqs);
fai_status fai__build_units(fai_plan *plan);
fai_status fai__split_units(fai_plan *plan);

/* Whether every element a call may address, counts[i] (batch, seq, head) indices along the
 * strides plus `tail` elements of `element` bytes, lies within a signed 64-bit byte offset of the
 * data (FAI_ERR_OVERFLOW naming `name` if not): a stride past that would wrap the address onto
 * other elements. */
fai_status fai__check_reach(const char *name, const int64_t counts[3], int64_t stride_batch,
                            int64_t stride_seq, int64_t stride_head, int64_t tail, size_t element);

/* Batch, sequence and head strides none of them negative; the error names `name` and all three. */
fai_status fai__check_not_negative(const char *name, int64_t stride_batch, int64_t stride_seq,
                                   int64_t stride_head);
/* data at a multiple of its elements' size, as an array of them is (NULL is); the error names
 * `name`. fai reads and writes f32 and 16-bit elements as what they are. */
fai_status fai__check_aligned(const char *name, const void *data, size_t element);
/* A tensor's data aligned (fai__check_aligned) and its strides: none negative, and the head
 * dimension contiguous (stride_dim 0 or 1); the error names `name`. */
fai_status fai__check_strides(const char *name, const fai_tensor *tensor);

/* Run-time checks of the tensors against the plan (fai_api.c). */
fai_status fai__validate_tensors(const fai_plan *plan, const fai_tensors *t);

/* The kernel driver: runs worker `worker` of the plan with its thread's scratch `ws`; ws_base is
 * the whole workspace, where split units keep their parts (kernel/). */
void fai__kernel_run_worker(const fai_plan *plan, const fai_tensors *t, int64_t worker,
                            unsigned char *ws, unsigned char *ws_base);
/* The same with stage timers (fai_kernel_profiled.c): adds to this thread's fai__stage_clock. */
void fai__kernel_run_worker_profiled(const fai_plan *plan, const fai_tensors *t, int64_t worker,
                                     unsigned char *ws, unsigned char *ws_base);

/* Thread pool (thread/): runs fn(arg, thread_index) on threads 0..threads-1, the caller being
 * thread 0, and returns when all are done. */
typedef void (*fai_pool_task_fn)(void *arg, int64_t thread_index);
fai_pool *fai__default_pool(void);
int64_t fai__pool_size(const fai_pool *pool);
void fai__pool_run(fai_pool *pool, int64_t threads, fai_pool_task_fn fn, void *arg);
/* A run is coming: sleeping helpers wake and poll for it a while (fai_plan_wake). */
void fai__pool_wake(fai_pool *pool);
/* Helpers that woke for the latest run, those that came after it closed included (tests). */
int64_t fai__pool_helpers_joined(const fai_pool *pool);

/* Checked arithmetic: returns 0 on overflow. */
static inline int fai__mul_ok(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline int fai__add_ok(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

static inline int64_t fai__ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

#endif
