/*
 * test_sweep.c - the library against the fp64 oracle (whose own checks are test_oracle.c): a
 * seeded random sweep (FAI_SWEEP_CASES cases, FAI_SWEEP_SEED base seed), and targeted cases for
 * each edge of the semantics.
 */
#include "test_util.h"

#include "fai.h"
#include "fai_cases.h"
#include "fai_oracle.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Sanitizer builds run the suite about 15x slower: fewer random cases by default there. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SWEEP_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SWEEP_SANITIZED 1
#endif
#endif
#ifdef SWEEP_SANITIZED
#define SWEEP_DEFAULT_CASES 250
#else
#define SWEEP_DEFAULT_CASES 1500
#endif
#define SWEEP_DEFAULT_SEED 20240601u

/* -- running cases -------------------------------------------------------------------------- */

static void print_failure(const fai_case_result *r) {
    fprintf(stderr, "  FAIL %s\n       %s\n", r->desc, r->why);
}

/* Runs one case; prints it when it fails. */
static int run_case(const fai_case_spec *spec, uint64_t seed) {
    fai_case_result r;
    const int ok = fai_case_run(spec, seed, &r);
    if (!ok) print_failure(&r);
    return ok;
}

/* Runs `count` cases of a spec with consecutive seeds; returns the number that failed. */
static int run_cases(const fai_case_spec *spec, uint64_t seed, int count) {
    int failed = 0;
    for (int i = 0; i < count; i++)
        failed += !run_case(spec, fai_case_seed(seed, (uint64_t)i));
    return failed;
}

/* A small default spec: one sequence, a few heads, f32 everywhere except what a test sets. */
static fai_case_spec spec_small(void) {
    fai_case_spec s;
    fai_case_spec_any(&s);
    s.batch = 1;
    s.heads_q = 2;
    s.heads_kv = 1;
    s.seq_q = 5;
    s.seq_kv = 9;
    s.head_dim = 8;
    s.head_dim_v = 8;
    return s;
}

/* Every field drawn, within a work budget (0: the default). */
static fai_case_spec spec_drawn(double max_work) {
    fai_case_spec s;
    fai_case_spec_any(&s);
    s.max_work = max_work;
    return s;
}

/* Checks a built (and maybe altered) case against the oracle, running on pool (NULL: the
 * library's); prints it when it fails. */
static int check_case(fai_case *c, fai_pool *pool) {
    fai_case_result r;
    const int ok = fai_case_check(c, pool, &r);
    if (!ok) print_failure(&r);
    return ok;
}

/* -- grids of targeted cases ---------------------------------------------------------------- */

/* One int64 field of the spec across the points of a grid: its value at each point, and how far
 * the seed moves from one point to the next. */
typedef struct grid_axis {
    size_t field; /* offset in fai_case_spec */
    const int64_t *values;
    int points; /* 0 ends a list of axes */
    uint64_t seed_step;
    int zipped; /* takes its values point by point with the axis before it, not on its own */
} grid_axis;

/* The offset of an int64 field of fai_case_spec (a field of another type does not compile). */
#define SPEC_FIELD(name)                                                                           \
    _Generic(((fai_case_spec *)0)->name, int64_t : offsetof(fai_case_spec, name))
#define GRID_VALUES(...)                                                                           \
    (const int64_t[]){__VA_ARGS__}, (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
/* An axis: the field takes each value in turn, the seed moving by step. */
#define AXIS(name, step, ...)                                                                      \
    { SPEC_FIELD(name), GRID_VALUES(__VA_ARGS__), step, 0 }
/* A field that takes its values together with the axis before it, point by point. */
#define ZIPPED(name, ...)                                                                          \
    { SPEC_FIELD(name), GRID_VALUES(__VA_ARGS__), 0, 1 }
/* A list of axes (ended by one without points). */
#define AXES(...) ((const grid_axis[]){__VA_ARGS__, {0}})

/* Runs `cases` cases of the base spec with the axes' fields set at each combination of their
 * points (the last axis fastest), from the seed `seed` + the sum over the axes of point x
 * seed_step. Returns how many failed (a malformed list of axes counts as one). */
static int run_grid(const fai_case_spec *base, uint64_t seed, int cases, const grid_axis *axes) {
    enum { MAX_AXES = 8 };
    int count = 0, point[MAX_AXES] = {0};
    while (axes[count].points)
        count++;
    if (count > MAX_AXES) {
        fprintf(stderr, "  a grid of %d axes: at most %d\n", count, MAX_AXES);
        return 1;
    }
    for (int a = 0; a < count; a++)
        if (axes[a].zipped && (a == 0 || axes[a].points != axes[a - 1].points)) {
            fprintf(stderr, "  grid axis %d is zipped with no axis of its length\n", a);
            return 1;
        }
    int failed = 0;
    for (;;) {
        fai_case_spec s = *base;
        uint64_t point_seed = seed;
        for (int a = 0; a < count; a++) {
            if (axes[a].zipped) point[a] = point[a - 1];
            *(int64_t *)((char *)&s + axes[a].field) = axes[a].values[point[a]];
            point_seed += (uint64_t)point[a] * axes[a].seed_step;
        }
        failed += run_cases(&s, point_seed, cases);
        int a = count - 1; /* the next combination */
        for (; a >= 0; a--) {
            if (axes[a].zipped) continue;
            if (++point[a] < axes[a].points) break;
            point[a] = 0;
        }
        if (a < 0) return failed;
    }
}

/* -- the random sweep ----------------------------------------------------------------------- */

TEST(sweep_random) {
    const long cases = test_env_long("FAI_SWEEP_CASES", SWEEP_DEFAULT_CASES);
    const uint64_t base = (uint64_t)test_env_long("FAI_SWEEP_SEED", SWEEP_DEFAULT_SEED);
    const fai_case_spec spec = spec_drawn(0);
    fai_case_stats stats;
    fai_case_stats_init(&stats);
    int shown = 0, pairs_off = 0;
    for (long i = 0; i < cases; i++) {
        fai_case_result r;
        fai_case_run(&spec, fai_case_seed(base, (uint64_t)i), &r);
        fai_case_stats_add(&stats, &r);
        if (!r.ok && shown++ < 20) print_failure(&r);
        if (r.ok && r.plan_visible_pairs >= 0 && r.plan_visible_pairs != r.visible_pairs &&
            pairs_off++ < 5)
            fprintf(stderr, "  visible_pairs: plan %lld, oracle %lld: %s\n",
                    (long long)r.plan_visible_pairs, (long long)r.visible_pairs, r.desc);
    }
    printf("  sweep: %lld cases, %lld failed, worst error/tolerance %.3g\n", (long long)stats.cases,
           (long long)stats.failed, stats.max_ratio);
    CHECK(stats.failed == 0);
    CHECK(pairs_off == 0);
}

/* -- targeted cases ------------------------------------------------------------------------- */

TEST(sweep_zero_and_one_lengths) {
    /* Sq and Skv of 0, 1 and 2 in every way lengths are given */
    fai_case_spec s = spec_small();
    s.batch = 2;
    int failed =
        run_grid(&s, 0, 2,
                 AXES(AXIS(seq_q, 100, 0, 1, 2), AXIS(seq_kv, 10, 0, 1, 2),
                      AXIS(q_lens, 4, FAI_CASE_LEN_FULL, FAI_CASE_LEN_SEQLENS, FAI_CASE_LEN_PACKED),
                      AXIS(kv_lens, 1, FAI_CASE_LEN_FULL, FAI_CASE_LEN_SEQLENS, FAI_CASE_LEN_PACKED,
                           FAI_CASE_LEN_PAGED)));
    /* an empty batch */
    s = spec_drawn(0);
    s.batch = 0;
    failed += run_cases(&s, 77, 12);
    CHECK(failed == 0);
}

TEST(sweep_odd_head_dims) {
    /* D odd or next to a power of two, with Dv drawn, then with another of these */
    fai_case_spec s = spec_small();
    s.head_dim_v = FAI_CASE_ANY;
    int failed = run_grid(
        &s, 300, 3,
        AXES(AXIS(head_dim, 1, 1, 3, 5, 7, 13, 17, 31, 33, 63, 65, 100, 127, 129, 255, 257)));
    failed += run_grid(
        &s, 400, 2,
        AXES(AXIS(head_dim, 1, 1, 3, 5, 7, 13, 17, 31, 33, 63, 65, 100, 127, 129, 255, 257),
             ZIPPED(head_dim_v, 17, 31, 33, 63, 65, 100, 127, 129, 255, 257, 1, 3, 5, 7, 13)));
    CHECK(failed == 0);
}

/* MLA (DeepSeek): 16 query heads on one latent kv head, D 576 and Dv 512. */
static fai_case_spec spec_mla(void) {
    fai_case_spec s = spec_drawn(1e8);
    s.heads_q = 16;
    s.heads_kv = 1;
    s.head_dim = 576;
    s.head_dim_v = 512;
    return s;
}

TEST(sweep_mla_decode) {
    int failed = 0;
    for (int i = 0; i < 6; i++) {
        fai_case_spec s = spec_mla();
        s.batch = 1 + i % 2;
        s.seq_q = i < 4 ? 1 : 3;
        s.seq_kv = 100 + 37 * i;
        s.kv_lens = i % 2 ? FAI_CASE_LEN_PAGED : FAI_CASE_LEN_SEQLENS;
        s.page_size = i % 4 == 1 ? 16 : 1;
        s.q_dtype = i % 3 == 0 ? FAI_DTYPE_F32 : FAI_DTYPE_BF16;
        s.k_dtype = s.v_dtype = i % 2 ? FAI_DTYPE_BF16 : FAI_DTYPE_F16;
        s.causal = i >= 4 ? FAI_CAUSAL_BOTTOM_RIGHT : FAI_CAUSAL_NONE;
        failed += !run_case(&s, 500 + (uint64_t)i);
    }
    CHECK(failed == 0);
}

/* MLA keeps one latent cache: V is the first Dv columns of K, the same memory. */
TEST(sweep_mla_shared_kv) {
    for (int i = 0; i < 4; i++) {
        fai_case_spec s = spec_mla();
        s.batch = 2;
        s.seq_q = 1 + (i % 2) * 3;
        s.seq_kv = 150 + 29 * i;
        s.kv_lens = i < 2 ? FAI_CASE_LEN_PAGED : FAI_CASE_LEN_SEQLENS;
        s.page_size = 16;
        s.k_dtype = s.v_dtype = i % 2 ? FAI_DTYPE_BF16 : FAI_DTYPE_F16;
        s.causal = FAI_CAUSAL_BOTTOM_RIGHT;
        fai_case c;
        REQUIRE(fai_case_build(&c, &s, 550 + (uint64_t)i) == 0);
        c.tensors.v.data = c.tensors.k.data;
        c.tensors.v.stride_batch = c.tensors.k.stride_batch;
        c.tensors.v.stride_seq = c.tensors.k.stride_seq;
        c.tensors.v.stride_head = c.tensors.k.stride_head;
        CHECK(check_case(&c, NULL));
        fai_case_free(&c);
    }
}

TEST(sweep_gqa_heads) {
    /* 1, 2, 7 and 8 kv heads, each with groups of 1, 2, 3 and 8 query heads */
    const fai_case_spec s = spec_drawn(5e5);
    CHECK(run_grid(&s, 600, 3,
                   AXES(AXIS(heads_kv, 1, 1, 1, 1, 1, 2, 2, 2, 2, 7, 7, 7, 7, 8, 8, 8, 8),
                        ZIPPED(heads_q, 1, 2, 3, 8, 2, 4, 6, 16, 7, 14, 21, 56, 8, 16, 24, 64))) ==
          0);
}

TEST(sweep_paged_pages) {
    /* pages of 1, 3, 16 and 128 slots, over two pages and a bit; then decoding 4 queries */
    fai_case_spec s = spec_drawn(5e5);
    s.kv_lens = FAI_CASE_LEN_PAGED;
    s.batch = 3;
    const grid_axis *pages =
        AXES(AXIS(page_size, 1, 1, 3, 16, 128), ZIPPED(seq_kv, 7, 11, 37, 261));
    int failed = run_grid(&s, 700, 8, pages);
    s.causal = FAI_CAUSAL_BOTTOM_RIGHT;
    s.seq_q = 4;
    failed += run_grid(&s, 710, 4, pages);
    CHECK(failed == 0);
}

TEST(sweep_mask_kinds) {
    /* every mask kind and shape: alone, with either causal corner, with a window */
    const fai_case_spec s = spec_drawn(3e5);
    CHECK(run_grid(&s, 900, 2,
                   AXES(AXIS(mask_kind, 100, FAI_MASK_KEEP, FAI_MASK_DROP, FAI_MASK_ADD,
                             FAI_MASK_KEEP_BITS),
                        AXIS(mask_shape, 10, 0, 1, 2, 3, 4),
                        AXIS(causal, 1, FAI_CAUSAL_NONE, FAI_CAUSAL_BOTTOM_RIGHT,
                             FAI_CAUSAL_TOP_LEFT, FAI_CAUSAL_NONE),
                        ZIPPED(window_left, -1, -1, -1, 4), ZIPPED(window_right, -1, -1, -1, 2))) ==
          0);
}

/* Every combination of the score modifiers (soft-capping, ALiBi, sinks) with every mask kind
 * (none, keep, drop, additive, bits) and every way lengths are given (padded, seqlens, packed;
 * for K/V also paged), the rest drawn: causal, windows, positions, dtypes, tensor layouts, decode
 * and prefill tiles, splits. */
TEST(sweep_modifiers) {
    int failed = 0, cases = 0;
    for (int mods = 1; mods < 8; mods++)
        for (int64_t kind = FAI_MASK_NONE; kind <= FAI_MASK_KEEP_BITS; kind++)
            for (int64_t q_lens = FAI_CASE_LEN_FULL; q_lens <= FAI_CASE_LEN_PACKED; q_lens++)
                for (int64_t kv_lens = FAI_CASE_LEN_FULL; kv_lens <= FAI_CASE_LEN_PAGED;
                     kv_lens++) {
                    fai_case_spec s = spec_drawn(2e5);
                    s.softcap = mods & 1 ? (double)(1 + (q_lens + kv_lens + kind) % 3) * 10.0 : 0.0;
                    s.alibi = (mods >> 1) & 1;
                    s.sinks = (mods >> 2) & 1;
                    s.mask_kind = kind;
                    s.q_lens = q_lens;
                    s.kv_lens = kv_lens;
                    const uint64_t seed =
                        5000 + (uint64_t)(mods * 1000 + kind * 100 + q_lens * 10 + kv_lens);
                    failed += run_cases(&s, seed, 2);
                    cases += 2;
                }
    printf("  %d cases with score modifiers\n", cases);
    CHECK(failed == 0);
}

/* Quantized K and V (int8, e4m3, e5m2, each with the other dtypes beside it) over decode and
 * prefill tiles (prefill long enough for the matrix engine's row blocks), every way K/V lengths
 * are given, every mask kind, and the scales' shapes (per token, per kv head, per tensor; drawn
 * by the seed): against the oracle, which reads code x scale exactly. */
TEST(sweep_quantized_kv) {
    int failed = 0, cases = 0;
    for (int64_t k_dtype = FAI_DTYPE_F16; k_dtype <= FAI_DTYPE_E5M2; k_dtype++)
        for (int64_t kv_lens = FAI_CASE_LEN_FULL; kv_lens <= FAI_CASE_LEN_PAGED; kv_lens++)
            for (int64_t kind = FAI_MASK_NONE; kind <= FAI_MASK_KEEP_BITS; kind++)
                for (int prefill = 0; prefill < 2; prefill++) {
                    fai_case_spec s = spec_drawn(prefill ? 4e6 : 5e5);
                    /* K quantized, or V when K is f16 */
                    s.k_dtype = k_dtype;
                    s.v_dtype = k_dtype == FAI_DTYPE_F16 ? FAI_DTYPE_I8 + kind % 3
                                                         : FAI_DTYPE_F16 + (kv_lens + kind) % 5;
                    s.kv_lens = kv_lens;
                    s.mask_kind = kind;
                    s.seq_q = prefill ? 40 + 37 * (kind + kv_lens) % 90 : 1 + kind % 3;
                    s.seq_kv = 60 + 53 * (kind + 2 * kv_lens) % 200;
                    s.head_dim = prefill ? 64 : FAI_CASE_ANY;
                    const uint64_t seed =
                        9000 + (uint64_t)(k_dtype * 1000 + kv_lens * 100 + kind * 10 + prefill);
                    failed += run_cases(&s, seed, 2);
                    cases += 2;
                }
    printf("  %d cases with quantized K or V\n", cases);
    CHECK(failed == 0);
}

TEST(sweep_windows) {
    /* windows (left, right) of either side, both, or one unbounded, under each causal setting */
    const fai_case_spec s = spec_drawn(3e5);
    CHECK(run_grid(&s, 900, 2,
                   AXES(AXIS(window_left, 3, 0, 1, 0, 5, -1, 3, 40),
                        ZIPPED(window_right, 0, 0, 3, -1, 2, 3, 1),
                        AXIS(causal, 1, FAI_CAUSAL_NONE, FAI_CAUSAL_BOTTOM_RIGHT,
                             FAI_CAUSAL_TOP_LEFT))) == 0);
}

TEST(sweep_ragged_empty_sequences) {
    static const int32_t lq[][4] = {{0, 5, 0, 3}, {0, 0, 0, 0}, {7, 0, 0, 1}, {1, 1, 0, 33}};
    static const int32_t lk[][4] = {{4, 0, 0, 9}, {0, 3, 0, 0}, {7, 2, 0, 40}, {0, 1, 17, 33}};
    int failed = 0;
    for (int i = 0; i < 4; i++) {
        fai_case_spec s = spec_drawn(1e6);
        s.batch = 4;
        s.lens_q = lq[i];
        s.lens_kv = lk[i];
        /* the seed counts the modes from FULL: SEQLENS (1) adds 4 + 1 */
        failed += run_grid(
            &s, 1000 + 16 * (uint64_t)i + 4 * FAI_CASE_LEN_SEQLENS + FAI_CASE_LEN_SEQLENS, 2,
            AXES(AXIS(kv_lens, 4, FAI_CASE_LEN_SEQLENS, FAI_CASE_LEN_PACKED, FAI_CASE_LEN_PAGED),
                 AXIS(q_lens, 1, FAI_CASE_LEN_SEQLENS, FAI_CASE_LEN_PACKED)));
    }
    CHECK(failed == 0);
}

TEST(sweep_many_workers) {
    /* one query, key and head split among few to many workers; then drawn cases */
    fai_case_spec s = spec_small();
    s.seq_q = 1;
    s.seq_kv = 1;
    s.heads_q = 1;
    const grid_axis *worker_counts = AXES(AXIS(workers, 1, 1, 2, 3, 17, 1000, FAI_MAX_WORKERS));
    int failed = run_grid(&s, 1100, 2, worker_counts);
    s = spec_drawn(3e5);
    failed += run_grid(&s, 1110, 3, worker_counts);
    CHECK(failed == 0);
}

TEST(sweep_tile_overrides) {
    const fai_case_spec s = spec_drawn(3e5);
    CHECK(run_grid(&s, 1200, 2,
                   AXES(AXIS(tile_q, 5, 1, 3, 16, 64, 128), AXIS(tile_kv, 1, 1, 5, 16, 64, 256))) ==
          0);
}

/* fai.h: 64-byte alignment of the workspace is fast, any is correct. */
TEST(sweep_workspace_alignment) {
    static const size_t offsets[] = {1, 2, 4, 8, 16, 32, 60};
    int failed = 0;
    for (int i = 0; i < 7; i++) {
        const fai_case_spec s = spec_drawn(3e5);
        fai_case c;
        REQUIRE(fai_case_build(&c, &s, 1250 + (uint64_t)i) == 0);
        c.workspace_offset = offsets[i];
        failed += !check_case(&c, NULL);
        fai_case_free(&c);
    }
    CHECK(failed == 0);
}

/* Runs the case's problem with `plan`; copies O and LSE (as bytes) out. */
static int run_plan_copy(fai_case *c, fai_plan *plan, unsigned char *o, unsigned char *lse) {
    fai_case_reset(c);
    const size_t ws_size = fai_plan_workspace_size(plan);
    void *ws = malloc(ws_size + 64);
    if (!ws) return -1;
    const fai_status st = fai_run(plan, &c->tensors, ws, ws_size);
    free(ws);
    if (st != FAI_OK) {
        fprintf(stderr, "  fai_run: %s: %s\n", fai_status_string(st), fai_last_error());
        return -1;
    }
    memcpy(o, c->buf[FAI_CASE_BUF_O], c->bytes[FAI_CASE_BUF_O]);
    if (c->buf[FAI_CASE_BUF_LSE]) memcpy(lse, c->buf[FAI_CASE_BUF_LSE], c->bytes[FAI_CASE_BUF_LSE]);
    return 0;
}

/* Runs the case's plan on a 1-thread and on a 2-thread pool, and with `alone` also a plan with
 * threads = 1 on the 2-thread pool: the work is split the same whatever threads run it, so O and
 * LSE must be the same bits each time. Then checks the case against the oracle on the 2-thread
 * pool (with threads = 2 after `alone`). *split_kv, when given, counts plans that split keys. */
static void check_threads_agree(int *test_failed_, fai_case *c, int alone, int *split_kv) {
    enum { RUNS = 3 };
    const size_t o_bytes = c->bytes[FAI_CASE_BUF_O], l_bytes = c->bytes[FAI_CASE_BUF_LSE];
    const int runs = alone ? 3 : 2;
    fai_pool *pool1 = NULL, *pool2 = NULL;
    fai_plan *plan = NULL, *plan_alone = NULL;
    unsigned char *o[RUNS] = {NULL}, *lse[RUNS] = {NULL};
    for (int i = 0; i < runs; i++) {
        o[i] = malloc(o_bytes);
        lse[i] = malloc(l_bytes ? l_bytes : 1);
        REQUIRE(o[i] && lse[i]);
    }
    REQUIRE(fai_pool_create(1, &pool1) == FAI_OK);
    REQUIRE(fai_pool_create(2, &pool2) == FAI_OK);
    REQUIRE(fai_plan_create(&c->problem, &plan) == FAI_OK);
    if (split_kv) {
        fai_plan_info info;
        REQUIRE(fai_plan_get_info(plan, &info) == FAI_OK);
        *split_kv += info.split_kv != 0;
    }
    /* one plan (threads 0: all of the pool's) on a 1-thread and on a 2-thread pool */
    fai_plan_set_pool(plan, pool1);
    CHECK(run_plan_copy(c, plan, o[0], lse[0]) == 0);
    fai_plan_set_pool(plan, pool2);
    CHECK(run_plan_copy(c, plan, o[1], lse[1]) == 0);
    if (alone) {
        c->problem.threads = 1;
        REQUIRE(fai_plan_create(&c->problem, &plan_alone) == FAI_OK);
        fai_plan_set_pool(plan_alone, pool2);
        CHECK(run_plan_copy(c, plan_alone, o[2], lse[2]) == 0);
        c->problem.threads = 2;
    }
    for (int i = 1; i < runs; i++) {
        CHECK(memcmp(o[0], o[i], o_bytes) == 0);
        CHECK(memcmp(lse[0], lse[i], l_bytes) == 0);
    }
    /* and the output is right */
    fai_case_reset(c);
    CHECK(check_case(c, pool2));
    fai_plan_free(plan);
    fai_plan_free(plan_alone);
    fai_pool_free(pool1);
    fai_pool_free(pool2);
    for (int i = 0; i < runs; i++) {
        free(o[i]);
        free(lse[i]);
    }
}

TEST(sweep_threads_bitwise) {
    for (int k = 0; k < 3; k++) {
        fai_case_spec s = spec_drawn(0);
        s.batch = 2;
        s.heads_q = 8;
        s.heads_kv = 2;
        s.seq_q = k == 2 ? 1 : 37;
        s.seq_kv = 75 + k * 50;
        s.head_dim = 64;
        s.head_dim_v = 48;
        s.workers = k == 1 ? 0 : 7;
        s.threads = 0;
        s.lse = 1;
        s.kv_lens = k == 2 ? FAI_CASE_LEN_PAGED : FAI_CASE_LEN_SEQLENS;
        s.page_size = 16;
        s.causal = FAI_CAUSAL_BOTTOM_RIGHT;
        fai_case c;
        REQUIRE(fai_case_build(&c, &s, 1300 + (uint64_t)k) == 0);
        if (k == 1) c.problem.workers = 5;
        check_threads_agree(test_failed_, &c, 1, NULL);
        fai_case_free(&c);
    }
}

/* Decode-like shapes with few units and many workers: units are split across workers (split-KV)
 * and merged by LSE. The result must be right and not depend on the threads. */
TEST(sweep_split_kv) {
    int split_seen = 0;
    for (int k = 0; k < 8; k++) {
        fai_case_spec s = spec_drawn(1e9);
        s.batch = 1 + k % 2;
        s.heads_kv = k % 3 == 0 ? 8 : 2;
        s.heads_q = 8;
        s.seq_q = k % 4 == 3 ? 5 : 1;
        s.seq_kv = 300 + 350 * k;
        s.head_dim = k % 2 ? 64 : 40;
        s.workers = k % 2 ? 16 : 7;
        s.threads = 0;
        s.split = FAI_SPLIT_AUTO;
        s.lse = 1;
        fai_case c;
        REQUIRE(fai_case_build(&c, &s, 1330 + (uint64_t)k) == 0);
        check_threads_agree(test_failed_, &c, 0, &split_seen);
        fai_case_free(&c);
    }
    CHECK(split_seen > 0);
}

/* Attention over three disjoint key sets (by KEEP masks), merged with fai_merge_states, is
 * attention over all keys. */
TEST(sweep_merge_states) {
    enum { PARTS = 3 };
    for (int k = 0; k < 4; k++) {
        fai_case_spec s = spec_drawn(0);
        s.batch = 2;
        s.heads_q = 4;
        s.heads_kv = 2;
        s.seq_q = 7;
        s.seq_kv = k == 3 ? 5 : 40; /* bottom-right with Sq > Skv: fully masked rows */
        s.head_dim = 16;
        s.head_dim_v = 12;
        s.q_lens = FAI_CASE_LEN_FULL;
        s.kv_lens = k == 1 ? FAI_CASE_LEN_SEQLENS : FAI_CASE_LEN_FULL;
        s.mask_kind = FAI_MASK_NONE;
        s.causal = k >= 2 ? FAI_CAUSAL_BOTTOM_RIGHT : FAI_CAUSAL_NONE;
        s.o_dtype = k == 2 ? FAI_DTYPE_BF16 : FAI_DTYPE_F32;
        s.lse = 1;
        /* modifiers: soft-capping and ALiBi hold within each part; sinks are left out of the
         * parts and added once after the merge (fai_apply_sinks) */
        s.softcap = k == 1 ? 5.0 : 0.0;
        s.alibi = k >= 2;
        s.sinks = k % 2;
        fai_case c;
        REQUIRE(fai_case_build(&c, &s, 1360 + (uint64_t)k) == 0);
        const fai_problem *pb = &c.problem;
        const int64_t B = pb->batch, Sq = pb->seq_q, Skv = pb->seq_kv, Hq = pb->heads_q;
        const int64_t Dv = fai_oracle_head_dim_v(pb);
        float *po[PARTS], *pl[PARTS];
        unsigned char *keep[PARTS];
        fai_tensor to[PARTS], tl[PARTS];
        for (int p = 0; p < PARTS; p++) {
            po[p] = malloc((size_t)(B * Sq * Hq * Dv) * sizeof(float));
            pl[p] = malloc((size_t)(B * Hq * Sq) * sizeof(float));
            keep[p] = malloc((size_t)(Sq * Skv));
            REQUIRE(po[p] && pl[p] && keep[p]);
            for (int64_t i = 0; i < Sq; i++)
                for (int64_t j = 0; j < Skv; j++)
                    keep[p][i * Skv + j] = (j + i) % PARTS == p;
            fai_problem part = *pb;
            part.mask_kind = FAI_MASK_KEEP;
            part.o_dtype = FAI_DTYPE_F32;
            part.sinks = 0;
            fai_tensors t = c.tensors;
            t.sinks = NULL;
            t.o = fai_tensor_bshd(po[p], FAI_DTYPE_F32, Sq, Hq, Dv);
            t.lse.data = pl[p];
            t.lse.dtype = FAI_DTYPE_F32;
            t.lse.stride_seq = 1;
            t.lse.stride_head = Sq;
            t.lse.stride_batch = Hq * Sq;
            t.mask.data = keep[p];
            t.mask.stride_batch = t.mask.stride_head = 0;
            t.mask.stride_q = Skv;
            fai_plan *plan = NULL;
            REQUIRE(fai_plan_create(&part, &plan) == FAI_OK);
            const size_t ws_size = fai_plan_workspace_size(plan);
            void *ws = malloc(ws_size + 1);
            CHECK(fai_run(plan, &t, ws, ws_size) == FAI_OK);
            free(ws);
            fai_plan_free(plan);
            to[p] = t.o;
            tl[p] = t.lse;
        }
        fai_case_reset(&c);
        CHECK(fai_merge_states(PARTS, to, tl, B, Sq, Hq, Dv, &c.tensors.o, &c.tensors.lse) ==
              FAI_OK);
        if (pb->sinks)
            CHECK(fai_apply_sinks(c.tensors.sinks, B, Sq, Hq, Dv, &c.tensors.o, &c.tensors.lse) ==
                  FAI_OK);
        fai_oracle_out ref;
        REQUIRE(fai_oracle_run(pb, &c.tensors, &ref, NULL, 0) == FAI_OK);
        const double tol = fai_case_tolerance(pb->q_dtype, pb->k_dtype, pb->v_dtype, pb->o_dtype);
        const double tol_lse =
            fai_case_tolerance(pb->q_dtype, pb->k_dtype, pb->v_dtype, FAI_DTYPE_F32);
        const fai_tensor *o = &c.tensors.o, *l = &c.tensors.lse;
        int bad = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < Sq; i++)
                for (int64_t h = 0; h < Hq; h++) {
                    const size_t ri = (size_t)((b * Sq + i) * Hq + h);
                    for (int64_t d = 0; d < Dv; d++) {
                        const double x = fai_oracle_load(o->data, o->dtype,
                                                         b * o->stride_batch + i * o->stride_seq +
                                                             h * o->stride_head + d);
                        const double want = ref.o[ri * (size_t)Dv + (size_t)d];
                        if (!(fabs(x - want) <= fai_case_o_limit(&ref, ri, d, tol))) bad++;
                    }
                    float f;
                    memcpy(&f,
                           (const char *)l->data +
                               4 * (b * l->stride_batch + h * l->stride_head + i * l->stride_seq),
                           4);
                    const double want = ref.lse[(b * Hq + h) * Sq + i];
                    if (want == -INFINITY
                            ? f != -INFINITY
                            : !(fabs(f - want) <= fai_case_lse_limit(&ref, ri, want, tol_lse)))
                        bad++;
                }
        if (bad) fprintf(stderr, "  merge: %d bad values: %s\n", bad, c.desc);
        CHECK(bad == 0);
        fai_oracle_out_free(&ref);
        for (int p = 0; p < PARTS; p++) {
            free(po[p]);
            free(pl[p]);
            free(keep[p]);
        }
        fai_case_free(&c);
    }
}

/* One plan run from several user threads at once, each with its own output and workspace. */
typedef struct concurrent_run {
    const fai_plan *plan;
    fai_tensors tensors;
    fai_status status;
} concurrent_run;

static void *concurrent_main(void *arg) {
    concurrent_run *run = arg;
    const size_t ws_size = fai_plan_workspace_size(run->plan);
    void *ws = malloc(ws_size + 1);
    run->status = ws ? fai_run(run->plan, &run->tensors, ws, ws_size) : FAI_ERR_NO_MEMORY;
    free(ws);
    return NULL;
}

TEST(sweep_concurrent_runs) {
    enum { RUNS = 4 };
    fai_case_spec s = spec_drawn(0);
    s.batch = 2;
    s.heads_q = 4;
    s.heads_kv = 2;
    s.seq_q = 33;
    s.seq_kv = 90;
    s.head_dim = 32;
    s.head_dim_v = 32;
    s.lse = 1;
    s.workers = 6;
    s.threads = 0;
    fai_case c;
    REQUIRE(fai_case_build(&c, &s, 1350) == 0);
    fai_plan *plan = NULL;
    REQUIRE(fai_plan_create(&c.problem, &plan) == FAI_OK);
    const size_t o_bytes = c.bytes[FAI_CASE_BUF_O], l_bytes = c.bytes[FAI_CASE_BUF_LSE];
    unsigned char *ref_o = malloc(o_bytes), *ref_l = malloc(l_bytes);
    REQUIRE(ref_o && ref_l);
    CHECK(run_plan_copy(&c, plan, ref_o, ref_l) == 0);
    concurrent_run runs[RUNS];
    pthread_t threads[RUNS];
    unsigned char *outs[RUNS], *lses[RUNS];
    for (int i = 0; i < RUNS; i++) {
        outs[i] = malloc(o_bytes);
        lses[i] = malloc(l_bytes);
        REQUIRE(outs[i] && lses[i]);
        memcpy(outs[i], c.init[FAI_CASE_BUF_O], o_bytes);
        memcpy(lses[i], c.init[FAI_CASE_BUF_LSE], l_bytes);
        runs[i].plan = plan;
        runs[i].tensors = c.tensors;
        runs[i].tensors.o.data = outs[i];
        runs[i].tensors.lse.data = lses[i];
        runs[i].status = FAI_ERR_INVALID_ARG;
    }
    for (int i = 0; i < RUNS; i++)
        CHECK(pthread_create(&threads[i], NULL, concurrent_main, &runs[i]) == 0);
    for (int i = 0; i < RUNS; i++)
        pthread_join(threads[i], NULL);
    for (int i = 0; i < RUNS; i++) {
        CHECK(runs[i].status == FAI_OK);
        CHECK(memcmp(outs[i], ref_o, o_bytes) == 0);
        CHECK(memcmp(lses[i], ref_l, l_bytes) == 0);
        free(outs[i]);
        free(lses[i]);
    }
    fai_case_reset(&c);
    CHECK(check_case(&c, NULL));
    free(ref_o);
    free(ref_l);
    fai_plan_free(plan);
    fai_case_free(&c);
}

/* Logits of magnitude 1e4 built to be exact in f32: q = (+-100, 0, ...), k = (integer, ...), so
 * every logit is an exact multiple of 100 and the softmax is one-hot or uniform over ties. */
TEST(sweep_large_logits) {
    for (int variant = 0; variant < 12; variant++) {
        fai_case_spec s = spec_drawn(0);
        s.batch = 2;
        s.heads_q = 2;
        s.heads_kv = 1;
        s.seq_q = 3;
        s.seq_kv = 20 + variant;
        s.head_dim = 4;
        s.head_dim_v = 8;
        s.q_lens = s.kv_lens = FAI_CASE_LEN_FULL;
        s.mask_kind = FAI_MASK_NONE;
        s.scale = 1.0;
        s.q_dtype = variant % 3;
        s.k_dtype = (variant / 3) % 3;
        s.lse = 1;
        fai_case c;
        REQUIRE(fai_case_build(&c, &s, 1400 + (uint64_t)variant) == 0);
        fai_rng g = {(uint64_t)variant};
        for (int64_t b = 0; b < 2; b++) {
            for (int64_t i = 0; i < 3; i++)
                for (int64_t h = 0; h < 2; h++)
                    for (int64_t d = 0; d < 4; d++)
                        fai_case_set(&c.tensors.q, b, i, h, d,
                                     d ? 0.0 : ((i + h) % 2 ? -100.0 : 100.0));
            for (int64_t j = 0; j < s.seq_kv; j++) {
                /* variants 8+ make every key equal: all logits +-1e4, a uniform softmax */
                const double kj = variant >= 8 ? 100.0 : (double)fai_rng_range(&g, -100, 100);
                fai_case_set(&c.tensors.k, b, j, 0, 0, kj);
            }
        }
        fai_case_reset(&c);
        CHECK(check_case(&c, NULL));
        fai_case_free(&c);
    }
    /* random values of amplitude 100: logits up to ~1e4 with no structure, where the rounding
     * of f32 logits dominates: the tolerance grows with them (fai_case_row_tolerance) */
    for (int variant = 0; variant < 6; variant++) {
        fai_case_spec s = spec_drawn(3e5);
        s.amplitude = 100.0;
        s.scale = 1.0 / 16;
        s.head_dim = 16;
        s.mask_kind = FAI_MASK_NONE;
        s.lse = 1;
        CHECK(run_case(&s, 1500 + (uint64_t)variant));
    }
}

TEST(sweep_fully_masked_rows) {
    int failed = 0, masked_seen = 0;
    for (int i = 0; i < 12; i++) {
        fai_case_spec s = spec_drawn(3e5);
        s.lse = 1;
        if (i < 4) { /* every mask entry masks */
            s.mask_kind = FAI_MASK_KEEP + i % 3;
            s.mask_density = 100;
        } else if (i < 8) { /* bottom-right causal with more queries than keys */
            s.causal = FAI_CAUSAL_BOTTOM_RIGHT;
            s.seq_q = 9 + i;
            s.seq_kv = 3 + i % 3;
            s.q_lens = s.kv_lens = FAI_CASE_LEN_FULL;
        } else { /* additive rows of -inf, and empty key sequences */
            s.mask_kind = FAI_MASK_ADD;
            s.mask_density = 60;
            s.batch = 3;
            static const int32_t lk[3] = {0, 4, 0}, lq[3] = {2, 3, 1};
            s.lens_q = lq;
            s.lens_kv = lk;
        }
        fai_case c;
        REQUIRE(fai_case_build(&c, &s, 1600 + (uint64_t)i) == 0);
        failed += !check_case(&c, NULL);
        fai_oracle_out ref;
        if (fai_oracle_run(&c.problem, &c.tensors, &ref, NULL, 0) == FAI_OK) {
            masked_seen += ref.rows_masked > 0;
            fai_oracle_out_free(&ref);
        }
        fai_case_free(&c);
    }
    CHECK(failed == 0);
    CHECK(masked_seen >= 10);
}

TEST(sweep_rows_past_seqlens) {
    /* Q rows past seqlens_q, or past cu_seqlens_q[batch] with packed rows to spare */
    static const int32_t lq[3] = {0, 3, 7};
    fai_case_spec s = spec_drawn(5e5);
    s.batch = 3;
    s.lens_q = lq;
    s.seq_q = 9;
    s.lse = 1;
    CHECK(run_grid(&s, 1700, 2,
                   AXES(AXIS(packed_rows_extra, 2, 0, 4, 0, 4),
                        AXIS(q_lens, 1, FAI_CASE_LEN_SEQLENS, FAI_CASE_LEN_PACKED))) == 0);
}

TEST(sweep_dtype_combinations) {
    /* every (q, k, v, o) dtype combination at least twice */
    int failed = 0;
    for (int combo = 0; combo < FAI_CASE_COMBOS; combo++) {
        fai_case_spec s = spec_drawn(2e5);
        s.q_dtype = combo % 3;
        s.k_dtype = combo / 3 % 6;
        s.v_dtype = combo / 18 % 6;
        s.o_dtype = combo / 108 % 3;
        /* the float dtypes' combinations twice; with quantized K or V (each also in the random
         * sweep and the feature sweeps) once */
        const int quantized = s.k_dtype >= FAI_DTYPE_I8 || s.v_dtype >= FAI_DTYPE_I8;
        failed += run_cases(&s, 1800 + (uint64_t)combo, quantized ? 1 : 2);
    }
    CHECK(failed == 0);
}
