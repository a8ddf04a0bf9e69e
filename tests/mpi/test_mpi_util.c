/* Data, reference and comparison for the MPI tests. */
#include "test_mpi_util.h"

#include "fai_oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void test_fill(float *values, int64_t count, uint64_t seed) {
    uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < count; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        values[i] = (float)((int)((state >> 33) & 255) - 128) / 128.0f;
    }
}

void test_encode(void *dst, fai_dtype dtype, const float *src, int64_t count) {
    for (int64_t i = 0; i < count; i++)
        fai_oracle_store(dst, dtype, i, src[i]);
}

void *test_alloc(size_t bytes) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "test: out of memory (%zu bytes)\n", bytes);
        abort();
    }
    return p;
}

void test_scales(float *scales, fai_dtype dtype, int kind, int64_t batch, int64_t seq,
                 int64_t heads) {
    const double qmax = dtype == FAI_DTYPE_I8 ? 127.0 : dtype == FAI_DTYPE_E4M3 ? 448.0 : 57344.0;
    for (int64_t b = 0, at = 0; b < batch; b++)
        for (int64_t s = 0; s < seq; s++)
            for (int64_t h = 0; h < heads; h++, at++) {
                /* 1 to 2 times 1 / qmax: the values of [-1, 1) use half the codes or more */
                const int64_t step = kind == TEST_SCALE_TOKEN  ? (b * seq + s) * heads + h
                                     : kind == TEST_SCALE_HEAD ? h
                                                               : 0;
                scales[at] = (float)((1.0 + (double)(step % 5) / 4.0) / qmax);
            }
}

fai_scale test_scale_view(float *scales, int kind, int64_t seq, int64_t heads) {
    fai_scale view;
    memset(&view, 0, sizeof view);
    view.data = scales;
    if (kind == TEST_SCALE_TOKEN) view.stride_batch = seq * heads, view.stride_seq = heads;
    if (kind != TEST_SCALE_TENSOR) view.stride_head = 1;
    return view;
}

fai_scale test_scales_of(fai_dtype dtype, float *scales, int kind, int64_t seq, int64_t heads) {
    fai_scale none;
    memset(&none, 0, sizeof none);
    return fai_dtype_is_quantized(dtype) ? test_scale_view(scales, kind, seq, heads) : none;
}

void test_quantize(void *codes, fai_dtype dtype, const float *values, const float *scales,
                   int64_t rows, int64_t dim) {
    double code_value[256]; /* NaN for the codes of NaN and Inf */
    for (int c = 0; c < 256; c++) {
        const uint8_t byte = (uint8_t)c;
        code_value[c] = fai_oracle_load(&byte, dtype, 0);
        if (!isfinite(code_value[c])) code_value[c] = NAN;
    }
    uint8_t *out = codes;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t d = 0; d < dim; d++) {
            /* the nearest finite code (the comparison is false for NaN) */
            const double x = (double)values[r * dim + d] / scales[r];
            double best_err = INFINITY;
            for (int c = 0; c < 256; c++)
                if (fabs(code_value[c] - x) < best_err)
                    best_err = fabs(code_value[c] - x), out[r * dim + d] = (uint8_t)c;
        }
}

void test_encode_rows(void *dst, fai_dtype dtype, const float *values, const float *scales,
                      int64_t rows, int64_t dim) {
    if (fai_dtype_is_quantized(dtype))
        test_quantize(dst, dtype, values, scales, rows, dim);
    else
        test_encode(dst, dtype, values, rows * dim);
}

int test_reference(const fai_problem *whole, const fai_tensors *tensors, float *o_ref,
                   float *lse_ref) {
    fai_problem pb = *whole;
    pb.o_dtype = FAI_DTYPE_F32;
    const int64_t dv = fai_oracle_head_dim_v(&pb);
    fai_tensors t = *tensors;
    t.o = fai_tensor_bshd(o_ref, FAI_DTYPE_F32, pb.seq_q, pb.heads_q, dv);
    memset(&t.lse, 0, sizeof t.lse);
    t.lse.data = lse_ref;
    t.lse.dtype = FAI_DTYPE_F32;
    t.lse.stride_batch = pb.heads_q * pb.seq_q;
    t.lse.stride_head = pb.seq_q;
    t.lse.stride_seq = 1;
    fai_plan *plan;
    if (fai_plan_create(&pb, &plan) != FAI_OK) {
        fprintf(stderr, "  reference plan: %s\n", fai_last_error());
        return -1;
    }
    const size_t bytes = fai_plan_workspace_size(plan);
    void *ws = test_alloc(bytes);
    const fai_status status = fai_run(plan, &t, ws, bytes);
    if (status != FAI_OK) fprintf(stderr, "  reference run: %s\n", fai_last_error());
    free(ws);
    fai_plan_free(plan);
    return status == FAI_OK ? 0 : -1;
}

double test_o_excess(const void *o, fai_dtype o_dtype, int low_precision_inputs, const float *ref,
                     int64_t count) {
    /* the whole run reads the same values as the shards: they differ by the merge's f32
     * roundings, well inside the dtype term of the library's bound (2^-14) */
    const double tolerance = low_precision_inputs ? 0x1.0p-14 : 1e-5;
    /* the output's rounding to nearest: half a step of its type, at the reference's magnitude */
    const double step = o_dtype == FAI_DTYPE_F16    ? ldexp(1.0, -11)
                        : o_dtype == FAI_DTYPE_BF16 ? ldexp(1.0, -8)
                                                    : 0.0;
    double worst = -INFINITY;
    for (int64_t i = 0; i < count; i++) {
        const double want = ref[i], got = fai_oracle_load(o, o_dtype, i);
        const double allowed = tolerance * fmax(1.0, fabs(want)) + step * fabs(want);
        const double excess = isnan(got) ? INFINITY : fabs(got - want) - allowed;
        if (excess > worst) worst = excess;
    }
    return worst;
}

double test_lse_excess(const float *lse, int low_precision_inputs, const float *ref,
                       int64_t count) {
    const double tolerance = low_precision_inputs ? 0x1.0p-14 : 1e-5;
    double worst = -INFINITY;
    for (int64_t i = 0; i < count; i++) {
        double excess;
        if (isinf(ref[i]) || isinf(lse[i]))
            excess = ref[i] == lse[i] ? -1.0 : INFINITY;
        else
            excess = isnan(lse[i]) ? INFINITY
                                   : fabs(lse[i] - ref[i]) - tolerance * fmax(1.0, fabs(ref[i]));
        if (excess > worst) worst = excess;
    }
    return worst;
}
