/* The defaults of fai_problem are values no computation produces (fai.h): a computed scale of 0
 * is uniform attention, a computed head_dim_v of 0 an error; fields a paged problem does not use
 * are not checked; problems of zero extent plan and run. And the tolerance the tests enforce is
 * tight enough to catch an error of a few ulps in the scale. */
#include "fai.h"
#include "fai_cases.h"
#include "fai_oracle.h"
#include "test_util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Plans and runs pb on t with a workspace of its own; the status of the first failing call. */
static fai_status plan_and_run(const fai_problem *pb, const fai_tensors *t) {
    fai_plan *plan = NULL;
    fai_status status = fai_plan_create(pb, &plan);
    if (status != FAI_OK) return status;
    const size_t size = fai_plan_workspace_size(plan);
    void *ws = malloc(size + 1);
    status = ws ? fai_run(plan, t, ws, size) : FAI_ERR_NO_MEMORY;
    free(ws);
    fai_plan_free(plan);
    return status;
}

static uint32_t float_bits(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

TEST(defaults_problem_init) {
    fai_problem pb;
    memset(&pb, 0x5a, sizeof pb);
    fai_problem_init(&pb);
    CHECK(pb.head_dim_v == FAI_HEAD_DIM_V_DEFAULT);
    CHECK(float_bits(pb.scale) == FAI_SCALE_DEFAULT_BITS);
    CHECK(float_bits(FAI_SCALE_DEFAULT) == FAI_SCALE_DEFAULT_BITS);
    CHECK(pb.window_left == FAI_WINDOW_UNBOUNDED && pb.window_right == FAI_WINDOW_UNBOUNDED);
    CHECK(pb.workers == FAI_AUTO && pb.threads == FAI_AUTO);
    CHECK(pb.tile_q == FAI_AUTO && pb.tile_kv == FAI_AUTO);
    /* the default survives a copy through a double, as bindings in other languages make */
    const double widened = pb.scale;
    CHECK(float_bits((float)widened) == FAI_SCALE_DEFAULT_BITS);
}

/* One query row over five keys, f32 everywhere: Q and K large enough that any nonzero scale
 * would make the weights far from uniform. */
typedef struct small_case {
    fai_problem pb;
    fai_tensors t;
    float q[4], k[5 * 4], v[5 * 3], o[3], lse;
} small_case;

static void small_case_init(small_case *c) {
    memset(c, 0, sizeof *c);
    fai_problem_init(&c->pb);
    c->pb.batch = 1, c->pb.heads_q = 1, c->pb.heads_kv = 1;
    c->pb.seq_q = 1, c->pb.seq_kv = 5, c->pb.head_dim = 4, c->pb.head_dim_v = 3;
    c->pb.q_dtype = c->pb.k_dtype = c->pb.v_dtype = c->pb.o_dtype = FAI_DTYPE_F32;
    for (int d = 0; d < 4; d++)
        c->q[d] = 3.0f + (float)d;
    for (int j = 0; j < 5; j++) {
        for (int d = 0; d < 4; d++)
            c->k[j * 4 + d] = (float)(j * (d + 1)) - 2.0f;
        for (int d = 0; d < 3; d++)
            c->v[j * 3 + d] = (float)(j + 1) * (d ? -1.0f : 1.0f) + (float)d;
    }
    c->t.q = fai_tensor_bshd(c->q, FAI_DTYPE_F32, 1, 1, 4);
    c->t.k = fai_tensor_bshd(c->k, FAI_DTYPE_F32, 5, 1, 4);
    c->t.v = fai_tensor_bshd(c->v, FAI_DTYPE_F32, 5, 1, 3);
    c->t.o = fai_tensor_bshd(c->o, FAI_DTYPE_F32, 1, 1, 3);
    c->t.lse.data = &c->lse;
    c->t.lse.dtype = FAI_DTYPE_F32;
}

TEST(defaults_scale_zero_is_uniform_attention) {
    /* 0, and a scale that rounds to 0 in f32, weigh every visible key alike */
    const float scales[2] = {0.0f, (float)1e-46};
    for (int s = 0; s < 2; s++) {
        small_case c;
        small_case_init(&c);
        c.pb.scale = scales[s];
        REQUIRE(plan_and_run(&c.pb, &c.t) == FAI_OK);
        for (int d = 0; d < 3; d++) {
            double mean = 0.0;
            for (int j = 0; j < 5; j++)
                mean += c.v[j * 3 + d] / 5.0;
            CHECK(fabs(c.o[d] - mean) <= 1e-6 * fmax(1.0, fabs(mean)));
        }
        CHECK(fabsf(c.lse - logf(5.0f)) <= 1e-6f);
    }
    /* the default is 1/sqrt(D), bit for bit the same as giving it */
    small_case dflt, given;
    small_case_init(&dflt);
    small_case_init(&given);
    given.pb.scale = 0.5f;
    REQUIRE(plan_and_run(&dflt.pb, &dflt.t) == FAI_OK);
    REQUIRE(plan_and_run(&given.pb, &given.t) == FAI_OK);
    CHECK(memcmp(dflt.o, given.o, sizeof dflt.o) == 0 && dflt.lse == given.lse);
    CHECK(fabsf(dflt.lse - logf(5.0f)) > 1.0f); /* far from uniform */
}

TEST(defaults_head_dim_v_zero_is_refused) {
    small_case c;
    small_case_init(&c);
    c.pb.head_dim_v = 0;
    fai_plan *plan = NULL;
    CHECK(fai_plan_create(&c.pb, &plan) == FAI_ERR_INVALID_ARG && plan == NULL);
    CHECK(strstr(fai_last_error(), "head_dim_v = 0") != NULL);
    /* the default is D: V and O of width 4 */
    small_case_init(&c);
    c.pb.head_dim_v = FAI_HEAD_DIM_V_DEFAULT;
    float v4[5 * 4], o4[5];
    for (int i = 0; i < 20; i++)
        v4[i] = (float)i;
    for (int x = 0; x < 5; x++)
        o4[x] = NAN;
    c.t.v = fai_tensor_bshd(v4, FAI_DTYPE_F32, 5, 1, 4);
    c.t.o = fai_tensor_bshd(o4, FAI_DTYPE_F32, 1, 1, 4);
    REQUIRE(plan_and_run(&c.pb, &c.t) == FAI_OK);
    /* V[j][x] = 4 j + x, so O[x] = 4 sum_j p_j j + x: columns 1 apart, column 0 within [0, 16],
     * and exactly 4 columns written */
    CHECK(o4[0] >= 0.0f && o4[0] <= 16.0f);
    for (int x = 1; x < 4; x++)
        CHECK(fabsf(o4[x] - o4[0] - (float)x) <= 1e-5f);
    CHECK(isnan(o4[4]));
}

TEST(defaults_wide_block_table) {
    /* a table whose capacity (pages_per_seq x page_size) is past INT32_MAX: only the lengths
     * count, and 10 keys of one page are read */
    enum { PAGE = 65536, WIDTH = 32768, KEYS = 10, D = 4 };
    fai_problem pb;
    fai_problem_init(&pb);
    pb.batch = 1, pb.heads_q = 2, pb.heads_kv = 1, pb.seq_q = 1, pb.head_dim = D;
    pb.k_dtype = pb.v_dtype = FAI_DTYPE_F32;
    pb.page_size = PAGE, pb.num_pages = 1, pb.pages_per_seq = WIDTH;
    pb.seq_kv = (int64_t)WIDTH * PAGE; /* what the wrappers set; unused */
    const int32_t lens[1] = {KEYS};
    pb.seqlens_kv = lens;
    float *pool = calloc((size_t)PAGE * D, sizeof(float));
    int32_t *table = calloc(WIDTH, sizeof(int32_t));
    float q[2 * D] = {1, 0, 0, 0, 0, 1, 0, 0}, o[2 * D], o_dense[2 * D];
    REQUIRE(pool && table);
    for (int j = 0; j < KEYS * D; j++)
        pool[j] = (float)(j % 7) * 0.25f;
    fai_tensors t;
    memset(&t, 0, sizeof t);
    t.q = fai_tensor_bshd(q, FAI_DTYPE_F32, 1, 2, D);
    t.k = fai_tensor_bshd(pool, FAI_DTYPE_F32, PAGE, 1, D);
    t.v = t.k;
    t.o = fai_tensor_bshd(o, FAI_DTYPE_F32, 1, 2, D);
    t.block_table = table;
    CHECK(plan_and_run(&pb, &t) == FAI_OK);
    /* the same keys, dense */
    pb.page_size = pb.num_pages = pb.pages_per_seq = 0;
    pb.seqlens_kv = NULL;
    pb.seq_kv = KEYS;
    t.k = fai_tensor_bshd(pool, FAI_DTYPE_F32, KEYS, 1, D);
    t.v = t.k;
    t.o = fai_tensor_bshd(o_dense, FAI_DTYPE_F32, 1, 2, D);
    t.block_table = NULL;
    CHECK(plan_and_run(&pb, &t) == FAI_OK);
    CHECK(memcmp(o, o_dense, sizeof o) == 0);
    free(pool);
    free(table);
}

TEST(defaults_pages_without_page_size) {
    small_case c;
    small_case_init(&c);
    c.pb.num_pages = 3; /* a pool whose pages were computed as 0 keys long */
    fai_plan *plan = NULL;
    CHECK(fai_plan_create(&c.pb, &plan) == FAI_ERR_INVALID_ARG && plan == NULL);
    CHECK(strstr(fai_last_error(), "num_pages = 3") && strstr(fai_last_error(), "page_size = 0"));
    c.pb.num_pages = 0;
    c.pb.pages_per_seq = 2;
    CHECK(fai_plan_create(&c.pb, &plan) == FAI_ERR_INVALID_ARG && plan == NULL);
    CHECK(strstr(fai_last_error(), "pages_per_seq = 2") != NULL);
}

TEST(defaults_zero_extents_run) {
    /* empty batches, no queries, no keys, empty pools: plans that run without reading or
     * writing anything but the rows they have */
    const int32_t zero[2] = {0, 0};
    for (int variant = 0; variant < 6; variant++) {
        fai_problem pb;
        fai_problem_init(&pb);
        pb.batch = 2, pb.heads_q = 2, pb.heads_kv = 1, pb.seq_q = 3, pb.seq_kv = 4;
        pb.head_dim = 8;
        if (variant == 0) pb.batch = 0;
        if (variant == 1) pb.seq_q = 0;
        if (variant == 2) pb.seq_kv = 0;
        if (variant >= 3) { /* paged, nothing in the pool */
            pb.page_size = variant == 3 ? 1 : 16;
            pb.num_pages = variant == 5 ? 0 : 2;
            pb.pages_per_seq = variant == 5 ? 0 : 1;
            pb.seqlens_kv = zero;
        }
        float o[2 * 3 * 2 * 8], lse[2 * 2 * 3];
        for (int i = 0; i < 2 * 3 * 2 * 8; i++)
            o[i] = NAN;
        for (int i = 0; i < 2 * 2 * 3; i++)
            lse[i] = NAN;
        fai_tensors t;
        memset(&t, 0, sizeof t);
        t.o = fai_tensor_bshd(o, FAI_DTYPE_F32, pb.seq_q, 2, 8);
        t.lse.data = lse;
        t.lse.dtype = FAI_DTYPE_F32;
        t.lse.stride_batch = 2 * pb.seq_q, t.lse.stride_head = pb.seq_q, t.lse.stride_seq = 1;
        float q[2 * 3 * 2 * 8] = {0};
        t.q = fai_tensor_bshd(q, FAI_DTYPE_F32, pb.seq_q, 2, 8);
        /* no keys anywhere: K, V and the block table stay NULL */
        const fai_status st = plan_and_run(&pb, &t);
        CHECK(st == FAI_OK);
        if (st != FAI_OK) fprintf(stderr, "  variant %d: %s\n", variant, fai_last_error());
        const int64_t rows = pb.batch * pb.seq_q * 2;
        for (int64_t i = 0; i < rows * 8; i++)
            CHECK(o[i] == 0.0f);
        for (int64_t i = 0; i < rows; i++)
            CHECK(lse[i] == -INFINITY);
        for (int64_t i = rows * 8; i < 2 * 3 * 2 * 8; i++) /* past the rows: not written */
            CHECK(isnan(o[i]));
        for (int64_t i = rows; i < 2 * 2 * 3; i++)
            CHECK(isnan(lse[i]));
    }
}

/* The worst error of an f32 case's O over the tolerance of fai_case_row_tolerance, and its worst
 * error relative to max(1, |ref|) (the measure of a fixed relative bound) in *plain. */
static double f32_ratio(const fai_case *c, const fai_oracle_out *ref, double *plain) {
    const fai_tensor *o = &c->tensors.o;
    const int64_t Hq = ref->heads_q, Dv = ref->head_dim_v;
    double worst = 0.0;
    *plain = 0.0;
    for (int64_t g = 0; g < ref->groups; g++)
        for (int64_t r = 0; r < ref->rows; r++)
            for (int64_t h = 0; h < Hq; h++) {
                const size_t ri = (size_t)((g * ref->rows + r) * Hq + h);
                if (ref->row_state[ri] != FAI_ORACLE_ROW_VALID) continue;
                const double tol = fai_case_row_tolerance(ref, ri, 0.0);
                for (int64_t d = 0; d < Dv; d++) {
                    const double x = fai_oracle_load(o->data, o->dtype,
                                                     g * o->stride_batch + r * o->stride_seq +
                                                         h * o->stride_head + d);
                    const double want = ref->o[ri * (size_t)Dv + (size_t)d];
                    const double e =
                        fabs(x - want) / fmax(1.0, ref->o_mag[ri * (size_t)Dv + (size_t)d]);
                    if (!(e / tol <= worst)) worst = e / tol;
                    const double p = fabs(x - want) / fmax(1.0, fabs(want));
                    if (!(p <= *plain)) *plain = p;
                }
            }
    return worst;
}

TEST(defaults_f32_tolerance_catches_ulps) {
    /* fai well within the f32 tolerance, and the same problem run with its scale off by 2^-17
     * (16 ulps) outside it, though within the fixed 1e-5 x max(1, |ref|) the tolerance was
     * before it grew with the logits: the bound is not loose enough to hide a small real error */
    fai_case_spec s;
    fai_case_spec_any(&s);
    s.batch = 1, s.heads_q = 4, s.heads_kv = 2, s.seq_q = 16, s.seq_kv = 64;
    s.head_dim = s.head_dim_v = 64;
    s.q_dtype = s.k_dtype = s.v_dtype = s.o_dtype = FAI_DTYPE_F32;
    s.causal = FAI_CAUSAL_NONE, s.window_left = s.window_right = -1;
    s.mask_kind = FAI_MASK_NONE, s.q_lens = s.kv_lens = FAI_CASE_LEN_FULL;
    s.scale = 0.125, s.amplitude = 2.0, s.positions = 0;
    fai_case c;
    REQUIRE(fai_case_build(&c, &s, 4242) == 0);
    fai_oracle_out ref;
    REQUIRE(fai_oracle_run(&c.problem, &c.tensors, &ref, NULL, 0) == FAI_OK);
    REQUIRE(plan_and_run(&c.problem, &c.tensors) == FAI_OK);
    double plain_exact, plain_skewed;
    const double exact = f32_ratio(&c, &ref, &plain_exact);
    fai_problem off = c.problem;
    off.scale = 0.125f * (1.0f + 0x1.0p-17f);
    REQUIRE(plan_and_run(&off, &c.tensors) == FAI_OK);
    const double skewed = f32_ratio(&c, &ref, &plain_skewed);
    if (!(exact < 0.5 && skewed > 1.0 && plain_skewed < 1e-5))
        fprintf(stderr,
                "  error / tolerance: %.3g as given, %.3g with the scale off (plain errors %.3g, "
                "%.3g)\n",
                exact, skewed, plain_exact, plain_skewed);
    CHECK(exact < 0.5);
    CHECK(skewed > 1.0);
    CHECK(plain_skewed < 1e-5);
    fai_oracle_out_free(&ref);
    fai_case_free(&c);
}
