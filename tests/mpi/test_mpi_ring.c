/* fai_mpi_ring_attention: Q, K and V in zig-zag chunks over the ranks; each rank's rows equal
 * the same rows of fai on the whole sequence, causal or not, with windows, any dtype (quantized
 * K and V with their scales per token, per kv head or per tensor too) and lengths that 2R does
 * not divide (down to chunks with no rows). */
#include "test_mpi_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct ring_case {
    int64_t batch, hq, hkv, seq, d, dv;
    fai_dtype q_dtype, kv_dtype, o_dtype;
    fai_causal causal;
    int64_t window_left, window_right;
    float softcap; /* score modifiers */
    int alibi, sinks;
    int separate_v; /* V's dtype is v_dtype, not kv_dtype */
    fai_dtype v_dtype;
    int k_scale_kind, v_scale_kind; /* quantized K, V: TEST_SCALE_* */
} ring_case;

static ring_case ring_case_of(int64_t batch, int64_t hq, int64_t hkv, int64_t seq, int64_t d) {
    ring_case c;
    memset(&c, 0, sizeof c);
    c.batch = batch, c.hq = hq, c.hkv = hkv, c.seq = seq, c.d = d, c.dv = d;
    c.q_dtype = c.kv_dtype = c.o_dtype = FAI_DTYPE_F32;
    c.causal = FAI_CAUSAL_BOTTOM_RIGHT;
    c.window_left = c.window_right = -1;
    return c;
}

/* Rows [first, first + count) of every batch of a [B, S, row_elems] array of `es`-byte
 * elements, copied to the rows starting at `at` of a [B, rows, row_elems] array. */
static void take_rows(void *dst, size_t es, int64_t rows, int64_t at, const void *src,
                      int64_t batch, int64_t seq, int64_t row_elems, int64_t first, int64_t count) {
    for (int64_t b = 0; b < batch; b++)
        memcpy((char *)dst + es * (size_t)((b * rows + at) * row_elems),
               (const char *)src + es * (size_t)((b * seq + first) * row_elems),
               es * (size_t)(count * row_elems));
}

/* This rank's rows of a reference O [B, S, Hq, Dv] and LSE [B, Hq, S], in local order. */
static void local_reference(const ring_case *c, const fai_mpi_zigzag *z, const float *o_ref,
                            const float *lse_ref, float *o_want, float *lse_want) {
    const int64_t row = c->hq * c->dv;
    for (int64_t b = 0; b < c->batch; b++)
        for (int k = 0, at = 0; k < 2; at += (int)z->len[k], k++) {
            memcpy(o_want + (b * z->rows + at) * row, o_ref + (b * c->seq + z->start[k]) * row,
                   sizeof(float) * (size_t)(z->len[k] * row));
            for (int64_t h = 0; h < c->hq; h++)
                memcpy(lse_want + (b * c->hq + h) * z->rows + at,
                       lse_ref + (b * c->hq + h) * c->seq + z->start[k],
                       sizeof(float) * (size_t)z->len[k]);
        }
}

static int run_ring_case(const ring_case *c, uint64_t seed, fai_mpi_stats *stats) {
    const int64_t B = c->batch, S = c->seq, H = c->hkv;
    const int64_t q_row = c->hq * c->d, k_row = c->hkv * c->d, v_row = c->hkv * c->dv;
    const fai_dtype kd = c->kv_dtype, vd = c->separate_v ? c->v_dtype : c->kv_dtype;
    const size_t qs = fai_dtype_size(c->q_dtype), ks = fai_dtype_size(kd), vs = fai_dtype_size(vd);
    float *qf = test_alloc(sizeof(float) * (size_t)(B * S * q_row));
    float *kf = test_alloc(sizeof(float) * (size_t)(B * S * k_row));
    float *vf = test_alloc(sizeof(float) * (size_t)(B * S * v_row));
    test_fill(qf, B * S * q_row, seed);
    test_fill(kf, B * S * k_row, seed + 1);
    test_fill(vf, B * S * v_row, seed + 2);

    /* the whole, on one process */
    fai_problem whole;
    fai_problem_init(&whole);
    whole.batch = B, whole.heads_q = c->hq, whole.heads_kv = c->hkv;
    whole.seq_q = whole.seq_kv = S, whole.head_dim = c->d, whole.head_dim_v = c->dv;
    whole.q_dtype = c->q_dtype, whole.k_dtype = kd, whole.v_dtype = vd;
    whole.o_dtype = c->o_dtype, whole.causal = c->causal;
    whole.window_left = c->window_left, whole.window_right = c->window_right;
    whole.threads = 1, whole.workers = 2;
    whole.softcap = c->softcap, whole.alibi = c->alibi, whole.sinks = c->sinks;
    float slopes[64], sinks[64];
    fai_alibi_slopes(c->hq, slopes);
    for (int64_t h = 0; h < c->hq; h++)
        sinks[h] = h % 4 == 1 ? -INFINITY : 0.5f * (float)h - 1.0f;
    /* one scale per (b, s, h) of a quantized K and V, as their kinds vary */
    float *k_scales = test_alloc(sizeof(float) * (size_t)(B * S * H));
    float *v_scales = test_alloc(sizeof(float) * (size_t)(B * S * H));
    test_scales(k_scales, kd, c->k_scale_kind, B, S, H);
    test_scales(v_scales, vd, c->v_scale_kind, B, S, H);
    void *q = test_alloc(qs * (size_t)(B * S * q_row)),
         *k = test_alloc(ks * (size_t)(B * S * k_row));
    void *v = test_alloc(vs * (size_t)(B * S * v_row));
    test_encode(q, c->q_dtype, qf, B * S * q_row);
    test_encode_rows(k, kd, kf, k_scales, B * S * H, c->d);
    test_encode_rows(v, vd, vf, v_scales, B * S * H, c->dv);
    fai_tensors wt;
    memset(&wt, 0, sizeof wt);
    wt.q = fai_tensor_bshd(q, c->q_dtype, S, c->hq, c->d);
    wt.k = fai_tensor_bshd(k, kd, S, c->hkv, c->d);
    wt.v = fai_tensor_bshd(v, vd, S, c->hkv, c->dv);
    wt.k_scale = test_scales_of(kd, k_scales, c->k_scale_kind, S, H);
    wt.v_scale = test_scales_of(vd, v_scales, c->v_scale_kind, S, H);
    wt.alibi_slopes = c->alibi ? slopes : NULL;
    wt.sinks = c->sinks ? sinks : NULL;
    float *o_ref = test_alloc(sizeof(float) * (size_t)(B * S * c->hq * c->dv));
    float *lse_ref = test_alloc(sizeof(float) * (size_t)(B * c->hq * S));
    int ok = test_reference(&whole, &wt, o_ref, lse_ref) == 0;

    /* this rank's rows: chunks r and 2R - 1 - r of Q, K and V */
    fai_mpi_zigzag z;
    memset(&z, 0, sizeof z);
    if (fai_mpi_zigzag_layout(S, test_size, test_rank, &z) != FAI_OK) ok = 0;
    const int64_t rows = z.rows;
    void *lq = test_alloc(qs * (size_t)(B * rows * q_row)),
         *lk = test_alloc(ks * (size_t)(B * rows * k_row));
    void *lv = test_alloc(vs * (size_t)(B * rows * v_row));
    float *lks = test_alloc(sizeof(float) * (size_t)(B * rows * H));
    float *lvs = test_alloc(sizeof(float) * (size_t)(B * rows * H));
    for (int part = 0, at = 0; part < 2; at += (int)z.len[part], part++) {
        take_rows(lq, qs, rows, at, q, B, S, q_row, z.start[part], z.len[part]);
        take_rows(lk, ks, rows, at, k, B, S, k_row, z.start[part], z.len[part]);
        take_rows(lv, vs, rows, at, v, B, S, v_row, z.start[part], z.len[part]);
        take_rows(lks, sizeof(float), rows, at, k_scales, B, S, H, z.start[part], z.len[part]);
        take_rows(lvs, sizeof(float), rows, at, v_scales, B, S, H, z.start[part], z.len[part]);
    }
    fai_problem local = whole;
    local.seq_q = local.seq_kv = rows;
    const int64_t o_count = B * rows * c->hq * c->dv, lse_count = B * c->hq * rows;
    void *o = test_alloc(fai_dtype_size(c->o_dtype) * (size_t)o_count);
    float *lse = test_alloc(sizeof(float) * (size_t)lse_count);
    fai_tensors lt;
    memset(&lt, 0, sizeof lt);
    lt.q = fai_tensor_bshd(lq, c->q_dtype, rows, c->hq, c->d);
    lt.k = fai_tensor_bshd(lk, kd, rows, c->hkv, c->d);
    lt.v = fai_tensor_bshd(lv, vd, rows, c->hkv, c->dv);
    /* the rank's own scales: its rows of per-token ones, or the same per head or tensor */
    lt.k_scale = test_scales_of(kd, c->k_scale_kind == TEST_SCALE_TOKEN ? lks : k_scales,
                                c->k_scale_kind, rows, H);
    lt.v_scale = test_scales_of(vd, c->v_scale_kind == TEST_SCALE_TOKEN ? lvs : v_scales,
                                c->v_scale_kind, rows, H);
    lt.o = fai_tensor_bshd(o, c->o_dtype, rows, c->hq, c->dv);
    lt.lse = (fai_tensor){lse, FAI_DTYPE_F32, c->hq * rows, 1, rows, 0};
    lt.alibi_slopes = wt.alibi_slopes;
    lt.sinks = wt.sinks;
    const fai_status status = fai_mpi_ring_attention(MPI_COMM_WORLD, &local, S, &lt, stats);
    if (status != FAI_OK) {
        fprintf(stderr, "  rank %d: %s: %s\n", test_rank, fai_status_string(status),
                fai_mpi_last_error());
        ok = 0;
    }
    if (ok) {
        float *o_want = test_alloc(sizeof(float) * (size_t)o_count);
        float *lse_want = test_alloc(sizeof(float) * (size_t)lse_count);
        local_reference(c, &z, o_ref, lse_ref, o_want, lse_want);
        const int low = c->q_dtype != FAI_DTYPE_F32 || kd != FAI_DTYPE_F32 || vd != FAI_DTYPE_F32;
        const double o_err = test_o_excess(o, c->o_dtype, low, o_want, o_count);
        const double lse_err = test_lse_excess(lse, low, lse_want, lse_count);
        if (o_err > 0 || lse_err > 0) {
            fprintf(stderr, "  rank %d: O exceeds the tolerance by %.3g, LSE by %.3g\n", test_rank,
                    o_err, lse_err);
            ok = 0;
        }
        free(o_want), free(lse_want);
    }
    free(qf), free(kf), free(vf), free(q), free(k), free(v), free(o_ref), free(lse_ref);
    free(lq), free(lk), free(lv), free(o), free(lse), free(k_scales), free(v_scales), free(lks);
    free(lvs);
    return ok;
}

TEST(mpi_ring_causal_zigzag) {
    ring_case c = ring_case_of(2, 4, 2, 256, 16);
    fai_mpi_stats stats;
    CHECK(run_ring_case(&c, 40, &stats));
    /* zig-zag under causal: every rank runs 2R + 1 pairs and skips the rest */
    CHECK(stats.steps == test_size);
    CHECK(stats.pairs_computed == 2 * test_size + 1);
    CHECK(stats.pairs_skipped == 2 * test_size - 1);
    CHECK(stats.bytes_sent > 0 || test_size == 1);
    c.causal = FAI_CAUSAL_TOP_LEFT; /* with Sq = Skv the corners coincide */
    CHECK(run_ring_case(&c, 41, &stats));
}

TEST(mpi_ring_uneven_lengths) {
    /* 203 = 8 * 25 + 3: chunks of 26 and 25 rows; 5 and 1 leave chunks empty */
    static const int64_t lengths[] = {203, 61, 5, 1, 0};
    for (size_t i = 0; i < sizeof lengths / sizeof *lengths; i++) {
        ring_case c = ring_case_of(1, 4, 1, lengths[i], 16);
        fai_mpi_stats stats;
        CHECK(run_ring_case(&c, 50 + i, &stats));
    }
}

TEST(mpi_ring_not_causal) {
    ring_case c = ring_case_of(2, 6, 3, 99, 8);
    c.causal = FAI_CAUSAL_NONE;
    fai_mpi_stats stats;
    CHECK(run_ring_case(&c, 60, &stats));
    CHECK(stats.pairs_skipped == 0 && stats.pairs_computed == 4 * test_size);
    c.q_dtype = c.kv_dtype = FAI_DTYPE_BF16, c.o_dtype = FAI_DTYPE_F16, c.dv = 12;
    CHECK(run_ring_case(&c, 61, &stats));
}

TEST(mpi_ring_windows) {
    ring_case c = ring_case_of(1, 4, 2, 160, 16);
    c.window_left = 12; /* causal with a short window: most pairs are skipped */
    fai_mpi_stats stats;
    CHECK(run_ring_case(&c, 70, &stats));
    c.causal = FAI_CAUSAL_NONE, c.window_left = 9, c.window_right = 25;
    CHECK(run_ring_case(&c, 71, &stats));
    c.window_left = 0, c.window_right = 0; /* the diagonal alone */
    CHECK(run_ring_case(&c, 72, &stats));
}

/* Soft-capping, ALiBi over the chunks' global positions, and sinks counted once per row when the
 * chunk's pairs are folded. */
TEST(mpi_ring_score_modifiers) {
    ring_case c = ring_case_of(2, 4, 2, 70, 16);
    c.softcap = 4.0f, c.alibi = 1, c.sinks = 1;
    fai_mpi_stats stats;
    CHECK(run_ring_case(&c, 60, &stats));
    c.causal = FAI_CAUSAL_NONE, c.window_left = 9, c.window_right = 2;
    c.kv_dtype = FAI_DTYPE_F16;
    CHECK(run_ring_case(&c, 61, &stats));
}

/* Quantized K and V travel the ring with their scales: per token (each block its owner's), per
 * kv head and per tensor, int8 and fp8, K and V of different dtypes. */
TEST(mpi_ring_quantized_kv) {
    ring_case c = ring_case_of(2, 4, 2, 150, 16);
    c.kv_dtype = FAI_DTYPE_I8, c.k_scale_kind = c.v_scale_kind = TEST_SCALE_TOKEN;
    fai_mpi_stats stats;
    CHECK(run_ring_case(&c, 80, &stats));
    c.kv_dtype = FAI_DTYPE_E4M3, c.separate_v = 1, c.v_dtype = FAI_DTYPE_E5M2;
    c.k_scale_kind = TEST_SCALE_HEAD, c.v_scale_kind = TEST_SCALE_TOKEN;
    CHECK(run_ring_case(&c, 81, &stats));
    c = ring_case_of(1, 6, 3, 61, 8); /* not causal, a 16-bit V, one scale for K */
    c.causal = FAI_CAUSAL_NONE, c.dv = 12;
    c.kv_dtype = FAI_DTYPE_E5M2, c.separate_v = 1, c.v_dtype = FAI_DTYPE_F16;
    c.k_scale_kind = TEST_SCALE_TENSOR;
    CHECK(run_ring_case(&c, 82, &stats));
    c.kv_dtype = FAI_DTYPE_F16, c.v_dtype = FAI_DTYPE_I8, c.v_scale_kind = TEST_SCALE_TOKEN;
    c.softcap = 5.0f, c.sinks = 1;
    CHECK(run_ring_case(&c, 83, &stats));
}
