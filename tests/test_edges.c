/* Corners of the API the other tests leave out: the remaining error paths of fai_merge_states,
 * fai_plan_create and fai_pool_create, messages naming unknown dtypes and tables this CPU lacks,
 * length limits that clip, and f16 subnormal inputs. */
#include "fai.h"
#include "fai_cases.h"
#include "test_cases.h"
#include "test_util.h"

#include <stdint.h>
#include <string.h>

static int message_has(const char *text) { return strstr(fai_last_error(), text) != NULL; }

static void small_problem(fai_problem *pb) {
    fai_problem_init(pb);
    pb->batch = 1;
    pb->heads_q = pb->heads_kv = 1;
    pb->seq_q = 2;
    pb->seq_kv = 3;
    pb->head_dim = 8;
    pb->workers = pb->threads = 1;
}

/* fai_plan_create fails with `want` and a message holding `text`, and returns no plan. */
static int plan_fails_with(const fai_problem *pb, fai_status want, const char *text) {
    fai_plan *plan = (fai_plan *)pb;
    const fai_status status = fai_plan_create(pb, &plan);
    const int ok = status == want && plan == NULL && message_has(text);
    if (!ok)
        fprintf(stderr, "  fai_plan_create: %s \"%s\", wanted %s \"%s\"\n",
                fai_status_string(status), fai_last_error(), fai_status_string(want), text);
    if (status == FAI_OK) fai_plan_free(plan);
    return ok;
}

TEST(edges_merge_errors) {
    float o_a[8] = {0}, lse_a[2] = {0}, out[4] = {7, 7, 7, 7};
    fai_tensor o_parts[2], lse_parts[2];
    for (int p = 0; p < 2; p++) {
        o_parts[p] = fai_tensor_bshd(o_a + 4 * p, FAI_DTYPE_F32, 1, 1, 4);
        lse_parts[p] = (fai_tensor){lse_a + p, FAI_DTYPE_F32, 1, 1, 1, 0};
    }
    fai_tensor o_out = fai_tensor_bshd(out, FAI_DTYPE_F32, 1, 1, 4);
    o_parts[1].stride_dim = 2;
    CHECK(fai_merge_states(2, o_parts, lse_parts, 1, 1, 1, 4, &o_out, NULL) == FAI_ERR_INVALID_ARG);
    CHECK(message_has("o_parts[1].stride_dim = 2"));
    o_parts[1].stride_dim = 1;
    lse_parts[1].stride_head = -1;
    CHECK(fai_merge_states(2, o_parts, lse_parts, 1, 1, 1, 4, &o_out, NULL) == FAI_ERR_INVALID_ARG);
    CHECK(message_has("lse_parts[1] strides (batch 1, seq 1, head -1) must not be negative"));
    lse_parts[1].stride_head = 1;
    CHECK(fai_merge_states(2, o_parts, lse_parts, -1, 1, 1, 4, &o_out, NULL) ==
          FAI_ERR_INVALID_ARG);
    CHECK(message_has("batch = -1"));
    CHECK(fai_merge_states(2, o_parts, NULL, 1, 1, 1, 4, &o_out, NULL) == FAI_ERR_INVALID_ARG);
    CHECK(message_has("lse_parts = NULL"));
    CHECK(fai_merge_states(2, o_parts, lse_parts, 1, 1, 1, 4, NULL, NULL) == FAI_ERR_INVALID_ARG);
    CHECK(message_has("o_out = NULL"));
    fai_tensor bad_out = o_out;
    bad_out.dtype = (fai_dtype)7;
    CHECK(fai_merge_states(2, o_parts, lse_parts, 1, 1, 1, 4, &bad_out, NULL) ==
          FAI_ERR_INVALID_ARG);
    CHECK(message_has("o_out.dtype = unknown (7) is not f32, f16 or bf16"));
    for (int x = 0; x < 4; x++)
        CHECK(out[x] == 7.0f); /* nothing written */
    /* empty sizes succeed and write nothing */
    CHECK(fai_merge_states(2, o_parts, lse_parts, 0, 1, 1, 4, &o_out, NULL) == FAI_OK);
    CHECK(fai_last_error()[0] == '\0');
}

TEST(edges_plan_errors) {
    fai_problem pb;
    small_problem(&pb);
    pb.split = (fai_split)7;
    CHECK(plan_fails_with(&pb, FAI_ERR_INVALID_ARG, "split = 7"));

    /* packed query rows with no sequence to belong to */
    small_problem(&pb);
    static const int32_t cu_empty[1] = {0};
    pb.batch = 0;
    pb.seq_q = 3;
    pb.cu_seqlens_q = cu_empty;
    CHECK(plan_fails_with(&pb, FAI_ERR_INVALID_ARG, "seq_q = 3 packed rows with batch = 0"));

    /* K/V sizes that overflow, dense and paged (Q itself is empty) */
    small_problem(&pb);
    pb.batch = INT64_C(1) << 24;
    pb.seq_q = 0;
    pb.seq_kv = INT32_MAX;
    pb.heads_q = pb.heads_kv = INT64_C(1) << 16;
    pb.head_dim = FAI_MAX_HEAD_DIM;
    CHECK(plan_fails_with(&pb, FAI_ERR_OVERFLOW, "seq_kv"));
    small_problem(&pb);
    static const int32_t lens[1] = {5};
    pb.seq_q = 0;
    pb.heads_q = pb.heads_kv = INT64_C(1) << 16;
    pb.head_dim = FAI_MAX_HEAD_DIM;
    pb.page_size = INT32_MAX;
    pb.num_pages = INT32_MAX;
    pb.pages_per_seq = 1;
    pb.seqlens_kv = lens;
    CHECK(plan_fails_with(&pb, FAI_ERR_OVERFLOW, "num_pages"));

    /* a block table whose capacity (pages_per_seq x page_size) passes 2^31 - 1 is clipped to
     * it, not overflowed: a length inside it plans */
    small_problem(&pb);
    pb.page_size = INT32_MAX;
    pb.num_pages = 1;
    pb.pages_per_seq = INT32_MAX;
    pb.seqlens_kv = lens;
    fai_plan *plan = NULL;
    CHECK(fai_plan_create(&pb, &plan) == FAI_OK);
    fai_plan_free(plan);
}

TEST(edges_pool_errors) {
    fai_pool *pool = (fai_pool *)&pool;
    CHECK(fai_pool_create(-1, &pool) == FAI_ERR_INVALID_ARG && pool == NULL);
    CHECK(message_has("threads = -1"));
    pool = (fai_pool *)&pool;
    CHECK(fai_pool_create(FAI_MAX_WORKERS + 1, &pool) == FAI_ERR_INVALID_ARG && pool == NULL);
    CHECK(message_has("threads = 1025"));
    CHECK(fai_pool_create(1, NULL) == FAI_ERR_INVALID_ARG);
    fai_pool_free(NULL);
    /* threads 0: one per online CPU */
    CHECK(fai_pool_create(0, &pool) == FAI_OK && pool != NULL);
    fai_pool_free(pool);
}

/* A tensor dtype that is not a dtype is named "unknown" in the message. */
TEST(edges_unknown_dtype_in_message) {
    fai_problem pb;
    small_problem(&pb);
    fai_plan *plan = NULL;
    REQUIRE(fai_plan_create(&pb, &plan) == FAI_OK);
    float q[16] = {0}, o[16] = {0};
    uint16_t k[24] = {0}, v[24] = {0};
    fai_tensors t;
    memset(&t, 0, sizeof t);
    t.q = fai_tensor_bshd(q, (fai_dtype)9, 2, 1, 8);
    t.k = fai_tensor_bshd(k, FAI_DTYPE_F16, 3, 1, 8);
    t.v = fai_tensor_bshd(v, FAI_DTYPE_F16, 3, 1, 8);
    t.o = fai_tensor_bshd(o, FAI_DTYPE_F32, 2, 1, 8);
    const size_t size = fai_plan_workspace_size(plan);
    void *ws = malloc(size);
    CHECK(fai_run(plan, &t, ws, size) == FAI_ERR_INVALID_ARG);
    CHECK(message_has("q.dtype = unknown"));
    free(ws);
    fai_plan_free(plan);
}

/* FAI_ISA naming a table this build or CPU cannot run (NEON on x86, AVX-512 on AArch64). */
TEST(edges_isa_known_but_unavailable) {
    fai_problem pb;
    small_problem(&pb);
    const char *saved = getenv("FAI_ISA");
    char saved_copy[64] = "";
    if (saved) snprintf(saved_copy, sizeof saved_copy, "%s", saved);
#if defined(__aarch64__)
    const char *foreign = "avx512";
#else
    const char *foreign = "neon";
#endif
    REQUIRE(setenv("FAI_ISA", foreign, 1) == 0);
    CHECK(plan_fails_with(&pb, FAI_ERR_ISA_UNAVAILABLE, "cannot run"));
    if (saved)
        setenv("FAI_ISA", saved_copy, 1);
    else
        unsetenv("FAI_ISA");
}

/* Whether a case whose inputs the test edited (fai_case_set; saved here as its contents) runs
 * within the tolerance of its fp64 reference; says why where it does not, and frees the case. */
static int edited_case_passes(fai_case *c) {
    fai_case_reset(c);
    const int passed = case_check_says_why(c);
    fai_case_free(c);
    return passed;
}

/* f16 inputs holding subnormals (below 2^-14) decode exactly. */
TEST(edges_f16_subnormal_inputs) {
    for (int variant = 0; variant < 2; variant++) {
        fai_case_spec s;
        fai_case_spec_any(&s);
        s.batch = 1;
        s.heads_q = s.heads_kv = 2;
        s.seq_q = variant ? 1 : 5;
        s.seq_kv = 19;
        s.head_dim = 13; /* a tail past the vector width: the scalar conversions */
        s.head_dim_v = 11;
        s.q_dtype = s.k_dtype = s.v_dtype = FAI_DTYPE_F16;
        s.q_lens = s.kv_lens = FAI_CASE_LEN_FULL;
        s.mask_kind = FAI_MASK_NONE;
        fai_case c;
        REQUIRE(fai_case_build(&c, &s, 3400 + (uint64_t)variant) == 0);
        for (int64_t j = 0; j < 19; j++)
            for (int64_t h = 0; h < 2; h++)
                for (int64_t d = 0; d < 13; d++) {
                    const double tiny = (double)((j + d) % 7 - 3) * 0x1p-20; /* subnormal */
                    fai_case_set(&c.tensors.k, 0, j, h, d, d % 2 ? tiny : 0.5);
                    if (d < 11) fai_case_set(&c.tensors.v, 0, j, h, d, d % 3 ? tiny : -0.25);
                }
        CHECK(edited_case_passes(&c));
    }
}

/* A spec of one sequence and one kv head with nothing drawn but the layouts, the split and the
 * scale: no masks, window, positions or score modifiers, full lengths, O f32. */
static void plain_spec(fai_case_spec *s, int64_t heads_q, int64_t seq_q, int64_t seq_kv, int64_t d,
                       fai_dtype qk_dtype, fai_dtype v_dtype) {
    fai_case_spec_any(s);
    s->batch = 1;
    s->heads_q = heads_q;
    s->heads_kv = 1;
    s->seq_q = seq_q;
    s->seq_kv = seq_kv;
    s->head_dim = s->head_dim_v = d;
    s->q_dtype = s->k_dtype = qk_dtype;
    s->v_dtype = v_dtype;
    s->o_dtype = FAI_DTYPE_F32;
    s->q_lens = s->kv_lens = FAI_CASE_LEN_FULL;
    s->mask_kind = FAI_MASK_NONE;
    s->causal = FAI_CAUSAL_NONE;
    s->window_left = s->window_right = -1;
    s->positions = 0;
    s->softcap = 0.0;
    s->alibi = s->sinks = 0;
}

/* bf16 dot products read subnormal inputs as zero: a bf16 Q holding subnormals against K
 * elements large enough for those products to count (2^-127 x 2^126 = 1/2 each) must still
 * come out within the tolerance, in prefill and in decode, so such Q takes the f32 QK. */
TEST(edges_bf16_subnormal_q_against_large_k) {
    for (int variant = 0; variant < 2; variant++) {
        fai_case_spec s;
        plain_spec(&s, 4, variant ? 1 : 40, 70, 64, FAI_DTYPE_BF16, FAI_DTYPE_BF16);
        fai_case c;
        REQUIRE(fai_case_build(&c, &s, 3500 + (uint64_t)variant) == 0);
        for (int64_t h = 0; h < 4; h++)
            for (int64_t i = 0; i < s.seq_q; i++)
                for (int64_t d = 0; d < 64; d += 4)
                    fai_case_set(&c.tensors.q, 0, i, h, d, 0x1p-127);
        for (int64_t j = 0; j < 70; j++)
            for (int64_t d = 0; d < 64; d += 4)
                fai_case_set(&c.tensors.k, 0, j, 0, d, (j % 3 ? 1 : -1) * 0x1p126);
        CHECK(edited_case_passes(&c));
    }
}

/* The same for V: a weight below 2^-126 (a logit 90 under the row's max) times a V of 2^126 adds
 * 0.25 to O, which dot or tile products would lose with the weight's bf16 parts. V tiles holding
 * such magnitudes take an f32 PV. */
TEST(edges_bf16_tiny_weight_against_large_v) {
    for (int variant = 0; variant < 2; variant++) {
        fai_case_spec s;
        plain_spec(&s, 4, variant ? 1 : 40, 8, 64, FAI_DTYPE_BF16, FAI_DTYPE_BF16);
        s.scale = FAI_CASE_SCALE_DEFAULT;
        fai_case c;
        REQUIRE(fai_case_build(&c, &s, 3600 + (uint64_t)variant) == 0);
        for (int64_t d = 0; d < 64; d++) {
            for (int64_t h = 0; h < 4; h++)
                for (int64_t i = 0; i < s.seq_q; i++)
                    fai_case_set(&c.tensors.q, 0, i, h, d, 1.0);
            for (int64_t j = 0; j < 8; j++) { /* keys 1..3: logit -90 (scale 1/8), V 2^126 */
                const int far = j >= 1 && j <= 3;
                fai_case_set(&c.tensors.k, 0, j, 0, d, far ? -11.25 : 0.0);
                fai_case_set(&c.tensors.v, 0, j, 0, d, far ? 0x1p126 : 0.5);
            }
        }
        CHECK(edited_case_passes(&c));
    }
}

/* Prefill folds a quantized K's and V's scales into its packed tiles where a scale times any code
 * stays a finite f32 (scales up to 2^64), and applies them to S and P elsewhere; the packed tiles
 * are kept for the later q tiles of a head with either form. Tiles of both kinds in one run, with
 * several q tiles reading them: K scales of 2^65 on keys [256, 300) (Q of 2^-66 keeps their
 * logits moderate) and V scales of 2^70 on keys [256, 512). */
TEST(edges_quantized_scales_folded_or_apart) {
    int runs = 0;
    for (uint64_t seed = 0; seed < 60 && runs < 3; seed++) {
        fai_case_spec s;
        plain_spec(&s, 2, 300, 700, 32, FAI_DTYPE_I8, FAI_DTYPE_I8);
        s.q_dtype = FAI_DTYPE_F32;
        s.tile_q = 32;
        s.tile_kv = 128;
        fai_case c;
        REQUIRE(fai_case_build(&c, &s, 3700 + seed) == 0);
        if (c.k_scale_kind != FAI_CASE_SCALE_TOKEN || c.v_scale_kind != FAI_CASE_SCALE_TOKEN) {
            fai_case_free(&c);
            continue;
        }
        for (int64_t i = 0; i < 300; i++)
            for (int64_t h = 0; h < 2; h++)
                for (int64_t d = 0; d < 32; d++)
                    fai_case_set(&c.tensors.q, 0, i, h, d, ((i + h + d) % 5 - 2) * 0x1p-66);
        float *k_scale = c.tensors.k_scale.data, *v_scale = c.tensors.v_scale.data;
        for (int64_t j = 256; j < 512; j++) {
            if (j < 300) k_scale[j * c.tensors.k_scale.stride_seq] = 0x1p65f;
            v_scale[j * c.tensors.v_scale.stride_seq] *= 0x1p70f;
        }
        CHECK(edited_case_passes(&c));
        runs++;
    }
    CHECK(runs == 3);
}

/* The same with an int8 V whose scales carry the size: codes of 64 at a scale of 2^119 on the far
 * keys. Scales above 2^64 send a tile to the f32 PV as large values do. */
TEST(edges_tiny_weight_against_large_v_scale) {
    int runs = 0;
    for (uint64_t seed = 0; seed < 60 && runs < 4; seed++) {
        fai_case_spec s;
        plain_spec(&s, 4, runs % 2 ? 1 : 40, 8, 64, FAI_DTYPE_BF16, FAI_DTYPE_I8);
        s.scale = FAI_CASE_SCALE_DEFAULT;
        fai_case c;
        REQUIRE(fai_case_build(&c, &s, 3800 + seed) == 0);
        if (c.v_scale_kind != FAI_CASE_SCALE_TOKEN) {
            fai_case_free(&c);
            continue;
        }
        for (int64_t d = 0; d < 64; d++) {
            for (int64_t h = 0; h < 4; h++)
                for (int64_t i = 0; i < s.seq_q; i++)
                    fai_case_set(&c.tensors.q, 0, i, h, d, 1.0);
            for (int64_t j = 0; j < 8; j++) { /* keys 1..3: logit -90, V 64 x 2^119 */
                const int far = j >= 1 && j <= 3;
                fai_case_set(&c.tensors.k, 0, j, 0, d, far ? -11.25 : 0.0);
                fai_case_set(&c.tensors.v, 0, j, 0, d, far ? 64.0 : 1.0);
            }
        }
        for (int64_t j = 1; j <= 3; j++)
            c.tensors.v_scale.data[j * c.tensors.v_scale.stride_seq] = 0x1p119f;
        CHECK(edited_case_passes(&c));
        runs++;
    }
    CHECK(runs == 4);
}
