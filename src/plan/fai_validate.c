/* Validation of a problem description: every field is checked against its domain before the plan
 * looks at anything else, and the first failure names the field and its value. */
#include "fai_internal.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

/* Sizes above these are refused as absurd long before any arithmetic can overflow. */
#define MAX_BATCH (INT64_C(1) << 24)
#define MAX_HEADS (INT64_C(1) << 16)
#define MAX_SEQ INT64_C(2147483647) /* lengths travel as int32 */
#define MAX_TILE INT64_C(4096)

static fai_status check_range(const char *field, int64_t value, int64_t lo, int64_t hi) {
    if (value < lo || value > hi)
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "%s = %" PRId64 " is outside [%" PRId64 ", %" PRId64 "]", field, value, lo,
                         hi);
    return FAI_OK;
}

/* Q and O take the float dtypes; K and V (kv) the quantized ones too. */
static fai_status check_dtype(const char *field, fai_dtype dtype, int kv) {
    if (fai_dtype_size(dtype) == 0)
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "%s = %d is not a dtype (f32 0, f16 1, bf16 2, int8 3, e4m3 4, e5m2 5)",
                         field, (int)dtype);
    if (!kv && fai_dtype_is_quantized(dtype))
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "%s = %s: Q and O are f32, f16 or bf16 (only K and V may be quantized)",
                         field, fai_dtype_name(dtype));
    return FAI_OK;
}

static fai_status check_lengths(const char *field, const int32_t *lengths, int64_t batch,
                                int64_t max_len, const char *max_field) {
    for (int64_t b = 0; b < batch; b++) {
        if (lengths[b] < 0)
            return fai__fail(FAI_ERR_INVALID_ARG, "%s[%" PRId64 "] = %d is negative", field, b,
                             (int)lengths[b]);
        if (lengths[b] > max_len)
            return fai__fail(FAI_ERR_INVALID_ARG, "%s[%" PRId64 "] = %d is above %s = %" PRId64,
                             field, b, (int)lengths[b], max_field, max_len);
    }
    return FAI_OK;
}

static fai_status check_prefix_sums(const char *field, const int32_t *cu, int64_t batch,
                                    int64_t rows, const char *rows_field) {
    if (cu[0] != 0)
        return fai__fail(FAI_ERR_INVALID_ARG, "%s[0] = %d must be 0", field, (int)cu[0]);
    for (int64_t b = 0; b < batch; b++) {
        if (cu[b + 1] < cu[b])
            return fai__fail(FAI_ERR_INVALID_ARG,
                             "%s is not non-decreasing: %s[%" PRId64 "] = %d < %s[%" PRId64
                             "] = %d",
                             field, field, b + 1, (int)cu[b + 1], field, b, (int)cu[b]);
    }
    if (cu[batch] > rows)
        return fai__fail(FAI_ERR_INVALID_ARG, "%s[%" PRId64 "] = %d is above %s = %" PRId64 " rows",
                         field, batch, (int)cu[batch], rows_field, rows);
    return FAI_OK;
}

/* The defaults are told by their exact values (fai.h): FAI_SCALE_DEFAULT by its bits, as a NaN
 * compares equal to nothing. */
static int is_default_scale(float scale) {
    uint32_t bits;
    memcpy(&bits, &scale, sizeof bits);
    return bits == FAI_SCALE_DEFAULT_BITS;
}

void fai__problem_defaults(const fai_problem *pb, int64_t *head_dim_v, float *scale) {
    *head_dim_v = pb->head_dim_v == FAI_HEAD_DIM_V_DEFAULT ? pb->head_dim : pb->head_dim_v;
    *scale = is_default_scale(pb->scale) ? (float)(1.0 / sqrt((double)pb->head_dim)) : pb->scale;
}

fai_status fai__validate_problem(const fai_problem *pb) {
    if (!pb) return fai__fail(FAI_ERR_INVALID_ARG, "problem = NULL");
    /* switches are 0 or 1: another value is a caller's mistake, not a second way to say on */
    const struct {
        const char *name;
        int value;
    } switches[] = {{"alibi", pb->alibi},
                    {"sinks", pb->sinks},
                    {"round_p_bf16", pb->round_p_bf16},
                    {"trust_block_table", pb->trust_block_table},
                    {"trust_scales", pb->trust_scales},
                    {"k_channel_scales", pb->k_channel_scales},
                    {"ignore_tuning", pb->ignore_tuning}};
    for (size_t i = 0; i < sizeof switches / sizeof switches[0]; i++)
        if (switches[i].value != 0 && switches[i].value != 1)
            return fai__fail(FAI_ERR_INVALID_ARG, "%s = %d is not 0 (off) or 1 (on)",
                             switches[i].name, switches[i].value);
    FAI_TRY(check_range("batch", pb->batch, 0, MAX_BATCH));
    FAI_TRY(check_range("heads_q", pb->heads_q, 1, MAX_HEADS));
    FAI_TRY(check_range("heads_kv", pb->heads_kv, 1, MAX_HEADS));
    if (pb->heads_q % pb->heads_kv != 0)
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "heads_q = %" PRId64 " is not a multiple of heads_kv = %" PRId64,
                         pb->heads_q, pb->heads_kv);
    FAI_TRY(check_range("seq_q", pb->seq_q, 0, MAX_SEQ));
    /* seq_kv sizes nothing when paged: wrappers may set it to the table's capacity */
    if (pb->page_size <= 0) FAI_TRY(check_range("seq_kv", pb->seq_kv, 0, MAX_SEQ));
    FAI_TRY(check_range("head_dim", pb->head_dim, 1, FAI_MAX_HEAD_DIM));
    if (pb->head_dim_v != FAI_HEAD_DIM_V_DEFAULT)
        FAI_TRY(check_range("head_dim_v", pb->head_dim_v, 1, FAI_MAX_HEAD_DIM));
    FAI_TRY(check_dtype("q_dtype", pb->q_dtype, 0));
    FAI_TRY(check_dtype("k_dtype", pb->k_dtype, 1));
    FAI_TRY(check_dtype("v_dtype", pb->v_dtype, 1));
    FAI_TRY(check_dtype("o_dtype", pb->o_dtype, 0));
    if (pb->k_channel_scales && !fai_dtype_is_quantized(pb->k_dtype))
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "k_channel_scales = %d with k_dtype = %s: per-channel scales belong to a "
                         "quantized K (int8, e4m3, e5m2)",
                         pb->k_channel_scales, fai_dtype_name(pb->k_dtype));
    if (!isfinite(pb->scale) && !is_default_scale(pb->scale))
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "scale = %g is not finite (FAI_SCALE_DEFAULT asks for 1/sqrt(head_dim))",
                         (double)pb->scale);
    if (pb->causal != FAI_CAUSAL_NONE && pb->causal != FAI_CAUSAL_BOTTOM_RIGHT &&
        pb->causal != FAI_CAUSAL_TOP_LEFT)
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "causal = %d is not one of none 0, bottom-right 1, top-left 2",
                         (int)pb->causal);
    FAI_TRY(check_range("window_left", pb->window_left, -1, MAX_SEQ));
    FAI_TRY(check_range("window_right", pb->window_right, -1, MAX_SEQ));
    if (pb->mask_kind != FAI_MASK_NONE && pb->mask_kind != FAI_MASK_KEEP &&
        pb->mask_kind != FAI_MASK_DROP && pb->mask_kind != FAI_MASK_ADD &&
        pb->mask_kind != FAI_MASK_KEEP_BITS)
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "mask_kind = %d is not one of none 0, keep 1, drop 2, add 3, keep_bits 4",
                         (int)pb->mask_kind);
    /* -- score modifiers -- */
    if (!(pb->softcap >= 0.0f) || pb->softcap == INFINITY)
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "softcap = %g: a cap is finite and positive (0: no soft-capping)",
                         (double)pb->softcap);
    /* the scores are divided by the cap as a product with 1 / softcap, which a cap below
     * 1 / FLT_MAX (subnormal) takes past float32: 0 x Inf would then make a score of 0 NaN */
    if (pb->softcap > 0.0f && !(1.0f / pb->softcap <= FLT_MAX))
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "softcap = %g is too small: 1 / softcap overflows float32 (a cap is 0, "
                         "none, or about 1 / FLT_MAX = 2.9e-39 or more)",
                         (double)pb->softcap);
    FAI_TRY(check_range("workers", pb->workers, 0, FAI_MAX_WORKERS));
    if (pb->split != FAI_SPLIT_AUTO && pb->split != FAI_SPLIT_UNITS &&
        pb->split != FAI_SPLIT_GREEDY)
        return fai__fail(FAI_ERR_INVALID_ARG, "split = %d is not one of auto 0, units 1, greedy 2",
                         (int)pb->split);
    FAI_TRY(check_range("threads", pb->threads, 0, FAI_MAX_WORKERS));
    FAI_TRY(check_range("tile_q", pb->tile_q, 0, MAX_TILE));
    FAI_TRY(check_range("tile_kv", pb->tile_kv, 0, MAX_TILE));
    FAI_TRY(check_range("pipeline_tiles", pb->pipeline_tiles, 0, 2));

    /* -- lengths -- */
    if (pb->seqlens_q && pb->cu_seqlens_q)
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "seqlens_q and cu_seqlens_q are both set: give one of them");
    if (pb->seqlens_kv && pb->cu_seqlens_kv)
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "seqlens_kv and cu_seqlens_kv are both set: give one of them");
    if (pb->seqlens_q)
        FAI_TRY(check_lengths("seqlens_q", pb->seqlens_q, pb->batch, pb->seq_q, "seq_q"));
    if (pb->cu_seqlens_q)
        FAI_TRY(check_prefix_sums("cu_seqlens_q", pb->cu_seqlens_q, pb->batch, pb->seq_q, "seq_q"));

    /* -- global positions -- */
    if ((pb->q_positions == NULL) != (pb->kv_positions == NULL))
        return fai__fail(FAI_ERR_INVALID_ARG, "%s is set but %s = NULL: give both or neither",
                         pb->q_positions ? "q_positions" : "kv_positions",
                         pb->q_positions ? "kv_positions" : "q_positions");
    if (pb->q_positions) {
        FAI_TRY(check_lengths("q_positions", pb->q_positions, pb->batch, MAX_SEQ, "INT32_MAX"));
        FAI_TRY(check_lengths("kv_positions", pb->kv_positions, pb->batch, MAX_SEQ, "INT32_MAX"));
    }

    /* -- paged KV -- */
    FAI_TRY(check_range("page_size", pb->page_size, 0, MAX_SEQ));
    if (pb->page_size > 0) {
        if (pb->cu_seqlens_kv)
            return fai__fail(FAI_ERR_INVALID_ARG,
                             "cu_seqlens_kv is set with page_size = %" PRId64
                             ": paged KV takes seqlens_kv",
                             pb->page_size);
        if (!pb->seqlens_kv)
            return fai__fail(FAI_ERR_INVALID_ARG,
                             "seqlens_kv = NULL with page_size = %" PRId64
                             ": paged KV needs the lengths",
                             pb->page_size);
        FAI_TRY(check_range("num_pages", pb->num_pages, 0, MAX_SEQ));
        FAI_TRY(check_range("pages_per_seq", pb->pages_per_seq, 0, MAX_SEQ));
        int64_t capacity;
        if (!fai__mul_ok(pb->pages_per_seq, pb->page_size, &capacity) || capacity > MAX_SEQ)
            capacity = MAX_SEQ;
        for (int64_t b = 0; b < pb->batch; b++) {
            if (pb->seqlens_kv[b] < 0)
                return fai__fail(FAI_ERR_INVALID_ARG, "seqlens_kv[%" PRId64 "] = %d is negative", b,
                                 (int)pb->seqlens_kv[b]);
            if (pb->seqlens_kv[b] > capacity)
                return fai__fail(FAI_ERR_INVALID_ARG,
                                 "seqlens_kv[%" PRId64 "] = %d runs past the block table: "
                                 "pages_per_seq = %" PRId64 " x page_size = %" PRId64,
                                 b, (int)pb->seqlens_kv[b], pb->pages_per_seq, pb->page_size);
        }
    } else {
        /* pages given without a page size are a pool computed wrongly, not a dense K/V */
        if (pb->num_pages != 0 || pb->pages_per_seq != 0)
            return fai__fail(FAI_ERR_INVALID_ARG,
                             "%s = %" PRId64 " with page_size = %" PRId64
                             ": a paged K/V needs page_size >= 1 (dense: 0 pages)",
                             pb->num_pages != 0 ? "num_pages" : "pages_per_seq",
                             pb->num_pages != 0 ? pb->num_pages : pb->pages_per_seq, pb->page_size);
        if (pb->seqlens_kv)
            FAI_TRY(check_lengths("seqlens_kv", pb->seqlens_kv, pb->batch, pb->seq_kv, "seq_kv"));
        if (pb->cu_seqlens_kv)
            FAI_TRY(check_prefix_sums("cu_seqlens_kv", pb->cu_seqlens_kv, pb->batch, pb->seq_kv,
                                      "seq_kv"));
    }
    if (pb->cu_seqlens_q && pb->batch == 0 && pb->seq_q > 0)
        return fai__fail(FAI_ERR_INVALID_ARG,
                         "seq_q = %" PRId64 " packed rows with batch = 0 sequences", pb->seq_q);

    /* -- sizes of every tensor must be addressable -- */
    int64_t dv;
    float scale;
    fai__problem_defaults(pb, &dv, &scale);
    int64_t elements;
    const int64_t q_batch = pb->cu_seqlens_q ? 1 : pb->batch;
    const int64_t widest = pb->head_dim > dv ? pb->head_dim : dv;
    if (!fai__mul_ok(q_batch, pb->seq_q, &elements) ||
        !fai__mul_ok(elements, pb->heads_q, &elements) ||
        !fai__mul_ok(elements, widest, &elements) || elements > (INT64_MAX >> 3))
        return fai__fail(FAI_ERR_OVERFLOW,
                         "batch = %" PRId64 " x seq_q = %" PRId64 " x heads_q = %" PRId64
                         " x head_dim = %" PRId64 " overflows the address space",
                         pb->batch, pb->seq_q, pb->heads_q, widest);
    /* K and V: a page pool, a packed tensor, or a padded batch */
    const int64_t kv_slots = pb->page_size > 0 ? pb->num_pages : pb->cu_seqlens_kv ? 1 : pb->batch;
    const int64_t kv_rows = pb->page_size > 0 ? pb->page_size : pb->seq_kv;
    if (!fai__mul_ok(kv_slots, kv_rows, &elements) ||
        !fai__mul_ok(elements, pb->heads_kv, &elements) ||
        !fai__mul_ok(elements, widest, &elements) || elements > (INT64_MAX >> 3))
        return fai__fail(FAI_ERR_OVERFLOW,
                         "%s = %" PRId64 " x %s = %" PRId64 " x heads_kv = %" PRId64
                         " x head_dim = %" PRId64 " overflows the address space",
                         pb->page_size > 0 ? "num_pages" : "batch", kv_slots,
                         pb->page_size > 0 ? "page_size" : "seq_kv", kv_rows, pb->heads_kv, widest);
    return FAI_OK;
}
