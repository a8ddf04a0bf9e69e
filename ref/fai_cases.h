/*
 * fai_cases.h - random attention cases, run through the library and checked against the fp64
 * oracle. Shared by the tests and `fai check`.
 *
 * A case is built from a seed and a spec. Every spec field left at FAI_CASE_ANY is drawn from the
 * seed, so a fully random case is reproduced by its seed alone (fai_case_spec_any), and a
 * targeted one by its spec and seed. The description of a case names every parameter.
 *
 * Everything the library must not read is garbage (NaN or Inf): Q rows past seqlens_q, K/V rows
 * past seqlens_kv, page tails and unreferenced pages, stride padding, mask entries outside the
 * lengths, and the scales of those rows (int8 has no NaN: its garbage is +-127, caught by its
 * NaN scale). O and LSE are pre-filled with garbage too, so a row the library forgets is a NaN.
 *
 * Quantized K and V (int8, e4m3, e5m2) hold the values drawn for them divided by their scales,
 * rounded to the nearest code; the oracle reads them back as code x scale, exactly.
 */
#ifndef FAI_CASES_H
#define FAI_CASES_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "fai.h"
#include "fai_oracle.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "Draw this field from the seed." */
#define FAI_CASE_ANY INT64_MIN
/* fai_case_spec.scale: the problem's default scale. */
#define FAI_CASE_SCALE_DEFAULT INFINITY

/* How sequence lengths are given, for Q (FULL, SEQLENS, PACKED) and K/V (all four). */
enum {
    FAI_CASE_LEN_FULL = 0,    /* padded batch, every row valid */
    FAI_CASE_LEN_SEQLENS = 1, /* padded batch with seqlens_q / seqlens_kv */
    FAI_CASE_LEN_PACKED = 2,  /* ragged, cu_seqlens_q / cu_seqlens_kv */
    FAI_CASE_LEN_PAGED = 3    /* K/V page pools with a shuffled block table (K/V only) */
};

/* Shape of a quantized K's or V's scales. */
enum {
    FAI_CASE_SCALE_TOKEN = 0,  /* one per token and kv head, laid out like the tensor's rows */
    FAI_CASE_SCALE_HEAD = 1,   /* one per kv head */
    FAI_CASE_SCALE_TENSOR = 2, /* one for the whole tensor */
    FAI_CASE_SCALE_KINDS = 3
};

/* Shape of an explicit mask, by strides (0 broadcasts). */
enum {
    FAI_CASE_MASK_SQ_SKV = 0,     /* [Sq, Skv] */
    FAI_CASE_MASK_B_SQ_SKV = 1,   /* [B, Sq, Skv] */
    FAI_CASE_MASK_B_H_SQ_SKV = 2, /* [B, Hq, Sq, Skv] */
    FAI_CASE_MASK_H_SQ_SKV = 3,   /* [Hq, Sq, Skv] broadcast over the batch */
    FAI_CASE_MASK_B_SKV = 4,      /* [B, 1, 1, Skv]: key padding, stride_q = 0 */
    FAI_CASE_MASK_SHAPES = 5
};

/* Layout of Q, K, V and O. */
enum {
    FAI_CASE_LAYOUT_BSHD = 0,        /* contiguous [B, S, H, D] */
    FAI_CASE_LAYOUT_BHSD = 1,        /* contiguous [B, H, S, D] */
    FAI_CASE_LAYOUT_BSHD_PADDED = 2, /* [B, S, H, D] with gaps between heads, rows and batches */
    FAI_CASE_LAYOUT_BHSD_PADDED = 3
};

typedef struct fai_case_spec {
    /* Shapes. With PACKED or PAGED lengths seq_q / seq_kv is the longest sequence. */
    int64_t batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, head_dim_v;
    int64_t q_dtype, k_dtype, v_dtype, o_dtype; /* fai_dtype */
    int64_t causal;                             /* fai_causal */
    int64_t window_left, window_right;          /* -1 unbounded */
    int64_t positions;       /* 1: global q_positions / kv_positions (drawn per sequence) */
    int64_t mask_kind;       /* fai_mask_kind */
    int64_t mask_shape;      /* FAI_CASE_MASK_* */
    int64_t mask_density;    /* percent of mask entries that mask (KEEP/DROP/ADD -inf), 0..100 */
    int64_t q_lens, kv_lens; /* FAI_CASE_LEN_* */
    const int32_t *lens_q, *lens_kv; /* explicit per-sequence lengths [batch], or NULL */
    int64_t page_size;               /* with PAGED */
    int64_t layout;                  /* FAI_CASE_LAYOUT_*: one for all tensors; ANY draws each */
    int64_t packed_rows_extra;       /* packed Q: rows past cu_seqlens_q[batch] */
    int64_t workers, threads, tile_q, tile_kv; /* copied into the problem */
    /* fai_problem.pipeline_tiles; ANY: 0, 1 or 2 from the seed, apart from the other draws */
    int64_t pipeline_tiles;
    int64_t split;    /* fai_split */
    int64_t lse;      /* 1: ask for LSE */
    double scale;     /* NaN: draw (mostly the default); FAI_CASE_SCALE_DEFAULT: the default
                         1/sqrt(D) (FAI_SCALE_DEFAULT); else the problem's scale */
    double amplitude; /* Q and K values are uniform in [-a, a]; NaN: draw; V is in [-1, 1] */
    double max_work;  /* cap on B*Hq*Sq*Skv*(D+Dv) for drawn shapes; 0: the default 2e6 */
    /* Score modifiers. softcap: NaN draws (mostly 0, off), else the problem's softcap. alibi,
     * sinks: 1 on, 0 off (slopes and sink logits are then drawn per head). A spec zeroed
     * without fai_case_spec_any has none of them. */
    double softcap;
    int64_t alibi, sinks;
} fai_case_spec;

/* Every field FAI_CASE_ANY (scale and amplitude NaN, lens NULL, max_work 0). */
void fai_case_spec_any(fai_case_spec *spec);

/* A fixed case for tests to change: one sequence, heads_q = heads_kv = 1, seq_q = seq_kv = 1,
 * head dims 64, all f32, no causal mask, no window, no mask tensor, full lengths, dense BSHD
 * tensors, LSE asked for, one worker and thread, the split and the tiles the planner's, the
 * default scale, amplitude 1, no score modifiers; only the pipeline's depth is still drawn from
 * the seed. */
void fai_case_spec_plain(fai_case_spec *spec);

/* Indices of fai_case.buf. */
enum {
    FAI_CASE_BUF_Q = 0,
    FAI_CASE_BUF_K,
    FAI_CASE_BUF_V,
    FAI_CASE_BUF_O,
    FAI_CASE_BUF_LSE,
    FAI_CASE_BUF_MASK,
    FAI_CASE_BUF_K_SCALE, /* a quantized K's scales */
    FAI_CASE_BUF_V_SCALE,
    FAI_CASE_BUF_K_CHANNEL_SCALE, /* a quantized K's per-channel scales */
    FAI_CASE_BUFS
};

typedef struct fai_case {
    uint64_t seed;
    fai_problem problem;
    fai_tensors tensors;
    int q_lens, kv_lens, mask_shape;
    int layout_q, layout_k, layout_v, layout_o, lse_layout;
    int k_scale_kind, v_scale_kind; /* quantized K / V: FAI_CASE_SCALE_* */
    int64_t mask_rows, mask_cols;   /* extent of the mask's i and j dimensions */
    int64_t *len_q, *len_kv;        /* [batch] resolved lengths */
    /* owned storage */
    int32_t *seqlens_q, *seqlens_kv, *cu_q, *cu_kv, *block_table;
    int32_t *q_pos, *kv_pos;
    float *alibi_slopes, *sinks; /* [heads_q] when the problem has them */
    void *buf[FAI_CASE_BUFS];    /* q, k, v, o, lse, mask (NULL when absent) */
    void *init[FAI_CASE_BUFS];   /* the contents before the run */
    size_t bytes[FAI_CASE_BUFS];
    size_t workspace_offset; /* the workspace pointer is this many bytes past an aligned one */
    char desc[768];
} fai_case;

/* Builds a case. Returns 0 on success, -1 if the spec is inconsistent or memory runs out (the
 * reason is in c->desc). A built case is freed with fai_case_free. */
int fai_case_build(fai_case *c, const fai_case_spec *spec, uint64_t seed);
void fai_case_free(fai_case *c);

/* Stores value (rounded to the tensor's dtype) at element (b, s, h, d) of a Q/K/V/O tensor of a
 * case (for a page pool: b = page, s = slot); for tests that want particular values. */
void fai_case_set(fai_tensor *tensor, int64_t b, int64_t s, int64_t h, int64_t d, double value);

/* Restores O and LSE to their garbage and saves the current Q/K/V/mask as the reference
 * contents (call after changing inputs with fai_case_set). */
void fai_case_reset(fai_case *c);

typedef struct fai_case_result {
    int ok;                     /* 1: passed */
    fai_status status;          /* of fai_plan_create / fai_run */
    double tol;                 /* relative tolerance of O where the error came nearest it */
    double tol_lse;             /* the same for LSE */
    double max_err;             /* max |O - ref| / max(1, o_mag) (fai_oracle_out) */
    double max_err_lse;         /* max |LSE - ref| / max(1, |ref|) over finite references */
    double max_ratio;           /* max of the errors over their tolerances */
    int64_t visible_pairs;      /* the oracle's count */
    int64_t plan_visible_pairs; /* fai_plan_get_info's, -1 if unavailable */
    int combo;                  /* fai_case_combo of the dtypes */
    char desc[768];             /* the case */
    char why[512];              /* the first failure, empty when ok */
} fai_case_result;

/* Runs the case: plan, workspace, fai_run (pool NULL: the default pool), the oracle, then
 * compares O and LSE within tolerance, exact zeros / -inf for masked rows and rows past the
 * length, no NaN in O, nothing written outside O and LSE, inputs unchanged. Returns r->ok. */
int fai_case_check(fai_case *c, fai_pool *pool, fai_case_result *r);

/* Builds, checks and frees one case. */
int fai_case_run(const fai_case_spec *spec, uint64_t seed, fai_case_result *r);

/* The seed of case `index` of a sweep started from `base`. */
uint64_t fai_case_seed(uint64_t base, uint64_t index);

/* The project's tolerances (README, "Tolerances"; docs/design.md derives them). An element of a
 * valid O row may differ from the fp64 reference by
 *     (t + FAI_CASE_ROUNDING x eps_f32 x (L + sqrt(n))) x max(1, o_mag)
 * and its LSE by the same factor times max(1, |LSE|), where L is the row's logit_mag, n its
 * visible keys and o_mag the O of |V| (fai_oracle_out). The dtype term t: 0 for f32 Q, K and
 * V, 2^-14 when any is f16, bf16 or quantized, plus the rounding of a 16-bit output (2^-11 for
 * f16, 2^-8 for bf16). */
#define FAI_CASE_EPS_F32 0x1.0p-23
#define FAI_CASE_ROUNDING 2.0
double fai_case_tolerance(fai_dtype q, fai_dtype k, fai_dtype v, fai_dtype o);

/* t + FAI_CASE_ROUNDING x eps_f32 x (L + sqrt(n)) for row `row` of ref (indexed as row_state):
 * the relative tolerance of its O elements and of its LSE. */
double fai_case_row_tolerance(const fai_oracle_out *ref, size_t row, double t);

/* The largest |O - ref| element d of valid row `row` may have, and the largest |LSE - ref| of
 * the row whose reference LSE is lse (both absolute). */
double fai_case_o_limit(const fai_oracle_out *ref, size_t row, int64_t d, double t);
double fai_case_lse_limit(const fai_oracle_out *ref, size_t row, double lse, double t);

/* dtype combinations: q + 3 k + 18 v + 108 o (Q and O one of 3 dtypes, K and V of 6), and its
 * name "q=f16 k=int8 v=f32 o=f16". */
#define FAI_CASE_COMBOS 324
int fai_case_combo(fai_dtype q, fai_dtype k, fai_dtype v, fai_dtype o);
const char *fai_case_combo_name(int combo, char *buf, size_t size);

/* Aggregate over many cases: worst errors per dtype combination. */
typedef struct fai_case_stats {
    int64_t cases, passed, failed;
    double max_ratio;
    int64_t combo_cases[FAI_CASE_COMBOS], combo_failed[FAI_CASE_COMBOS];
    double combo_err[FAI_CASE_COMBOS];   /* largest O error relative to max(1, |ref|) */
    double combo_lse[FAI_CASE_COMBOS];   /* largest LSE error relative to max(1, |ref|) */
    double combo_ratio[FAI_CASE_COMBOS]; /* largest error / tolerance */
    double combo_tol[FAI_CASE_COMBOS];
} fai_case_stats;

void fai_case_stats_init(fai_case_stats *stats);
void fai_case_stats_add(fai_case_stats *stats, const fai_case_result *r);

/* Small deterministic PRNG (splitmix64), exposed for tests. */
typedef struct fai_rng {
    uint64_t state;
} fai_rng;
uint64_t fai_rng_next(fai_rng *rng);
int64_t fai_rng_range(fai_rng *rng, int64_t lo, int64_t hi); /* uniform in [lo, hi] */
double fai_rng_uniform(fai_rng *rng);                        /* uniform in [0, 1) */

#ifdef __cplusplus
}
#endif

#endif /* FAI_CASES_H */
