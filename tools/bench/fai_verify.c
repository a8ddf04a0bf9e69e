/* fp64 spot checks of a shape's output (see fai_verify.h). Written apart from the library and
 * the full oracle: one row at a time, so even the long decode shapes check in a blink. */
#include "fai_verify.h"
#include "fai_oracle.h"

#include <math.h>
#include <stdlib.h>

/* Address of element (b, s, h, 0) of a tensor, in elements. */
static int64_t element_index(const fai_tensor *t, int64_t b, int64_t s, int64_t h) {
    return b * t->stride_batch + s * t->stride_seq + h * t->stride_head;
}

/* Row of key j in the K/V tensors: its page and slot when paged, else (b, j); and the scale of
 * a quantized K or V there. */
static void key_place(const ft_shape *shape, const ft_shape_data *data, int64_t b, int64_t j,
                      int64_t *row_b, int64_t *row_s) {
    *row_b = b;
    *row_s = j;
    if (!shape->page_size) return;
    *row_b = data->block_table[b * data->problem.pages_per_seq + j / shape->page_size];
    *row_s = j % shape->page_size;
}

static int64_t key_index(const ft_shape *shape, const ft_shape_data *data, const fai_tensor *t,
                         int64_t b, int64_t j, int64_t hk) {
    int64_t row_b, row_s;
    key_place(shape, data, b, j, &row_b, &row_s);
    return element_index(t, row_b, row_s, hk);
}

static double key_scale(const ft_shape *shape, const ft_shape_data *data, const fai_tensor *t,
                        const fai_scale *scale, int64_t b, int64_t j, int64_t hk) {
    int64_t row_b, row_s;
    key_place(shape, data, b, j, &row_b, &row_s);
    return ft_shape_scale(t, scale, row_b, row_s, hk);
}

/* fp64 attention of query row (b, i, h) into o_row, and sum_j p_j |v_j| into o_mag; returns the
 * row's rounding term of the tolerance, 2 eps_f32 (L + sqrt(n)) (README, "Tolerances"). scores
 * holds skv doubles of scratch. */
static double reference_row(const ft_shape *shape, const ft_shape_data *data, int64_t b, int64_t i,
                            int64_t h, double *o_row, double *o_mag, double *scores) {
    const fai_tensors *t = &data->tensors;
    const int64_t d = shape->d, dv = shape->dv;
    const int64_t hk = h / (shape->hq / shape->hkv);
    const double scale = 1.0 / sqrt((double)d);
    const double cap = shape->softcap;
    const double slope = shape->alibi ? (double)data->alibi_slopes[h] : 0.0;
    const double sink = shape->sinks ? (double)data->sinks[h] : -INFINITY;
    const int64_t diag = shape->causal == FAI_CAUSAL_TOP_LEFT ? i : i + shape->skv - shape->sq;
    int64_t first, last;
    ft_shape_visible_keys(shape, i, &first, &last);
    double max_score = -INFINITY, logit_mag = 0.0;
    const int64_t q0 = element_index(&t->q, b, i, h);
    for (int64_t j = first; j <= last; j++) {
        const int64_t k0 = key_index(shape, data, &t->k, b, j, hk);
        const double k_scale = key_scale(shape, data, &t->k, &t->k_scale, b, j, hk);
        double dot = 0.0, dot_mag = 0.0;
        for (int64_t x = 0; x < d; x++) {
            const double term = fai_oracle_load(t->q.data, t->q.dtype, q0 + x) * k_scale *
                                ft_shape_channel_scale(&t->k_channel_scale, hk, x) *
                                fai_oracle_load(t->k.data, t->k.dtype, k0 + x);
            dot += term;
            dot_mag += fabs(term);
        }
        double s = dot * scale, mag = dot_mag * scale;
        if (cap > 0.0) { /* the tolerance on the capped logits (fai_oracle.c) */
            const double slope_there = 1.0 / cosh(s / cap);
            s = cap * tanh(s / cap);
            mag = mag * slope_there * slope_there + 2.0 * fabs(s);
        }
        const double bias = slope * fabs((double)(j - diag));
        scores[j] = s - bias;
        mag += fabs(bias);
        if (scores[j] > max_score) max_score = scores[j];
        if (mag > logit_mag) logit_mag = mag;
    }
    if (sink > max_score) max_score = sink;
    if (sink > -INFINITY && fabs(sink) > logit_mag) logit_mag = fabs(sink);
    double sum = sink > -INFINITY ? exp(sink - max_score) : 0.0;
    for (int64_t x = 0; x < dv; x++)
        o_row[x] = o_mag[x] = 0.0;
    for (int64_t j = first; j <= last; j++) {
        const double p = exp(scores[j] - max_score);
        const int64_t v0 = key_index(shape, data, &t->v, b, j, hk);
        const double v_scale = key_scale(shape, data, &t->v, &t->v_scale, b, j, hk);
        sum += p;
        for (int64_t x = 0; x < dv; x++) {
            const double value = v_scale * fai_oracle_load(t->v.data, t->v.dtype, v0 + x);
            o_row[x] += p * value;
            o_mag[x] += p * fabs(value);
        }
    }
    for (int64_t x = 0; x < dv; x++) {
        o_row[x] = sum > 0.0 ? o_row[x] / sum : 0.0;
        o_mag[x] = sum > 0.0 ? o_mag[x] / sum : 0.0;
    }
    const int64_t keys = last >= first ? last - first + 1 : 0;
    return 2.0 * ldexp(1.0, -23) * (logit_mag + sqrt((double)keys));
}

/* Folds fai's row (b, i, h) into the worst element so far, by error over its tolerance: the error
 * relative to max(1, o_mag), against tolerance t + rounding (times the same). */
static void row_error(const ft_shape_data *data, int64_t b, int64_t i, int64_t h,
                      const double *o_row, const double *o_mag, int64_t dv, double tol,
                      double *worst_err, double *worst_tol) {
    const fai_tensor *o = &data->tensors.o;
    const int64_t o0 = element_index(o, b, i, h);
    for (int64_t x = 0; x < dv; x++) {
        const double got = fai_oracle_load(o->data, o->dtype, o0 + x);
        double err = fabs(got - o_row[x]) / fmax(1.0, o_mag[x]);
        if (isnan(err)) err = INFINITY; /* NaN is the worst */
        if (!(err / tol <= *worst_err / *worst_tol)) *worst_err = err, *worst_tol = tol;
    }
}

double ft_verify_rows(const ft_shape *shape, const ft_shape_data *data, int rows, uint64_t seed,
                      double *tolerance) {
    const double t = ft_verify_tolerance(shape);
    double worst = 0.0;
    *tolerance = t + 2.0 * ldexp(1.0, -23);
    if (shape->b <= 0 || shape->sq <= 0) return 0.0;
    const int64_t dv = shape->dv;
    double *o_row = malloc((size_t)dv * 2 * sizeof(double));
    double *scores = malloc((size_t)(shape->skv + 1) * sizeof(double));
    if (!o_row || !scores) worst = INFINITY;
    for (int s = 0; s < rows && o_row && scores; s++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        const int64_t b = (int64_t)((seed >> 16) % (uint64_t)shape->b);
        const int64_t i = (int64_t)((seed >> 24) % (uint64_t)shape->sq);
        const int64_t h = (int64_t)((seed >> 40) % (uint64_t)shape->hq);
        const double rounding = reference_row(shape, data, b, i, h, o_row, o_row + dv, scores);
        row_error(data, b, i, h, o_row, o_row + dv, dv, t + rounding, &worst, tolerance);
    }
    free(o_row);
    free(scores);
    return worst;
}

/* The library's bound (docs/design.md, "Accuracy"): the dtype term 2^-14 for 16-bit or quantized
 * inputs, the 2^-8 that --round-p-bf16 documents where it is asked for, and a 16-bit output's
 * rounding to nearest. */
double ft_verify_tolerance(const ft_shape *shape) {
    const int f32_in = shape->q_dtype == FAI_DTYPE_F32 && shape->kv_dtype == FAI_DTYPE_F32;
    const double output_step = shape->out_dtype == FAI_DTYPE_F16    ? ldexp(1.0, -11)
                               : shape->out_dtype == FAI_DTYPE_BF16 ? ldexp(1.0, -8)
                                                                    : 0.0;
    const double rounded_p = shape->round_p_bf16 ? ldexp(1.0, -8) : 0.0;
    return (f32_in ? 0.0 : ldexp(1.0, -14)) + rounded_p + output_step;
}
