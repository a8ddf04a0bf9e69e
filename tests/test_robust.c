/* Robustness: NaN and Inf in the inputs, extreme logits, f16 saturation, concurrent runs, pools
 * and determinism. Every test runs once per micro-kernel table (the runner's FAI_ISA runs).
 *
 * What the library guarantees about non-finite inputs, and what these tests hold it to:
 *   - A position a row cannot see (past the lengths, outside the causal band or the window,
 *     masked out by a KEEP/DROP mask or an additive -inf) contributes nothing to that row, even
 *     when K or V hold NaN or Inf there. For K this is the mask: the score becomes -inf whatever
 *     K held. For V it is the PV rule: a row adds only the keys it sees (P != 0) on every tile
 *     with masked positions, so 0 x NaN is never formed. Such a row is finite and equal to the
 *     fp64 reference.
 *   - A NaN at a position a row does see poisons that row as IEEE arithmetic says: a NaN in K
 *     makes the row's scores, and so its whole O row and its LSE, NaN; a NaN in element d of V
 *     makes O[d] NaN and leaves the other elements and the LSE finite. Only the rows that see
 *     the position are affected; the other rows of the same tile are finite and correct.
 * The oracle computes the same semantics in double, so a result is compared element by element:
 * NaN exactly where the reference is NaN, the documented tolerance everywhere else. */
#include "fai.h"
#include "fai_cases.h"
#include "test_cases.h"
#include "fai_oracle.h"
#include "test_util.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* -- helpers ----------------------------------------------------------------------------------- */

/* Runs `plan` on the case's tensors with a fresh workspace (misaligned on purpose). */
static fai_status run_with(const fai_plan *plan, const fai_tensors *t) {
    const size_t size = fai_plan_workspace_size(plan);
    unsigned char *ws = malloc(size + 8);
    if (!ws) return FAI_ERR_NO_MEMORY;
    memset(ws, 0xFF, size + 8);
    const fai_status status = fai_run(plan, t, ws + 4, size);
    free(ws);
    return status;
}

/* Plans the case's problem (on `pool`, NULL: the default) and runs it. */
static fai_status run_case(fai_case *c, fai_pool *pool) {
    fai_plan *plan = NULL;
    fai_status status = fai_plan_create(&c->problem, &plan);
    if (status != FAI_OK) {
        fprintf(stderr, "  fai_plan_create: %s\n", fai_last_error());
        return status;
    }
    if (pool) fai_plan_set_pool(plan, pool);
    status = run_with(plan, &c->tensors);
    if (status != FAI_OK) fprintf(stderr, "  fai_run: %s\n", fai_last_error());
    fai_plan_free(plan);
    return status;
}

enum {
    NAN_ROWS_SKIP,   /* elements whose reference is NaN are not looked at */
    NAN_ROWS_REQUIRE /* they must be NaN in the result too */
};

typedef struct compare_stats {
    int64_t checked;  /* elements compared against a finite reference */
    int64_t nan_refs; /* reference elements that are NaN (O and LSE) */
    int64_t bad;
} compare_stats;

static double load_f32(const void *data, int64_t index) {
    float f;
    memcpy(&f, (const char *)data + index * 4, 4);
    return f;
}

/* Compares the case's O (and LSE) with the oracle: rows without a visible key and rows past the
 * lengths must be 0 (-inf), elements with a finite reference within the case's tolerance, and
 * elements with a NaN reference NaN (NAN_ROWS_REQUIRE) or anything (NAN_ROWS_SKIP). */
static compare_stats compare_to_oracle(fai_case *c, int nan_rows, const char *label) {
    compare_stats st = {0, 0, 0};
    const fai_problem *pb = &c->problem;
    fai_oracle_out ref;
    char err[256];
    if (fai_oracle_run(pb, &c->tensors, &ref, err, sizeof err) != FAI_OK) {
        fprintf(stderr, "  %s: oracle: %s\n", label, err);
        st.bad = 1;
        return st;
    }
    const double tol = fai_case_tolerance(pb->q_dtype, pb->k_dtype, pb->v_dtype, pb->o_dtype);
    const double tol_lse = fai_case_tolerance(pb->q_dtype, pb->k_dtype, pb->v_dtype, FAI_DTYPE_F32);
    const fai_tensor *o = &c->tensors.o, *l = &c->tensors.lse;
    const int packed = pb->cu_seqlens_q != NULL;
    const int64_t Hq = pb->heads_q, Dv = ref.head_dim_v;
    for (int64_t g = 0; g < ref.groups; g++)
        for (int64_t row = 0; row < ref.rows; row++)
            for (int64_t h = 0; h < Hq; h++) {
                const size_t ri = (size_t)((g * ref.rows + row) * Hq + h);
                const int valid = ref.row_state[ri] == FAI_ORACLE_ROW_VALID;
                const int64_t base =
                    (packed ? 0 : g * o->stride_batch) + row * o->stride_seq + h * o->stride_head;
                for (int64_t d = 0; d <= Dv; d++) { /* d == Dv: the LSE */
                    double x, want;
                    double limit;
                    if (d < Dv) {
                        x = fai_oracle_load(o->data, o->dtype, base + d);
                        want = valid ? ref.o[ri * (size_t)Dv + (size_t)d] : 0.0;
                        /* rows that see nothing: exactly 0 */
                        limit = valid ? fai_case_o_limit(&ref, ri, d, tol) : 0.0;
                    } else {
                        if (!l->data) continue;
                        x = load_f32(l->data, (packed ? 0 : g * l->stride_batch) +
                                                  h * l->stride_head + row * l->stride_seq);
                        want = ref.lse[(g * Hq + h) * ref.rows + row];
                        limit = fai_case_lse_limit(&ref, ri, want, tol_lse);
                    }
                    int ok;
                    if (isnan(want)) {
                        st.nan_refs++;
                        ok = nan_rows == NAN_ROWS_SKIP || isnan(x);
                    } else {
                        st.checked++;
                        ok = want == -INFINITY ? x == -INFINITY
                                               : !isnan(x) && fabs(x - want) <= limit;
                    }
                    if (!ok && st.bad++ < 3)
                        fprintf(stderr,
                                "  %s: %s[b=%lld row=%lld h=%lld d=%lld] = %.9g, "
                                "reference %.9g\n    case %s\n",
                                label, d < Dv ? "O" : "LSE", (long long)g, (long long)row,
                                (long long)h, (long long)(d < Dv ? d : 0), x, want, c->desc);
                }
            }
    fai_oracle_out_free(&ref);
    return st;
}

/* A small fixed problem, all f32 (the tightest tolerance), contiguous BSHD, full lengths, LSE:
 * B 2, Hkv 2, Skv 50, D 16, Dv 12, kv tiles of 16 keys (so tiles are fully visible, partly
 * visible and invisible). decode: Sq 1 and a GQA group of 4 (the direct K/V path), else Sq 9
 * and a group of 2. */
static void small_spec(fai_case_spec *s, int decode) {
    fai_case_spec_any(s);
    s->positions = 0; /* the tests below build their expectations from the local diagonal */
    s->batch = 2;
    s->heads_kv = 2;
    s->heads_q = decode ? 8 : 4;
    s->seq_q = decode ? 1 : 9;
    s->seq_kv = 50;
    s->head_dim = 16;
    s->head_dim_v = 12;
    s->q_dtype = s->k_dtype = s->v_dtype = s->o_dtype = FAI_DTYPE_F32;
    s->causal = FAI_CAUSAL_NONE;
    s->window_left = s->window_right = -1;
    s->mask_kind = FAI_MASK_NONE;
    s->mask_shape = FAI_CASE_MASK_B_H_SQ_SKV;
    s->mask_density = 0;
    s->q_lens = s->kv_lens = FAI_CASE_LEN_FULL;
    s->layout = FAI_CASE_LAYOUT_BSHD;
    s->lse = 1;
    s->workers = 3;
    s->threads = 0;
    s->split = FAI_SPLIT_AUTO;
    s->tile_q = 0;
    s->tile_kv = 16;
    s->scale = FAI_CASE_SCALE_DEFAULT;
    s->amplitude = 0.5;
    s->softcap = 0.0; /* and no modifiers: some tests below expect O rows equal to V */
    s->alibi = s->sinks = 0;
}

/* Whether query i of a sequence of lq queries and lk keys sees key j under causal and window
 * (the oracle's rule). */
static int band_sees(const fai_problem *pb, int64_t lq, int64_t lk, int64_t i, int64_t j) {
    const int64_t diag = pb->causal == FAI_CAUSAL_TOP_LEFT ? i : i + lk - lq;
    const int64_t wr = pb->causal != FAI_CAUSAL_NONE ? 0 : pb->window_right;
    if (pb->window_left >= 0 && j < diag - pb->window_left) return 0;
    if (wr >= 0 && j > diag + wr) return 0;
    return j >= 0 && j < lk;
}

/* Sets mask element (b, h, i, j) to visible or masked out, in the mask's own convention. */
static void set_mask(fai_case *c, int64_t b, int64_t h, int64_t i, int64_t j, int visible) {
    const fai_mask *m = &c->tensors.mask;
    const int64_t at = b * m->stride_batch + h * m->stride_head + i * m->stride_q + j;
    switch (c->problem.mask_kind) {
    case FAI_MASK_KEEP:
        ((unsigned char *)m->data)[at] = visible ? 1 : 0;
        break;
    case FAI_MASK_DROP:
        ((unsigned char *)m->data)[at] = visible ? 0 : 1;
        break;
    case FAI_MASK_ADD: {
        const float f = visible ? 0.25f : -INFINITY;
        memcpy((unsigned char *)m->data + at * 4, &f, 4);
        break;
    }
    case FAI_MASK_KEEP_BITS: {
        unsigned char *byte = (unsigned char *)m->data + at - j + j / 8;
        const unsigned char bit = (unsigned char)(1u << (j % 8));
        *byte = visible ? (unsigned char)(*byte | bit) : (unsigned char)(*byte & ~bit);
        break;
    }
    case FAI_MASK_NONE:
        break;
    }
}

/* Stores `value` in every element of key j of K (which == 0) or V (which == 1), batch b, kv
 * head hk; d >= 0 stores only element d. */
static void poison_key(fai_case *c, int which, int64_t b, int64_t j, int64_t hk, int64_t d,
                       double value) {
    fai_tensor *t = which ? &c->tensors.v : &c->tensors.k;
    const int64_t dims = which ? fai_oracle_head_dim_v(&c->problem) : c->problem.head_dim;
    for (int64_t x = 0; x < dims; x++)
        if (d < 0 || x == d) fai_case_set(t, b, j, hk, x, value);
}

/* -- (i) NaN and Inf at positions a row cannot see never reach it -------------------------------
 */

/* The configurations of the masking tests: causal either way, a window, and explicit masks of
 * each kind, in prefill and decode shapes. */
typedef struct mask_config {
    const char *name;
    int decode;
    fai_causal causal;
    int64_t window_left, window_right;
    fai_mask_kind mask_kind;
    int64_t workers;
} mask_config;

static const mask_config mask_configs[] = {
    {"causal bottom-right", 0, FAI_CAUSAL_BOTTOM_RIGHT, -1, -1, FAI_MASK_NONE, 3},
    {"causal top-left", 0, FAI_CAUSAL_TOP_LEFT, -1, -1, FAI_MASK_NONE, 2},
    {"window 10,3", 0, FAI_CAUSAL_NONE, 10, 3, FAI_MASK_NONE, 3},
    {"keep mask", 0, FAI_CAUSAL_NONE, -1, -1, FAI_MASK_KEEP, 3},
    {"drop mask + causal", 0, FAI_CAUSAL_BOTTOM_RIGHT, -1, -1, FAI_MASK_DROP, 1},
    {"additive -inf mask", 0, FAI_CAUSAL_NONE, -1, -1, FAI_MASK_ADD, 4},
    {"decode window 20", 1, FAI_CAUSAL_NONE, 20, -1, FAI_MASK_NONE, 7},
    {"decode keep mask", 1, FAI_CAUSAL_BOTTOM_RIGHT, -1, -1, FAI_MASK_KEEP, 7},
    {"decode additive mask", 1, FAI_CAUSAL_NONE, -1, -1, FAI_MASK_ADD, 1},
};
#define MASK_CONFIGS ((int)(sizeof mask_configs / sizeof mask_configs[0]))

/* Builds the configuration's case. With an explicit mask, key 5 is masked out for every row of
 * batch 1, and key 37 for the rows of even index (query position plus head); everything else is
 * visible. */
static int build_masked_case(fai_case *c, const mask_config *mc, uint64_t seed) {
    fai_case_spec s;
    small_spec(&s, mc->decode);
    s.causal = mc->causal;
    s.window_left = mc->window_left;
    s.window_right = mc->window_right;
    s.mask_kind = mc->mask_kind;
    s.workers = mc->workers;
    if (fai_case_build(c, &s, seed) != 0) {
        fprintf(stderr, "  build: %s\n", c->desc);
        return -1;
    }
    if (mc->mask_kind != FAI_MASK_NONE)
        for (int64_t b = 0; b < c->problem.batch; b++)
            for (int64_t h = 0; h < c->problem.heads_q; h++)
                for (int64_t i = 0; i < c->problem.seq_q; i++)
                    for (int64_t j = 0; j < c->problem.seq_kv; j++)
                        set_mask(c, b, h, i, j,
                                 !((b == 1 && j == 5) || (j == 37 && (i + h) % 2 == 0)));
    return 0;
}

/* Whether any row of (batch b, kv head hk) sees key j. */
static int key_seen(const fai_case *c, int64_t b, int64_t hk, int64_t j) {
    const fai_problem *pb = &c->problem;
    const int64_t group = pb->heads_q / pb->heads_kv;
    for (int64_t g = 0; g < group; g++)
        for (int64_t i = 0; i < pb->seq_q; i++) {
            if (!band_sees(pb, pb->seq_q, pb->seq_kv, i, j)) continue;
            if (pb->mask_kind == FAI_MASK_NONE) return 1;
            const int64_t h = hk * group + g;
            if (!((b == 1 && j == 5) || (j == 37 && (i + h) % 2 == 0))) return 1;
        }
    return 0;
}

/* Non-finite values at keys some rows cannot see (and at keys no row sees): the rows that cannot
 * see them are finite and correct. which: 0 K, 1 V, 2 both. */
static int masked_positions_case(const mask_config *mc, int which, uint64_t seed,
                                 int64_t *partly_seen) {
    fai_case c;
    if (build_masked_case(&c, mc, seed) != 0) return 1;
    /* candidate keys: the mask's special ones, the causal diagonal's end, the window's edges.
     * Each (batch, kv head) gets one, the first in its rotation of the list that some of its rows
     * cannot see (a key every row sees would poison them all). */
    static const int64_t keys[] = {37, 5, 0, 45, 13, 49, 9, 25, 44};
    const int count = (int)(sizeof keys / sizeof keys[0]);
    const int64_t group = c.problem.heads_q / c.problem.heads_kv;
    for (int64_t b = 0; b < c.problem.batch; b++)
        for (int64_t hk = 0; hk < c.problem.heads_kv; hk++)
            for (int k = 0; k < count; k++) {
                const int64_t j = keys[(k + b * 2 + hk) % count];
                int any_blind = 0;
                for (int64_t g = 0; g < group; g++)
                    for (int64_t i = 0; i < c.problem.seq_q; i++) {
                        const int64_t h = hk * group + g;
                        int sees = band_sees(&c.problem, c.problem.seq_q, c.problem.seq_kv, i, j);
                        if (c.problem.mask_kind != FAI_MASK_NONE && sees)
                            sees = !((b == 1 && j == 5) || (j == 37 && (i + h) % 2 == 0));
                        any_blind |= !sees;
                    }
                if (!any_blind) continue;
                *partly_seen += key_seen(&c, b, hk, j);
                const double value = (k % 3 == 2) ? INFINITY : (k % 3 == 1) ? -INFINITY : NAN;
                if (which != 1) poison_key(&c, 0, b, j, hk, -1, value);
                if (which != 0) poison_key(&c, 1, b, j, hk, -1, k % 2 ? NAN : -value);
                break;
            }
    fai_case_reset(&c);
    int failed = 0;
    if (run_case(&c, NULL) != FAI_OK) {
        failed = 1;
    } else {
        char label[128];
        snprintf(label, sizeof label, "%s, non-finite %s", mc->name,
                 which == 0   ? "K"
                 : which == 1 ? "V"
                              : "K and V");
        const compare_stats st = compare_to_oracle(&c, NAN_ROWS_SKIP, label);
        failed = st.bad != 0 || st.checked == 0;
        if (st.checked == 0) fprintf(stderr, "  %s: no finite reference left\n", label);
    }
    fai_case_free(&c);
    return failed;
}

/* A poisoning case run on every mask configuration (seeds from seed0): the cases that failed;
 * `count` adds up what each case counted. */
typedef int (*config_case_fn)(const mask_config *mc, int which, uint64_t seed, int64_t *count);
static int on_every_config(config_case_fn fn, int which, uint64_t seed0, int64_t *count) {
    int failed = 0;
    for (int i = 0; i < MASK_CONFIGS; i++)
        failed += fn(&mask_configs[i], which, seed0 + (uint64_t)i, count);
    return failed;
}

TEST(robust_masked_k_never_leaks) {
    int64_t partly_seen = 0;
    CHECK(on_every_config(masked_positions_case, 0, 2000, &partly_seen) == 0);
    CHECK(partly_seen > 0); /* some poisoned keys share a tile with rows that see them */
}

TEST(robust_masked_v_never_leaks) {
    int64_t partly_seen = 0;
    CHECK(on_every_config(masked_positions_case, 1, 2100, &partly_seen) == 0);
    CHECK(on_every_config(masked_positions_case, 2, 2200, &partly_seen) == 0);
    CHECK(partly_seen > 0);
}

/* Non-finite values past the lengths, in page tails and in unreferenced pages are what the case
 * builder puts there anyway: random cases with padded, packed and paged lengths and every mask
 * kind, checked by fai_case_check (which fails on any NaN in O). */
TEST(robust_garbage_outside_lengths) {
    int failed = 0;
    for (int i = 0; i < 24; i++) {
        fai_case_spec s;
        fai_case_spec_any(&s);
        s.q_lens = i % 3;
        s.kv_lens = i % 4;
        s.mask_kind = i % 4;
        s.max_work = 2e5;
        if (!case_run_says_why(&s, 2300 + (uint64_t)i)) failed++;
    }
    CHECK(failed == 0);
}

/* -- (i) a NaN a row sees poisons that row, and only rows that see it ---------------------------
 */

/* A NaN at one key of one (batch, kv head): rows that see it are NaN where the reference is, the
 * others are finite and correct. which: 0 K (the whole row and its LSE), 1 V (one element). */
static int visible_nan_case(const mask_config *mc, int which, uint64_t seed, int64_t *poisoned) {
    fai_case c;
    if (build_masked_case(&c, mc, seed) != 0) return 1;
    /* key 40 of batch 1, kv head 0: seen by some rows in every configuration */
    poison_key(&c, which, 1, 40, 0, which ? 3 : -1, NAN);
    /* and rows of other batches / heads must not notice */
    fai_case_reset(&c);
    int failed = 0;
    if (run_case(&c, NULL) != FAI_OK) {
        failed = 1;
    } else {
        char label[128];
        snprintf(label, sizeof label, "%s, NaN in a visible %s", mc->name, which ? "V" : "K");
        const compare_stats st = compare_to_oracle(&c, NAN_ROWS_REQUIRE, label);
        failed = st.bad != 0 || st.checked == 0;
        *poisoned += st.nan_refs;
    }
    fai_case_free(&c);
    return failed;
}

TEST(robust_visible_nan_v_poisons_only_its_rows) {
    int64_t poisoned = 0;
    CHECK(on_every_config(visible_nan_case, 1, 2400, &poisoned) == 0);
    CHECK(poisoned > 0);
}

TEST(robust_visible_nan_k_poisons_only_its_rows) {
    int64_t poisoned = 0;
    CHECK(on_every_config(visible_nan_case, 0, 2500, &poisoned) == 0);
    CHECK(poisoned > 0);
}

/* -- (ii) extreme logits -------------------------------------------------------------------- */

/* Additive masks of many -inf (rows fully masked among them) and large finite values. */
TEST(robust_additive_inf_masks) {
    int failed = 0;
    for (int i = 0; i < 12; i++) {
        fai_case_spec s;
        small_spec(&s, i % 3 == 0);
        s.mask_kind = FAI_MASK_ADD;
        s.mask_shape = i % FAI_CASE_MASK_SHAPES;
        s.mask_density = i < 4 ? 100 : i < 8 ? 90 : 50;
        s.causal = i % 2 ? FAI_CAUSAL_BOTTOM_RIGHT : FAI_CAUSAL_NONE;
        s.workers = 1 + i % 5;
        if (!case_run_says_why(&s, 2600 + (uint64_t)i)) failed++;
    }
    CHECK(failed == 0);
}

/* All logits equal (Q = 0, or every key the same): a uniform softmax, exactly. */
TEST(robust_all_equal_logits) {
    for (int variant = 0; variant < 4; variant++) {
        fai_case_spec s;
        small_spec(&s, variant % 2);
        s.causal = variant >= 2 ? FAI_CAUSAL_BOTTOM_RIGHT : FAI_CAUSAL_NONE;
        fai_case c;
        REQUIRE(fai_case_build(&c, &s, 2700 + (uint64_t)variant) == 0);
        const fai_problem *pb = &c.problem;
        for (int64_t b = 0; b < pb->batch; b++) {
            if (variant < 2) {
                for (int64_t i = 0; i < pb->seq_q; i++)
                    for (int64_t h = 0; h < pb->heads_q; h++)
                        for (int64_t d = 0; d < pb->head_dim; d++)
                            fai_case_set(&c.tensors.q, b, i, h, d, 0.0);
            } else {
                for (int64_t j = 0; j < pb->seq_kv; j++)
                    for (int64_t h = 0; h < pb->heads_kv; h++)
                        for (int64_t d = 0; d < pb->head_dim; d++)
                            fai_case_set(&c.tensors.k, b, j, h, d, 0.125 * (double)(d % 3));
            }
        }
        fai_case_reset(&c);
        CHECK(case_check_says_why(&c));
        fai_case_free(&c);
    }
}

/* Logits of magnitude `big` (1e4 or 1e30) from f32 Q and K: q = (+-q0, 0, ...), k = (m * k0,
 * ...) with m an integer in [-100, 100], so logits are m * q0 * k0 with gaps of at least
 * q0 * k0: the softmax is one-hot (or uniform over tied keys). f32 output, no NaN, the oracle's
 * values. */
static int large_logits_case(double q0, double k0, int variant, uint64_t seed) {
    fai_case_spec s;
    small_spec(&s, variant % 2);
    s.scale = 1.0;
    s.head_dim = 4;
    s.causal = variant % 3 == 2 ? FAI_CAUSAL_BOTTOM_RIGHT : FAI_CAUSAL_NONE;
    s.mask_kind = variant % 3 == 1 ? FAI_MASK_ADD : FAI_MASK_NONE;
    s.mask_density = 30;
    s.workers = 1 + variant % 4;
    fai_case c;
    if (fai_case_build(&c, &s, seed) != 0) return 1;
    const fai_problem *pb = &c.problem;
    fai_rng g = {seed};
    for (int64_t b = 0; b < pb->batch; b++) {
        for (int64_t i = 0; i < pb->seq_q; i++)
            for (int64_t h = 0; h < pb->heads_q; h++)
                for (int64_t d = 0; d < pb->head_dim; d++)
                    fai_case_set(&c.tensors.q, b, i, h, d, d ? 0.0 : (i + h) % 2 ? -q0 : q0);
        for (int64_t j = 0; j < pb->seq_kv; j++)
            for (int64_t h = 0; h < pb->heads_kv; h++) {
                /* variant 3: every key equal, all logits +-big: a uniform softmax */
                const double m = variant == 3 ? 1.0 : (double)fai_rng_range(&g, -100, 100);
                fai_case_set(&c.tensors.k, b, j, h, 0, m * k0);
            }
    }
    fai_case_reset(&c);
    fai_case_result r;
    const int ok = fai_case_check(&c, NULL, &r);
    if (!ok) fprintf(stderr, "  logits ~%g: %s\n  %s\n", q0 * k0 * 100, r.desc, r.why);
    fai_case_free(&c);
    return !ok;
}

TEST(robust_large_logits_1e4) {
    int failed = 0;
    for (int variant = 0; variant < 6; variant++)
        failed += large_logits_case(10.0, 1.0, variant, 2800 + (uint64_t)variant);
    CHECK(failed == 0);
}

TEST(robust_large_logits_1e30) {
    int failed = 0;
    for (int variant = 0; variant < 6; variant++)
        failed += large_logits_case(1e15, 1e13, variant, 2900 + (uint64_t)variant);
    CHECK(failed == 0);
}

/* -- (iii) f16 output saturates --------------------------------------------------------------- */

/* V holds one value per (batch, kv head) in f32 (1e5, 65520, 1e30, ...): every output element is
 * that value's f16 saturation: +-65504 (0x7bff / 0xfbff) for magnitudes past the f16 range,
 * never +-inf; values inside the range round to nearest. */
TEST(robust_f16_output_saturates) {
    static const struct {
        double v;
        uint16_t bits;
    } values[] = {
        {1e5, 0x7bff},   {-1e5, 0xfbff},    {65520.0, 0x7bff}, {-65520.0, 0xfbff}, {1e30, 0x7bff},
        {-3e36, 0xfbff}, {65504.0, 0x7bff}, {65519.0, 0x7bff}, {-7e4, 0xfbff},     {2.0, 0x4000},
    };
    for (int decode = 0; decode < 2; decode++) {
        fai_case_spec s;
        small_spec(&s, decode);
        s.o_dtype = FAI_DTYPE_F16;
        s.causal = FAI_CAUSAL_BOTTOM_RIGHT;
        fai_case c;
        REQUIRE(fai_case_build(&c, &s, 3000 + (uint64_t)decode) == 0);
        const fai_problem *pb = &c.problem;
        const int64_t dv = fai_oracle_head_dim_v(pb);
        for (int64_t b = 0; b < pb->batch; b++)
            for (int64_t hk = 0; hk < pb->heads_kv; hk++)
                for (int64_t j = 0; j < pb->seq_kv; j++)
                    for (int64_t d = 0; d < dv; d++)
                        fai_case_set(&c.tensors.v, b, j, hk, d,
                                     values[(b * pb->heads_kv + hk + d + decode * 4) % 10].v);
        fai_case_reset(&c);
        REQUIRE(run_case(&c, NULL) == FAI_OK);
        int bad = 0, saturated = 0;
        const int64_t group = pb->heads_q / pb->heads_kv;
        for (int64_t b = 0; b < pb->batch; b++)
            for (int64_t i = 0; i < pb->seq_q; i++)
                for (int64_t h = 0; h < pb->heads_q; h++)
                    for (int64_t d = 0; d < dv; d++) {
                        const fai_tensor *o = &c.tensors.o;
                        uint16_t bits;
                        memcpy(&bits,
                               (const char *)o->data +
                                   2 * (b * o->stride_batch + i * o->stride_seq +
                                        h * o->stride_head + d),
                               2);
                        const int k = (int)((b * pb->heads_kv + h / group + d + decode * 4) % 10);
                        saturated += (values[k].bits & 0x7fff) == 0x7bff;
                        if (bits != values[k].bits && bad++ < 3)
                            fprintf(stderr,
                                    "  O[%lld,%lld,%lld,%lld] = 0x%04x, want 0x%04x (V %g)\n",
                                    (long long)b, (long long)i, (long long)h, (long long)d, bits,
                                    values[k].bits, values[k].v);
                    }
        CHECK(bad == 0);
        CHECK(saturated > 0);
        fai_case_free(&c);
    }
}

/* -- (iv) concurrency ---------------------------------------------------------------------------
 */

typedef struct thread_run {
    const fai_plan *plan;
    fai_case *c;
    int repeats;
    int failed;
} thread_run;

static void *thread_main(void *arg) {
    thread_run *run = arg;
    for (int k = 0; k < run->repeats; k++) {
        fai_case_reset(run->c);
        if (run_with(run->plan, &run->c->tensors) != FAI_OK) run->failed++;
    }
    return NULL;
}

/* One plan, four user threads at once, each on its own tensors (different values and strides,
 * same problem) with its own workspace; every result correct. Plans with threads = 0 (the pool)
 * and threads = 1 (the calling thread only, truly concurrent kernels). */
TEST(robust_one_plan_four_threads) {
    enum { THREADS = 4 };
    for (int variant = 0; variant < 2; variant++) {
        fai_case cases[THREADS];
        fai_case_spec s;
        small_spec(&s, 0);
        s.causal = FAI_CAUSAL_BOTTOM_RIGHT;
        s.layout = FAI_CASE_ANY; /* strides are given at run time: each thread its own */
        s.workers = 5;
        s.threads = variant ? 1 : 0;
        /* the modifiers' arrays are given at run time too: each thread its own slopes and sinks */
        s.softcap = 10.0;
        s.alibi = s.sinks = 1;
        for (int t = 0; t < THREADS; t++)
            REQUIRE(fai_case_build(&cases[t], &s, 3100 + (uint64_t)t) == 0);
        fai_plan *plan = NULL;
        REQUIRE(fai_plan_create(&cases[0].problem, &plan) == FAI_OK);
        pthread_t threads[THREADS];
        thread_run runs[THREADS];
        for (int t = 0; t < THREADS; t++) {
            runs[t] = (thread_run){plan, &cases[t], 8, 0};
            CHECK(pthread_create(&threads[t], NULL, thread_main, &runs[t]) == 0);
        }
        for (int t = 0; t < THREADS; t++)
            pthread_join(threads[t], NULL);
        for (int t = 0; t < THREADS; t++) {
            CHECK(runs[t].failed == 0);
            const compare_stats st = compare_to_oracle(&cases[t], NAN_ROWS_REQUIRE, "4 threads");
            CHECK(st.bad == 0 && st.nan_refs == 0 && st.checked > 0);
            fai_case_free(&cases[t]);
        }
        fai_plan_free(plan);
    }
}

/* Two pools in one process, a plan on each, run at once from two user threads; then the plans
 * are freed after their runs and the pools keep serving new plans. */
TEST(robust_two_pools) {
    fai_pool *pools[2] = {NULL, NULL};
    REQUIRE(fai_pool_create(2, &pools[0]) == FAI_OK);
    REQUIRE(fai_pool_create(3, &pools[1]) == FAI_OK);
    fai_case cases[2];
    fai_plan *plans[2] = {NULL, NULL};
    for (int p = 0; p < 2; p++) {
        fai_case_spec s;
        small_spec(&s, p);
        s.workers = 6 + p;
        REQUIRE(fai_case_build(&cases[p], &s, 3200 + (uint64_t)p) == 0);
        REQUIRE(fai_plan_create(&cases[p].problem, &plans[p]) == FAI_OK);
        fai_plan_set_pool(plans[p], pools[p]);
    }
    pthread_t threads[2];
    thread_run runs[2];
    for (int p = 0; p < 2; p++) {
        runs[p] = (thread_run){plans[p], &cases[p], 10, 0};
        CHECK(pthread_create(&threads[p], NULL, thread_main, &runs[p]) == 0);
    }
    for (int p = 0; p < 2; p++)
        pthread_join(threads[p], NULL);
    for (int p = 0; p < 2; p++) {
        CHECK(runs[p].failed == 0);
        const compare_stats st = compare_to_oracle(&cases[p], NAN_ROWS_REQUIRE, "two pools");
        CHECK(st.bad == 0 && st.nan_refs == 0 && st.checked > 0);
        fai_plan_free(plans[p]); /* its runs are over */
    }
    /* the pools outlive the plans: new plans on them, swapped */
    for (int p = 0; p < 2; p++) {
        fai_case_reset(&cases[p]);
        CHECK(run_case(&cases[p], pools[1 - p]) == FAI_OK);
        const compare_stats st = compare_to_oracle(&cases[p], NAN_ROWS_REQUIRE, "swapped pools");
        CHECK(st.bad == 0 && st.checked > 0);
        fai_case_free(&cases[p]);
    }
    fai_pool_free(pools[0]);
    fai_pool_free(pools[1]);
}

/* A child forked while another thread of the parent runs on a pool (its run lock held at that
 * moment, its helpers not copied) runs on that pool and on the default pool by the calling
 * thread alone, with the oracle's results, and frees the pool; the parent's pool keeps serving.
 * Before the pools knew their process, 45 of 50 such children hung. */
typedef struct looping_run {
    const fai_plan *plan;
    fai_case *c;
    atomic_int stop, runs;
} looping_run;

static void *loop_main(void *arg) {
    looping_run *run = arg;
    while (!atomic_load(&run->stop)) {
        fai_case_reset(run->c);
        run_with(run->plan, &run->c->tensors);
        atomic_fetch_add(&run->runs, 1);
    }
    return NULL;
}

/* ThreadSanitizer stops a child forked from a threaded process that starts a thread, as the
 * default pool does there: under it the child runs on the parent's pool only. */
#if defined(__SANITIZE_THREAD__)
#define CHILD_STARTS_THREADS 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CHILD_STARTS_THREADS 0
#endif
#endif
#ifndef CHILD_STARTS_THREADS
#define CHILD_STARTS_THREADS 1
#endif
/* AddressSanitizer's allocator can be left locked in a child forked while another thread
 * allocates: under it the parent's loop stops before the forks (the helpers are still not the
 * child's, the held run lock is not tried). */
#if defined(__SANITIZE_ADDRESS__)
#define FORK_WHILE_RUNNING 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FORK_WHILE_RUNNING 0
#endif
#endif
#ifndef FORK_WHILE_RUNNING
#define FORK_WHILE_RUNNING 1
#endif

/* The child's side: 0 when its runs were right. */
static int child_runs(fai_case *c, fai_pool *pool) {
    alarm(30); /* a hang is a failure, not a stuck suite */
    int ok = 1;
    for (int on_default = 0; on_default < 1 + CHILD_STARTS_THREADS; on_default++) {
        fai_case_reset(c);
        ok &= run_case(c, on_default ? NULL : pool) == FAI_OK;
        const compare_stats st = compare_to_oracle(c, NAN_ROWS_REQUIRE, "after fork");
        ok &= st.bad == 0 && st.checked > 0;
    }
    fai_pool_free(pool);
    return ok ? 0 : 1;
}

TEST(robust_pool_after_fork) {
    if (getenv("FAI_TEST_EMULATED")) { /* set by the cross build's tests (CMakeLists.txt) */
        printf("  left out under user-mode emulation, which does not emulate this fork\n");
        return;
    }
    fai_pool *pool = NULL;
    REQUIRE(fai_pool_create(3, &pool) == FAI_OK);
    fai_case_spec s;
    small_spec(&s, 1);
    s.workers = 6;
    s.threads = 3;
    fai_case busy, mine;
    REQUIRE(fai_case_build(&busy, &s, 3300) == 0);
    REQUIRE(fai_case_build(&mine, &s, 3301) == 0);
    REQUIRE(run_case(&mine, NULL) == FAI_OK); /* the default pool started in the parent */
    fai_plan *plan = NULL;
    REQUIRE(fai_plan_create(&busy.problem, &plan) == FAI_OK);
    fai_plan_set_pool(plan, pool);
    looping_run loop = {plan, &busy, 0, 0};
    pthread_t thread;
    REQUIRE(pthread_create(&thread, NULL, loop_main, &loop) == 0);
    while (atomic_load(&loop.runs) < 3) /* the loop is under way */
        sched_yield();
    if (!FORK_WHILE_RUNNING) {
        atomic_store(&loop.stop, 1);
        pthread_join(thread, NULL);
    }
    for (int k = 0; k < 8; k++) {
        const pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) _exit(child_runs(&mine, pool));
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    if (FORK_WHILE_RUNNING) {
        atomic_store(&loop.stop, 1);
        pthread_join(thread, NULL);
    }
    fai_case_reset(&busy);
    CHECK(run_with(plan, &busy.tensors) == FAI_OK);
    const compare_stats st = compare_to_oracle(&busy, NAN_ROWS_REQUIRE, "parent after forks");
    CHECK(st.bad == 0 && st.checked > 0);
    fai_plan_free(plan);
    fai_case_free(&busy);
    fai_case_free(&mine);
    fai_pool_free(pool);
}

/* Runs of one plan on a pool of 3 threads for 5 workers, separated by pauses around the helpers'
 * polling window (none, shorter, longer), so that helpers join while the caller works, join late,
 * or wake after the caller closed the run; with `announce`, each run is announced first
 * (fai_plan_wake: before its pause, some twice, and a last announcement no run follows). Every
 * result is the oracle's, bitwise the same each time. */
static void runs_after_pauses(int *test_failed_, int announce, uint64_t seed) {
    fai_pool *pool = NULL;
    REQUIRE(fai_pool_create(3, &pool) == FAI_OK);
    fai_case_spec s;
    small_spec(&s, 1);
    s.workers = 5;
    s.threads = 3;
    fai_case c;
    REQUIRE(fai_case_build(&c, &s, seed) == 0);
    fai_plan *plan = NULL;
    REQUIRE(fai_plan_create(&c.problem, &plan) == FAI_OK);
    fai_plan_set_pool(plan, pool);
    if (announce) fai_plan_wake(plan);
    REQUIRE(run_with(plan, &c.tensors) == FAI_OK);
    const compare_stats st = compare_to_oracle(&c, NAN_ROWS_REQUIRE, "after pauses");
    CHECK(st.bad == 0 && st.checked > 0);
    const size_t o_bytes = c.bytes[FAI_CASE_BUF_O];
    unsigned char *first = malloc(o_bytes);
    REQUIRE(first != NULL);
    memcpy(first, c.buf[FAI_CASE_BUF_O], o_bytes);
    static const long pauses_ns[] = {0, 5000, 30000, 200000, 2000000, 3000000};
    for (int i = 0; i < 60; i++) {
        if (announce) fai_plan_wake(plan);
        if (announce && i % 4 == 3) fai_plan_wake(plan);
        const struct timespec pause = {0, pauses_ns[i % 6]};
        if (pause.tv_nsec) nanosleep(&pause, NULL);
        fai_case_reset(&c); /* O and LSE back to their garbage */
        CHECK(run_with(plan, &c.tensors) == FAI_OK);
        CHECK(memcmp(c.buf[FAI_CASE_BUF_O], first, o_bytes) == 0);
    }
    if (announce) fai_plan_wake(plan);
    free(first);
    fai_plan_free(plan);
    fai_case_free(&c);
    fai_pool_free(pool); /* its threads may still be polling after the last announcement */
}

TEST(robust_runs_after_pauses) { runs_after_pauses(test_failed_, 0, 3250); }

/* The packed K/V cache: the later q tiles of a kv head read the tiles the first one packed,
 * per (batch, kv head), on every table and for f32 and f16 K/V. V holds NaN at key 12 of one
 * head, which causal attention hides from rows 0-11: the tile's NaN flag travels with the cached
 * tile, so rows 8-11 (of the second q tile, which reads it from the cache) stay finite while
 * rows 12 on turn NaN. A second run with that NaN replaced must not see the first run's tiles. */
TEST(robust_packed_kv_cache_reuse) {
    for (int variant = 0; variant < 2; variant++) {
        fai_case_spec s;
        small_spec(&s, 0);
        s.seq_q = s.seq_kv = 40;
        s.causal = FAI_CAUSAL_BOTTOM_RIGHT;
        s.tile_q = 8; /* 16 rows with the group: packed tiles, not the decode path */
        s.tile_kv = 16;
        s.workers = 2;
        s.k_dtype = s.v_dtype = variant ? FAI_DTYPE_F16 : FAI_DTYPE_F32;
        fai_case c;
        REQUIRE(fai_case_build(&c, &s, 3270 + (uint64_t)variant) == 0);
        for (int64_t x = 0; x < s.head_dim_v; x++)
            fai_case_set(&c.tensors.v, 1, 12, 1, x, NAN);
        fai_plan *plan = NULL;
        REQUIRE(fai_plan_create(&c.problem, &plan) == FAI_OK);
        REQUIRE(run_with(plan, &c.tensors) == FAI_OK);
        compare_stats st = compare_to_oracle(&c, NAN_ROWS_REQUIRE, "cached NaN tile");
        CHECK(st.bad == 0 && st.checked > 0 && st.nan_refs > 0);
        for (int64_t x = 0; x < s.head_dim_v; x++)
            fai_case_set(&c.tensors.v, 1, 12, 1, x, 0.25);
        fai_case_reset(&c);
        REQUIRE(run_with(plan, &c.tensors) == FAI_OK);
        st = compare_to_oracle(&c, NAN_ROWS_REQUIRE, "second run");
        CHECK(st.bad == 0 && st.checked > 0 && st.nan_refs == 0);
        fai_plan_free(plan);
        fai_case_free(&c);
    }
}

/* fai_plan_wake: announced runs as above; NULL and one-thread plans are no-ops. */
TEST(robust_wake_announcements) {
    runs_after_pauses(test_failed_, 1, 3260);
    fai_plan_wake(NULL);
    fai_problem pb;
    fai_problem_init(&pb);
    pb.batch = pb.heads_q = pb.heads_kv = pb.seq_q = pb.seq_kv = 1;
    pb.head_dim = 8;
    pb.threads = 1;
    fai_plan *plan = NULL;
    REQUIRE(fai_plan_create(&pb, &plan) == FAI_OK);
    fai_plan_wake(plan);
    fai_plan_free(plan);
}

/* -- (v) determinism -------------------------------------------------------------------------- */

/* One plan (fixed workers, split-KV where the shape makes it) run 5 times on each of pools of
 * 1, 2, 3 and 4 threads: every O and LSE bitwise identical to the first. */
TEST(robust_bitwise_determinism) {
    for (int variant = 0; variant < 3; variant++) {
        fai_case_spec s;
        small_spec(&s, variant != 0);
        s.workers = variant == 2 ? 13 : 7;
        s.causal = variant == 1 ? FAI_CAUSAL_NONE : FAI_CAUSAL_BOTTOM_RIGHT;
        s.mask_kind = variant == 2 ? FAI_MASK_ADD : FAI_MASK_NONE;
        s.mask_density = 20;
        s.seq_kv = variant ? 200 : 50;
        fai_case c;
        REQUIRE(fai_case_build(&c, &s, 3300 + (uint64_t)variant) == 0);
        fai_plan *plan = NULL;
        REQUIRE(fai_plan_create(&c.problem, &plan) == FAI_OK);
        fai_plan_info info;
        REQUIRE(fai_plan_get_info(plan, &info) == FAI_OK);
        if (variant) CHECK(info.split_kv); /* decode over 4 units, 7 or 13 workers */
        const size_t o_bytes = c.bytes[FAI_CASE_BUF_O], l_bytes = c.bytes[FAI_CASE_BUF_LSE];
        unsigned char *o0 = malloc(o_bytes), *l0 = malloc(l_bytes);
        REQUIRE(o0 && l0);
        int runs = 0, differ = 0;
        for (int64_t threads = 1; threads <= 4; threads++) {
            fai_pool *pool = NULL;
            REQUIRE(fai_pool_create(threads, &pool) == FAI_OK);
            fai_plan_set_pool(plan, pool);
            for (int k = 0; k < 5; k++) {
                fai_case_reset(&c);
                CHECK(run_with(plan, &c.tensors) == FAI_OK);
                if (runs++ == 0) {
                    memcpy(o0, c.buf[FAI_CASE_BUF_O], o_bytes);
                    memcpy(l0, c.buf[FAI_CASE_BUF_LSE], l_bytes);
                } else {
                    differ += memcmp(o0, c.buf[FAI_CASE_BUF_O], o_bytes) != 0;
                    differ += memcmp(l0, c.buf[FAI_CASE_BUF_LSE], l_bytes) != 0;
                }
            }
            fai_plan_set_pool(plan, NULL);
            fai_pool_free(pool);
        }
        CHECK(runs == 20);
        CHECK(differ == 0);
        const compare_stats st = compare_to_oracle(&c, NAN_ROWS_REQUIRE, "determinism");
        CHECK(st.bad == 0 && st.checked > 0);
        free(o0);
        free(l0);
        fai_plan_free(plan);
        fai_case_free(&c);
    }
}
