/* The body of the kernel driver, compiled twice (fai_kernel.c, and fai_kernel_profiled.c with
 * stage timers): one worker walks its contiguous range of units. For each unit (the q heads
 * of one kv-head group, or of a slice of a very large group, over one q tile) it runs the seed's
 * four stages over the unit's valid kv tiles, with S, P and O living only in this thread's
 * workspace:
 *
 *     QK:              S = scale * Q K^T                     (cntx->qk)
 *     online softmax:  masks on partial tiles, then P, m, l  (apply_masks, cntx->softmax)
 *     rescale O:       O *= exp(m_old - m_new) where m moved (cntx->rescale_o)
 *     PV:              O += P V                              (cntx->pv)
 *
 * and finally O / l and LSE = m + log l. Q tile rows are ordered (query position, group head),
 * so the group's heads share each K and V tile: K/V are read once per group. A unit whose kv
 * range is split across workers computes its part and leaves it for the merge; decode units of
 * one sequence run in lockstep (see lockstep_count). */
#ifndef FAI_KERNEL_BODY_H
#define FAI_KERNEL_BODY_H

#include "fai_internal.h"
#include "kv/fai_kv.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

/* FAI_KERNEL_LAPS, defined by the file that includes this body: 1 for the profiled build, where
 * FAI_LAP(stage) charges the time since the last mark to the stage (fai_profile.h); 0 for the
 * build fai_run uses, where the marks compile to nothing. */
#if !defined(FAI_KERNEL_LAPS)
#error "define FAI_KERNEL_LAPS (0 or 1) before including fai_kernel_body.h"
#elif FAI_KERNEL_LAPS
#include "kernel/fai_profile.h"
#define FAI_LAP(stage) fai__lap(stage)
#define FAI_LAP_START() (fai__stage_clock.last = fai__ticks())
/* Whether the stage is computed: the profiled build may leave QK, the softmax, PV and the store
 * out (fai_run_profiled_without); fai_run's build computes every stage. */
#define FAI_KEEPS(stage) ((fai__left_out & (1u << (stage))) == 0)
#else
#define FAI_LAP(stage) ((void)0)
#define FAI_LAP_START() ((void)0)
#define FAI_KEEPS(stage) 1
#endif

/* One unit's scratch. Decode plans (direct_kv) keep Q row-major [rows, ld_q] and S row-major
 * [rows, ld_n], and pack no K or V; the others use the layouts below. */
typedef struct unit_scratch {
    float *q_tile;     /* Q^T [d, ld_s] (bf16 pairs [d/2, ld_s, 2] on the bf16 QK path) */
    float *k_tile;     /* K [tile_kv, d] */
    float *v_tile;     /* V [tile_kv, ld_o] */
    float *s_tile;     /* S^T [tile_kv, ld_s]: S, then P in place */
    float *o_acc;      /* O [rows, ld_o] */
    float *row_max;    /* [rows] running max m */
    float *row_sum;    /* [rows] running sum l */
    float *row_alpha;  /* [rows] exp(m_old - m_new) of the last tile */
    float *row_slope;  /* ALiBi: [ld_s] each row's slope (0 past the unit's rows) */
    float *row_offset; /* ALiBi: [ld_s] the tile's first key minus the row's query position */
    float *k_scales;   /* quantized K: [ld_n] the tile's keys' scales */
    float *v_scales;   /* quantized V: [ld_n] likewise */
    const void **row_ptrs;
    const void **fetch_ptrs;  /* decode: the rows of the stream read next (fai_row_fetch) */
    const fai_run_rows *rows; /* the run's tensors, resolved (kv/fai_kv.h) */
    unsigned char *kv_cache;  /* the thread's packed K/V cache (slot 0 only), or NULL */
    int *q_dot_ok;   /* bf16 dot or tile products: the unit's Q in their range (fai_internal.h) */
    float *q_scaled; /* K's channel scales: the unit's Q rows times them [rows, ld_q] */
    float *mx_row_sums; /* the matrix engine: its rows' running sums [ld_s, FAI_MX_SUM_LANES] */
} unit_scratch;

static unit_scratch carve_scratch(const fai_plan *plan, unsigned char *ws,
                                  const fai_run_rows *rows) {
    unit_scratch sc;
    sc.rows = rows;
    sc.q_tile = (float *)(ws + plan->ws.q_tile);
    sc.k_tile = (float *)(ws + plan->ws.k_tile);
    sc.v_tile = (float *)(ws + plan->ws.v_tile);
    sc.s_tile = (float *)(ws + plan->ws.s_tile);
    sc.o_acc = (float *)(ws + plan->ws.o_acc);
    sc.row_max = (float *)(ws + plan->ws.row_max);
    sc.row_sum = (float *)(ws + plan->ws.row_sum);
    sc.row_alpha = (float *)(ws + plan->ws.row_alpha);
    sc.row_slope = (float *)(ws + plan->ws.row_slope);
    sc.row_offset = (float *)(ws + plan->ws.row_offset);
    sc.k_scales = (float *)(ws + plan->ws.key_scales);
    sc.v_scales = sc.k_scales + plan->ld_n;
    sc.row_ptrs = (const void **)(ws + plan->ws.kv_rows);
    sc.fetch_ptrs = (const void **)(ws + plan->ws.fetch_rows);
    sc.kv_cache = NULL;
    sc.q_dot_ok = (int *)(ws + plan->ws.unit_flags);
    sc.mx_row_sums = (float *)(ws + plan->ws.mx_row_sums);
    sc.q_scaled = (float *)(ws + plan->ws.q_scaled);
    return sc;
}

/* Byte offset of the row of query i (of the unit's sequence) and query head head_q in a bit
 * mask. */
static int64_t bits_row(const fai_mask *mask, const fai_unit *unit, int64_t i, int64_t head_q) {
    return unit->batch * mask->stride_batch + head_q * mask->stride_head + i * mask->stride_q;
}

/* Keys [key_begin, key_begin + n) of a bit-mask row whose bit is 0 become -inf: 64 keys at a
 * time where they start a byte and their bits are all 0 or all 1. Only bytes of keys in the range
 * are read. */
static void apply_bits_row(const unsigned char *bits, int64_t key_begin, int64_t n, float *s_row,
                           int64_t key_step) {
    for (int64_t c = 0; c < n;) {
        const int64_t j = key_begin + c;
        if ((j & 7) == 0 && c + 64 <= n) {
            uint64_t word;
            memcpy(&word, bits + (j >> 3), sizeof word);
            if (word == UINT64_MAX) {
                c += 64;
                continue;
            }
            if (word == 0) {
                for (int64_t k = 0; k < 64; k++)
                    s_row[(c + k) * key_step] = -INFINITY;
                c += 64;
                continue;
            }
        }
        if (!((bits[j >> 3] >> (j & 7)) & 1)) s_row[c * key_step] = -INFINITY;
        c++;
    }
}

/* Whether a bit-mask row keeps any key of [key_begin, key_begin + n), reading whole words where
 * it can. */
static int bits_row_any(const unsigned char *bits, int64_t key_begin, int64_t n) {
    int64_t j = key_begin;
    const int64_t end = key_begin + n;
    for (; j < end && (j & 7); j++)
        if ((bits[j >> 3] >> (j & 7)) & 1) return 1;
    for (; j + 64 <= end; j += 64) {
        uint64_t word;
        memcpy(&word, bits + (j >> 3), sizeof word);
        if (word) return 1;
    }
    for (; j + 8 <= end; j += 8)
        if (bits[j >> 3]) return 1;
    for (; j < end; j++)
        if ((bits[j >> 3] >> (j & 7)) & 1) return 1;
    return 0;
}

/* Whether a bit mask removes every key of [key_begin, key_begin + n) from the unit's rows
 * [row_begin, row_end): such a tile (or row block) changes nothing and is skipped. Rows of the
 * heads of one query position share their bits when the mask broadcasts over heads. */
static int bits_rows_empty(const fai_tensors *t, const fai_unit *unit, int64_t key_begin, int64_t n,
                           int64_t row_begin, int64_t row_end) {
    const fai_mask *mask = &t->mask;
    const unsigned char *data = mask->data;
    const int64_t heads = unit->heads;
    for (int64_t r = row_begin; r < row_end; r++) {
        if (mask->stride_head == 0 && r % heads != 0 && r != row_begin) continue;
        const int64_t i = unit->q_begin + r / heads;
        const int64_t head_q = unit->head_q_begin + r % heads;
        if (bits_row_any(data + bits_row(mask, unit, i, head_q), key_begin, n)) return 0;
    }
    return 1;
}

/* Masks of one tile for its rows [row_begin, row_end): the causal/window band where the tile is
 * only partly visible, and the explicit mask tensor. Positions masked out become -inf whatever S
 * held there, so K values the row cannot see never reach P. Row r's score for key c is
 * s[r * row_step + c * key_step]: S^T [n, ld_s] has steps (1, ld_s), the row-major S of the
 * direct path and the matrix engine [rows, ld_n] (ld_n, 1). */
static void apply_masks_rows(const fai_plan *plan, const fai_tensors *t, const fai_unit *unit,
                             const fai_band *band, int band_partial, int64_t key_begin, int64_t n,
                             float *s, int64_t row_step, int64_t key_step, int64_t row_begin,
                             int64_t row_end) {
    const int64_t heads = unit->heads;
    const fai_mask *mask = &t->mask;
    const fai_mask_kind kind = plan->pb.mask_kind;
    for (int64_t r = row_begin; r < row_end; r++) {
        const int64_t i = unit->q_begin + r / heads;
        const int64_t head_q = unit->head_q_begin + r % heads;
        float *s_row = s + r * row_step; /* [n] with stride key_step */
        if (band_partial) {              /* the keys before lo and after hi, as two runs */
            int64_t lo = fai__band_lo(band, i) - key_begin;
            int64_t hi = fai__band_hi(band, i) - key_begin;
            lo = lo < 0 ? 0 : lo > n ? n : lo;
            hi = hi < lo - 1 ? lo - 1 : hi > n - 1 ? n - 1 : hi;
            for (int64_t c = 0; c < lo; c++)
                s_row[c * key_step] = -INFINITY;
            for (int64_t c = hi + 1; c < n; c++)
                s_row[c * key_step] = -INFINITY;
        }
        if (kind == FAI_MASK_NONE) continue;
        if (kind == FAI_MASK_KEEP_BITS) {
            apply_bits_row((const unsigned char *)mask->data + bits_row(mask, unit, i, head_q),
                           key_begin, n, s_row, key_step);
            continue;
        }
        const int64_t offset = unit->batch * mask->stride_batch + head_q * mask->stride_head +
                               i * mask->stride_q + key_begin;
        if (kind == FAI_MASK_ADD) {
            const float *add = (const float *)mask->data + offset;
            for (int64_t c = 0; c < n; c++)
                s_row[c * key_step] =
                    add[c] == -INFINITY ? -INFINITY : s_row[c * key_step] + add[c];
        } else {
            const unsigned char *bytes = (const unsigned char *)mask->data + offset;
            const int drop_if_nonzero = kind == FAI_MASK_DROP;
            for (int64_t c = 0; c < n; c++)
                if ((bytes[c] != 0) == drop_if_nonzero) s_row[c * key_step] = -INFINITY;
        }
    }
}

static void apply_masks(const fai_plan *plan, const fai_tensors *t, const fai_unit *unit,
                        const fai_band *band, int band_partial, int64_t key_begin, int64_t n,
                        float *s, int64_t row_step, int64_t key_step) {
    apply_masks_rows(plan, t, unit, band, band_partial, key_begin, n, s, row_step, key_step, 0,
                     unit->q_len * unit->heads);
}

/* Where one of a unit's valid kv tiles (an offset into its range) lies: its first key, its keys
 * and its band; band_partial when some row sees only part of it (only then are band masks
 * applied). */
typedef struct tile_extent {
    int64_t key_begin, n;
    fai_band band;
    int band_partial;
} tile_extent;

static tile_extent tile_extent_of(const fai_plan *plan, const fai_unit *unit, int64_t tile) {
    const fai_seq *seq = &plan->seqs[unit->batch];
    const int64_t tile_kv = plan->tile_kv;
    tile_extent e;
    e.band = fai__band_of(&plan->pb, seq);
    e.key_begin = (unit->kv_tile_begin + tile) * tile_kv;
    e.n = seq->kv_len - e.key_begin < tile_kv ? seq->kv_len - e.key_begin : tile_kv;
    e.band_partial = !(fai__band_lo(&e.band, unit->q_begin + unit->q_len - 1) <= e.key_begin &&
                       fai__band_hi(&e.band, unit->q_begin) >= e.key_begin + e.n - 1);
    return e;
}

/* The keys [begin, end) of a tile that the queries [first_query, last_query] of a unit see at
 * all, rounded out to multiples of `align` and at most `cap`: where the band starts or ends
 * within the tile (a sliding window's start, causal attention's diagonal), the keys before the
 * first query's first and after the last query's last are masked for every one of those rows,
 * and QK, the softmax and PV need not run on them: the keys left out weigh 0 for every row, so
 * the results are the same bits. [0, cap) for a tile the band does not cut, and for one that
 * those queries do not see at all (the plan gives a unit only tiles it sees, but a row block of
 * it may see none of one: under a sliding window, a later block's window can start past a tile
 * that the earlier blocks see); the masks then set every score of it to -inf. */
typedef struct key_range {
    int64_t begin, end;
} key_range;

static key_range band_seen_keys(const tile_extent *e, int64_t first_query, int64_t last_query,
                                int64_t align, int64_t cap) {
    key_range keys = {0, cap};
    if (!e->band_partial) return keys;
    const int64_t begin = fai__band_lo(&e->band, first_query) - e->key_begin;
    const int64_t end = fai__band_hi(&e->band, last_query) - e->key_begin + 1;
    if (end <= begin || end < 1 || begin >= cap) return keys;
    if (begin > 0) keys.begin = begin / align * align;
    const int64_t end_aligned = fai__ceil_div(end, align) * align;
    if (end_aligned < cap) keys.end = end_aligned;
    return keys;
}

/* A thread's packed K/V cache (layout_kv_cache in fai_plan.c): which (batch, kv head) its tiles
 * belong to, a state per tile (0 not packed yet, else KV_PACKED with KV_K_NONFINITE when K holds
 * Inf or NaN, KV_V_EXACT when V needs the exact f32 PV (Inf or NaN, and on the dot and tile
 * products values of 2^80 or more: fai_internal.h), and KV_K_SCALED and KV_V_SCALED when a
 * quantized K's or V's scales are folded into it), and the tiles, each its K then its V as the
 * plan's path packs them. Reset at the start of every worker: the tensors may differ from run to
 * run. */
enum { KV_PACKED = 1, KV_K_NONFINITE = 2, KV_V_EXACT = 4, KV_K_SCALED = 8, KV_V_SCALED = 16 };

typedef struct kv_cache_head {
    int64_t batch, head_kv;
} kv_cache_head;

/* The cache's state of the unit's kv tile starting at key_begin, with its bytes in *tile (K,
 * then V at ws.kv_cache_k_bytes): 0 while the caller still has to pack it there and set the
 * state. NULL when the tile is not cached. A unit of another (batch, kv head) than the cache
 * holds starts the cache over. */
static unsigned char *kv_cache_find(const fai_plan *plan, const unit_scratch *sc,
                                    const fai_unit *unit, int64_t key_begin, unsigned char **tile) {
    const int64_t index = key_begin / plan->tile_kv;
    if (!sc->kv_cache || index >= plan->kv_cache_tiles) return NULL;
    kv_cache_head *head = (kv_cache_head *)sc->kv_cache;
    unsigned char *states = sc->kv_cache + sizeof *head;
    if (head->batch != unit->batch || head->head_kv != unit->head_kv) {
        head->batch = unit->batch;
        head->head_kv = unit->head_kv;
        memset(states, 0, (size_t)plan->kv_cache_tiles);
    }
    *tile = sc->kv_cache + (plan->ws.kv_cache_tiles_at - plan->ws.kv_cache) +
            (size_t)index * plan->ws.kv_cache_tile_bytes;
    return states + index;
}

/* Share `part` of `parts` of a unit's rows of Q or O (row_bytes each) requested into the caches.
 * A unit reads its Q rows and writes its O rows once, straight from memory, at its start and
 * end; the worker asks for the next unit's Q and this unit's O a share per kv tile, so that the
 * misses overlap the tiles' compute instead of stalling the packing and the store. */
static void prefetch_unit_rows(const fai_rows *tensor, const fai_unit *unit, int64_t part,
                               int64_t parts, int64_t row_bytes) {
    const int64_t rows = unit->q_len * unit->heads;
    for (int64_t r = part * rows / parts; r < (part + 1) * rows / parts; r++) {
        const char *row = fai__q_row(tensor, unit->batch, unit->q_begin + r / unit->heads,
                                     unit->head_q_begin + r % unit->heads);
        for (int64_t offset = 0; offset < row_bytes; offset += 64)
            __builtin_prefetch(row + offset, 0, 2);
    }
}

/* The prefetches of kv tile `tile` of `tiles` of a unit, with `next` the worker's next unit (or
 * NULL). */
static void prefetch_rows_for_tile(const fai_plan *plan, const fai_tensors *t,
                                   const fai_run_rows *rows, const fai_unit *unit,
                                   const fai_unit *next, int64_t tile, int64_t tiles) {
    if (next && next->q_len > 0)
        prefetch_unit_rows(&rows->q, next, tile, tiles,
                           plan->pb.head_dim * (int64_t)fai_dtype_size(t->q.dtype));
    prefetch_unit_rows(&rows->o, unit, tile, tiles,
                       plan->head_dim_v * (int64_t)fai_dtype_size(t->o.dtype));
}

/* The score modifiers of a tile for the unit's rows [row_begin, row_end) (fai_score_mods): with
 * ALiBi, each row's offset for the tile starting at key_begin; `scale` multiplies the scores
 * first (1 where QK scaled them). */
static fai_score_mods tile_mods(const fai_plan *plan, const fai_unit *unit, const unit_scratch *sc,
                                int64_t key_begin, int64_t row_begin, int64_t row_end,
                                float scale) {
    fai_score_mods mods;
    mods.scale = scale;
    mods.softcap = plan->pb.softcap;
    mods.slope = NULL;
    mods.offset = NULL;
    if (plan->pb.alibi) {
        /* the query's position on the key axis is i + diagonal (causal's diagonal) */
        const int64_t diagonal = plan->seqs[unit->batch].diagonal;
        for (int64_t r = row_begin; r < row_end; r++)
            sc->row_offset[r] = (float)(key_begin - (unit->q_begin + r / unit->heads + diagonal));
        mods.slope = sc->row_slope + row_begin;
        mods.offset = sc->row_offset + row_begin;
    }
    return mods;
}

/* A quantized K's (V's) scales of the keys [key_begin, key_begin + n) of the unit's kv head into
 * the scratch, and 1 for the keys after n up to ld_n (padding that P holds 0 for). */
static void gather_scales(const fai_plan *plan, const fai_unit *unit, const fai_rows *scale,
                          int64_t key_begin, int64_t n, float *out) {
    fai__kv_scales(scale, unit->batch, unit->head_kv, key_begin, n, out);
    for (int64_t j = n; j < plan->ld_n; j++)
        out[j] = 1.0f;
}

/* Whether n gathered scales are all at most 2^64: then a scale times any code (at most 57344,
 * e5m2's largest) is a finite f32 below 2^80, so they may be folded into a packed tile, and the
 * matrix engine's tile products may take the tile's V (fai_internal.h). */
static int scales_fold(const float *scales, int64_t n) {
    float top = 0.0f;
    for (int64_t j = 0; j < n; j++)
        top = scales[j] > top ? scales[j] : top;
    return top <= 0x1p64f;
}

/* The K and V rows of keys [key_begin, key_begin + count) of the unit's sequence and kv head,
 * asked for into L2: prefill packs each row from memory, and rows asked for a tile ahead have
 * arrived when they are packed. */
static void prefetch_kv_keys(const fai_plan *plan, const fai_tensors *t, const fai_unit *unit,
                             const unit_scratch *sc, int64_t key_begin, int64_t count) {
    if (count <= 0) return;
    fai__kv_prefetch(&sc->rows->k, unit->batch, unit->head_kv, key_begin, count,
                     plan->pb.head_dim * (int64_t)fai_dtype_size(t->k.dtype));
    fai__kv_prefetch(&sc->rows->v, unit->batch, unit->head_kv, key_begin, count,
                     plan->head_dim_v * (int64_t)fai_dtype_size(t->v.dtype));
}

/* What a stage left out leaves behind (fai_run_profiled_without): scores of 0 in place of QK's,
 * and row_alpha 1 (the max unmoved) in place of the softmax's. */
static void leave_scores_zero(const fai_plan *plan, const unit_scratch *sc, int64_t rows,
                              int64_t n) {
    const int64_t floats = plan->direct_kv ? rows * plan->ld_n : n * plan->ld_s;
    memset(sc->s_tile, 0, (size_t)floats * sizeof(float));
}
static void leave_max_unmoved(float *row_alpha, int64_t rows) {
    for (int64_t r = 0; r < rows; r++)
        row_alpha[r] = 1.0f;
}

#include "kernel/fai_kernel_mx.h"

static void write_zero_row(const fai_plan *plan, const fai_tensors *t, const fai_run_rows *rows,
                           int64_t b, int64_t i, int64_t head_q) {
    void *o_row = fai__q_row(&rows->o, b, i, head_q);
    memset(o_row, 0, (size_t)plan->head_dim_v * fai_dtype_size(t->o.dtype));
    if (t->lse.data) *fai__lse_at(&rows->lse, b, i, head_q) = -INFINITY;
}

/* Step 1 of a unit: its Q tile (the whole GQA group), converted once, and an empty state. */
static void start_unit(const fai_plan *plan, const fai_tensors *t, const fai_unit *unit,
                       const unit_scratch *sc) {
    const fai_cntx *cntx = plan->cntx;
    const int64_t heads = unit->heads, rows = unit->q_len * heads;
    const int64_t d = plan->pb.head_dim, ld_s = plan->ld_s, ld_o = plan->ld_o;
    const int64_t b = unit->batch;

    for (int64_t r = 0; r < rows; r++)
        sc->row_ptrs[r] =
            fai__q_row(&sc->rows->q, b, unit->q_begin + r / heads, unit->head_q_begin + r % heads);
    /* K's channel scales move onto Q, q . (c x codes) = (q x c) . codes: the rows times the kv
     * head's scales in f32 (decode's Q tile, or rows the packing then reads as f32 Q) */
    const float *channels =
        plan->k_channel_scaled
            ? t->k_channel_scale.data + unit->head_kv * t->k_channel_scale.stride_head
            : NULL;
    if (plan->direct_kv) {
        cntx->pack_rows(sc->q_tile, plan->ld_q, sc->row_ptrs, rows, d, t->q.dtype, NULL);
        if (channels) cntx->scale_keys_rows(sc->q_tile, plan->ld_q, rows, d, channels);
    } else {
        fai_dtype q_dtype = t->q.dtype;
        if (channels) {
            cntx->pack_rows(sc->q_scaled, plan->ld_q, sc->row_ptrs, rows, d, q_dtype, NULL);
            cntx->scale_keys_rows(sc->q_scaled, plan->ld_q, rows, d, channels);
            for (int64_t r = 0; r < rows; r++)
                sc->row_ptrs[r] = sc->q_scaled + r * plan->ld_q;
            q_dtype = FAI_DTYPE_F32;
        }
        if (plan->mx)
            mx_pack_q_blocks(plan, sc, rows, q_dtype);
        else if (!(plan->bf16_qk && (*sc->q_dot_ok = cntx->pack_q_bf16((uint16_t *)sc->q_tile, ld_s,
                                                                       sc->row_ptrs, rows, d))))
            cntx->pack_q(sc->q_tile, ld_s, sc->row_ptrs, rows, d, q_dtype);
    }
    for (int64_t r = 0; r < ld_s; r++) { /* the vector lanes past `rows` too */
        sc->row_max[r] = -INFINITY;
        sc->row_sum[r] = 0.0f;
    }
    if (plan->pb.alibi)
        for (int64_t r = 0; r < ld_s; r++) {
            sc->row_slope[r] = r < rows ? t->alibi_slopes[unit->head_q_begin + r % heads] : 0.0f;
            sc->row_offset[r] = 0.0f;
        }
    /* the matrix engine's accumulator tiles cover the padded rows too */
    const int64_t o_rows = plan->mx ? ld_s : rows;
    memset(sc->o_acc, 0, (size_t)(o_rows * ld_o) * sizeof(float));
    FAI_LAP(FAI_STAGE_PACK_Q);
}

/* Prefill on the vector tables packs K and V per tile, and the next tile's rows are asked for
 * into L2 while this one computes. Asked for all at once, a tile's rows overran the lines a core
 * keeps in flight: on AMD Zen 5, chunked prefill with f16 K/V (C1) spent 33-38 % of its time
 * packing rows that had not arrived. Spread over QK, a chunk of QK_CHUNK_KEYS keys at a time
 * (whole register blocks of every table: 12 or 2 x 6 keys on AVX-512, 12 on NEON, 2 x 6 on AVX2)
 * asking for as many of the next tile's K rows before it and V rows after it, the share fell to 20
 * % and C1 ran 1.1-1.3x faster. Rows longer than FAI_SPREAD_ROW_BYTES a key (K and V together; f32
 * at D 128) gained nothing in such bursts and keep the one at the tile's start
 * (plan->prefetch_spread says which). */
#define QK_CHUNK_KEYS 12

/* Stage 1 for the tile's keys [first, first + n), QK_CHUNK_KEYS keys a call, on the packed K tile
 * (or, with bf16 dot products, k_packed NULL, on the K rows sc->row_ptrs), with the next tile's K
 * and V rows [next, next + next_n) asked for along the way (next_n 0: none). */
static void qk_prefetching(const fai_plan *plan, const fai_tensors *t, const fai_unit *unit,
                           const unit_scratch *sc, const float *k_packed, int64_t first, int64_t n,
                           int64_t next, int64_t next_n) {
    const int64_t d = plan->pb.head_dim, ld_s = plan->ld_s;
    const int64_t k_bytes = d * (int64_t)fai_dtype_size(t->k.dtype);
    const int64_t v_bytes = plan->head_dim_v * (int64_t)fai_dtype_size(t->v.dtype);
    for (int64_t c = 0; c < n; c += QK_CHUNK_KEYS) {
        const int64_t keys = n - c < QK_CHUNK_KEYS ? n - c : QK_CHUNK_KEYS;
        /* as many of the next tile's keys; the last chunk asks for the rest of them */
        const int64_t count = c + keys >= n ? next_n - c : keys < next_n - c ? keys : next_n - c;
        if (count > 0)
            fai__kv_prefetch(&sc->rows->k, unit->batch, unit->head_kv, next + c, count, k_bytes);
        if (!k_packed)
            plan->cntx->qk_bf16(sc->s_tile + c * ld_s, ld_s, (const uint16_t *)sc->q_tile,
                                sc->row_ptrs + first + c, keys, d, plan->scale);
        else
            plan->cntx->qk(sc->s_tile + c * ld_s, ld_s, sc->q_tile, k_packed + (first + c) * d,
                           keys, d, plan->scale);
        if (count > 0)
            fai__kv_prefetch(&sc->rows->v, unit->batch, unit->head_kv, next + c, count, v_bytes);
    }
}

/* Step 2 of a unit, for one of its valid kv tiles (an offset into its range): the four stages,
 * leaving the unnormalised O, the running max m and the running sum l in the scratch. `after` and
 * `after_tile` are the unit and tile its thread computes next (NULL: none or unknown), whose K
 * rows decode asks for during this tile's PV. */
static void run_tile(const fai_plan *plan, const fai_tensors *t, const fai_unit *unit, int64_t tile,
                     const unit_scratch *sc, const fai_unit *after, int64_t after_tile) {
    const fai_cntx *cntx = plan->cntx;
    const int64_t rows = unit->q_len * unit->heads;
    const int64_t d = plan->pb.head_dim, dv = plan->head_dim_v, tile_kv = plan->tile_kv;
    const int64_t ld_s = plan->ld_s, ld_o = plan->ld_o;
    const int64_t b = unit->batch;
    const fai_seq *seq = &plan->seqs[b];
    const tile_extent e = tile_extent_of(plan, unit, tile);
    const fai_band band = e.band;
    const int64_t key_begin = e.key_begin, n = e.n;
    const int band_partial = e.band_partial;
    /* packed K and V: the thread's cached copy of the tile (packed here by the first unit that
     * needs it), or this unit's own scratch */
    unsigned char *cached = NULL;
    unsigned char *state =
        plan->direct_kv ? NULL : kv_cache_find(plan, sc, unit, key_begin, &cached);
    const int from_cache = state && *state;
    /* bf16 QK reads the K rows in place (the cache holds no K); a unit whose Q is out of its
     * range packs K into the slot's own tile */
    const int bf16_qk = plan->bf16_qk && *sc->q_dot_ok;
    const int k_from_cache = from_cache && !plan->bf16_qk;
    int k_folded = 0; /* a quantized K's scales in its packed tile */
    float *k_packed = state && !plan->bf16_qk ? (float *)cached : sc->k_tile;
    float *v_packed = state ? (float *)(cached + plan->ws.kv_cache_k_bytes) : sc->v_tile;
    /* the keys [kb, kb + nk) prefill's QK, the softmax and PV run on (band_seen_keys), in
     * multiples of 16 so that bf16 dot products pair the same keys (an odd count would send its
     * last key down the f32 path); packing still packs the whole tile, which the cache keeps */
    const key_range seen =
        plan->direct_kv ? (key_range){0, n}
                        : band_seen_keys(&e, unit->q_begin, unit->q_begin + unit->q_len - 1, 16, n);
    const int64_t kb = seen.begin, nk = seen.end - seen.begin;

    FAI_LAP(FAI_STAGE_OTHER);
    /* a tile whose bits are all 0 for every row would only add -inf scores: skipped */
    if (plan->pb.mask_kind == FAI_MASK_KEEP_BITS && bits_rows_empty(t, unit, key_begin, n, 0, rows))
        return;
    /* decode reads K and V rows in place, prefetching FAI_PREFETCH_ROWS ahead: the row
     * lists run that far into the next tile */
    const int64_t rest = seq->kv_len - key_begin - n;
    const int64_t ahead = !plan->direct_kv           ? 0
                          : rest < FAI_PREFETCH_ROWS ? rest
                                                     : FAI_PREFETCH_ROWS;
    unsigned char *next_cached = NULL, *next_state = NULL;
    if (!plan->direct_kv && tile + 1 < unit->kv_tiles)
        next_state = kv_cache_find(plan, sc, unit, key_begin + tile_kv, &next_cached);
    /* prefill packs K and V per tile: the next tile's rows are asked for into L2 while this
     * tile computes (unless the packed cache holds them already) */
    const int64_t next = key_begin + tile_kv;
    const int64_t next_n =
        plan->direct_kv || tile + 1 >= unit->kv_tiles || (next_state && *next_state) ? 0
        : seq->kv_len - next < tile_kv ? seq->kv_len - next
                                       : tile_kv;
    if (!plan->prefetch_spread) prefetch_kv_keys(plan, t, unit, sc, next, next_n);
    fai__kv_rows(&sc->rows->k, b, unit->head_kv, key_begin, n + ahead, sc->row_ptrs);
    /* decode: the tile's V rows are asked for while QK computes; PV reads them from this list */
    const fai_row_fetch v_fetch = {sc->fetch_ptrs, n, dv * (int64_t)fai_dtype_size(t->v.dtype)};
    if (plan->direct_kv)
        fai__kv_rows(&sc->rows->v, b, unit->head_kv, key_begin, n + ahead, sc->fetch_ptrs);
    FAI_LAP(FAI_STAGE_PACK_KV);
    const int qk_kept = FAI_KEEPS(FAI_STAGE_QK);
    if (!qk_kept && plan->direct_kv) {
        leave_scores_zero(plan, sc, rows, n);
    } else if (plan->bf16_qk_rows &&
               cntx->qk_rows_bf16(sc->s_tile, plan->ld_n, sc->q_tile, plan->ld_q, rows,
                                  sc->row_ptrs, ahead, &v_fetch, n, d, plan->scale)) {
        /* done on bf16 dot products */
    } else if (plan->direct_kv) {
        /* a quantized K's scales are applied as the scores are stored */
        if (plan->k_scaled)
            gather_scales(plan, unit, &sc->rows->k_scale, key_begin, n, sc->k_scales);
        cntx->qk_rows(sc->s_tile, plan->ld_n, sc->q_tile, plan->ld_q, rows, sc->row_ptrs, ahead,
                      &v_fetch, t->k.dtype, n, d, plan->scale,
                      plan->k_scaled ? sc->k_scales : NULL);
    } else if (bf16_qk) { /* bf16 dot products straight from the K rows */
        if (!qk_kept)
            leave_scores_zero(plan, sc, rows, nk);
        else if (plan->prefetch_spread)
            qk_prefetching(plan, t, unit, sc, NULL, kb, nk, next, next_n);
        else
            cntx->qk_bf16(sc->s_tile, ld_s, (const uint16_t *)sc->q_tile, sc->row_ptrs + kb, nk, d,
                          plan->scale);
    } else {
        /* a quantized K's scales are folded into the packed tile where they fit (then the cache
         * keeps them folded, for every q tile that reads it), else applied to S */
        if (plan->k_scaled && k_from_cache) {
            k_folded = (*state & KV_K_SCALED) != 0;
        } else if (plan->k_scaled) {
            gather_scales(plan, unit, &sc->rows->k_scale, key_begin, n, sc->k_scales);
            k_folded = scales_fold(sc->k_scales, n);
        }
        if (!k_from_cache)
            cntx->pack_rows(k_packed, d, sc->row_ptrs, n, d, t->k.dtype,
                            k_folded ? sc->k_scales : NULL);
        FAI_LAP(FAI_STAGE_PACK_KV);
        if (!qk_kept)
            leave_scores_zero(plan, sc, rows, nk);
        else if (plan->prefetch_spread)
            qk_prefetching(plan, t, unit, sc, k_packed, kb, nk, next, next_n);
        else
            cntx->qk(sc->s_tile, ld_s, sc->q_tile, k_packed + kb * d, nk, d, plan->scale);
    }
    if (plan->k_scaled && !k_folded && !plan->direct_kv) {
        /* S = scale (Q K_q^T) k_scale, K_q the quantized values */
        if (k_from_cache) /* (else gathered for the packing) */
            gather_scales(plan, unit, &sc->rows->k_scale, key_begin, n, sc->k_scales);
        cntx->scale_keys_t(sc->s_tile, ld_s, nk, sc->k_scales + kb);
    }
    FAI_LAP(FAI_STAGE_QK);

    const int masked = band_partial || plan->pb.mask_kind != FAI_MASK_NONE;
    if (!FAI_KEEPS(FAI_STAGE_SOFTMAX)) {
        /* left out, with the masks and score modifiers: PV weighs the keys by their scores */
        leave_max_unmoved(sc->row_alpha, rows);
    } else {
        if (plan->mods) { /* soft-capping and ALiBi, just before the masks */
            const fai_score_mods mods = tile_mods(plan, unit, sc, key_begin + kb, 0, rows, 1.0f);
            if (plan->direct_kv)
                cntx->mods_rows(sc->s_tile, plan->ld_n, rows, n, &mods);
            else
                cntx->mods_t(sc->s_tile, ld_s, nk, &mods);
        }
        if (plan->direct_kv) {
            if (masked)
                apply_masks(plan, t, unit, &band, band_partial, key_begin, n, sc->s_tile,
                            plan->ld_n, 1);
            /* P V = (P v_scale) V_q: a quantized V's scales are applied as P is stored */
            if (plan->v_scaled)
                gather_scales(plan, unit, &sc->rows->v_scale, key_begin, n, sc->v_scales);
            cntx->softmax_rows(sc->s_tile, plan->ld_n, rows, sc->row_max, sc->row_sum,
                               sc->row_alpha, plan->v_scaled ? sc->v_scales : NULL);
        } else {
            if (masked)
                apply_masks(plan, t, unit, &band, band_partial, key_begin + kb, nk, sc->s_tile, 1,
                            ld_s);
            cntx->softmax(sc->s_tile, ld_s, rows, nk, sc->row_max, sc->row_sum, sc->row_alpha);
        }
    }
    FAI_LAP(FAI_STAGE_SOFTMAX);
    /* P V = (P v_scale) V_q, after P joined the row sums; a packed V tile takes its scales
     * folded in where they fit, as K does */
    int v_folded = plan->v_scaled && !plan->direct_kv && from_cache && (*state & KV_V_SCALED);
    if (plan->v_scaled && !v_folded && !plan->direct_kv) {
        gather_scales(plan, unit, &sc->rows->v_scale, key_begin, n, sc->v_scales);
        /* then pack_rows applies them */
        v_folded = !from_cache && scales_fold(sc->v_scales, n);
        if (!v_folded) cntx->scale_keys_t(sc->s_tile, ld_s, nk, sc->v_scales + kb);
    }
    cntx->rescale_o(sc->o_acc, ld_o, rows, sc->row_alpha);
    FAI_LAP(FAI_STAGE_RESCALE);

    if (plan->direct_kv) {
        /* the K rows of the tile computed next are asked for while PV computes */
        fai_row_fetch k_fetch = {sc->row_ptrs, 0, d * (int64_t)fai_dtype_size(t->k.dtype)};
        if (after && after_tile < after->kv_tiles) {
            const tile_extent next_tile = tile_extent_of(plan, after, after_tile);
            fai__kv_rows(&sc->rows->k, after->batch, after->head_kv, next_tile.key_begin,
                         next_tile.n, sc->row_ptrs);
            k_fetch.count = next_tile.n;
        }
        FAI_LAP(FAI_STAGE_PACK_KV);
        if (FAI_KEEPS(FAI_STAGE_PV))
            cntx->pv_rows(sc->o_acc, ld_o, sc->s_tile, plan->ld_n, rows, sc->fetch_ptrs, ahead,
                          &k_fetch, t->v.dtype, n, dv, masked);
    } else {
        if (!from_cache)
            fai__kv_rows(&sc->rows->v, b, unit->head_kv, key_begin, n + ahead, sc->row_ptrs);
        int v_plain; /* V takes the plain PV (not KV_V_EXACT) */
        if (from_cache) {
            v_plain = !(*state & KV_V_EXACT);
        } else {
            v_plain = plan->bf16_pv
                          ? cntx->pack_v_bf16((uint16_t *)v_packed, ld_o, sc->row_ptrs, n, dv)
                          : cntx->pack_rows(v_packed, ld_o, sc->row_ptrs, n, dv, t->v.dtype,
                                            v_folded ? sc->v_scales : NULL);
            if (state)
                *state =
                    (unsigned char)(KV_PACKED | (v_plain ? 0 : KV_V_EXACT) |
                                    (k_folded ? KV_K_SCALED : 0) | (v_folded ? KV_V_SCALED : 0));
        }
        FAI_LAP(FAI_STAGE_PACK_KV);
        /* V holding Inf or NaN takes the exact (sparse) PV: in a tile product 0 x Inf would be NaN
         * where a key weighs 0 (masked), and a P's lo part of 0 would turn an Inf it carries into
         * NaN */
        if (!FAI_KEEPS(FAI_STAGE_PV)) {
            /* left out */
        } else if (plan->bf16_pv) {
            /* (kb is even: V is held in pairs of keys) */
            cntx->pv_bf16(sc->o_acc, ld_o, sc->s_tile, ld_s, (const uint16_t *)v_packed + kb * ld_o,
                          rows, nk, plan->p_parts, !v_plain);
        } else {
            cntx->pv(sc->o_acc, ld_o, sc->s_tile, ld_s, v_packed + kb * ld_o, rows, nk,
                     masked && !v_plain);
        }
    }
    FAI_LAP(FAI_STAGE_PV);
}

/* Runs the unit's kv tiles [tile_begin, tile_end) (offsets into its valid range). */
static void compute_tiles(const fai_plan *plan, const fai_tensors *t, const fai_unit *unit,
                          int64_t tile_begin, int64_t tile_end, const unit_scratch *sc) {
    start_unit(plan, t, unit, sc);
    if (plan->mx) {
        mx_run_tiles(plan, t, unit, NULL, tile_begin, tile_end, sc);
        return;
    }
    for (int64_t tile = tile_begin; tile < tile_end; tile++)
        run_tile(plan, t, unit, tile, sc, tile + 1 < tile_end ? unit : NULL, tile + 1);
}

/* O = O / l and LSE = m + log l from the scratch; rows that saw nothing get 0 and -inf, and so
 * do the rows past the sequence's length that the unit owns. A sink joins the denominator here,
 * once per row whatever the split: l' = l e^(m - m') + e^(sink - m') with m' = max(m, sink), so
 * O = O e^(m - m') / l' and LSE = m' + log l'; a row that saw nothing gets LSE = sink. */
static void finish_unit(const fai_plan *plan, const fai_tensors *t, const fai_unit *unit,
                        const unit_scratch *sc) {
    /* a run that leaves a stage out writes nothing to the tensors (fai_run_profiled_without) */
    if (!FAI_KEEPS(FAI_STAGE_STORE)) return;
    const int64_t heads = unit->heads, rows = unit->q_len * heads;
    const int64_t b = unit->batch;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t i = unit->q_begin + r / heads;
        const int64_t head_q = unit->head_q_begin + r % heads;
        const float sum = sc->row_sum[r], max = sc->row_max[r];
        const float sink = plan->pb.sinks ? t->sinks[head_q] : -INFINITY;
        /* a row saw nothing only if its max is still -inf; a NaN it saw stays NaN */
        if (max == -INFINITY) {
            write_zero_row(plan, t, sc->rows, b, i, head_q);
            if (t->lse.data && sink > -INFINITY) *fai__lse_at(&sc->rows->lse, b, i, head_q) = sink;
            continue;
        }
        float mul = 1.0f / sum, lse = max + logf(sum);
        if (sink > -INFINITY && !isnan(max)) {
            const float top = max > sink ? max : sink;
            const float kept = expf(max - top);
            const float total = sum * kept + expf(sink - top);
            mul = kept / total;
            lse = top + logf(total);
        }
        plan->cntx->store_row(fai__q_row(&sc->rows->o, b, i, head_q), t->o.dtype,
                              sc->o_acc + r * plan->ld_o, plan->head_dim_v, mul);
        if (t->lse.data) *fai__lse_at(&sc->rows->lse, b, i, head_q) = lse;
    }
    for (int64_t i = unit->pad_begin; i < unit->pad_end; i++)
        for (int64_t g = 0; g < heads; g++)
            write_zero_row(plan, t, sc->rows, b, i, unit->head_q_begin + g);
    FAI_LAP(FAI_STAGE_STORE);
}

/* -- split-KV -------------------------------------------------------------------------------- */

static float *part_slot(const fai_plan *plan, unsigned char *ws_base, int64_t slot) {
    return (float *)(ws_base + plan->ws.partials + (size_t)slot * plan->ws.partial_bytes);
}

/* Stores this part's O, m and l, and returns nonzero for the part that completes the unit: the
 * last to finish merges, whichever thread runs it. */
static int store_part(const fai_plan *plan, const fai_unit *unit, int64_t part,
                      const unit_scratch *sc, unsigned char *ws_base) {
    const int64_t rows = unit->q_len * unit->heads, ld_o = plan->ld_o, ld_s = plan->ld_s;
    float *slot = part_slot(plan, ws_base, unit->first_slot + part); /* O [rows, ld_o], m, l */
    memcpy(slot, sc->o_acc, (size_t)(rows * ld_o) * sizeof(float));
    memcpy(slot + rows * ld_o, sc->row_max, (size_t)ld_s * sizeof(float));
    memcpy(slot + rows * ld_o + ld_s, sc->row_sum, (size_t)ld_s * sizeof(float));
    atomic_llong *done = (atomic_llong *)(ws_base + plan->ws.counters) + unit->split_index;
    /* acq_rel: the releases of all parts form one sequence that the last part acquires */
    return atomic_fetch_add_explicit(done, 1, memory_order_acq_rel) + 1 == unit->parts;
}

/* Combines the unit's parts in part order (deterministic for the plan) into the scratch:
 * m = max m_p, l = sum l_p e^(m_p - m), O = sum O_p e^(m_p - m). */
static void merge_parts(const fai_plan *plan, const fai_unit *unit, const unit_scratch *sc,
                        unsigned char *ws_base) {
    const int64_t rows = unit->q_len * unit->heads, ld_o = plan->ld_o, ld_s = plan->ld_s;
    for (int64_t r = 0; r < rows; r++) {
        /* NaN (a part that saw a NaN) wins the max, so that it reaches the row */
        float max = -INFINITY;
        for (int64_t p = 0; p < unit->parts; p++) {
            const float part_max = part_slot(plan, ws_base, unit->first_slot + p)[rows * ld_o + r];
            if (part_max > max || isnan(part_max)) max = part_max;
        }
        float *o_row = sc->o_acc + r * ld_o;
        float sum = 0.0f;
        memset(o_row, 0, (size_t)ld_o * sizeof(float));
        for (int64_t p = 0; p < unit->parts && max != -INFINITY; p++) {
            const float *slot = part_slot(plan, ws_base, unit->first_slot + p);
            const float part_max = slot[rows * ld_o + r];
            if (part_max == -INFINITY) continue; /* this part saw nothing of the row */
            const float weight = expf(part_max - max);
            sum += slot[rows * ld_o + ld_s + r] * weight;
            for (int64_t x = 0; x < ld_o; x++)
                o_row[x] += slot[r * ld_o + x] * weight;
        }
        sc->row_max[r] = max;
        sc->row_sum[r] = sum;
    }
}

/* Units of one sequence and q tile (its kv heads, one after another in unit order) with the same
 * tiles run in lockstep, a tile of every head before the next tile: with token-major K/V the
 * heads of a token sit side by side, so a tile's memory is streamed once for all of them instead
 * of once per head (decode, chunked prefill). Each unit computes exactly what it would alone. */
static int64_t lockstep_count(const fai_plan *plan, const fai_worker *worker, int64_t u) {
    const fai_unit *first = &plan->units[u];
    int64_t count = 1;
    const int64_t most = fai__slots_per_thread(plan);
    /* the matrix engine runs one unit at a time, its tiles in a pipeline, and keeps a kv head's
     * packed tiles for its next q tiles instead */
    if (first->parts > 1 || most == 1) return 1;
    while (count < most && u + count < worker->unit_end) {
        const fai_unit *next = &plan->units[u + count];
        if (next->parts > 1 || next->batch != first->batch || next->q_begin != first->q_begin ||
            next->q_len != first->q_len || next->kv_tile_begin != first->kv_tile_begin ||
            next->kv_tiles != first->kv_tiles)
            break;
        count++;
    }
    return count;
}

/* The driver itself: fai__kernel_run_worker (fai_kernel.c) and, with stage timers,
 * fai__kernel_run_worker_profiled (fai_kernel_profiled.c). */
static inline void kernel_run_worker(const fai_plan *plan, const fai_tensors *t,
                                     int64_t worker_index, unsigned char *ws,
                                     unsigned char *ws_base) {
    FAI_LAP_START();
    fai_run_rows rows;
    fai__rows_resolve(plan, t, &rows);
    unit_scratch slots[FAI_LOCKSTEP_UNITS];
    const int64_t slot_count = fai__slots_per_thread(plan);
    for (int64_t k = 0; k < slot_count; k++)
        slots[k] = carve_scratch(plan, ws + (size_t)k * plan->ws.slot, &rows);
    if (plan->kv_cache_tiles > 0) {
        slots[0].kv_cache = ws + plan->ws.kv_cache;
        ((kv_cache_head *)slots[0].kv_cache)->batch = -1; /* nothing packed for this run yet */
    }
    const fai_worker *worker = &plan->worker[worker_index];
    if (plan->mx) plan->cntx->mx_enter();
    for (int64_t u = worker->unit_begin; u < worker->unit_end;) {
        const fai_unit *unit = &plan->units[u];
        if (unit->parts > 1) {
            /* a part: the worker's share of the unit's tiles on the line */
            const int64_t begin =
                worker->line_begin > unit->line_begin ? worker->line_begin : unit->line_begin;
            const int64_t unit_end = unit->line_begin + unit->kv_tiles;
            const int64_t end = worker->line_end < unit_end ? worker->line_end : unit_end;
            const int64_t part = u == worker->unit_begin ? worker->first_part : worker->last_part;
            compute_tiles(plan, t, unit, begin - unit->line_begin, end - unit->line_begin,
                          &slots[0]);
            FAI_LAP(FAI_STAGE_OTHER);
            const int last_part = store_part(plan, unit, part, &slots[0], ws_base);
            if (last_part) merge_parts(plan, unit, &slots[0], ws_base);
            FAI_LAP(FAI_STAGE_MERGE);
            if (last_part) finish_unit(plan, t, unit, &slots[0]);
            u++;
            continue;
        }
        const int64_t count = lockstep_count(plan, worker, u);
        if (unit->q_len > 0) {
            for (int64_t k = 0; k < count; k++)
                start_unit(plan, t, &plan->units[u + k], &slots[k]);
            const fai_unit *next = u + count < worker->unit_end ? &plan->units[u + count] : NULL;
            if (next && next->parts > 1) next = NULL;
            if (plan->mx) /* lockstep_count: 1 */
                mx_run_tiles(plan, t, unit, next, 0, unit->kv_tiles, &slots[0]);
            else
                for (int64_t tile = 0; tile < unit->kv_tiles; tile++) {
                    if (count == 1)
                        prefetch_rows_for_tile(plan, t, &rows, unit, next, tile, unit->kv_tiles);
                    for (int64_t k = 0; k < count; k++) {
                        /* what the thread computes next, in the lockstep's order: the next
                         * unit's tile, else the first unit's next tile, else the next units'
                         * first tile */
                        const fai_unit *after = next;
                        int64_t after_tile = 0;
                        if (k + 1 < count)
                            after = &plan->units[u + k + 1], after_tile = tile;
                        else if (tile + 1 < unit->kv_tiles)
                            after = unit, after_tile = tile + 1;
                        run_tile(plan, t, &plan->units[u + k], tile, &slots[k], after, after_tile);
                    }
                }
        }
        for (int64_t k = 0; k < count; k++)
            finish_unit(plan, t, &plan->units[u + k], &slots[k]);
        u += count;
    }
    if (plan->mx) plan->cntx->mx_leave();
}

#endif
