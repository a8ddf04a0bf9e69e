/* Every error path of fai_plan_create, and fai_status_string and fai_last_error: the status,
 * *plan left NULL, fai_last_error() naming the field and the offending value. Each failing case
 * starts from a problem that is known to succeed and changes one field. */
#include "fai.h"
#include "test_errors.h"
#include "test_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

/* -- fai_status_string and fai_last_error ------------------------------------------------- */

TEST(status_string_every_value) {
    CHECK(strcmp(fai_status_string(FAI_OK), "FAI_OK") == 0);
    CHECK(strcmp(fai_status_string(FAI_ERR_INVALID_ARG), "FAI_ERR_INVALID_ARG") == 0);
    CHECK(strcmp(fai_status_string(FAI_ERR_UNSUPPORTED), "FAI_ERR_UNSUPPORTED") == 0);
    CHECK(strcmp(fai_status_string(FAI_ERR_WORKSPACE_TOO_SMALL), "FAI_ERR_WORKSPACE_TOO_SMALL") ==
          0);
    CHECK(strcmp(fai_status_string(FAI_ERR_NO_MEMORY), "FAI_ERR_NO_MEMORY") == 0);
    CHECK(strcmp(fai_status_string(FAI_ERR_ISA_UNAVAILABLE), "FAI_ERR_ISA_UNAVAILABLE") == 0);
    CHECK(strcmp(fai_status_string(FAI_ERR_OVERFLOW), "FAI_ERR_OVERFLOW") == 0);
    CHECK(strcmp(fai_status_string(FAI_ERR_IO), "FAI_ERR_IO") == 0);
    CHECK(strcmp(fai_status_string((fai_status)(FAI_ERR_IO + 1)), "FAI_ERR_UNKNOWN") == 0);
    CHECK(strcmp(fai_status_string((fai_status)-1), "FAI_ERR_UNKNOWN") == 0);
    CHECK(strcmp(fai_status_string((fai_status)12345), "FAI_ERR_UNKNOWN") == 0);
}

TEST(last_error_cleared_by_success) {
    fai_problem pb;
    base_problem(&pb);
    pb.batch = -1;
    fai_plan *plan = NULL;
    CHECK(fai_plan_create(&pb, &plan) == FAI_ERR_INVALID_ARG);
    CHECK(fai_last_error()[0] != '\0');
    base_problem(&pb);
    REQUIRE(fai_plan_create(&pb, &plan) == FAI_OK);
    CHECK(strcmp(fai_last_error(), "") == 0);

    /* a failing run, then a successful call (run_* tests check a successful run) */
    CHECK(fai_run(plan, NULL, NULL, 0) == FAI_ERR_INVALID_ARG);
    CHECK(fai_last_error()[0] != '\0');
    fai_plan_info info;
    CHECK(fai_plan_get_info(plan, &info) == FAI_OK);
    CHECK(strcmp(fai_last_error(), "") == 0);
    fai_plan_free(plan);
}

TEST(isa_bogus_is_unavailable) {
    fai_problem pb;
    base_problem(&pb);
    const char *saved = getenv("FAI_ISA");
    char saved_copy[64] = "";
    if (saved) snprintf(saved_copy, sizeof saved_copy, "%s", saved);
    REQUIRE(setenv("FAI_ISA", "bogus", 1) == 0);
    CHECK(plan_fails(&pb, FAI_ERR_ISA_UNAVAILABLE, "FAI_ISA", "bogus", NULL));
    if (saved)
        setenv("FAI_ISA", saved_copy, 1);
    else
        unsetenv("FAI_ISA");
    CHECK(plan_succeeds(&pb));
}

/* The environment's switches are 0 or 1 (or unset, or empty): any other value is refused by
 * name, not read as unset. */
TEST(env_switches_must_be_0_or_1) {
    fai_problem pb;
    base_problem(&pb);
    static const char *const names[] = {"FAI_AMX", "FAI_BF16_DOT"};
    static const char *const bad[] = {"off", "yes", "2", "1x", "0 "};
    for (int n = 0; n < 2; n++) {
        const char *saved = getenv(names[n]);
        char saved_copy[64] = "";
        if (saved) snprintf(saved_copy, sizeof saved_copy, "%s", saved);
        for (int b = 0; b < 5; b++) {
            REQUIRE(setenv(names[n], bad[b], 1) == 0);
            CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, names[n], bad[b], "0 or 1", NULL));
        }
        REQUIRE(setenv(names[n], "", 1) == 0);
        CHECK(plan_succeeds(&pb));
        if (saved)
            setenv(names[n], saved_copy, 1);
        else
            unsetenv(names[n]);
        CHECK(plan_succeeds(&pb));
    }
}

/* -- fai_plan_create ---------------------------------------------------------------------- */

TEST(plan_null_pointers) {
    fai_problem pb;
    base_problem(&pb);
    CHECK(plan_succeeds(&pb));
    CHECK(plan_fails(NULL, FAI_ERR_INVALID_ARG, "problem", "NULL", NULL));
    CHECK(fai_plan_create(&pb, NULL) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "plan") && strstr(fai_last_error(), "NULL"));
}

TEST(plan_counts_out_of_range) {
    fai_problem pb;
#define BAD_COUNT(field, value, text)                                                              \
    do {                                                                                           \
        base_problem(&pb);                                                                         \
        pb.field = (value);                                                                        \
        CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, #field, text, NULL));                           \
    } while (0)
    base_problem(&pb);
    CHECK(plan_succeeds(&pb));
    BAD_COUNT(batch, -1, "-1");
    BAD_COUNT(batch, INT64_MIN, "-9223372036854775808");
    BAD_COUNT(batch, (INT64_C(1) << 24) + 1, "16777217");
    BAD_COUNT(batch, INT64_MAX, "9223372036854775807");
    BAD_COUNT(heads_q, 0, "0");
    BAD_COUNT(heads_q, -4, "-4");
    BAD_COUNT(heads_q, (INT64_C(1) << 16) + 2, "65538");
    BAD_COUNT(heads_kv, 0, "0");
    BAD_COUNT(heads_kv, -2, "-2");
    BAD_COUNT(heads_kv, (INT64_C(1) << 16) + 1, "65537");
    BAD_COUNT(seq_q, -1, "-1");
    BAD_COUNT(seq_q, INT64_C(2147483648), "2147483648");
    BAD_COUNT(seq_kv, -7, "-7");
    BAD_COUNT(seq_kv, INT64_C(1) << 40, "1099511627776");
    BAD_COUNT(head_dim, 0, "0");
    BAD_COUNT(head_dim, -8, "-8");
    BAD_COUNT(head_dim, FAI_MAX_HEAD_DIM + 1, "577");
    BAD_COUNT(head_dim_v, 0, "0"); /* a computed 0 is no longer read as D */
    BAD_COUNT(head_dim_v, -2, "-2");
    BAD_COUNT(head_dim_v, FAI_MAX_HEAD_DIM + 1, "577");
    BAD_COUNT(window_left, -2, "-2");
    BAD_COUNT(window_left, INT64_MIN, "-9223372036854775808");
    BAD_COUNT(window_right, -3, "-3");
    BAD_COUNT(workers, -1, "-1");
    BAD_COUNT(workers, FAI_MAX_WORKERS + 1, "1025");
    BAD_COUNT(threads, -1, "-1");
    BAD_COUNT(threads, FAI_MAX_WORKERS + 1, "1025");
    BAD_COUNT(tile_q, -1, "-1");
    BAD_COUNT(tile_q, 4097, "4097");
    BAD_COUNT(tile_kv, -16, "-16");
    BAD_COUNT(tile_kv, 4097, "4097");
    BAD_COUNT(pipeline_tiles, -1, "-1");
    BAD_COUNT(pipeline_tiles, 3, "3");
#undef BAD_COUNT

    /* the limits themselves are accepted */
    base_problem(&pb);
    pb.head_dim = FAI_MAX_HEAD_DIM;
    pb.head_dim_v = FAI_MAX_HEAD_DIM;
    pb.workers = FAI_MAX_WORKERS;
    pb.threads = FAI_MAX_WORKERS;
    pb.tile_q = 4096;
    pb.tile_kv = 4096;
    pb.pipeline_tiles = 2;
    CHECK(plan_succeeds(&pb));
    base_problem(&pb);
    pb.window_left = 0;
    pb.window_right = 0;
    CHECK(plan_succeeds(&pb));
    base_problem(&pb);
    pb.batch = 0;
    pb.seq_q = 0;
    pb.seq_kv = 0;
    CHECK(plan_succeeds(&pb));
}

TEST(plan_heads_not_multiple) {
    fai_problem pb;
    base_problem(&pb);
    pb.heads_q = 12;
    pb.heads_kv = 5;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "heads_q", "12", "heads_kv", "5", NULL));
    pb.heads_q = 3;
    pb.heads_kv = 6;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "heads_q", "3", "heads_kv", "6", NULL));
}

TEST(plan_bad_dtypes) {
    fai_problem pb;
#define BAD_DTYPE(field, value, text)                                                              \
    do {                                                                                           \
        base_problem(&pb);                                                                         \
        pb.field = (fai_dtype)(value);                                                             \
        CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, #field, text, NULL));                           \
    } while (0)
    BAD_DTYPE(q_dtype, 3, "3");
    BAD_DTYPE(q_dtype, -1, "-1");
    BAD_DTYPE(k_dtype, 7, "7");
    BAD_DTYPE(k_dtype, -2, "-2");
    BAD_DTYPE(v_dtype, 6, "6");
    BAD_DTYPE(v_dtype, 1000, "1000");
    BAD_DTYPE(o_dtype, 7, "7");
    BAD_DTYPE(o_dtype, -1, "-1");
    /* the quantized dtypes are for K and V only */
    BAD_DTYPE(q_dtype, FAI_DTYPE_I8, "= int8");
    BAD_DTYPE(o_dtype, FAI_DTYPE_E4M3, "= e4m3");
    BAD_DTYPE(o_dtype, FAI_DTYPE_E5M2, "only K and V");
#undef BAD_DTYPE
    base_problem(&pb);
    pb.k_dtype = FAI_DTYPE_E5M2;
    pb.v_dtype = FAI_DTYPE_I8;
    CHECK(plan_succeeds(&pb));
}

TEST(plan_scale_not_finite) {
    fai_problem pb;
    base_problem(&pb);
    pb.scale = NAN; /* a NaN that is not FAI_SCALE_DEFAULT */
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "scale", "nan", NULL));
    pb.scale = -NAN;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "scale", "nan", NULL));
    pb.scale = INFINITY;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "scale", "inf", NULL));
    pb.scale = -INFINITY;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "scale", "-inf", NULL));
    pb.scale = -0.5f; /* finite, even negative, is allowed */
    CHECK(plan_succeeds(&pb));
}

TEST(plan_bad_enums) {
    fai_problem pb;
    base_problem(&pb);
    pb.causal = (fai_causal)3;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "causal", "3", NULL));
    pb.causal = (fai_causal)-1;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "causal", "-1", NULL));
    base_problem(&pb);
    pb.mask_kind = (fai_mask_kind)5;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "mask_kind", "5", NULL));
    pb.mask_kind = (fai_mask_kind)-1;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "mask_kind", "-1", NULL));
}

TEST(plan_modifiers) {
    fai_problem pb;
    base_problem(&pb);
    pb.softcap = -1.0f;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "softcap", "-1", NULL));
    pb.softcap = NAN;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "softcap", "nan", NULL));
    pb.softcap = INFINITY;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "softcap", "inf", NULL));
    pb.softcap = 1e-40f; /* 1 / softcap overflows */
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "softcap = 9.99995e-41", "too small", NULL));
    pb.softcap = 4e-39f; /* subnormal, with a finite reciprocal */
    CHECK(plan_succeeds(&pb));
    pb.softcap = 30.0f;
    CHECK(plan_succeeds(&pb));
    pb.softcap = 0.0f;
    pb.alibi = 2;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "alibi", "2", NULL));
    pb.alibi = 1;
    CHECK(plan_succeeds(&pb));
    pb.sinks = -1;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "sinks", "-1", NULL));
    pb.sinks = 1;
    CHECK(plan_succeeds(&pb));
    pb.mask_kind = FAI_MASK_KEEP_BITS;
    CHECK(plan_succeeds(&pb));
}

/* Switches are 0 or 1: any other value is refused with its field named, not read as on. */
TEST(plan_switches_are_0_or_1) {
    fai_problem pb;
    base_problem(&pb);
    int *const fields[] = {&pb.alibi,        &pb.sinks,
                           &pb.round_p_bf16, &pb.trust_block_table,
                           &pb.trust_scales, &pb.k_channel_scales,
                           &pb.ignore_tuning};
    const char *const names[] = {"alibi = ",        "sinks = ",
                                 "round_p_bf16 = ", "trust_block_table = ",
                                 "trust_scales = ", "k_channel_scales = ",
                                 "ignore_tuning = "};
    const int bad[] = {2, -1, 12345};
    for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++)
        for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
            base_problem(&pb);
            *fields[f] = bad[b];
            char value[16];
            snprintf(value, sizeof value, "%d", bad[b]);
            CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, names[f], value, "not 0 (off) or 1 (on)",
                             NULL));
        }
    base_problem(&pb);
    pb.round_p_bf16 = pb.trust_block_table = pb.trust_scales = pb.ignore_tuning = 1;
    CHECK(plan_succeeds(&pb));
}

TEST(plan_seqlens) {
    fai_problem pb;
    int32_t lens[2];
    int32_t cu[3] = {0, 2, 5};

    /* valid lengths, including empty sequences and the maxima */
    base_problem(&pb);
    lens[0] = 0, lens[1] = 5;
    pb.seqlens_q = lens;
    CHECK(plan_succeeds(&pb));
    base_problem(&pb);
    lens[0] = 7, lens[1] = 0;
    pb.seqlens_kv = lens;
    CHECK(plan_succeeds(&pb));

    base_problem(&pb);
    lens[0] = 2, lens[1] = -3;
    pb.seqlens_q = lens;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "seqlens_q[1]", "-3", NULL));
    lens[0] = 6, lens[1] = 1; /* seq_q is 5 */
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "seqlens_q[0]", "6", "5", NULL));
    lens[0] = 1, lens[1] = INT32_MAX;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "seqlens_q[1]", "2147483647", NULL));

    base_problem(&pb);
    lens[0] = -1, lens[1] = 2;
    pb.seqlens_kv = lens;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "seqlens_kv[0]", "-1", NULL));
    lens[0] = 7, lens[1] = 8; /* seq_kv is 7 */
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "seqlens_kv[1]", "8", "7", NULL));
    lens[0] = INT32_MIN, lens[1] = 0;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "seqlens_kv[0]", "-2147483648", NULL));

    /* both forms of one length */
    base_problem(&pb);
    lens[0] = 2, lens[1] = 3;
    pb.seqlens_q = lens;
    pb.cu_seqlens_q = cu;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "seqlens_q", "cu_seqlens_q", NULL));
    base_problem(&pb);
    pb.seqlens_kv = lens;
    pb.cu_seqlens_kv = cu;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "seqlens_kv", "cu_seqlens_kv", NULL));
}

TEST(plan_cu_seqlens) {
    fai_problem pb;
    int32_t cu[3];

    base_problem(&pb);
    cu[0] = 0, cu[1] = 2, cu[2] = 5;
    pb.cu_seqlens_q = cu;
    CHECK(plan_succeeds(&pb));
    cu[0] = 1, cu[1] = 2, cu[2] = 5;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "cu_seqlens_q[0]", "1", NULL));
    cu[0] = -1, cu[1] = 2, cu[2] = 5;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "cu_seqlens_q[0]", "-1", NULL));
    cu[0] = 0, cu[1] = 4, cu[2] = 3;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "cu_seqlens_q[2]", "3", NULL));
    cu[0] = 0, cu[1] = 3, cu[2] = 6; /* seq_q is 5 packed rows */
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "cu_seqlens_q[2]", "6", "seq_q", "5", NULL));

    base_problem(&pb);
    cu[0] = 0, cu[1] = 7, cu[2] = 7;
    pb.cu_seqlens_kv = cu;
    CHECK(plan_succeeds(&pb));
    cu[0] = 3, cu[1] = 4, cu[2] = 5;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "cu_seqlens_kv[0]", "3", NULL));
    cu[0] = 0, cu[1] = 6, cu[2] = 2;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "cu_seqlens_kv[2]", "2", NULL));
    cu[0] = 0, cu[1] = 0, cu[2] = 8; /* seq_kv is 7 packed rows */
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "cu_seqlens_kv[2]", "8", "seq_kv", "7", NULL));
}

TEST(plan_paged) {
    fai_problem pb;
    int32_t lens[2] = {7, 12};
    int32_t cu[3] = {0, 3, 7};

    base_problem(&pb);
    pb.page_size = 4;
    pb.num_pages = 6;
    pb.pages_per_seq = 3;
    pb.seqlens_kv = lens;
    CHECK(plan_succeeds(&pb)); /* 12 = 3 x 4 fits exactly */

    pb.seqlens_kv = NULL;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "seqlens_kv", "NULL", "page_size", "4", NULL));
    pb.cu_seqlens_kv = cu;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "cu_seqlens_kv", "page_size", "4", NULL));
    pb.seqlens_kv = lens;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "seqlens_kv", "cu_seqlens_kv", NULL));
    pb.cu_seqlens_kv = NULL;

    lens[1] = 13;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "seqlens_kv[1]", "13", "pages_per_seq", "3",
                     "page_size", "4", NULL));
    lens[1] = -2;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "seqlens_kv[1]", "-2", NULL));
    lens[1] = 12;

    pb.num_pages = -1;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "num_pages", "-1", NULL));
    pb.num_pages = 6;
    pb.pages_per_seq = -3;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "pages_per_seq", "-3", NULL));
    pb.pages_per_seq = 3;
    pb.page_size = -1;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "page_size", "-1", NULL));
    pb.page_size = INT64_MIN;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "page_size", "-9223372036854775808", NULL));
    pb.page_size = 4;
    CHECK(plan_succeeds(&pb));

    /* paged lengths are not bounded by seq_kv, which paging does not use */
    pb.seq_kv = 0;
    CHECK(plan_succeeds(&pb));
}

TEST(plan_size_overflow) {
    fai_problem pb;
    base_problem(&pb);
    pb.batch = INT64_C(1) << 24;
    pb.seq_q = INT64_C(2147483647);
    pb.heads_q = INT64_C(1) << 16;
    pb.heads_kv = 1;
    CHECK(plan_fails(&pb, FAI_ERR_OVERFLOW, "batch", "16777216", "seq_q", "2147483647", NULL));

    /* the product fits in int64 elements but not in int64 bytes */
    base_problem(&pb);
    pb.batch = 16;
    pb.seq_q = INT64_C(2147483647);
    pb.heads_q = INT64_C(1) << 16;
    pb.heads_kv = 1;
    pb.head_dim = FAI_MAX_HEAD_DIM;
    CHECK(plan_fails(&pb, FAI_ERR_OVERFLOW, "batch", "16", "seq_q", "2147483647", NULL));

    /* more work units (batch x kv heads x q tiles) than the planner indexes */
    base_problem(&pb);
    pb.batch = (INT64_C(1) << 15) + 1;
    pb.seq_q = 1;
    pb.seq_kv = 1;
    pb.heads_q = INT64_C(1) << 16;
    pb.heads_kv = INT64_C(1) << 16;
    pb.head_dim = 1;
    CHECK(plan_fails(&pb, FAI_ERR_OVERFLOW, "units", NULL));
}
