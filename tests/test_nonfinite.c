/* NaN and Inf in Q, K and V: which output rows become non-finite. Every test runs once per
 * micro-kernel table (the runner's FAI_ISA runs).
 *
 * The contract (fai.h, docs/design.md), which the fp64 oracle computes in IEEE arithmetic:
 *   - a NaN that a row sees (a visible position: not masked by causal, window, lengths or the
 *     mask tensor) reaches that row: its O and its LSE are NaN; a row whose visible scores are
 *     all NaN is never written as a fully masked one (O = 0, LSE = -inf);
 *   - +Inf in Q or K gives the rows that see it logits of +-Inf (NaN where it meets a 0): a +Inf
 *     or NaN logit makes the row NaN, -Inf logits weigh 0, and a row whose visible logits are
 *     all -Inf is empty, O = 0 and LSE = -inf (log 0), like a fully masked row;
 *   - Inf or NaN in element d of V reaches O[d] of the rows that weigh that key above 0, and
 *     nothing else (the LSE does not depend on V);
 *   - positions a row cannot see never reach it;
 *   - f16 output keeps +-Inf and NaN; only finite values past 65504 saturate.
 * First the smallest reproductions of rows that lost their NaN or Inf, then a property test
 * over the sweep's random problems. */
#include "fai.h"
#include "fai_cases.h"
#include "fai_internal.h"
#include "fai_oracle.h"
#include "test_util.h"
#include "util/fai_half.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Sanitizer builds run the suite about 15x slower: fewer random cases there. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NONFINITE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define NONFINITE_SANITIZED 1
#endif
#endif
#ifdef NONFINITE_SANITIZED
#define NONFINITE_DEFAULT_CASES 120
#else
#define NONFINITE_DEFAULT_CASES 1000
#endif
#define NONFINITE_DEFAULT_SEED 20250301u

/* -- helpers ----------------------------------------------------------------------------------- */

/* What the plan of a run looked like, for the property test's coverage. */
typedef struct run_info {
    int direct_kv; /* the decode path (K/V rows read in place) */
    int split_kv;  /* some unit's kv range split across workers and merged */
} run_info;

/* Plans and runs the case on a workspace of NaN bytes; fills *info when not NULL. */
static fai_status run_case(fai_case *c, run_info *info) {
    fai_plan *plan = NULL;
    fai_status status = fai_plan_create(&c->problem, &plan);
    if (status != FAI_OK) {
        fprintf(stderr, "  fai_plan_create: %s\n    case %s\n", fai_last_error(), c->desc);
        return status;
    }
    if (info) {
        fai_plan_info pi;
        info->direct_kv = plan->direct_kv;
        info->split_kv = fai_plan_get_info(plan, &pi) == FAI_OK && pi.split_kv;
    }
    const size_t size = fai_plan_workspace_size(plan);
    unsigned char *ws = malloc(size + 64);
    if (!ws) {
        fai_plan_free(plan);
        return FAI_ERR_NO_MEMORY;
    }
    memset(ws, 0xFF, size + 64);
    status = fai_run(plan, &c->tensors, ws, size);
    if (status != FAI_OK)
        fprintf(stderr, "  fai_run: %s\n    case %s\n", fai_last_error(), c->desc);
    free(ws);
    fai_plan_free(plan);
    return status;
}

static double load_f32(const void *data, int64_t index) {
    float f;
    memcpy(&f, (const char *)data + index * 4, 4);
    return f;
}

/* NaN, +Inf, -Inf or finite. */
static int value_class(double x) {
    return isnan(x) ? 0 : x == INFINITY ? 1 : x == -INFINITY ? 2 : 3;
}

/* An output row: group g (batch, or 0 for packed Q), row r, query head h. */
typedef int (*row_filter)(const void *ctx, int64_t g, int64_t r, int64_t h);

typedef struct compare_stats {
    int64_t bad;           /* elements that disagree with the reference */
    int64_t rows_poisoned; /* rows whose reference O or LSE is not finite */
    int64_t rows_clean;    /* rows with a visible key whose reference is finite */
    int64_t rows_exempt;   /* rows not held to the reference's finiteness (see compare) */
} compare_stats;

/* Compares the case's O and LSE with the oracle element by element: the same class (NaN, +Inf,
 * -Inf, finite) as the reference, finite values within the case's tolerance, exactly 0 and -inf
 * in rows without a visible key and past the lengths. Rows for which `exempt` says so are only
 * required to be non-finite exactly where the reference is, in any way, or finite and correct.
 * Rows for which `may_change` says no must be finite whatever the reference says (when not NULL:
 * a check of "only those rows" independent of the oracle). */
static compare_stats compare(fai_case *c, const fai_oracle_out *ref, row_filter exempt,
                             row_filter may_change, const void *ctx, const char *label) {
    compare_stats st = {0, 0, 0, 0};
    const fai_problem *pb = &c->problem;
    const double tol = fai_case_tolerance(pb->q_dtype, pb->k_dtype, pb->v_dtype, pb->o_dtype);
    const double tol_lse = fai_case_tolerance(pb->q_dtype, pb->k_dtype, pb->v_dtype, FAI_DTYPE_F32);
    const fai_tensor *o = &c->tensors.o, *l = &c->tensors.lse;
    const int packed = pb->cu_seqlens_q != NULL;
    const int64_t Hq = pb->heads_q, Dv = ref->head_dim_v;
    for (int64_t g = 0; g < ref->groups; g++)
        for (int64_t row = 0; row < ref->rows; row++)
            for (int64_t h = 0; h < Hq; h++) {
                const size_t ri = (size_t)((g * ref->rows + row) * Hq + h);
                const int valid = ref->row_state[ri] == FAI_ORACLE_ROW_VALID;
                const int64_t base =
                    (packed ? 0 : g * o->stride_batch) + row * o->stride_seq + h * o->stride_head;
                const double want_lse = ref->lse[(g * Hq + h) * ref->rows + row];
                int ref_finite = isfinite(want_lse) || want_lse == -INFINITY;
                for (int64_t d = 0; d < Dv; d++)
                    ref_finite &= isfinite(ref->o[ri * (size_t)Dv + (size_t)d]) != 0;
                const int is_exempt = exempt && exempt(ctx, g, row, h);
                const int can_change = !may_change || may_change(ctx, g, row, h);
                st.rows_poisoned += !ref_finite;
                st.rows_clean += ref_finite && valid;
                st.rows_exempt += is_exempt;
                for (int64_t d = 0; d <= Dv; d++) { /* d == Dv: the LSE */
                    double x, want, limit;
                    if (d < Dv) {
                        x = fai_oracle_load(o->data, o->dtype, base + d);
                        want = valid ? ref->o[ri * (size_t)Dv + (size_t)d] : 0.0;
                        limit = valid ? fai_case_o_limit(ref, ri, d, tol) : 0.0;
                    } else {
                        if (!l->data) continue;
                        x = load_f32(l->data, (packed ? 0 : g * l->stride_batch) +
                                                  h * l->stride_head + row * l->stride_seq);
                        want = want_lse;
                        limit = fai_case_lse_limit(ref, ri, want, tol_lse);
                    }
                    int ok;
                    if (!can_change && !isfinite(x) && !(d == Dv && x == -INFINITY))
                        ok = 0;
                    else if (is_exempt && !isfinite(want) && want != -INFINITY)
                        ok = 1; /* non-finite in any way, or finite: both allowed */
                    else if (value_class(want) != 3 || value_class(x) != 3)
                        ok = value_class(want) == value_class(x);
                    else
                        ok = fabs(x - want) <= limit;
                    if (!ok && st.bad++ < 4)
                        fprintf(stderr,
                                "  %s: %s[b=%lld row=%lld h=%lld d=%lld] = %.9g, reference %.9g%s"
                                "\n    case %s\n",
                                label, d < Dv ? "O" : "LSE", (long long)g, (long long)row,
                                (long long)h, (long long)(d < Dv ? d : 0), x, want,
                                can_change ? "" : " (a row that cannot see the value)", c->desc);
                }
            }
    return st;
}

/* Runs the case and compares it with the oracle; returns the mismatches (-1: no run). */
static int64_t run_and_compare(fai_case *c, const char *label, compare_stats *out) {
    fai_case_reset(c);
    if (run_case(c, NULL) != FAI_OK) return -1;
    fai_oracle_out ref;
    char err[256];
    if (fai_oracle_run(&c->problem, &c->tensors, &ref, err, sizeof err) != FAI_OK) {
        fprintf(stderr, "  %s: oracle: %s\n", label, err);
        return -1;
    }
    const compare_stats st = compare(c, &ref, NULL, NULL, NULL, label);
    fai_oracle_out_free(&ref);
    if (out) *out = st;
    return st.bad;
}

/* A small all-f32 problem with one sequence, contiguous BSHD and LSE. */
static void small_spec(fai_case_spec *s, int64_t heads_q, int64_t seq_q, int64_t seq_kv) {
    fai_case_spec_any(s);
    s->positions = 0;
    s->batch = 1;
    s->heads_q = heads_q;
    s->heads_kv = 1;
    s->seq_q = seq_q;
    s->seq_kv = seq_kv;
    s->head_dim = 16;
    s->head_dim_v = 16;
    s->q_dtype = s->k_dtype = s->v_dtype = s->o_dtype = FAI_DTYPE_F32;
    s->causal = FAI_CAUSAL_NONE;
    s->window_left = s->window_right = -1;
    s->mask_kind = FAI_MASK_NONE;
    s->mask_shape = FAI_CASE_MASK_SQ_SKV;
    s->mask_density = 0;
    s->q_lens = s->kv_lens = FAI_CASE_LEN_FULL;
    s->layout = FAI_CASE_LAYOUT_BSHD;
    s->lse = 1;
    s->threads = 0;
    s->split = FAI_SPLIT_AUTO;
    s->tile_q = 0;
    s->scale = 0.25;
    s->amplitude = 0.5;
}

/* Row r (query position, head h) of a one-sequence case: O row and LSE. */
static double o_at(const fai_case *c, int64_t i, int64_t h, int64_t d) {
    const fai_tensor *o = &c->tensors.o;
    return fai_oracle_load(o->data, o->dtype, i * o->stride_seq + h * o->stride_head + d);
}

static double lse_at(const fai_case *c, int64_t i, int64_t h) {
    const fai_tensor *l = &c->tensors.lse;
    return load_f32(l->data, h * l->stride_head + i * l->stride_seq);
}

/* Tile sizes and worker counts the reproductions run with: one kv tile or several, one worker
 * or a split kv range. */
static const int64_t tiles_kv[] = {0, 4, 16};
static const int64_t worker_counts[] = {1, 4};

/* -- reproductions ----------------------------------------------------------------------------- */

/* Causal prefill, a NaN in query row 5 (one element): every score of that row is NaN, so its O
 * and LSE are NaN; it was written as a fully masked row (O = 0, LSE = -inf), which a merge then
 * drops as empty. The other rows are finite and correct. */
TEST(nonfinite_nan_q_row_causal_prefill) {
    for (size_t t = 0; t < sizeof tiles_kv / sizeof *tiles_kv; t++)
        for (size_t w = 0; w < sizeof worker_counts / sizeof *worker_counts; w++) {
            fai_case_spec s;
            small_spec(&s, 2, 16, 16);
            s.causal = FAI_CAUSAL_BOTTOM_RIGHT;
            s.tile_kv = tiles_kv[t];
            s.workers = worker_counts[w];
            fai_case c;
            REQUIRE(fai_case_build(&c, &s, 4100 + (uint64_t)(t * 2 + w)) == 0);
            fai_case_set(&c.tensors.q, 0, 5, 1, 3, NAN);
            compare_stats st;
            CHECK(run_and_compare(&c, "NaN in Q row 5, causal", &st) == 0);
            for (int64_t d = 0; d < 16; d++)
                CHECK(isnan(o_at(&c, 5, 1, d)));
            CHECK(isnan(lse_at(&c, 5, 1)));
            CHECK(st.rows_poisoned == 1 && st.rows_clean == 31);
            fai_case_free(&c);
        }
}

/* Causal prefill, a NaN in K at key i: rows i and later see it and are NaN, rows before i are
 * finite. Row i sees key i last, and its NaN was lost whenever the max looked at a masked key
 * after it (row 0 sees nothing else at all). */
TEST(nonfinite_nan_k_causal_prefill) {
    static const int64_t keys[] = {0, 5, 11, 15};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
        for (size_t t = 0; t < sizeof tiles_kv / sizeof *tiles_kv; t++)
            for (size_t w = 0; w < sizeof worker_counts / sizeof *worker_counts; w++) {
                fai_case_spec s;
                small_spec(&s, 2, 16, 16);
                s.causal = FAI_CAUSAL_BOTTOM_RIGHT;
                s.tile_kv = tiles_kv[t];
                s.workers = worker_counts[w];
                fai_case c;
                REQUIRE(fai_case_build(&c, &s, 4200 + (uint64_t)(k * 8 + t * 2 + w)) == 0);
                const int64_t key = keys[k];
                fai_case_set(&c.tensors.k, 0, key, 0, 7, NAN);
                compare_stats st;
                CHECK(run_and_compare(&c, "NaN in K, causal", &st) == 0);
                for (int64_t i = 0; i < 16; i++)
                    for (int64_t h = 0; h < 2; h++) {
                        const int sees = i >= key;
                        CHECK(isnan(o_at(&c, i, h, 0)) == sees);
                        CHECK(isnan(lse_at(&c, i, h)) == sees);
                    }
                fai_case_free(&c);
            }
}

/* Decode (the direct K/V path), a keep mask over keys 40..63 plus key j, a NaN in K[j]: every
 * row sees it and is NaN. When j's tile had nothing else visible, the NaN was dropped and the
 * rows came out as the finite result without key j. */
TEST(nonfinite_nan_k_decode_keep_mask) {
    static const int64_t keys[] = {5, 20, 39};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
        for (size_t t = 0; t < sizeof tiles_kv / sizeof *tiles_kv; t++)
            for (size_t w = 0; w < sizeof worker_counts / sizeof *worker_counts; w++) {
                fai_case_spec s;
                small_spec(&s, 4, 1, 64);
                s.mask_kind = FAI_MASK_KEEP;
                s.tile_kv = tiles_kv[t] ? 2 * tiles_kv[t] : 0;
                s.workers = worker_counts[w];
                fai_case c;
                REQUIRE(fai_case_build(&c, &s, 4300 + (uint64_t)(k * 8 + t * 2 + w)) == 0);
                const int64_t key = keys[k];
                unsigned char *mask = c.buf[FAI_CASE_BUF_MASK];
                for (int64_t j = 0; j < 64; j++)
                    mask[j] = j >= 40 || j == key;
                fai_case_set(&c.tensors.k, 0, key, 0, 2, NAN);
                run_info info = {0, 0};
                fai_case_reset(&c);
                REQUIRE(run_case(&c, &info) == FAI_OK);
                CHECK(info.direct_kv);
                for (int64_t h = 0; h < 4; h++) {
                    for (int64_t d = 0; d < 16; d++)
                        CHECK(isnan(o_at(&c, 0, h, d)));
                    CHECK(isnan(lse_at(&c, 0, h)));
                }
                CHECK(run_and_compare(&c, "NaN in K, decode keep mask", NULL) == 0);
                fai_case_free(&c);
            }
}

/* A row whose visible scores are all NaN, in both paths and with a split kv range: masked keys
 * everywhere but one NaN key, so no tile of the row has a finite score. */
TEST(nonfinite_all_visible_scores_nan) {
    for (int decode = 0; decode < 2; decode++)
        for (size_t t = 0; t < sizeof tiles_kv / sizeof *tiles_kv; t++)
            for (size_t w = 0; w < sizeof worker_counts / sizeof *worker_counts; w++) {
                fai_case_spec s;
                small_spec(&s, decode ? 4 : 16, decode ? 1 : 6, 50);
                s.mask_kind = FAI_MASK_DROP;
                s.tile_kv = tiles_kv[t];
                s.workers = worker_counts[w];
                fai_case c;
                REQUIRE(fai_case_build(&c, &s, 4400 + (uint64_t)(decode * 8 + t * 2 + w)) == 0);
                const fai_mask *m = &c.tensors.mask;
                unsigned char *mask = c.buf[FAI_CASE_BUF_MASK];
                for (int64_t i = 0; i < c.problem.seq_q; i++)
                    for (int64_t j = 0; j < 50; j++)
                        mask[i * m->stride_q + j] = j != 33;
                fai_case_set(&c.tensors.k, 0, 33, 0, 0, NAN);
                compare_stats st;
                CHECK(run_and_compare(&c, "all visible scores NaN", &st) == 0);
                CHECK(st.rows_poisoned == c.problem.seq_q * c.problem.heads_q);
                for (int64_t i = 0; i < c.problem.seq_q; i++)
                    for (int64_t h = 0; h < c.problem.heads_q; h++)
                        CHECK(isnan(lse_at(&c, i, h)));
                fai_case_free(&c);
            }
}

/* f16 output: +-Inf from V stays +-Inf (it was written as +-65504, a finite value); NaN stays
 * NaN; finite values past the range still saturate. Causal prefill and decode. */
TEST(nonfinite_f16_output_keeps_inf) {
    for (int decode = 0; decode < 2; decode++)
        for (size_t w = 0; w < sizeof worker_counts / sizeof *worker_counts; w++) {
            fai_case_spec s;
            small_spec(&s, 2, decode ? 1 : 12, 12);
            s.causal = FAI_CAUSAL_BOTTOM_RIGHT;
            s.o_dtype = FAI_DTYPE_F16;
            s.workers = worker_counts[w];
            fai_case c;
            REQUIRE(fai_case_build(&c, &s, 4500 + (uint64_t)(decode * 2 + w)) == 0);
            fai_case_set(&c.tensors.v, 0, 7, 0, 2, INFINITY);
            fai_case_set(&c.tensors.v, 0, 2, 0, 3, -INFINITY);
            fai_case_set(&c.tensors.v, 0, 4, 0, 5, NAN);
            for (int64_t j = 0; j < 12; j++)
                fai_case_set(&c.tensors.v, 0, j, 0, 9, 1e6);
            fai_case_reset(&c);
            REQUIRE(run_case(&c, NULL) == FAI_OK);
            const int64_t sq = c.problem.seq_q;
            for (int64_t i = 0; i < sq; i++)
                for (int64_t h = 0; h < 2; h++) {
                    const int64_t pos = i + 12 - sq; /* the last key row i sees */
                    CHECK(pos >= 7 ? o_at(&c, i, h, 2) == INFINITY : isfinite(o_at(&c, i, h, 2)));
                    CHECK(pos >= 2 ? o_at(&c, i, h, 3) == -INFINITY : isfinite(o_at(&c, i, h, 3)));
                    CHECK(pos >= 4 ? isnan(o_at(&c, i, h, 5)) : isfinite(o_at(&c, i, h, 5)));
                    CHECK(o_at(&c, i, h, 9) == 65504.0);
                    CHECK(isfinite(o_at(&c, i, h, 0)) && isfinite(lse_at(&c, i, h)));
                }
            /* the same against the oracle: only the finite-overflow column differs */
            for (int64_t j = 0; j < 12; j++)
                fai_case_set(&c.tensors.v, 0, j, 0, 9, 0.5);
            CHECK(run_and_compare(&c, "Inf in V, f16 output", NULL) == 0);
            fai_case_free(&c);
        }
}

TEST(nonfinite_f16_conversion) {
    CHECK(fai__f32_to_f16_sat(INFINITY) == 0x7c00);
    CHECK(fai__f32_to_f16_sat(-INFINITY) == 0xfc00);
    CHECK((fai__f32_to_f16_sat(NAN) & 0x7fff) > 0x7c00);
    CHECK(fai__f32_to_f16_sat(65520.0f) == 0x7bff);
    CHECK(fai__f32_to_f16_sat(-3e38f) == 0xfbff);
    CHECK(fai__f32_to_f16_sat(65504.0f) == 0x7bff);
    CHECK(fai__f32_to_f16_sat(1.0f) == 0x3c00);
    CHECK(fai__f16_to_f32(fai__f32_to_f16_sat(INFINITY)) == INFINITY);
}

/* fai_merge_states: a part whose LSE is NaN makes the merged row NaN (it is not dropped like an
 * empty part), a part whose O holds +-Inf keeps it in the merged row, in f32 and f16 output. */
TEST(nonfinite_merge_states) {
    enum { D = 4 };
    for (int out_f16 = 0; out_f16 < 2; out_f16++) {
        /* two rows (seq 2, one head): row 0 has a NaN part, row 1 a part with Inf in O */
        float o0[2 * D] = {0.5f, 0.5f, 0.5f, 0.5f, 0.25f, INFINITY, 0.25f, -INFINITY};
        float o1[2 * D] = {0.1f, 0.2f, 0.3f, 0.4f, 0.1f, 0.2f, 0.3f, 0.4f};
        float l0[2] = {NAN, 1.0f}, l1[2] = {2.0f, 0.5f};
        float out32[2 * D], lse_out[2];
        uint16_t out16[2 * D];
        fai_tensor parts[2] = {fai_tensor_bshd(o0, FAI_DTYPE_F32, 2, 1, D),
                               fai_tensor_bshd(o1, FAI_DTYPE_F32, 2, 1, D)};
        fai_tensor lses[2] = {{l0, FAI_DTYPE_F32, 2, 1, 1, 0}, {l1, FAI_DTYPE_F32, 2, 1, 1, 0}};
        const fai_tensor out = out_f16 ? fai_tensor_bshd(out16, FAI_DTYPE_F16, 2, 1, D)
                                       : fai_tensor_bshd(out32, FAI_DTYPE_F32, 2, 1, D);
        const fai_tensor lse = {lse_out, FAI_DTYPE_F32, 2, 1, 1, 0};
        REQUIRE(fai_merge_states(2, parts, lses, 1, 2, 1, D, &out, &lse) == FAI_OK);
        double got[2 * D];
        for (int x = 0; x < 2 * D; x++)
            got[x] = out_f16 ? fai__f16_to_f32(out16[x]) : out32[x];
        for (int x = 0; x < D; x++)
            CHECK(isnan(got[x]));
        CHECK(isnan(lse_out[0]));
        CHECK(got[D + 1] == INFINITY && got[D + 3] == -INFINITY);
        CHECK(isfinite(got[D]) && isfinite(got[D + 2]) && isfinite(lse_out[1]));
    }
}

/* -- the property test ------------------------------------------------------------------------- */

/* Where the value was put: tensor 0 Q, 1 K, 2 V; sequence b, position pos (query or key), head
 * (query head for Q, kv head for K and V), element d. The output rows that read it are in group
 * out_g, rows [row_begin, row_end): one row and one head for Q, the sequence's rows and the kv
 * head's group of query heads for K and V. */
typedef struct poison_site {
    int tensor;
    int64_t b, pos, head, d;
    int64_t group; /* query heads per kv head */
    int64_t out_g, row_begin, row_end;
    int64_t tb, ts;                      /* the element's (batch or page, position) in storage */
    const fai_oracle_out *weight_ref[2]; /* V: the oracle with V[site] = 0 and = 1 */
} poison_site;

/* Only rows that read the poisoned element may change. */
static int site_may_change(const void *ctx, int64_t g, int64_t r, int64_t h) {
    const poison_site *site = ctx;
    const int head_reads = site->tensor == 0 ? h == site->head : h / site->group == site->head;
    return g == site->out_g && r >= site->row_begin && r < site->row_end && head_reads;
}

/* In V, a key whose weight in a row is below e^-80 may underflow to P = 0 in f32 (the exp gives
 * 0 below -87.3) where the fp64 reference still weighs it: such rows may be non-finite or not.
 * The weight is the oracle's O[d] with V[site] = 1 and every other value of V 0. */
static int site_exempt(const void *ctx, int64_t g, int64_t r, int64_t h) {
    const poison_site *site = ctx;
    if (site->tensor != 2) return 0;
    const fai_oracle_out *zero = site->weight_ref[0], *one = site->weight_ref[1];
    const size_t at =
        (size_t)((g * zero->rows + r) * zero->heads_q + h) * (size_t)zero->head_dim_v +
        (size_t)site->d;
    const double weight = one->o[at] - zero->o[at];
    return weight > 0.0 && weight <= exp(-80.0);
}

static fai_tensor *site_tensor(fai_case *c, const poison_site *site) {
    return site->tensor == 0 ? &c->tensors.q : site->tensor == 1 ? &c->tensors.k : &c->tensors.v;
}

/* Draws a readable position of Q, K or V (a tensor with none is passed over) and stores `value`
 * there. Returns 0, or -1 when the case has no readable position at all. */
static int poison(fai_case *c, fai_rng *g, double value, poison_site *site) {
    const fai_problem *pb = &c->problem;
    const int first = (int)fai_rng_range(g, 0, 2);
    for (int attempt = 0; attempt < 3; attempt++) {
        const int tensor = (first + attempt) % 3;
        const int64_t *lens = tensor == 0 ? c->len_q : c->len_kv;
        int64_t total = 0;
        for (int64_t b = 0; b < pb->batch; b++)
            total += lens[b];
        if (total == 0) continue;
        int64_t pos = fai_rng_range(g, 0, total - 1), b = 0;
        while (pos >= lens[b])
            pos -= lens[b++];
        memset(site, 0, sizeof *site);
        site->tensor = tensor;
        site->b = b;
        site->pos = pos;
        site->group = pb->heads_q / pb->heads_kv;
        site->head = fai_rng_range(g, 0, (tensor == 0 ? pb->heads_q : pb->heads_kv) - 1);
        const int64_t dims = tensor == 2 && pb->head_dim_v > 0 ? pb->head_dim_v : pb->head_dim;
        site->d = fai_rng_range(g, 0, dims - 1);
        const int packed_q = pb->cu_seqlens_q != NULL;
        site->out_g = packed_q ? 0 : b;
        const int64_t row0 = packed_q ? c->cu_q[b] : 0;
        site->row_begin = tensor == 0 ? row0 + pos : row0;
        site->row_end = tensor == 0 ? row0 + pos + 1 : row0 + c->len_q[b];
        site->tb = b;
        site->ts = pos;
        if (tensor == 0 && packed_q) {
            site->tb = 0;
            site->ts = row0 + pos;
        } else if (tensor != 0 && pb->cu_seqlens_kv) {
            site->tb = 0;
            site->ts = c->cu_kv[b] + pos;
        } else if (tensor != 0 && pb->page_size > 0) {
            const int64_t stride =
                c->tensors.block_table_stride ? c->tensors.block_table_stride : pb->pages_per_seq;
            site->tb = c->block_table[b * stride + pos / pb->page_size];
            site->ts = pos % pb->page_size;
        }
        fai_case_set(site_tensor(c, site), site->tb, site->ts, site->head, site->d, value);
        return 0;
    }
    return -1;
}

typedef struct property_stats {
    int64_t runs, skipped, failed;
    int64_t rows_poisoned, rows_clean, rows_exempt;
    int64_t tensor_runs[3], direct_runs, packed_runs, split_runs;
} property_stats;

/* The oracle of a V-poisoned case with V[site] = 0 and = 1 instead (the value is put back). */
static int weight_refs(fai_case *c, poison_site *site, double value, fai_oracle_out refs[2]) {
    fai_tensor *v = site_tensor(c, site);
    char err[256];
    int ok = 1;
    /* every other value of V is 0 meanwhile, so that O[d] is the weight itself, however small
     * (beside values of V the difference of two O would lose it below 1e-17 relative) */
    const size_t bytes = c->bytes[FAI_CASE_BUF_V];
    unsigned char *saved = malloc(bytes);
    if (!saved) return 0;
    memcpy(saved, c->buf[FAI_CASE_BUF_V], bytes);
    memset(c->buf[FAI_CASE_BUF_V], 0, bytes);
    for (int k = 0; k < 2 && ok; k++) {
        fai_case_set(v, site->tb, site->ts, site->head, site->d, (double)k);
        ok = fai_oracle_run(&c->problem, &c->tensors, &refs[k], err, sizeof err) == FAI_OK;
        if (!ok) fprintf(stderr, "  oracle: %s\n", err);
    }
    memcpy(c->buf[FAI_CASE_BUF_V], saved, bytes);
    free(saved);
    fai_case_set(v, site->tb, site->ts, site->head, site->d, value);
    if (!ok && refs[0].o) fai_oracle_out_free(&refs[0]);
    site->weight_ref[0] = &refs[0];
    site->weight_ref[1] = &refs[1];
    return ok;
}

/* One random case with one NaN or +Inf: fai's non-finite rows are the oracle's, and only rows
 * that read the value; everything else finite and within tolerance. */
static void property_case(uint64_t seed, int decode, double value, property_stats *ps) {
    fai_case_spec s;
    fai_case_spec_any(&s);
    s.max_work = 4e5;
    fai_rng g = {seed * 0x9E3779B97F4A7C15ull + (isnan(value) ? 1 : 2)};
    if (decode) {
        /* decode shapes, often with a kv range split across workers */
        s.seq_q = fai_rng_range(&g, 1, 2);
        s.seq_kv = fai_rng_range(&g, 40, 700);
        s.workers = fai_rng_range(&g, 2, 16);
        s.split = FAI_SPLIT_AUTO;
        s.max_work = 2e6;
    }
    fai_case c;
    if (fai_case_build(&c, &s, seed) != 0) {
        fprintf(stderr, "  build: %s\n", c.desc);
        ps->failed++;
        fai_case_free(&c);
        return;
    }
    poison_site site;
    if (poison(&c, &g, value, &site) != 0) {
        ps->skipped++;
        fai_case_free(&c);
        return;
    }
    fai_case_reset(&c);
    char label[160];
    snprintf(label, sizeof label, "%s in %s[b=%lld pos=%lld head=%lld d=%lld]",
             isnan(value) ? "NaN" : "+Inf",
             site.tensor == 0   ? "Q"
             : site.tensor == 1 ? "K"
                                : "V",
             (long long)site.b, (long long)site.pos, (long long)site.head, (long long)site.d);
    run_info info = {0, 0};
    fai_oracle_out ref, weights[2];
    memset(weights, 0, sizeof weights);
    char err[256];
    int failed = run_case(&c, &info) != FAI_OK;
    if (!failed && fai_oracle_run(&c.problem, &c.tensors, &ref, err, sizeof err) != FAI_OK) {
        fprintf(stderr, "  %s: oracle: %s\n", label, err);
        failed = 1;
    } else if (!failed) {
        if (site.tensor != 2 || weight_refs(&c, &site, value, weights)) {
            const compare_stats st = compare(&c, &ref, site_exempt, site_may_change, &site, label);
            failed = st.bad != 0;
            ps->rows_poisoned += st.rows_poisoned;
            ps->rows_clean += st.rows_clean;
            ps->rows_exempt += st.rows_exempt;
            if (site.tensor == 2) {
                fai_oracle_out_free(&weights[0]);
                fai_oracle_out_free(&weights[1]);
            }
        } else {
            failed = 1;
        }
        fai_oracle_out_free(&ref);
    }
    ps->failed += failed;
    ps->runs++;
    ps->tensor_runs[site.tensor]++;
    ps->direct_runs += info.direct_kv;
    ps->packed_runs += !info.direct_kv;
    ps->split_runs += info.split_kv;
    fai_case_free(&c);
}

/* Over the sweep's random problems (every layout, length mode, mask kind, dtype mix, split and
 * tile override), a third of them decode shapes: one NaN, and separately one +Inf, at a random
 * readable position of Q, K or V. */
TEST(nonfinite_rows_property) {
    const long cases = test_env_long("FAI_NONFINITE_CASES", NONFINITE_DEFAULT_CASES);
    const uint64_t base = (uint64_t)test_env_long("FAI_NONFINITE_SEED", NONFINITE_DEFAULT_SEED);
    property_stats ps;
    memset(&ps, 0, sizeof ps);
    for (long i = 0; i < cases; i++) {
        const uint64_t seed = fai_case_seed(base, (uint64_t)i);
        property_case(seed, i % 3 == 2, NAN, &ps);
        property_case(seed, i % 3 == 2, INFINITY, &ps);
    }
    printf("  non-finite: %lld runs (Q %lld, K %lld, V %lld; decode path %lld, packed %lld, "
           "split-KV %lld), %lld skipped, %lld failed; rows non-finite %lld, finite %lld, "
           "exempt %lld\n",
           (long long)ps.runs, (long long)ps.tensor_runs[0], (long long)ps.tensor_runs[1],
           (long long)ps.tensor_runs[2], (long long)ps.direct_runs, (long long)ps.packed_runs,
           (long long)ps.split_runs, (long long)ps.skipped, (long long)ps.failed,
           (long long)ps.rows_poisoned, (long long)ps.rows_clean, (long long)ps.rows_exempt);
    CHECK(ps.failed == 0);
    if (cases >= 30) { /* every path is covered */
        for (int t = 0; t < 3; t++)
            CHECK(ps.tensor_runs[t] > 0);
        CHECK(ps.direct_runs > 0 && ps.packed_runs > 0 && ps.split_runs > 0);
        CHECK(ps.rows_poisoned > 0 && ps.rows_clean > 0);
    }
}
