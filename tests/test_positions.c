/* Global positions: attention over a shard of a sequence, with the shard's q_positions and
 * kv_positions, merged over all shards by fai_merge_states, equals attention over the whole
 * sequence (computed by the library itself, unsharded). Covers causal prefill with Q and K/V
 * both sharded (shard pairs that see nothing included), sliding windows, decode with K/V
 * sharded, and paged shards; and the errors of the two fields. */
#include "test_util.h"

#include "fai.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct shard_problem {
    int64_t batch, hq, hkv, sq, skv, d;
    fai_causal causal;
    int64_t window_left;
    int64_t page_size; /* 0: dense shards; else each shard reads its pages of one shared pool */
} shard_problem;

static float uniform(uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*state >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* Attention of queries [q_begin, q_end) over keys [kv_begin, kv_end) of the full f32 BSHD
 * tensors, into o [B, q_end - q_begin, Hq, D] and lse [B, q_end - q_begin, Hq]. With positions,
 * the shard is told where it sits; without, the whole is computed (the ranges must be full). */
static int attend_shard(const shard_problem *sp, const float *q, const float *k, const float *v,
                        int64_t q_begin, int64_t q_end, int64_t kv_begin, int64_t kv_end,
                        int with_positions, float *o, float *lse) {
    const int64_t q_len = q_end - q_begin, kv_len = kv_end - kv_begin, B = sp->batch;
    int32_t q_pos[8], kv_pos[8], lens[8];
    fai_problem pb;
    fai_problem_init(&pb);
    pb.batch = B, pb.heads_q = sp->hq, pb.heads_kv = sp->hkv, pb.head_dim = sp->d;
    pb.seq_q = q_len, pb.seq_kv = kv_len;
    pb.k_dtype = pb.v_dtype = FAI_DTYPE_F32;
    pb.causal = sp->causal, pb.window_left = sp->window_left;
    pb.workers = 3; /* several pieces, split-KV included, whatever the shard */
    /* with global positions, query i of the whole sits at i + skv - sq (bottom-right) */
    for (int64_t b = 0; b < B; b++) {
        q_pos[b] = (int32_t)(q_begin + sp->skv - sp->sq);
        kv_pos[b] = (int32_t)kv_begin;
        lens[b] = (int32_t)kv_len;
    }
    if (with_positions) pb.q_positions = q_pos, pb.kv_positions = kv_pos;

    fai_tensors t;
    memset(&t, 0, sizeof t);
    const int64_t q_row = sp->hq * sp->d, kv_row = sp->hkv * sp->d;
    t.q =
        (fai_tensor){(void *)(q + q_begin * q_row), FAI_DTYPE_F32, sp->sq * q_row, q_row, sp->d, 1};
    t.o = fai_tensor_bshd(o, FAI_DTYPE_F32, q_len, sp->hq, sp->d);
    t.lse = (fai_tensor){lse, FAI_DTYPE_F32, q_len * sp->hq, sp->hq, 1, 0};
    int32_t *table = NULL;
    if (sp->page_size > 0) {
        /* the whole K/V as one pool of pages; sequence b's page p is pool page b * per_seq + p,
         * and the shard's table starts at its first page */
        const int64_t per_seq = sp->skv / sp->page_size, first = kv_begin / sp->page_size;
        const int64_t width = (kv_len + sp->page_size - 1) / sp->page_size;
        table = malloc(sizeof(int32_t) * (size_t)(B * (width ? width : 1)));
        if (!table) return 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t p = 0; p < width; p++)
                table[b * width + p] = (int32_t)(b * per_seq + first + p);
        pb.page_size = sp->page_size, pb.num_pages = B * per_seq, pb.pages_per_seq = width;
        pb.seqlens_kv = lens;
        const int64_t page = sp->page_size * kv_row;
        t.k = (fai_tensor){(void *)k, FAI_DTYPE_F32, page, kv_row, sp->d, 1};
        t.v = (fai_tensor){(void *)v, FAI_DTYPE_F32, page, kv_row, sp->d, 1};
        t.block_table = table;
        t.block_table_stride = width;
    } else {
        t.k = (fai_tensor){
            (void *)(k + kv_begin * kv_row), FAI_DTYPE_F32, sp->skv * kv_row, kv_row, sp->d, 1};
        t.v = (fai_tensor){
            (void *)(v + kv_begin * kv_row), FAI_DTYPE_F32, sp->skv * kv_row, kv_row, sp->d, 1};
    }
    fai_plan *plan;
    int ok = fai_plan_create(&pb, &plan) == FAI_OK;
    if (ok) {
        const size_t bytes = fai_plan_workspace_size(plan);
        void *ws = malloc(bytes ? bytes : 1);
        ok = ws && fai_run(plan, &t, ws, bytes) == FAI_OK;
        free(ws);
        fai_plan_free(plan);
    }
    free(table);
    return ok;
}

/* Relative error of one row of O and its LSE (infinite LSEs must match exactly). */
static double row_error(const float *got, float got_lse, const float *want, float want_lse,
                        int64_t d) {
    double worst = 0.0;
    if (isinf(want_lse) || isinf(got_lse)) {
        if (want_lse != got_lse) return INFINITY;
    } else {
        worst = fabs((double)got_lse - want_lse) / fmax(1.0, fabs((double)want_lse));
    }
    for (int64_t x = 0; x < d; x++) {
        const double err = fabs((double)got[x] - want[x]) / fmax(1.0, fabs((double)want[x]));
        if (!(err <= worst)) worst = err;
    }
    return worst;
}

/* Shards Q at q_cuts and K/V at kv_cuts (each list from 0 to the length), merges each Q shard's
 * results over the K/V shards in order, and compares with the unsharded run. */
static double sharded_error(const shard_problem *sp, const int64_t *q_cuts, int q_shards,
                            const int64_t *kv_cuts, int kv_shards, uint64_t seed) {
    const int64_t B = sp->batch, q_row = sp->hq * sp->d, kv_row = sp->hkv * sp->d;
    const int64_t q_count = B * sp->sq * q_row, kv_count = B * sp->skv * kv_row;
    const int64_t rows = B * sp->sq * sp->hq;
    float *q = malloc(sizeof(float) * (size_t)q_count);
    float *k = malloc(sizeof(float) * (size_t)kv_count);
    float *v = malloc(sizeof(float) * (size_t)kv_count);
    float *o_whole = malloc(sizeof(float) * (size_t)q_count);
    float *lse_whole = malloc(sizeof(float) * (size_t)rows);
    float *o_parts = malloc(sizeof(float) * (size_t)(q_count * kv_shards));
    float *lse_parts = malloc(sizeof(float) * (size_t)(rows * kv_shards));
    float *o_merged = malloc(sizeof(float) * (size_t)q_count);
    float *lse_merged = malloc(sizeof(float) * (size_t)rows);
    double worst = INFINITY;
    if (!q || !k || !v || !o_whole || !lse_whole || !o_parts || !lse_parts || !o_merged ||
        !lse_merged)
        goto done;
    for (int64_t i = 0; i < q_count; i++)
        q[i] = uniform(&seed);
    for (int64_t i = 0; i < kv_count; i++)
        k[i] = 2.0f * uniform(&seed), v[i] = uniform(&seed);
    if (!attend_shard(sp, q, k, v, 0, sp->sq, 0, sp->skv, 0, o_whole, lse_whole)) goto done;

    worst = 0.0;
    for (int qs = 0; qs < q_shards; qs++) {
        const int64_t qb = q_cuts[qs], qe = q_cuts[qs + 1], ql = qe - qb;
        fai_tensor o_in[8], lse_in[8];
        for (int ks = 0; ks < kv_shards; ks++) {
            float *o = o_parts + ks * q_count, *lse = lse_parts + ks * rows;
            if (!attend_shard(sp, q, k, v, qb, qe, kv_cuts[ks], kv_cuts[ks + 1], 1, o, lse))
                return INFINITY;
            o_in[ks] = fai_tensor_bshd(o, FAI_DTYPE_F32, ql, sp->hq, sp->d);
            lse_in[ks] = (fai_tensor){lse, FAI_DTYPE_F32, ql * sp->hq, sp->hq, 1, 0};
        }
        const fai_tensor o_out = fai_tensor_bshd(o_merged, FAI_DTYPE_F32, ql, sp->hq, sp->d);
        const fai_tensor lse_out = {lse_merged, FAI_DTYPE_F32, ql * sp->hq, sp->hq, 1, 0};
        if (fai_merge_states(kv_shards, o_in, lse_in, B, ql, sp->hq, sp->d, &o_out, &lse_out) !=
            FAI_OK)
            return INFINITY;
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < ql; i++)
                for (int64_t h = 0; h < sp->hq; h++) {
                    const int64_t got_row = (b * ql + i) * sp->hq + h;
                    const int64_t want_row = (b * sp->sq + qb + i) * sp->hq + h;
                    const double err =
                        row_error(o_merged + got_row * sp->d, lse_merged[got_row],
                                  o_whole + want_row * sp->d, lse_whole[want_row], sp->d);
                    if (!(err <= worst)) worst = err;
                }
    }
done:
    free(q), free(k), free(v), free(o_whole), free(lse_whole), free(o_parts), free(lse_parts);
    free(o_merged), free(lse_merged);
    return worst;
}

TEST(positions_causal_prefill_sharded_q_and_kv) {
    const shard_problem sp = {2, 4, 2, 45, 45, 16, FAI_CAUSAL_BOTTOM_RIGHT, -1, 0};
    const int64_t q_cuts[] = {0, 20, 45}, kv_cuts[] = {0, 13, 30, 45};
    const double err = sharded_error(&sp, q_cuts, 2, kv_cuts, 3, 5);
    CHECK(err <= 1e-5);
    if (err > 1e-5) printf("  error %.3g\n", err);
}

TEST(positions_window_sharded) {
    /* a window of 7 behind the diagonal: most shard pairs see nothing */
    const shard_problem sp = {1, 2, 1, 60, 75, 8, FAI_CAUSAL_BOTTOM_RIGHT, 7, 0};
    const int64_t q_cuts[] = {0, 17, 33, 60}, kv_cuts[] = {0, 25, 50, 75};
    const double err = sharded_error(&sp, q_cuts, 3, kv_cuts, 3, 6);
    CHECK(err <= 1e-5);
    /* the same with causal from the top-left corner: positions fix the diagonal either way */
    shard_problem top_left = sp;
    top_left.causal = FAI_CAUSAL_TOP_LEFT;
    top_left.sq = top_left.skv = 75;
    const int64_t tl_cuts[] = {0, 30, 75};
    CHECK(sharded_error(&top_left, tl_cuts, 2, kv_cuts, 3, 7) <= 1e-5);
}

TEST(positions_decode_sharded_kv) {
    const shard_problem sp = {3, 8, 2, 1, 300, 32, FAI_CAUSAL_BOTTOM_RIGHT, -1, 0};
    const int64_t q_cuts[] = {0, 1}, kv_cuts[] = {0, 75, 150, 225, 300};
    CHECK(sharded_error(&sp, q_cuts, 1, kv_cuts, 4, 8) <= 1e-5);
    shard_problem windowed = sp;
    windowed.window_left = 100; /* the first shard sees nothing: LSE -inf, merged away */
    CHECK(sharded_error(&windowed, q_cuts, 1, kv_cuts, 4, 9) <= 1e-5);
}

TEST(positions_paged_shards) {
    const shard_problem sp = {2, 4, 1, 3, 96, 16, FAI_CAUSAL_BOTTOM_RIGHT, 40, 8};
    const int64_t q_cuts[] = {0, 3}, kv_cuts[] = {0, 32, 64, 96};
    CHECK(sharded_error(&sp, q_cuts, 1, kv_cuts, 3, 10) <= 1e-5);
}

TEST(positions_errors_name_the_field) {
    int32_t pos[2] = {0, 4}, bad[2] = {3, -3};
    fai_problem pb;
    fai_problem_init(&pb);
    pb.batch = 2, pb.heads_q = pb.heads_kv = 1, pb.seq_q = 4, pb.seq_kv = 8, pb.head_dim = 8;
    fai_plan *plan = (fai_plan *)&pb; /* must be reset to NULL on failure */
    pb.q_positions = pos;
    CHECK(fai_plan_create(&pb, &plan) == FAI_ERR_INVALID_ARG);
    CHECK(plan == NULL);
    CHECK(strstr(fai_last_error(), "kv_positions = NULL") != NULL);
    pb.q_positions = NULL, pb.kv_positions = pos;
    CHECK(fai_plan_create(&pb, &plan) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "q_positions = NULL") != NULL);
    pb.q_positions = pos, pb.kv_positions = bad;
    CHECK(fai_plan_create(&pb, &plan) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "kv_positions[1] = -3 is negative") != NULL);
    pb.q_positions = bad, pb.kv_positions = pos;
    CHECK(fai_plan_create(&pb, &plan) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "q_positions[1] = -3") != NULL);
    pb.q_positions = pb.kv_positions = pos;
    REQUIRE(fai_plan_create(&pb, &plan) == FAI_OK);
    fai_plan_free(plan);
}
