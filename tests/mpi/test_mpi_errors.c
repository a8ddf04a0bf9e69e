/* Bad input on one rank makes every rank fail alike, with that rank's message, without writing
 * O or LSE and without hanging (the test's timeout would catch a hang). A check passes only when
 * it passes on every rank. */
#include "test_mpi_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SENTINEL 0x5c

/* A small decode shard: B = 2, Hq = 8, Hkv = 2, D = 16; 16 dense keys per rank, or 2 pages of 8. */
typedef struct decode_fixture {
    fai_problem problem;
    fai_tensors tensors;
    int32_t kv_start[2], q_start[2], lens[2], table[4];
    float q[2 * 8 * 16], k[2 * 16 * 2 * 16], v[2 * 16 * 2 * 16];
    float o[2 * 2 * 8 * 16], lse[2 * 8 * 2];
} decode_fixture;

static int bad_rank(void) { return test_size > 2 ? 2 : test_size - 1; }

static void decode_fixture_init(decode_fixture *f, int paged) {
    memset(f, 0, sizeof *f);
    fai_problem_init(&f->problem);
    fai_problem *pb = &f->problem;
    pb->batch = 2, pb->heads_q = 8, pb->heads_kv = 2, pb->seq_q = 1, pb->head_dim = 16;
    pb->k_dtype = pb->v_dtype = FAI_DTYPE_F32, pb->causal = FAI_CAUSAL_BOTTOM_RIGHT;
    pb->threads = 1;
    test_fill(f->q, 2 * 8 * 16, 90);
    test_fill(f->k, 2 * 16 * 2 * 16, 91 + (uint64_t)test_rank);
    test_fill(f->v, 2 * 16 * 2 * 16, 95 + (uint64_t)test_rank);
    f->tensors.q = fai_tensor_bshd(f->q, FAI_DTYPE_F32, 1, 8, 16);
    for (int b = 0; b < 2; b++) {
        f->kv_start[b] = 16 * test_rank, f->lens[b] = 16;
        f->q_start[b] = 16 * test_size - 1;
    }
    if (paged) { /* a pool of 4 pages of 8 keys: pages 0, 1 for sequence 0; 2, 3 for 1 */
        pb->page_size = 8, pb->num_pages = 4, pb->pages_per_seq = 2, pb->seqlens_kv = f->lens;
        for (int i = 0; i < 4; i++)
            f->table[i] = i;
        f->tensors.k = fai_tensor_bshd(f->k, FAI_DTYPE_F32, 8, 2, 16);
        f->tensors.v = fai_tensor_bshd(f->v, FAI_DTYPE_F32, 8, 2, 16);
        f->tensors.block_table = f->table;
    } else {
        pb->seq_kv = 16;
        f->tensors.k = fai_tensor_bshd(f->k, FAI_DTYPE_F32, 16, 2, 16);
        f->tensors.v = fai_tensor_bshd(f->v, FAI_DTYPE_F32, 16, 2, 16);
    }
    memset(f->o, SENTINEL, sizeof f->o);
    memset(f->lse, SENTINEL, sizeof f->lse);
    f->tensors.o = fai_tensor_bshd(f->o, FAI_DTYPE_F32, 1, 8, 16);
    f->tensors.lse = (fai_tensor){f->lse, FAI_DTYPE_F32, 8, 1, 1, 0};
}

static int outputs_untouched(const decode_fixture *f) {
    const unsigned char *o = (const unsigned char *)f->o, *lse = (const unsigned char *)f->lse;
    for (size_t i = 0; i < sizeof f->o; i++)
        if (o[i] != SENTINEL) return 0;
    for (size_t i = 0; i < sizeof f->lse; i++)
        if (lse[i] != SENTINEL) return 0;
    return 1;
}

/* Every rank got `want`, a message holding each of the needles, and kept its outputs. */
static int failed_alike(fai_status got, fai_status want, const decode_fixture *f,
                        const char *needle1, const char *needle2) {
    const char *msg = fai_mpi_last_error();
    const int ok = got == want && strstr(msg, needle1) && (!needle2 || strstr(msg, needle2)) &&
                   (!f || outputs_untouched(f));
    if (!ok)
        fprintf(stderr, "  rank %d: %s: '%s' (wanted %s with '%s')\n", test_rank,
                fai_status_string(got), msg, fai_status_string(want), needle1);
    return ok;
}

static fai_status attend(decode_fixture *f, int explicit_q) {
    return fai_mpi_attention(MPI_COMM_WORLD, &f->problem, f->kv_start,
                             explicit_q ? f->q_start : NULL, &f->tensors, FAI_MPI_ALL_RANKS, NULL);
}

TEST(mpi_error_bad_head_count_on_one_rank) {
    char where[32];
    snprintf(where, sizeof where, "rank %d: ", bad_rank());
    for (int explicit_q = 0; explicit_q < 2; explicit_q++) {
        decode_fixture f;
        decode_fixture_init(&f, 0);
        if (test_rank == bad_rank()) f.problem.heads_kv = 3;
        CHECK(failed_alike(attend(&f, explicit_q), FAI_ERR_INVALID_ARG, &f, where, "heads_kv"));
    }
    /* and the same fixture, unchanged, succeeds: the failure came from the bad rank alone */
    decode_fixture f;
    decode_fixture_init(&f, 0);
    CHECK(attend(&f, 1) == FAI_OK);
    CHECK(!outputs_untouched(&f));
}

TEST(mpi_error_negative_length_on_one_rank) {
    char where[32];
    snprintf(where, sizeof where, "rank %d: ", bad_rank());
    for (int explicit_q = 0; explicit_q < 2; explicit_q++) {
        decode_fixture f;
        decode_fixture_init(&f, 1);
        if (test_rank == bad_rank()) f.lens[1] = -4;
        CHECK(failed_alike(attend(&f, explicit_q), FAI_ERR_INVALID_ARG, &f, where, "-4"));
    }
    decode_fixture f;
    decode_fixture_init(&f, 1);
    if (test_rank == bad_rank()) f.kv_start[0] = -16;
    CHECK(failed_alike(attend(&f, 1), FAI_ERR_INVALID_ARG, &f, where, "kv_start[0] = -16"));
}

TEST(mpi_error_bad_tensors_on_one_rank) {
    char where[32];
    snprintf(where, sizeof where, "rank %d: ", bad_rank());
    decode_fixture f;
    decode_fixture_init(&f, 1);
    if (test_rank == bad_rank()) f.table[3] = 4; /* outside the pool of 4 pages */
    CHECK(failed_alike(attend(&f, 1), FAI_ERR_INVALID_ARG, &f, where, "block_table"));
    decode_fixture_init(&f, 0);
    if (test_rank == bad_rank()) f.tensors.v.data = NULL;
    CHECK(failed_alike(attend(&f, 0), FAI_ERR_INVALID_ARG, &f, where, NULL));
    decode_fixture_init(&f, 0);
    if (test_rank == bad_rank()) f.tensors.o.dtype = FAI_DTYPE_F16; /* the problem says f32 */
    CHECK(failed_alike(attend(&f, 1), FAI_ERR_INVALID_ARG, &f, where, "tensors.o.dtype"));
}

TEST(mpi_error_first_failing_rank_reports) {
    decode_fixture f;
    decode_fixture_init(&f, 0);
    if (test_rank % 2 == 1) f.problem.head_dim = 0; /* ranks 1 and 3 fail: rank 1 speaks */
    const fai_status status = attend(&f, 1);
    CHECK(test_size == 1 || failed_alike(status, FAI_ERR_INVALID_ARG, &f, "rank 1: ", "head_dim"));
}

TEST(mpi_error_ranks_disagree_on_shapes) {
    decode_fixture f;
    decode_fixture_init(&f, 0);
    if (test_rank == test_size - 1) { /* two queries: partials of another size */
        f.problem.seq_q = 2;
        f.tensors.q = fai_tensor_bshd(f.q, FAI_DTYPE_F32, 1, 8, 16);
        f.tensors.q.stride_batch = 0; /* both sequences read the same query rows */
        f.tensors.o = fai_tensor_bshd(f.o, FAI_DTYPE_F32, 2, 8, 16);
        f.tensors.lse = (fai_tensor){f.lse, FAI_DTYPE_F32, 16, 1, 2, 0};
    }
    const fai_status status = attend(&f, 1);
    CHECK(test_size == 1 || failed_alike(status, FAI_ERR_INVALID_ARG, &f, "disagree", "seq_q"));
}

/* Per-sequence queries the ranks hold differently (a length through seqlens_q, a q_start): each
 * rank alone would run, and the merge would be silently wrong; refused on every rank alike. */
TEST(mpi_error_ranks_disagree_on_queries) {
    decode_fixture f;
    decode_fixture_init(&f, 0);
    f.problem.seq_q = 2;
    f.tensors.q = fai_tensor_bshd(f.q, FAI_DTYPE_F32, 2, 8, 16);
    f.tensors.q.stride_batch = 0; /* both sequences read the same query rows */
    f.tensors.o = fai_tensor_bshd(f.o, FAI_DTYPE_F32, 2, 8, 16);
    f.tensors.lse = (fai_tensor){f.lse, FAI_DTYPE_F32, 16, 1, 2, 0};
    int32_t lengths[2] = {2, 1};
    if (test_rank == test_size - 1) f.problem.seqlens_q = lengths;
    CHECK(test_size == 1 || failed_alike(attend(&f, 1), FAI_ERR_INVALID_ARG, &f, "disagree",
                                         "query length (seq_q, seqlens_q or cu_seqlens_q) of "
                                         "sequence 1: from 1 to 2"));
    f.problem.seqlens_q = NULL;
    if (test_rank == test_size - 1) f.q_start[0] += 1;
    CHECK(test_size == 1 || failed_alike(attend(&f, 1), FAI_ERR_INVALID_ARG, &f, "disagree",
                                         "q_start of sequence 0"));
}

/* What the ranks must hold alike but that each rank alone would accept: caught before any
 * collective that depends on it, so no rank waits in a collective the others skipped. */
TEST(mpi_error_ranks_disagree_on_arguments) {
    if (test_size == 1) return;
    decode_fixture f;
    decode_fixture_init(&f, 0);
    /* q_start on one rank only: the others would agree on the sequence lengths first */
    const fai_status status = attend(&f, test_rank == 0);
    CHECK(failed_alike(status, FAI_ERR_INVALID_ARG, &f, "disagree", "q_start"));
    decode_fixture_init(&f, 0);
    if (test_rank == bad_rank()) f.problem.scale = 3.0f;
    CHECK(failed_alike(attend(&f, 1), FAI_ERR_INVALID_ARG, &f, "disagree", "scale"));
    /* the default scale on some ranks and its value (1/sqrt(16)) written out on others agree */
    decode_fixture_init(&f, 0);
    if (test_rank == bad_rank()) f.problem.scale = 0.25f;
    CHECK(attend(&f, 1) == FAI_OK);
    decode_fixture_init(&f, 0);
    if (test_rank == bad_rank()) f.problem.k_dtype = FAI_DTYPE_F16;
    CHECK(failed_alike(attend(&f, 1), FAI_ERR_INVALID_ARG, &f, "disagree", "k_dtype"));
}

/* An output dtype fai does not write fails on every rank, the ranks that receive nothing too. */
TEST(mpi_error_bad_output_dtype) {
    decode_fixture f;
    decode_fixture_init(&f, 0);
    f.problem.o_dtype = (fai_dtype)7;
    CHECK(failed_alike(
        fai_mpi_attention(MPI_COMM_WORLD, &f.problem, f.kv_start, f.q_start, &f.tensors, 0, NULL),
        FAI_ERR_INVALID_ARG, &f, "rank 0: ", "o_dtype = 7"));
}

/* Output strides that reach past 2^63 bytes, on one rank with every rank receiving the result:
 * refused before any rank writes, on every rank alike (the merge would refuse them only after
 * the ranks agreed). */
TEST(mpi_error_output_strides_past_the_address_space) {
    decode_fixture f;
    decode_fixture_init(&f, 0);
    if (test_rank == bad_rank()) f.tensors.o.stride_batch = INT64_MAX / 2;
    CHECK(failed_alike(attend(&f, 1), FAI_ERR_OVERFLOW, &f, "tensors.o strides", "2^63"));
    decode_fixture_init(&f, 0);
    if (test_rank == bad_rank()) f.tensors.lse.stride_head = INT64_MAX / 4;
    CHECK(failed_alike(attend(&f, 1), FAI_ERR_OVERFLOW, &f, "tensors.lse strides", NULL));
}

/* Outputs that fai_run would refuse, on one rank with every rank receiving the result: data not
 * aligned to its elements, rows put in one place, O and LSE sharing memory. The shard's own run
 * writes partials of its own, so these are checked here, before the ranks agree. */
TEST(mpi_error_outputs_misplaced_on_one_rank) {
    char where[32];
    snprintf(where, sizeof where, "rank %d: ", bad_rank());
    decode_fixture f;
    decode_fixture_init(&f, 0);
    if (test_rank == bad_rank()) f.tensors.o.data = (char *)f.o + 2;
    CHECK(failed_alike(attend(&f, 1), FAI_ERR_INVALID_ARG, &f, where, "tensors.o.data"));
    decode_fixture_init(&f, 0);
    if (test_rank == bad_rank()) f.tensors.lse.data = (char *)f.lse + 1;
    CHECK(failed_alike(attend(&f, 0), FAI_ERR_INVALID_ARG, &f, where,
                       "not aligned to its 4-byte elements"));
    decode_fixture_init(&f, 0);
    if (test_rank == bad_rank()) f.tensors.o.stride_head = 0; /* every head's row in one place */
    CHECK(failed_alike(attend(&f, 1), FAI_ERR_INVALID_ARG, &f, where, "in one place"));
    decode_fixture_init(&f, 0);
    if (test_rank == bad_rank()) f.tensors.lse.data = f.o;
    CHECK(failed_alike(attend(&f, 1), FAI_ERR_INVALID_ARG, NULL, where,
                       "tensors.o and tensors.lse overlap"));
}

/* ALiBi slopes and sinks are values every rank must hold alike: each shard is biased with its
 * rank's slopes and each receiving rank adds its own sinks, so ranks that differ would merge rows
 * of no single attention, or receive different results. */
TEST(mpi_error_ranks_disagree_on_modifier_values) {
    float slopes[8], sinks[8];
    for (int h = 0; h < 8; h++)
        slopes[h] = 0.5f / (float)(h + 1), sinks[h] = 0.25f * (float)h;
    for (int which = 0; which < 2; which++) {
        decode_fixture f;
        decode_fixture_init(&f, 0);
        if (which == 0) f.problem.alibi = 1, f.tensors.alibi_slopes = slopes;
        if (which == 1) f.problem.sinks = 1, f.tensors.sinks = sinks;
        CHECK(attend(&f, 1) == FAI_OK); /* alike on every rank */
        decode_fixture_init(&f, 0);
        float mine[8];
        memcpy(mine, which ? sinks : slopes, sizeof mine);
        if (test_rank == bad_rank()) mine[3] += 1.0f;
        if (which == 0) f.problem.alibi = 1, f.tensors.alibi_slopes = mine;
        if (which == 1) f.problem.sinks = 1, f.tensors.sinks = mine;
        const fai_status status = attend(&f, 1);
        CHECK(test_size == 1 ||
              failed_alike(status, FAI_ERR_INVALID_ARG, &f, "disagree",
                           which ? "sinks (their values)" : "alibi_slopes (their values)"));
    }
}

/* Two ranks holding keys at the same global positions would have them counted twice: refused on
 * every rank, naming the sequence and both ranks. Positions no rank holds are allowed (not
 * attended, as a cache that dropped them). */
TEST(mpi_error_shards_overlap) {
    decode_fixture f;
    for (int explicit_q = 0; explicit_q < 2; explicit_q++) {
        decode_fixture_init(&f, 0);
        if (test_rank == bad_rank()) f.kv_start[1] = 16 * (bad_rank() - 1) + 8;
        const fai_status status = attend(&f, explicit_q);
        CHECK(test_size == 1 ||
              failed_alike(status, FAI_ERR_INVALID_ARG, &f, "the shards of sequence 1 overlap",
                           "(kv_start and the shards' lengths)"));
    }
    decode_fixture_init(&f, 0);
    if (test_rank == bad_rank()) f.kv_start[0] += 100; /* a gap before this rank's keys */
    CHECK(attend(&f, 1) == FAI_OK);
    /* a shard that ends past int32: without q_start the queries, placed at the end of the
     * agreed length, are what overflows, and the message says where that length came from */
    decode_fixture_init(&f, 0);
    if (test_rank == bad_rank()) f.kv_start[0] = INT32_MAX - 1;
    CHECK(failed_alike(attend(&f, 0), FAI_ERR_OVERFLOW, &f, "its queries would start at",
                       "the largest kv_start + shard length"));
}

TEST(mpi_error_bad_root_and_positions_given) {
    decode_fixture f;
    decode_fixture_init(&f, 0);
    CHECK(failed_alike(fai_mpi_attention(MPI_COMM_WORLD, &f.problem, f.kv_start, f.q_start,
                                         &f.tensors, test_size, NULL),
                       FAI_ERR_INVALID_ARG, &f, "rank 0: root", NULL));
    f.problem.q_positions = f.q_start, f.problem.kv_positions = f.kv_start;
    CHECK(failed_alike(attend(&f, 1), FAI_ERR_INVALID_ARG, &f, "rank 0: local->q_positions", NULL));
    CHECK(fai_mpi_attention(MPI_COMM_NULL, &f.problem, f.kv_start, NULL, &f.tensors, -1, NULL) ==
          FAI_ERR_INVALID_ARG);
}

/* Ring: Q, K, V of 8 rows per rank (seq = 8 R). */
typedef struct ring_fixture {
    fai_problem problem;
    fai_tensors tensors;
    float q[8 * 4 * 8], k[8 * 2 * 8], v[8 * 2 * 8], o[8 * 4 * 8], lse[4 * 8];
} ring_fixture;

static void ring_fixture_init(ring_fixture *f) {
    memset(f, 0, sizeof *f);
    fai_problem_init(&f->problem);
    fai_problem *pb = &f->problem;
    pb->batch = 1, pb->heads_q = 4, pb->heads_kv = 2, pb->seq_q = pb->seq_kv = 8;
    pb->head_dim = 8, pb->k_dtype = pb->v_dtype = FAI_DTYPE_F32;
    pb->causal = FAI_CAUSAL_BOTTOM_RIGHT, pb->threads = 1;
    test_fill(f->q, 8 * 4 * 8, 100 + (uint64_t)test_rank);
    test_fill(f->k, 8 * 2 * 8, 200 + (uint64_t)test_rank);
    test_fill(f->v, 8 * 2 * 8, 300 + (uint64_t)test_rank);
    f->tensors.q = fai_tensor_bshd(f->q, FAI_DTYPE_F32, 8, 4, 8);
    f->tensors.k = fai_tensor_bshd(f->k, FAI_DTYPE_F32, 8, 2, 8);
    f->tensors.v = fai_tensor_bshd(f->v, FAI_DTYPE_F32, 8, 2, 8);
    f->tensors.o = fai_tensor_bshd(f->o, FAI_DTYPE_F32, 8, 4, 8);
    f->tensors.lse = (fai_tensor){f->lse, FAI_DTYPE_F32, 32, 1, 8, 0};
    memset(f->o, SENTINEL, sizeof f->o);
}

static int ring_o_untouched(const ring_fixture *f) {
    const unsigned char *o = (const unsigned char *)f->o;
    for (size_t i = 0; i < sizeof f->o; i++)
        if (o[i] != SENTINEL) return 0;
    return 1;
}

static fai_status ring(ring_fixture *f) {
    return fai_mpi_ring_attention(MPI_COMM_WORLD, &f->problem, 8 * (int64_t)test_size, &f->tensors,
                                  NULL);
}

TEST(mpi_error_ring_bad_input_on_one_rank) {
    char where[32];
    snprintf(where, sizeof where, "rank %d: ", bad_rank());
    ring_fixture f;
    ring_fixture_init(&f);
    CHECK(ring(&f) == FAI_OK); /* the fixture is valid */
    ring_fixture_init(&f);
    if (test_rank == bad_rank()) f.problem.seq_q = 7;
    CHECK(failed_alike(ring(&f), FAI_ERR_INVALID_ARG, NULL, where, "seq_q = 7"));
    CHECK(ring_o_untouched(&f));
    ring_fixture_init(&f);
    if (test_rank == bad_rank()) f.problem.heads_q = 3; /* not a multiple of heads_kv */
    CHECK(failed_alike(ring(&f), FAI_ERR_INVALID_ARG, NULL, where, "heads_q"));
    CHECK(ring_o_untouched(&f));
    ring_fixture_init(&f);
    if (test_rank == bad_rank()) f.problem.heads_q = 2; /* valid alone, not with the others */
    const fai_status status = ring(&f);
    CHECK(test_size == 1 || failed_alike(status, FAI_ERR_INVALID_ARG, NULL, "disagree", "heads_q"));
    CHECK(test_size == 1 || ring_o_untouched(&f));
    ring_fixture_init(&f);
    if (test_rank == bad_rank()) f.tensors.k.stride_dim = 2;
    CHECK(failed_alike(ring(&f), FAI_ERR_INVALID_ARG, NULL, where, "stride_dim"));
    CHECK(ring_o_untouched(&f));
}

TEST(mpi_error_ring_refuses_what_it_does_not_shard) {
    ring_fixture f;
    ring_fixture_init(&f);
    f.problem.mask_kind = FAI_MASK_KEEP;
    CHECK(failed_alike(ring(&f), FAI_ERR_UNSUPPORTED, NULL, "rank 0: ", "explicit masks"));
    ring_fixture_init(&f);
    int32_t lens[1] = {8};
    f.problem.seqlens_kv = lens;
    CHECK(failed_alike(ring(&f), FAI_ERR_UNSUPPORTED, NULL, "rank 0: ", "seqlens"));
    CHECK(ring_o_untouched(&f));
}

/* Quantized K and V with scales that fai refuses on one rank: missing, or not > 0. */
static void quantize_decode(decode_fixture *f, float *k_scales, float *v_scales) {
    f->problem.k_dtype = f->problem.v_dtype = FAI_DTYPE_I8; /* the f32 data read as int8 codes */
    f->tensors.k.dtype = f->tensors.v.dtype = FAI_DTYPE_I8;
    f->tensors.k_scale = (fai_scale){k_scales, 0, 0, 1}; /* one per kv head */
    f->tensors.v_scale = (fai_scale){v_scales, 0, 0, 0}; /* one for the tensor */
}

TEST(mpi_error_quantized_kv_on_one_rank) {
    char where[32];
    snprintf(where, sizeof where, "rank %d: ", bad_rank());
    float scales[2] = {0.01f, 0.02f}, bad[2] = {0.01f, -1.0f};
    decode_fixture f;
    decode_fixture_init(&f, 1);
    quantize_decode(&f, scales, scales);
    CHECK(attend(&f, 1) == FAI_OK); /* the fixture is valid */
    decode_fixture_init(&f, 1);
    quantize_decode(&f, scales, scales);
    if (test_rank == bad_rank()) f.tensors.k_scale.data = NULL;
    CHECK(failed_alike(attend(&f, 1), FAI_ERR_INVALID_ARG, &f, where, "k_scale.data = NULL"));
    decode_fixture_init(&f, 0);
    quantize_decode(&f, scales, test_rank == bad_rank() ? bad + 1 : scales);
    CHECK(failed_alike(attend(&f, 0), FAI_ERR_INVALID_ARG, &f, where,
                       "v_scale of sequence 0, key 0, kv head 0 = -1"));
    /* the ring checks every rank's scales before the K/V blocks travel */
    ring_fixture r;
    ring_fixture_init(&r);
    r.problem.k_dtype = FAI_DTYPE_E5M2, r.tensors.k.dtype = FAI_DTYPE_E5M2;
    r.tensors.k_scale = (fai_scale){scales, 0, 0, 1};
    CHECK(ring(&r) == FAI_OK);
    ring_fixture_init(&r);
    r.problem.k_dtype = FAI_DTYPE_E5M2, r.tensors.k.dtype = FAI_DTYPE_E5M2;
    r.tensors.k_scale = (fai_scale){test_rank == bad_rank() ? bad : scales, 0, 0, 1};
    CHECK(failed_alike(ring(&r), FAI_ERR_INVALID_ARG, NULL, where, "kv head 1 = -1"));
    CHECK(ring_o_untouched(&r));
    /* K's channel scales: each rank reads every rank's K blocks with its own, so they must be
     * the same on every rank */
    float channels[2 * 8], other[2 * 8];
    for (int i = 0; i < 2 * 8; i++)
        channels[i] = other[i] = 1.0f + (float)i / 16.0f;
    other[5] = 2.5f;
    for (int differ = 0; differ < 2; differ++) {
        ring_fixture_init(&r);
        r.problem.k_dtype = FAI_DTYPE_E5M2, r.tensors.k.dtype = FAI_DTYPE_E5M2;
        r.tensors.k_scale = (fai_scale){scales, 0, 0, 1};
        r.problem.k_channel_scales = 1;
        r.tensors.k_channel_scale =
            (fai_channel_scale){differ && test_rank == bad_rank() ? other : channels, 8};
        if (!differ)
            CHECK(ring(&r) == FAI_OK);
        else
            CHECK(test_size == 1 ||
                  failed_alike(ring(&r), FAI_ERR_INVALID_ARG, NULL, "disagree", "k_channel_scale"));
        CHECK(!differ || test_size == 1 || ring_o_untouched(&r));
    }
}

/* A rank whose ring chunks hold no rows reads no K at all, so fai takes its tensors without
 * channel scales: the ranks agree on the values of the ranks that read them. */
TEST(mpi_ring_rank_without_rows_needs_no_channel_scales) {
    fai_mpi_zigzag mine;
    CHECK(fai_mpi_zigzag_layout(1, test_size, test_rank, &mine) == FAI_OK); /* seq = 1 */
    fai_problem pb;
    fai_problem_init(&pb);
    pb.batch = 1, pb.heads_q = pb.heads_kv = 1, pb.head_dim = 8, pb.threads = 1;
    pb.seq_q = pb.seq_kv = mine.rows, pb.causal = FAI_CAUSAL_BOTTOM_RIGHT;
    pb.k_dtype = FAI_DTYPE_I8, pb.v_dtype = FAI_DTYPE_F32, pb.k_channel_scales = 1;
    float q[8], v[8], o[8], lse[1], k_scale = 0.25f, channels[8];
    int8_t k[8];
    test_fill(q, 8, 7), test_fill(v, 8, 8);
    for (int i = 0; i < 8; i++)
        k[i] = (int8_t)(3 * i - 11), channels[i] = 1.0f + (float)i / 8.0f;
    fai_tensors t;
    memset(&t, 0, sizeof t);
    if (mine.rows > 0) {
        t.q = fai_tensor_bshd(q, FAI_DTYPE_F32, 1, 1, 8);
        t.k = fai_tensor_bshd(k, FAI_DTYPE_I8, 1, 1, 8);
        t.v = fai_tensor_bshd(v, FAI_DTYPE_F32, 1, 1, 8);
        t.o = fai_tensor_bshd(o, FAI_DTYPE_F32, 1, 1, 8);
        t.lse = (fai_tensor){lse, FAI_DTYPE_F32, 1, 1, 1, 0};
        t.k_scale = (fai_scale){&k_scale, 0, 0, 0};
        t.k_channel_scale = (fai_channel_scale){channels, 0};
    }
    const fai_status status = fai_mpi_ring_attention(MPI_COMM_WORLD, &pb, 1, &t, NULL);
    if (status != FAI_OK) fprintf(stderr, "  rank %d: %s\n", test_rank, fai_mpi_last_error());
    CHECK(status == FAI_OK);
    /* one query over its one key: O is that key's V row */
    for (int i = 0; mine.rows > 0 && i < 8; i++)
        CHECK(o[i] == v[i]);
}

/* A rank that fails its own checks has its arrays left unread by the agreement (they may be
 * what failed): a channel-scale stride past the address space, and ALiBi slopes of a problem
 * whose head count fai refuses, give fai's error on every rank (the sanitizers' runs would see
 * a read through them). */
TEST(mpi_error_arrays_of_a_failing_rank_unread) {
    char where[32];
    snprintf(where, sizeof where, "rank %d: ", bad_rank());
    float scales[2] = {0.01f, 0.02f}, channels[2 * 8];
    for (int i = 0; i < 2 * 8; i++)
        channels[i] = 1.0f;
    ring_fixture r;
    ring_fixture_init(&r);
    r.problem.k_dtype = FAI_DTYPE_E5M2, r.tensors.k.dtype = FAI_DTYPE_E5M2;
    r.tensors.k_scale = (fai_scale){scales, 0, 0, 1};
    r.problem.k_channel_scales = 1;
    r.tensors.k_channel_scale = (fai_channel_scale){channels, 8};
    if (test_rank == bad_rank()) r.tensors.k_channel_scale.stride_head = (INT64_C(1) << 62) + 8;
    CHECK(failed_alike(ring(&r), FAI_ERR_OVERFLOW, NULL, where, "k_channel_scale"));
    CHECK(ring_o_untouched(&r));
    decode_fixture f;
    decode_fixture_init(&f, 0);
    float slopes[8] = {0.5f, 0.25f, 0.125f, 0.0625f, 0.5f, 0.25f, 0.125f, 0.0625f};
    f.problem.alibi = 1, f.tensors.alibi_slopes = slopes;
    if (test_rank == bad_rank()) /* heads past slopes[8], refused by the plan */
        f.problem.heads_q = 4096, f.problem.heads_kv = 3;
    CHECK(failed_alike(attend(&f, 0), FAI_ERR_INVALID_ARG, &f, where, "heads_q = 4096"));
}

/* A shard without keys of a sequence places none of them: its kv_start, whatever it is, moves
 * nothing past int32 (the whole's 18 queries over its 16 keys move every position up by 2,
 * which took INT32_MAX past it). */
TEST(mpi_empty_shard_start_not_placed) {
    decode_fixture f;
    decode_fixture_init(&f, 0);
    f.problem.seq_q = 18; /* more queries than the shard's 16 keys: placed from 2 below 0 */
    float q[2 * 18 * 8 * 16], o[2 * 18 * 8 * 16], lse[2 * 8 * 18];
    test_fill(q, 2 * 18 * 8 * 16, 93);
    f.tensors.q = fai_tensor_bshd(q, FAI_DTYPE_F32, 18, 8, 16);
    f.tensors.o = fai_tensor_bshd(o, FAI_DTYPE_F32, 18, 8, 16);
    f.tensors.lse = (fai_tensor){lse, FAI_DTYPE_F32, 8 * 18, 1, 18, 0};
    if (test_rank > 0) { /* rank 0 holds the keys [0, 16), the others none */
        f.problem.seq_kv = 0;
        f.tensors.k.data = f.tensors.v.data = NULL;
        for (int b = 0; b < 2; b++)
            f.kv_start[b] = INT32_MAX;
    }
    const fai_status status = attend(&f, 0);
    if (status != FAI_OK) fprintf(stderr, "  rank %d: %s\n", test_rank, fai_mpi_last_error());
    CHECK(status == FAI_OK);
}

TEST(mpi_layout_helpers) {
    int64_t start = -1, len = -1, total = 0;
    for (int r = 0; r < 3; r++) {
        CHECK(fai_mpi_split_range(10, 3, r, &start, &len) == FAI_OK);
        CHECK(start == total && len == (r == 0 ? 4 : 3));
        total += len;
    }
    CHECK(fai_mpi_split_range(10, 3, 3, &start, &len) == FAI_ERR_INVALID_ARG);
    CHECK(fai_mpi_split_range(-1, 3, 0, &start, &len) == FAI_ERR_INVALID_ARG);
    CHECK(fai_mpi_split_range(10, 0, 0, &start, &len) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_mpi_last_error(), "ranks = 0") != NULL);
    fai_mpi_zigzag z;
    CHECK(fai_mpi_zigzag_layout(203, 4, 1, &z) == FAI_OK); /* chunks of 26, 26, 26, 25, ... */
    CHECK(z.chunk[0] == 1 && z.chunk[1] == 6);
    CHECK(z.start[0] == 26 && z.len[0] == 26 && z.start[1] == 153 && z.len[1] == 25);
    CHECK(z.rows == 51);
    CHECK(fai_mpi_zigzag_layout(203, 4, 4, &z) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_mpi_last_error(), "rank = 4") != NULL);
    CHECK(fai_mpi_zigzag_layout(-5, 4, 0, &z) == FAI_ERR_INVALID_ARG);
}
