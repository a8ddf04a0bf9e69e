/* Split-KV: units computed in parts by several workers and merged by their LSE. Each case
 * asserts that the plan did split, then checks the result against the fp64 oracle, with more
 * workers than threads, so parts of one unit run on one thread and on different threads. */
#include "test_util.h"

#include "fai.h"
#include "fai_cases.h"

#include <stdlib.h>
#include <string.h>

/* Builds the case, checks that its plan splits some unit, and runs it against the oracle. */
static int split_case_passes(const fai_case_spec *spec, uint64_t seed, int *did_split) {
    fai_case c;
    if (fai_case_build(&c, spec, seed) != 0) return 0;
    fai_plan *plan = NULL;
    fai_plan_info info;
    *did_split = fai_plan_create(&c.problem, &plan) == FAI_OK &&
                 fai_plan_get_info(plan, &info) == FAI_OK && info.split_kv;
    fai_plan_free(plan);
    fai_case_result r;
    const int ok = fai_case_check(&c, NULL, &r);
    if (!ok) fprintf(stderr, "  FAIL %s\n       %s\n", r.desc, r.why);
    fai_case_free(&c);
    return ok;
}

/* Decode on a long paged context: one unit per kv head, far fewer units than workers. */
TEST(split_decode_long_context) {
    fai_case_spec spec;
    fai_case_spec_any(&spec);
    spec.batch = 1, spec.heads_q = 8, spec.heads_kv = 2, spec.seq_q = 1, spec.seq_kv = 700;
    spec.head_dim = 32, spec.head_dim_v = 24, spec.kv_lens = FAI_CASE_LEN_PAGED,
    spec.page_size = 16;
    spec.causal = FAI_CAUSAL_NONE, spec.window_left = spec.window_right = -1;
    spec.mask_kind = FAI_MASK_NONE, spec.tile_kv = 16, spec.lse = 1, spec.split = FAI_SPLIT_AUTO;
    static const int32_t full_length[1] = {700};
    spec.lens_kv = full_length;
    for (int64_t workers = 2; workers <= 64; workers *= 2) {
        spec.workers = workers;
        spec.threads = workers % 3 + 1;
        int did_split = 0;
        CHECK(split_case_passes(&spec, 100 + (uint64_t)workers, &did_split));
        if (workers > 2 && !did_split) printf("  no split with %d workers\n", (int)workers);
        CHECK(did_split || workers == 2); /* 2 workers, 2 kv heads: whole units balance */
    }
}

/* Causal prefill with masks and windows: parts of diagonal (masked) tiles are merged too. */
TEST(split_masked_prefill) {
    int splits = 0;
    for (int i = 0; i < 40; i++) {
        fai_case_spec spec;
        fai_case_spec_any(&spec);
        spec.batch = 1 + i % 3, spec.heads_q = 4, spec.heads_kv = 2, spec.seq_q = 9 + i;
        spec.seq_kv = 40 + 3 * i, spec.head_dim = 16, spec.head_dim_v = 16;
        spec.tile_q = 4, spec.tile_kv = 8, spec.workers = 96, spec.threads = 1 + i % 2;
        spec.split = FAI_SPLIT_AUTO;
        int did_split = 0;
        CHECK(split_case_passes(&spec, 5000 + (uint64_t)i, &did_split));
        splits += did_split;
    }
    CHECK(splits >= 20); /* most of them split (35 of the 40 when this was written) */
}

/* The seed's greedy split and the whole-unit split stay correct (they never split). */
TEST(split_strategies_agree_with_oracle) {
    for (int strategy = 0; strategy < 3; strategy++)
        for (int i = 0; i < 10; i++) {
            fai_case_spec spec;
            fai_case_spec_any(&spec);
            spec.workers = 1 + i * 7;
            fai_case c;
            if (fai_case_build(&c, &spec, 900 + (uint64_t)(strategy * 100 + i)) != 0) continue;
            c.problem.split = (fai_split)strategy;
            fai_case_result r;
            const int ok = fai_case_check(&c, NULL, &r);
            if (!ok) fprintf(stderr, "  FAIL split %d %s\n       %s\n", strategy, r.desc, r.why);
            CHECK(ok);
            fai_case_free(&c);
        }
}

/* One plan, bitwise the same output on 1 and 2 threads when units are split. */
TEST(split_bitwise_across_threads) {
    fai_case_spec spec;
    fai_case_spec_any(&spec);
    spec.batch = 2, spec.heads_q = 4, spec.heads_kv = 1, spec.seq_q = 3, spec.seq_kv = 300;
    spec.head_dim = 24, spec.head_dim_v = 24, spec.tile_kv = 8, spec.workers = 37;
    spec.q_dtype = spec.k_dtype = spec.v_dtype = spec.o_dtype = FAI_DTYPE_F32;
    spec.mask_kind = FAI_MASK_NONE, spec.lse = 1, spec.split = FAI_SPLIT_AUTO;
    fai_case c;
    REQUIRE(fai_case_build(&c, &spec, 77) == 0);
    float *first = NULL;
    size_t bytes = c.bytes[3];
    for (int threads = 1; threads <= 2; threads++) {
        c.problem.threads = threads;
        fai_plan *plan;
        REQUIRE(fai_plan_create(&c.problem, &plan) == FAI_OK);
        fai_plan_info info;
        fai_plan_get_info(plan, &info);
        CHECK(info.split_kv);
        const size_t ws_bytes = fai_plan_workspace_size(plan);
        void *ws = malloc(ws_bytes);
        CHECK(fai_run(plan, &c.tensors, ws, ws_bytes) == FAI_OK);
        if (!first) {
            first = malloc(bytes);
            memcpy(first, c.buf[3], bytes);
        } else {
            CHECK(memcmp(first, c.buf[3], bytes) == 0);
        }
        free(ws);
        fai_plan_free(plan);
    }
    free(first);
    fai_case_free(&c);
}
