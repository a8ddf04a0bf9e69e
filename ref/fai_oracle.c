/*
 * fai_oracle.c - the fp64 reference. See fai_oracle.h for the output layout.
 *
 * Semantics (fai.h and the README), for query i of sequence b with lq queries and lk keys:
 *   diag(i) = i (causal TOP_LEFT) or i + lk - lq (otherwise: bottom-right), or, with global
 *   positions, the key index at the query's position: q_positions[b] + i - kv_positions[b];
 *   key j is visible iff 0 <= j < lk, (wl < 0 or j >= diag - wl), (wr < 0 or j <= diag + wr)
 *   where wr is clamped to 0 when causal, and the explicit mask keeps it;
 *   s_j = cap tanh(scale * q.k_j / cap) (soft-capping; scale * q.k_j without it)
 *         - slope_h |j - diag| (ALiBi) + add mask,
 *   P = softmax over the visible keys, O = P V, LSE = log sum exp s_j. No visible key (or all
 *   ADD = -inf): O = 0, LSE = -inf. With a sink (finite sink_h) the denominator and the sum in
 *   the LSE gain exp(sink_h), and a row with no visible key gets LSE = sink_h. A KEEP_BITS mask
 *   keeps key j where bit j % 8 of byte j / 8 of the row is 1.
 * Non-finite values follow IEEE arithmetic in double: a visible NaN logit, or a +inf one (whose
 * P is exp(inf - inf)), makes the row's O and LSE NaN; visible logits that are all -inf make a
 * row like a fully masked one (LSE = log 0 = -inf, O = 0); Inf or NaN in V reaches O through
 * P V wherever P is not 0, and through 0 x Inf = NaN where it is. Q rows and K/V positions a
 * row cannot see never enter it.
 * Everything is computed in double from the exactly decoded inputs; softmax is the plain
 * two-pass max / sum form, with no tiling and no online rescaling.
 */
#include "fai_oracle.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* -- storage types -------------------------------------------------------------------------- */

/* A binary floating-point format with `mbits` stored mantissa bits and `ebits` exponent bits. */
static double mini_decode(uint32_t bits, int mbits, int ebits) {
    const uint32_t emask = (1u << ebits) - 1u;
    const uint32_t sign = (bits >> (mbits + ebits)) & 1u;
    const uint32_t e = (bits >> mbits) & emask;
    const uint32_t m = bits & ((1u << mbits) - 1u);
    const int bias = (1 << (ebits - 1)) - 1;
    double v;
    if (e == emask)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp((double)m, 1 - bias - mbits);
    else
        v = ldexp((double)(m | (1u << mbits)), (int)e - bias - mbits);
    return sign ? -v : v;
}

static uint32_t mini_encode(double x, int mbits, int ebits) {
    const uint32_t emask = (1u << ebits) - 1u;
    const int bias = (1 << (ebits - 1)) - 1;
    const uint32_t sign = signbit(x) ? 1u << (mbits + ebits) : 0u;
    if (isnan(x)) return (emask << mbits) | (1u << (mbits - 1));
    const double a = fabs(x);
    if (isinf(a)) return sign | (emask << mbits);
    if (a < ldexp(1.0, 1 - bias)) {
        /* subnormal: integer multiple of 2^(1 - bias - mbits); 2^mbits rounds up into the
         * smallest normal, whose encoding is the same integer */
        const double q = nearbyint(ldexp(a, bias - 1 + mbits));
        return sign | (uint32_t)q;
    }
    int k;
    const double f = frexp(a, &k); /* a = f 2^k, f in [0.5, 1) */
    int e = k - 1;
    double r = nearbyint(ldexp(f, mbits + 1)); /* in [2^mbits, 2^(mbits+1)] */
    if (r == ldexp(1.0, mbits + 1)) {
        r = ldexp(1.0, mbits);
        e++;
    }
    if (e + bias >= (int)emask) return sign | (emask << mbits);
    return sign | ((uint32_t)(e + bias) << mbits) | ((uint32_t)r - (1u << mbits));
}

double fai_oracle_f16_decode(uint16_t bits) { return mini_decode(bits, 10, 5); }

/* e4m3 ("fn"): binary-like with 4 exponent and 3 mantissa bits, but the top exponent holds
 * finite values too; only S.1111.111 is NaN, and there is no infinity. */
double fai_oracle_e4m3_decode(uint8_t bits) {
    if ((bits & 0x7f) == 0x7f) return NAN;
    const int e = (bits >> 3) & 0xf, m = bits & 7;
    const double v = e == 0 ? ldexp((double)m, -9) : ldexp((double)(m | 8), e - 10);
    return bits & 0x80 ? -v : v;
}

double fai_oracle_bf16_decode(uint16_t bits) { return mini_decode(bits, 7, 8); }

uint16_t fai_oracle_f16_encode(double x) { return (uint16_t)mini_encode(x, 10, 5); }

uint16_t fai_oracle_bf16_encode(double x) { return (uint16_t)mini_encode(x, 7, 8); }

/* |x| to the nearest e4m3 code (ties to even), saturated at 448 (code 0x7e): its top exponent
 * holds finite values, unlike a binary format's. */
static uint32_t e4m3_encode_magnitude(double a) {
    if (a >= 448.0) return 0x7e;
    if (a < ldexp(1.0, -6)) return (uint32_t)nearbyint(ldexp(a, 9)); /* 8: the smallest normal */
    int k;
    frexp(a, &k); /* a in [2^(k-1), 2^k) */
    int e = k - 1;
    double r = nearbyint(ldexp(a, 3 - e)); /* in [8, 16] */
    if (r == 16.0) {
        r = 8.0;
        e++;
    }
    const uint32_t code = ((uint32_t)(e + 7) << 3) | ((uint32_t)r - 8u);
    return code > 0x7e ? 0x7e : code;
}

double fai_oracle_load(const void *data, fai_dtype dtype, int64_t index) {
    switch (dtype) {
    case FAI_DTYPE_F32: {
        float f;
        memcpy(&f, (const char *)data + index * 4, 4);
        return (double)f;
    }
    case FAI_DTYPE_F16: {
        uint16_t h;
        memcpy(&h, (const char *)data + index * 2, 2);
        return fai_oracle_f16_decode(h);
    }
    case FAI_DTYPE_BF16: {
        uint16_t h;
        memcpy(&h, (const char *)data + index * 2, 2);
        return fai_oracle_bf16_decode(h);
    }
    case FAI_DTYPE_I8:
        return (double)((const int8_t *)data)[index];
    case FAI_DTYPE_E4M3:
        return fai_oracle_e4m3_decode(((const uint8_t *)data)[index]);
    case FAI_DTYPE_E5M2:
        return mini_decode(((const uint8_t *)data)[index], 2, 5);
    }
    return NAN;
}

void fai_oracle_store(void *data, fai_dtype dtype, int64_t index, double value) {
    switch (dtype) {
    case FAI_DTYPE_F32: {
        const float f = (float)value;
        memcpy((char *)data + index * 4, &f, 4);
        return;
    }
    case FAI_DTYPE_F16: {
        const uint16_t h = fai_oracle_f16_encode(value);
        memcpy((char *)data + index * 2, &h, 2);
        return;
    }
    case FAI_DTYPE_BF16: {
        const uint16_t h = fai_oracle_bf16_encode(value);
        memcpy((char *)data + index * 2, &h, 2);
        return;
    }
    case FAI_DTYPE_I8: {
        const double q = nearbyint(fmin(fmax(value, -127.0), 127.0));
        ((int8_t *)data)[index] = (int8_t)(isnan(value) ? 0.0 : q);
        return;
    }
    case FAI_DTYPE_E4M3: {
        const uint32_t bits = isnan(value) ? 0x7f : e4m3_encode_magnitude(fabs(value));
        ((uint8_t *)data)[index] = (uint8_t)(bits | (signbit(value) ? 0x80u : 0u));
        return;
    }
    case FAI_DTYPE_E5M2: {
        const double a = isnan(value) ? value : fmin(fabs(value), 57344.0);
        const uint32_t bits = mini_encode(a, 2, 5);
        ((uint8_t *)data)[index] = (uint8_t)(bits | (signbit(value) ? 0x80u : 0u));
        return;
    }
    }
}

/* -- the reference -------------------------------------------------------------------------- */

static fai_status fail(char *err, size_t err_size, fai_status st, const char *fmt, ...) {
    if (err && err_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_size, fmt, ap);
        va_end(ap);
    }
    return st;
}

static int dtype_ok(fai_dtype dt) {
    return dt == FAI_DTYPE_F32 || dt == FAI_DTYPE_F16 || dt == FAI_DTYPE_BF16;
}

static int dtype_quantized(fai_dtype dt) {
    return dt == FAI_DTYPE_I8 || dt == FAI_DTYPE_E4M3 || dt == FAI_DTYPE_E5M2;
}

void fai_oracle_out_free(fai_oracle_out *out) {
    if (!out) return;
    free(out->o);
    free(out->lse);
    free(out->row_state);
    free(out->o_mag);
    free(out->logit_mag);
    free(out->keys);
    memset(out, 0, sizeof *out);
}

int64_t fai_oracle_head_dim_v(const fai_problem *pb) {
    return pb->head_dim_v == FAI_HEAD_DIM_V_DEFAULT ? pb->head_dim : pb->head_dim_v;
}

/* Element offsets of sequence b's token t in a Q/K/V tensor. */
typedef struct seq_map {
    int packed;        /* cu_seqlens: rows cu[b] + t, batch stride ignored */
    int paged;         /* block table: page bt[b][t / ps], slot t % ps */
    const int32_t *cu; /* packed prefix sums */
    const int32_t *bt; /* block table */
    int64_t bt_stride, page_size;
} seq_map;

static int64_t token_offset(const seq_map *m, const fai_tensor *t, int64_t b, int64_t tok) {
    if (m->packed) return ((int64_t)m->cu[b] + tok) * t->stride_seq;
    if (m->paged) {
        const int64_t page = m->bt[b * m->bt_stride + tok / m->page_size];
        return page * t->stride_batch + (tok % m->page_size) * t->stride_seq;
    }
    return b * t->stride_batch + tok * t->stride_seq;
}

/* The dequantization scale of sequence b's token tok, kv head h (1 for a dtype without one):
 * addressed as the token's row is. */
static double token_scale(const seq_map *m, const fai_scale *scale, fai_dtype dtype, int64_t b,
                          int64_t tok, int64_t h) {
    if (!dtype_quantized(dtype)) return 1.0;
    fai_tensor as_rows = {0};
    as_rows.stride_batch = scale->stride_batch;
    as_rows.stride_seq = scale->stride_seq;
    return (double)scale->data[token_offset(m, &as_rows, b, tok) + h * scale->stride_head];
}

static fai_status check_cu(const int32_t *cu, int64_t batch, int64_t rows, const char *name,
                           char *err, size_t err_size) {
    if (cu[0] != 0) return fail(err, err_size, FAI_ERR_INVALID_ARG, "%s[0] = %d", name, cu[0]);
    for (int64_t b = 0; b < batch; b++)
        if (cu[b + 1] < cu[b])
            return fail(err, err_size, FAI_ERR_INVALID_ARG, "%s decreases at %lld", name,
                        (long long)b);
    if (cu[batch] > rows)
        return fail(err, err_size, FAI_ERR_INVALID_ARG, "%s[%lld] = %d exceeds %lld rows", name,
                    (long long)batch, cu[batch], (long long)rows);
    return FAI_OK;
}

/* Sequence b's query and key counts: from cu_seqlens, else seqlens, else the padded lengths. */
static void seq_lengths(const fai_problem *pb, int64_t b, int64_t *lq, int64_t *lk) {
    if (pb->cu_seqlens_q)
        *lq = (int64_t)pb->cu_seqlens_q[b + 1] - pb->cu_seqlens_q[b];
    else
        *lq = pb->seqlens_q ? pb->seqlens_q[b] : pb->seq_q;
    if (pb->cu_seqlens_kv)
        *lk = (int64_t)pb->cu_seqlens_kv[b + 1] - pb->cu_seqlens_kv[b];
    else
        *lk = pb->seqlens_kv ? pb->seqlens_kv[b] : pb->seq_kv;
}

/* What the reference needs of the problem to be well defined (fai's own checks are stricter). */
static fai_status check_problem(const fai_problem *pb, const fai_tensors *t, char *err,
                                size_t err_size) {
    const int64_t B = pb->batch, Hq = pb->heads_q, Hkv = pb->heads_kv;
    const int64_t Sq = pb->seq_q, Skv = pb->seq_kv, D = pb->head_dim;
    const int64_t Dv = fai_oracle_head_dim_v(pb);
    if (B < 0) return fail(err, err_size, FAI_ERR_INVALID_ARG, "batch = %lld", (long long)B);
    if (Hq < 1 || Hkv < 1 || Hq % Hkv)
        return fail(err, err_size, FAI_ERR_INVALID_ARG, "heads_q = %lld, heads_kv = %lld",
                    (long long)Hq, (long long)Hkv);
    if (D < 1 || D > FAI_MAX_HEAD_DIM || Dv < 1 || Dv > FAI_MAX_HEAD_DIM)
        return fail(err, err_size, FAI_ERR_INVALID_ARG, "head_dim = %lld, head_dim_v = %lld",
                    (long long)D, (long long)Dv);
    if (Sq < 0 || Skv < 0)
        return fail(err, err_size, FAI_ERR_INVALID_ARG, "seq_q = %lld, seq_kv = %lld",
                    (long long)Sq, (long long)Skv);
    if (!dtype_ok(pb->q_dtype) || !(dtype_ok(pb->k_dtype) || dtype_quantized(pb->k_dtype)) ||
        !(dtype_ok(pb->v_dtype) || dtype_quantized(pb->v_dtype)) || !dtype_ok(pb->o_dtype))
        return fail(err, err_size, FAI_ERR_INVALID_ARG, "unknown dtype");
    if ((dtype_quantized(pb->k_dtype) && !t->k_scale.data) ||
        (dtype_quantized(pb->v_dtype) && !t->v_scale.data))
        return fail(err, err_size, FAI_ERR_INVALID_ARG, "a quantized K or V without scales");
    if (pb->k_channel_scales && (!dtype_quantized(pb->k_dtype) || !t->k_channel_scale.data))
        return fail(err, err_size, FAI_ERR_INVALID_ARG,
                    "K's channel scales without a quantized K or without their data");
    if (t->q.dtype != pb->q_dtype || t->k.dtype != pb->k_dtype || t->v.dtype != pb->v_dtype ||
        t->o.dtype != pb->o_dtype)
        return fail(err, err_size, FAI_ERR_INVALID_ARG, "tensor dtypes differ from the problem");
    uint32_t scale_bits;
    memcpy(&scale_bits, &pb->scale, sizeof scale_bits);
    if (!isfinite(pb->scale) && scale_bits != FAI_SCALE_DEFAULT_BITS)
        return fail(err, err_size, FAI_ERR_INVALID_ARG, "scale = %g", (double)pb->scale);
    if (pb->causal != FAI_CAUSAL_NONE && pb->causal != FAI_CAUSAL_BOTTOM_RIGHT &&
        pb->causal != FAI_CAUSAL_TOP_LEFT)
        return fail(err, err_size, FAI_ERR_INVALID_ARG, "causal = %d", (int)pb->causal);
    if (pb->window_left < -1 || pb->window_right < -1)
        return fail(err, err_size, FAI_ERR_INVALID_ARG, "window = %lld,%lld",
                    (long long)pb->window_left, (long long)pb->window_right);
    if (pb->mask_kind != FAI_MASK_NONE && pb->mask_kind != FAI_MASK_KEEP &&
        pb->mask_kind != FAI_MASK_DROP && pb->mask_kind != FAI_MASK_ADD &&
        pb->mask_kind != FAI_MASK_KEEP_BITS)
        return fail(err, err_size, FAI_ERR_INVALID_ARG, "mask_kind = %d", (int)pb->mask_kind);
    if (!(pb->softcap >= 0.0f) || isinf(pb->softcap))
        return fail(err, err_size, FAI_ERR_INVALID_ARG, "softcap = %g", (double)pb->softcap);
    if ((pb->alibi && !t->alibi_slopes) || (pb->sinks && !t->sinks))
        return fail(err, err_size, FAI_ERR_INVALID_ARG, "alibi_slopes or sinks NULL");
    if (pb->seqlens_q && pb->cu_seqlens_q)
        return fail(err, err_size, FAI_ERR_INVALID_ARG, "seqlens_q with cu_seqlens_q");
    if (pb->seqlens_kv && pb->cu_seqlens_kv)
        return fail(err, err_size, FAI_ERR_INVALID_ARG, "seqlens_kv with cu_seqlens_kv");
    if (pb->page_size < 0)
        return fail(err, err_size, FAI_ERR_INVALID_ARG, "page_size = %lld",
                    (long long)pb->page_size);
    if (pb->page_size > 0 && (pb->cu_seqlens_kv || !pb->seqlens_kv || !t->block_table))
        return fail(err, err_size, FAI_ERR_INVALID_ARG,
                    "paged KV needs seqlens_kv and a block table, and no cu_seqlens_kv");
    if (pb->page_size > 0 && (pb->pages_per_seq < 0 || pb->num_pages < 0))
        return fail(err, err_size, FAI_ERR_INVALID_ARG, "pages_per_seq = %lld, num_pages = %lld",
                    (long long)pb->pages_per_seq, (long long)pb->num_pages);
    if (B > 0 && pb->cu_seqlens_q) {
        const fai_status st = check_cu(pb->cu_seqlens_q, B, Sq, "cu_seqlens_q", err, err_size);
        if (st != FAI_OK) return st;
    }
    if (B > 0 && pb->cu_seqlens_kv) {
        const fai_status st = check_cu(pb->cu_seqlens_kv, B, Skv, "cu_seqlens_kv", err, err_size);
        if (st != FAI_OK) return st;
    }
    return FAI_OK;
}

/* Every sequence's lengths within the tensors, the block table entries that will be read within
 * the pool, a mask where one is read; the longest key count into *max_lk. */
static fai_status check_lengths(const fai_problem *pb, const fai_tensors *t, const seq_map *kvmap,
                                int64_t *max_lk, char *err, size_t err_size) {
    *max_lk = 0;
    for (int64_t b = 0; b < pb->batch; b++) {
        int64_t lq, lk;
        seq_lengths(pb, b, &lq, &lk);
        if (lq < 0 || lq > pb->seq_q)
            return fail(err, err_size, FAI_ERR_INVALID_ARG, "query length %lld of batch %lld",
                        (long long)lq, (long long)b);
        const int64_t kv_cap = kvmap->paged ? pb->pages_per_seq * pb->page_size : pb->seq_kv;
        if (lk < 0 || lk > kv_cap)
            return fail(err, err_size, FAI_ERR_INVALID_ARG, "key length %lld of batch %lld",
                        (long long)lk, (long long)b);
        if (kvmap->paged)
            for (int64_t p = 0; p * pb->page_size < lk; p++) {
                const int32_t page = t->block_table[b * kvmap->bt_stride + p];
                if (page < 0 || page >= pb->num_pages)
                    return fail(err, err_size, FAI_ERR_INVALID_ARG, "block_table[%lld][%lld] = %d",
                                (long long)b, (long long)p, page);
            }
        if (lq > 0 && lk > 0 && pb->mask_kind != FAI_MASK_NONE && !t->mask.data)
            return fail(err, err_size, FAI_ERR_INVALID_ARG, "mask data NULL");
        if (lk > *max_lk) *max_lk = lk;
    }
    return FAI_OK;
}

/* The output arrays for groups x rows x heads_q rows of head_dim_v; 0 or -1 (out of memory). */
static int alloc_out(fai_oracle_out *out, int64_t groups, int64_t rows, int64_t heads_q,
                     int64_t head_dim_v) {
    out->groups = groups;
    out->rows = rows;
    out->heads_q = heads_q;
    out->head_dim_v = head_dim_v;
    const size_t n_rows = (size_t)(groups * rows * heads_q);
    out->o = calloc(n_rows * (size_t)head_dim_v + 1, sizeof(double));
    out->lse = malloc((n_rows + 1) * sizeof(double));
    out->row_state = malloc(n_rows + 1);
    out->o_mag = calloc(n_rows * (size_t)head_dim_v + 1, sizeof(double));
    out->logit_mag = calloc(n_rows + 1, sizeof(double));
    out->keys = calloc(n_rows + 1, sizeof(int64_t));
    if (!out->o || !out->lse || !out->row_state || !out->o_mag || !out->logit_mag || !out->keys)
        return -1;
    for (size_t r = 0; r < n_rows; r++) {
        out->lse[r] = -INFINITY;
        out->row_state[r] = FAI_ORACLE_ROW_PAST;
    }
    return 0;
}

/* One kv head's work: its decoded keys and values, the problem, and per-row scratch. */
typedef struct head_work {
    const fai_problem *pb;
    const fai_tensors *t;
    double scale;                     /* the softmax scale, resolved */
    int64_t wl, wr;                   /* the window, causal folded into wr */
    const double *kd, *vd;            /* [lk, D], [lk, Dv]: K and V, dequantized */
    double *s, *qd;                   /* [lk] scores, [D] the query */
    unsigned char *vis;               /* [lk] which keys the row sees */
    int64_t b, lk, shift, head_dim_v; /* shift: the key index of query 0's position */
} head_work;

/* The additive mask value of (query i, key j) of head h into *add; 0 when the mask removes the
 * key. */
static int mask_keeps(const head_work *w, int64_t h, int64_t i, int64_t j, double *add) {
    const fai_problem *pb = w->pb;
    const fai_mask *mask = &w->t->mask;
    *add = 0.0;
    if (pb->mask_kind == FAI_MASK_NONE) return 1;
    const int64_t mo = w->b * mask->stride_batch + h * mask->stride_head + i * mask->stride_q + j;
    if (pb->mask_kind == FAI_MASK_ADD) {
        float f;
        memcpy(&f, (const char *)mask->data + mo * 4, 4);
        if (f == -INFINITY) return 0;
        *add = (double)f;
        return 1;
    }
    if (pb->mask_kind == FAI_MASK_KEEP_BITS) {
        const unsigned char byte = ((const unsigned char *)mask->data)[mo - j + j / 8];
        return (byte >> (j % 8)) & 1;
    }
    const unsigned char byte = ((const unsigned char *)mask->data)[mo];
    return (pb->mask_kind == FAI_MASK_KEEP) != (byte == 0);
}

/* Query i of head h (its row orow of the output, LSE at *lse): the visible keys' scores in
 * w->s, then O, LSE and the magnitudes the tolerances use. */
static void attend_row(const head_work *w, int64_t h, int64_t i, size_t orow, double *lse,
                       fai_oracle_out *out) {
    const fai_problem *pb = w->pb;
    const fai_tensors *t = w->t;
    const int64_t D = pb->head_dim, Dv = w->head_dim_v;
    double *o = out->o + orow * (size_t)Dv;
    double *o_mag = out->o_mag + orow * (size_t)Dv;
    double logit_mag = 0.0;
    int64_t keys = 0;
    const int64_t diag = i + w->shift;
    const double cap = pb->softcap;
    const double slope = pb->alibi ? (double)t->alibi_slopes[h] : 0.0;
    const double sink = pb->sinks ? (double)t->sinks[h] : -INFINITY;
    double m = -INFINITY;
    for (int64_t j = 0; j < w->lk; j++) {
        w->vis[j] = 0;
        if (w->wl >= 0 && j < diag - w->wl) continue;
        if (w->wr >= 0 && j > diag + w->wr) continue;
        double add;
        if (!mask_keeps(w, h, i, j, &add)) continue;
        double dot = 0.0, dot_mag = 0.0;
        for (int64_t d = 0; d < D; d++) {
            dot += w->qd[d] * w->kd[j * D + d];
            dot_mag += fabs(w->qd[d] * w->kd[j * D + d]);
        }
        const double raw = w->scale * dot;
        double logit = raw, mag = fabs(w->scale) * dot_mag;
        if (cap > 0.0) {
            /* the raw logit's rounding passes through tanh's slope, and the capped value
             * brings the tanh's own */
            logit = cap * tanh(raw / cap);
            const double slope_there = 1.0 / cosh(raw / cap);
            mag = mag * slope_there * slope_there + 2.0 * fabs(logit);
        }
        const double bias = slope * fabs((double)(j - diag));
        w->s[j] = logit - bias + add;
        w->vis[j] = 1;
        keys++;
        mag += fabs(add) + fabs(bias);
        if (mag > logit_mag) logit_mag = mag;
        /* a NaN logit makes the max NaN for good, and so the whole row */
        if (w->s[j] > m || isnan(w->s[j])) m = w->s[j];
    }
    if (m == -INFINITY) {
        out->row_state[orow] = FAI_ORACLE_ROW_MASKED;
        out->rows_masked++;
        *lse = sink; /* -inf without a sink */
        return;      /* O stays 0 */
    }
    /* the sink joins the denominator (a NaN row stays NaN) */
    if (sink > m) m = sink;
    double sum = sink > -INFINITY ? exp(sink - m) : 0.0;
    if (sink > -INFINITY && fabs(sink) > logit_mag) logit_mag = fabs(sink);
    for (int64_t j = 0; j < w->lk; j++) {
        if (!w->vis[j]) continue;
        const double p = exp(w->s[j] - m);
        sum += p;
        for (int64_t d = 0; d < Dv; d++) {
            o[d] += p * w->vd[j * Dv + d];
            o_mag[d] += p * fabs(w->vd[j * Dv + d]);
        }
    }
    for (int64_t d = 0; d < Dv; d++) {
        o[d] /= sum;
        o_mag[d] /= sum;
    }
    out->logit_mag[orow] = logit_mag;
    out->keys[orow] = keys;
    *lse = m + log(sum);
    out->row_state[orow] = FAI_ORACLE_ROW_VALID;
    out->rows_valid++;
}

/* Sequence b's keys and values of kv head hk, dequantized, into kd [lk, D] and vd [lk, Dv]. */
static void decode_kv(const fai_problem *pb, const fai_tensors *t, const seq_map *kvmap, int64_t b,
                      int64_t hk, int64_t lk, int64_t Dv, double *kd, double *vd) {
    const int64_t D = pb->head_dim;
    for (int64_t j = 0; j < lk; j++) {
        const int64_t ko = token_offset(kvmap, &t->k, b, j) + hk * t->k.stride_head;
        const int64_t vo = token_offset(kvmap, &t->v, b, j) + hk * t->v.stride_head;
        const double ks = token_scale(kvmap, &t->k_scale, pb->k_dtype, b, j, hk);
        const double vs = token_scale(kvmap, &t->v_scale, pb->v_dtype, b, j, hk);
        const float *channels = pb->k_channel_scales
                                    ? t->k_channel_scale.data + hk * t->k_channel_scale.stride_head
                                    : NULL;
        for (int64_t d = 0; d < D; d++)
            kd[j * D + d] = ks * (channels ? (double)channels[d] : 1.0) *
                            fai_oracle_load(t->k.data, pb->k_dtype, ko + d);
        for (int64_t d = 0; d < Dv; d++)
            vd[j * Dv + d] = vs * fai_oracle_load(t->v.data, pb->v_dtype, vo + d);
    }
}

fai_status fai_oracle_run(const fai_problem *pb, const fai_tensors *t, fai_oracle_out *out,
                          char *err, size_t err_size) {
    if (err && err_size) err[0] = 0;
    if (!pb || !t || !out) return fail(err, err_size, FAI_ERR_INVALID_ARG, "NULL argument");
    memset(out, 0, sizeof *out);
    const fai_status checked = check_problem(pb, t, err, err_size);
    if (checked != FAI_OK) return checked;

    const int64_t B = pb->batch, Hq = pb->heads_q, Hkv = pb->heads_kv;
    const int64_t Sq = pb->seq_q, D = pb->head_dim, Dv = fai_oracle_head_dim_v(pb);
    uint32_t scale_bits;
    memcpy(&scale_bits, &pb->scale, sizeof scale_bits);
    const double scale =
        scale_bits == FAI_SCALE_DEFAULT_BITS ? 1.0 / sqrt((double)D) : (double)pb->scale;
    const int64_t G = Hq / Hkv;
    const int64_t groups = pb->cu_seqlens_q ? 1 : B;
    if ((double)groups * (double)Sq * (double)Hq * (double)Dv > 1e9)
        return fail(err, err_size, FAI_ERR_OVERFLOW, "output too large for the reference");
    if (alloc_out(out, groups, Sq, Hq, Dv)) {
        fai_oracle_out_free(out);
        return fail(err, err_size, FAI_ERR_NO_MEMORY, "out of memory");
    }

    seq_map qmap = {0}, kvmap = {0};
    qmap.packed = pb->cu_seqlens_q != NULL;
    qmap.cu = pb->cu_seqlens_q;
    kvmap.packed = pb->cu_seqlens_kv != NULL;
    kvmap.cu = pb->cu_seqlens_kv;
    kvmap.paged = pb->page_size > 0;
    kvmap.bt = t->block_table;
    kvmap.bt_stride = t->block_table_stride ? t->block_table_stride : pb->pages_per_seq;
    kvmap.page_size = pb->page_size;

    int64_t max_lk;
    const fai_status lengths = check_lengths(pb, t, &kvmap, &max_lk, err, err_size);
    if (lengths != FAI_OK) {
        fai_oracle_out_free(out);
        return lengths;
    }

    double *kd = malloc(((size_t)max_lk * (size_t)D + 1) * sizeof(double));
    double *vd = malloc(((size_t)max_lk * (size_t)Dv + 1) * sizeof(double));
    double *s = malloc(((size_t)max_lk + 1) * sizeof(double));
    unsigned char *vis = malloc((size_t)max_lk + 1);
    double *qd = malloc((size_t)D * sizeof(double));
    if (!kd || !vd || !s || !vis || !qd) {
        free(kd);
        free(vd);
        free(s);
        free(vis);
        free(qd);
        fai_oracle_out_free(out);
        return fail(err, err_size, FAI_ERR_NO_MEMORY, "out of memory");
    }

    head_work w = {pb, t, scale, pb->window_left, pb->window_right, kd, vd, s, qd, vis, 0,
                   0,  0, Dv};
    /* causal is window_right = min(window_right, 0), unbounded included: windows are -1 or >= 0 */
    if (pb->causal != FAI_CAUSAL_NONE) w.wr = 0;

    for (int64_t b = 0; b < B; b++) {
        int64_t lq, lk;
        seq_lengths(pb, b, &lq, &lk);
        /* with global positions: key j stands at kv_positions[b] + j, query i at
         * q_positions[b] + i, and diag is the key index at the query's position */
        w.b = b;
        w.lk = lk;
        w.shift = pb->q_positions ? (int64_t)pb->q_positions[b] - pb->kv_positions[b]
                  : pb->causal == FAI_CAUSAL_TOP_LEFT ? 0
                                                      : lk - lq;
        const int64_t g = pb->cu_seqlens_q ? 0 : b;
        const int64_t row0 = pb->cu_seqlens_q ? pb->cu_seqlens_q[b] : 0;

        /* visible pairs (causal, window, lengths) */
        for (int64_t i = 0; i < lq; i++) {
            const int64_t diag = i + w.shift;
            int64_t lo = 0, hi = lk - 1;
            if (w.wl >= 0 && diag - w.wl > lo) lo = diag - w.wl;
            if (w.wr >= 0 && diag + w.wr < hi) hi = diag + w.wr;
            if (hi >= lo) out->visible_pairs += (hi - lo + 1) * Hq;
        }
        if (lq == 0) continue;

        for (int64_t hk = 0; hk < Hkv; hk++) {
            decode_kv(pb, t, &kvmap, b, hk, lk, Dv, kd, vd);
            for (int64_t h = hk * G; h < (hk + 1) * G; h++)
                for (int64_t i = 0; i < lq; i++) {
                    const int64_t r = row0 + i;
                    const int64_t qo = token_offset(&qmap, &t->q, b, i) + h * t->q.stride_head;
                    for (int64_t d = 0; d < D; d++)
                        qd[d] = fai_oracle_load(t->q.data, pb->q_dtype, qo + d);
                    attend_row(&w, h, i, (size_t)((g * Sq + r) * Hq + h),
                               out->lse + (size_t)((g * Hq + h) * Sq + r), out);
                }
        }
    }
    out->rows_past = (int64_t)(groups * Sq * Hq) - out->rows_valid - out->rows_masked;
    free(kd);
    free(vd);
    free(s);
    free(vis);
    free(qd);
    return FAI_OK;
}
