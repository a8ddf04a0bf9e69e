/* fai_mpi_attention: K/V sharded across the ranks (dense or paged, each rank with its own pool
 * and block table, quantized K/V with the scales of the shard's keys), the same Q everywhere;
 * equal to fai on the whole sequence on one process, and bitwise the same on every rank that
 * receives it. */
#include "test_mpi_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SENTINEL 0xab
#define GARBAGE 37.0f /* in page slots past a length: never read */

typedef struct kv_case {
    int64_t batch, hq, hkv, sq, skv, d, dv;
    fai_dtype q_dtype, kv_dtype, o_dtype;
    fai_causal causal;
    int64_t window_left, window_right;
    const int32_t *seqlens_q, *seqlens_kv;
    int64_t page_size;    /* 0: dense shards */
    int explicit_q_start; /* pass q_start rather than let the library place the queries */
    int shard_padded;     /* dense: shard [0, skv) alike for every sequence, so that shards may
                             start past a sequence's length (and hold none of its keys) */
    int root;             /* FAI_MPI_ALL_RANKS or a rank */
    float softcap;        /* score modifiers: soft-capping, ALiBi and sinks over the shards */
    int alibi, sinks;
    int k_scale_kind, v_scale_kind; /* a quantized kv_dtype: TEST_SCALE_* of K and V */
} kv_case;

static kv_case kv_case_of(int64_t batch, int64_t hq, int64_t hkv, int64_t sq, int64_t skv,
                          int64_t d) {
    kv_case c;
    memset(&c, 0, sizeof c);
    c.batch = batch, c.hq = hq, c.hkv = hkv, c.sq = sq, c.skv = skv, c.d = d, c.dv = d;
    c.q_dtype = c.kv_dtype = c.o_dtype = FAI_DTYPE_F32;
    c.window_left = c.window_right = -1;
    c.root = FAI_MPI_ALL_RANKS;
    return c;
}

/* The whole problem and tensors, and the reference computed from them. */
typedef struct whole_data {
    fai_problem problem;
    fai_tensors tensors;
    float *kf, *vf; /* K and V values, f32 [B, Skv, Hkv, D|Dv] */
    float *ks, *vs; /* quantized: the scale of each (b, s, h), [B, Skv, Hkv] */
    void *q, *k, *v;
    float *o_ref, *lse_ref;
    float slopes[64], sinks[64]; /* per query head */
} whole_data;

static int make_whole(const kv_case *c, uint64_t seed, whole_data *w) {
    memset(w, 0, sizeof *w);
    const int64_t q_count = c->batch * c->sq * c->hq * c->d;
    const int64_t k_count = c->batch * c->skv * c->hkv * c->d;
    const int64_t v_count = c->batch * c->skv * c->hkv * c->dv;
    float *qf = test_alloc(sizeof(float) * (size_t)q_count);
    w->kf = test_alloc(sizeof(float) * (size_t)k_count);
    w->vf = test_alloc(sizeof(float) * (size_t)v_count);
    test_fill(qf, q_count, seed);
    test_fill(w->kf, k_count, seed + 1);
    test_fill(w->vf, v_count, seed + 2);
    w->q = test_alloc(fai_dtype_size(c->q_dtype) * (size_t)q_count);
    w->k = test_alloc(fai_dtype_size(c->kv_dtype) * (size_t)k_count);
    w->v = test_alloc(fai_dtype_size(c->kv_dtype) * (size_t)v_count);
    const int64_t kv_rows = c->batch * c->skv * c->hkv;
    w->ks = test_alloc(sizeof(float) * (size_t)kv_rows);
    w->vs = test_alloc(sizeof(float) * (size_t)kv_rows);
    test_scales(w->ks, c->kv_dtype, c->k_scale_kind, c->batch, c->skv, c->hkv);
    test_scales(w->vs, c->kv_dtype, c->v_scale_kind, c->batch, c->skv, c->hkv);
    test_encode(w->q, c->q_dtype, qf, q_count);
    test_encode_rows(w->k, c->kv_dtype, w->kf, w->ks, kv_rows, c->d);
    test_encode_rows(w->v, c->kv_dtype, w->vf, w->vs, kv_rows, c->dv);
    free(qf);

    fai_problem *pb = &w->problem;
    fai_problem_init(pb);
    pb->batch = c->batch, pb->heads_q = c->hq, pb->heads_kv = c->hkv;
    pb->seq_q = c->sq, pb->seq_kv = c->skv, pb->head_dim = c->d, pb->head_dim_v = c->dv;
    pb->q_dtype = c->q_dtype, pb->k_dtype = pb->v_dtype = c->kv_dtype;
    pb->o_dtype = c->o_dtype;
    pb->causal = c->causal;
    pb->window_left = c->window_left, pb->window_right = c->window_right;
    pb->seqlens_q = c->seqlens_q, pb->seqlens_kv = c->seqlens_kv;
    pb->threads = 1, pb->workers = 2;
    pb->softcap = c->softcap, pb->alibi = c->alibi, pb->sinks = c->sinks;
    fai_alibi_slopes(c->hq, w->slopes);
    for (int64_t h = 0; h < c->hq; h++)
        w->sinks[h] = h % 4 == 3 ? -INFINITY : (float)(h % 3) - 0.75f;
    w->tensors.alibi_slopes = c->alibi ? w->slopes : NULL;
    w->tensors.sinks = c->sinks ? w->sinks : NULL;
    w->tensors.q = fai_tensor_bshd(w->q, c->q_dtype, c->sq, c->hq, c->d);
    w->tensors.k = fai_tensor_bshd(w->k, c->kv_dtype, c->skv, c->hkv, c->d);
    w->tensors.v = fai_tensor_bshd(w->v, c->kv_dtype, c->skv, c->hkv, c->dv);
    w->tensors.k_scale = test_scales_of(c->kv_dtype, w->ks, c->k_scale_kind, c->skv, c->hkv);
    w->tensors.v_scale = test_scales_of(c->kv_dtype, w->vs, c->v_scale_kind, c->skv, c->hkv);
    w->o_ref = test_alloc(sizeof(float) * (size_t)(c->batch * c->sq * c->hq * c->dv));
    w->lse_ref = test_alloc(sizeof(float) * (size_t)(c->batch * c->hq * c->sq));
    return test_reference(pb, &w->tensors, w->o_ref, w->lse_ref);
}

static void free_whole(whole_data *w) {
    free(w->kf), free(w->vf), free(w->ks), free(w->vs), free(w->q), free(w->k), free(w->v);
    free(w->o_ref);
    free(w->lse_ref);
}

/* This rank's shard of the keys: the problem, K/V (dense rows or its own page pool and block
 * table) and where each sequence's shard starts. */
typedef struct shard_data {
    fai_problem problem;
    fai_tensors tensors;
    int32_t *kv_start, *q_start, *lens;
    int32_t *table;
    void *k, *v;
    float *ks, *vs; /* quantized: the scale of each (row, h) of the shard's K and V */
} shard_data;

static int64_t whole_key_length(const kv_case *c, int64_t b) {
    return c->seqlens_kv ? c->seqlens_kv[b] : c->skv;
}

/* Copies key rows [first, first + count) of sequence b into the shard's rows from `to` (rows of
 * Hkv heads), and the scales of those rows. */
static void copy_keys(const kv_case *c, const whole_data *w, int64_t b, int64_t first,
                      int64_t count, shard_data *s, int64_t to) {
    const int64_t k_row = c->hkv * c->d, v_row = c->hkv * c->dv, from = b * c->skv + first;
    const size_t es = fai_dtype_size(c->kv_dtype), rows = (size_t)count;
    memcpy((char *)s->k + es * (size_t)(to * k_row),
           (const char *)w->k + es * (size_t)(from * k_row), es * rows * (size_t)k_row);
    memcpy((char *)s->v + es * (size_t)(to * v_row),
           (const char *)w->v + es * (size_t)(from * v_row), es * rows * (size_t)v_row);
    memcpy(s->ks + to * c->hkv, w->ks + from * c->hkv, sizeof(float) * rows * (size_t)c->hkv);
    memcpy(s->vs + to * c->hkv, w->vs + from * c->hkv, sizeof(float) * rows * (size_t)c->hkv);
}

/* The shard's scales: per token its own rows (blocks of `rows_per_block`), else the whole's. */
static void shard_scales(const kv_case *c, const whole_data *w, shard_data *s,
                         int64_t rows_per_block) {
    const int kinds[2] = {c->k_scale_kind, c->v_scale_kind};
    float *own[2] = {s->ks, s->vs}, *whole[2] = {w->ks, w->vs};
    fai_scale *dst[2] = {&s->tensors.k_scale, &s->tensors.v_scale};
    for (int i = 0; i < 2; i++)
        *dst[i] = test_scales_of(c->kv_dtype, kinds[i] == TEST_SCALE_TOKEN ? own[i] : whole[i],
                                 kinds[i], rows_per_block, c->hkv);
}

static void make_dense_shard(const kv_case *c, const whole_data *w, shard_data *s) {
    int64_t longest = 0, start, len;
    for (int64_t b = 0; b < c->batch; b++) {
        const int64_t length = whole_key_length(c, b);
        fai_mpi_split_range(c->shard_padded ? c->skv : length, test_size, test_rank, &start, &len);
        if (start + len > length) len = length > start ? length - start : 0;
        s->kv_start[b] = (int32_t)start, s->lens[b] = (int32_t)len;
        if (len > longest) longest = len;
    }
    const size_t es = fai_dtype_size(c->kv_dtype);
    s->k = test_alloc(es * (size_t)(c->batch * longest * c->hkv * c->d));
    s->v = test_alloc(es * (size_t)(c->batch * longest * c->hkv * c->dv));
    s->ks = test_alloc(sizeof(float) * (size_t)(c->batch * longest * c->hkv));
    s->vs = test_alloc(sizeof(float) * (size_t)(c->batch * longest * c->hkv));
    for (int64_t b = 0; b < c->batch; b++)
        copy_keys(c, w, b, s->kv_start[b], s->lens[b], s, b * longest);
    shard_scales(c, w, s, longest);
    s->problem.seq_kv = longest;
    /* a whole without lengths shards every sequence alike: the shard needs none either */
    s->problem.seqlens_kv = c->seqlens_kv ? s->lens : NULL;
    s->tensors.k = fai_tensor_bshd(s->k, c->kv_dtype, longest, c->hkv, c->d);
    s->tensors.v = fai_tensor_bshd(s->v, c->kv_dtype, longest, c->hkv, c->dv);
}

/* Pages of each sequence are split across the ranks; a rank's pool holds its pages in reversed
 * order (so the table is no identity), and one page more than needed. */
static void make_paged_shard(const kv_case *c, const whole_data *w, shard_data *s) {
    const int64_t ps = c->page_size;
    int64_t first_page[64], pages[64], widest = 1, total = 0;
    for (int64_t b = 0; b < c->batch; b++) {
        const int64_t length = whole_key_length(c, b);
        fai_mpi_split_range((length + ps - 1) / ps, test_size, test_rank, &first_page[b],
                            &pages[b]);
        const int64_t begin = first_page[b] * ps;
        const int64_t end =
            (first_page[b] + pages[b]) * ps < length ? (first_page[b] + pages[b]) * ps : length;
        s->kv_start[b] = (int32_t)begin;
        s->lens[b] = (int32_t)(end > begin ? end - begin : 0);
        if (pages[b] > widest) widest = pages[b];
        total += pages[b];
    }
    const int64_t pool = total + 1, k_page = ps * c->hkv * c->d, v_page = ps * c->hkv * c->dv;
    const size_t es = fai_dtype_size(c->kv_dtype);
    s->k = test_alloc(es * (size_t)(pool * k_page));
    s->v = test_alloc(es * (size_t)(pool * v_page));
    s->table = test_alloc(sizeof(int32_t) * (size_t)(c->batch * widest));
    float *garbage = test_alloc(sizeof(float) * (size_t)(pool * (k_page + v_page)));
    for (int64_t i = 0; i < pool * (k_page + v_page); i++)
        garbage[i] = GARBAGE;
    test_encode(s->k, c->kv_dtype, garbage, pool * k_page); /* quantized: left 0 */
    test_encode(s->v, c->kv_dtype, garbage + pool * k_page, pool * v_page);
    free(garbage);
    /* scales of slots that hold no key: NaN, which fai refuses to read */
    s->ks = test_alloc(sizeof(float) * (size_t)(pool * ps * c->hkv));
    s->vs = test_alloc(sizeof(float) * (size_t)(pool * ps * c->hkv));
    for (int64_t i = 0; i < pool * ps * c->hkv; i++)
        s->ks[i] = s->vs[i] = NAN;
    int64_t used = 0;
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t p = 0; p < pages[b]; p++) {
            const int64_t page = pool - 1 - used++;
            s->table[b * widest + p] = (int32_t)page;
            const int64_t first = (first_page[b] + p) * ps;
            const int64_t rest = whole_key_length(c, b) - first;
            copy_keys(c, w, b, first, rest < ps ? rest : ps, s, page * ps);
        }
    s->problem.seq_kv = 0;
    s->problem.page_size = ps, s->problem.num_pages = pool, s->problem.pages_per_seq = widest;
    s->problem.seqlens_kv = s->lens;
    s->tensors.k = fai_tensor_bshd(s->k, c->kv_dtype, ps, c->hkv, c->d);
    s->tensors.v = fai_tensor_bshd(s->v, c->kv_dtype, ps, c->hkv, c->dv);
    s->tensors.block_table = s->table;
    shard_scales(c, w, s, ps);
}

static void make_shard(const kv_case *c, const whole_data *w, shard_data *s) {
    memset(s, 0, sizeof *s);
    s->problem = w->problem;
    s->tensors.q = w->tensors.q;
    s->tensors.alibi_slopes = w->tensors.alibi_slopes;
    s->tensors.sinks = w->tensors.sinks;
    s->kv_start = test_alloc(sizeof(int32_t) * (size_t)c->batch);
    s->q_start = test_alloc(sizeof(int32_t) * (size_t)c->batch);
    s->lens = test_alloc(sizeof(int32_t) * (size_t)c->batch);
    if (c->page_size)
        make_paged_shard(c, w, s);
    else
        make_dense_shard(c, w, s);
    /* explicit query positions: where fai puts the queries of the whole, shifted up with the
     * keys when they would start before 0 */
    for (int64_t b = 0; b < c->batch; b++) {
        const int64_t q_len = c->seqlens_q ? c->seqlens_q[b] : c->sq;
        int64_t q0 = c->causal == FAI_CAUSAL_TOP_LEFT ? 0 : whole_key_length(c, b) - q_len;
        const int64_t shift = q0 < 0 ? -q0 : 0;
        s->q_start[b] = (int32_t)(q0 + shift);
        if (c->explicit_q_start) s->kv_start[b] += (int32_t)shift;
    }
}

static void free_shard(shard_data *s) {
    free(s->kv_start), free(s->q_start), free(s->lens), free(s->table), free(s->k), free(s->v);
    free(s->ks), free(s->vs);
}

static uint64_t checksum(const void *data, size_t bytes) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < bytes; i++)
        h = (h ^ ((const unsigned char *)data)[i]) * 1099511628211ull;
    return h;
}

static int untouched(const void *data, size_t bytes) {
    for (size_t i = 0; i < bytes; i++)
        if (((const unsigned char *)data)[i] != SENTINEL) return 0;
    return 1;
}

/* Runs the case sharded over all ranks; 1 if this rank's view of it is right. */
static int run_kv_case(const kv_case *c, uint64_t seed) {
    whole_data w;
    shard_data s;
    int ok = make_whole(c, seed, &w) == 0;
    make_shard(c, &w, &s);
    const int64_t o_count = c->batch * c->sq * c->hq * c->dv, lse_count = c->batch * c->hq * c->sq;
    const size_t o_bytes = fai_dtype_size(c->o_dtype) * (size_t)o_count;
    void *o = test_alloc(o_bytes);
    float *lse = test_alloc(sizeof(float) * (size_t)lse_count);
    memset(o, SENTINEL, o_bytes);
    memset(lse, SENTINEL, sizeof(float) * (size_t)lse_count);
    s.tensors.o = fai_tensor_bshd(o, c->o_dtype, c->sq, c->hq, c->dv);
    s.tensors.lse = (fai_tensor){lse, FAI_DTYPE_F32, c->hq * c->sq, 1, c->sq, 0};

    fai_mpi_stats stats;
    const fai_status status =
        fai_mpi_attention(MPI_COMM_WORLD, &s.problem, s.kv_start,
                          c->explicit_q_start ? s.q_start : NULL, &s.tensors, c->root, &stats);
    if (status != FAI_OK) {
        fprintf(stderr, "  rank %d: %s: %s\n", test_rank, fai_status_string(status),
                fai_mpi_last_error());
        ok = 0;
    }
    const int receives = c->root < 0 || c->root == test_rank;
    if (ok && receives) {
        const int low = c->q_dtype != FAI_DTYPE_F32 || c->kv_dtype != FAI_DTYPE_F32;
        const double o_err = test_o_excess(o, c->o_dtype, low, w.o_ref, o_count);
        const double lse_err = test_lse_excess(lse, low, w.lse_ref, lse_count);
        if (o_err > 0 || lse_err > 0) {
            fprintf(stderr, "  rank %d: O exceeds the tolerance by %.3g, LSE by %.3g\n", test_rank,
                    o_err, lse_err);
            ok = 0;
        }
    } else if (ok && !(untouched(o, o_bytes) && untouched(lse, sizeof(float) * lse_count))) {
        fprintf(stderr, "  rank %d: O or LSE written on a rank that is not the root\n", test_rank);
        ok = 0;
    }
    if (ok && stats.pairs_computed != 1) ok = 0;
    /* every receiving rank holds the same bits */
    uint64_t sums[2] = {0, UINT64_MAX};
    if (receives) sums[0] = sums[1] = checksum(o, o_bytes) ^ checksum(lse, 4 * (size_t)lse_count);
    MPI_Allreduce(MPI_IN_PLACE, &sums[0], 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &sums[1], 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    if (sums[0] != sums[1]) {
        fprintf(stderr, "  rank %d: the ranks' results differ\n", test_rank);
        ok = 0;
    }
    free(o), free(lse);
    free_shard(&s);
    free_whole(&w);
    return ok;
}

/* Both ways of placing the queries: given, and derived from the agreed sequence length. */
static int run_both_placements(kv_case c, uint64_t seed) {
    c.explicit_q_start = 0;
    const int derived = run_kv_case(&c, seed);
    c.explicit_q_start = 1;
    return run_kv_case(&c, seed) && derived;
}

TEST(mpi_decode_dense_gqa) {
    kv_case c = kv_case_of(3, 8, 2, 1, 301, 32); /* 301 keys: shards of 76, 75, 75, 75 */
    c.causal = FAI_CAUSAL_BOTTOM_RIGHT;
    CHECK(run_both_placements(c, 1));
    c.causal = FAI_CAUSAL_NONE;
    c.hkv = 1; /* MQA */
    CHECK(run_both_placements(c, 2));
}

TEST(mpi_decode_paged_own_pools) {
    static const int32_t lens[3] = {200, 77, 5}; /* the last sequence has keys on rank 0 only */
    kv_case c = kv_case_of(3, 8, 2, 1, 200, 32);
    c.seqlens_kv = lens, c.page_size = 16, c.causal = FAI_CAUSAL_BOTTOM_RIGHT;
    c.kv_dtype = FAI_DTYPE_F16, c.o_dtype = FAI_DTYPE_F16;
    CHECK(run_both_placements(c, 3));
    c.q_dtype = c.kv_dtype = c.o_dtype = FAI_DTYPE_BF16;
    c.page_size = 7;
    CHECK(run_both_placements(c, 4));
}

TEST(mpi_decode_gathered_on_a_root) {
    static const int32_t lens[2] = {150, 64};
    kv_case c = kv_case_of(2, 4, 2, 2, 150, 16);
    c.seqlens_kv = lens, c.page_size = 8, c.causal = FAI_CAUSAL_BOTTOM_RIGHT;
    for (int root = 0; root < test_size; root += 2) {
        c.root = root;
        CHECK(run_both_placements(c, 5 + (uint64_t)root));
    }
}

TEST(mpi_prefill_causal_same_q) {
    kv_case c = kv_case_of(2, 4, 2, 40, 40, 16); /* a whole prompt against sharded K/V */
    c.causal = FAI_CAUSAL_BOTTOM_RIGHT;
    CHECK(run_both_placements(c, 10));
    c.causal = FAI_CAUSAL_TOP_LEFT;
    CHECK(run_both_placements(c, 11));
    static const int32_t q_lens[2] = {16, 9}; /* chunked prefill, the second chunk padded */
    c = kv_case_of(2, 4, 2, 16, 200, 16);
    c.causal = FAI_CAUSAL_BOTTOM_RIGHT, c.seqlens_q = q_lens;
    c.q_dtype = FAI_DTYPE_BF16, c.kv_dtype = FAI_DTYPE_F16, c.o_dtype = FAI_DTYPE_BF16;
    CHECK(run_both_placements(c, 12));
    c = kv_case_of(1, 2, 1, 30, 20, 8); /* more queries than keys: the first see nothing */
    c.causal = FAI_CAUSAL_BOTTOM_RIGHT;
    CHECK(run_both_placements(c, 13));
}

TEST(mpi_window_masks) {
    kv_case c = kv_case_of(2, 4, 1, 1, 301, 16); /* decode: the first shards see nothing */
    c.causal = FAI_CAUSAL_BOTTOM_RIGHT, c.window_left = 50;
    CHECK(run_both_placements(c, 20));
    c = kv_case_of(1, 4, 2, 48, 48, 16); /* prefill, a window on both sides, no causal */
    c.window_left = 5, c.window_right = 3;
    CHECK(run_both_placements(c, 21));
    c.causal = FAI_CAUSAL_BOTTOM_RIGHT, c.window_left = 7, c.window_right = -1;
    CHECK(run_both_placements(c, 22));
    static const int32_t lens[1] = {90}; /* paged, a window across page and shard edges */
    c = kv_case_of(1, 4, 2, 3, 96, 16);
    c.seqlens_kv = lens, c.page_size = 8, c.causal = FAI_CAUSAL_BOTTOM_RIGHT, c.window_left = 30;
    CHECK(run_both_placements(c, 23));
}

TEST(mpi_shards_past_a_sequence_end) {
    static const int32_t lens[2] = {50, 9}; /* sequence 1 has keys on rank 0 only */
    kv_case c = kv_case_of(2, 4, 2, 6, 50, 16);
    c.seqlens_kv = lens, c.shard_padded = 1, c.causal = FAI_CAUSAL_BOTTOM_RIGHT;
    CHECK(run_both_placements(c, 25));
    c.causal = FAI_CAUSAL_NONE, c.window_left = 4, c.window_right = 1;
    CHECK(run_both_placements(c, 26));
}

TEST(mpi_head_dims_differ) {
    kv_case c = kv_case_of(1, 3, 3, 5, 33, 24);
    c.dv = 40, c.causal = FAI_CAUSAL_BOTTOM_RIGHT;
    CHECK(run_both_placements(c, 30));
}

/* Soft-capping, ALiBi (global positions: the bias of a key is the same on whichever shard it
 * sits) and sinks (counted once, in the merge, also for rows no shard gives a key), decode and
 * prefill, dense and paged. */
TEST(mpi_score_modifiers) {
    kv_case c = kv_case_of(2, 8, 2, 1, 301, 32);
    c.causal = FAI_CAUSAL_BOTTOM_RIGHT;
    c.alibi = c.sinks = 1;
    CHECK(run_both_placements(c, 40));
    c.softcap = 3.0f, c.window_left = 60; /* the first shards see nothing: the sink alone */
    CHECK(run_both_placements(c, 41));
    static const int32_t lens[2] = {120, 37};
    c = kv_case_of(2, 4, 2, 12, 120, 16);
    c.seqlens_kv = lens, c.page_size = 8, c.causal = FAI_CAUSAL_BOTTOM_RIGHT;
    c.kv_dtype = FAI_DTYPE_BF16, c.o_dtype = FAI_DTYPE_F16;
    c.softcap = 20.0f, c.alibi = 1, c.sinks = 1;
    CHECK(run_both_placements(c, 42));
    c.root = 0;
    c.alibi = 0;
    CHECK(run_both_placements(c, 43));
    /* rows past a sequence's queries stay empty (O = 0, LSE = -inf) with sinks too, as fai
     * leaves them: the sink joins the rows of queries only */
    static const int32_t q_lens[2] = {1, 3};
    c = kv_case_of(2, 4, 2, 3, 40, 16);
    c.seqlens_q = q_lens, c.causal = FAI_CAUSAL_BOTTOM_RIGHT, c.sinks = 1;
    CHECK(run_both_placements(c, 44));
}

/* Quantized K and V: each shard with the scales of its own keys (per token: the shard's rows, or
 * its pages' slots), or the whole's per kv head and per tensor; decode and prefill, dense and
 * paged, int8 and fp8. */
TEST(mpi_quantized_kv) {
    kv_case c = kv_case_of(3, 8, 2, 1, 301, 32);
    c.causal = FAI_CAUSAL_BOTTOM_RIGHT;
    c.kv_dtype = FAI_DTYPE_I8, c.k_scale_kind = c.v_scale_kind = TEST_SCALE_TOKEN;
    CHECK(run_both_placements(c, 50));
    c.kv_dtype = FAI_DTYPE_E4M3, c.k_scale_kind = TEST_SCALE_HEAD;
    c.v_scale_kind = TEST_SCALE_TENSOR;
    CHECK(run_both_placements(c, 51));
    static const int32_t lens[2] = {120, 37};
    c = kv_case_of(2, 4, 2, 12, 120, 16);
    c.seqlens_kv = lens, c.page_size = 8, c.causal = FAI_CAUSAL_BOTTOM_RIGHT;
    c.kv_dtype = FAI_DTYPE_E5M2, c.o_dtype = FAI_DTYPE_F16;
    c.k_scale_kind = TEST_SCALE_TOKEN, c.v_scale_kind = TEST_SCALE_HEAD;
    CHECK(run_both_placements(c, 52));
    c.kv_dtype = FAI_DTYPE_I8, c.v_scale_kind = TEST_SCALE_TOKEN, c.root = 0;
    CHECK(run_both_placements(c, 53));
}
