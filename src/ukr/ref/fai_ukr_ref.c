/* Scalar reference micro-kernels: the portable table every SIMD table starts from, and the
 * baseline the SIMD entries are tested against. Plain loops in f32, libm's expf. */
#include "ukr/fai_ukr.h"
#include "util/fai_half.h"

#include <math.h>
#include <string.h>

static void pack_q_ref(float *q_t, int64_t ld_s, const void *const *rows, int64_t m, int64_t d,
                       fai_dtype dtype) {
    for (int64_t x = 0; x < d; x++) {
        float *out = q_t + x * ld_s;
        for (int64_t i = 0; i < m; i++)
            out[i] = fai__load_element(rows[i], x, dtype);
        for (int64_t i = m; i < ld_s; i++)
            out[i] = 0.0f;
    }
}

static int pack_rows_ref(float *dst, int64_t ld_dst, const void *const *rows, int64_t n,
                         int64_t dim, fai_dtype dtype, const float *scales) {
    int finite = 1;
    for (int64_t r = 0; r < n; r++) {
        float *out = dst + r * ld_dst;
        for (int64_t k = 0; k < dim; k++)
            out[k] = fai__load_element(rows[r], k, dtype) * (scales ? scales[r] : 1.0f);
        for (int64_t k = dim; k < ld_dst; k++)
            out[k] = 0.0f;
        for (int64_t k = 0; k < dim; k++)
            finite &= isfinite(out[k]) != 0;
    }
    return finite;
}

static void qk_ref(float *s_t, int64_t ld_s, const float *q_t, const float *k, int64_t n, int64_t d,
                   float scale) {
    for (int64_t j = 0; j < n; j++) {
        float *s_row = s_t + j * ld_s;
        for (int64_t i = 0; i < ld_s; i++)
            s_row[i] = 0.0f;
        for (int64_t x = 0; x < d; x++) {
            const float k_jx = k[j * d + x];
            const float *q_row = q_t + x * ld_s;
            for (int64_t i = 0; i < ld_s; i++)
                s_row[i] += k_jx * q_row[i];
        }
        for (int64_t i = 0; i < ld_s; i++)
            s_row[i] *= scale;
    }
}

/* NaN as in the SIMD tables: the max skips NaN scores (the comparison fails), a NaN score
 * still gives P = NaN and a NaN sum, and a NaN sum makes the row's max NaN, which then stays
 * (it fails every later comparison) and marks the row as one that saw a NaN. */
static void softmax_ref(float *s_t, int64_t ld_s, int64_t m, int64_t n, float *row_max,
                        float *row_sum, float *row_alpha) {
    for (int64_t i = 0; i < m; i++) {
        float tile_max = -INFINITY;
        for (int64_t j = 0; j < n; j++)
            if (s_t[j * ld_s + i] > tile_max) tile_max = s_t[j * ld_s + i];
        const float old_max = row_max[i];
        const float new_max = tile_max > old_max ? tile_max : old_max;
        /* nothing visible yet: subtract 0, so -inf gives P = 0 and NaN stays NaN */
        const float shift = new_max == -INFINITY ? 0.0f : new_max;
        float sum = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            const float p = expf(s_t[j * ld_s + i] - shift);
            s_t[j * ld_s + i] = p;
            sum += p;
        }
        const float alpha = old_max == new_max ? 1.0f : expf(old_max - new_max);
        row_alpha[i] = alpha;
        row_sum[i] = row_sum[i] * alpha + sum;
        row_max[i] = isnan(row_sum[i]) ? row_sum[i] : new_max;
    }
}

static void rescale_o_ref(float *o, int64_t ld_o, int64_t m, const float *row_alpha) {
    for (int64_t i = 0; i < m; i++) {
        const float alpha = row_alpha[i];
        if (alpha == 1.0f) continue;
        for (int64_t x = 0; x < ld_o; x++)
            o[i * ld_o + x] *= alpha;
    }
}

/* Skips zero P always, masked tile or not: the reference is exact by construction. */
static void pv_ref(float *o, int64_t ld_o, const float *p_t, int64_t ld_s, const float *v,
                   int64_t m, int64_t n, int masked) {
    for (int64_t i = 0; i < m; i++) {
        float *o_row = o + i * ld_o;
        for (int64_t j = 0; j < n; j++) {
            const float p = p_t[j * ld_s + i];
            if (p == 0.0f) continue;
            const float *v_row = v + j * ld_o;
            for (int64_t x = 0; x < ld_o; x++)
                o_row[x] += p * v_row[x];
        }
    }
}

static void qk_rows_ref(float *s, int64_t ld_n, const float *q, int64_t ld_q, int64_t m,
                        const void *const *k_rows, int64_t rows_ahead, const fai_row_fetch *fetch,
                        fai_dtype k_dtype, int64_t n, int64_t d, float scale,
                        const float *key_scale) {
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            float dot = 0.0f;
            for (int64_t x = 0; x < d; x++)
                dot += q[i * ld_q + x] * fai__load_element(k_rows[j], x, k_dtype);
            s[i * ld_n + j] = dot * scale;
            if (key_scale) s[i * ld_n + j] *= key_scale[j];
        }
        for (int64_t j = n; j < ld_n; j++)
            s[i * ld_n + j] = -INFINITY;
    }
}

/* The column-major softmax applied to row-major scores: one row at a time, with a stride. */
static void softmax_rows_ref(float *s, int64_t ld_n, int64_t m, float *row_max, float *row_sum,
                             float *row_alpha, const float *p_scale) {
    for (int64_t i = 0; i < m; i++) {
        softmax_ref(s + i * ld_n, 1, 1, ld_n, row_max + i, row_sum + i, row_alpha + i);
        for (int64_t j = 0; p_scale && j < ld_n; j++)
            s[i * ld_n + j] *= p_scale[j];
    }
}

static void pv_rows_ref(float *o, int64_t ld_o, const float *p_row, int64_t ld_n, int64_t m,
                        const void *const *v_rows, int64_t rows_ahead, const fai_row_fetch *fetch,
                        fai_dtype v_dtype, int64_t n, int64_t dv, int masked) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            const float p = p_row[i * ld_n + j];
            if (p == 0.0f) continue;
            for (int64_t x = 0; x < dv; x++)
                o[i * ld_o + x] += p * fai__load_element(v_rows[j], x, v_dtype);
        }
}

static void store_row_ref(void *dst, fai_dtype dtype, const float *src, int64_t dim, float mul) {
    for (int64_t x = 0; x < dim; x++)
        fai__store_element(dst, x, dtype, src[x] * mul);
}

static void exp_array_ref(float *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = expf(src[i]);
}

static void tanh_array_ref(float *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = tanhf(src[i]);
}

static float mod_score_ref(float s, int64_t c, int64_t r, const fai_score_mods *mods) {
    s *= mods->scale;
    if (mods->softcap > 0.0f) s = mods->softcap * tanhf(s * (1.0f / mods->softcap));
    if (mods->slope) s -= mods->slope[r] * fabsf((float)c + mods->offset[r]);
    return s;
}

static void mods_t_ref(float *s_t, int64_t ld_s, int64_t n, const fai_score_mods *mods) {
    for (int64_t c = 0; c < n; c++)
        for (int64_t r = 0; r < ld_s; r++)
            s_t[c * ld_s + r] = mod_score_ref(s_t[c * ld_s + r], c, r, mods);
}

static void mods_rows_ref(float *s, int64_t ld_n, int64_t m, int64_t n,
                          const fai_score_mods *mods) {
    for (int64_t r = 0; r < m; r++)
        for (int64_t c = 0; c < n; c++)
            s[r * ld_n + c] = mod_score_ref(s[r * ld_n + c], c, r, mods);
}

static void scale_keys_t_ref(float *s_t, int64_t ld_s, int64_t n, const float *scale) {
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < ld_s; i++)
            s_t[j * ld_s + i] *= scale[j];
}

static void scale_keys_rows_ref(float *s, int64_t ld_n, int64_t m, int64_t n, const float *scale) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            s[i * ld_n + j] *= scale[j];
}

void fai__cntx_init_ref(fai_cntx *cntx) {
    cntx->name = "ref";
    cntx->simd_width = 1;
    cntx->pack_q = pack_q_ref;
    cntx->pack_rows = pack_rows_ref;
    cntx->qk = qk_ref;
    cntx->softmax = softmax_ref;
    cntx->rescale_o = rescale_o_ref;
    cntx->pv = pv_ref;
    cntx->store_row = store_row_ref;
    cntx->exp_array = exp_array_ref;
    cntx->qk_rows = qk_rows_ref;
    cntx->softmax_rows = softmax_rows_ref;
    cntx->pv_rows = pv_rows_ref;
    cntx->mods_t = mods_t_ref;
    cntx->mods_rows = mods_rows_ref;
    cntx->tanh_array = tanh_array_ref;
    cntx->scale_keys_t = scale_keys_t_ref;
    cntx->scale_keys_rows = scale_keys_rows_ref;
}
