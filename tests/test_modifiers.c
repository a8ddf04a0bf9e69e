/* Score modifiers: the soft-capping's tanh against double on every table, the modifier kernels
 * against a double computation, the standard ALiBi slopes, sinks on fully masked rows and across
 * split-KV, bit masks against byte masks (skipped tiles included), and ALiBi under chunked
 * prefill. The random sweep (test_sweep.c) checks every combination against the oracle. */
#include "fai.h"
#include "fai_cases.h"
#include "test_cases.h"
#include "fai_internal.h"
#include "fai_oracle.h"
#include "test_util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const table_names[] = {"ref", "avx2",    "avx512",        "neon",
                                          "amx", "amx-emu", "amx-emu-avx512"};

/* The tanh of every table, over [-12, 12] in fine steps and at the edges of its two ranges,
 * against tanh in double: relative error enforced below 4e-7; +-Inf give +-1, NaN stays NaN. */
TEST(ukr_tanh_accuracy) {
    enum { N = 4096 };
    static float in[N], out[N];
    for (size_t t = 0; t < sizeof table_names / sizeof *table_names; t++) {
        const fai_cntx *cntx = fai__cntx_by_name(table_names[t]);
        if (!cntx) continue;
        double worst = 0.0;
        for (int round = 0; round < 64; round++) {
            for (int i = 0; i < N; i++)
                in[i] = -12.0f + 24.0f * (float)(round * N + i) / (64.0f * N);
            if (round == 0) /* around the switch between the ranges, and tiny values */
                for (int i = 0; i < 256; i++) {
                    in[i] = nextafterf(0.625f, i % 2 ? 0.0f : 1.0f) * (i % 4 < 2 ? 1.0f : -1.0f);
                    in[256 + i] = ldexpf(1.0f + (float)i / 256.0f, -(i % 40)) * (i % 2 ? -1 : 1);
                }
            cntx->tanh_array(out, in, N);
            for (int i = 0; i < N; i++) {
                const double ref = tanh((double)in[i]);
                const double err = ref == 0.0 ? fabs(out[i]) : fabs(out[i] - ref) / fabs(ref);
                if (err > worst || isnan(err)) worst = isnan(err) ? INFINITY : err;
            }
        }
        printf("  %s: tanh max relative error %.3g\n", cntx->name, worst);
        CHECK(worst < 4e-7);
        for (int i = 0; i < N; i++)
            in[i] = i % 3 == 0 ? INFINITY : i % 3 == 1 ? -INFINITY : NAN;
        cntx->tanh_array(out, in, N);
        int special_ok = 1;
        for (int i = 0; i < N; i++) {
            if (i % 3 == 0) special_ok &= out[i] == 1.0f;
            if (i % 3 == 1) special_ok &= out[i] == -1.0f;
            if (i % 3 == 2) special_ok &= isnan(out[i]) != 0;
        }
        CHECK(special_ok);
    }
}

/* mods_t and mods_rows of every table on odd shapes, against the modifiers in double: each value
 * within a few f32 roundings of its magnitude (tanh's bound included), keys past n untouched. */
TEST(ukr_mods_match_double) {
    enum { M = 37, N = 45, LD = 48 };
    static float s[LD * LD], orig[LD * LD];
    float slope[LD], offset[LD];
    fai_rng g = {99};
    for (int r = 0; r < LD; r++) {
        slope[r] = (float)(fai_rng_uniform(&g) - 0.2);
        offset[r] = (float)fai_rng_range(&g, -80, 80);
    }
    for (size_t t = 0; t < sizeof table_names / sizeof *table_names; t++) {
        const fai_cntx *cntx = fai__cntx_by_name(table_names[t]);
        if (!cntx) continue;
        for (int variant = 0; variant < 4; variant++) {
            fai_score_mods mods;
            mods.scale = variant == 3 ? 0.125f : 1.0f;
            mods.softcap = variant & 1 ? 5.0f : 0.0f;
            mods.slope = variant & 2 ? slope : NULL;
            mods.offset = variant & 2 ? offset : NULL;
            for (int layout = 0; layout < 2; layout++) {
                for (int i = 0; i < LD * LD; i++)
                    orig[i] = s[i] = (float)((fai_rng_uniform(&g) - 0.5) * 40.0);
                int bad = 0;
                if (layout == 0)
                    cntx->mods_t(s, LD, N, &mods); /* [N, LD]: rows are the columns */
                else
                    cntx->mods_rows(s, LD, M, N, &mods);
                for (int r = 0; r < (layout ? M : LD); r++)
                    for (int c = 0; c < LD; c++) {
                        const int at = layout ? r * LD + c : c * LD + r;
                        if (c >= N) {
                            bad += layout && s[at] != orig[at];
                            continue;
                        }
                        double x = (double)orig[at] * mods.scale, mag = fabs(x);
                        if (mods.softcap > 0.0f) x = 5.0 * tanh(x / 5.0);
                        double bias = 0.0;
                        if (mods.slope) bias = slope[r] * fabs((double)c + offset[r]);
                        x -= bias;
                        mag = fabs(x) + fabs(bias) + (mods.softcap > 0.0f ? 5.0 : mag);
                        bad += !(fabs(s[at] - x) <= 8e-7 * mag);
                    }
                if (bad)
                    fprintf(stderr, "  %s: mods variant %d layout %d: %d values off\n", cntx->name,
                            variant, layout, bad);
                CHECK(bad == 0);
            }
        }
    }
}

/* The standard slopes: a power of two of heads is the geometric series 2^(-8 (h + 1) / n); 12
 * heads are those of 8 followed by every other slope of 16. */
TEST(alibi_slopes_standard) {
    float slopes[12];
    REQUIRE(fai_alibi_slopes(8, slopes) == FAI_OK);
    for (int h = 0; h < 8; h++)
        CHECK(slopes[h] == ldexpf(1.0f, -(h + 1)));
    REQUIRE(fai_alibi_slopes(12, slopes) == FAI_OK);
    for (int h = 0; h < 8; h++)
        CHECK(slopes[h] == ldexpf(1.0f, -(h + 1)));
    for (int k = 0; k < 4; k++)
        CHECK(slopes[8 + k] == (float)exp2(-0.5 - k));
    REQUIRE(fai_alibi_slopes(1, slopes) == FAI_OK);
    CHECK(slopes[0] == ldexpf(1.0f, -8));
}

/* Runs a case's plan into its buffers; returns the status. */
static fai_status run_plain(fai_case *c) {
    fai_plan *plan = NULL;
    fai_status st = fai_plan_create(&c->problem, &plan);
    if (st != FAI_OK) return st;
    const size_t size = fai_plan_workspace_size(plan);
    void *ws = malloc(size + 1);
    st = ws ? fai_run(plan, &c->tensors, ws, size) : FAI_ERR_NO_MEMORY;
    free(ws);
    fai_plan_free(plan);
    return st;
}

static float lse_of(const fai_case *c, int64_t b, int64_t h, int64_t i) {
    const fai_tensor *l = &c->tensors.lse;
    return ((const float *)l->data)[b * l->stride_batch + h * l->stride_head + i * l->stride_seq];
}

/* A row that sees nothing gets O = 0 and LSE = its head's sink (and -inf for a head without a
 * sink), on the prefill and the decode path. */
TEST(sinks_fully_masked_rows) {
    for (int decode = 0; decode < 2; decode++) {
        fai_case_spec s;
        fai_case_spec_any(&s);
        s.batch = 2;
        s.heads_q = 4;
        s.heads_kv = 2;
        s.seq_q = decode ? 1 : 6;
        s.seq_kv = 40;
        s.q_lens = s.kv_lens = FAI_CASE_LEN_FULL;
        s.positions = 0;
        s.mask_kind = FAI_MASK_KEEP_BITS;
        s.mask_density = 100;
        s.sinks = 1;
        s.lse = 1;
        s.q_dtype = s.k_dtype = s.v_dtype = s.o_dtype = FAI_DTYPE_F32;
        fai_case c;
        REQUIRE(fai_case_build(&c, &s, 41 + (uint64_t)decode) == 0);
        c.sinks[1] = -INFINITY;
        c.sinks[2] = 3.5f;
        CHECK(case_check_says_why(&c));
        for (int64_t b = 0; b < 2; b++)
            for (int64_t h = 0; h < 4; h++)
                for (int64_t i = 0; i < s.seq_q; i++)
                    CHECK(lse_of(&c, b, h, i) == c.sinks[h]);
        fai_case_free(&c);
    }
}

/* Decode over a long context split across many workers: the parts are merged and the sink is
 * counted once (the check against the oracle fails if every part counted it). */
TEST(sinks_split_kv_counted_once) {
    int split_seen = 0;
    for (int k = 0; k < 6; k++) {
        fai_case_spec s;
        fai_case_spec_any(&s);
        s.batch = 1 + k % 2;
        s.heads_q = 8;
        s.heads_kv = 2;
        s.seq_q = k < 3 ? 1 : 20;
        s.seq_kv = 600;
        s.workers = 16;
        s.split = FAI_SPLIT_AUTO;
        s.tile_kv = 32;
        s.sinks = 1;
        s.softcap = k == 2 ? 4.0 : 0.0;
        s.alibi = k == 4;
        s.lse = 1;
        s.max_work = 1e7;
        fai_case c;
        REQUIRE(fai_case_build(&c, &s, 300 + (uint64_t)k) == 0);
        fai_plan *plan = NULL;
        REQUIRE(fai_plan_create(&c.problem, &plan) == FAI_OK);
        fai_plan_info info;
        REQUIRE(fai_plan_get_info(plan, &info) == FAI_OK);
        split_seen += info.split_kv;
        fai_plan_free(plan);
        CHECK(case_check_says_why(&c));
        fai_case_free(&c);
    }
    CHECK(split_seen > 0);
}

/* A byte KEEP mask and the same mask packed into bits give bit-identical results, on every path,
 * also where whole tiles of the bit mask are 0 (skipped without computing them). */
TEST(bits_match_bytes) {
    for (int k = 0; k < 8; k++) {
        fai_case_spec s;
        fai_case_spec_any(&s);
        s.batch = 2;
        s.heads_q = k % 2 ? 8 : 4;
        s.heads_kv = 2;
        s.seq_q = k < 4 ? 1 + k : 24;
        s.seq_kv = 150;
        s.q_lens = FAI_CASE_LEN_FULL;
        s.kv_lens = k % 3 == 0 ? FAI_CASE_LEN_PAGED : FAI_CASE_LEN_FULL;
        s.mask_kind = FAI_MASK_KEEP;
        s.mask_shape = k % 3 == 1 ? FAI_CASE_MASK_SQ_SKV : FAI_CASE_MASK_B_H_SQ_SKV;
        s.tile_kv = 16;
        s.positions = 0;
        s.lse = 1;
        s.k_dtype = s.v_dtype = FAI_DTYPE_BF16;
        s.max_work = 1e7;
        fai_case c;
        REQUIRE(fai_case_build(&c, &s, 900 + (uint64_t)k) == 0);
        fai_mask *m = &c.tensors.mask;
        unsigned char *bytes = (unsigned char *)m->data;
        const int64_t per_b = m->stride_batch ? c.problem.batch : 1;
        const int64_t per_h = m->stride_head ? c.problem.heads_q : 1;
        /* keys 16..63 masked for every row: whole tiles of zero bits */
        for (int64_t b = 0; b < per_b; b++)
            for (int64_t h = 0; h < per_h; h++)
                for (int64_t i = 0; i < c.mask_rows; i++)
                    for (int64_t j = 16; j < 64 && j < c.mask_cols; j++)
                        bytes[b * m->stride_batch + h * m->stride_head + i * m->stride_q + j] = 0;
        fai_case_reset(&c);
        REQUIRE(run_plain(&c) == FAI_OK);
        const size_t o_bytes = c.bytes[FAI_CASE_BUF_O], l_bytes = c.bytes[FAI_CASE_BUF_LSE];
        unsigned char *o_bytes_run = malloc(o_bytes), *l_bytes_run = malloc(l_bytes);
        REQUIRE(o_bytes_run && l_bytes_run);
        memcpy(o_bytes_run, c.buf[FAI_CASE_BUF_O], o_bytes);
        memcpy(l_bytes_run, c.buf[FAI_CASE_BUF_LSE], l_bytes);
        CHECK(case_check_says_why(&c));

        /* the same mask as bits, rows of ceil(cols / 8) bytes */
        const int64_t row_bytes = (c.mask_cols + 7) / 8;
        const int64_t rows = per_b * per_h * c.mask_rows;
        unsigned char *bits = calloc((size_t)(rows * row_bytes + 8), 1);
        REQUIRE(bits);
        for (int64_t b = 0; b < per_b; b++)
            for (int64_t h = 0; h < per_h; h++)
                for (int64_t i = 0; i < c.mask_rows; i++) {
                    const int64_t row = (b * per_h + h) * c.mask_rows + i;
                    const unsigned char *src =
                        bytes + b * m->stride_batch + h * m->stride_head + i * m->stride_q;
                    for (int64_t j = 0; j < c.mask_cols; j++)
                        if (src[j]) bits[row * row_bytes + j / 8] |= (unsigned char)(1u << j % 8);
                }
        const fai_mask saved = *m;
        m->data = bits;
        m->stride_q = m->stride_q ? row_bytes : 0;
        m->stride_head = saved.stride_head ? c.mask_rows * row_bytes : 0;
        m->stride_batch = saved.stride_batch ? per_h * c.mask_rows * row_bytes : 0;
        c.problem.mask_kind = FAI_MASK_KEEP_BITS;
        fai_case_reset(&c);
        REQUIRE(run_plain(&c) == FAI_OK);
        CHECK(memcmp(o_bytes_run, c.buf[FAI_CASE_BUF_O], o_bytes) == 0);
        CHECK(memcmp(l_bytes_run, c.buf[FAI_CASE_BUF_LSE], l_bytes) == 0);
        *m = saved;
        free(bits);
        free(o_bytes_run);
        free(l_bytes_run);
        fai_case_free(&c);
    }
}

/* Chunked prefill with ALiBi (and soft-capping): the last 12 queries run alone against all 40
 * keys give the rows of the whole prefill (bottom-right alignment places them at the same
 * positions, so the bias is the same). */
TEST(alibi_chunked_prefill) {
    enum { SQ = 40, CHUNK = 12, H = 4, D = 16 };
    static float q[SQ * H * D], k[SQ * H * D], v[SQ * H * D], o_full[SQ * H * D],
        o_chunk[CHUNK * H * D];
    fai_rng g = {7};
    for (int i = 0; i < SQ * H * D; i++) {
        q[i] = (float)(fai_rng_uniform(&g) - 0.5);
        k[i] = (float)(fai_rng_uniform(&g) - 0.5);
        v[i] = (float)(fai_rng_uniform(&g) - 0.5);
    }
    float slopes[H], sinks[H] = {0.5f, -1.0f, 2.0f, -INFINITY};
    REQUIRE(fai_alibi_slopes(H, slopes) == FAI_OK);
    for (int pass = 0; pass < 2; pass++) {
        fai_problem pb;
        fai_problem_init(&pb);
        pb.batch = 1;
        pb.heads_q = pb.heads_kv = H;
        pb.seq_q = pass ? CHUNK : SQ;
        pb.seq_kv = SQ;
        pb.head_dim = D;
        pb.q_dtype = pb.k_dtype = pb.v_dtype = FAI_DTYPE_F32;
        pb.causal = FAI_CAUSAL_BOTTOM_RIGHT;
        pb.alibi = 1;
        pb.sinks = 1;
        pb.softcap = 3.0f;
        pb.tile_kv = 8;
        fai_tensors t;
        memset(&t, 0, sizeof t);
        t.q = fai_tensor_bshd(q + (pass ? (SQ - CHUNK) * H * D : 0), FAI_DTYPE_F32, pb.seq_q, H, D);
        t.k = fai_tensor_bshd(k, FAI_DTYPE_F32, SQ, H, D);
        t.v = fai_tensor_bshd(v, FAI_DTYPE_F32, SQ, H, D);
        t.o = fai_tensor_bshd(pass ? o_chunk : o_full, FAI_DTYPE_F32, pb.seq_q, H, D);
        t.alibi_slopes = slopes;
        t.sinks = sinks;
        fai_plan *plan = NULL;
        REQUIRE(fai_plan_create(&pb, &plan) == FAI_OK);
        const size_t size = fai_plan_workspace_size(plan);
        void *ws = malloc(size + 1);
        CHECK(fai_run(plan, &t, ws, size) == FAI_OK);
        free(ws);
        fai_plan_free(plan);
    }
    int bad = 0;
    for (int i = 0; i < CHUNK * H * D; i++)
        bad += !(fabsf(o_chunk[i] - o_full[(SQ - CHUNK) * H * D + i]) <= 1e-5f);
    CHECK(bad == 0);
}

/* The smallest caps that are not refused (1 / softcap still a float32, subnormal ones included)
 * cap every score at about 0, so every visible key weighs the same: O is the mean of V and the
 * LSE log(n), with a scale of 0 (scores of exactly 0, 0 x 1 / softcap) and the default one, on
 * the row (decode) and tile (prefill) paths. A cap whose reciprocal overflows is refused. */
TEST(softcap_smallest_caps) {
    enum { SQ = 8, SKV = 16, D = 8 };
    float q[SQ * D], k[SKV * D], v[SKV * D], o[SQ * D], lse[SQ];
    fai_rng g = {77};
    for (int i = 0; i < SQ * D; i++)
        q[i] = (float)(fai_rng_uniform(&g) - 0.5);
    for (int i = 0; i < SKV * D; i++) {
        k[i] = (float)(fai_rng_uniform(&g) - 0.5);
        v[i] = (float)(fai_rng_uniform(&g) - 0.5);
    }
    double mean[D] = {0};
    for (int j = 0; j < SKV; j++)
        for (int x = 0; x < D; x++)
            mean[x] += v[j * D + x] / SKV;
    const float caps[2] = {1e-38f, 4e-39f}, scales[2] = {0.0f, FAI_SCALE_DEFAULT};
    for (int c = 0; c < 2; c++)
        for (int sq = 1; sq <= SQ; sq += SQ - 1)
            for (int sc = 0; sc < 2; sc++) {
                fai_problem pb;
                fai_problem_init(&pb);
                pb.batch = pb.heads_q = pb.heads_kv = 1;
                pb.seq_q = sq;
                pb.seq_kv = SKV;
                pb.head_dim = D;
                pb.q_dtype = pb.k_dtype = pb.v_dtype = FAI_DTYPE_F32;
                pb.softcap = caps[c];
                pb.scale = scales[sc];
                fai_tensors t;
                memset(&t, 0, sizeof t);
                t.q = fai_tensor_bshd(q, FAI_DTYPE_F32, sq, 1, D);
                t.k = fai_tensor_bshd(k, FAI_DTYPE_F32, SKV, 1, D);
                t.v = fai_tensor_bshd(v, FAI_DTYPE_F32, SKV, 1, D);
                t.o = fai_tensor_bshd(o, FAI_DTYPE_F32, sq, 1, D);
                t.lse.data = lse; /* [1, 1, sq] */
                t.lse.dtype = FAI_DTYPE_F32;
                t.lse.stride_seq = 1;
                fai_plan *plan = NULL;
                REQUIRE(fai_plan_create(&pb, &plan) == FAI_OK);
                const size_t size = fai_plan_workspace_size(plan);
                void *ws = malloc(size + 1);
                REQUIRE(ws);
                CHECK(fai_run(plan, &t, ws, size) == FAI_OK);
                free(ws);
                fai_plan_free(plan);
                int bad = 0;
                for (int i = 0; i < sq; i++) {
                    bad += !(fabs(lse[i] - log((double)SKV)) <= 1e-6);
                    for (int x = 0; x < D; x++)
                        bad += !(fabs(o[i * D + x] - mean[x]) <= 1e-6);
                }
                if (bad)
                    fprintf(stderr, "  softcap %g, Sq %d, scale %g: %d values off\n",
                            (double)caps[c], sq, (double)scales[sc], bad);
                CHECK(bad == 0);
            }
    fai_problem pb;
    fai_problem_init(&pb);
    pb.batch = pb.heads_q = pb.heads_kv = 1;
    pb.seq_q = pb.seq_kv = 4;
    pb.head_dim = D;
    pb.softcap = 1e-40f;
    fai_plan *plan = NULL;
    CHECK(fai_plan_create(&pb, &plan) == FAI_ERR_INVALID_ARG && plan == NULL);
    CHECK(strstr(fai_last_error(), "softcap = 9.99995e-41 is too small") != NULL);
}
