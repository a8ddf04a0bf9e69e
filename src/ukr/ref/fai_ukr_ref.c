/* Scalar reference micro-kernels: the portable table every SIMD table starts from, and the
 * baseline the SIMD entries are tested against. Plain loops in f32, libm's expf. */
#include "ukr/fai_ukr.h"
#include "util/fai_half.h"

#include <math.h>
#include <string.h>

static void pack_rows_ref(float *dst, int64_t ld_dst, const void *const *rows, int64_t n,
                          int64_t dim, fai_dtype dtype) {
    for (int64_t r = 0; r < n; r++) {
        float *out = dst + r * ld_dst;
        for (int64_t k = dim; k < ld_dst; k++) out[k] = 0.0f;
        if (dtype == FAI_DTYPE_F32) {
            memcpy(out, rows[r], (size_t)dim * sizeof(float));
        } else if (dtype == FAI_DTYPE_F16) {
            const uint16_t *in = rows[r];
            for (int64_t k = 0; k < dim; k++) out[k] = fai__f16_to_f32(in[k]);
        } else {
            const uint16_t *in = rows[r];
            for (int64_t k = 0; k < dim; k++) out[k] = fai__bf16_to_f32(in[k]);
        }
    }
}

static void qk_ref(float *s, int64_t ld_s, const float *q, const float *k, int64_t ld_qk, int64_t m,
                   int64_t n, float scale) {
    const int64_t d = ld_qk;
    for (int64_t i = 0; i < m; i++) {
        const float *q_row = q + i * d;
        for (int64_t j = 0; j < n; j++) {
            const float *k_row = k + j * d;
            float dot = 0.0f;
            for (int64_t x = 0; x < d; x++) dot += q_row[x] * k_row[x];
            s[i * ld_s + j] = dot * scale;
        }
    }
}

static void softmax_ref(float *s, int64_t ld_s, int64_t m, int64_t n, float *row_max,
                        float *row_sum, float *row_alpha) {
    for (int64_t i = 0; i < m; i++) {
        float *s_row = s + i * ld_s;
        float tile_max = -INFINITY;
        for (int64_t j = 0; j < n; j++)
            if (s_row[j] > tile_max) tile_max = s_row[j];
        const float old_max = row_max[i];
        const float new_max = tile_max > old_max ? tile_max : old_max;
        if (new_max == -INFINITY) { /* nothing visible yet: keep the row empty */
            for (int64_t j = 0; j < n; j++) s_row[j] = 0.0f;
            row_alpha[i] = 1.0f;
            continue;
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            const float p = expf(s_row[j] - new_max);
            s_row[j] = p;
            sum += p;
        }
        const float alpha = old_max == new_max ? 1.0f : expf(old_max - new_max);
        row_alpha[i] = alpha;
        row_sum[i] = row_sum[i] * alpha + sum;
        row_max[i] = new_max;
    }
}

static void rescale_o_ref(float *o, int64_t ld_o, int64_t m, const float *row_alpha) {
    for (int64_t i = 0; i < m; i++) {
        const float alpha = row_alpha[i];
        if (alpha == 1.0f) continue;
        for (int64_t x = 0; x < ld_o; x++) o[i * ld_o + x] *= alpha;
    }
}

static void pv_ref(float *o, int64_t ld_o, const float *p, int64_t ld_p, const float *v, int64_t m,
                   int64_t n) {
    const int64_t dv = ld_o;
    for (int64_t i = 0; i < m; i++) {
        float *o_row = o + i * dv;
        for (int64_t j = 0; j < n; j++) {
            const float pij = p[i * ld_p + j];
            if (pij == 0.0f) continue;
            const float *v_row = v + j * dv;
            for (int64_t x = 0; x < dv; x++) o_row[x] += pij * v_row[x];
        }
    }
}

static void store_row_ref(void *dst, fai_dtype dtype, const float *src, int64_t dim, float mul) {
    if (dtype == FAI_DTYPE_F32) {
        float *out = dst;
        for (int64_t x = 0; x < dim; x++) out[x] = src[x] * mul;
    } else if (dtype == FAI_DTYPE_F16) {
        uint16_t *out = dst;
        for (int64_t x = 0; x < dim; x++) out[x] = fai__f32_to_f16_sat(src[x] * mul);
    } else {
        uint16_t *out = dst;
        for (int64_t x = 0; x < dim; x++) out[x] = fai__f32_to_bf16(src[x] * mul);
    }
}

void fai_cntx_init_ref(fai_cntx *cntx) {
    cntx->name = "ref";
    cntx->simd_width = 1;
    cntx->pack_rows = pack_rows_ref;
    cntx->qk = qk_ref;
    cntx->softmax = softmax_ref;
    cntx->rescale_o = rescale_o_ref;
    cntx->pv = pv_ref;
    cntx->store_row = store_row_ref;
}
