/* Every error path of fai_run: the status, fai_last_error() naming the field and the offending
 * value, and nothing written. Each failing case starts from tensors that are known to succeed and
 * changes one field. */
#include "fai.h"
#include "test_errors.h"
#include "test_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

/* -- fai_run ------------------------------------------------------------------------------- */

#define SENTINEL 0xA5

typedef struct run_fixture {
    fai_problem pb;
    fai_plan *plan;
    float *q, *o, *lse;
    uint16_t *k, *v;
    unsigned char *mask;
    int32_t seqlens_kv[2];
    int32_t block_table[2 * 3];
    size_t o_bytes, lse_bytes;
    void *ws;
    size_t ws_size;
    fai_tensors t;
} run_fixture;

/* Padded or paged (page_size 4, 6 pages, 3 pages per sequence, lengths 7 and 10), with an
 * optional KEEP mask; every tensor filled with small valid values. */
static int fixture_init_with(run_fixture *fx, int paged, fai_mask_kind mask_kind, int alibi,
                             int sinks) {
    memset(fx, 0, sizeof *fx);
    fai_problem *pb = &fx->pb;
    base_problem(pb);
    pb->mask_kind = mask_kind;
    pb->alibi = alibi;
    pb->sinks = sinks;
    const int64_t B = pb->batch, Sq = pb->seq_q, Hq = pb->heads_q, Hkv = pb->heads_kv;
    const int64_t D = pb->head_dim, Dv = pb->head_dim_v;
    int64_t kv_rows = pb->seq_kv, kv_batches = B;
    if (paged) {
        pb->page_size = 4;
        pb->num_pages = 6;
        pb->pages_per_seq = 3;
        fx->seqlens_kv[0] = 7;
        fx->seqlens_kv[1] = 10;
        pb->seqlens_kv = fx->seqlens_kv;
        kv_rows = pb->page_size;
        kv_batches = pb->num_pages;
        const int32_t table[6] = {5, 0, 3, 1, 4, 2};
        memcpy(fx->block_table, table, sizeof table);
    }
    if (fai_plan_create(pb, &fx->plan) != FAI_OK) {
        fprintf(stderr, "  fixture plan: %s\n", fai_last_error());
        return 0;
    }
    const size_t q_elems = (size_t)(B * Sq * Hq * D), o_elems = (size_t)(B * Sq * Hq * Dv);
    const size_t k_elems = (size_t)(kv_batches * kv_rows * Hkv * D);
    const size_t v_elems = (size_t)(kv_batches * kv_rows * Hkv * Dv);
    const size_t mask_bytes = (size_t)(Sq * pb->seq_kv > 0 ? Sq * 16 : 1);
    fx->o_bytes = o_elems * sizeof(float);
    fx->lse_bytes = (size_t)(B * Hq * Sq) * sizeof(float);
    fx->q = malloc(q_elems * sizeof(float));
    fx->o = malloc(fx->o_bytes);
    fx->lse = malloc(fx->lse_bytes);
    fx->k = malloc(k_elems * sizeof(uint16_t));
    fx->v = malloc(v_elems * sizeof(uint16_t));
    fx->mask = malloc(mask_bytes);
    fx->ws_size = fai_plan_workspace_size(fx->plan);
    fx->ws = malloc(fx->ws_size ? fx->ws_size : 1);
    if (!fx->q || !fx->o || !fx->lse || !fx->k || !fx->v || !fx->mask || !fx->ws) return 0;
    for (size_t i = 0; i < q_elems; i++)
        fx->q[i] = (float)((int)(i % 7) - 3) * 0.25f;
    for (size_t i = 0; i < k_elems; i++)
        fx->k[i] = (uint16_t)(i % 3 ? 0x3800 : 0xB400);
    for (size_t i = 0; i < v_elems; i++)
        fx->v[i] = (uint16_t)(i % 5 ? 0x3C00 : 0xC000);
    memset(fx->mask, 1, mask_bytes);

    fx->t.q = fai_tensor_bshd(fx->q, FAI_DTYPE_F32, Sq, Hq, D);
    fx->t.k = fai_tensor_bshd(fx->k, FAI_DTYPE_F16, kv_rows, Hkv, D);
    fx->t.v = fai_tensor_bshd(fx->v, FAI_DTYPE_F16, kv_rows, Hkv, Dv);
    fx->t.o = fai_tensor_bshd(fx->o, FAI_DTYPE_F32, Sq, Hq, Dv);
    fx->t.lse.data = fx->lse;
    fx->t.lse.dtype = FAI_DTYPE_F32;
    fx->t.lse.stride_batch = Hq * Sq;
    fx->t.lse.stride_head = Sq;
    fx->t.lse.stride_seq = 1;
    fx->t.lse.stride_dim = 1;
    if (mask_kind != FAI_MASK_NONE) {
        fx->t.mask.data = fx->mask;
        fx->t.mask.stride_q = 16; /* [Sq, Skv] broadcast over batch and heads */
    }
    if (paged) fx->t.block_table = fx->block_table;
    return 1;
}

static int fixture_init(run_fixture *fx, int paged, fai_mask_kind mask_kind) {
    return fixture_init_with(fx, paged, mask_kind, 0, 0);
}

static void fixture_free(run_fixture *fx) {
    fai_plan_free(fx->plan);
    free(fx->q);
    free(fx->o);
    free(fx->lse);
    free(fx->k);
    free(fx->v);
    free(fx->mask);
    free(fx->ws);
}

static int all_bytes(const void *data, size_t bytes, unsigned char value) {
    const unsigned char *p = data;
    for (size_t i = 0; i < bytes; i++)
        if (p[i] != value) return 0;
    return 1;
}

/* fai_run with `t` must fail with `want`, name the strings, and leave O and LSE untouched. */
static int run_fails(run_fixture *fx, const fai_tensors *t, void *ws, size_t ws_size, int want,
                     ...) {
    memset(fx->o, SENTINEL, fx->o_bytes);
    memset(fx->lse, SENTINEL, fx->lse_bytes);
    unsigned char *o_before = malloc(fx->o_bytes), *lse_before = malloc(fx->lse_bytes);
    if (!o_before || !lse_before) {
        free(o_before);
        free(lse_before);
        return 0;
    }
    memcpy(o_before, fx->o, fx->o_bytes);
    memcpy(lse_before, fx->lse, fx->lse_bytes);

    const fai_status status = fai_run(fx->plan, t, ws, ws_size);
    const char *message = fai_last_error();
    va_list args;
    va_start(args, want);
    const int has = message_has_v(message, args);
    va_end(args);
    const int o_same = memcmp(o_before, fx->o, fx->o_bytes) == 0;
    const int lse_same = memcmp(lse_before, fx->lse, fx->lse_bytes) == 0;
    free(o_before);
    free(lse_before);
    const int ok = status == (fai_status)want && has && o_same && lse_same;
    if (!ok) {
        fprintf(stderr, "  fai_run: %s (want %s), O %s, LSE %s, message \"%s\", wanted",
                fai_status_string(status), fai_status_string((fai_status)want),
                o_same ? "untouched" : "WRITTEN", lse_same ? "untouched" : "WRITTEN", message);
        va_start(args, want);
        print_wanted(args);
        va_end(args);
    }
    return ok;
}

/* The unchanged fixture runs, writes O and LSE, and clears the last error. */
static int run_succeeds(run_fixture *fx, const fai_tensors *t) {
    memset(fx->o, SENTINEL, fx->o_bytes);
    memset(fx->lse, SENTINEL, fx->lse_bytes);
    const fai_status status = fai_run(fx->plan, t, fx->ws, fx->ws_size);
    if (status != FAI_OK) {
        fprintf(stderr, "  fai_run: %s \"%s\"\n", fai_status_string(status), fai_last_error());
        return 0;
    }
    return fai_last_error()[0] == '\0' && !all_bytes(fx->o, fx->o_bytes, SENTINEL) &&
           !all_bytes(fx->lse, fx->lse_bytes, SENTINEL);
}

TEST(run_null_arguments) {
    run_fixture fx;
    REQUIRE(fixture_init(&fx, 0, FAI_MASK_NONE));
    CHECK(run_succeeds(&fx, &fx.t));

    memset(fx.o, SENTINEL, fx.o_bytes);
    CHECK(fai_run(NULL, &fx.t, fx.ws, fx.ws_size) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "plan") && strstr(fai_last_error(), "NULL"));
    CHECK(all_bytes(fx.o, fx.o_bytes, SENTINEL));

    CHECK(run_fails(&fx, NULL, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "tensors", "NULL", NULL));
    fixture_free(&fx);
}

TEST(run_workspace) {
    run_fixture fx;
    REQUIRE(fixture_init(&fx, 0, FAI_MASK_NONE));
    REQUIRE(fx.ws_size > 0);
    char needed[32], given[32];
    snprintf(needed, sizeof needed, "%zu", fx.ws_size);
    snprintf(given, sizeof given, "%zu", fx.ws_size - 1);

    CHECK(run_fails(&fx, &fx.t, NULL, fx.ws_size, FAI_ERR_WORKSPACE_TOO_SMALL, "workspace", needed,
                    NULL));
    CHECK(run_fails(&fx, &fx.t, NULL, 0, FAI_ERR_WORKSPACE_TOO_SMALL, "workspace", needed, NULL));
    CHECK(run_fails(&fx, &fx.t, fx.ws, fx.ws_size - 1, FAI_ERR_WORKSPACE_TOO_SMALL, "workspace",
                    given, needed, NULL));
    CHECK(run_fails(&fx, &fx.t, fx.ws, 0, FAI_ERR_WORKSPACE_TOO_SMALL, "workspace", needed, NULL));
    /* exactly the size is enough */
    CHECK(run_succeeds(&fx, &fx.t));
    fixture_free(&fx);
}

TEST(run_null_data) {
    run_fixture fx;
    REQUIRE(fixture_init(&fx, 0, FAI_MASK_NONE));
    fai_tensors t;
#define NULL_DATA(tensor)                                                                          \
    do {                                                                                           \
        t = fx.t;                                                                                  \
        t.tensor.data = NULL;                                                                      \
        CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, #tensor ".data", "NULL",  \
                        NULL));                                                                    \
    } while (0)
    NULL_DATA(q);
    NULL_DATA(k);
    NULL_DATA(v);
    NULL_DATA(o);
#undef NULL_DATA
    /* no LSE is fine */
    t = fx.t;
    t.lse.data = NULL;
    memset(fx.o, SENTINEL, fx.o_bytes);
    memset(fx.lse, SENTINEL, fx.lse_bytes);
    CHECK(fai_run(fx.plan, &t, fx.ws, fx.ws_size) == FAI_OK);
    CHECK(all_bytes(fx.lse, fx.lse_bytes, SENTINEL));
    CHECK(!all_bytes(fx.o, fx.o_bytes, SENTINEL));
    fixture_free(&fx);
}

/* Elements are read and written as what they are: data at a multiple of its elements' size (as
 * an array of them is), or refused before anything is read. */
TEST(run_misaligned_data) {
    run_fixture fx;
    REQUIRE(fixture_init(&fx, 0, FAI_MASK_NONE));
    fai_tensors t;
#define MISALIGNED(tensor, base, by, bytes)                                                        \
    do {                                                                                           \
        t = fx.t;                                                                                  \
        t.tensor.data = (char *)(base) + (by);                                                     \
        CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, #tensor ".data",          \
                        "not aligned to its " bytes "-byte elements", NULL));                      \
    } while (0)
    MISALIGNED(q, fx.q, 2, "4");
    MISALIGNED(k, fx.k, 1, "2");
    MISALIGNED(v, fx.v, 1, "2");
    MISALIGNED(o, fx.o, 2, "4");
    MISALIGNED(lse, fx.lse, 1, "4");
#undef MISALIGNED
    fixture_free(&fx);
    /* an additive mask holds floats; byte masks may start anywhere */
    REQUIRE(fixture_init(&fx, 0, FAI_MASK_ADD));
    memset(fx.mask, 0, 5 * 16); /* +0.0f over the rows read */
    t = fx.t;
    t.mask.data = fx.mask + 2;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "mask.data",
                    "not aligned to its 4-byte elements", NULL));
    fixture_free(&fx);
    REQUIRE(fixture_init(&fx, 0, FAI_MASK_KEEP));
    t = fx.t;
    t.mask.data = fx.mask + 1;
    CHECK(run_succeeds(&fx, &t));
    fixture_free(&fx);
}

/* Every row of O and element of LSE has its own place, and neither shares memory with the
 * other or with what the run reads: refused before anything is written. */
TEST(run_outputs_apart) {
    run_fixture fx;
    REQUIRE(fixture_init(&fx, 0, FAI_MASK_KEEP));
    fai_tensors t = fx.t;
    t.o.stride_seq = 0; /* every query row of a head in one place */
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "o strides (batch 120, seq 0",
                    "in one place", NULL));
    t = fx.t;
    t.o.stride_head = 3; /* rows of 6 elements, 3 apart: they overlap */
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "o strides", "in one place",
                    NULL));
    t = fx.t;
    t.lse.stride_head = 0;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "lse strides", "in one place",
                    NULL));
    t = fx.t;
    t.lse.data = fx.o + 8;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "o and lse overlap", NULL));
    t = fx.t;
    t.lse.data = fx.k + 2; /* K is f16: two of its elements per float */
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "lse and k overlap", NULL));
    /* O over Q (the same float buffer) and over the mask; nothing of either is written */
    float *q_before = malloc(320 * sizeof(float));
    REQUIRE(q_before);
    memcpy(q_before, fx.q, 320 * sizeof(float));
    t = fx.t;
    t.o.data = fx.q;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "o and q overlap",
                    "reads q while it writes o", NULL));
    CHECK(memcmp(q_before, fx.q, 320 * sizeof(float)) == 0);
    free(q_before);
    t = fx.t;
    t.o.data = fx.mask;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "o and mask overlap", NULL));
    t = fx.t;
    t.v.data = fx.o + 16; /* an input inside the output */
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "o and v overlap", NULL));
    CHECK(run_succeeds(&fx, &fx.t));
    fixture_free(&fx);
    /* the modifiers' per-head arrays are read by every unit: not inside an output either */
    REQUIRE(fixture_init_with(&fx, 0, FAI_MASK_NONE, 1, 1));
    float slopes[4] = {0.5f, 0.25f, 0.125f, 0.0625f}, sinks[4] = {0.0f, 1.0f, -1.0f, 2.0f};
    fx.t.alibi_slopes = slopes;
    fx.t.sinks = sinks;
    CHECK(run_succeeds(&fx, &fx.t));
    t = fx.t;
    t.sinks = fx.o + 4;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "o and sinks overlap",
                    "reads sinks while it writes o", NULL));
    t = fx.t;
    t.alibi_slopes = fx.lse;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "lse and alibi_slopes overlap",
                    NULL));
    fixture_free(&fx);
}

/* Strides a run never follows may be anything: a batch stride with one sequence (the INT64_MAX
 * fai_tensor_bshd gives when its product overflows), a packed Q's batch stride, a head stride with
 * one head, and the strides of an LSE or scales not given. The result is the same, and nothing
 * is computed from them (the sanitizer build would report an overflow). */
TEST(run_ignores_strides_it_does_not_follow) {
    enum { SQ = 4, SKV = 6, D = 8 };
    float q[SQ * D], k[SKV * D], v[SKV * D], o[SQ * D], o_ref[SQ * D], lse[SQ], lse_ref[SQ];
    for (int i = 0; i < SQ * D; i++)
        q[i] = (float)((i * 7) % 11) * 0.125f - 0.5f;
    for (int i = 0; i < SKV * D; i++) {
        k[i] = (float)((i * 5) % 13) * 0.0625f - 0.375f;
        v[i] = (float)((i * 3) % 7) - 3.0f;
    }
    for (int packed = 0; packed < 2; packed++) {
        fai_problem pb;
        fai_problem_init(&pb);
        pb.batch = pb.heads_q = pb.heads_kv = 1;
        pb.seq_q = SQ;
        pb.seq_kv = SKV;
        pb.head_dim = D;
        pb.q_dtype = pb.k_dtype = pb.v_dtype = FAI_DTYPE_F32;
        const int32_t cu[2] = {0, SQ};
        if (packed) pb.cu_seqlens_q = cu;
        fai_plan *plan = NULL;
        REQUIRE(fai_plan_create(&pb, &plan) == FAI_OK);
        const size_t size = fai_plan_workspace_size(plan);
        void *ws = malloc(size + 1);
        REQUIRE(ws);
        fai_tensors t;
        memset(&t, 0, sizeof t);
        t.q = fai_tensor_bshd(q, FAI_DTYPE_F32, SQ, 1, D);
        t.k = fai_tensor_bshd(k, FAI_DTYPE_F32, SKV, 1, D);
        t.v = fai_tensor_bshd(v, FAI_DTYPE_F32, SKV, 1, D);
        t.o = fai_tensor_bshd(o_ref, FAI_DTYPE_F32, SQ, 1, D);
        t.lse.data = lse_ref;
        t.lse.dtype = FAI_DTYPE_F32;
        t.lse.stride_seq = 1;
        CHECK(fai_run(plan, &t, ws, size) == FAI_OK);

        t.o.data = o;
        t.lse.data = lse;
        t.q.stride_batch = t.k.stride_batch = t.v.stride_batch = INT64_MAX;
        t.o.stride_batch = t.lse.stride_batch = INT64_MAX;
        t.q.stride_head = t.o.stride_head = INT64_MAX / 2;
        t.lse.stride_head = INT64_MAX;
        t.v_scale.stride_batch = t.v_scale.stride_seq = t.v_scale.stride_head = INT64_MIN;
        memset(o, 0, sizeof o);
        memset(lse, 0, sizeof lse);
        const fai_status with_lse = fai_run(plan, &t, ws, size);
        CHECK(with_lse == FAI_OK);
        if (with_lse != FAI_OK) fprintf(stderr, "  %s\n", fai_last_error());
        CHECK(memcmp(o, o_ref, sizeof o) == 0 && memcmp(lse, lse_ref, sizeof lse) == 0);
        t.lse.data = NULL;
        t.lse.stride_seq = INT64_MAX;
        memset(o, 0, sizeof o);
        CHECK(fai_run(plan, &t, ws, size) == FAI_OK);
        CHECK(memcmp(o, o_ref, sizeof o) == 0);
        free(ws);
        fai_plan_free(plan);
    }
}

TEST(run_dtype_mismatch) {
    run_fixture fx;
    REQUIRE(fixture_init(&fx, 0, FAI_MASK_NONE));
    fai_tensors t;
#define BAD_DTYPE(tensor, bad, got, plan_has)                                                      \
    do {                                                                                           \
        t = fx.t;                                                                                  \
        t.tensor.dtype = (bad);                                                                    \
        CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, #tensor ".dtype", got,    \
                        plan_has, NULL));                                                          \
    } while (0)
    BAD_DTYPE(q, FAI_DTYPE_F16, "f16", "f32");
    BAD_DTYPE(q, FAI_DTYPE_BF16, "bf16", "f32");
    BAD_DTYPE(k, FAI_DTYPE_F32, "f32", "f16");
    BAD_DTYPE(k, FAI_DTYPE_BF16, "bf16", "f16");
    BAD_DTYPE(v, FAI_DTYPE_F32, "f32", "f16");
    BAD_DTYPE(o, FAI_DTYPE_F16, "f16", "f32");
    BAD_DTYPE(o, FAI_DTYPE_BF16, "bf16", "f32");
    BAD_DTYPE(lse, FAI_DTYPE_F16, "f16", "f32");
    BAD_DTYPE(lse, FAI_DTYPE_BF16, "bf16", "f32");
#undef BAD_DTYPE
    fixture_free(&fx);
}

TEST(run_bad_strides) {
    run_fixture fx;
    REQUIRE(fixture_init(&fx, 0, FAI_MASK_NONE));
    fai_tensors t;
#define BAD_STRIDE_DIM(tensor, value, text)                                                        \
    do {                                                                                           \
        t = fx.t;                                                                                  \
        t.tensor.stride_dim = (value);                                                             \
        CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, #tensor ".stride_dim",    \
                        text, NULL));                                                              \
    } while (0)
    BAD_STRIDE_DIM(q, 2, "2");
    BAD_STRIDE_DIM(k, 2, "2");
    BAD_STRIDE_DIM(v, 3, "3");
    BAD_STRIDE_DIM(o, 2, "2");
    BAD_STRIDE_DIM(lse, 2, "2");
    BAD_STRIDE_DIM(q, -1, "-1");
#undef BAD_STRIDE_DIM

#define BAD_STRIDE(tensor, field, value, text)                                                     \
    do {                                                                                           \
        t = fx.t;                                                                                  \
        t.tensor.field = (value);                                                                  \
        CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, #tensor, text, NULL));    \
    } while (0)
    BAD_STRIDE(q, stride_batch, -1, "-1");
    BAD_STRIDE(q, stride_seq, -32, "-32");
    BAD_STRIDE(q, stride_head, -8, "-8");
    BAD_STRIDE(k, stride_batch, -112, "-112");
    BAD_STRIDE(k, stride_seq, -16, "-16");
    BAD_STRIDE(v, stride_head, -6, "-6");
    BAD_STRIDE(o, stride_seq, -24, "-24");
    BAD_STRIDE(o, stride_batch, INT64_MIN, "-9223372036854775808");
    BAD_STRIDE(lse, stride_head, -5, "-5");
    BAD_STRIDE(lse, stride_seq, -1, "-1");
#undef BAD_STRIDE

    /* strides whose last element lies past a signed 64-bit byte offset: the address would wrap
     * onto other elements */
#define FAR_STRIDE(tensor, field, text)                                                            \
    do {                                                                                           \
        t = fx.t;                                                                                  \
        t.tensor.field = INT64_C(1) << 62;                                                         \
        CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_OVERFLOW, text, "4611686018427387904", \
                        NULL));                                                                    \
    } while (0)
    FAR_STRIDE(q, stride_seq, "q strides");
    FAR_STRIDE(k, stride_head, "k strides");
    FAR_STRIDE(v, stride_batch, "v strides");
    FAR_STRIDE(o, stride_seq, "o strides");
    FAR_STRIDE(lse, stride_seq, "lse strides");
#undef FAR_STRIDE

    /* stride_dim 0 is read as 1 */
    t = fx.t;
    t.q.stride_dim = t.k.stride_dim = t.v.stride_dim = t.o.stride_dim = t.lse.stride_dim = 0;
    CHECK(run_succeeds(&fx, &t));
    fixture_free(&fx);
}

TEST(run_mask) {
    run_fixture fx;
    REQUIRE(fixture_init(&fx, 0, FAI_MASK_KEEP));
    CHECK(run_succeeds(&fx, &fx.t));
    fai_tensors t = fx.t;
    t.mask.data = NULL;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "mask.data", "NULL",
                    "mask_kind", "1", NULL));
    t = fx.t;
    t.mask.stride_q = -16;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "mask", "-16", NULL));
    t = fx.t;
    t.mask.stride_head = -1;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "mask", "-1", NULL));
    t = fx.t;
    t.mask.stride_batch = -80;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "mask", "-80", NULL));
    /* strides whose rows lie past 2^63 bytes (their offsets would overflow): refused */
    t = fx.t;
    t.mask.stride_q = t.mask.stride_batch = INT64_MAX / 2;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_OVERFLOW, "mask strides", "2^63", NULL));
    t = fx.t;
    t.mask.stride_head = INT64_MAX / 3;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_OVERFLOW, "mask strides", NULL));
    CHECK(fai_check_tensors(fx.plan, &t) == FAI_ERR_OVERFLOW);
    fixture_free(&fx);

    /* an additive mask's rows are floats: a stride that reaches 2^63 only in bytes is refused */
    REQUIRE(fixture_init(&fx, 0, FAI_MASK_ADD));
    t = fx.t;
    t.mask.stride_q = INT64_MAX / 8;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_OVERFLOW, "mask strides", NULL));
    fixture_free(&fx);

    /* without a mask kind the mask is not read, and one that is given is refused, not ignored */
    REQUIRE(fixture_init(&fx, 0, FAI_MASK_NONE));
    t = fx.t;
    t.mask.data = NULL;
    t.mask.stride_q = -1;
    CHECK(run_succeeds(&fx, &t));
    t.mask.data = fx.mask;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "mask.data is set",
                    "mask_kind is NONE", NULL));
    fixture_free(&fx);
}

TEST(run_paged_block_table) {
    run_fixture fx;
    REQUIRE(fixture_init(&fx, 1, FAI_MASK_NONE));
    CHECK(run_succeeds(&fx, &fx.t));

    fai_tensors t = fx.t;
    t.block_table = NULL;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "block_table", "NULL", NULL));

    /* sequence 1 (10 keys) reaches pages 0..2 of its row */
    fx.block_table[3 + 2] = -1;
    CHECK(run_fails(&fx, &fx.t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "block_table[1][2]", "-1",
                    NULL));
    fx.block_table[3 + 2] = 6; /* num_pages */
    CHECK(run_fails(&fx, &fx.t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "block_table[1][2]", "6",
                    "num_pages", "6", NULL));
    fx.block_table[3 + 2] = 2;
    fx.block_table[0] = INT32_MAX;
    CHECK(run_fails(&fx, &fx.t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "block_table[0][0]",
                    "2147483647", NULL));
    fx.block_table[0] = INT32_MIN;
    CHECK(run_fails(&fx, &fx.t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "block_table[0][0]",
                    "-2147483648", NULL));
    fx.block_table[0] = 5;
    CHECK(run_succeeds(&fx, &fx.t));

    /* entries past a sequence's length are not looked at: sequence 0 (7 keys) uses 2 pages */
    fx.block_table[2] = -7;
    CHECK(run_succeeds(&fx, &fx.t));
    fx.block_table[2] = 3;

    t = fx.t;
    t.block_table_stride = -3;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "block_table_stride", "-3",
                    NULL));
    /* a stride whose second row lies past 2^63 bytes: refused, trusted or not */
    t = fx.t;
    t.block_table_stride = INT64_MAX / 2;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_OVERFLOW, "block_table strides",
                    "4611686018427387903", NULL));
    fai_plan_free(fx.plan);
    fx.pb.trust_block_table = 1;
    REQUIRE(fai_plan_create(&fx.pb, &fx.plan) == FAI_OK);
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_OVERFLOW, "block_table strides", NULL));
    fixture_free(&fx);

    /* a block table given to dense K/V: refused, not ignored */
    REQUIRE(fixture_init(&fx, 0, FAI_MASK_NONE));
    t = fx.t;
    t.block_table = fx.block_table;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "block_table is set",
                    "page_size = 0", NULL));
    fixture_free(&fx);
}

/* The per-head arrays of ALiBi and sinks: required when the problem asks for them, refused when
 * it does not, and every value checked, naming the array, the head and the value; nothing is
 * written on failure, and fai_check_tensors says the same. */
TEST(run_modifier_arrays) {
    run_fixture fx;
    REQUIRE(fixture_init_with(&fx, 0, FAI_MASK_NONE, 1, 1));
    float slopes[4] = {0.5f, 0.25f, 0.125f, 0.0625f}, sinks[4] = {0.0f, 1.0f, -INFINITY, -2.0f};
    fai_tensors t = fx.t;
    t.alibi_slopes = slopes;
    t.sinks = sinks;
    CHECK(run_succeeds(&fx, &t));
    fai_tensors bad = t;
    bad.alibi_slopes = NULL;
    CHECK(
        run_fails(&fx, &bad, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "alibi_slopes", "NULL", NULL));
    CHECK(fai_check_tensors(fx.plan, &bad) == FAI_ERR_INVALID_ARG);
    bad = t;
    bad.sinks = NULL;
    CHECK(run_fails(&fx, &bad, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "sinks", "NULL", NULL));
    slopes[2] = NAN;
    CHECK(
        run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "alibi_slopes[2]", "nan", NULL));
    slopes[2] = -INFINITY;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "alibi_slopes[2]", "-inf",
                    NULL));
    slopes[2] = -0.5f; /* any finite slope */
    CHECK(run_succeeds(&fx, &t));
    sinks[3] = NAN;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "sinks[3]", "nan", NULL));
    sinks[3] = INFINITY;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "sinks[3]", "inf", NULL));
    CHECK(fai_check_tensors(fx.plan, &t) == FAI_ERR_INVALID_ARG);
    fixture_free(&fx);

    /* given to a problem without them: refused, not ignored */
    REQUIRE(fixture_init(&fx, 0, FAI_MASK_NONE));
    t = fx.t;
    t.alibi_slopes = slopes;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "alibi_slopes", "alibi = 0",
                    NULL));
    t = fx.t;
    t.sinks = sinks;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "sinks", "sinks = 0", NULL));
    fixture_free(&fx);
}

/* The fixture's plan remade for int8 K and e4m3 V (their buffers reread as bytes: the f16 test
 * pattern makes valid codes), with per-token scales [B or pages, rows, Hkv] all 0.5. */
static int quantize_fixture(run_fixture *fx, float *k_scale, float *v_scale, size_t scales) {
    fai_plan_free(fx->plan);
    fx->plan = NULL;
    fx->pb.k_dtype = FAI_DTYPE_I8;
    fx->pb.v_dtype = FAI_DTYPE_E4M3;
    if (fai_plan_create(&fx->pb, &fx->plan) != FAI_OK) return 0;
    free(fx->ws);
    fx->ws_size = fai_plan_workspace_size(fx->plan);
    fx->ws = malloc(fx->ws_size);
    const int64_t rows = fx->pb.page_size ? fx->pb.page_size : fx->pb.seq_kv;
    const int64_t Hkv = fx->pb.heads_kv;
    fx->t.k = fai_tensor_bshd(fx->k, FAI_DTYPE_I8, rows, Hkv, fx->pb.head_dim);
    fx->t.v = fai_tensor_bshd(fx->v, FAI_DTYPE_E4M3, rows, Hkv, fx->pb.head_dim_v);
    for (size_t i = 0; i < scales; i++)
        k_scale[i] = v_scale[i] = 0.5f;
    const fai_scale per_token = {k_scale, rows * Hkv, Hkv, 1};
    fx->t.k_scale = per_token;
    fx->t.v_scale = per_token;
    fx->t.v_scale.data = v_scale;
    return fx->ws != NULL;
}

TEST(run_quantized_scales) {
    for (int paged = 0; paged < 2; paged++) {
        run_fixture fx;
        float k_scale[6 * 7 * 2], v_scale[6 * 7 * 2];
        REQUIRE(fixture_init(&fx, paged, FAI_MASK_NONE));
        REQUIRE(quantize_fixture(&fx, k_scale, v_scale, 6 * 7 * 2));
        CHECK(run_succeeds(&fx, &fx.t));
        fai_tensors t = fx.t;
        t.k_scale.data = NULL;
        CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "k_scale.data = NULL",
                        "int8", NULL));
        t = fx.t;
        t.v_scale.stride_seq = -1;
        CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "v_scale strides", "-1",
                        NULL));
        /* a large negative stride is negative first (not an address past 2^63) */
        t = fx.t;
        t.k_scale.stride_seq = INT64_MIN / 2;
        CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "k_scale strides",
                        "-4611686018427387904", "must not be negative", NULL));
        /* a bad scale where a key that some query reads has it: sequence 1, key 5, head 1 (the
         * paged fixture's block table puts key 5 of sequence 1 on page 4, slot 1) */
        const size_t at = paged ? (size_t)((4 * 4 + 1) * 2 + 1) : (size_t)((7 + 5) * 2 + 1);
        const float bad[] = {NAN, 0.0f, -1.0f, INFINITY};
        const char *text[] = {"nan", "= 0", "-1", "inf"};
        for (int i = 0; i < 4; i++) {
            k_scale[at] = bad[i];
            CHECK(run_fails(&fx, &fx.t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "k_scale",
                            "sequence 1, key 5, kv head 1", text[i], "finite and > 0", NULL));
            CHECK(fai_check_tensors(fx.plan, &fx.t) == FAI_ERR_INVALID_ARG);
            k_scale[at] = 0.5f;
            v_scale[at] = bad[i];
            CHECK(run_fails(&fx, &fx.t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "v_scale", text[i],
                            NULL));
            v_scale[at] = 0.5f;
        }
        /* one scale per kv head broadcast by zero strides, and scales past the lengths never
         * read (the dense fixture's sequences are full: only the paged one has unread slots) */
        t = fx.t;
        t.k_scale.stride_batch = t.k_scale.stride_seq = 0;
        CHECK(run_succeeds(&fx, &t));
        if (paged) {
            k_scale[(3 * 4 + 3) * 2] = NAN; /* page 3 is sequence 0's third page: key 11 > 7 */
            CHECK(run_succeeds(&fx, &fx.t));
        }
        /* a plan that trusts its scales runs without reading them first (a bad one then gives a
         * NaN row, not an error); fai_check_tensors still checks them */
        fai_plan_free(fx.plan);
        fx.pb.trust_scales = 1;
        REQUIRE(fai_plan_create(&fx.pb, &fx.plan) == FAI_OK);
        k_scale[at] = NAN;
        CHECK(fai_run(fx.plan, &fx.t, fx.ws, fx.ws_size) == FAI_OK);
        CHECK(isnan(fx.o[(size_t)((5 + 0) * 4 + 2) * 6])); /* sequence 1 (Sq 5), head 2 of kv 1 */
        CHECK(fai_check_tensors(fx.plan, &fx.t) == FAI_ERR_INVALID_ARG);
        fixture_free(&fx);
    }
    /* scales given to a float K or V are refused, not ignored */
    run_fixture fx;
    float scale[2] = {1.0f, 1.0f};
    REQUIRE(fixture_init(&fx, 0, FAI_MASK_NONE));
    fai_tensors t = fx.t;
    t.v_scale.data = scale;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "v_scale.data is set", "f16",
                    NULL));
    fixture_free(&fx);
}

/* K's per-channel scales: refused for a float K, required exactly when the problem has them,
 * each checked (naming the head and channel) before anything is written; and exact where they
 * are powers of two: channels of 0.5 with per-token scales of 0.5 give the bytes that per-token
 * scales of 0.25 alone give. */
TEST(run_channel_scales) {
    run_fixture fx;
    REQUIRE(fixture_init(&fx, 0, FAI_MASK_NONE));
    fai_problem pb = fx.pb;
    pb.k_channel_scales = 1;
    CHECK(plan_fails(&pb, FAI_ERR_INVALID_ARG, "k_channel_scales = 1", "f16", "quantized K", NULL));

    float k_scale[6 * 7 * 2], v_scale[6 * 7 * 2], channels[2 * 10];
    REQUIRE(quantize_fixture(&fx, k_scale, v_scale, 6 * 7 * 2));
    for (size_t i = 0; i < sizeof k_scale / sizeof k_scale[0]; i++)
        k_scale[i] = 0.25f;
    REQUIRE(run_succeeds(&fx, &fx.t));
    unsigned char *o_token = malloc(fx.o_bytes);
    REQUIRE(o_token);
    memcpy(o_token, fx.o, fx.o_bytes);

    fai_plan_free(fx.plan);
    fx.pb.k_channel_scales = 1;
    REQUIRE(fai_plan_create(&fx.pb, &fx.plan) == FAI_OK);
    free(fx.ws);
    fx.ws_size = fai_plan_workspace_size(fx.plan);
    fx.ws = malloc(fx.ws_size);
    REQUIRE(fx.ws);
    const int64_t D = fx.pb.head_dim;
    for (size_t i = 0; i < sizeof k_scale / sizeof k_scale[0]; i++)
        k_scale[i] = 0.5f;
    for (size_t i = 0; i < sizeof channels / sizeof channels[0]; i++)
        channels[i] = 0.5f;
    fai_tensors t = fx.t;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "k_channel_scale.data = NULL",
                    NULL));
    fx.t.k_channel_scale.data = channels;
    fx.t.k_channel_scale.stride_head = 10; /* a gap of two past each head's D = 8 */
    CHECK(run_succeeds(&fx, &fx.t));
    CHECK(memcmp(o_token, fx.o, fx.o_bytes) == 0);
    t = fx.t;
    t.k_channel_scale.stride_head = -1;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "k_channel_scale.stride_head",
                    "-1", NULL));
    t.k_channel_scale.stride_head = INT64_MAX / 2 + 7; /* head 1 past 2^63 bytes */
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_OVERFLOW, "k_channel_scale strides", NULL));
    const float bad[] = {NAN, 0.0f, -1.0f, INFINITY};
    const char *text[] = {"nan", "= 0", "-1", "inf"};
    for (int i = 0; i < 4; i++) {
        channels[10 + 3] = bad[i]; /* kv head 1, channel 3 */
        CHECK(run_fails(&fx, &fx.t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "k_channel_scale",
                        "kv head 1, channel 3", text[i], "finite and > 0", NULL));
        CHECK(fai_check_tensors(fx.plan, &fx.t) == FAI_ERR_INVALID_ARG);
    }
    channels[10 + 3] = 0.5f;
    /* the gap between heads is never read; one set of channels for every head (stride 0) */
    channels[8] = channels[9] = NAN;
    CHECK(run_succeeds(&fx, &fx.t));
    t = fx.t;
    t.k_channel_scale.stride_head = 0;
    CHECK(run_succeeds(&fx, &t));
    CHECK(memcmp(o_token, fx.o, fx.o_bytes) == 0);
    /* a plan that trusts its scales does not read them first; fai_check_tensors does */
    fai_plan_free(fx.plan);
    fx.pb.trust_scales = 1;
    REQUIRE(fai_plan_create(&fx.pb, &fx.plan) == FAI_OK);
    channels[D - 1] = -2.0f;
    CHECK(fai_run(fx.plan, &fx.t, fx.ws, fx.ws_size) == FAI_OK);
    CHECK(fai_check_tensors(fx.plan, &fx.t) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "kv head 0, channel 7") != NULL);
    free(o_token);
    fixture_free(&fx);

    /* given to a problem without them: refused, not ignored */
    REQUIRE(fixture_init(&fx, 0, FAI_MASK_NONE));
    REQUIRE(quantize_fixture(&fx, k_scale, v_scale, 6 * 7 * 2));
    t = fx.t;
    t.k_channel_scale.data = channels;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_INVALID_ARG, "k_channel_scale.data is set",
                    "k_channel_scales is 0", NULL));
    fixture_free(&fx);
}

/* fai_tensor_bshd saturates a stride whose product passes int64, and a run refuses it. */
TEST(tensor_bshd_saturates) {
    float x = 0.0f;
    const fai_tensor big = fai_tensor_bshd(&x, FAI_DTYPE_F32, INT64_C(1) << 40, 1 << 20, 1 << 10);
    CHECK(big.stride_head == 1 << 10 && big.stride_seq == INT64_C(1) << 30);
    CHECK(big.stride_batch == INT64_MAX);
    const fai_tensor wide =
        fai_tensor_bshd(&x, FAI_DTYPE_F32, 2, INT64_C(1) << 40, INT64_C(1) << 40);
    CHECK(wide.stride_seq == INT64_MAX && wide.stride_batch == INT64_MAX);
    run_fixture fx;
    REQUIRE(fixture_init(&fx, 0, FAI_MASK_NONE));
    fai_tensors t = fx.t;
    t.q.stride_batch = fai_tensor_bshd(fx.q, FAI_DTYPE_F32, INT64_MAX / 2, 4, 8).stride_batch;
    CHECK(run_fails(&fx, &t, fx.ws, fx.ws_size, FAI_ERR_OVERFLOW, "q strides", NULL));
    fixture_free(&fx);
}

TEST(apply_sinks_and_slopes_errors) {
    float o[2 * 3 * 4] = {0}, lse[2 * 3] = {0};
    const float sinks[3] = {0.0f, 1.0f, NAN};
    fai_tensor to = fai_tensor_bshd(o, FAI_DTYPE_F32, 2, 3, 4);
    fai_tensor tl = {lse, FAI_DTYPE_F32, 6, 3, 1, 1};
    CHECK(fai_apply_sinks(NULL, 1, 2, 3, 4, &to, &tl) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "sinks") != NULL);
    CHECK(fai_apply_sinks(sinks, 1, 2, 3, 4, NULL, &tl) == FAI_ERR_INVALID_ARG);
    CHECK(fai_apply_sinks(sinks, 1, 2, 3, 4, &to, NULL) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "lse") != NULL);
    CHECK(fai_apply_sinks(sinks, 1, 2, 3, 0, &to, &tl) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "head_dim") != NULL);
    CHECK(fai_apply_sinks(sinks, -1, 2, 3, 4, &to, &tl) == FAI_ERR_INVALID_ARG);
    /* a NaN sink: named, and nothing written */
    CHECK(fai_apply_sinks(sinks, 1, 2, 3, 4, &to, &tl) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "sinks[2]") && strstr(fai_last_error(), "nan"));
    CHECK(all_bytes(o, sizeof o, 0) && all_bytes(lse, sizeof lse, 0));
    fai_tensor bad_dtype = tl;
    bad_dtype.dtype = FAI_DTYPE_F16;
    CHECK(fai_apply_sinks(sinks, 1, 2, 2, 4, &to, &bad_dtype) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "lse") != NULL);
    CHECK(fai_apply_sinks(sinks, 1, 2, 2, 4, &to, &tl) == FAI_OK);
    CHECK(fai_last_error()[0] == '\0');
    /* an LSE of +inf: the sink weighs nothing beside it, so the row stays as it was (no NaN) */
    for (int x = 0; x < 4; x++)
        o[x] = 2.0f;
    lse[0] = INFINITY;
    CHECK(fai_apply_sinks(sinks, 1, 2, 2, 4, &to, &tl) == FAI_OK);
    CHECK(lse[0] == INFINITY && o[0] == 2.0f && o[3] == 2.0f);

    float slopes[3];
    CHECK(fai_alibi_slopes(0, slopes) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "heads = 0") != NULL);
    CHECK(fai_alibi_slopes(3, NULL) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "slopes") != NULL);
}
