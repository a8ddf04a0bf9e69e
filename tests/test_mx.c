/* The matrix-engine micro-kernels, stage by stage: the emulated table (every machine) and, where
 * the CPU has AMX, the real one, on the same inputs. Packing must give the same bits on both;
 * QK and PV must agree with a float64 computation on the same bf16 parts to f32 accumulation
 * (the tile unit sums more exactly than the documented order the emulation follows, so the two
 * agree to that bound, not bit for bit); the softmax's P must be within 2^-16 (its hi + lo
 * split) of exp in double. */
#include "fai_cases.h"
#include "test_cases.h"
#include "fai_oracle.h"
#include "test_util.h"
#include "ukr/fai_ukr.h"
#include "util/fai_half.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static float uniform(uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*state >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* The larger of a running worst and a new error: a call, not an fmax reduction, which gcc 12's
 * AArch64 vectoriser fails on. */
__attribute__((noinline)) static double larger(double worst, double err) {
    return err > worst ? err : worst;
}

static double widen(uint16_t h) { return (double)fai__bf16_to_f32(h); }

/* The sum of a packed value's parts, in double (parts `stride` elements apart). */
static double parts_sum(const uint16_t *at, int parts, int64_t stride) {
    double x = 0.0;
    for (int part = 0; part < parts; part++)
        x += widen(at[part * stride]);
    return x;
}

typedef struct mx_shape {
    int64_t m, n, d, dv;
    fai_dtype q_dtype, kv_dtype;
} mx_shape;

static int dtype_parts(fai_dtype dtype) {
    return dtype == FAI_DTYPE_BF16 ? 1 : dtype == FAI_DTYPE_F16 ? 2 : 3;
}

static int64_t pad32(int64_t x) { return (x + 31) / 32 * 32; }

/* Rows of `count` elements of dtype with values in [-amp, amp]. */
static void *random_rows(int64_t rows, int64_t count, fai_dtype dtype, float amp, uint64_t *st) {
    const size_t size = dtype == FAI_DTYPE_F32 ? 4 : 2;
    unsigned char *data = malloc((size_t)(rows * count) * size + 64);
    for (int64_t i = 0; i < rows * count; i++)
        fai__store_element(data, i, dtype, uniform(st) * amp);
    return data;
}

/* The stages of one block on table `cntx`, into the buffers of `out` (all sized by the shape). */
typedef struct mx_run {
    uint16_t *q, *k, *v, *p;
    float *s, *o;
    float row_max[32], row_sums[32 * FAI_MX_SUM_LANES], row_alpha[32];
} mx_run;

/* The stages on the keys [j_begin, j_end) (multiples of 32), with the keys outside [seen_begin,
 * seen_end) masked (-inf, as the driver's masks leave them); S and P start as NaN, so that what
 * the stages leave out must also be what they never read. */
static void run_block_keys(const fai_cntx *cntx, const mx_shape *sh, const void *q_rows,
                           const void *k_rows, const void *v_rows, int64_t j_begin, int64_t j_end,
                           int64_t seen_begin, int64_t seen_end, mx_run *out) {
    const int64_t m_pad = 32, n_pad = pad32(sh->n), d_pad = pad32(sh->d), dv_pad = pad32(sh->dv);
    const int qp = dtype_parts(sh->q_dtype), kp = dtype_parts(sh->kv_dtype);
    const size_t qs = sh->q_dtype == FAI_DTYPE_F32 ? 4 : 2,
                 ks = sh->kv_dtype == FAI_DTYPE_F32 ? 4 : 2;
    const void *rows[512];
    out->q = calloc((size_t)(m_pad * d_pad * qp), 2);
    out->k = calloc((size_t)(n_pad * d_pad * kp), 2);
    out->v = calloc((size_t)(n_pad * dv_pad * kp), 2);
    out->p = calloc((size_t)(2 * m_pad * n_pad), 2);
    out->s = calloc((size_t)(m_pad * n_pad), 4);
    out->o = calloc((size_t)(m_pad * dv_pad), 4);
    for (int64_t i = 0; i < sh->m; i++)
        rows[i] = (const char *)q_rows + (size_t)(i * sh->d) * qs;
    cntx->mx_pack_q(out->q, qp, rows, sh->m, m_pad, sh->d, d_pad, sh->q_dtype);
    for (int64_t j = 0; j < sh->n; j++)
        rows[j] = (const char *)k_rows + (size_t)(j * sh->d) * ks;
    cntx->mx_pack_k(out->k, kp, rows, sh->n, n_pad, sh->d, d_pad, sh->kv_dtype, 1);
    for (int64_t j = 0; j < sh->n; j++)
        rows[j] = (const char *)v_rows + (size_t)(j * sh->dv) * ks;
    cntx->mx_pack_v(out->v, kp, rows, sh->n, n_pad, sh->dv, dv_pad, sh->kv_dtype);
    for (int64_t i = 0; i < m_pad * n_pad; i++)
        out->s[i] = NAN;
    for (int64_t i = 0; i < 2 * m_pad * n_pad; i++)
        out->p[i] = 0x7fc0; /* bf16 NaN */
    cntx->mx_enter();
    cntx->mx_qk(out->s, n_pad, out->q, qp, out->k, kp, m_pad, n_pad, j_begin, j_end, d_pad);
    for (int64_t i = 0; i < m_pad; i++)
        for (int64_t j = j_begin; j < j_end && j < sh->n; j++)
            if (j < seen_begin || j >= seen_end) out->s[i * n_pad + j] = -INFINITY;
    for (int i = 0; i < 32; i++)
        out->row_max[i] = -INFINITY;
    memset(out->row_sums, 0, sizeof out->row_sums);
    cntx->mx_softmax(out->s, n_pad, sh->m, m_pad, sh->n < j_end ? sh->n : j_end, n_pad, j_begin,
                     j_end, 0.125f, out->row_max, out->row_sums, out->row_alpha, out->p, 2, NULL);
    cntx->mx_pv(out->o, dv_pad, out->p, 2, out->v, kp, m_pad, n_pad, j_begin, j_end, dv_pad);
    cntx->mx_leave();
}

static void run_block(const fai_cntx *cntx, const mx_shape *sh, const void *q_rows,
                      const void *k_rows, const void *v_rows, mx_run *out) {
    run_block_keys(cntx, sh, q_rows, k_rows, v_rows, 0, pad32(sh->n), 0, sh->n, out);
}

static void free_run(mx_run *r) {
    free(r->q);
    free(r->k);
    free(r->v);
    free(r->p);
    free(r->s);
    free(r->o);
}

TEST(mx_stages_match_float64_and_each_other) {
    static const mx_shape shapes[] = {
        {32, 128, 128, 128, FAI_DTYPE_BF16, FAI_DTYPE_BF16},
        {17, 45, 80, 24, FAI_DTYPE_BF16, FAI_DTYPE_BF16},
        {32, 64, 64, 64, FAI_DTYPE_F32, FAI_DTYPE_F16},
        {9, 33, 40, 72, FAI_DTYPE_F16, FAI_DTYPE_F16},
        {32, 96, 128, 128, FAI_DTYPE_F32, FAI_DTYPE_BF16},
    };
    /* the emulated tiles with portable vector code, the tile unit itself, and the emulated
     * tiles with the AMX table's own AVX-512 vector code (each where this CPU runs it) */
    const char *names[] = {"amx-emu", "amx", "amx-emu-avx512"};
    enum { TABLES = 3 };
    uint64_t st = 11;
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
        const mx_shape *sh = &shapes[c];
        const int64_t n_pad = pad32(sh->n), d_pad = pad32(sh->d), dv_pad = pad32(sh->dv);
        const int qp = dtype_parts(sh->q_dtype), kp = dtype_parts(sh->kv_dtype);
        void *q = random_rows(sh->m, sh->d, sh->q_dtype, 2.0f, &st);
        void *k = random_rows(sh->n, sh->d, sh->kv_dtype, 2.0f, &st);
        void *v = random_rows(sh->n, sh->dv, sh->kv_dtype, 3.0f, &st);
        mx_run runs[TABLES];
        int ran[TABLES] = {0, 0, 0};
        for (int t = 0; t < TABLES; t++) {
            const fai_cntx *cntx = fai__cntx_by_name(names[t]);
            if (!cntx) continue; /* no AMX (or AVX-512) here */
            REQUIRE(cntx->mx_qk != NULL);
            run_block(cntx, sh, q, k, v, &runs[t]);
            ran[t] = 1;
            mx_run *r = &runs[t];
            /* the packed parts hold the inputs exactly (f32 Q to 2^-24) */
            double pack_err = 0.0;
            for (int64_t i = 0; i < sh->m; i++)
                for (int64_t x = 0; x < sh->d; x++) {
                    const double want = fai__load_element(q, i * sh->d + x, sh->q_dtype);
                    const double got = parts_sum(r->q + i * d_pad + x, qp, 32 * d_pad);
                    pack_err = larger(pack_err, fabs(got - want) / (fabs(want) + 1e-30));
                }
            for (int64_t j = 0; j < sh->n; j++)
                for (int64_t x = 0; x < sh->d; x++) {
                    const double want = fai__load_element(k, j * sh->d + x, sh->kv_dtype);
                    const int64_t at = ((x / 2) * n_pad + j) * 2 + x % 2;
                    pack_err =
                        larger(pack_err, fabs(parts_sum(r->k + at, kp, n_pad * d_pad) - want));
                }
            for (int64_t j = 0; j < sh->n; j++)
                for (int64_t x = 0; x < sh->dv; x++) {
                    const double want = fai__load_element(v, j * sh->dv + x, sh->kv_dtype);
                    const int64_t at = ((j / 2) * dv_pad + x) * 2 + j % 2;
                    pack_err =
                        larger(pack_err, fabs(parts_sum(r->v + at, kp, n_pad * dv_pad) - want));
                }
            CHECK(pack_err <= 1e-7);
            /* S against float64 on the inputs, to f32 accumulation over d products */
            double s_err = 0.0;
            for (int64_t i = 0; i < sh->m; i++)
                for (int64_t j = 0; j < sh->n; j++) {
                    double want = 0.0, mag = 0.0;
                    for (int64_t x = 0; x < sh->d; x++) {
                        const double a = fai__load_element(q, i * sh->d + x, sh->q_dtype);
                        const double b = fai__load_element(k, j * sh->d + x, sh->kv_dtype);
                        want += a * b;
                        mag += fabs(a * b);
                    }
                    s_err = larger(s_err, fabs(r->s[i * n_pad + j] - want) / (mag + 1e-30));
                }
            printf("  %s m=%lld n=%lld d=%lld dv=%lld parts %d/%d: S error %.2g of sum |q k|\n",
                   names[t], (long long)sh->m, (long long)sh->n, (long long)sh->d,
                   (long long)sh->dv, qp, kp, s_err);
            CHECK(s_err <= 4.0 * (double)sh->d * 6e-8);
            /* P = exp(0.125 s - m) as hi + lo, to 2^-16 relative (plus the polynomial's 3e-6) */
            double p_err = 0.0;
            for (int64_t i = 0; i < sh->m; i++)
                for (int64_t j = 0; j < sh->n; j++) {
                    const double want = exp(0.125 * (double)r->s[i * n_pad + j] - r->row_max[i]);
                    const double got =
                        widen(r->p[i * n_pad + j]) + widen(r->p[32 * n_pad + i * n_pad + j]);
                    p_err = larger(p_err, fabs(got - want) / want);
                }
            CHECK(p_err <= 2e-5);
            /* O = P V against float64 on the packed P and V, to f32 accumulation over n */
            double o_err = 0.0;
            for (int64_t i = 0; i < sh->m; i++)
                for (int64_t x = 0; x < sh->dv; x++) {
                    double want = 0.0, mag = 0.0;
                    for (int64_t j = 0; j < sh->n; j++) {
                        const double pv =
                            widen(r->p[i * n_pad + j]) + widen(r->p[32 * n_pad + i * n_pad + j]);
                        const double vv = fai__load_element(v, j * sh->dv + x, sh->kv_dtype);
                        want += pv * vv;
                        mag += fabs(pv * vv);
                    }
                    o_err = larger(o_err, fabs(r->o[i * dv_pad + x] - want) / (mag + 1e-30));
                }
            printf("  %s: P error %.2g, O error %.2g of sum |p v|\n", names[t], p_err, o_err);
            /* every pass of P's and V's parts is summed: f32 accumulation alone */
            CHECK(o_err <= 2.0 * (double)sh->n * 6e-8);
        }
        if (ran[0] && ran[1]) { /* the tile unit against its emulation */
            const int64_t m_pad = 32;
            CHECK(!memcmp(runs[0].q, runs[1].q, (size_t)(m_pad * d_pad * qp) * 2));
            CHECK(!memcmp(runs[0].k, runs[1].k, (size_t)(n_pad * d_pad * kp) * 2));
            CHECK(!memcmp(runs[0].v, runs[1].v, (size_t)(n_pad * dv_pad * kp) * 2));
            double s_diff = 0.0, o_diff = 0.0;
            for (int64_t i = 0; i < sh->m; i++)
                for (int64_t j = 0; j < sh->n; j++)
                    s_diff =
                        larger(s_diff, fabs(runs[0].s[i * n_pad + j] - runs[1].s[i * n_pad + j]));
            for (int64_t i = 0; i < sh->m; i++)
                for (int64_t x = 0; x < sh->dv; x++)
                    o_diff =
                        larger(o_diff, fabs(runs[0].o[i * dv_pad + x] - runs[1].o[i * dv_pad + x]));
            printf("  amx against amx-emu: S differs by %.2g, O by %.2g\n", s_diff, o_diff);
            CHECK(s_diff <= 1e-4 * (double)sh->d);
            CHECK(o_diff <= 1e-4 * (double)sh->n);
        }
        if (ran[0] && ran[2]) { /* the two vector vocabularies on the same tiles: the same bits */
            const mx_run *a = &runs[0], *b = &runs[2];
            const int64_t m_pad = 32;
            const int same = !memcmp(a->q, b->q, (size_t)(m_pad * d_pad * qp) * 2) &&
                             !memcmp(a->k, b->k, (size_t)(n_pad * d_pad * kp) * 2) &&
                             !memcmp(a->v, b->v, (size_t)(n_pad * dv_pad * kp) * 2) &&
                             !memcmp(a->s, b->s, (size_t)(m_pad * n_pad) * sizeof(float)) &&
                             !memcmp(a->p, b->p, (size_t)(2 * m_pad * n_pad) * 2) &&
                             !memcmp(a->o, b->o, (size_t)(m_pad * dv_pad) * sizeof(float)) &&
                             !memcmp(a->row_max, b->row_max, sizeof a->row_max) &&
                             !memcmp(a->row_sums, b->row_sums, sizeof a->row_sums) &&
                             !memcmp(a->row_alpha, b->row_alpha, sizeof a->row_alpha);
            if (!same) printf("  amx-emu-avx512 against amx-emu: not the same bits\n");
            CHECK(same);
        }
        for (int t = 0; t < TABLES; t++)
            if (ran[t]) free_run(&runs[t]);
        free(q);
        free(k);
        free(v);
    }
}

/* The driver leaves out a tile's first and last keys where the band masks them for every row of
 * a block (mx_block_keys): the stages on fewer keys must give the bits the stages on all keys
 * give with those keys masked, and never read what they leave out. */
TEST(mx_fewer_keys_change_nothing) {
    static const mx_shape shapes[] = {
        {32, 128, 128, 128, FAI_DTYPE_BF16, FAI_DTYPE_BF16},
        {20, 100, 64, 64, FAI_DTYPE_F32, FAI_DTYPE_F16},
    };
    static const int64_t seen[][2] = {{0, 1},   {0, 40},   {0, 64},  {0, 95},
                                      {33, 95}, {64, 100}, {10, 20}, {96, 100}};
    const char *names[] = {"amx-emu", "amx", "amx-emu-avx512"};
    uint64_t st = 23;
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
        const mx_shape *sh = &shapes[c];
        const int64_t dv_pad = pad32(sh->dv);
        void *q = random_rows(sh->m, sh->d, sh->q_dtype, 2.0f, &st);
        void *k = random_rows(sh->n, sh->d, sh->kv_dtype, 2.0f, &st);
        void *v = random_rows(sh->n, sh->dv, sh->kv_dtype, 3.0f, &st);
        for (int t = 0; t < 3; t++) {
            const fai_cntx *cntx = fai__cntx_by_name(names[t]);
            if (!cntx) continue;
            for (size_t w = 0; w < sizeof seen / sizeof *seen; w++) {
                const int64_t begin = seen[w][0], end = seen[w][1] < sh->n ? seen[w][1] : sh->n;
                mx_run all, fewer;
                run_block_keys(cntx, sh, q, k, v, 0, pad32(sh->n), begin, end, &all);
                run_block_keys(cntx, sh, q, k, v, begin / 32 * 32, pad32(end), begin, end, &fewer);
                CHECK(memcmp(all.o, fewer.o, (size_t)(32 * dv_pad) * sizeof(float)) == 0);
                CHECK(memcmp(all.row_max, fewer.row_max, sizeof all.row_max) == 0);
                CHECK(memcmp(all.row_sums, fewer.row_sums, sizeof all.row_sums) == 0);
                CHECK(memcmp(all.row_alpha, fewer.row_alpha, sizeof all.row_alpha) == 0);
                int finite = 1;
                for (int64_t i = 0; i < sh->m * dv_pad; i++)
                    finite &= isfinite(fewer.o[i]);
                CHECK(finite);
                free_run(&all);
                free_run(&fewer);
            }
        }
        free(q);
        free(k);
        free(v);
    }
}

/* round_p_bf16 (P rounded to bf16 before PV on a matrix engine or on bf16 dot products) stays
 * within what fai.h allows: the documented bound plus 2^-8 sum_j p_j |v_jd|, also with large V
 * of mixed signs (large terms cancelling), on whichever table runs; where PV runs in f32 the
 * result is the exact one. Without round_p_bf16 (P as hi + lo), the plain bound holds on the
 * same data. */
TEST(mx_round_p_bf16_within_its_bound) {
    for (int run = 0; run < 4; run++) {
        const int adversarial = run % 2, round_p = run / 2;
        fai_case_spec s;
        fai_case_spec_any(&s);
        s.positions = 0;
        s.batch = 1;
        s.heads_q = 8;
        s.heads_kv = 2;
        s.seq_q = 96;
        s.seq_kv = 200;
        s.head_dim = s.head_dim_v = 64;
        s.q_dtype = s.k_dtype = s.v_dtype = FAI_DTYPE_BF16;
        s.o_dtype = FAI_DTYPE_F32;
        s.causal = FAI_CAUSAL_BOTTOM_RIGHT;
        s.window_left = s.window_right = -1;
        s.mask_kind = FAI_MASK_NONE;
        s.mask_shape = FAI_CASE_MASK_SQ_SKV;
        s.mask_density = 0;
        s.q_lens = s.kv_lens = FAI_CASE_LEN_FULL;
        s.layout = FAI_CASE_LAYOUT_BSHD;
        s.lse = 1;
        s.threads = 1;
        s.workers = 1;
        s.split = FAI_SPLIT_AUTO;
        s.tile_q = s.tile_kv = 0;
        s.scale = 0.125;
        s.amplitude = 2.0;
        fai_case c;
        REQUIRE(fai_case_build(&c, &s, 9100 + (uint64_t)adversarial) == 0);
        if (adversarial) /* V of +-1000 with the sign alternating by key: O is small, A large */
            for (int64_t j = 0; j < s.seq_kv; j++)
                for (int64_t h = 0; h < s.heads_kv; h++)
                    for (int64_t d = 0; d < s.head_dim_v; d++)
                        fai_case_set(&c.tensors.v, 0, j, h, d, j % 2 ? 1000.0 : -1000.0);
        c.problem.round_p_bf16 = round_p;
        fai_plan *plan;
        REQUIRE(fai_plan_create(&c.problem, &plan) == FAI_OK);
        fai_plan_info info;
        fai_plan_get_info(plan, &info);
        const size_t ws_size = fai_plan_workspace_size(plan);
        void *ws = malloc(ws_size + 1);
        CHECK(fai_run(plan, &c.tensors, ws, ws_size) == FAI_OK);
        free(ws);
        fai_plan_free(plan);
        fai_oracle_out ref;
        REQUIRE(fai_oracle_run(&c.problem, &c.tensors, &ref, NULL, 0) == FAI_OK);
        const double t = fai_case_tolerance(s.q_dtype, s.k_dtype, s.v_dtype, s.o_dtype);
        const int rounds = info.p_parts == 1;
        if (!strncmp(info.isa, "amx", 3)) CHECK(info.p_parts == (round_p ? 1 : 2));
        double worst = 0.0;
        for (int64_t i = 0; i < s.seq_q; i++)
            for (int64_t h = 0; h < s.heads_q; h++) {
                const size_t ri = (size_t)(i * s.heads_q + h);
                for (int64_t d = 0; d < s.head_dim_v; d++) {
                    const double got = fai_oracle_load(c.tensors.o.data, c.tensors.o.dtype,
                                                       i * c.tensors.o.stride_seq +
                                                           h * c.tensors.o.stride_head + d);
                    const double want = ref.o[ri * (size_t)s.head_dim_v + (size_t)d];
                    const double limit =
                        fai_case_o_limit(&ref, ri, d, t) +
                        (rounds ? 0x1p-8 * ref.o_mag[ri * (size_t)s.head_dim_v + (size_t)d] : 0.0);
                    worst = larger(worst, fabs(got - want) / limit);
                }
            }
        printf("  %s, %s V, P in %d bf16 parts: worst error / allowed %.3g\n", info.isa,
               adversarial ? "cancelling" : "uniform", info.p_parts, worst);
        CHECK(worst <= 1.0);
        fai_oracle_out_free(&ref);
        fai_case_free(&c);
    }
}

/* The matrix engine's tile: 32 rows x 64 keys where one row block's operands for such a tile fit
 * L1d (S 8 KiB, P 8 KiB, K 8 KiB, V 8 KiB, Q 4 KiB and O 8 KiB at head dim 64, all bf16: 45056
 * bytes), else 64 rows x 128 keys (head dim 128; or Q f32, whose three parts take 12 KiB). */
TEST(mx_tile_keeps_a_row_block_in_l1d) {
    const struct {
        int64_t heads_q, head_dim;
        fai_dtype q_dtype;
        int64_t block_bytes; /* one row block's operands at 64 keys */
    } cases[] = {{16, 64, FAI_DTYPE_BF16, 45056},
                 {16, 64, FAI_DTYPE_F32, 53248},
                 {32, 128, FAI_DTYPE_BF16, 73728}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fai_problem pb;
        fai_problem_init(&pb);
        pb.batch = 1;
        pb.heads_q = cases[i].heads_q;
        pb.heads_kv = 8;
        pb.seq_q = pb.seq_kv = 1024;
        pb.head_dim = pb.head_dim_v = cases[i].head_dim;
        pb.q_dtype = cases[i].q_dtype;
        pb.k_dtype = pb.v_dtype = pb.o_dtype = FAI_DTYPE_BF16;
        pb.workers = pb.threads = 1;
        fai_plan *plan;
        REQUIRE(fai_plan_create(&pb, &plan) == FAI_OK);
        fai_plan_info info;
        fai_plan_get_info(plan, &info);
        if (!strncmp(info.isa, "amx", 3)) {
            const int small = cases[i].block_bytes <= info.l1d_capacity;
            CHECK(info.tile_rows == (small ? 32 : 64));
            CHECK(info.tile_kv == (small ? 64 : 128));
            if (small) CHECK(info.l1d_bytes == cases[i].block_bytes);
        }
        fai_plan_free(plan);
    }
}

/* The elements (b, i, h, x < count) of an output tensor of a case with full lengths, in double. */
static double *output_elements(const fai_tensor *t, const fai_case_spec *s, int64_t count) {
    double *out = malloc((size_t)(s->batch * s->seq_q * s->heads_q * count) * sizeof(double));
    if (!out) return NULL;
    const int64_t dim_stride = t->stride_dim ? t->stride_dim : 1; /* (0 is read as 1) */
    size_t at = 0;
    for (int64_t b = 0; b < s->batch; b++)
        for (int64_t i = 0; i < s->seq_q; i++)
            for (int64_t h = 0; h < s->heads_q; h++)
                for (int64_t x = 0; x < count; x++)
                    out[at++] = fai_oracle_load(t->data, t->dtype,
                                                b * t->stride_batch + i * t->stride_seq +
                                                    h * t->stride_head + x * dim_stride);
    return out;
}

/* The matrix engine's pipeline (fai_problem.pipeline_tiles): one kv tile in flight (each block's
 * QK just before its softmax) or two (the next tile's QK behind this one's PV) run the same
 * stages on the same operands, so O and LSE are the same bits, within the tolerances; the
 * planner takes one where a row block's operands fit L1d (all-bf16 at head dim 64) and two
 * elsewhere, and one tile needs one K/V buffer fewer in the workspace. The vector tables compute
 * a tile at a time whatever is asked (plan info 1). */
TEST(mx_pipeline_tiles_change_only_the_order) {
    const struct {
        int64_t head_dim;
        fai_dtype q_dtype, kv_dtype;
        int64_t causal, window_left, kv_lens;
        int auto_tiles; /* the planner's choice on the matrix engine (48 KiB L1d) */
    } cases[] = {
        {64, FAI_DTYPE_BF16, FAI_DTYPE_BF16, FAI_CAUSAL_BOTTOM_RIGHT, -1, FAI_CASE_LEN_FULL, 1},
        {64, FAI_DTYPE_BF16, FAI_DTYPE_BF16, FAI_CAUSAL_BOTTOM_RIGHT, 70, FAI_CASE_LEN_PAGED, 1},
        {128, FAI_DTYPE_F32, FAI_DTYPE_F16, FAI_CAUSAL_NONE, -1, FAI_CASE_LEN_FULL, 2},
        {128, FAI_DTYPE_BF16, FAI_DTYPE_BF16, FAI_CAUSAL_TOP_LEFT, 100, FAI_CASE_LEN_PAGED, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fai_case_spec s;
        fai_case_spec_plain(&s);
        s.batch = 2;
        s.heads_q = 8;
        s.heads_kv = 2;
        s.seq_q = 80;
        s.seq_kv = 520;
        s.head_dim = s.head_dim_v = cases[i].head_dim;
        s.q_dtype = cases[i].q_dtype;
        s.k_dtype = s.v_dtype = cases[i].kv_dtype;
        s.causal = cases[i].causal;
        s.window_left = cases[i].window_left;
        s.kv_lens = cases[i].kv_lens;
        s.page_size = 48;
        s.workers = 2;
        s.amplitude = 2.0;
        fai_case c;
        REQUIRE(fai_case_build(&c, &s, 9300 + (uint64_t)i) == 0);
        double *o[3] = {NULL, NULL, NULL}, *lse[3] = {NULL, NULL, NULL};
        size_t workspace[3] = {0, 0, 0};
        int in_use[3] = {0, 0, 0};
        for (int asked = 0; asked <= 2; asked++) {
            c.problem.pipeline_tiles = asked;
            fai_plan *plan;
            REQUIRE(fai_plan_create(&c.problem, &plan) == FAI_OK);
            fai_plan_info info;
            fai_plan_get_info(plan, &info);
            fai_plan_free(plan);
            const int mx = !strncmp(info.isa, "amx", 3);
            in_use[asked] = info.pipeline_tiles;
            workspace[asked] = info.workspace_bytes;
            if (!mx) CHECK(info.pipeline_tiles == 1);
            /* (the cases' choices are those of a 48 KiB L1d; elsewhere the rule itself) */
            const int by_rule = info.l1d_bytes <= info.l1d_capacity ? 1 : 2;
            const int chosen = info.l1d_capacity == 48 * 1024 ? cases[i].auto_tiles : by_rule;
            if (mx) CHECK(info.pipeline_tiles == (asked ? asked : chosen));
            fai_case_reset(&c);
            CHECK(case_check_says_why(&c));
            o[asked] = output_elements(&c.tensors.o, &s, s.head_dim_v);
            lse[asked] = output_elements(&c.tensors.lse, &s, 1);
            REQUIRE(o[asked] && lse[asked]);
        }
        const size_t o_count = (size_t)(s.batch * s.seq_q * s.heads_q * s.head_dim_v);
        const size_t lse_count = (size_t)(s.batch * s.seq_q * s.heads_q);
        for (int asked = 0; asked <= 2; asked++) {
            CHECK(!memcmp(o[asked], o[1], o_count * sizeof(double)));
            CHECK(!memcmp(lse[asked], lse[1], lse_count * sizeof(double)));
        }
        for (int asked = 0; asked <= 2; asked++) {
            free(o[asked]);
            free(lse[asked]);
        }
        if (in_use[2] == 2) CHECK(workspace[1] < workspace[2]);
        printf("  D %lld, %s Q, %s K/V: %d kv tile(s) in flight by default, workspace %zu with "
               "one, %zu with two\n",
               (long long)cases[i].head_dim, fai_dtype_name(cases[i].q_dtype),
               fai_dtype_name(cases[i].kv_dtype), in_use[0], workspace[1], workspace[2]);
        fai_case_free(&c);
    }
}
