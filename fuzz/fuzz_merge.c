/* fuzz_merge.c - fai_merge_states, then fai_apply_sinks on its result, on arbitrary calls,
 * checked against a long-double reference of the formulas in fai.h.
 *
 * The input decodes into a merge of up to 4 parts of a few rows (batch, seq, heads) and channels:
 * every dtype of the parts and of the output (and values that are none), strides dense,
 * head-major, padded or arbitrary (zero ones broadcast a part; an output's rows may share
 * memory), negative or overflowing strides, a part repeated, the output in place of a part (the
 * same tensor) or overlapping one, lse_out absent (data NULL), in place or overlapping, NULL
 * pointers; LSE values finite (small, huge, tiny, nearly equal), -inf, +inf and NaN, O values
 * with NaN, +-Inf, subnormals and values past f16's range. The sinks then added are finite,
 * -inf, near the LSE, huge, or NaN and +inf (refused). Every tensor lives in a buffer between
 * guard bytes of a known pattern. Whatever the call:
 *   - no crash, no undefined behaviour (ASan, UBSan);
 *   - a call fai.h says is refused (NULL arrays, negative sizes, head_dim outside [1, 576], a
 *     dtype other than f32, f16, bf16 for O and f32 for the LSE, a NULL data pointer, a negative
 *     stride, stride_dim other than 0 or 1, offsets past int64, outputs placed over what is read:
 *     an output's rows sharing memory (or its dimensions interleaved), O and LSE outputs
 *     overlapping, an output overlapping a part it is not; for the sinks NaN or +inf) fails, and
 *     every other call succeeds;
 *   - a failure has a status with a name and a printable one-line fai_last_error(), and leaves
 *     every byte of every buffer (guards included) as it was;
 *   - a success clears fai_last_error() and writes nothing but the output's elements, each row
 *     the formula's: a row whose parts are all -inf has O = 0 and LSE = -inf, a NaN or +inf part
 *     makes O and LSE NaN, NaN and Inf in a weighed part's O reach the row, and finite values
 *     agree within the tolerances below;
 *   - fai_apply_sinks on the merged rows: a sink of -inf changes nothing, an LSE of -inf becomes
 *     the sink with O unchanged, a NaN LSE stays NaN, and otherwise LSE' = log(e^LSE + e^sink)
 *     and O' = O e^(LSE - LSE') within the same tolerances.
 *
 * Tolerances. The reference is the exact formula in long double. A stored O element may differ
 * from it by half an ulp of the output dtype (the double result rounded once), plus 2^-40 of
 * the magnitude sum_p w_p |O_p| /
 * sum_p w_p (double accumulation, with room for exp and log). f16 saturates finite values at
 * +-65504; bf16 past its range may round to +-Inf. An LSE may differ by half an ulp of f32 plus
 * 2^-40 (|max LSE| + 1). After the sinks, O' is held to the same bound with the magnitude |O'|,
 * and LSE' to half an ulp of f32 plus 2^-40 (max(|LSE|, |sink|) + 1). A weighed part's +-Inf may
 * come out NaN where its weight underflows double (e^(LSE_p - max) below 2^-1020), and so may an
 * Inf in O rescaled by a factor below 2^-1020. */
#include "fai.h"
#include "fuzz_formats.h"
#include "fuzz_input.h"

#include <inttypes.h>
#include <stdio.h>

#define MAX_PARTS 4
/* Payload bytes per buffer; larger layouts are skipped. */
#define BUDGET (INT64_C(1) << 20)
#define ACC_SLACK 0x1p-40L
/* slack past a part's extent, so that an output overlapping it stays inside its buffer */
#define SLACK_BYTES ((2 * FAI_MAX_HEAD_DIM + 8) * 4)

/* The input's layout: one byte per field, then 8 bytes of the seed of the values. */
enum {
    F_COUNT_P, /* parts: 1..4, or >= 252: 0 or -1 */
    F_BATCH,
    F_SEQ,
    F_HEADS,
    F_HEAD_DIM,
    F_OUT_DTYPE,
    F_PART_DTYPE,                             /* 4 bytes */
    F_PART_LAYOUT = F_PART_DTYPE + MAX_PARTS, /* 4 bytes: O_* */
    F_PART_ARG = F_PART_LAYOUT + MAX_PARTS,   /* 4 bytes */
    F_LSE_LAYOUT = F_PART_ARG + MAX_PARTS,    /* 4 bytes: LSE_* */
    F_LSE_KIND = F_LSE_LAYOUT + MAX_PARTS,    /* 4 bytes: each part's LSE around the row's base */
    F_LSE_BASE = F_LSE_KIND + MAX_PARTS,      /* the rows' base LSE: small, huge, tiny, large */
    F_O_KIND,
    F_O_SPECIAL, /* < 200: up to 4 NaN / +-Inf per part */
    F_OUT_MODE,  /* OUT_* */
    F_OUT_A,
    F_OUT_B,
    F_LSE_OUT_MODE, /* LOUT_* */
    F_LSE_OUT_A,
    F_IN_PLACE, /* the part an in-place or overlapping output is */
    F_NULLS,    /* >= 240: o_parts or lse_parts NULL */
    F_SINK_KIND,
    F_SINK_BAD, /* < 64: one sink NaN or +inf; 64..71: sinks NULL */
    F_COUNT
};

enum {
    O_DENSE,
    O_HEAD_MAJOR,
    O_PADDED,
    O_RAW,
    O_REPEAT,
    O_NEGATIVE,
    O_STRIDE_DIM,
    O_DATA_NULL,
    O_OVERFLOW,
    O_MODES
};
enum { LSE_BSH, LSE_BHS, LSE_RAW, LSE_NEGATIVE, LSE_F16, LSE_DATA_NULL, LSE_MODES };
enum {
    OUT_DENSE,
    OUT_HEAD_MAJOR,
    OUT_PADDED,
    OUT_RAW,
    OUT_IN_PLACE,
    OUT_OVERLAP,
    OUT_NEGATIVE,
    OUT_STRIDE_DIM,
    OUT_DATA_NULL,
    OUT_NULL,
    OUT_OVERFLOW,
    OUT_MODES
};
enum {
    LOUT_BSH,
    LOUT_BHS,
    LOUT_RAW,
    LOUT_DATA_NULL,
    LOUT_IN_PLACE,
    LOUT_OVERLAP,
    LOUT_NEGATIVE,
    LOUT_NULL,
    LOUT_F16,
    LOUT_MODES
};
/* buffers: the parts' O and LSE, the outputs, the sinks */
enum { B_O = 0, B_LSE = MAX_PARTS, B_OUT = 2 * MAX_PARTS, B_LSE_OUT, B_SINKS, B_COUNT };

typedef struct merge_call {
    int64_t count, parts, batch, seq, heads, dim, rows;
    fai_tensor o[MAX_PARTS], lse[MAX_PARTS], o_out, lse_out;
    float *sinks;
    const fai_tensor *o_arg, *lse_arg, *o_out_arg, *lse_out_arg;
    int part_mode[MAX_PARTS], lse_mode[MAX_PARTS], out_mode, lse_out_mode, in_place;
    fuzz_buffer buf[B_COUNT];
} merge_call;

static int o_dtype_ok(fai_dtype d) { return d >= FAI_DTYPE_F32 && d <= FAI_DTYPE_BF16; }

static int64_t element_size(fai_dtype d) {
    return d == FAI_DTYPE_F16 || d == FAI_DTYPE_BF16 ? 2 : 4;
}

/* Bytes from data to one past the last element the rows [batch, seq, heads] of `tail` elements
 * address (strides by magnitude); 0 without rows; -1 when the byte offset overflows int64. */
static int64_t extent(const merge_call *c, const fai_tensor *t, int64_t tail) {
    const int64_t counts[3] = {c->batch, c->seq, c->heads};
    const int64_t strides[3] = {t->stride_batch, t->stride_seq, t->stride_head};
    return fuzz_extent(counts, strides, tail, element_size(t->dtype));
}

static int64_t at(const fai_tensor *t, int64_t b, int64_t i, int64_t h) {
    return b * t->stride_batch + i * t->stride_seq + h * t->stride_head;
}

static int negative(const fai_tensor *t) {
    return t->stride_batch < 0 || t->stride_seq < 0 || t->stride_head < 0;
}

static int same_tensor(const fai_tensor *a, const fai_tensor *b) {
    return a->data == b->data && a->dtype == b->dtype && a->stride_batch == b->stride_batch &&
           a->stride_seq == b->stride_seq && a->stride_head == b->stride_head;
}

static int lse_out_given(const merge_call *c) { return c->lse_out_arg && c->lse_out.data; }

static void describe(const merge_call *c) {
    fprintf(stderr,
            "fuzz_merge: count %" PRId64 " batch %" PRId64 " seq %" PRId64 " heads %" PRId64
            " head_dim %" PRId64 ", out mode %d lse_out mode %d in place %d\n",
            c->count, c->batch, c->seq, c->heads, c->dim, c->out_mode, c->lse_out_mode,
            c->in_place);
    for (int64_t p = 0; p < c->parts; p++)
        fprintf(stderr,
                "fuzz_merge: part %" PRId64 ": O %d (mode %d, strides %" PRId64 " %" PRId64
                " %" PRId64 " dim %" PRId64 "), LSE %d (mode %d, strides %" PRId64 " %" PRId64
                " %" PRId64 ")\n",
                p, (int)c->o[p].dtype, c->part_mode[p], c->o[p].stride_batch, c->o[p].stride_seq,
                c->o[p].stride_head, c->o[p].stride_dim, (int)c->lse[p].dtype, c->lse_mode[p],
                c->lse[p].stride_batch, c->lse[p].stride_seq, c->lse[p].stride_head);
    fprintf(stderr,
            "fuzz_merge: o_out %d (strides %" PRId64 " %" PRId64 " %" PRId64 " dim %" PRId64
            "), lse_out strides %" PRId64 " %" PRId64 " %" PRId64 "\n",
            (int)c->o_out.dtype, c->o_out.stride_batch, c->o_out.stride_seq, c->o_out.stride_head,
            c->o_out.stride_dim, c->lse_out.stride_batch, c->lse_out.stride_seq,
            c->lse_out.stride_head);
}

/* -- what fai.h says must be refused, and what it leaves undefined ----------------------------- */

static const char *tensor_refusal(const merge_call *c, const fai_tensor *t, int lse) {
    if (!t->data) return "a NULL data pointer";
    if (lse ? t->dtype != FAI_DTYPE_F32 : !o_dtype_ok(t->dtype)) return "a dtype not allowed";
    if (!lse && t->stride_dim != 0 && t->stride_dim != 1) return "a stride_dim other than 0, 1";
    if (negative(t)) return "a negative stride";
    if (extent(c, t, lse ? 1 : c->dim) < 0) return "offsets past int64";
    return NULL;
}

/* Whether two tensors' bytes meet (each [data, data + extent)). */
static int spans_meet(const merge_call *c, const fai_tensor *a, int64_t a_tail, const fai_tensor *b,
                      int64_t b_tail) {
    const uintptr_t a0 = (uintptr_t)a->data, b0 = (uintptr_t)b->data;
    const uintptr_t a1 = a0 + (uintptr_t)extent(c, a, a_tail);
    const uintptr_t b1 = b0 + (uintptr_t)extent(c, b, b_tail);
    return a0 < b1 && b0 < a1;
}

/* The very tensor (strides along dimensions of one index are never followed). */
static int same_place(const merge_call *c, const fai_tensor *a, const fai_tensor *b) {
    return a->data == b->data && a->dtype == b->dtype &&
           (c->batch < 2 || a->stride_batch == b->stride_batch) &&
           (c->seq < 2 || a->stride_seq == b->stride_seq) &&
           (c->heads < 2 || a->stride_head == b->stride_head);
}

/* Whether a tensor's rows follow fai.h's rule for an output: its dimensions of more than one
 * index, by increasing stride, each past all that the smaller ones span (rows that meet fail it,
 * and so do interleaved dimensions whose rows would not meet). */
static int rows_placed(const merge_call *c, const fai_tensor *t, int64_t tail) {
    int64_t count[3] = {c->batch, c->seq, c->heads};
    int64_t stride[3] = {t->stride_batch, t->stride_seq, t->stride_head};
    for (int i = 0; i < 3; i++)
        for (int j = i + 1; j < 3; j++)
            if (stride[j] < stride[i]) {
                const int64_t s = stride[i], n = count[i];
                stride[i] = stride[j], count[i] = count[j];
                stride[j] = s, count[j] = n;
            }
    int64_t span = tail;
    for (int i = 0; i < 3; i++) {
        if (count[i] < 2) continue;
        if (stride[i] < span) return 0;
        span += stride[i] * (count[i] - 1);
    }
    return 1;
}

/* Outputs placed where the merge reads what it writes: each output row its own place, O and LSE
 * outputs apart, and each apart from every part it is not itself. */
static const char *placement_refusal(const merge_call *c) {
    const int lse_out = lse_out_given(c);
    if (!rows_placed(c, &c->o_out, c->dim)) return "o_out rows not each in a place of their own";
    if (lse_out && !rows_placed(c, &c->lse_out, 1))
        return "lse_out rows not each in a place of their own";
    if (lse_out && spans_meet(c, &c->o_out, c->dim, &c->lse_out, 1))
        return "o_out and lse_out overlap";
    for (int64_t p = 0; p < c->count; p++) {
        if (!same_place(c, &c->o_out, &c->o[p]) &&
            spans_meet(c, &c->o_out, c->dim, &c->o[p], c->dim))
            return "o_out overlaps a part's O";
        if (spans_meet(c, &c->o_out, c->dim, &c->lse[p], 1)) return "o_out overlaps a part's LSE";
        if (!lse_out) continue;
        if (!same_place(c, &c->lse_out, &c->lse[p]) && spans_meet(c, &c->lse_out, 1, &c->lse[p], 1))
            return "lse_out overlaps a part's LSE";
        if (spans_meet(c, &c->lse_out, 1, &c->o[p], c->dim)) return "lse_out overlaps a part's O";
    }
    return NULL;
}

static const char *merge_refusal(const merge_call *c) {
    if (!c->o_arg || !c->lse_arg || !c->o_out_arg) return "a NULL array";
    if (c->batch < 0 || c->seq < 0 || c->heads < 0) return "a negative size";
    if (c->dim < 1 || c->dim > FAI_MAX_HEAD_DIM) return "head_dim outside [1, 576]";
    if (c->rows == 0 || c->count < 1) return NULL; /* nothing to merge: either way */
    for (int64_t p = 0; p < c->count; p++) {
        const char *why = tensor_refusal(c, &c->o[p], 0);
        if (!why) why = tensor_refusal(c, &c->lse[p], 1);
        if (why) return why;
    }
    const char *why = tensor_refusal(c, &c->o_out, 0);
    if (!why && lse_out_given(c)) why = tensor_refusal(c, &c->lse_out, 1);
    return why ? why : placement_refusal(c);
}

/* Whether two rows of a tensor (every b, i, h) have an element in one place. */
static int rows_share(const merge_call *c, const fai_tensor *t, int64_t tail) {
    const int64_t count = extent(c, t, tail) / element_size(t->dtype);
    unsigned char *seen = calloc((size_t)(count > 0 ? count : 1), 1);
    CHECK(seen != NULL);
    int shared = 0;
    for (int64_t b = 0; b < c->batch && !shared; b++)
        for (int64_t i = 0; i < c->seq && !shared; i++)
            for (int64_t h = 0; h < c->heads && !shared; h++)
                for (int64_t x = 0, row = at(t, b, i, h); x < tail && !shared; x++)
                    shared = seen[row + x]++ != 0;
    free(seen);
    return shared;
}

/* -- the reference ----------------------------------------------------------------------------- */

/* A value from the snapshot taken before the call (an in-place output overwrites its part). */
static double before(const merge_call *c, const fai_tensor *t, int64_t index) {
    for (int i = 0; i < B_COUNT; i++)
        if (fuzz_buffer_holds(&c->buf[i], t->data, 1)) {
            const unsigned char *p =
                c->buf[i].before + ((const unsigned char *)t->data - c->buf[i].base);
            return fuzz_load(p, index, t->dtype);
        }
    CHECK(!"a tensor outside the buffers");
    return 0.0;
}

static double ulp(fai_dtype dtype, long double v) { return fuzz_ulp(dtype, (double)v); }

/* A stored O element against the finite reference `ref` (see the tolerances above). */
static int value_ok(fai_dtype dtype, double got, long double ref, long double magnitude) {
    const double max = fuzz_max(dtype);
    if (dtype == FAI_DTYPE_F16 && fabsl(ref) > max) return got == copysign(max, (double)ref);
    if (dtype == FAI_DTYPE_BF16 && fabsl(ref) > max)
        return fabs(got) >= max && signbit(got) == signbit((double)ref);
    if (!isfinite(got)) return 0;
    return fabsl((long double)got - ref) <= 0.5L * ulp(dtype, ref) + ACC_SLACK * magnitude;
}

static int lse_ok(double got, long double ref, long double magnitude) {
    if (!isfinite(got)) return 0;
    return fabsl((long double)got - ref) <= 0.5L * ulp(FAI_DTYPE_F32, ref) + ACC_SLACK * magnitude;
}

/* What one merged row must hold: its O elements (ref, or a class when not finite) and LSE. */
typedef enum { R_FINITE, R_NAN, R_POS_INF, R_NEG_INF, R_INF_OR_NAN, R_ZERO } ref_class;

typedef struct merged_row {
    ref_class cls[FAI_MAX_HEAD_DIM];
    long double ref[FAI_MAX_HEAD_DIM], magnitude[FAI_MAX_HEAD_DIM];
    ref_class lse_cls;
    long double lse, lse_magnitude;
} merged_row;

static void merge_reference(const merge_call *c, int64_t b, int64_t i, int64_t h, merged_row *r) {
    double lse[MAX_PARTS];
    int nan = 0, finite = 0;
    long double m = -INFINITY;
    for (int64_t p = 0; p < c->count; p++) {
        lse[p] = before(c, &c->lse[p], at(&c->lse[p], b, i, h));
        nan |= isnan(lse[p]) || lse[p] == INFINITY;
        finite |= isfinite(lse[p]);
        if (isfinite(lse[p]) && lse[p] > m) m = lse[p];
    }
    if (nan || !finite) { /* NaN or +inf in a part: NaN; every part -inf: O = 0, LSE = -inf */
        for (int64_t x = 0; x < c->dim; x++)
            r->cls[x] = nan ? R_NAN : R_ZERO;
        r->lse_cls = nan ? R_NAN : R_NEG_INF;
        return;
    }
    long double w[MAX_PARTS], sum = 0.0L;
    for (int64_t p = 0; p < c->count; p++) {
        w[p] = lse[p] == -INFINITY ? 0.0L : expl((long double)lse[p] - m);
        sum += w[p];
    }
    r->lse_cls = R_FINITE;
    r->lse = m + logl(sum);
    r->lse_magnitude = fabsl(m) + 1.0L;
    for (int64_t x = 0; x < c->dim; x++) {
        long double acc = 0.0L, magnitude = 0.0L;
        int has_nan = 0, pos = 0, neg = 0, underflow = 0;
        for (int64_t p = 0; p < c->count; p++) {
            if (lse[p] == -INFINITY) continue; /* contributes nothing */
            const double v = before(c, &c->o[p], at(&c->o[p], b, i, h) + x);
            if (isnan(v)) {
                has_nan = 1;
            } else if (isinf(v)) {
                pos |= v > 0, neg |= v < 0;
                underflow |= w[p] < 0x1p-1020L;
            } else {
                acc += w[p] * v;
                magnitude += w[p] * fabs(v);
            }
        }
        r->ref[x] = acc / sum;
        r->magnitude[x] = magnitude / sum;
        r->cls[x] = has_nan || (pos && neg)     ? R_NAN
                    : underflow && (pos || neg) ? R_INF_OR_NAN
                    : pos                       ? R_POS_INF
                    : neg                       ? R_NEG_INF
                                                : R_FINITE;
        if (r->cls[x] == R_INF_OR_NAN) r->ref[x] = pos ? INFINITY : -INFINITY;
    }
}

/* Whether a stored element matches a row's element of class `cls`. */
static int element_ok(fai_dtype dtype, double got, ref_class cls, long double ref,
                      long double magnitude) {
    switch (cls) {
    case R_NAN:
        return isnan(got);
    case R_POS_INF:
        return got == INFINITY;
    case R_NEG_INF:
        return got == -INFINITY;
    case R_INF_OR_NAN:
        return isnan(got) || got == (double)ref;
    case R_ZERO:
        return got == 0.0;
    default:
        return value_ok(dtype, got, ref, magnitude);
    }
}

static void row_failed(const merge_call *c, const char *what, int64_t b, int64_t i, int64_t h,
                       int64_t x, double got, long double ref, int cls) {
    describe(c);
    fprintf(stderr,
            "fuzz_merge: %s of row (%" PRId64 ", %" PRId64 ", %" PRId64 ") element %" PRId64
            ": got %.9g, reference %.12Lg (class %d)\n",
            what, b, i, h, x, got, ref, cls);
    for (int64_t p = 0; p < c->count; p++)
        fprintf(stderr, "fuzz_merge:   part %" PRId64 ": LSE %.9g, O %.9g\n", p,
                before(c, &c->lse[p], at(&c->lse[p], b, i, h)),
                x >= 0 ? before(c, &c->o[p], at(&c->o[p], b, i, h) + x) : 0.0);
    abort();
}

/* Every output element position holds the result of one of the rows written there (exactly one
 * unless the output's rows share memory). */
static void check_merged(const merge_call *c) {
    const int64_t o_count = extent(c, &c->o_out, c->dim) / element_size(c->o_out.dtype);
    const int64_t l_count = lse_out_given(c) ? extent(c, &c->lse_out, 1) / 4 : 0;
    unsigned char *o_ok = calloc((size_t)o_count + 1, 1), *o_seen = calloc((size_t)o_count + 1, 1);
    unsigned char *l_ok = calloc((size_t)l_count + 1, 1), *l_seen = calloc((size_t)l_count + 1, 1);
    merged_row *r = malloc(sizeof *r);
    CHECK(o_ok && o_seen && l_ok && l_seen && r);
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t i = 0; i < c->seq; i++)
            for (int64_t h = 0; h < c->heads; h++) {
                merge_reference(c, b, i, h, r);
                const int64_t row = at(&c->o_out, b, i, h);
                for (int64_t x = 0; x < c->dim; x++) {
                    const double got = fuzz_load(c->o_out.data, row + x, c->o_out.dtype);
                    o_seen[row + x] = 1;
                    o_ok[row + x] |=
                        element_ok(c->o_out.dtype, got, r->cls[x], r->ref[x], r->magnitude[x]);
                }
                if (!lse_out_given(c)) continue;
                const int64_t l = at(&c->lse_out, b, i, h);
                const double got = fuzz_load(c->lse_out.data, l, FAI_DTYPE_F32);
                l_seen[l] = 1;
                l_ok[l] |= r->lse_cls == R_NAN       ? isnan(got)
                           : r->lse_cls == R_NEG_INF ? got == -INFINITY
                                                     : lse_ok(got, r->lse, r->lse_magnitude);
            }
    /* report the first row whose element is wrong */
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t i = 0; i < c->seq; i++)
            for (int64_t h = 0; h < c->heads; h++) {
                const int64_t row = at(&c->o_out, b, i, h);
                for (int64_t x = 0; x < c->dim; x++)
                    if (o_seen[row + x] && !o_ok[row + x]) {
                        merge_reference(c, b, i, h, r);
                        row_failed(c, "merged O", b, i, h, x,
                                   fuzz_load(c->o_out.data, row + x, c->o_out.dtype), r->ref[x],
                                   (int)r->cls[x]);
                    }
                const int64_t l = lse_out_given(c) ? at(&c->lse_out, b, i, h) : 0;
                if (lse_out_given(c) && !l_ok[l]) {
                    merge_reference(c, b, i, h, r);
                    row_failed(c, "merged LSE", b, i, h, -1,
                               fuzz_load(c->lse_out.data, l, FAI_DTYPE_F32), r->lse,
                               (int)r->lse_cls);
                }
            }
    free(o_ok);
    free(o_seen);
    free(l_ok);
    free(l_seen);
    free(r);
}

/* fai_apply_sinks' rows against the values the merge left (the snapshot before it). */
static void check_sinks(const merge_call *c) {
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t i = 0; i < c->seq; i++)
            for (int64_t h = 0; h < c->heads; h++) {
                const long double sink = c->sinks[h];
                const int64_t l = at(&c->lse_out, b, i, h), row = at(&c->o_out, b, i, h);
                const double lse = before(c, &c->lse_out, l);
                const double lse_new = fuzz_load(c->lse_out.data, l, FAI_DTYPE_F32);
                int lse_right;
                long double mul = 1.0L, magnitude = 0.0L;
                if (sink == -INFINITY) { /* no sink: nothing moves */
                    lse_right = lse_new == lse || (isnan(lse_new) && isnan(lse));
                } else if (isnan(lse)) {
                    lse_right = isnan(lse_new);
                } else if (lse == -INFINITY) { /* saw nothing: the sink alone, O stays 0 */
                    lse_right = lse_new == (double)sink;
                } else {
                    /* e^(LSE - LSE') = 1 / (1 + e^(sink - LSE)): from the difference, which
                     * keeps its digits however large the LSE is */
                    const long double top = fmaxl(lse, sink), gap = sink - (long double)lse;
                    const long double total = top + log1pl(expl(-fabsl(gap)));
                    mul = 1.0L / (1.0L + expl(gap));
                    magnitude = fmaxl(fabsl((long double)lse), fabsl(sink)) + 1.0L;
                    lse_right = lse_ok(lse_new, total, magnitude);
                }
                if (!lse_right) {
                    fprintf(stderr, "fuzz_merge: LSE %.9g, sink %.9Lg\n", lse, sink);
                    row_failed(c, "LSE after the sinks", b, i, h, -1, lse_new, sink, -1);
                }
                for (int64_t x = 0; x < c->dim; x++) {
                    const double o = before(c, &c->o_out, row + x);
                    const double got = fuzz_load(c->o_out.data, row + x, c->o_out.dtype);
                    int right;
                    if (sink == -INFINITY || lse == -INFINITY)
                        right = got == o || (isnan(got) && isnan(o));
                    else if (isnan(lse))
                        right = got == o || isnan(got);
                    else if (isnan(o))
                        right = isnan(got);
                    else if (isinf(o)) /* O e^(LSE - LSE') with a factor that may underflow */
                        right = got == o || (isnan(got) && mul < 0x1p-1020L);
                    else
                        right = value_ok(c->o_out.dtype, got, o * mul, fabsl(o * mul));
                    if (!right) {
                        fprintf(stderr, "fuzz_merge: O %.9g, LSE %.9g, sink %.9Lg\n", o, lse, sink);
                        row_failed(c, "O after the sinks", b, i, h, x, got, o * mul, -1);
                    }
                }
            }
}

/* -- decoding ---------------------------------------------------------------------------------- */

static void o_strides(merge_call *c, fai_tensor *t, int mode, uint8_t a) {
    const int64_t d = c->dim > 0 ? c->dim : 1, heads = c->heads > 0 ? c->heads : 1;
    const int64_t seq = c->seq > 0 ? c->seq : 1;
    t->stride_dim = 1;
    t->stride_head = d, t->stride_seq = heads * d, t->stride_batch = seq * heads * d;
    switch (mode) {
    case O_HEAD_MAJOR:
        t->stride_seq = d, t->stride_head = seq * d, t->stride_batch = heads * seq * d;
        break;
    case O_PADDED:
        t->stride_head = d + a % 5, t->stride_seq = heads * t->stride_head + (a >> 3) % 5;
        t->stride_batch = seq * t->stride_seq + (a >> 6);
        break;
    case O_RAW: /* zero strides broadcast, small ones overlap rows */
        t->stride_head = (a & 1 ? 1 : d) * ((a >> 1) % 3);
        t->stride_seq = (a & 8 ? 1 : heads * d) * ((a >> 4) % 3);
        t->stride_batch = (a & 64 ? 1 : seq * heads * d) * ((a >> 6) % 2 + (a & 1));
        break;
    case O_NEGATIVE:
        *(a % 3 == 0 ? &t->stride_batch : a % 3 == 1 ? &t->stride_seq : &t->stride_head) = -1;
        break;
    case O_STRIDE_DIM:
        t->stride_dim = a & 1 ? 2 : -1;
        break;
    case O_OVERFLOW:
        *(a % 3 == 0   ? &t->stride_batch
          : a % 3 == 1 ? &t->stride_seq
                       : &t->stride_head) = a & 4 ? INT64_MAX : INT64_MAX / 2 + 1;
        break;
    default:
        break;
    }
}

static void lse_strides(merge_call *c, fai_tensor *t, int mode, uint8_t a) {
    const int64_t heads = c->heads > 0 ? c->heads : 1, seq = c->seq > 0 ? c->seq : 1;
    t->dtype = FAI_DTYPE_F32;
    t->stride_dim = 0;
    t->stride_head = 1, t->stride_seq = heads, t->stride_batch = seq * heads;
    switch (mode) {
    case LSE_BHS: /* fai_run's [B, H, S] */
        t->stride_seq = 1, t->stride_head = seq, t->stride_batch = heads * seq;
        break;
    case LSE_RAW:
        t->stride_head = a % 3, t->stride_seq = (a >> 2) % 4, t->stride_batch = (a >> 4) % 7;
        break;
    case LSE_NEGATIVE:
        t->stride_seq = -1;
        break;
    case LSE_F16:
        t->dtype = FAI_DTYPE_F16;
        break;
    default:
        break;
    }
}

/* The LSE of part p at a row of base LSE `base`, as F_LSE_KIND asks. */
static double lse_value(uint64_t *rng, int kind, double base) {
    const double u = fuzz_unit(rng);
    switch (kind) {
    case 1:
        return -INFINITY;
    case 2:
        return u < 0.5 ? -INFINITY : base + 6.0 * fuzz_unit(rng) - 3.0;
    case 3:
        return u < 0.15 ? NAN : base + 6.0 * fuzz_unit(rng) - 3.0;
    case 4:
        return u < 0.15 ? INFINITY : base + 6.0 * fuzz_unit(rng) - 3.0;
    case 5: /* equal LSEs */
        return base;
    case 6: /* far below or above the others: weights that underflow */
        return base + (u < 0.5 ? -1.0 : 1.0) * (100.0 + 1000.0 * fuzz_unit(rng));
    case 7:
        return fuzz_log_uniform(rng, 100, 127);
    default:
        return base + 6.0 * u - 3.0;
    }
}

static double base_value(uint64_t *rng, int kind) {
    switch (kind) {
    case 1:
        return fuzz_log_uniform(rng, 100, 127);
    case 2:
        return fuzz_log_uniform(rng, -149, -100);
    case 3: /* large enough that an f32 LSE has no room for its log terms */
        return fuzz_log_uniform(rng, 20, 60);
    default:
        return 20.0 * fuzz_unit(rng) - 10.0;
    }
}

static double o_value(uint64_t *rng, int kind) {
    switch (kind) {
    case 1: /* around f16's largest values */
        return fuzz_log_uniform(rng, 13, 17);
    case 2:
        return fuzz_log_uniform(rng, 120, 127);
    case 3:
        return fuzz_log_uniform(rng, -149, -120);
    case 4:
        return fuzz_log_uniform(rng, -149, 127);
    default:
        return 4.0 * fuzz_unit(rng) - 2.0;
    }
}

static double sink_value(uint64_t *rng, int kind, double near) {
    const double u = fuzz_unit(rng);
    switch (kind) {
    case 1:
        return -INFINITY;
    case 2: /* near the row's LSE: both weigh */
        return near + 4.0 * u - 2.0;
    case 3:
        return u < 0.5 ? -INFINITY : near + 4.0 * fuzz_unit(rng) - 2.0;
    case 4:
        return fuzz_log_uniform(rng, 100, 127);
    case 5: /* equal to the row's LSE */
        return near;
    default:
        return 10.0 * u - 5.0;
    }
}

/* Writes the values of every part (NaN and Inf where the input asks), rounded to its dtype. */
static void fill_parts(merge_call *c, const uint8_t *f, uint64_t *rng, double *bases) {
    for (int64_t p = 0; p < c->parts; p++) {
        fai_tensor *o = &c->o[p], *lse = &c->lse[p];
        const int o_ok = c->o[p].data && o_dtype_ok(o->dtype) && !negative(o) && c->dim >= 1 &&
                         c->dim <= FAI_MAX_HEAD_DIM && extent(c, o, c->dim) > 0 &&
                         c->part_mode[p] != O_REPEAT;
        const int lse_ok_ = lse->data && !negative(lse) && extent(c, lse, 1) > 0;
        for (int64_t b = 0; b < c->batch; b++)
            for (int64_t i = 0; i < c->seq; i++)
                for (int64_t h = 0; h < c->heads; h++) {
                    const int64_t r = (b * c->seq + i) * c->heads + h;
                    if (lse_ok_) /* an f16 LSE (refused) gets f16 values */
                        fuzz_store(lse->data, at(lse, b, i, h), lse->dtype,
                                   fuzz_round(lse->dtype,
                                              lse_value(rng, f[F_LSE_KIND + p] % 8, bases[r])));
                    for (int64_t x = 0; o_ok && x < c->dim; x++)
                        fuzz_store(o->data, at(o, b, i, h) + x, o->dtype,
                                   fuzz_round(o->dtype, o_value(rng, f[F_O_KIND] % 5)));
                }
        const int specials = f[F_O_SPECIAL] < 200 ? f[F_O_SPECIAL] % 5 : 0;
        static const double values[] = {NAN, INFINITY, -INFINITY};
        for (int s = 0; o_ok && s < specials; s++) {
            const int64_t b = fuzz_pick(rng, 0, c->batch - 1), i = fuzz_pick(rng, 0, c->seq - 1);
            const int64_t h = fuzz_pick(rng, 0, c->heads - 1), x = fuzz_pick(rng, 0, c->dim - 1);
            fuzz_store(o->data, at(o, b, i, h) + x, o->dtype, values[fuzz_pick(rng, 0, 2)]);
        }
    }
}

static fai_status merge(const merge_call *c) {
    return fai_merge_states(c->count, c->o_arg, c->lse_arg, c->batch, c->seq, c->heads, c->dim,
                            c->o_out_arg, c->lse_out_arg);
}

/* A failure: a named status, a printable message, nothing written. */
static void check_failure(const merge_call *c, fai_status status, const char *call) {
    const char *message = fai_last_error();
    int which;
    ptrdiff_t offset;
    if (!fuzz_message_ok(message) || strcmp(fai_status_string(status), "FAI_ERR_UNKNOWN") == 0) {
        describe(c);
        fprintf(stderr, "fuzz_merge: %s refused with status %d and a bad message \"%s\"\n", call,
                (int)status, message ? message : "(null)");
        abort();
    }
    if (fuzz_changed(c->buf, B_COUNT, 1, &which, &offset)) {
        describe(c);
        fprintf(stderr, "fuzz_merge: %s refused (%s) but byte %td of buffer %d changed\n", call,
                message, offset, which);
        abort();
    }
}

/* A success writes the output's elements and nothing else. */
static void check_contained(merge_call *c, const char *call) {
    for (int i = 0; i < B_COUNT; i++)
        if (c->buf[i].base) memset(c->buf[i].mark, 0, fuzz_total(&c->buf[i]));
    const int64_t o_size = element_size(c->o_out.dtype);
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t i = 0; i < c->seq; i++)
            for (int64_t h = 0; h < c->heads; h++) {
                CHECK(fuzz_mark(c->buf, B_COUNT,
                                (unsigned char *)c->o_out.data + at(&c->o_out, b, i, h) * o_size,
                                (size_t)(c->dim * o_size)));
                if (lse_out_given(c))
                    CHECK(fuzz_mark(c->buf, B_COUNT,
                                    (float *)c->lse_out.data + at(&c->lse_out, b, i, h), 4));
            }
    int which;
    ptrdiff_t offset;
    if (fuzz_changed(c->buf, B_COUNT, 0, &which, &offset)) {
        describe(c);
        fprintf(stderr,
                "fuzz_merge: %s accepted, and byte %td of buffer %d changed outside the "
                "output\n",
                call, offset, which);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_input in = {data, size, 0};
    uint8_t f[F_COUNT];
    fuzz_fields(&in, f, F_COUNT);
    uint64_t rng = fuzz_u64(&in);

    merge_call *c = calloc(1, sizeof *c);
    CHECK(c != NULL);
    c->count = f[F_COUNT_P] < 252 ? 1 + f[F_COUNT_P] % MAX_PARTS : -(f[F_COUNT_P] % 2);
    c->parts = c->count > 0 ? c->count : 1; /* tensors made even when count is refused */
    c->batch = f[F_BATCH] < 252 ? f[F_BATCH] % 3 : -1;
    c->seq = f[F_SEQ] < 252 ? f[F_SEQ] % 4 : -1;
    c->heads = f[F_HEADS] < 252 ? f[F_HEADS] % 4 : -1;
    static const int64_t wide[] = {32, 64, 128, 576, 577, 0, 512, -1};
    c->dim = f[F_HEAD_DIM] < 200 ? 1 + f[F_HEAD_DIM] % 24 : wide[f[F_HEAD_DIM] % 8];
    c->rows = c->batch > 0 && c->seq > 0 && c->heads > 0 ? c->batch * c->seq * c->heads : 0;
    static const int bad_dtype[] = {3, 4, 5, 6, -1, 1000};
    const uint8_t od = f[F_OUT_DTYPE];
    c->o_out.dtype = (fai_dtype)(od < 240 ? od % 3 : bad_dtype[od % 6]);
    c->out_mode = f[F_OUT_MODE] % OUT_MODES;
    c->lse_out_mode = f[F_LSE_OUT_MODE] % LOUT_MODES;
    c->in_place = (int)(f[F_IN_PLACE] % c->parts);
    for (int64_t p = 0; p < c->parts; p++) {
        const uint8_t pd = f[F_PART_DTYPE + p];
        c->o[p].dtype = (fai_dtype)(pd < 240 ? pd % 3 : bad_dtype[pd % 6]);
        c->part_mode[p] = f[F_PART_LAYOUT + p] % O_MODES;
        if (p == 0 && c->part_mode[p] == O_REPEAT) c->part_mode[p] = O_DENSE;
        c->lse_mode[p] = f[F_LSE_LAYOUT + p] % LSE_MODES;
        o_strides(c, &c->o[p], c->part_mode[p], f[F_PART_ARG + p]);
        lse_strides(c, &c->lse[p], c->lse_mode[p], f[F_PART_ARG + p]);
    }
    o_strides(c, &c->o_out,
              c->out_mode == OUT_HEAD_MAJOR   ? O_HEAD_MAJOR
              : c->out_mode == OUT_PADDED     ? O_PADDED
              : c->out_mode == OUT_RAW        ? O_RAW
              : c->out_mode == OUT_NEGATIVE   ? O_NEGATIVE
              : c->out_mode == OUT_STRIDE_DIM ? O_STRIDE_DIM
              : c->out_mode == OUT_OVERFLOW   ? O_OVERFLOW
                                              : O_DENSE,
              f[F_OUT_A]);
    lse_strides(c, &c->lse_out,
                c->lse_out_mode == LOUT_BHS        ? LSE_BHS
                : c->lse_out_mode == LOUT_RAW      ? LSE_RAW
                : c->lse_out_mode == LOUT_NEGATIVE ? LSE_NEGATIVE
                : c->lse_out_mode == LOUT_F16      ? LSE_F16
                                                   : LSE_BSH,
                f[F_LSE_OUT_A]);

    /* buffers: every tensor its own, with room past it for an output that overlaps it */
    int64_t sizes[B_COUNT];
    for (int64_t p = 0; p < MAX_PARTS; p++) {
        const int64_t o = p < c->parts ? extent(c, &c->o[p], c->dim) : 0;
        const int64_t l = p < c->parts ? extent(c, &c->lse[p], 1) : 0;
        sizes[B_O + p] = (o < 0 ? 64 : o) + SLACK_BYTES;
        sizes[B_LSE + p] = (l < 0 ? 64 : l) + SLACK_BYTES;
    }
    const int64_t o_out_bytes = extent(c, &c->o_out, c->dim);
    const int64_t lse_out_bytes = extent(c, &c->lse_out, 1);
    sizes[B_OUT] = o_out_bytes < 0 ? 64 : o_out_bytes;
    sizes[B_LSE_OUT] = lse_out_bytes < 0 ? 64 : lse_out_bytes;
    sizes[B_SINKS] = 4 * (c->heads > 0 ? c->heads : 0);
    for (int i = 0; i < B_COUNT; i++)
        if (sizes[i] > BUDGET) {
            free(c);
            return 0;
        }
    for (int i = 0; i < B_COUNT; i++)
        CHECK(fuzz_buffer_alloc(&c->buf[i], (size_t)sizes[i], &rng));
    for (int64_t p = 0; p < c->parts; p++) {
        c->o[p].data = c->part_mode[p] == O_DATA_NULL ? NULL : fuzz_payload(&c->buf[B_O + p]);
        c->lse[p].data = c->lse_mode[p] == LSE_DATA_NULL ? NULL : fuzz_payload(&c->buf[B_LSE + p]);
        if (c->part_mode[p] == O_REPEAT) c->o[p] = c->o[0];
    }
    c->o_out.data = fuzz_payload(&c->buf[B_OUT]);
    c->lse_out.data = fuzz_payload(&c->buf[B_LSE_OUT]);
    const int k = c->in_place;
    if (c->out_mode == OUT_IN_PLACE) {
        c->o_out = c->o[k];
    } else if (c->out_mode == OUT_OVERLAP && c->o[k].data) { /* shifted by part of a row */
        c->o_out = c->o[k];
        c->o_out.data =
            (unsigned char *)c->o[k].data +
            (1 + f[F_OUT_A] % (2 * (c->dim > 0 ? c->dim : 1))) * element_size(c->o[k].dtype);
    } else if (c->out_mode == OUT_DATA_NULL) {
        c->o_out.data = NULL;
    }
    if (c->lse_out_mode == LOUT_IN_PLACE) {
        c->lse_out = c->lse[k];
    } else if (c->lse_out_mode == LOUT_OVERLAP && c->lse[k].data) {
        c->lse_out = c->lse[k];
        c->lse_out.data = (float *)c->lse[k].data + 1 + f[F_LSE_OUT_A] % 4;
    } else if (c->lse_out_mode == LOUT_DATA_NULL) {
        c->lse_out.data = NULL;
    }
    c->sinks = (float *)(void *)fuzz_payload(&c->buf[B_SINKS]);
    c->o_arg = c->o, c->lse_arg = c->lse, c->o_out_arg = &c->o_out, c->lse_out_arg = &c->lse_out;
    if (c->out_mode == OUT_NULL) c->o_out_arg = NULL;
    if (c->lse_out_mode == LOUT_NULL) c->lse_out_arg = NULL;
    if (f[F_NULLS] >= 240) *(f[F_NULLS] & 1 ? &c->o_arg : &c->lse_arg) = NULL;

    /* values: each row a base LSE, each part's around it */
    double *bases = malloc((size_t)(c->rows + 1) * sizeof *bases);
    CHECK(bases != NULL);
    for (int64_t r = 0; r < c->rows; r++)
        bases[r] = base_value(&rng, f[F_LSE_BASE] % 4);
    fill_parts(c, f, &rng, bases);
    for (int64_t h = 0; h < c->heads; h++)
        c->sinks[h] = (float)sink_value(&rng, f[F_SINK_KIND] % 6, c->rows ? bases[h] : 0.0);
    if (f[F_SINK_BAD] < 64 && c->heads > 0)
        c->sinks[f[F_SINK_BAD] % c->heads] = f[F_SINK_BAD] & 32 ? NAN : INFINITY;
    for (int i = 0; i < B_COUNT; i++)
        fuzz_buffer_snapshot(&c->buf[i]);

    /* what fai.h requires of this call, and whether its result is defined */
    const char *must_refuse = merge_refusal(c);
    int defined = !must_refuse && c->count >= 1 && c->rows > 0 && c->out_mode != OUT_OVERLAP &&
                  c->lse_out_mode != LOUT_OVERLAP;
    if (defined && c->out_mode == OUT_IN_PLACE) defined = !rows_share(c, &c->o_out, c->dim);
    if (defined && c->lse_out_mode == LOUT_IN_PLACE && lse_out_given(c))
        defined = !rows_share(c, &c->lse_out, 1);
    /* a repeated part is the in-place output too when the output is the part it repeats */
    for (int64_t p = 0; defined && p < c->count; p++)
        if (c->o[p].data == c->o_out.data && !same_tensor(&c->o[p], &c->o_out)) defined = 0;
    const int must_accept = defined && c->lse_out_arg;

    fai_status status = merge(c);
    if (status != FAI_OK) {
        check_failure(c, status, "fai_merge_states");
        if (must_accept) {
            describe(c);
            fprintf(stderr, "fuzz_merge: a valid merge refused: %s \"%s\"\n",
                    fai_status_string(status), fai_last_error());
            abort();
        }
    } else {
        if (must_refuse) {
            describe(c);
            fprintf(stderr, "fuzz_merge: merge accepted although %s\n", must_refuse);
            abort();
        }
        CHECK(fai_last_error()[0] == '\0');
        int which;
        ptrdiff_t offset;
        if (c->rows > 0 && c->o_out_arg && !tensor_refusal(c, &c->o_out, 0) &&
            (!lse_out_given(c) || !tensor_refusal(c, &c->lse_out, 1)))
            check_contained(c, "fai_merge_states");
        else /* nothing to write, or nowhere it could be */
            CHECK(!fuzz_changed(c->buf, B_COUNT, 1, &which, &offset));
        if (defined) check_merged(c);

        /* the sinks, added once to the merged rows (in place) */
        if (c->rows > 0 && c->count >= 1 && c->lse_out_arg) {
            for (int i = 0; i < B_COUNT; i++)
                fuzz_buffer_snapshot(&c->buf[i]);
            const float *sinks = f[F_SINK_BAD] >= 64 && f[F_SINK_BAD] < 72 ? NULL : c->sinks;
            int bad_sink = !sinks || !c->lse_out.data;
            for (int64_t h = 0; sinks && h < c->heads; h++)
                bad_sink |= isnan(sinks[h]) || sinks[h] == INFINITY;
            const int sinks_defined = defined && lse_out_given(c) &&
                                      !rows_share(c, &c->o_out, c->dim) &&
                                      !rows_share(c, &c->lse_out, 1);
            status =
                fai_apply_sinks(sinks, c->batch, c->seq, c->heads, c->dim, &c->o_out, &c->lse_out);
            if (status != FAI_OK) {
                check_failure(c, status, "fai_apply_sinks");
                if (!bad_sink) {
                    describe(c);
                    fprintf(stderr, "fuzz_merge: valid sinks refused: %s \"%s\"\n",
                            fai_status_string(status), fai_last_error());
                    abort();
                }
            } else {
                if (bad_sink) {
                    describe(c);
                    fprintf(stderr, "fuzz_merge: sinks accepted although NULL, NaN or +inf, or "
                                    "lse.data NULL\n");
                    abort();
                }
                CHECK(fai_last_error()[0] == '\0');
                check_contained(c, "fai_apply_sinks");
                if (sinks_defined) check_sinks(c);
            }
        }
    }
    free(bases);
    for (int i = 0; i < B_COUNT; i++)
        fuzz_buffer_free(&c->buf[i]);
    free(c);
    return 0;
}
