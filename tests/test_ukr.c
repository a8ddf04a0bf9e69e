/* Micro-kernel tests: every table this machine runs against the reference table, stage by
 * stage, and the vectorised exp's accuracy against exp in double. */
#include "test_util.h"
#include "ukr/fai_ukr.h"
#include "fai_oracle.h"
#include "util/fai_half.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const char *const table_names[] = {"avx512", "avx2", "neon", "ref"};

/* The larger of a running worst and a new difference (as a call, not an fmax reduction): equal
 * values (infinities too) and two NaN differ by 0, NaN against a number by +inf. */
static double worse(double worst, double a, double b, double scale) {
    const double err = isnan(a) || isnan(b) ? (isnan(a) && isnan(b) ? 0.0 : INFINITY)
                       : a == b             ? 0.0
                                            : fabs(a - b) / scale;
    return err > worst ? err : worst;
}

static float uniform(uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*state >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* The exp of the softmax: relative error against exp in double over [-87.3, 0], exact 0 below
 * that and for -inf, NaN kept. */
TEST(ukr_exp_accuracy) {
    enum { N = 4096 };
    static float in[N], out[N];
    for (size_t t = 0; t < sizeof table_names / sizeof *table_names; t++) {
        const fai_cntx *cntx = fai__cntx_by_name(table_names[t]);
        if (!cntx) continue;
        double worst = 0.0;
        for (int round = 0; round < 64; round++) {
            for (int i = 0; i < N; i++)
                in[i] = -87.3f * (float)(round * N + i) / (64.0f * N);
            cntx->exp_array(out, in, N);
            for (int i = 0; i < N; i++) {
                const double ref = exp((double)in[i]);
                const double err = fabs(out[i] - ref) / ref;
                if (err > worst) worst = err;
            }
        }
        /* below the normal range: subnormal results, within the relative error or half of the
         * smallest subnormal's step; 0 past -103.97, where e^x rounds to 0 */
        double worst_subnormal = 0.0;
        for (int i = 0; i < N; i++)
            in[i] = -87.3f - 17.0f * (float)i / (float)N;
        cntx->exp_array(out, in, N);
        for (int i = 0; i < N; i++) {
            const double ref = exp((double)in[i]);
            const double err = fabs(out[i] - ref) / (2e-7 * ref + 0x1p-150);
            if (err > worst_subnormal) worst_subnormal = err;
        }
        printf("  %s: exp max relative error %.3g, subnormal results within %.3g of their bound\n",
               cntx->name, worst, worst_subnormal);
        CHECK(worst < 2e-7); /* measured 7.5e-8 on AVX-512 and AVX2 */
        CHECK(worst_subnormal <= 1.0);
        for (int i = 0; i < N; i++)
            in[i] = i % 3 == 0 ? -INFINITY : i % 3 == 1 ? -100.0f : NAN;
        cntx->exp_array(out, in, N);
        int special_ok = 1;
        for (int i = 0; i < N; i++) {
            if (i % 3 == 0) special_ok &= out[i] == 0.0f; /* masked: exactly nothing */
            if (i % 3 == 1) special_ok &= fabs(out[i] - exp(-100.0)) < 0x1p-149; /* subnormal */
            if (i % 3 == 2) special_ok &= isnan(out[i]) != 0; /* NaN is never hidden */
        }
        CHECK(special_ok);
    }
}

/* One tile through the four stages on a table and on the reference: S, P, the running state and
 * O agree to f32 rounding; odd m, n, d and dv exercise every edge block. */
TEST(ukr_tables_match_reference) {
    const fai_cntx *ref = fai__cntx_by_name("ref");
    REQUIRE(ref != NULL);
    static const int64_t shapes[][4] = {{1, 1, 1, 1},     {4, 64, 128, 128},  {13, 37, 19, 23},
                                        {64, 64, 64, 64}, {33, 12, 576, 512}, {7, 25, 3, 130},
                                        {70, 63, 19, 23}};
    for (size_t t = 0; t < sizeof table_names / sizeof *table_names; t++) {
        const fai_cntx *cntx = fai__cntx_by_name(table_names[t]);
        if (!cntx || cntx == ref) continue;
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            const int64_t m = shapes[s][0], n = shapes[s][1], d = shapes[s][2], dv = shapes[s][3];
            const int64_t w = cntx->simd_width;
            const int64_t ld_s = (m + w - 1) / w * w, ld_o = (dv + w - 1) / w * w;
            float *q = malloc(sizeof(float) * (size_t)(m * d));
            float *k = malloc(sizeof(float) * (size_t)(n * d));
            float *v = malloc(sizeof(float) * (size_t)(n * dv));
            const void **rows = malloc(sizeof(void *) * (size_t)(m > n ? m : n));
            float *bufs[2][8];
            for (int b = 0; b < 2; b++) {
                bufs[b][0] = calloc((size_t)(d * ld_s), sizeof(float)); /* q_t */
                bufs[b][1] = calloc((size_t)(n * d), sizeof(float));    /* k */
                bufs[b][2] = calloc((size_t)(n * ld_o), sizeof(float)); /* v */
                bufs[b][3] = calloc((size_t)(n * ld_s), sizeof(float)); /* s_t */
                bufs[b][4] = calloc((size_t)(m * ld_o), sizeof(float)); /* o */
                bufs[b][5] = calloc((size_t)ld_s, sizeof(float));       /* max */
                bufs[b][6] = calloc((size_t)ld_s, sizeof(float));       /* sum */
                bufs[b][7] = calloc((size_t)ld_s, sizeof(float));       /* alpha */
            }
            uint64_t state = 42 + s;
            for (int64_t i = 0; i < m * d; i++)
                q[i] = uniform(&state);
            for (int64_t i = 0; i < n * d; i++)
                k[i] = uniform(&state);
            for (int64_t i = 0; i < n * dv; i++)
                v[i] = uniform(&state);
            for (int b = 0; b < 2; b++) {
                const fai_cntx *c = b ? cntx : ref;
                float **x = bufs[b];
                for (int64_t i = 0; i < m; i++)
                    rows[i] = q + i * d;
                c->pack_q(x[0], ld_s, rows, m, d, FAI_DTYPE_F32);
                for (int64_t j = 0; j < n; j++)
                    rows[j] = k + j * d;
                c->pack_rows(x[1], d, rows, n, d, FAI_DTYPE_F32, NULL);
                for (int64_t j = 0; j < n; j++)
                    rows[j] = v + j * dv;
                c->pack_rows(x[2], ld_o, rows, n, dv, FAI_DTYPE_F32, NULL);
                c->qk(x[3], ld_s, x[0], x[1], n, d, 0.7f);
                for (int64_t i = 0; i < ld_s; i++)
                    x[5][i] = i % 2 ? -INFINITY : 0.25f;
                c->softmax(x[3], ld_s, m, n, x[5], x[6], x[7]);
                c->rescale_o(x[4], ld_o, m, x[7]);
                c->pv(x[4], ld_o, x[3], ld_s, x[2], m, n, 0);
            }
            double worst = 0.0;
            for (int64_t j = 0; j < n; j++)
                for (int64_t i = 0; i < m; i++) {
                    const double a = bufs[0][3][j * ld_s + i], b = bufs[1][3][j * ld_s + i];
                    worst = worse(worst, a, b, fmax(1e-30, fabs(a)));
                }
            /* S differs by f32 rounding of a d-term dot product (FMA or not): P by as much */
            const double tol_p = 1e-7 * (double)d + 1e-6;
            CHECK(worst < tol_p);
            double worst_o = 0.0, worst_state = 0.0;
            for (int64_t i = 0; i < m; i++) {
                worst_state = worse(worst_state, bufs[0][5][i], bufs[1][5][i], 1.0);
                worst_state = worse(worst_state, bufs[0][6][i], bufs[1][6][i], bufs[0][6][i]);
                for (int64_t x = 0; x < dv; x++)
                    worst_o =
                        worse(worst_o, bufs[0][4][i * ld_o + x], bufs[1][4][i * ld_o + x], 1.0);
            }
            CHECK(worst_state < tol_p * (double)n);
            CHECK(worst_o < tol_p * (double)n);
            if (worst >= tol_p || worst_o >= tol_p * (double)n || worst_state >= tol_p * (double)n)
                printf("  %s m=%lld n=%lld d=%lld dv=%lld: P err %.3g, O err %.3g\n", cntx->name,
                       (long long)m, (long long)n, (long long)d, (long long)dv, worst, worst_o);
            for (int b = 0; b < 2; b++)
                for (int i = 0; i < 8; i++)
                    free(bufs[b][i]);
            free(q), free(k), free(v), free(rows);
        }
    }
}

/* A masked tile: P = 0 where V is NaN must leave the row clean (the masked PV path). */
TEST(ukr_masked_pv_ignores_invisible_nan) {
    for (size_t t = 0; t < sizeof table_names / sizeof *table_names; t++) {
        const fai_cntx *cntx = fai__cntx_by_name(table_names[t]);
        if (!cntx) continue;
        const int64_t w = cntx->simd_width, m = 2, n = 3, dv = 5;
        const int64_t ld_s = (m + w - 1) / w * w, ld_o = (dv + w - 1) / w * w;
        float p_t[3 * 16] = {0}, v[3 * 16] = {0}, o[2 * 16] = {0};
        for (int64_t x = 0; x < dv; x++)
            v[0 * ld_o + x] = 1.0f, v[1 * ld_o + x] = NAN, v[2 * ld_o + x] = 2.0f;
        p_t[0 * ld_s + 0] = 0.5f, p_t[2 * ld_s + 0] = 0.5f; /* row 0 sees keys 0 and 2 */
        p_t[1 * ld_s + 1] = 1.0f;                           /* row 1 sees key 1 (NaN) */
        cntx->pv(o, ld_o, p_t, ld_s, v, m, n, 1);
        for (int64_t x = 0; x < dv; x++) {
            CHECK(o[x] == 1.5f);
            CHECK(isnan(o[ld_o + x]));
        }
    }
}

/* The direct (small Q tile) kernels on rows of every dtype, with d and dv off the vector width
 * and m off the block of 4 (1 and 2 rows in blocks of their own, 5 and 6 after a block of 4,
 * 3 in one), against the reference table. The rows are allocated to their exact
 * length, so a read past a row is caught by the sanitizer build. */
TEST(ukr_direct_rows_match_reference) {
    const fai_cntx *ref = fai__cntx_by_name("ref");
    REQUIRE(ref != NULL);
    static const int64_t shapes[][4] = {{1, 1, 1, 1},     {4, 64, 128, 128}, {3, 13, 19, 23},
                                        {8, 7, 576, 512}, {5, 66, 40, 72},   {2, 9, 120, 250},
                                        {3, 6, 100, 180}, {1, 70, 128, 128}, {2, 41, 64, 200},
                                        {6, 35, 130, 72}, {1, 17, 48, 40}};
    const fai_dtype dtypes[] = {FAI_DTYPE_F32, FAI_DTYPE_F16,  FAI_DTYPE_BF16,
                                FAI_DTYPE_I8,  FAI_DTYPE_E4M3, FAI_DTYPE_E5M2};
    enum { DTYPES = sizeof dtypes / sizeof *dtypes };
    for (size_t t = 0; t < sizeof table_names / sizeof *table_names; t++) {
        const fai_cntx *cntx = fai__cntx_by_name(table_names[t]);
        if (!cntx || cntx == ref) continue;
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (size_t dt = 0; dt < DTYPES; dt++)
                for (int masked = 0; masked < 2; masked++) {
                    const int64_t m = shapes[s][0], n = shapes[s][1], d = shapes[s][2];
                    const int64_t dv = shapes[s][3], w = cntx->simd_width;
                    const int64_t ld_n = (n + w - 1) / w * w, ld_o = (dv + w - 1) / w * w;
                    const int64_t ld_q = (d + w - 1) / w * w;
                    const size_t esize = fai_dtype_size(dtypes[dt]);
                    /* quantized codes hold the integers -7..7 (exact in each), 8 times the
                     * others' values: the scores and O scale with them */
                    const double mag = fai_dtype_is_quantized(dtypes[dt]) ? 8.0 : 1.0;
                    uint64_t state = 7 + s;
                    float *q = calloc((size_t)(m * ld_q), sizeof(float));
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t x = 0; x < d; x++)
                            q[i * ld_q + x] = uniform(&state);
                    void **k_rows = malloc(sizeof(void *) * (size_t)n);
                    void **v_rows = malloc(sizeof(void *) * (size_t)n);
                    for (int64_t j = 0; j < n; j++) {
                        k_rows[j] = malloc((size_t)d * esize);
                        v_rows[j] = malloc((size_t)dv * esize);
                        /* small integers / 8: exact in every dtype */
                        for (int64_t x = 0; x < d; x++)
                            fai__store_element(k_rows[j], x, dtypes[dt],
                                               (float)((int)(uniform(&state) * 8)) / 8.0f *
                                                   (float)mag);
                        for (int64_t x = 0; x < dv; x++)
                            fai__store_element(v_rows[j], x, dtypes[dt],
                                               (float)((int)(uniform(&state) * 8)) / 8.0f *
                                                   (float)mag);
                    }
                    float *scores[2], *o[2]; /* S row-major [m, ld_n] */
                    const int64_t n_used = n > 4 ? n - 3 : n;
                    for (int b = 0; b < 2; b++) {
                        const fai_cntx *c = b ? cntx : ref;
                        scores[b] = calloc((size_t)(m * ld_n), sizeof(float));
                        o[b] = calloc((size_t)(m * ld_o), sizeof(float));
                        /* the last rows of the lists are only prefetched, never computed; the
                         * other stream's lists (more rows than keys computed, then fewer) are
                         * read up to their count, nothing past it (under ASan), and change
                         * nothing */
                        const fai_row_fetch v_fetch = {(const void *const *)v_rows, n,
                                                       dv * (int64_t)esize};
                        const fai_row_fetch k_fetch = {(const void *const *)k_rows, n_used / 2,
                                                       d * (int64_t)esize};
                        c->qk_rows(scores[b], ld_n, q, ld_q, m, (const void *const *)k_rows,
                                   n - n_used, b ? &v_fetch : NULL, dtypes[dt], n_used, d, 0.5f,
                                   NULL);
                        /* P: the scores made positive, some exactly zero */
                        for (int64_t j = 0; j < n_used; j++)
                            for (int64_t i = 0; i < m; i++)
                                scores[b][i * ld_n + j] =
                                    (i + j) % 5 == 0 ? 0.0f : fabsf(scores[b][i * ld_n + j]);
                        c->pv_rows(o[b], ld_o, scores[b], ld_n, m, (const void *const *)v_rows,
                                   n - n_used, b ? &k_fetch : NULL, dtypes[dt], n_used, dv, masked);
                    }
                    double worst_s = 0.0, worst_o = 0.0;
                    for (int64_t j = 0; j < ld_n; j++) /* the padding's -inf too */
                        for (int64_t i = 0; i < m; i++)
                            worst_s = worse(worst_s, scores[0][i * ld_n + j],
                                            scores[1][i * ld_n + j], 1.0);
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t x = 0; x < dv; x++)
                            worst_o = worse(worst_o, o[0][i * ld_o + x], o[1][i * ld_o + x], 1.0);
                    const double tol = 1e-6 * (double)(d + n * 8) * mag;
                    CHECK(worst_s <= tol && worst_o <= tol * 8 * mag);
                    if (worst_s > tol || worst_o > tol * 8 * mag)
                        printf("  %s m=%lld n=%lld d=%lld dv=%lld dtype=%zu masked=%d: S %.3g O "
                               "%.3g\n",
                               cntx->name, (long long)m, (long long)n, (long long)d, (long long)dv,
                               dt, masked, worst_s, worst_o);
                    for (int b = 0; b < 2; b++)
                        free(scores[b]), free(o[b]);
                    for (int64_t j = 0; j < n; j++)
                        free(k_rows[j]), free(v_rows[j]);
                    free(k_rows), free(v_rows), free(q);
                }
    }
}

/* bf16 dot-product QK (where the CPU has it) against the reference QK on bf16 data: products of
 * bf16 values are exact in f32, so only the summation order differs. */
TEST(ukr_bf16_qk_matches_reference) {
    const fai_cntx *ref = fai__cntx_by_name("ref");
    const fai_cntx *cntx = fai__cntx_by_name("avx512");
    REQUIRE(ref != NULL);
    if (!cntx || !cntx->qk_bf16) {
        printf("  skipped: no bf16 dot products on this CPU\n");
        return;
    }
    /* whole 16 x 16 blocks of Q's transposition, and edges of rows, of pairs and of both */
    static const int64_t shapes[][3] = {{1, 1, 2},     {64, 64, 128}, {13, 37, 18},
                                        {33, 29, 576}, {20, 7, 40},   {48, 5, 34}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int64_t m = shapes[s][0], n = shapes[s][1], d = shapes[s][2];
        const int64_t ld_s = (m + 15) / 16 * 16;
        uint16_t *q = malloc(sizeof(uint16_t) * (size_t)(m * d));
        uint16_t *k = malloc(sizeof(uint16_t) * (size_t)(n * d));
        uint64_t state = 5 + s;
        for (int64_t i = 0; i < m * d; i++)
            q[i] = fai__f32_to_bf16(uniform(&state));
        for (int64_t i = 0; i < n * d; i++)
            k[i] = fai__f32_to_bf16(uniform(&state));
        const void **q_rows = malloc(sizeof(void *) * (size_t)m);
        const void **k_rows = malloc(sizeof(void *) * (size_t)n);
        for (int64_t i = 0; i < m; i++)
            q_rows[i] = q + i * d;
        for (int64_t j = 0; j < n; j++)
            k_rows[j] = k + j * d;
        float *q_t = calloc((size_t)(d * ld_s), sizeof(float));
        float *k_f = calloc((size_t)(n * d), sizeof(float));
        uint16_t *q_pairs = calloc((size_t)(d * ld_s), sizeof(uint16_t));
        float *s_ref = calloc((size_t)(n * ld_s), sizeof(float));
        float *s_bf16 = calloc((size_t)(n * ld_s), sizeof(float));
        ref->pack_q(q_t, ld_s, q_rows, m, d, FAI_DTYPE_BF16);
        ref->pack_rows(k_f, d, k_rows, n, d, FAI_DTYPE_BF16, NULL);
        ref->qk(s_ref, ld_s, q_t, k_f, n, d, 0.3f);
        memset(q_pairs, 0xff, sizeof(uint16_t) * (size_t)(d * ld_s));
        cntx->pack_q_bf16(q_pairs, ld_s, q_rows, m, d);
        for (int64_t p = 0; p < d / 2; p++) /* the padding rows read as zeros */
            for (int64_t i = m; i < ld_s; i++)
                CHECK(q_pairs[2 * (p * ld_s + i)] == 0 && q_pairs[2 * (p * ld_s + i) + 1] == 0);
        cntx->qk_bf16(s_bf16, ld_s, q_pairs, k_rows, n, d, 0.3f);
        double worst = 0.0;
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < m; i++)
                worst = worse(worst, s_ref[j * ld_s + i], s_bf16[j * ld_s + i], 1.0);
        CHECK(worst <= 1e-6 * (double)d);
        if (worst > 1e-6 * (double)d)
            printf("  m=%lld n=%lld d=%lld: error %.3g\n", (long long)m, (long long)n, (long long)d,
                   worst);
        free(q), free(k), free(q_rows), free(k_rows), free(q_t), free(k_f), free(q_pairs);
        free(s_ref), free(s_bf16);
    }
}

/* pack_q_bf16 refuses Q with a value its products would lose or break (subnormal, below 2^-100,
 * 2^80 and above, Inf, NaN) wherever it sits, the last elements of a row (read under a mask)
 * included, and otherwise packs every value where qk_bf16 reads it. */
TEST(ukr_bf16_pack_q_refuses_out_of_range) {
    const fai_cntx *cntx = fai__cntx_by_name("avx512");
    if (!cntx || !cntx->pack_q_bf16) {
        printf("  (no bf16 dot products here: skipped)\n");
        return;
    }
    static const int64_t dims[] = {2, 18, 32, 46, 128, 130};
    static const uint16_t bad[] = {0x0001, 0x8C00 /* -2^-103 */, 0x6780 /* 2^80 */, 0x7F80, 0x7FC0};
    enum { M = 5, LD_S = 16 };
    for (size_t k = 0; k < sizeof dims / sizeof *dims; k++) {
        const int64_t d = dims[k];
        uint16_t *q = malloc(sizeof(uint16_t) * (size_t)(M * d));
        uint16_t *pairs = malloc(sizeof(uint16_t) * (size_t)(d * LD_S));
        const void *rows[M];
        uint64_t state = 3 + k;
        for (int64_t i = 0; i < M * d; i++)
            q[i] = i % 7 == 0 ? 0 : fai__f32_to_bf16(uniform(&state));
        for (int i = 0; i < M; i++)
            rows[i] = q + i * d;
        CHECK(cntx->pack_q_bf16(pairs, LD_S, rows, M, d) == 1);
        int packed = 1;
        for (int64_t i = 0; i < M; i++)
            for (int64_t x = 0; x < d; x++)
                packed &= pairs[(x / 2) * LD_S * 2 + i * 2 + x % 2] == q[i * d + x];
        CHECK(packed);
        const int64_t spots[] = {0, d / 2, d - 1};
        for (size_t b = 0; b < sizeof bad / sizeof *bad; b++)
            for (size_t at = 0; at < 3; at++) {
                const int64_t where = (M - 1) * d + spots[at];
                const uint16_t kept = q[where];
                q[where] = bad[b];
                CHECK(cntx->pack_q_bf16(pairs, LD_S, rows, M, d) == 0);
                q[where] = kept;
            }
        /* the range's edges are in it: 2^-100 and the largest value below 2^80 */
        q[d - 1] = FAI_BF16_DOT_Q_LOW;
        q[d / 2] = FAI_BF16_DOT_HIGH - 1;
        CHECK(cntx->pack_q_bf16(pairs, LD_S, rows, M, d) == 1);
        free(q), free(pairs);
    }
}

/* Decode's bf16 dot-product QK (where the CPU has it) against the reference qk_rows on bf16 data,
 * on any d (the last pairs read under a mask: each K row is its own allocation, so a read past it
 * is caught under the sanitizers), row and key counts that are not multiples of the blocks,
 * the -inf padding, and an Inf and a NaN in K giving what f32 products give. */
TEST(ukr_bf16_qk_rows_matches_reference) {
    const fai_cntx *ref = fai__cntx_by_name("ref");
    const fai_cntx *cntx = fai__cntx_by_name("avx512");
    REQUIRE(ref != NULL);
    if (!cntx || !cntx->qk_rows_bf16) {
        printf("  skipped: no bf16 dot products on this CPU\n");
        return;
    }
    /* 1 and 2 rows in blocks of their own (alone and after a block of 4), 3 in one of 4 */
    static const int64_t shapes[][3] = {{1, 1, 1},    {4, 256, 128}, {3, 37, 17},  {5, 29, 576},
                                        {8, 7, 33},   {4, 5, 16},    {1, 70, 128}, {2, 41, 64},
                                        {6, 35, 130}, {1, 17, 48}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int64_t m = shapes[s][0], n = shapes[s][1], d = shapes[s][2];
        const int64_t ld_q = (d + 15) / 16 * 16, ld_n = (n + 15) / 16 * 16;
        float *q = calloc((size_t)(m * ld_q), sizeof(float));
        uint64_t state = 11 + s;
        for (int64_t i = 0; i < m; i++)
            for (int64_t x = 0; x < d; x++)
                q[i * ld_q + x] = fai__bf16_to_f32(fai__f32_to_bf16(uniform(&state)));
        uint16_t **k = malloc(sizeof(uint16_t *) * (size_t)n);
        for (int64_t j = 0; j < n; j++) {
            k[j] = malloc(sizeof(uint16_t) * (size_t)d);
            for (int64_t x = 0; x < d; x++)
                k[j][x] = fai__f32_to_bf16(uniform(&state));
        }
        if (n > 3) {
            k[1][d - 1] = fai__f32_to_bf16(INFINITY);
            k[2][0] = fai__f32_to_bf16(NAN);
            k[3][d / 2] = 0x0001; /* a subnormal, read as zero: its product is negligible */
        }
        float *s_ref = malloc(sizeof(float) * (size_t)(m * ld_n));
        float *s_bf16 = malloc(sizeof(float) * (size_t)(m * ld_n));
        ref->qk_rows(s_ref, ld_n, q, ld_q, m, (const void *const *)k, 0, NULL, FAI_DTYPE_BF16, n, d,
                     0.3f, NULL);
        /* K's own rows as the other stream's list: read up to its count only */
        const fai_row_fetch fetch = {(const void *const *)k, n, d * 2};
        CHECK(cntx->qk_rows_bf16(s_bf16, ld_n, q, ld_q, m, (const void *const *)k, 0, &fetch, n, d,
                                 0.3f));
        double worst = 0.0;
        int same_special = 1;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < ld_n; j++) {
                const float want = s_ref[i * ld_n + j], got = s_bf16[i * ld_n + j];
                if (isfinite(want) || isfinite(got)) {
                    worst = worse(worst, want, got, 1.0);
                    same_special &= isfinite(want) && isfinite(got);
                } else {
                    same_special &= isnan(want) ? isnan(got) : want == got;
                }
            }
        CHECK(worst <= 1e-6 * (double)d && same_special);
        if (worst > 1e-6 * (double)d || !same_special)
            printf("  m=%lld n=%lld d=%lld: error %.3g, non-finite %s\n", (long long)m,
                   (long long)n, (long long)d, worst, same_special ? "alike" : "differ");
        for (int64_t j = 0; j < n; j++)
            free(k[j]);
        free(k), free(q), free(s_ref), free(s_bf16);
    }
}

/* Decode's bf16 dot-product QK refuses, writing nothing, a Q with a value out of the products'
 * range (FAI_BF16_DOT_Q_LOW: subnormals, which they read as zero, values so large that a
 * subnormal K element would matter, Inf and NaN); the f32 qk_rows does such tiles. */
TEST(ukr_bf16_qk_rows_refuses_what_it_would_lose) {
    const fai_cntx *cntx = fai__cntx_by_name("avx512");
    if (!cntx || !cntx->qk_rows_bf16) {
        printf("  skipped: no bf16 dot products on this CPU\n");
        return;
    }
    enum { D = 40, LD_Q = 48, N = 5, LD_N = 16 };
    float q[2 * LD_Q] = {0};
    uint16_t k_data[N][D];
    const void *k[N];
    for (int j = 0; j < N; j++) {
        for (int x = 0; x < D; x++)
            k_data[j][x] = fai__f32_to_bf16(1.0f);
        k[j] = k_data[j];
    }
    for (int x = 0; x < D; x++)
        q[x] = q[LD_Q + x] = 0.5f;
    static const float bad[] = {0x1p-130f, -0x1p-127f, 0x1p110f, INFINITY, NAN};
    for (size_t b = 0; b < sizeof bad / sizeof *bad; b++) {
        float s[2 * LD_N];
        for (int i = 0; i < 2 * LD_N; i++)
            s[i] = 7.0f;
        q[LD_Q + 3] = bad[b];
        CHECK(!cntx->qk_rows_bf16(s, LD_N, q, LD_Q, 2, k, 0, NULL, N, D, 0.125f));
        for (int i = 0; i < 2 * LD_N; i++)
            CHECK(s[i] == 7.0f);
    }
    q[LD_Q + 3] = 0.5f;
    float s[2 * LD_N];
    CHECK(cntx->qk_rows_bf16(s, LD_N, q, LD_Q, 2, k, 0, NULL, N, D, 0.125f));
    CHECK(s[0] == 0.125f * 0.5f * D && s[LD_N + N] == -INFINITY);
}

/* The output conversions: every table's store_row writes exactly the portable rounding's bits
 * (round to nearest even, f16 saturating finite values only, Inf kept, NaN quiet) for values
 * around each boundary, at every vector offset. */
TEST(ukr_store_row_matches_portable_rounding) {
    enum { N = 96 };
    static const float specials[] = {
        0.0f,   -0.0f,    1.0f,        -1.5f,       65504.0f,   65519.0f,    65520.0f,   -65536.0f,
        1e9f,   INFINITY, -INFINITY,   NAN,         -NAN,       5.96e-8f,    2.98e-8f,   6.1e-5f,
        1e-40f, 3.0e38f,  1.00390625f, 1.01171875f, 1.0078125f, 0.33333334f, 2.5000002f, -7.0e-39f};
    const size_t count = sizeof specials / sizeof *specials;
    float src[N];
    uint16_t got[N], want[N];
    uint64_t state = 7;
    for (int i = 0; i < N; i++)
        src[i] = i < (int)count ? specials[i] : uniform(&state) * 70000.0f;
    for (size_t t = 0; t < sizeof table_names / sizeof *table_names; t++) {
        const fai_cntx *cntx = fai__cntx_by_name(table_names[t]);
        if (!cntx) continue;
        for (int dtype = FAI_DTYPE_F16; dtype <= FAI_DTYPE_BF16; dtype++)
            for (int offset = 0; offset < 3; offset++) {
                const float mul = offset == 2 ? 0.5f : 1.0f;
                const int64_t dim = N - offset;
                cntx->store_row(got, (fai_dtype)dtype, src + offset, dim, mul);
                for (int64_t x = 0; x < dim; x++)
                    fai__store_element(want, x, (fai_dtype)dtype, src[offset + x] * mul);
                int same = 1;
                for (int64_t x = 0; x < dim; x++)
                    if (got[x] != want[x]) {
                        if (same)
                            printf("  %s dtype %d: %g -> 0x%04x, want 0x%04x\n", cntx->name, dtype,
                                   (double)(src[offset + x] * mul), got[x], want[x]);
                        same = 0;
                    }
                CHECK(same);
            }
    }
}

/* The quantized element types: every one of the 256 codes of int8, e4m3 and e5m2, converted by
 * each table's packing (its vector loads, and the portable tail) and by the oracle's independent
 * decoder, must agree bit for bit (NaN codes give NaN), and with scales folded in (prefill packs
 * them so), each the f32 product of code and scale; and so must the portable encoders' round
 * trip of every finite code. The rows once more without e4m3's NaN code (which an e4m3 row packs
 * another way). */
TEST(ukr_quantized_codes_decode_exactly) {
    enum { CODES = 256, DIM = 256 + 3, LD = DIM + 13 }; /* a tail past the vectors */
    unsigned char codes[DIM];
    const void *rows[2] = {codes, codes};
    static const float scales[2] = {0.375f, 3.1e-3f};
    float out[2 * LD];
    const fai_dtype dtypes[3] = {FAI_DTYPE_I8, FAI_DTYPE_E4M3, FAI_DTYPE_E5M2};
    for (size_t t = 0; t < sizeof table_names / sizeof table_names[0]; t++) {
        const fai_cntx *cntx = fai__cntx_by_name(table_names[t]);
        if (!cntx) continue;
        for (int k = 0; k < 3; k++)
            for (int variant = 0; variant < 4; variant++) {
                const int scaled = variant % 2, e4m3_nan_free = variant / 2;
                for (int i = 0; i < DIM; i++) {
                    codes[i] = (unsigned char)(i % CODES);
                    if (e4m3_nan_free && (codes[i] & 0x7f) == 0x7f) codes[i] = 0x41;
                }
                const int finite =
                    cntx->pack_rows(out, LD, rows, 2, DIM, dtypes[k], scaled ? scales : NULL);
                int wrong = 0;
                for (int r = 0; r < 2; r++)
                    for (int i = 0; i < LD; i++) {
                        const double code = i < DIM ? fai_oracle_load(codes, dtypes[k], i) : 0.0;
                        const float want = scaled ? (float)code * scales[r] : (float)code;
                        const float got = out[r * LD + i];
                        const int same = isnan(want) ? isnan(got) : got == want;
                        if (!same && wrong++ < 3)
                            fprintf(stderr, "  %s %s code 0x%02x scaled %d: %g, want %g\n",
                                    cntx->name, fai_dtype_name(dtypes[k]), codes[i % DIM], scaled,
                                    (double)got, (double)want);
                    }
                CHECK(wrong == 0);
                /* fp8 has NaN (and e5m2 Inf) codes */
                CHECK(finite == (dtypes[k] == FAI_DTYPE_I8 ||
                                 (dtypes[k] == FAI_DTYPE_E4M3 && e4m3_nan_free)));
            }
    }
    for (int k = 0; k < 3; k++)
        for (int code = 0; code < CODES; code++) {
            const unsigned char byte = (unsigned char)code;
            const double value = fai_oracle_load(&byte, dtypes[k], 0);
            if (!isfinite(value) || (dtypes[k] == FAI_DTYPE_I8 && code == 0x80)) continue;
            unsigned char back = 0;
            fai__store_element(&back, 0, dtypes[k], (float)value);
            const int same =
                back == byte || (value == 0.0 && fai_oracle_load(&back, dtypes[k], 0) == 0.0);
            if (!same)
                fprintf(stderr, "  %s code 0x%02x (%g) encodes to 0x%02x\n",
                        fai_dtype_name(dtypes[k]), code, value, back);
            CHECK(same);
        }
}

/* int8 rows times scales the largest finite products of which reach past FLT_MAX: the packing
 * reports Inf where code -128 or 127 overflows (which the exact PV then takes), and finite where
 * the scale is at most FLT_MAX / 128, whatever the codes. Every table, the code in a vector and
 * in the portable tail. */
TEST(ukr_int8_packing_reports_overflow) {
    enum { DIM = 64 + 3 };
    const float bound = FLT_MAX / 128.0f, past = nextafterf(bound, INFINITY);
    for (size_t t = 0; t < sizeof table_names / sizeof table_names[0]; t++) {
        const fai_cntx *cntx = fai__cntx_by_name(table_names[t]);
        if (!cntx) continue;
        for (int at = 0; at < 2; at++) /* where -128 sits: a vector, the tail */
            for (int over = 0; over < 2; over++) {
                int8_t codes[DIM] = {0};
                codes[at ? DIM - 1 : 5] = -128;
                codes[at ? 5 : DIM - 1] = 127;
                const void *rows[2] = {codes, codes};
                const float scales[2] = {1.0f, over ? past : bound};
                float out[2 * DIM];
                const int finite = cntx->pack_rows(out, DIM, rows, 2, DIM, FAI_DTYPE_I8, scales);
                CHECK(finite == !over);
                CHECK(out[DIM + (at ? DIM - 1 : 5)] == (over ? -INFINITY : -FLT_MAX));
            }
    }
}

/* e4m3 rows of code 0x7e (448, the largest) times scales about FLT_MAX / 512, below which the
 * packing reads the codes as 2^-8 of their values and takes the scale times 2^8: the same
 * products either side of it, and Inf reported where the product overflows. Every table, the
 * code in a vector and in the portable tail. */
TEST(ukr_e4m3_packing_either_side_of_its_scale_bound) {
    enum { DIM = 64 + 3 };
    const float bound = FLT_MAX / 512.0f;
    const float scales[4] = {bound, nextafterf(bound, INFINITY), FLT_MAX / 448.0f * 0.999f,
                             FLT_MAX / 400.0f};
    for (size_t t = 0; t < sizeof table_names / sizeof table_names[0]; t++) {
        const fai_cntx *cntx = fai__cntx_by_name(table_names[t]);
        if (!cntx) continue;
        for (int at = 0; at < 2; at++) /* where 448 sits: a vector, the tail */
            for (int s = 0; s < 4; s++) {
                unsigned char codes[DIM] = {0};
                codes[at ? DIM - 1 : 5] = 0x7e;
                codes[at ? 5 : DIM - 1] = 0x01; /* the smallest subnormal, 2^-9 */
                const void *rows[1] = {codes};
                float out[DIM];
                const int finite =
                    cntx->pack_rows(out, DIM, rows, 1, DIM, FAI_DTYPE_E4M3, scales + s);
                CHECK(finite == (s < 3));
                CHECK(out[at ? DIM - 1 : 5] == 448.0f * scales[s]);
                CHECK(out[at ? 5 : DIM - 1] == 0x1p-9f * scales[s]);
            }
    }
}

/* The e4m3 NaN code in a K row makes that key's scores NaN and no other's; in a V row it makes
 * O's column NaN where the key weighs something, and changes nothing where P = 0 in a masked
 * tile. Every table's row kernels, the code in the last position (a vector's tail) and in the
 * first, both signs. */
TEST(ukr_e4m3_nan_code_reaches_scores_and_o) {
    static const int64_t dims[] = {16, 64, 100, 128, 130};
    for (size_t t = 0; t < sizeof table_names / sizeof *table_names; t++) {
        const fai_cntx *cntx = fai__cntx_by_name(table_names[t]);
        if (!cntx) continue;
        for (size_t k = 0; k < sizeof dims / sizeof *dims; k++)
            for (int last = 0; last < 6; last++) {
                /* a block of 4 query rows, and the blocks of 2 and 1 */
                enum { N = 6, NAN_KEY = 2, NAN_VALUE = 1 };
                const int M = last < 2 ? 4 : last < 4 ? 2 : 1;
                const int64_t d = dims[k], w = cntx->simd_width;
                const int64_t ld = (d + w - 1) / w * w, ld_n = (N + w - 1) / w * w;
                const int64_t at = last % 2 ? d - 1 : 0;
                uint64_t state = 3 + k;
                float *q = calloc((size_t)(M * ld), sizeof(float));
                float *s = malloc(sizeof(float) * (size_t)(M * ld_n));
                float *o = calloc((size_t)(M * ld), sizeof(float));
                unsigned char *codes = malloc((size_t)(2 * N * d));
                const void *k_rows[N], *v_rows[N];
                for (int64_t i = 0; i < M * ld; i++)
                    q[i] = i % ld < d ? uniform(&state) : 0.0f;
                for (int64_t i = 0; i < 2 * N * d; i++) /* bit 3 clear: no NaN code */
                    codes[i] = (unsigned char)((int)((uniform(&state) + 1.0f) * 128) & 0xf7);
                for (int j = 0; j < N; j++) {
                    k_rows[j] = codes + j * d;
                    v_rows[j] = codes + (N + j) * d;
                }
                codes[NAN_KEY * d + at] = last % 2 ? 0x7f : 0xff;
                codes[(N + NAN_VALUE) * d + at] = last % 2 ? 0xff : 0x7f;
                cntx->qk_rows(s, ld_n, q, ld, M, k_rows, 0, NULL, FAI_DTYPE_E4M3, N, d, 0.25f,
                              NULL);
                int right = 1;
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++)
                        right &= j == NAN_KEY ? isnan(s[i * ld_n + j]) : isfinite(s[i * ld_n + j]);
                /* P: 0.5, and 0 for the NaN value's key in a masked tile */
                for (int masked = 0; masked < 2; masked++) {
                    for (int i = 0; i < M; i++)
                        for (int j = 0; j < ld_n; j++)
                            s[i * ld_n + j] = j >= N || (masked && j == NAN_VALUE) ? 0 : 0.5f;
                    memset(o, 0, sizeof(float) * (size_t)(M * ld));
                    cntx->pv_rows(o, ld, s, ld_n, M, v_rows, 0, NULL, FAI_DTYPE_E4M3, N, d, masked);
                    for (int i = 0; i < M; i++)
                        for (int64_t x = 0; x < d; x++)
                            right &=
                                !masked && x == at ? isnan(o[i * ld + x]) : isfinite(o[i * ld + x]);
                }
                CHECK(right);
                if (!right)
                    printf("  %s d=%lld, %d rows, NaN code at %lld: wrong\n", cntx->name,
                           (long long)d, M, (long long)at);
                free(q), free(s), free(o), free(codes);
            }
    }
}

/* Decode's quantized scales, folded into the passes that store S and P, give bit for bit what a
 * separate pass would: qk_rows with key_scale equals qk_rows then S times each key's scale, and
 * softmax_rows with p_scale equals softmax_rows then P times each scale, with the same row
 * maxima and sums (the sums take P unscaled). Every table, every quantized dtype, edge blocks of
 * keys and rows, and a row that sees nothing. */
TEST(ukr_decode_scales_fold_exactly) {
    static const int64_t shapes[][3] = {{1, 1, 16},  {4, 64, 128}, {3, 13, 19},
                                        {6, 37, 64}, {1, 40, 64},  {2, 37, 128}};
    const fai_dtype dtypes[] = {FAI_DTYPE_I8, FAI_DTYPE_E4M3, FAI_DTYPE_E5M2};
    for (size_t t = 0; t < sizeof table_names / sizeof *table_names; t++) {
        const fai_cntx *cntx = fai__cntx_by_name(table_names[t]);
        if (!cntx) continue;
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (size_t dt = 0; dt < sizeof dtypes / sizeof *dtypes; dt++) {
                const int64_t m = shapes[s][0], n = shapes[s][1], d = shapes[s][2];
                const int64_t w = cntx->simd_width;
                const int64_t ld_n = (n + w - 1) / w * w, ld_q = (d + w - 1) / w * w;
                uint64_t state = 11 + s * 7 + dt;
                float *q = calloc((size_t)(m * ld_q), sizeof(float));
                for (int64_t i = 0; i < m; i++)
                    for (int64_t x = 0; x < d; x++)
                        q[i * ld_q + x] = uniform(&state);
                unsigned char *codes = malloc((size_t)(n * d));
                const void **k_rows = malloc(sizeof(void *) * (size_t)n);
                for (int64_t j = 0; j < n; j++) {
                    for (int64_t x = 0; x < d; x++) /* no NaN or Inf code: finite scores */
                        codes[j * d + x] = (unsigned char)((int)(uniform(&state) * 100) & 0x37);
                    k_rows[j] = codes + j * d;
                }
                float *scale = malloc(sizeof(float) * (size_t)ld_n);
                for (int64_t j = 0; j < ld_n; j++)
                    scale[j] = j < n ? 0.01f + (float)fabs(uniform(&state)) : 1.0f;
                float *folded = malloc(sizeof(float) * (size_t)(m * ld_n));
                float *apart = malloc(sizeof(float) * (size_t)(m * ld_n));
                cntx->qk_rows(folded, ld_n, q, ld_q, m, k_rows, 0, NULL, dtypes[dt], n, d, 0.3f,
                              scale);
                cntx->qk_rows(apart, ld_n, q, ld_q, m, k_rows, 0, NULL, dtypes[dt], n, d, 0.3f,
                              NULL);
                int same = 1;
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < ld_n; j++) {
                        const float want = j < n ? apart[i * ld_n + j] * scale[j] : -INFINITY;
                        same &= folded[i * ld_n + j] == want;
                    }
                CHECK(same);
                /* the softmax of the folded scores, the last row masked whole */
                for (int64_t j = 0; m > 1 && j < ld_n; j++)
                    folded[(m - 1) * ld_n + j] = -INFINITY;
                memcpy(apart, folded, sizeof(float) * (size_t)(m * ld_n));
                float stats[2][3][8];
                for (int b = 0; b < 2; b++)
                    for (int64_t i = 0; i < 8; i++) {
                        stats[b][0][i] = i % 2 ? -INFINITY : 0.25f; /* max */
                        stats[b][1][i] = i % 2 ? 0.0f : 1.5f;       /* sum */
                        stats[b][2][i] = 0.0f;                      /* alpha */
                    }
                cntx->softmax_rows(folded, ld_n, m, stats[0][0], stats[0][1], stats[0][2], scale);
                cntx->softmax_rows(apart, ld_n, m, stats[1][0], stats[1][1], stats[1][2], NULL);
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < ld_n; j++)
                        same &= folded[i * ld_n + j] == apart[i * ld_n + j] * scale[j];
                CHECK(same);
                CHECK(memcmp(stats[0], stats[1], sizeof stats[0]) == 0);
                if (!same)
                    printf("  %s m=%lld n=%lld d=%lld %s: folded scales differ\n", cntx->name,
                           (long long)m, (long long)n, (long long)d, fai_dtype_name(dtypes[dt]));
                free(q), free(codes), free(k_rows), free(scale), free(folded), free(apart);
            }
    }
}

/* Encoding rounds to nearest even and saturates: halfway between two e4m3 values, past the
 * largest, and int8 at +-127. */
TEST(ukr_quantized_encoding_rounds_and_saturates) {
    unsigned char b = 0;
    fai__store_element(&b, 0, FAI_DTYPE_E4M3, 1.0625f); /* halfway 1.0 / 1.125: even is 1.0 */
    CHECK(b == 0x38);
    fai__store_element(&b, 0, FAI_DTYPE_E4M3, 1.1875f); /* halfway 1.125 / 1.25: even is 1.25 */
    CHECK(b == 0x3a);
    fai__store_element(&b, 0, FAI_DTYPE_E4M3, 1000.0f);
    CHECK(b == 0x7e); /* 448 */
    fai__store_element(&b, 0, FAI_DTYPE_E4M3, -INFINITY);
    CHECK(b == 0xfe);
    fai__store_element(&b, 0, FAI_DTYPE_E4M3, 0x1.0p-10f); /* half the smallest subnormal: 0 */
    CHECK(b == 0x00);
    fai__store_element(&b, 0, FAI_DTYPE_E5M2, 1e6f);
    CHECK(b == 0x7b); /* 57344 */
    fai__store_element(&b, 0, FAI_DTYPE_E5M2, INFINITY);
    CHECK(b == 0x7c);
    int8_t q = 0;
    fai__store_element(&q, 0, FAI_DTYPE_I8, -300.0f);
    CHECK(q == -127);
    fai__store_element(&q, 0, FAI_DTYPE_I8, 2.5f);
    CHECK(q == 2);
    fai__store_element(&q, 0, FAI_DTYPE_I8, NAN);
    CHECK(q == 0);
}
