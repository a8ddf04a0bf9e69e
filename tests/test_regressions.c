/* Regressions: the smallest reproduction of each library bug found by fuzzing, robustness
 * testing or review, kept so that it stays fixed. A test that can abort the process (undefined
 * behaviour under UBSan) runs its body in a child process, so that the rest of the suite still
 * runs in sanitizer builds. */
#include "fai.h"
#include "fai_cases.h"
#include "test_cases.h"
#include "test_util.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs body() in a child process; returns its exit status (128 + signal if it died). */
static int in_child(int (*body)(void)) {
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) _exit(body());
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* fai_plan_create sums visible_pairs (query-key pairs times q heads) in int64_t: a valid problem
 * with more than 2^63 pairs overflowed it (signed overflow, undefined behaviour; in practice a
 * negative count in fai_plan_info). Here: 3 * 2^25 queries, 2^31 - 1 keys, 64 q heads, which
 * plans in a fraction of a second with tile_q 4096. The count must not be negative (saturating,
 * or refusing the problem with FAI_ERR_OVERFLOW, are both fine). */
static int visible_pairs_body(void) {
    fai_problem pb;
    fai_problem_init(&pb);
    pb.batch = 1;
    pb.heads_q = 64;
    pb.heads_kv = 1;
    pb.seq_q = INT64_C(3) << 25;
    pb.seq_kv = INT32_MAX;
    pb.head_dim = 1;
    pb.tile_q = 4096;
    pb.workers = 1;
    pb.threads = 1;
    fai_plan *plan = NULL;
    const fai_status status = fai_plan_create(&pb, &plan);
    if (status == FAI_ERR_OVERFLOW && fai_last_error()[0]) return 0;
    if (status != FAI_OK) {
        fprintf(stderr, "  fai_plan_create: %s: %s\n", fai_status_string(status), fai_last_error());
        return 1;
    }
    fai_plan_info info;
    const int ok = fai_plan_get_info(plan, &info) == FAI_OK && info.visible_pairs >= 0;
    if (!ok) fprintf(stderr, "  visible_pairs = %lld\n", (long long)info.visible_pairs);
    fai_plan_free(plan);
    return ok ? 0 : 1;
}

TEST(regress_visible_pairs_overflow) { CHECK(in_child(visible_pairs_body) == 0); }

/* A NaN in K at a position the row sees makes the row's running sum NaN; the end of the unit
 * took a sum that is not > 0 for "the row saw nothing" and wrote O = 0, LSE = -inf: the row
 * looked fully masked (and fai_merge_states would then drop it silently) instead of carrying
 * the NaN. One query, keys (1, NaN, 1, 1): O and LSE must be NaN, on every table, in the packed
 * (prefill) and the direct (decode) paths alike. */
TEST(regress_visible_nan_k_is_not_a_masked_row) {
    for (int decode = 0; decode < 2; decode++) {
        fai_problem pb;
        fai_problem_init(&pb);
        pb.batch = 1;
        pb.heads_q = decode ? 1 : 16;
        pb.heads_kv = 1;
        pb.seq_q = decode ? 1 : 8;
        pb.seq_kv = 4;
        pb.head_dim = 1;
        pb.k_dtype = pb.v_dtype = FAI_DTYPE_F32;
        pb.workers = pb.threads = 1;
        float q[16 * 8], k[4] = {1.0f, NAN, 1.0f, 1.0f}, v[4] = {1, 2, 3, 4};
        float o[16 * 8], lse[16 * 8];
        for (int i = 0; i < 16 * 8; i++)
            q[i] = 0.5f, o[i] = lse[i] = -7.0f;
        fai_plan *plan = NULL;
        REQUIRE(fai_plan_create(&pb, &plan) == FAI_OK);
        fai_tensors t;
        memset(&t, 0, sizeof t);
        t.q = fai_tensor_bshd(q, FAI_DTYPE_F32, pb.seq_q, pb.heads_q, 1);
        t.k = fai_tensor_bshd(k, FAI_DTYPE_F32, 4, 1, 1);
        t.v = fai_tensor_bshd(v, FAI_DTYPE_F32, 4, 1, 1);
        t.o = fai_tensor_bshd(o, FAI_DTYPE_F32, pb.seq_q, pb.heads_q, 1);
        t.lse.data = lse;
        t.lse.dtype = FAI_DTYPE_F32;
        t.lse.stride_seq = 1;
        t.lse.stride_head = pb.seq_q;
        t.lse.stride_batch = pb.heads_q * pb.seq_q;
        const size_t size = fai_plan_workspace_size(plan);
        void *ws = malloc(size);
        REQUIRE(ws != NULL);
        CHECK(fai_run(plan, &t, ws, size) == FAI_OK);
        int not_nan = 0;
        for (int64_t r = 0; r < pb.seq_q * pb.heads_q; r++)
            not_nan += !isnan(o[r]) + !isnan(lse[r]);
        if (not_nan)
            fprintf(stderr, "  %s: O[0] = %g, LSE[0] = %g, expected NaN (%d values not NaN)\n",
                    decode ? "decode" : "prefill", o[0], lse[0], not_nan);
        CHECK(not_nan == 0);
        free(ws);
        fai_plan_free(plan);
    }
}

/* The matrix engine computes each row block of 32 rows on the keys its band lets those rows see
 * (band_seen_keys). Under a sliding window one tile may lie wholly before the window of a later
 * block of the same unit (the earlier blocks see it): the range's start, past the tile's end,
 * came out after its end, and the softmax cleared a negative number of padding columns (a crash
 * in memset). Found by a 60,000-case sweep on `amx`: 61 queries of 2 heads in one unit (4 row
 * blocks), bottom-right causal with a window of 61 keys to the left, 175 keys. Every table must
 * run it within the tolerances. */
static int window_past_tile_body(void) {
    fai_case_spec s;
    fai_case_spec_plain(&s);
    s.heads_q = 2;
    s.seq_q = 61;
    s.seq_kv = 175;
    s.head_dim = 7;
    s.head_dim_v = 10;
    s.q_dtype = FAI_DTYPE_BF16;
    s.k_dtype = FAI_DTYPE_F16;
    s.v_dtype = FAI_DTYPE_BF16;
    s.o_dtype = FAI_DTYPE_F16;
    s.causal = FAI_CAUSAL_BOTTOM_RIGHT;
    s.window_left = 61;
    s.window_right = 157;
    s.tile_q = 998;
    s.amplitude = 0.5;
    int failed = 0;
    for (int64_t pipeline = 1; pipeline <= 2; pipeline++) {
        s.pipeline_tiles = pipeline;
        if (!case_run_says_why(&s, 4242)) failed = 1;
    }
    return failed;
}

TEST(regress_window_past_a_later_blocks_tile) { CHECK(in_child(window_past_tile_body) == 0); }

/* The matrix engine left out the pass P_lo V_lo for f16 V (held as bf16 hi + lo), taking it for
 * 2^-16 relative; but both lo parts are rests of truncations, up to 2^-7 of their values and of
 * their sign, so the pass can hold 2^-14 A. A constructed row makes them near their largest:
 * every V element f16(1 + 7/1024) (a lo part of 7/8 of bf16's step), key 0 scoring 0 and every
 * other key ln(0.5 (1 + 0.99 / 128)), so each P sits just below a bf16 step. The output is V
 * itself; without the pass it was 1.02 of the tolerance off on `amx-emu`. Every table must hold
 * it within the tolerance. */
TEST(regress_f16_v_parts_all_summed) {
    for (int64_t keys = 64; keys <= 128; keys += 64) {
        fai_case_spec s;
        fai_case_spec_plain(&s);
        s.seq_q = 64;
        s.seq_kv = keys;
        s.head_dim = s.head_dim_v = 32;
        s.k_dtype = FAI_DTYPE_BF16;
        s.v_dtype = FAI_DTYPE_F16;
        s.scale = 1.0;
        s.workers = s.threads = 0;
        fai_case c;
        REQUIRE(fai_case_build(&c, &s, 1) == 0);
        const double score = log(0.5 * (1.0 + 0.99 / 128.0));
        for (int64_t i = 0; i < s.seq_q; i++)
            for (int64_t d = 0; d < 32; d++)
                fai_case_set(&c.tensors.q, 0, i, 0, d, d ? 0.0 : -(double)(float)score);
        for (int64_t j = 0; j < keys; j++)
            for (int64_t d = 0; d < 32; d++) {
                fai_case_set(&c.tensors.k, 0, j, 0, d, d == 0 && j > 0 ? -1.0 : 0.0);
                fai_case_set(&c.tensors.v, 0, j, 0, d, 1.0 + 7.0 / 1024.0);
            }
        fai_case_reset(&c);
        CHECK(case_check_says_why(&c));
        fai_case_free(&c);
    }
}

/* The matrix engine formed each exponent as fma(s, scale log2e, -new_max log2e), the shift
 * rounded apart from the scores: past 2^31 the row's largest key landed more than 128 from 0,
 * and a finite logit of 3e9 gave O = NaN (P = Inf) and of 1e10 O = NaN with LSE = -inf (every P
 * 0). Rows whose |max log2e| reaches 2^20 now subtract the max before log2e. One key scoring X,
 * three 0: O is that key's V row and LSE X, with and without a pass that scales S first (ALiBi of
 * slope 0), on every table. */
TEST(regress_huge_finite_logits_stay_numbers) {
    static const double logits[] = {3e9, 1e10, 1e20, -3e9};
    for (size_t l = 0; l < sizeof logits / sizeof logits[0]; l++)
        for (int alibi = 0; alibi < 2; alibi++) {
            fai_case_spec s;
            fai_case_spec_plain(&s);
            s.seq_q = 16, s.seq_kv = 4, s.head_dim = s.head_dim_v = 2;
            s.k_dtype = s.v_dtype = FAI_DTYPE_BF16;
            s.scale = 1.0, s.alibi = alibi;
            fai_case c;
            REQUIRE(fai_case_build(&c, &s, 1) == 0);
            if (alibi) c.alibi_slopes[0] = 0.0f;
            /* a logit X for key 0 (K's bf16 rounding of X / 2, times 2), 0 for the others */
            for (int64_t i = 0; i < s.seq_q; i++)
                for (int64_t d = 0; d < 2; d++)
                    fai_case_set(&c.tensors.q, 0, i, 0, d, 1.0);
            for (int64_t j = 0; j < 4; j++)
                for (int64_t d = 0; d < 2; d++) {
                    fai_case_set(&c.tensors.k, 0, j, 0, d, j == 0 ? logits[l] / 2 : 0.0);
                    fai_case_set(&c.tensors.v, 0, j, 0, d, j == 0 ? 1.0 : -1.0);
                }
            fai_case_reset(&c);
            CHECK(case_check_says_why(&c));
            fai_case_free(&c);
        }
}
