/* fai_merge_states: attention over a key set equals the merge of attention over its parts. The
 * parts are computed by the library itself on key ranges [0, k1) and [k1, Skv) (the same Q), the
 * whole by the fp64 oracle. */
#include "test_util.h"

#include "fai.h"
#include "fai_cases.h"
#include "fai_oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct merge_problem {
    int64_t b, hq, hkv, sq, skv, d;
    fai_dtype o_dtype;
} merge_problem;

static float uniform(uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*state >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* Attention of q over keys [key_begin, key_end) of k and v (all f32 BSHD), into o and lse. */
static int attend_range(const merge_problem *mp, const float *q, const float *k, const float *v,
                        int64_t key_begin, int64_t key_end, void *o, float *lse) {
    fai_problem pb;
    fai_problem_init(&pb);
    pb.batch = mp->b, pb.heads_q = mp->hq, pb.heads_kv = mp->hkv;
    pb.seq_q = mp->sq, pb.seq_kv = key_end - key_begin, pb.head_dim = mp->d;
    pb.k_dtype = pb.v_dtype = FAI_DTYPE_F32;
    pb.o_dtype = mp->o_dtype;
    fai_plan *plan;
    if (fai_plan_create(&pb, &plan) != FAI_OK) return 0;
    fai_tensors t;
    memset(&t, 0, sizeof t);
    t.q = fai_tensor_bshd((void *)q, FAI_DTYPE_F32, mp->sq, mp->hq, mp->d);
    t.k = fai_tensor_bshd((void *)(k + key_begin * mp->hkv * mp->d), FAI_DTYPE_F32, mp->skv,
                          mp->hkv, mp->d);
    t.v = fai_tensor_bshd((void *)(v + key_begin * mp->hkv * mp->d), FAI_DTYPE_F32, mp->skv,
                          mp->hkv, mp->d);
    t.o = fai_tensor_bshd(o, mp->o_dtype, mp->sq, mp->hq, mp->d);
    /* LSE as [B, Sq, Hq] so that the merge reads it with the same (b, i, h) strides */
    t.lse = (fai_tensor){lse, FAI_DTYPE_F32, mp->sq * mp->hq, mp->hq, 1, 0};
    const size_t bytes = fai_plan_workspace_size(plan);
    void *ws = malloc(bytes ? bytes : 1);
    const int ok = fai_run(plan, &t, ws, bytes) == FAI_OK;
    free(ws);
    fai_plan_free(plan);
    return ok;
}

TEST(merge_two_halves_equals_whole) {
    const merge_problem problems[] = {{2, 4, 2, 3, 37, 16, FAI_DTYPE_F32},
                                      {1, 2, 1, 1, 200, 64, FAI_DTYPE_F32},
                                      {1, 3, 3, 5, 9, 7, FAI_DTYPE_F16},
                                      {2, 2, 1, 2, 50, 32, FAI_DTYPE_BF16}};
    for (size_t n = 0; n < sizeof problems / sizeof *problems; n++) {
        const merge_problem *mp = &problems[n];
        const int64_t q_count = mp->b * mp->sq * mp->hq * mp->d;
        const int64_t kv_count = mp->b * mp->skv * mp->hkv * mp->d;
        const int64_t rows = mp->b * mp->sq * mp->hq;
        float *q = malloc(sizeof(float) * (size_t)q_count);
        float *k = malloc(sizeof(float) * (size_t)kv_count);
        float *v = malloc(sizeof(float) * (size_t)kv_count);
        uint64_t state = 11 + n;
        for (int64_t i = 0; i < q_count; i++)
            q[i] = uniform(&state);
        for (int64_t i = 0; i < kv_count; i++)
            k[i] = 3.0f * uniform(&state), v[i] = uniform(&state);
        const size_t o_bytes = (size_t)q_count * (mp->o_dtype == FAI_DTYPE_F32 ? 4 : 2);
        void *o_part[2] = {malloc(o_bytes), malloc(o_bytes)}, *o_merged = malloc(o_bytes);
        float *lse_part[2] = {malloc(sizeof(float) * (size_t)rows),
                              malloc(sizeof(float) * (size_t)rows)};
        float *lse_merged = malloc(sizeof(float) * (size_t)rows);
        const int64_t cut = mp->skv / 3;
        REQUIRE(attend_range(mp, q, k, v, 0, cut, o_part[0], lse_part[0]));
        REQUIRE(attend_range(mp, q, k, v, cut, mp->skv, o_part[1], lse_part[1]));
        fai_tensor o_parts[2], lse_parts[2];
        for (int p = 0; p < 2; p++) {
            o_parts[p] = fai_tensor_bshd(o_part[p], mp->o_dtype, mp->sq, mp->hq, mp->d);
            lse_parts[p] = (fai_tensor){lse_part[p], FAI_DTYPE_F32, mp->sq * mp->hq, mp->hq, 1, 0};
        }
        const fai_tensor o_out = fai_tensor_bshd(o_merged, mp->o_dtype, mp->sq, mp->hq, mp->d);
        const fai_tensor lse_out = {lse_merged, FAI_DTYPE_F32, mp->sq * mp->hq, mp->hq, 1, 0};
        CHECK(fai_merge_states(2, o_parts, lse_parts, mp->b, mp->sq, mp->hq, mp->d, &o_out,
                               &lse_out) == FAI_OK);

        /* the whole, in fp64 */
        fai_problem pb;
        fai_problem_init(&pb);
        pb.batch = mp->b, pb.heads_q = mp->hq, pb.heads_kv = mp->hkv, pb.seq_q = mp->sq;
        pb.seq_kv = mp->skv, pb.head_dim = mp->d, pb.k_dtype = pb.v_dtype = FAI_DTYPE_F32;
        fai_tensors t;
        memset(&t, 0, sizeof t);
        t.q = fai_tensor_bshd(q, FAI_DTYPE_F32, mp->sq, mp->hq, mp->d);
        t.k = fai_tensor_bshd(k, FAI_DTYPE_F32, mp->skv, mp->hkv, mp->d);
        t.v = fai_tensor_bshd(v, FAI_DTYPE_F32, mp->skv, mp->hkv, mp->d);
        fai_oracle_out ref;
        REQUIRE(fai_oracle_run(&pb, &t, &ref, NULL, 0) == FAI_OK);
        /* the bound of fai_case_check on the whole; 16-bit outputs are rounded twice, as parts
         * and merged: two half-ulps of the output type (2^-11 for f16, 2^-8 for bf16) on top */
        const double t_out = mp->o_dtype == FAI_DTYPE_F32   ? 0.0
                             : mp->o_dtype == FAI_DTYPE_F16 ? 2.0 / 2048
                                                            : 2.0 / 256;
        double worst = 0.0, worst_lse = 0.0; /* errors over their limits */
        for (int64_t b = 0; b < mp->b; b++)
            for (int64_t i = 0; i < mp->sq; i++)
                for (int64_t h = 0; h < mp->hq; h++) {
                    const int64_t row = (b * mp->sq + i) * mp->hq + h;
                    for (int64_t x = 0; x < mp->d; x++) {
                        const double got = fai_oracle_load(o_merged, mp->o_dtype, row * mp->d + x);
                        const double want = ref.o[row * mp->d + x];
                        worst = fmax(worst, fabs(got - want) /
                                                fai_case_o_limit(&ref, (size_t)row, x, t_out));
                    }
                    const double want_lse = ref.lse[(b * mp->hq + h) * mp->sq + i];
                    worst_lse =
                        fmax(worst_lse, fabs(lse_merged[row] - want_lse) /
                                            fai_case_lse_limit(&ref, (size_t)row, want_lse, 0.0));
                }
        CHECK(worst <= 1.0);
        CHECK(worst_lse <= 1.0);
        if (worst > 1.0 || worst_lse > 1.0)
            printf("  problem %zu: O error / tolerance %.3g, LSE error / tolerance %.3g\n", n,
                   worst, worst_lse);
        /* in place, into the first part: the same bits as into a separate output */
        CHECK(fai_merge_states(2, o_parts, lse_parts, mp->b, mp->sq, mp->hq, mp->d, &o_parts[0],
                               &lse_parts[0]) == FAI_OK);
        CHECK(memcmp(o_part[0], o_merged, o_bytes) == 0);
        CHECK(memcmp(lse_part[0], lse_merged, sizeof(float) * (size_t)rows) == 0);
        fai_oracle_out_free(&ref);
        free(q), free(k), free(v), free(o_part[0]), free(o_part[1]), free(o_merged);
        free(lse_part[0]), free(lse_part[1]), free(lse_merged);
    }
}

/* Fully masked parts (LSE = -inf) contribute nothing; all of them masked gives 0 and -inf. */
TEST(merge_masked_parts) {
    float o_a[4] = {1, 2, 3, 4}, o_b[4] = {NAN, NAN, NAN, NAN}; /* b's O is never read */
    float lse_a[1] = {0.5f}, lse_b[1] = {-INFINITY}, out[4], lse_out_value[1];
    fai_tensor o_parts[2] = {fai_tensor_bshd(o_a, FAI_DTYPE_F32, 1, 1, 4),
                             fai_tensor_bshd(o_b, FAI_DTYPE_F32, 1, 1, 4)};
    fai_tensor lse_parts[2] = {{lse_a, FAI_DTYPE_F32, 1, 1, 1, 0},
                               {lse_b, FAI_DTYPE_F32, 1, 1, 1, 0}};
    const fai_tensor o_out = fai_tensor_bshd(out, FAI_DTYPE_F32, 1, 1, 4);
    const fai_tensor lse_out = {lse_out_value, FAI_DTYPE_F32, 1, 1, 1, 0};
    REQUIRE(fai_merge_states(2, o_parts, lse_parts, 1, 1, 1, 4, &o_out, &lse_out) == FAI_OK);
    for (int x = 0; x < 4; x++)
        CHECK(out[x] == o_a[x]);
    CHECK(lse_out_value[0] == 0.5f);
    lse_a[0] = -INFINITY;
    REQUIRE(fai_merge_states(2, o_parts, lse_parts, 1, 1, 1, 4, &o_out, &lse_out) == FAI_OK);
    for (int x = 0; x < 4; x++)
        CHECK(out[x] == 0.0f);
    CHECK(lse_out_value[0] == -INFINITY);
}

/* A sink beside a large LSE: O' = O e^LSE / (e^LSE + e^sink) in every magnitude (LSE = sink
 * halves O), not e^(LSE - LSE') with LSE' rounded, which loses the sink from |LSE| near 2^29. */
TEST(apply_sinks_large_lse_keeps_the_weight) {
    const double magnitudes[] = {0.0, 0x1p32, 0x1p52, 0x1p100, -0x1p100};
    for (size_t m = 0; m < sizeof magnitudes / sizeof magnitudes[0]; m++) {
        float o[4] = {1.0f, -2.0f, 4.0f, 0.5f}, lse = (float)magnitudes[m];
        const float sink = lse;
        const fai_tensor o_t = fai_tensor_bshd(o, FAI_DTYPE_F32, 1, 1, 4);
        const fai_tensor lse_t = {&lse, FAI_DTYPE_F32, 1, 1, 1, 0};
        REQUIRE(fai_apply_sinks(&sink, 1, 1, 1, 4, &o_t, &lse_t) == FAI_OK);
        CHECK(o[0] == 0.5f && o[1] == -1.0f && o[2] == 2.0f && o[3] == 0.25f);
        CHECK(lse == (float)(magnitudes[m] + log(2.0)));
    }
}

TEST(merge_errors_name_the_field) {
    float o_a[4] = {0}, lse_a[1] = {0}, out[4] = {7, 7, 7, 7};
    fai_tensor o_part = fai_tensor_bshd(o_a, FAI_DTYPE_F32, 1, 1, 4);
    fai_tensor lse_part = {lse_a, FAI_DTYPE_F32, 1, 1, 1, 0};
    fai_tensor o_out = fai_tensor_bshd(out, FAI_DTYPE_F32, 1, 1, 4);
    CHECK(fai_merge_states(0, &o_part, &lse_part, 1, 1, 1, 4, &o_out, NULL) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "count = 0") != NULL);
    CHECK(fai_merge_states(1, &o_part, &lse_part, 1, 1, 1, 0, &o_out, NULL) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "head_dim = 0") != NULL);
    lse_part.dtype = FAI_DTYPE_F16;
    CHECK(fai_merge_states(1, &o_part, &lse_part, 1, 1, 1, 4, &o_out, NULL) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "lse_parts[0].dtype") != NULL);
    lse_part.dtype = FAI_DTYPE_F32;
    o_part.data = NULL;
    CHECK(fai_merge_states(1, &o_part, &lse_part, 1, 1, 1, 4, &o_out, NULL) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "o_parts[0].data = NULL") != NULL);
    for (int x = 0; x < 4; x++)
        CHECK(out[x] == 7.0f); /* nothing written */
    o_part.data = o_a;
    CHECK(fai_merge_states(1, &o_part, &lse_part, INT64_C(1) << 40, INT64_C(1) << 40, 1, 4, &o_out,
                           NULL) == FAI_ERR_OVERFLOW);
    /* a stride whose second row lies 2^64 bytes on would wrap onto the first: refused, for the
     * output and for a part, and by fai_apply_sinks too */
    float out2[8] = {7, 7, 7, 7, 7, 7, 7, 7}, o_b[8] = {0}, lse_b[2] = {0};
    fai_tensor o_two = fai_tensor_bshd(o_b, FAI_DTYPE_F32, 2, 1, 4);
    fai_tensor lse_two = {lse_b, FAI_DTYPE_F32, 1, 1, 1, 0};
    fai_tensor far = fai_tensor_bshd(out2, FAI_DTYPE_F32, 2, 1, 4);
    far.stride_seq = INT64_C(1) << 62;
    CHECK(fai_merge_states(1, &o_two, &lse_two, 1, 2, 1, 4, &far, NULL) == FAI_ERR_OVERFLOW);
    CHECK(strstr(fai_last_error(), "o_out strides") != NULL);
    CHECK(fai_merge_states(1, &far, &lse_two, 1, 2, 1, 4, &o_two, NULL) == FAI_ERR_OVERFLOW);
    CHECK(strstr(fai_last_error(), "o_parts[0] strides") != NULL);
    const float sink = 0.0f;
    CHECK(fai_apply_sinks(&sink, 1, 2, 1, 4, &far, &lse_two) == FAI_ERR_OVERFLOW);
    CHECK(strstr(fai_last_error(), "o strides (batch") != NULL);
    far.stride_seq = -4; /* a negative stride: refused with the strides named */
    CHECK(fai_apply_sinks(&sink, 1, 2, 1, 4, &far, &lse_two) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "o strides (batch 8, seq -4, head 4) must not be negative") !=
          NULL);
    for (int x = 0; x < 8; x++)
        CHECK(out2[x] == 7.0f);
    /* data not at a multiple of its elements' size: refused before anything is read */
    fai_tensor odd_lse = lse_part;
    odd_lse.data = (char *)lse_a + 2;
    CHECK(fai_merge_states(1, &o_part, &odd_lse, 1, 1, 1, 4, &o_out, NULL) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "lse_parts[0].data") != NULL &&
          strstr(fai_last_error(), "not aligned to its 4-byte elements") != NULL);
    fai_tensor odd_out = o_out;
    odd_out.data = (char *)out + 1;
    CHECK(fai_merge_states(1, &o_part, &lse_part, 1, 1, 1, 4, &odd_out, NULL) ==
          FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "o_out.data") != NULL);
    CHECK(fai_apply_sinks(&sink, 1, 1, 1, 4, &o_out, &odd_lse) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "lse.data") != NULL);
    for (int x = 0; x < 4; x++)
        CHECK(out[x] == 7.0f);
}

/* Outputs placed where the merge would read what it writes are refused, with nothing written:
 * o_out a row over a part, lse_out over a part's LSE shifted by one, O and LSE outputs in one
 * another, every row of o_out in one place; the output exactly one of the parts (the same data,
 * dtype and strides) merges in place. */
TEST(merge_outputs_placed_apart_or_in_place) {
    enum { ROWS = 3, D = 4 };
    float o_a[(ROWS + 1) * D], o_b[ROWS * D], lse_a[ROWS + 1], lse_b[ROWS];
    for (int i = 0; i < (ROWS + 1) * D; i++)
        o_a[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < ROWS * D; i++)
        o_b[i] = (float)(i % 5) + 0.5f;
    for (int i = 0; i < ROWS; i++)
        lse_a[i] = 0.25f * (float)i, lse_b[i] = 1.0f - 0.5f * (float)i;
    lse_a[ROWS] = 0.0f;
    fai_tensor parts[2] = {fai_tensor_bshd(o_a, FAI_DTYPE_F32, ROWS, 1, D),
                           fai_tensor_bshd(o_b, FAI_DTYPE_F32, ROWS, 1, D)};
    fai_tensor lses[2] = {{lse_a, FAI_DTYPE_F32, 0, 1, 0, 0}, {lse_b, FAI_DTYPE_F32, 0, 1, 0, 0}};
    float before_a[(ROWS + 1) * D], before_lse[ROWS + 1], out[ROWS * D + ROWS];
    memcpy(before_a, o_a, sizeof o_a);
    memcpy(before_lse, lse_a, sizeof lse_a);
    fai_tensor shifted = fai_tensor_bshd(o_a + D, FAI_DTYPE_F32, ROWS, 1, D); /* a row on */
    CHECK(fai_merge_states(2, parts, lses, 1, ROWS, 1, D, &shifted, NULL) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "o_out overlaps o_parts[0]") != NULL);
    fai_tensor o_out = fai_tensor_bshd(out, FAI_DTYPE_F32, ROWS, 1, D);
    fai_tensor lse_shifted = {lse_a + 1, FAI_DTYPE_F32, 0, 1, 0, 0};
    CHECK(fai_merge_states(2, parts, lses, 1, ROWS, 1, D, &o_out, &lse_shifted) ==
          FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "lse_out overlaps lse_parts[0]") != NULL);
    fai_tensor lse_in_o = {out + D, FAI_DTYPE_F32, 0, 1, 0, 0};
    CHECK(fai_merge_states(2, parts, lses, 1, ROWS, 1, D, &o_out, &lse_in_o) ==
          FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "o_out and lse_out overlap") != NULL);
    fai_tensor one_place = o_out;
    one_place.stride_seq = 0;
    CHECK(fai_merge_states(2, parts, lses, 1, ROWS, 1, D, &one_place, NULL) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "o_out") != NULL);
    fai_tensor over_lse = fai_tensor_bshd(lse_a, FAI_DTYPE_F32, 1, 1, D); /* O over an LSE */
    CHECK(fai_merge_states(2, parts, lses, 1, 1, 1, D, &over_lse, NULL) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "o_out overlaps lse_parts[0]") != NULL);
    CHECK(memcmp(o_a, before_a, sizeof o_a) == 0 && memcmp(lse_a, before_lse, sizeof lse_a) == 0);
    /* in place over part 0 (O and LSE), against a merge into fresh outputs */
    float lse_out[ROWS];
    fai_tensor lse_fresh = {lse_out, FAI_DTYPE_F32, 0, 1, 0, 0};
    REQUIRE(fai_merge_states(2, parts, lses, 1, ROWS, 1, D, &o_out, &lse_fresh) == FAI_OK);
    fai_tensor in_place = parts[0]; /* a batch of one: its stride is never followed */
    in_place.stride_batch = 0;
    REQUIRE(fai_merge_states(2, parts, lses, 1, ROWS, 1, D, &in_place, &lses[0]) == FAI_OK);
    CHECK(memcmp(o_a, out, sizeof(float) * ROWS * D) == 0);
    CHECK(memcmp(lse_a, lse_out, sizeof lse_out) == 0);
}

/* A 16-bit output is the merged value rounded once (as the oracle rounds the exact mean): the
 * parts' mean 1 + 2^-11 + 2^-24 lies just above the midpoint of f16's 1 and 1 + 2^-10, and
 * rounding it through f32 (which holds it as 1 + 2^-11, the midpoint, then rounds to even) gave
 * 1. bf16 alike, at 1 + 2^-8 + 2^-24; and fai_apply_sinks' rescaling the same way. */
TEST(merge_16bit_output_rounds_once) {
    const float halves[2][2] = {{1.0f + 0x1p-11f + 0x1p-23f, 1.0f + 0x1p-11f},
                                {1.0f + 0x1p-8f + 0x1p-23f, 1.0f + 0x1p-8f}};
    const fai_dtype dtypes[2] = {FAI_DTYPE_F16, FAI_DTYPE_BF16};
    for (int t = 0; t < 2; t++) {
        float a = halves[t][0], b = halves[t][1], lse[2] = {0.5f, 0.5f};
        fai_tensor parts[2] = {fai_tensor_bshd(&a, FAI_DTYPE_F32, 1, 1, 1),
                               fai_tensor_bshd(&b, FAI_DTYPE_F32, 1, 1, 1)};
        fai_tensor lses[2] = {{&lse[0], FAI_DTYPE_F32, 0, 0, 0, 0},
                              {&lse[1], FAI_DTYPE_F32, 0, 0, 0, 0}};
        uint16_t out = 0;
        fai_tensor o_out = fai_tensor_bshd(&out, dtypes[t], 1, 1, 1);
        REQUIRE(fai_merge_states(2, parts, lses, 1, 1, 1, 1, &o_out, NULL) == FAI_OK);
        const double mean = ((double)a + (double)b) / 2.0;
        const uint16_t wanted = t == 0 ? fai_oracle_f16_encode(mean) : fai_oracle_bf16_encode(mean);
        CHECK(out == wanted);
        CHECK(wanted == (t == 0 ? 0x3c01 : 0x3f81)); /* 1 + 2^-10, 1 + 2^-7: rounded up */
    }
    /* a sink of weight 1 beside an f16 O of weight e^-1.705: O = 1 + 2^-9 times
     * e^-1.705 / (e^-1.705 + 1) is 0.15411377..., which rounds to f16's 0.1542 but through
     * f32 to 0.154 */
    uint16_t o16 = 0x3c02;
    float lse = -1.705f;
    const float sink = 0.0f;
    const double kept = exp((double)lse), mul = kept / (kept + 1.0);
    const double exact = fai_oracle_f16_decode(o16) * mul;
    fai_tensor o = fai_tensor_bshd(&o16, FAI_DTYPE_F16, 1, 1, 1);
    fai_tensor lse_t = {&lse, FAI_DTYPE_F32, 0, 0, 0, 0};
    REQUIRE(fai_apply_sinks(&sink, 1, 1, 1, 1, &o, &lse_t) == FAI_OK);
    CHECK(o16 == fai_oracle_f16_encode(exact));
}
