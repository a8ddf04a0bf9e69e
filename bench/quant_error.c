/* quant_error: how far attention over a quantized K/V cache lands from attention over the
 * values before quantization, on the benchmark shapes P1, D1 and C1 (D = 128, f32 Q and O).
 * K and V are N(0, 1), quantized per token and kv head (scale = max |x| / qmax, codes rounded to
 * nearest even), as fai_cache_write's per-token mode does; fai then runs once on the f32 K/V
 * and once on each quantized dtype. Prints max and mean |O - O_unquantized| and max |O|. What
 * it measures is the formats' rounding, not fai's: fai computes the quantized case exactly on
 * the dequantized values (the test suite holds it to the fp64 reference).
 *
 *     cmake --build build --target fai_quant_error && ./build/fai_quant_error */
#include "fai.h"
#include "fai_oracle.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct shape {
    const char *name;
    int64_t batch, heads_q, heads_kv, seq_q, seq_kv;
    fai_causal causal;
} shape;

enum { HEAD_DIM = 128 };

/* N(0, 1) by Box-Muller from xorshift64 */
static double gaussian(uint64_t *state) {
    double u[2];
    for (int i = 0; i < 2; i++) {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        u[i] = ((double)(*state >> 11) + 0.5) / 9007199254740992.0;
    }
    return sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

static int attend(const fai_problem *pb, const fai_tensors *t) {
    fai_plan *plan;
    if (fai_plan_create(pb, &plan) != FAI_OK) return -1;
    const size_t bytes = fai_plan_workspace_size(plan);
    void *workspace = malloc(bytes ? bytes : 1);
    const fai_status status = workspace ? fai_run(plan, t, workspace, bytes) : FAI_ERR_NO_MEMORY;
    free(workspace);
    fai_plan_free(plan);
    return status == FAI_OK ? 0 : -1;
}

/* rows of HEAD_DIM floats into codes of dtype, one scale per row */
static void quantize(const float *x, size_t rows, fai_dtype dtype, unsigned char *codes,
                     float *scales) {
    const double qmax = dtype == FAI_DTYPE_I8 ? 127.0 : dtype == FAI_DTYPE_E4M3 ? 448.0 : 57344.0;
    for (size_t r = 0; r < rows; r++) {
        double top = 0.0;
        for (int d = 0; d < HEAD_DIM; d++)
            top = fmax(top, fabs(x[r * HEAD_DIM + d]));
        scales[r] = top > 0.0 ? (float)(top / qmax) : 1.0f;
        for (int d = 0; d < HEAD_DIM; d++)
            fai_oracle_store(codes, dtype, (int64_t)(r * HEAD_DIM + d),
                             x[r * HEAD_DIM + d] / scales[r]);
    }
}

static int measure(const shape *s, uint64_t *state) {
    const int64_t d = HEAD_DIM;
    const size_t n_q = (size_t)(s->batch * s->seq_q * s->heads_q * d);
    const size_t kv_rows = (size_t)(s->batch * s->seq_kv * s->heads_kv);
    float *q = malloc(n_q * 4), *k = malloc(kv_rows * d * 4), *v = malloc(kv_rows * d * 4);
    float *o_ref = malloc(n_q * 4), *o = malloc(n_q * 4);
    unsigned char *k_codes = malloc(kv_rows * d), *v_codes = malloc(kv_rows * d);
    float *k_scales = malloc(kv_rows * 4), *v_scales = malloc(kv_rows * 4);
    int status = -1;
    if (!q || !k || !v || !o_ref || !o || !k_codes || !v_codes || !k_scales || !v_scales) goto done;
    for (size_t i = 0; i < n_q; i++)
        q[i] = (float)gaussian(state);
    for (size_t i = 0; i < kv_rows * d; i++) {
        k[i] = (float)gaussian(state);
        v[i] = (float)gaussian(state);
    }
    fai_problem pb;
    fai_problem_init(&pb);
    pb.batch = s->batch;
    pb.heads_q = s->heads_q;
    pb.heads_kv = s->heads_kv;
    pb.seq_q = s->seq_q;
    pb.seq_kv = s->seq_kv;
    pb.head_dim = d;
    pb.causal = s->causal;
    pb.k_dtype = pb.v_dtype = FAI_DTYPE_F32;
    fai_tensors t;
    memset(&t, 0, sizeof t);
    t.q = fai_tensor_bshd(q, FAI_DTYPE_F32, s->seq_q, s->heads_q, d);
    t.k = fai_tensor_bshd(k, FAI_DTYPE_F32, s->seq_kv, s->heads_kv, d);
    t.v = fai_tensor_bshd(v, FAI_DTYPE_F32, s->seq_kv, s->heads_kv, d);
    t.o = fai_tensor_bshd(o_ref, FAI_DTYPE_F32, s->seq_q, s->heads_q, d);
    if (attend(&pb, &t)) goto done;
    const fai_dtype dtypes[3] = {FAI_DTYPE_I8, FAI_DTYPE_E4M3, FAI_DTYPE_E5M2};
    for (int i = 0; i < 3; i++) {
        quantize(k, kv_rows, dtypes[i], k_codes, k_scales);
        quantize(v, kv_rows, dtypes[i], v_codes, v_scales);
        pb.k_dtype = pb.v_dtype = dtypes[i];
        fai_tensors tq = t;
        tq.k = fai_tensor_bshd(k_codes, dtypes[i], s->seq_kv, s->heads_kv, d);
        tq.v = fai_tensor_bshd(v_codes, dtypes[i], s->seq_kv, s->heads_kv, d);
        tq.o.data = o;
        const fai_scale per_token = {k_scales, s->seq_kv * s->heads_kv, s->heads_kv, 1};
        tq.k_scale = per_token;
        tq.v_scale = per_token;
        tq.v_scale.data = v_scales;
        if (attend(&pb, &tq)) goto done;
        double worst = 0.0, sum = 0.0, top = 0.0;
        for (size_t j = 0; j < n_q; j++) {
            const double err = fabs((double)o[j] - (double)o_ref[j]);
            worst = fmax(worst, err);
            sum += err;
            top = fmax(top, fabs((double)o_ref[j]));
        }
        printf("%-3s %-5s max |O - O_unq| %.3g  mean %.3g  (max |O| %.3g)\n", s->name,
               fai_dtype_name(dtypes[i]), worst, sum / (double)n_q, top);
    }
    status = 0;
done:
    free(q), free(k), free(v), free(o_ref), free(o);
    free(k_codes), free(v_codes), free(k_scales), free(v_scales);
    return status;
}

int main(void) {
    const shape shapes[] = {{"P1", 1, 32, 8, 2048, 2048, FAI_CAUSAL_BOTTOM_RIGHT},
                            {"D1", 8, 32, 8, 1, 4096, FAI_CAUSAL_NONE},
                            {"C1", 4, 32, 8, 16, 8192, FAI_CAUSAL_BOTTOM_RIGHT}};
    uint64_t state = 88172645463325252ull;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (measure(&shapes[i], &state)) {
            fprintf(stderr, "quant_error: %s: %s\n", shapes[i].name, fai_last_error());
            return 1;
        }
    return 0;
}
