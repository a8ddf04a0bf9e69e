/* fai_run_profiled: the same output as fai_run, bit for bit; the stage times add up to the
 * threads' busy time, which is within the wall time; the stages that must run do; a split-KV plan
 * shows merge time; errors name the field. */
#include "test_util.h"

#include "fai.h"
#include "fai_cases.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void profile_case(int *test_failed_, int64_t seq_q, int64_t workers, int expect_merge) {
    fai_case_spec spec;
    fai_case_spec_any(&spec);
    spec.batch = 2, spec.heads_q = 4, spec.heads_kv = 2, spec.seq_q = seq_q, spec.seq_kv = 700;
    spec.head_dim = spec.head_dim_v = 32, spec.q_lens = spec.kv_lens = 0;
    spec.mask_kind = 0, spec.workers = workers, spec.threads = 2, spec.split = FAI_SPLIT_AUTO;
    spec.positions = 0, spec.lse = 1;
    fai_case c;
    REQUIRE(fai_case_build(&c, &spec, 41) == 0);
    fai_plan *plan;
    REQUIRE(fai_plan_create(&c.problem, &plan) == FAI_OK);
    const size_t bytes = fai_plan_workspace_size(plan);
    void *ws = malloc(bytes + 1);
    const size_t o_bytes = c.bytes[FAI_CASE_BUF_O];
    const size_t lse_bytes = c.bytes[FAI_CASE_BUF_LSE];
    void *plain = malloc(o_bytes), *plain_lse = malloc(lse_bytes);
    REQUIRE(ws && plain && plain_lse && c.buf[FAI_CASE_BUF_LSE]);
    REQUIRE(fai_run(plan, &c.tensors, ws, bytes) == FAI_OK);
    memcpy(plain, c.buf[FAI_CASE_BUF_O], o_bytes);
    memcpy(plain_lse, c.buf[FAI_CASE_BUF_LSE], lse_bytes);
    memset(c.buf[FAI_CASE_BUF_O], 0xFF, o_bytes);
    memset(c.buf[FAI_CASE_BUF_LSE], 0xFF, lse_bytes);
    static fai_profile profile;
    REQUIRE(fai_run_profiled(plan, &c.tensors, ws, bytes, &profile) == FAI_OK);
    /* every element of O, by its strides (the buffer has guard bytes nobody writes) */
    const fai_tensor *o = &c.tensors.o;
    const size_t element = o->dtype == FAI_DTYPE_F32 ? 4 : 2;
    int64_t differ = 0;
    for (int64_t b = 0; b < c.problem.batch; b++)
        for (int64_t i = 0; i < c.problem.seq_q; i++)
            for (int64_t h = 0; h < c.problem.heads_q; h++)
                for (int64_t x = 0; x < spec.head_dim_v; x++) {
                    const size_t at = element * (size_t)(b * o->stride_batch + i * o->stride_seq +
                                                         h * o->stride_head + x);
                    differ += memcmp((char *)plain + at, (char *)c.buf[FAI_CASE_BUF_O] + at,
                                     element) != 0;
                }
    CHECK(differ == 0);
    /* and every LSE, (b, i, h) by the LSE's strides */
    const fai_tensor *lse = &c.tensors.lse;
    int64_t lse_differ = 0;
    for (int64_t b = 0; b < c.problem.batch; b++)
        for (int64_t i = 0; i < c.problem.seq_q; i++)
            for (int64_t h = 0; h < c.problem.heads_q; h++) {
                const size_t at =
                    sizeof(float) *
                    (size_t)(b * lse->stride_batch + i * lse->stride_seq + h * lse->stride_head);
                lse_differ += memcmp((char *)plain_lse + at, (char *)c.buf[FAI_CASE_BUF_LSE] + at,
                                     sizeof(float)) != 0;
            }
    CHECK(lse_differ == 0);

    fai_plan_info info;
    fai_plan_get_info(plan, &info);
    CHECK(profile.threads >= 1 && profile.threads <= info.threads);
    CHECK(profile.wall_seconds > 0.0);
    double stages = 0.0, busy = 0.0;
    for (int s = 0; s < FAI_STAGE_COUNT; s++) {
        CHECK(profile.stage_seconds[s] >= 0.0);
        stages += profile.stage_seconds[s];
    }
    CHECK(profile.busy_seconds[0] > 0.0); /* the caller; a helper may wake after the work */
    for (int64_t t = 0; t < profile.threads; t++) {
        CHECK(profile.busy_seconds[t] >= 0.0);
        CHECK(profile.busy_seconds[t] <= profile.wall_seconds * 1.01 + 1e-6);
        busy += profile.busy_seconds[t];
    }
    /* the stages cover the workers' time, bar the clock reads around them */
    CHECK(stages <= busy * 1.05 + 1e-5);
    CHECK(stages >= busy * 0.5);
    CHECK(profile.stage_seconds[FAI_STAGE_QK] > 0.0 && profile.stage_seconds[FAI_STAGE_PV] > 0.0);
    CHECK(profile.stage_seconds[FAI_STAGE_SOFTMAX] > 0.0);
    CHECK(profile.stage_seconds[FAI_STAGE_PACK_Q] > 0.0);
    CHECK((profile.stage_seconds[FAI_STAGE_MERGE] > 0.0) == expect_merge);
    CHECK(info.split_kv == expect_merge);
    free(plain);
    free(plain_lse);
    free(ws);
    fai_plan_free(plan);
    fai_case_free(&c);
}

TEST(profile_prefill_matches_plain_run) { profile_case(test_failed_, 64, 2, 0); }

TEST(profile_decode_split_kv_shows_merge) { profile_case(test_failed_, 1, 7, 1); }

/* A plan of one head, 4 queries and 4 keys, for the error paths (NULL if it fails). */
static fai_plan *tiny_plan(void) {
    fai_problem pb;
    fai_problem_init(&pb);
    pb.batch = 1, pb.heads_q = pb.heads_kv = 1, pb.seq_q = pb.seq_kv = 4, pb.head_dim = 8;
    fai_plan *plan = NULL;
    return fai_plan_create(&pb, &plan) == FAI_OK ? plan : NULL;
}

TEST(profile_errors_and_stage_names) {
    fai_profile profile;
    CHECK(fai_run_profiled(NULL, NULL, NULL, 0, &profile) == FAI_ERR_INVALID_ARG);
    fai_plan *plan = tiny_plan();
    REQUIRE(plan != NULL);
    fai_tensors t;
    memset(&t, 0, sizeof t);
    CHECK(fai_run_profiled(plan, &t, NULL, 0, NULL) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "profile = NULL") != NULL);
    fai_plan_free(plan);
    const char *names[] = {"pack_q", "pack_kv", "qk",    "softmax", "rescale",
                           "pv",     "store",   "merge", "other"};
    for (int s = 0; s < FAI_STAGE_COUNT; s++)
        CHECK(strcmp(fai_stage_name((fai_stage)s), names[s]) == 0);
    CHECK(strcmp(fai_stage_name(FAI_STAGE_COUNT), "?") == 0);
}

/* fai_run_profiled_without: whatever it leaves out, O and LSE keep their bytes (the run's numbers
 * are not the attention's), on prefill (the matrix engine where the table has one: bf16 K/V),
 * f32 prefill and split-KV decode with int8 K/V; and it still refuses what fai_run refuses. */
static void without_case(int *test_failed_, int64_t seq_q, int64_t workers, fai_dtype kv_dtype) {
    fai_case_spec spec;
    fai_case_spec_any(&spec);
    spec.batch = 2, spec.heads_q = 4, spec.heads_kv = 2, spec.seq_q = seq_q, spec.seq_kv = 300;
    spec.head_dim = spec.head_dim_v = 64, spec.q_lens = spec.kv_lens = 0;
    spec.q_dtype = spec.o_dtype = FAI_DTYPE_F32;
    spec.k_dtype = spec.v_dtype = kv_dtype;
    spec.mask_kind = 0, spec.workers = workers, spec.threads = 2, spec.split = FAI_SPLIT_AUTO;
    spec.positions = 0, spec.lse = 1, spec.causal = seq_q > 1;
    fai_case c;
    REQUIRE(fai_case_build(&c, &spec, 43) == 0);
    fai_plan *plan;
    REQUIRE(fai_plan_create(&c.problem, &plan) == FAI_OK);
    const size_t bytes = fai_plan_workspace_size(plan);
    void *ws = malloc(bytes + 1);
    const size_t o_bytes = c.bytes[FAI_CASE_BUF_O], lse_bytes = c.bytes[FAI_CASE_BUF_LSE];
    void *o_before = malloc(o_bytes), *lse_before = malloc(lse_bytes);
    REQUIRE(ws && o_before && lse_before);
    memset(c.buf[FAI_CASE_BUF_O], 0xA5, o_bytes);
    memset(c.buf[FAI_CASE_BUF_LSE], 0x5A, lse_bytes);
    memcpy(o_before, c.buf[FAI_CASE_BUF_O], o_bytes);
    memcpy(lse_before, c.buf[FAI_CASE_BUF_LSE], lse_bytes);
    const unsigned kinds[] = {0,
                              FAI_LEAVE_OUT_QK,
                              FAI_LEAVE_OUT_SOFTMAX,
                              FAI_LEAVE_OUT_PV,
                              FAI_LEAVE_OUT_QK | FAI_LEAVE_OUT_PV,
                              FAI_LEAVE_OUT_QK | FAI_LEAVE_OUT_SOFTMAX | FAI_LEAVE_OUT_PV};
    static fai_profile profile;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        CHECK(fai_run_profiled_without(plan, &c.tensors, ws, bytes, kinds[k], &profile) == FAI_OK);
        CHECK(memcmp(c.buf[FAI_CASE_BUF_O], o_before, o_bytes) == 0);
        CHECK(memcmp(c.buf[FAI_CASE_BUF_LSE], lse_before, lse_bytes) == 0);
        CHECK(profile.wall_seconds > 0.0 && profile.busy_seconds[0] > 0.0);
    }
    /* the tensors are checked as fai_run checks them */
    fai_tensors bad = c.tensors;
    bad.q.data = NULL;
    CHECK(fai_run_profiled_without(plan, &bad, ws, bytes, 0, &profile) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "q.data") != NULL);
    /* and then a full run writes O as fai_run does */
    REQUIRE(fai_run(plan, &c.tensors, ws, bytes) == FAI_OK);
    CHECK(memcmp(c.buf[FAI_CASE_BUF_O], o_before, o_bytes) != 0);
    free(o_before);
    free(lse_before);
    free(ws);
    fai_plan_free(plan);
    fai_case_free(&c);
}

TEST(profile_without_writes_nothing_prefill) {
    without_case(test_failed_, 64, 2, FAI_DTYPE_BF16);
    without_case(test_failed_, 64, 2, FAI_DTYPE_F32);
}

TEST(profile_without_writes_nothing_split_decode) {
    without_case(test_failed_, 1, 7, FAI_DTYPE_I8);
}

TEST(profile_without_errors_name_the_value) {
    fai_plan *plan = tiny_plan();
    REQUIRE(plan != NULL);
    fai_tensors t;
    memset(&t, 0, sizeof t);
    static fai_profile profile;
    const unsigned refused[] = {1u << FAI_STAGE_STORE, 1u << FAI_STAGE_PACK_Q,
                                1u << FAI_STAGE_RESCALE, FAI_LEAVE_OUT_QK | (1u << 31)};
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++) {
        CHECK(fai_run_profiled_without(plan, &t, NULL, 0, refused[k], &profile) ==
              FAI_ERR_INVALID_ARG);
        char want[32];
        snprintf(want, sizeof want, "left_out = 0x%x", refused[k]);
        CHECK(strstr(fai_last_error(), want) != NULL);
    }
    CHECK(fai_run_profiled_without(plan, &t, NULL, 0, FAI_LEAVE_OUT_PV, NULL) ==
          FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "profile = NULL") != NULL);
    CHECK(fai_run_profiled_without(NULL, &t, NULL, 0, 0, &profile) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "plan = NULL") != NULL);
    fai_plan_free(plan);
}
