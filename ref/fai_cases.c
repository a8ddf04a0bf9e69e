/*
 * fai_cases.c - random cases and their check against the oracle. See fai_cases.h.
 *
 * Building a case: draw every ANY field of the spec from the seed (shapes within a work budget,
 * dtypes, masks, lengths, layouts, execution knobs), allocate each tensor with its strides plus
 * slack, fill the whole allocation with garbage, then write random values only at the positions
 * the library may read. Checking a case: run the library, run the oracle, compare.
 */
#include "fai_cases.h"

#include "fai_oracle.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    BUF_Q = FAI_CASE_BUF_Q,
    BUF_K = FAI_CASE_BUF_K,
    BUF_V = FAI_CASE_BUF_V,
    BUF_O = FAI_CASE_BUF_O,
    BUF_LSE = FAI_CASE_BUF_LSE,
    BUF_MASK = FAI_CASE_BUF_MASK,
    BUF_K_SCALE = FAI_CASE_BUF_K_SCALE,
    BUF_V_SCALE = FAI_CASE_BUF_V_SCALE,
    BUF_K_CHANNEL_SCALE = FAI_CASE_BUF_K_CHANNEL_SCALE,
    BUF_COUNT = FAI_CASE_BUFS
};

/* -- PRNG ----------------------------------------------------------------------------------- */

uint64_t fai_rng_next(fai_rng *rng) {
    uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int64_t fai_rng_range(fai_rng *rng, int64_t lo, int64_t hi) {
    if (hi <= lo) return lo;
    return lo + (int64_t)(fai_rng_next(rng) % (uint64_t)(hi - lo + 1));
}

double fai_rng_uniform(fai_rng *rng) { return (double)(fai_rng_next(rng) >> 11) * 0x1.0p-53; }

uint64_t fai_case_seed(uint64_t base, uint64_t index) {
    fai_rng g = {base * 0x2545F4914F6CDD1Dull + index};
    fai_rng_next(&g);
    return fai_rng_next(&g) >> 16; /* short enough to type */
}

static double uniform_pm(fai_rng *g, double a) { return (2.0 * fai_rng_uniform(g) - 1.0) * a; }

static int64_t pick(fai_rng *g, const int64_t *values, int n) {
    return values[fai_rng_range(g, 0, n - 1)];
}

#define PICK(g, ...)                                                                               \
    pick((g), (const int64_t[]){__VA_ARGS__},                                                      \
         (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))

/* -- spec ----------------------------------------------------------------------------------- */

void fai_case_spec_any(fai_case_spec *s) {
    s->batch = s->heads_q = s->heads_kv = s->seq_q = s->seq_kv = FAI_CASE_ANY;
    s->head_dim = s->head_dim_v = FAI_CASE_ANY;
    s->q_dtype = s->k_dtype = s->v_dtype = s->o_dtype = FAI_CASE_ANY;
    s->causal = s->window_left = s->window_right = s->positions = FAI_CASE_ANY;
    s->mask_kind = s->mask_shape = s->mask_density = FAI_CASE_ANY;
    s->q_lens = s->kv_lens = FAI_CASE_ANY;
    s->lens_q = s->lens_kv = NULL;
    s->page_size = s->layout = s->packed_rows_extra = FAI_CASE_ANY;
    s->workers = s->threads = s->tile_q = s->tile_kv = s->split = FAI_CASE_ANY;
    s->pipeline_tiles = FAI_CASE_ANY;
    s->lse = FAI_CASE_ANY;
    s->scale = NAN;
    s->amplitude = NAN;
    s->max_work = 0;
    s->softcap = NAN;
    s->alibi = s->sinks = FAI_CASE_ANY;
}

void fai_case_spec_plain(fai_case_spec *s) {
    fai_case_spec_any(s);
    s->batch = s->heads_q = s->heads_kv = s->seq_q = s->seq_kv = 1;
    s->head_dim = s->head_dim_v = 64;
    s->q_dtype = s->k_dtype = s->v_dtype = s->o_dtype = FAI_DTYPE_F32;
    s->causal = FAI_CAUSAL_NONE;
    s->window_left = s->window_right = -1;
    s->positions = 0;
    s->mask_kind = FAI_MASK_NONE;
    s->mask_shape = FAI_CASE_MASK_SQ_SKV;
    s->mask_density = 0;
    s->q_lens = s->kv_lens = FAI_CASE_LEN_FULL;
    s->page_size = 16;
    s->layout = FAI_CASE_LAYOUT_BSHD;
    s->packed_rows_extra = 0;
    s->workers = s->threads = 1;
    s->tile_q = s->tile_kv = 0;
    s->split = FAI_SPLIT_AUTO;
    s->lse = 1;
    s->scale = FAI_CASE_SCALE_DEFAULT;
    s->amplitude = 1.0;
    s->softcap = 0.0;
    s->alibi = s->sinks = 0;
}

static int64_t draw_dim(fai_rng *g) {
    const int64_t p = fai_rng_range(g, 0, 99);
    if (p < 55) return fai_rng_range(g, 1, 16);
    if (p < 80) return PICK(g, 32, 48, 64, 80, 96, 112, 128);
    if (p < 95) return fai_rng_range(g, 17, 256);
    return fai_rng_range(g, 257, FAI_MAX_HEAD_DIM);
}

static int64_t draw_len(fai_rng *g) {
    const int64_t p = fai_rng_range(g, 0, 99);
    if (p < 3) return 0;
    if (p < 18) return 1;
    if (p < 60) return fai_rng_range(g, 2, 20);
    if (p < 90) return fai_rng_range(g, 21, 100);
    return fai_rng_range(g, 101, 300);
}

/* A tile override: mostly none (the planner's choice), sometimes small or odd, rarely huge. */
static int64_t draw_tile(fai_rng *g, int kv) {
    const int64_t p = fai_rng_range(g, 0, 99);
    if (p < 75) return 0;
    if (p < 98)
        return kv ? PICK(g, 1, 2, 3, 5, 8, 16, 24, 32, 64, 128, 256)
                  : PICK(g, 1, 2, 3, 4, 7, 8, 16, 24, 32, 64, 128);
    return fai_rng_range(g, 257, 4096);
}

/* A sequence length in [0, max], often the maximum, sometimes empty. */
static int64_t draw_seq_len(fai_rng *g, int64_t max) {
    const int64_t p = fai_rng_range(g, 0, 99);
    if (p < 30) return max;
    if (p < 38 || max == 0) return 0;
    return fai_rng_range(g, 1, max);
}

/* -- tensors -------------------------------------------------------------------------------- */

/* Garbage of a dtype: quiet NaN mostly, +-Inf sometimes. */
static void store_garbage(void *data, fai_dtype dt, int64_t index, fai_rng *g) {
    const uint64_t r = fai_rng_next(g);
    const int kind = (int)(r % 8);
    if (dt == FAI_DTYPE_I8 || dt == FAI_DTYPE_E4M3 || dt == FAI_DTYPE_E5M2) {
        /* int8: its extremes; e4m3: NaN; e5m2: Inf or NaN */
        const uint8_t garbage = dt == FAI_DTYPE_I8     ? (kind & 1 ? 0x80 : 0x7f)
                                : dt == FAI_DTYPE_E4M3 ? (kind & 1 ? 0xff : 0x7f)
                                                       : (kind & 1 ? 0x7c : 0x7e);
        ((uint8_t *)data)[index] = garbage;
        return;
    }
    if (dt == FAI_DTYPE_F32) {
        uint32_t bits = kind == 0   ? 0x7F800000u
                        : kind == 1 ? 0xFF800000u
                                    : 0x7FC00000u | (uint32_t)(r >> 43);
        memcpy((char *)data + index * 4, &bits, 4);
    } else {
        uint16_t bits;
        if (dt == FAI_DTYPE_F16)
            bits = kind == 0   ? 0x7C00
                   : kind == 1 ? 0xFC00
                               : (uint16_t)(0x7E00 | ((r >> 40) & 0xFF));
        else
            bits = kind == 0   ? 0x7F80
                   : kind == 1 ? 0xFF80
                               : (uint16_t)(0x7FC0 | ((r >> 40) & 0x3F));
        memcpy((char *)data + index * 2, &bits, 2);
    }
}

/* Strides for [nb, ns, nh, nd] in one of the layouts; returns the element extent. */
static int64_t lay_out(fai_tensor *t, int layout, int64_t nb, int64_t ns, int64_t nh, int64_t nd,
                       fai_rng *g) {
    const int padded =
        layout == FAI_CASE_LAYOUT_BSHD_PADDED || layout == FAI_CASE_LAYOUT_BHSD_PADDED;
    const int64_t pd = padded ? fai_rng_range(g, 0, 5) : 0;
    const int64_t p2 = padded ? fai_rng_range(g, 0, 7) : 0;
    const int64_t p3 = padded ? fai_rng_range(g, 0, 9) : 0;
    if (layout == FAI_CASE_LAYOUT_BSHD || layout == FAI_CASE_LAYOUT_BSHD_PADDED) {
        t->stride_head = nd + pd;
        t->stride_seq = nh * t->stride_head + p2;
        t->stride_batch = ns * t->stride_seq + p3;
    } else {
        t->stride_seq = nd + pd;
        t->stride_head = ns * t->stride_seq + p2;
        t->stride_batch = nh * t->stride_head + p3;
    }
    if (nb <= 0 || ns <= 0 || nh <= 0 || nd <= 0) return 0;
    return (nb - 1) * t->stride_batch + (ns - 1) * t->stride_seq + (nh - 1) * t->stride_head + nd;
}

static int alloc_buf(fai_case *c, int idx, int64_t elements, size_t esize) {
    const size_t bytes = ((size_t)elements + 64) * esize;
    c->buf[idx] = malloc(bytes);
    c->init[idx] = malloc(bytes);
    c->bytes[idx] = bytes;
    return c->buf[idx] && c->init[idx] ? 0 : -1;
}

static void fill_garbage(void *data, fai_dtype dt, size_t bytes, fai_rng *g) {
    const int64_t n = (int64_t)(bytes / fai_dtype_size(dt));
    for (int64_t i = 0; i < n; i++)
        store_garbage(data, dt, i, g);
}

void fai_case_set(fai_tensor *t, int64_t b, int64_t s, int64_t h, int64_t d, double value) {
    fai_oracle_store(t->data, t->dtype,
                     b * t->stride_batch + s * t->stride_seq + h * t->stride_head + d, value);
}

/* The scale of (b, s, h) of a quantized tensor (1 for the others): drawn the first time it is
 * asked for (it starts as garbage: NaN or Inf), so that values in [-amp, amp] use a good part of
 * the codes, and stored at its place. */
static double draw_scale(const fai_tensor *t, fai_scale *scale, int64_t b, int64_t s, int64_t h,
                         double amp, fai_rng *g) {
    if (!fai_dtype_is_quantized(t->dtype)) return 1.0;
    float *at =
        scale->data + b * scale->stride_batch + s * scale->stride_seq + h * scale->stride_head;
    if (!isfinite(*at)) {
        const double qmax = t->dtype == FAI_DTYPE_I8     ? 127.0
                            : t->dtype == FAI_DTYPE_E4M3 ? 448.0
                                                         : 57344.0;
        *at = (float)(amp / qmax * (0.5 + fai_rng_uniform(g)));
    }
    return (double)*at;
}

/* -- building ------------------------------------------------------------------------------- */

static const char *causal_name(int64_t causal) {
    return causal == FAI_CAUSAL_BOTTOM_RIGHT ? "br" : causal == FAI_CAUSAL_TOP_LEFT ? "tl" : "none";
}

static const char *split_name(fai_split split) {
    return split == FAI_SPLIT_UNITS ? "units" : split == FAI_SPLIT_GREEDY ? "greedy" : "auto";
}

static const char *mask_name(int64_t kind) {
    return kind == FAI_MASK_KEEP        ? "keep"
           : kind == FAI_MASK_DROP      ? "drop"
           : kind == FAI_MASK_ADD       ? "add"
           : kind == FAI_MASK_KEEP_BITS ? "bits"
                                        : "none";
}

static const char *mask_shape_name(int shape) {
    static const char *names[] = {"[Sq,Skv]", "[B,Sq,Skv]", "[B,Hq,Sq,Skv]", "[Hq,Sq,Skv]",
                                  "[B,1,1,Skv]"};
    return shape >= 0 && shape < FAI_CASE_MASK_SHAPES ? names[shape] : "?";
}

static const char *lens_name(int lens) {
    static const char *names[] = {"full", "seqlens", "packed", "paged"};
    return lens >= 0 && lens < 4 ? names[lens] : "?";
}

static int build_fail(fai_case *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->desc, sizeof c->desc, fmt, ap);
    va_end(ap);
    return -1;
}

#define ANY(x) ((x) == FAI_CASE_ANY)

/* A case being built. Each step below draws one group of its parameters or builds one of its
 * tensors; a seed reproduces a case only while the draws come in the same order, so the steps
 * run in a fixed sequence (fai_case_build) and fill in the spec's ANY fields as they go. */
typedef struct case_draft {
    fai_case *c;
    const fai_case_spec *given; /* the caller's spec: which fields were given, not drawn */
    fai_case_spec sp;           /* the spec with the fields drawn so far */
    fai_rng rng;
    /* quantized K and V draw from a stream of their own, so that the other draws of a seed
     * stay what they were before these dtypes existed */
    fai_rng quant_rng;
    int packed_q, packed_kv, paged;
    int64_t max_lq, max_lk, total_q, total_kv; /* over the sequences' lengths */
    int64_t extra_rows;                        /* packed Q: rows past the last sequence */
    int64_t page_size, num_pages, pages_per_seq, bt_stride; /* paged K/V */
    int zero_seq_kv; /* paged: the problem's seq_kv (unused) is 0 rather than the longest */
    /* batch and sequence extents of Q and O, and of K and V (pages and slots when paged) */
    int64_t q_nb, kv_nb, kv_ns;
    int64_t slack; /* elements behind a packed tensor, so a batch stride used reads garbage */
} case_draft;

/* Dtypes: all-f32 inputs (the tightest tolerance) a fifth of the time, else independent; then
 * maybe a quantized K or V, and the shapes of their scales. */
static int draw_dtypes(case_draft *draft) {
    fai_rng *g = &draft->rng, *gq = &draft->quant_rng;
    const fai_case_spec *sp = &draft->sp;
    fai_problem *pb = &draft->c->problem;
    const int all_f32 = fai_rng_range(g, 0, 99) < 20;
    pb->q_dtype =
        (fai_dtype)(ANY(sp->q_dtype) ? (all_f32 ? 0 : fai_rng_range(g, 0, 2)) : sp->q_dtype);
    pb->k_dtype =
        (fai_dtype)(ANY(sp->k_dtype) ? (all_f32 ? 0 : fai_rng_range(g, 0, 2)) : sp->k_dtype);
    pb->v_dtype =
        (fai_dtype)(ANY(sp->v_dtype) ? (all_f32 ? 0 : fai_rng_range(g, 0, 2)) : sp->v_dtype);
    pb->o_dtype = (fai_dtype)(ANY(sp->o_dtype) ? fai_rng_range(g, 0, 2) : sp->o_dtype);
    if (ANY(sp->k_dtype) && !all_f32 && fai_rng_range(gq, 0, 99) < 30)
        pb->k_dtype = (fai_dtype)(FAI_DTYPE_I8 + fai_rng_range(gq, 0, 2));
    if (ANY(sp->v_dtype) && !all_f32 && fai_rng_range(gq, 0, 99) < 30)
        pb->v_dtype = (fai_dtype)(FAI_DTYPE_I8 + fai_rng_range(gq, 0, 2));
    draft->c->k_scale_kind = (int)fai_rng_range(gq, 0, FAI_CASE_SCALE_KINDS - 1);
    draft->c->v_scale_kind = (int)fai_rng_range(gq, 0, FAI_CASE_SCALE_KINDS - 1);
    return 0;
}

/* How lengths are given (FAI_CASE_LEN_*) for Q and for K/V, and the page size when paged. */
static int draw_length_modes(case_draft *draft) {
    fai_rng *g = &draft->rng;
    fai_case_spec *sp = &draft->sp;
    fai_case *c = draft->c;
    /* explicit lengths need a mode that uses them */
    if (ANY(sp->q_lens) && sp->lens_q)
        sp->q_lens = fai_rng_range(g, FAI_CASE_LEN_SEQLENS, FAI_CASE_LEN_PACKED);
    if (ANY(sp->kv_lens) && sp->lens_kv)
        sp->kv_lens = fai_rng_range(g, FAI_CASE_LEN_SEQLENS, FAI_CASE_LEN_PAGED);
    if (ANY(sp->q_lens)) {
        const int64_t p = fai_rng_range(g, 0, 99);
        sp->q_lens = p < 40   ? FAI_CASE_LEN_FULL
                     : p < 70 ? FAI_CASE_LEN_SEQLENS
                              : FAI_CASE_LEN_PACKED;
    }
    if (ANY(sp->kv_lens)) {
        const int64_t p = fai_rng_range(g, 0, 99);
        sp->kv_lens = p < 30   ? FAI_CASE_LEN_FULL
                      : p < 55 ? FAI_CASE_LEN_SEQLENS
                      : p < 75 ? FAI_CASE_LEN_PACKED
                               : FAI_CASE_LEN_PAGED;
    }
    if (sp->q_lens < 0 || sp->q_lens > FAI_CASE_LEN_PACKED || sp->kv_lens < 0 ||
        sp->kv_lens > FAI_CASE_LEN_PAGED)
        return build_fail(c, "bad q_lens / kv_lens");
    c->q_lens = (int)sp->q_lens;
    c->kv_lens = (int)sp->kv_lens;
    draft->packed_q = c->q_lens == FAI_CASE_LEN_PACKED;
    draft->packed_kv = c->kv_lens == FAI_CASE_LEN_PACKED;
    draft->paged = c->kv_lens == FAI_CASE_LEN_PAGED;
    if (draft->paged && ANY(sp->page_size)) {
        const int64_t p = fai_rng_range(g, 0, 99);
        sp->page_size = p < 20   ? 1
                        : p < 40 ? 3
                        : p < 65 ? 16
                        : p < 75 ? 128
                                 : fai_rng_range(g, 2, 40);
    }
    if (draft->paged && sp->page_size < 1) return build_fail(c, "page_size");
    return 0;
}

/* Shrinks drawn sizes until the attention work, and (through the minimum of 8 keys) the size
 * of the tensors, fit the budget: the batch first, then the query group, the longer sequence,
 * the heads, the head dims. Given sizes stay. */
static void fit_work_budget(fai_case_spec *sp, const fai_case_spec *given) {
    const int given_seq_q = !ANY(given->seq_q), given_seq_kv = !ANY(given->seq_kv);
    const int given_heads = !ANY(given->heads_q) || !ANY(given->heads_kv);
    const int given_dims = !ANY(given->head_dim), given_dims_v = !ANY(given->head_dim_v);
    const int given_batch = !ANY(given->batch);
    const double budget = sp->max_work > 0 ? sp->max_work : 2e6;
    for (int guard = 0; guard < 64; guard++) {
        const double work = (double)(sp->batch ? sp->batch : 1) * (double)sp->heads_q *
                            (double)(sp->seq_q ? sp->seq_q : 1) *
                            (double)(sp->seq_kv > 8 ? sp->seq_kv : 8) *
                            (double)(sp->head_dim + sp->head_dim_v);
        if (work <= budget) break;
        const int can_kv = !given_seq_kv && !sp->lens_kv && sp->seq_kv > 8;
        const int can_q = !given_seq_q && !sp->lens_q && sp->seq_q > 4;
        if (!given_batch && sp->batch > 4)
            sp->batch = sp->batch / 2;
        else if (!given_heads && sp->heads_q > 2 * sp->heads_kv)
            sp->heads_q = sp->heads_kv * (sp->heads_q / sp->heads_kv / 2);
        else if (can_kv && (!can_q || sp->seq_kv >= sp->seq_q))
            sp->seq_kv = sp->seq_kv / 2 + 1;
        else if (can_q)
            sp->seq_q = sp->seq_q / 2 + 1;
        else if (!given_heads && sp->heads_q > sp->heads_kv)
            sp->heads_q = sp->heads_kv;
        else if (!given_heads && sp->heads_kv > 1)
            sp->heads_q = sp->heads_kv = 1;
        else if (!given_dims && sp->head_dim > 8) {
            sp->head_dim = sp->head_dim / 2 + 1;
            if (!given_dims_v && sp->head_dim_v > 8) sp->head_dim_v = sp->head_dim_v / 2 + 1;
        } else if (!given_dims_v && sp->head_dim_v > 8)
            sp->head_dim_v = sp->head_dim_v / 2 + 1;
        else
            break;
    }
}

/* The longest of explicit lengths. */
static int64_t longest(const int32_t *lens, int64_t batch) {
    int64_t mx = 0;
    for (int64_t b = 0; b < batch; b++)
        mx = lens[b] > mx ? lens[b] : mx;
    return mx;
}

/* The shape: batch, heads (the kv heads dividing the query heads), head dims and the longest
 * sequences, drawn where the spec leaves them and fitted to the work budget. */
static int draw_shape(case_draft *draft) {
    fai_rng *g = &draft->rng;
    fai_case_spec *sp = &draft->sp;
    const fai_case_spec *given = draft->given;
    fai_case *c = draft->c;
    if (ANY(sp->batch)) {
        if (sp->lens_q || sp->lens_kv) return build_fail(c, "lens need the batch");
        const int64_t p = fai_rng_range(g, 0, 99);
        sp->batch = p < 2    ? 0
                    : p < 40 ? 1
                    : p < 95 ? fai_rng_range(g, 2, 4)
                             : fai_rng_range(g, 5, 33);
    }
    if (ANY(sp->heads_kv)) {
        if (ANY(sp->heads_q)) {
            sp->heads_kv = PICK(g, 1, 2, 7, 8);
        } else {
            const int64_t cand[4] = {1, 2, 7, 8};
            int64_t ok[4];
            int n = 0;
            for (int i = 0; i < 4; i++)
                if (sp->heads_q % cand[i] == 0) ok[n++] = cand[i];
            sp->heads_kv = n ? ok[fai_rng_range(g, 0, n - 1)] : 1;
        }
    }
    if (ANY(sp->heads_q)) {
        const int64_t group =
            fai_rng_range(g, 0, 99) < 4 ? PICK(g, 16, 32) : PICK(g, 1, 1, 2, 3, 4, 8);
        sp->heads_q = sp->heads_kv * group;
    }
    if (ANY(sp->head_dim)) sp->head_dim = draw_dim(g);
    if (ANY(sp->head_dim_v)) sp->head_dim_v = fai_rng_range(g, 0, 1) ? sp->head_dim : draw_dim(g);
    if (ANY(sp->seq_q)) sp->seq_q = draw_len(g);
    if (ANY(sp->seq_kv)) sp->seq_kv = draw_len(g);
    /* inference mostly has at least as many keys as queries */
    if (ANY(given->seq_q) && ANY(given->seq_kv) && sp->seq_q > sp->seq_kv && sp->seq_kv > 0 &&
        fai_rng_range(g, 0, 99) < 60) {
        const int64_t tmp = sp->seq_q;
        sp->seq_q = sp->seq_kv;
        sp->seq_kv = tmp;
    }
    /* explicit lengths set the longest sequence, unless it is given */
    if (sp->lens_q) {
        const int64_t mx = longest(sp->lens_q, sp->batch);
        if (ANY(given->seq_q)) sp->seq_q = mx;
    }
    if (sp->lens_kv) {
        const int64_t mx = longest(sp->lens_kv, sp->batch);
        if (ANY(given->seq_kv)) sp->seq_kv = mx;
    }
    fit_work_budget(sp, given);
    const int64_t B = sp->batch;
    const int64_t Hq = sp->heads_q, Hkv = sp->heads_kv, D = sp->head_dim, Dv = sp->head_dim_v;
    if (B < 0 || Hq < 1 || Hkv < 1 || Hq % Hkv || D < 1 || D > FAI_MAX_HEAD_DIM || Dv < 1 ||
        Dv > FAI_MAX_HEAD_DIM || sp->seq_q < 0 || sp->seq_kv < 0)
        return build_fail(c, "bad shape");
    /* a drawn Dv equal to D is now and then given as the default */
    const int dv_default = Dv == D && ANY(given->head_dim_v) && fai_rng_range(g, 0, 99) < 30;
    fai_problem *pb = &c->problem;
    pb->batch = B;
    pb->heads_q = Hq;
    pb->heads_kv = Hkv;
    pb->head_dim = D;
    pb->head_dim_v = dv_default ? FAI_HEAD_DIM_V_DEFAULT : Dv;
    return 0;
}

/* Each sequence's lengths: the explicit ones, the longest (FULL), or drawn up to the longest. */
static int draw_seq_lengths(case_draft *draft) {
    fai_rng *g = &draft->rng;
    const fai_case_spec *sp = &draft->sp;
    fai_case *c = draft->c;
    const int64_t B = sp->batch;
    c->len_q = calloc((size_t)B + 1, sizeof(int64_t));
    c->len_kv = calloc((size_t)B + 1, sizeof(int64_t));
    if (!c->len_q || !c->len_kv) return build_fail(c, "out of memory");
    for (int64_t b = 0; b < B; b++) {
        int64_t lq = sp->lens_q                       ? sp->lens_q[b]
                     : c->q_lens == FAI_CASE_LEN_FULL ? sp->seq_q
                                                      : draw_seq_len(g, sp->seq_q);
        int64_t lk = sp->lens_kv                       ? sp->lens_kv[b]
                     : c->kv_lens == FAI_CASE_LEN_FULL ? sp->seq_kv
                                                       : draw_seq_len(g, sp->seq_kv);
        if (c->q_lens == FAI_CASE_LEN_FULL) lq = sp->seq_q;
        if (c->kv_lens == FAI_CASE_LEN_FULL) lk = sp->seq_kv;
        if (lq < 0 || lk < 0 || (!draft->packed_q && lq > sp->seq_q) ||
            (!draft->packed_kv && !draft->paged && lk > sp->seq_kv))
            return build_fail(c, "bad lengths");
        c->len_q[b] = lq;
        c->len_kv[b] = lk;
        draft->max_lq = lq > draft->max_lq ? lq : draft->max_lq;
        draft->max_lk = lk > draft->max_lk ? lk : draft->max_lk;
        draft->total_q += lq;
        draft->total_kv += lk;
    }
    return 0;
}

/* Paged K/V: a pool of a few pages more than the sequences need, and a block table a few pages
 * wider than the longest sequence needs, its rows maybe further apart than that. */
static void draw_page_pool(case_draft *draft) {
    fai_rng *g = &draft->rng;
    fai_case *c = draft->c;
    fai_problem *pb = &c->problem;
    const int64_t page_size = draft->sp.page_size;
    int64_t needed = 0;
    for (int64_t b = 0; b < pb->batch; b++)
        needed += (c->len_kv[b] + page_size - 1) / page_size;
    draft->page_size = page_size;
    draft->num_pages = needed + fai_rng_range(g, 0, 3);
    if (draft->num_pages < 1) draft->num_pages = 1;
    draft->pages_per_seq = (draft->max_lk + page_size - 1) / page_size + fai_rng_range(g, 0, 2);
    if (draft->pages_per_seq < 1) draft->pages_per_seq = 1;
    draft->bt_stride = draft->pages_per_seq + (fai_rng_range(g, 0, 2) ? 0 : fai_rng_range(g, 1, 3));
    draft->zero_seq_kv = fai_rng_range(g, 0, 99) < 30;
    pb->seq_kv = draft->zero_seq_kv ? 0 : draft->max_lk; /* unused when paged */
    pb->seqlens_kv = c->seqlens_kv;
    pb->page_size = page_size;
    pb->num_pages = draft->num_pages;
    pb->pages_per_seq = draft->pages_per_seq;
}

/* The lengths as the problem takes them: seqlens or cu_seqlens arrays (packed Q maybe with rows
 * past its last sequence, packed K/V with keys past it), or a page pool. */
static int give_lengths(case_draft *draft) {
    fai_rng *g = &draft->rng;
    const fai_case_spec *sp = &draft->sp;
    fai_case *c = draft->c;
    fai_problem *pb = &c->problem;
    const int64_t B = sp->batch;
    c->seqlens_q = calloc((size_t)B + 1, sizeof(int32_t));
    c->seqlens_kv = calloc((size_t)B + 1, sizeof(int32_t));
    c->cu_q = calloc((size_t)B + 2, sizeof(int32_t));
    c->cu_kv = calloc((size_t)B + 2, sizeof(int32_t));
    if (!c->seqlens_q || !c->seqlens_kv || !c->cu_q || !c->cu_kv)
        return build_fail(c, "out of memory");
    for (int64_t b = 0; b < B; b++) {
        c->seqlens_q[b] = (int32_t)c->len_q[b];
        c->seqlens_kv[b] = (int32_t)c->len_kv[b];
        c->cu_q[b + 1] = c->cu_q[b] + (int32_t)c->len_q[b];
        c->cu_kv[b + 1] = c->cu_kv[b] + (int32_t)c->len_kv[b];
    }
    if (draft->packed_q) {
        draft->extra_rows = ANY(sp->packed_rows_extra)
                                ? (fai_rng_range(g, 0, 99) < 70 ? 0 : fai_rng_range(g, 1, 5))
                                : sp->packed_rows_extra;
        if (B == 0) draft->extra_rows = 0; /* packed rows need a sequence to belong to */
        pb->seq_q = draft->total_q + draft->extra_rows;
        pb->cu_seqlens_q = c->cu_q;
    } else {
        pb->seq_q = sp->seq_q;
        if (c->q_lens == FAI_CASE_LEN_SEQLENS) pb->seqlens_q = c->seqlens_q;
    }
    if (draft->packed_kv) {
        pb->seq_kv =
            draft->total_kv + (fai_rng_range(g, 0, 99) < 80 || B == 0 ? 0 : fai_rng_range(g, 1, 4));
        pb->cu_seqlens_kv = c->cu_kv;
    } else if (draft->paged) {
        draw_page_pool(draft);
    } else {
        pb->seq_kv = sp->seq_kv;
        if (c->kv_lens == FAI_CASE_LEN_SEQLENS) pb->seqlens_kv = c->seqlens_kv;
    }
    return 0;
}

/* What hides keys: causal, the window, the explicit mask's kind, shape and density, and global
 * positions (each sequence's diagonal moved anywhere around its own). */
static int draw_masking(case_draft *draft) {
    fai_rng *g = &draft->rng;
    fai_case_spec *sp = &draft->sp;
    fai_case *c = draft->c;
    fai_problem *pb = &c->problem;
    if (ANY(sp->causal)) {
        const int64_t p = fai_rng_range(g, 0, 99);
        sp->causal = p < 50   ? FAI_CAUSAL_NONE
                     : p < 80 ? FAI_CAUSAL_BOTTOM_RIGHT
                              : FAI_CAUSAL_TOP_LEFT;
    }
    const int window_drawn = fai_rng_range(g, 0, 99) < 40;
    const int64_t wspan = (draft->max_lk > draft->max_lq ? draft->max_lk : draft->max_lq) + 2;
    if (ANY(sp->window_left))
        sp->window_left = window_drawn && fai_rng_range(g, 0, 3) ? fai_rng_range(g, 0, wspan) : -1;
    if (ANY(sp->window_right))
        sp->window_right = window_drawn && fai_rng_range(g, 0, 2) ? fai_rng_range(g, 0, wspan) : -1;
    if (ANY(sp->mask_kind)) {
        const int64_t p = fai_rng_range(g, 0, 99);
        sp->mask_kind = p < 50   ? FAI_MASK_NONE
                        : p < 62 ? FAI_MASK_KEEP
                        : p < 74 ? FAI_MASK_DROP
                        : p < 87 ? FAI_MASK_ADD
                                 : FAI_MASK_KEEP_BITS;
    }
    if (ANY(sp->mask_shape)) sp->mask_shape = fai_rng_range(g, 0, FAI_CASE_MASK_SHAPES - 1);
    if (ANY(sp->mask_density))
        sp->mask_density = fai_rng_range(g, 0, 99) < 4 ? 100 : PICK(g, 0, 10, 10, 30, 30, 60, 90);
    if (ANY(sp->positions)) sp->positions = fai_rng_range(g, 0, 99) < 15;
    if (sp->positions) {
        const int64_t B = sp->batch;
        c->q_pos = calloc((size_t)B + 1, sizeof(int32_t));
        c->kv_pos = calloc((size_t)B + 1, sizeof(int32_t));
        if (!c->q_pos || !c->kv_pos) return build_fail(c, "out of memory");
        for (int64_t b = 0; b < B; b++) {
            c->kv_pos[b] = (int32_t)fai_rng_range(g, 0, 3 * wspan);
            c->q_pos[b] = (int32_t)fai_rng_range(g, 0, 3 * wspan);
        }
        pb->q_positions = c->q_pos;
        pb->kv_positions = c->kv_pos;
    }
    pb->causal = (fai_causal)sp->causal;
    pb->window_left = sp->window_left;
    pb->window_right = sp->window_right;
    pb->mask_kind = (fai_mask_kind)sp->mask_kind;
    c->mask_shape = (int)sp->mask_shape;
    return 0;
}

/* The scores: the scale, the values' amplitude, and the score modifiers (each about a fifth of
 * the time, independently) with their ALiBi slopes and sink logits per head. */
static int draw_scores(case_draft *draft) {
    fai_rng *g = &draft->rng;
    fai_case_spec *sp = &draft->sp;
    fai_case *c = draft->c;
    fai_problem *pb = &c->problem;
    const int64_t Hq = sp->heads_q;
    if (isnan(sp->scale)) {
        /* the default mostly, now and then 0 (every visible key weighs the same) */
        const int64_t p = fai_rng_range(g, 0, 99);
        sp->scale = p < 72   ? FAI_CASE_SCALE_DEFAULT
                    : p < 75 ? 0.0
                             : uniform_pm(g, 1.5) / sqrt((double)sp->head_dim);
    }
    if (isnan(sp->amplitude)) sp->amplitude = (double)PICK(g, 1, 1, 2, 2, 3, 4) * 0.5;
    pb->scale = isinf(sp->scale) ? FAI_SCALE_DEFAULT : (float)sp->scale;
    if (isnan(sp->softcap))
        sp->softcap = fai_rng_range(g, 0, 99) < 20 ? (double)PICK(g, 1, 2, 5, 20, 50) * 0.5 : 0.0;
    if (ANY(sp->alibi)) sp->alibi = fai_rng_range(g, 0, 99) < 20;
    if (ANY(sp->sinks)) sp->sinks = fai_rng_range(g, 0, 99) < 25;
    pb->softcap = (float)sp->softcap;
    pb->alibi = sp->alibi != 0;
    pb->sinks = sp->sinks != 0;
    if (pb->alibi || pb->sinks) {
        c->alibi_slopes = calloc((size_t)Hq, sizeof(float));
        c->sinks = calloc((size_t)Hq, sizeof(float));
        if (!c->alibi_slopes || !c->sinks) return build_fail(c, "out of memory");
        /* the standard slopes mostly, else any (negative too: the bias then grows) */
        const int standard = fai_rng_range(g, 0, 99) < 60;
        if (standard) fai_alibi_slopes(Hq, c->alibi_slopes);
        for (int64_t h = 0; h < Hq; h++) {
            if (!standard) c->alibi_slopes[h] = (float)(fai_rng_uniform(g) * 1.2 - 0.2);
            /* sink logits around the scores' own range, now and then none (-inf) or dominant */
            const int64_t p = fai_rng_range(g, 0, 99);
            c->sinks[h] = p < 10   ? -INFINITY
                          : p < 15 ? (float)(8.0 + 8.0 * fai_rng_uniform(g))
                                   : (float)uniform_pm(g, 3.0);
        }
    }
    c->tensors.alibi_slopes = pb->alibi ? c->alibi_slopes : NULL;
    c->tensors.sinks = pb->sinks ? c->sinks : NULL;
    return 0;
}

/* The execution knobs (workers, threads, split, tiles), and whether LSE is asked for. */
static int draw_execution(case_draft *draft) {
    fai_rng *g = &draft->rng;
    fai_case_spec *sp = &draft->sp;
    fai_problem *pb = &draft->c->problem;
    if (ANY(sp->workers)) {
        const int64_t p = fai_rng_range(g, 0, 99);
        sp->workers = p < 25   ? 0
                      : p < 75 ? fai_rng_range(g, 1, 8)
                      : p < 95 ? fai_rng_range(g, 9, 64)
                               : FAI_MAX_WORKERS;
    }
    if (ANY(sp->threads))
        sp->threads = fai_rng_range(g, 0, 99) < 5 ? PICK(g, 3, 8) : PICK(g, 0, 0, 1, 1, 2, 2);
    if (ANY(sp->split)) {
        const int64_t p = fai_rng_range(g, 0, 99);
        sp->split = p < 70 ? FAI_SPLIT_AUTO : p < 85 ? FAI_SPLIT_UNITS : FAI_SPLIT_GREEDY;
    }
    if (ANY(sp->tile_q)) sp->tile_q = draw_tile(g, 0);
    if (ANY(sp->tile_kv)) sp->tile_kv = draw_tile(g, 1);
    if (ANY(sp->lse)) sp->lse = fai_rng_range(g, 0, 99) < 85;
    pb->workers = sp->workers;
    pb->threads = sp->threads;
    pb->split = (fai_split)sp->split;
    pb->tile_q = sp->tile_q;
    pb->tile_kv = sp->tile_kv;
    /* from the seed itself, so that adding this draw left every other one as it was */
    if (ANY(sp->pipeline_tiles)) {
        uint64_t z = (draft->c->seed + 0x2545F4914F6CDD1Dull) * 0x9E3779B97F4A7C15ull;
        z ^= z >> 29;
        sp->pipeline_tiles = (int64_t)(z % 3);
    }
    pb->pipeline_tiles = (int)sp->pipeline_tiles;
    return 0;
}

/* Q, K, V and O, each in a layout of its own (or the spec's), allocated with slack and filled
 * with garbage. */
static int alloc_qkvo(case_draft *draft) {
    fai_rng *g = &draft->rng;
    const fai_case_spec *sp = &draft->sp;
    fai_case *c = draft->c;
    const fai_problem *pb = &c->problem;
    fai_tensors *t = &c->tensors;
    const int lay_any = ANY(sp->layout);
    c->layout_q = (int)(lay_any ? fai_rng_range(g, 0, 3) : sp->layout);
    c->layout_k = (int)(lay_any ? fai_rng_range(g, 0, 3) : sp->layout);
    c->layout_v = (int)(lay_any ? fai_rng_range(g, 0, 3) : sp->layout);
    c->layout_o = (int)(lay_any ? fai_rng_range(g, 0, 3) : sp->layout);
    /* the batch stride of a packed tensor is ignored: give it a small odd value, with slack so a
     * library that used it would read garbage rather than crash */
    const int64_t B = sp->batch;
    draft->q_nb = draft->packed_q ? 1 : B;
    draft->kv_nb = draft->paged ? draft->num_pages : draft->packed_kv ? 1 : B;
    draft->kv_ns = draft->paged ? draft->page_size : pb->seq_kv;
    draft->slack = 8 * (B + 1);
    const int64_t Hq = sp->heads_q, Hkv = sp->heads_kv, D = sp->head_dim, Dv = sp->head_dim_v;
    struct {
        fai_tensor *t;
        int layout;
        fai_dtype dt;
        int64_t nb, ns, nh, nd;
        int packed;
    } ts[4] = {
        {&t->q, c->layout_q, pb->q_dtype, draft->q_nb, pb->seq_q, Hq, D, draft->packed_q},
        {&t->k, c->layout_k, pb->k_dtype, draft->kv_nb, draft->kv_ns, Hkv, D, draft->packed_kv},
        {&t->v, c->layout_v, pb->v_dtype, draft->kv_nb, draft->kv_ns, Hkv, Dv, draft->packed_kv},
        {&t->o, c->layout_o, pb->o_dtype, draft->q_nb, pb->seq_q, Hq, Dv, draft->packed_q},
    };
    for (int i = 0; i < 4; i++) {
        int64_t ext = lay_out(ts[i].t, ts[i].layout, ts[i].nb, ts[i].ns, ts[i].nh, ts[i].nd, g);
        if (ts[i].packed) {
            ts[i].t->stride_batch = PICK(g, 0, 1, 7);
            ext += draft->slack;
        }
        ts[i].t->dtype = ts[i].dt;
        if (alloc_buf(c, i, ext, fai_dtype_size(ts[i].dt))) return build_fail(c, "out of memory");
        ts[i].t->data = c->buf[i];
        fill_garbage(c->buf[i], ts[i].dt, c->bytes[i], g);
    }
    return 0;
}

/* The scales of a quantized K and V (per token, per kv head or per tensor), garbage until the
 * values are drawn (draw_scale). */
static int alloc_kv_scales(case_draft *draft) {
    fai_rng *gq = &draft->quant_rng;
    fai_case *c = draft->c;
    fai_tensors *t = &c->tensors;
    const int64_t Hkv = draft->sp.heads_kv;
    for (int i = 0; i < 2; i++) {
        const fai_tensor *kv = i == 0 ? &t->k : &t->v;
        fai_scale *scale = i == 0 ? &t->k_scale : &t->v_scale;
        const int kind = i == 0 ? c->k_scale_kind : c->v_scale_kind;
        if (!fai_dtype_is_quantized(kv->dtype)) continue;
        fai_tensor rows = {0};
        int64_t ext = Hkv;
        if (kind == FAI_CASE_SCALE_TOKEN) {
            ext = lay_out(&rows, (int)fai_rng_range(gq, 0, 3), draft->kv_nb, draft->kv_ns, Hkv, 1,
                          gq);
            if (draft->packed_kv) {
                rows.stride_batch = PICK(gq, 0, 1, 7);
                ext += draft->slack;
            }
        } else if (kind == FAI_CASE_SCALE_HEAD) {
            rows.stride_head = 1;
        } else {
            ext = 1;
        }
        const int idx = i == 0 ? BUF_K_SCALE : BUF_V_SCALE;
        if (alloc_buf(c, idx, ext, sizeof(float))) return build_fail(c, "out of memory");
        fill_garbage(c->buf[idx], FAI_DTYPE_F32, c->bytes[idx], gq);
        scale->data = c->buf[idx];
        scale->stride_batch = rows.stride_batch;
        scale->stride_seq = rows.stride_seq;
        scale->stride_head = rows.stride_head;
    }
    /* a third of the quantized keys also have per-channel scales: [Hkv, D] (now and then with
     * a gap between heads), or one set for every head; powers of two from 1/4 to 4 and values
     * between them, so Q times them is and is not exact */
    if (fai_dtype_is_quantized(t->k.dtype) && fai_rng_range(gq, 0, 2) == 0) {
        const int64_t D = draft->sp.head_dim;
        const int shared = fai_rng_range(gq, 0, 3) == 0;
        const int64_t stride = shared ? 0 : D + PICK(gq, 0, 0, 3);
        const int64_t ext = shared ? D : (Hkv - 1) * stride + D;
        if (alloc_buf(c, BUF_K_CHANNEL_SCALE, ext, sizeof(float)))
            return build_fail(c, "out of memory");
        float *channels = c->buf[BUF_K_CHANNEL_SCALE];
        for (int64_t i = 0; i < ext; i++)
            channels[i] = fai_rng_range(gq, 0, 1) ? ldexpf(1.0f, (int)fai_rng_range(gq, -2, 2))
                                                  : 0.25f + 3.75f * (float)fai_rng_uniform(gq);
        c->problem.k_channel_scales = 1;
        t->k_channel_scale.data = channels;
        t->k_channel_scale.stride_head = stride;
    }
    return 0;
}

/* LSE when asked for: [B, Hq, Sq] or [B, Sq, Hq], maybe with gaps, filled with garbage. */
static int alloc_lse(case_draft *draft) {
    if (!draft->sp.lse) return 0;
    fai_rng *g = &draft->rng;
    fai_case *c = draft->c;
    const fai_problem *pb = &c->problem;
    const int64_t Hq = draft->sp.heads_q;
    c->lse_layout = (int)fai_rng_range(g, 0, 1);
    const int64_t pad = fai_rng_range(g, 0, 1) ? fai_rng_range(g, 1, 3) : 0;
    fai_tensor *l = &c->tensors.lse;
    l->dtype = FAI_DTYPE_F32;
    if (c->lse_layout == 0) {
        l->stride_seq = 1;
        l->stride_head = pb->seq_q + pad;
        l->stride_batch = Hq * l->stride_head + pad;
    } else {
        l->stride_head = 1;
        l->stride_seq = Hq + pad;
        l->stride_batch = pb->seq_q * l->stride_seq + pad;
    }
    int64_t ext = (draft->q_nb > 0 && pb->seq_q > 0)
                      ? (draft->q_nb - 1) * l->stride_batch + (pb->seq_q - 1) * l->stride_seq +
                            (Hq - 1) * l->stride_head + 1
                      : 0;
    if (draft->packed_q) {
        l->stride_batch = PICK(g, 0, 1, 7);
        ext += draft->slack;
    }
    if (alloc_buf(c, BUF_LSE, ext, 4)) return build_fail(c, "out of memory");
    l->data = c->buf[BUF_LSE];
    fill_garbage(c->buf[BUF_LSE], FAI_DTYPE_F32, c->bytes[BUF_LSE], g);
    return 0;
}

/* The block table of paged K/V: the pages shuffled, the entries past each sequence's pages
 * pointing at garbage pages or outside the pool (never read). */
static int build_block_table(case_draft *draft) {
    if (!draft->paged) return 0;
    fai_rng *g = &draft->rng;
    fai_case *c = draft->c;
    const int64_t B = draft->sp.batch, num_pages = draft->num_pages, bt_stride = draft->bt_stride;
    c->block_table = malloc(((size_t)(B > 0 ? B : 1) * (size_t)bt_stride + 1) * sizeof(int32_t));
    int32_t *perm = malloc((size_t)num_pages * sizeof(int32_t));
    if (!c->block_table || !perm) {
        free(perm);
        return build_fail(c, "out of memory");
    }
    for (int64_t p = 0; p < num_pages; p++)
        perm[p] = (int32_t)p;
    for (int64_t p = num_pages - 1; p > 0; p--) {
        const int64_t q = fai_rng_range(g, 0, p);
        const int32_t tmp = perm[p];
        perm[p] = perm[q];
        perm[q] = tmp;
    }
    int64_t next = 0;
    for (int64_t b = 0; b < B; b++) {
        const int64_t used = (c->len_kv[b] + draft->page_size - 1) / draft->page_size;
        for (int64_t p = 0; p < bt_stride; p++) {
            int32_t page;
            /* entries past the length are never read: a page of garbage, or out of the pool
             * altogether */
            const int64_t kind = fai_rng_range(g, 0, 3);
            if (p < used)
                page = perm[next++];
            else if (kind == 0)
                page = -1;
            else if (kind == 1)
                page = INT32_MAX;
            else if (next < num_pages) /* an unreferenced page, full of garbage */
                page = perm[fai_rng_range(g, next, num_pages - 1)];
            else
                page = (int32_t)fai_rng_range(g, 0, num_pages - 1);
            c->block_table[b * bt_stride + p] = page;
        }
    }
    free(perm);
    c->tensors.block_table = c->block_table;
    c->tensors.block_table_stride =
        bt_stride == draft->pages_per_seq && fai_rng_range(g, 0, 1) ? 0 : bt_stride;
    return 0;
}

/* Random values at the positions the library may read, and only there (the rest stays
 * garbage): Q and K in [-amp, amp], V in [-1, 1], a quantized K or V divided by its scales. */
static int fill_values(case_draft *draft) {
    fai_rng *g = &draft->rng, *gq = &draft->quant_rng;
    fai_case *c = draft->c;
    fai_tensors *t = &c->tensors;
    const double amp = draft->sp.amplitude;
    const int64_t B = draft->sp.batch, Hq = draft->sp.heads_q, Hkv = draft->sp.heads_kv;
    const int64_t D = draft->sp.head_dim, Dv = draft->sp.head_dim_v;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t i = 0; i < c->len_q[b]; i++) {
            const int64_t qb = draft->packed_q ? 0 : b, qs = draft->packed_q ? c->cu_q[b] + i : i;
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t d = 0; d < D; d++)
                    fai_case_set(&t->q, qb, qs, h, d, uniform_pm(g, amp));
        }
        for (int64_t j = 0; j < c->len_kv[b]; j++) {
            int64_t kb = b, ks = j;
            if (draft->packed_kv) {
                kb = 0;
                ks = c->cu_kv[b] + j;
            } else if (draft->paged) {
                kb = c->block_table[b * draft->bt_stride + j / draft->page_size];
                ks = j % draft->page_size;
            }
            for (int64_t h = 0; h < Hkv; h++) {
                const double k_scale = draw_scale(&t->k, &t->k_scale, kb, ks, h, amp, gq);
                const double v_scale = draw_scale(&t->v, &t->v_scale, kb, ks, h, 1.0, gq);
                for (int64_t d = 0; d < D; d++)
                    fai_case_set(&t->k, kb, ks, h, d, uniform_pm(g, amp) / k_scale);
                for (int64_t d = 0; d < Dv; d++)
                    fai_case_set(&t->v, kb, ks, h, d, uniform_pm(g, 1.0) / v_scale);
            }
        }
    }
    return 0;
}

/* The explicit mask: strides by its shape (FAI_CASE_MASK_*), garbage everywhere, then inside
 * each sequence's lengths entries masked at the drawn density (now and then a whole row). */
static int build_mask(case_draft *draft) {
    fai_case *c = draft->c;
    const fai_problem *pb = &c->problem;
    if (pb->mask_kind == FAI_MASK_NONE) return 0;
    fai_rng *g = &draft->rng;
    const int64_t B = draft->sp.batch, Hq = draft->sp.heads_q;
    const int add = pb->mask_kind == FAI_MASK_ADD;
    const int bits = pb->mask_kind == FAI_MASK_KEEP_BITS;
    const int64_t rows = draft->packed_q ? draft->max_lq : pb->seq_q;
    const int64_t cols = draft->paged || draft->packed_kv ? draft->max_lk : pb->seq_kv;
    const int64_t mrows = rows > 0 ? rows : 1, mcols = cols > 0 ? cols : 1;
    c->mask_rows = mrows;
    c->mask_cols = mcols;
    const int per_b = c->mask_shape == FAI_CASE_MASK_B_SQ_SKV ||
                      c->mask_shape == FAI_CASE_MASK_B_H_SQ_SKV ||
                      c->mask_shape == FAI_CASE_MASK_B_SKV;
    const int per_h =
        c->mask_shape == FAI_CASE_MASK_B_H_SQ_SKV || c->mask_shape == FAI_CASE_MASK_H_SQ_SKV;
    /* a key-padding mask [B, Skv] is one row per sequence, read by every query */
    const int key_rows = c->mask_shape == FAI_CASE_MASK_B_SKV;
    const int64_t rows_stored = key_rows ? 1 : mrows;
    fai_mask *m = &c->tensors.mask;
    /* bytes or elements of a row: a bit mask's whole bytes (the bits past the keys are garbage) */
    const int64_t row_need = bits ? (mcols + 7) / 8 : mcols;
    const int64_t row_len = row_need + (fai_rng_range(g, 0, 1) ? fai_rng_range(g, 1, 5) : 0);
    m->stride_q = key_rows ? 0 : row_len;
    const int64_t plane = rows_stored * row_len + fai_rng_range(g, 0, 3);
    m->stride_head = per_h ? plane : 0;
    m->stride_batch = per_b ? (per_h ? Hq * plane : plane) + fai_rng_range(g, 0, 3) : 0;
    const int64_t nbm = per_b ? (B > 0 ? B : 1) : 1, nhm = per_h ? Hq : 1;
    const int64_t ext = (nbm - 1) * m->stride_batch + (nhm - 1) * m->stride_head +
                        (rows_stored - 1) * m->stride_q + row_need;
    if (alloc_buf(c, BUF_MASK, ext, add ? 4 : 1)) return build_fail(c, "out of memory");
    unsigned char *mb = c->buf[BUF_MASK];
    if (add)
        fill_garbage(mb, FAI_DTYPE_F32, c->bytes[BUF_MASK], g);
    else
        for (size_t i = 0; i < c->bytes[BUF_MASK]; i++)
            mb[i] = (unsigned char)fai_rng_next(g);
    const int64_t density = draft->sp.mask_density;
    for (int64_t bm = 0; bm < nbm; bm++)
        for (int64_t hm = 0; hm < nhm; hm++)
            for (int64_t i = 0; i < rows_stored; i++) {
                const int64_t lq = per_b && B > 0 && !key_rows ? c->len_q[bm] : rows_stored;
                const int64_t lk = per_b && B > 0 ? c->len_kv[bm] : mcols;
                if (i >= lq) continue; /* stays garbage */
                const int row_masked = density > 0 && !key_rows && fai_rng_range(g, 0, 99) < 4;
                for (int64_t j = 0; j < lk; j++) {
                    const int64_t off =
                        bm * m->stride_batch + hm * m->stride_head + i * m->stride_q + j;
                    const int masked = row_masked || fai_rng_range(g, 0, 99) < density;
                    if (add) {
                        const float v = masked ? -INFINITY : (float)uniform_pm(g, 3.0);
                        memcpy(mb + off * 4, &v, 4);
                    } else if (bits) {
                        unsigned char *byte = mb + off - j + j / 8;
                        const unsigned char bit = (unsigned char)(1u << (j % 8));
                        *byte =
                            masked ? (unsigned char)(*byte & ~bit) : (unsigned char)(*byte | bit);
                    } else {
                        const unsigned char nz = (unsigned char)fai_rng_range(g, 1, 255);
                        const int keep = !masked;
                        mb[off] =
                            pb->mask_kind == FAI_MASK_KEEP ? (keep ? nz : 0) : (keep ? 0 : nz);
                    }
                }
            }
    m->data = mb;
    return 0;
}

/* The workspace pointer, misaligned now and then; and the inputs' contents, saved to tell a run
 * that writes to them. */
static int finish_buffers(case_draft *draft) {
    fai_case *c = draft->c;
    const int64_t p = fai_rng_range(&draft->rng, 0, 99);
    c->workspace_offset = p < 70 ? 0 : p < 90 ? 16 : 4;
    for (int i = 0; i < BUF_COUNT; i++)
        if (c->buf[i]) memcpy(c->init[i], c->buf[i], c->bytes[i]);
    return 0;
}

/* c->desc: every parameter of the case on one line, so that a failure can be read and rebuilt. */
static void describe_case(const case_draft *draft) {
    fai_case *c = draft->c;
    const fai_problem *pb = &c->problem;
    const fai_case_spec *sp = &draft->sp;
    const int64_t B = sp->batch;
    char lq_desc[48], lk_desc[128];
    if (draft->packed_q && draft->extra_rows)
        snprintf(lq_desc, sizeof lq_desc, "packed+%lld", (long long)draft->extra_rows);
    else
        snprintf(lq_desc, sizeof lq_desc, "%s", lens_name(c->q_lens));
    if (draft->paged)
        snprintf(lk_desc, sizeof lk_desc, "paged=%lld(pages=%lld,pps=%lld%s)",
                 (long long)draft->page_size, (long long)draft->num_pages,
                 (long long)draft->pages_per_seq, draft->zero_seq_kv ? ",skv=0" : "");
    else
        snprintf(lk_desc, sizeof lk_desc, "%s", lens_name(c->kv_lens));
    char lens_desc[160] = "";
    if (c->q_lens != FAI_CASE_LEN_FULL || c->kv_lens != FAI_CASE_LEN_FULL) {
        size_t n = 0;
        for (int64_t b = 0; b < B && b < 8 && n + 24 < sizeof lens_desc; b++)
            n += (size_t)snprintf(lens_desc + n, sizeof lens_desc - n, "%s%lld/%lld",
                                  b ? "," : " lens=", (long long)c->len_q[b],
                                  (long long)c->len_kv[b]);
        if (B > 8) snprintf(lens_desc + n, sizeof lens_desc - n, ",...");
    }
    char scale_desc[32] = "default"; /* FAI_SCALE_DEFAULT is the only NaN a case holds */
    if (!isnan(pb->scale)) snprintf(scale_desc, sizeof scale_desc, "%g", (double)pb->scale);
    char mask_desc[48];
    if (pb->mask_kind == FAI_MASK_NONE)
        snprintf(mask_desc, sizeof mask_desc, "none");
    else
        snprintf(mask_desc, sizeof mask_desc, "%s%s%lld%%", mask_name(pb->mask_kind),
                 mask_shape_name(c->mask_shape), (long long)sp->mask_density);
    char mods_desc[64] = "";
    if (pb->softcap > 0.0f || pb->alibi || pb->sinks)
        snprintf(mods_desc, sizeof mods_desc, " mods=softcap:%g%s%s", (double)pb->softcap,
                 pb->alibi ? ",alibi" : "", pb->sinks ? ",sinks" : "");
    snprintf(
        c->desc, sizeof c->desc,
        "seed=%llu B=%lld Hq=%lld Hkv=%lld Sq=%lld Skv=%lld D=%lld Dv=%lld q=%s k=%s%s v=%s "
        "o=%s causal=%s%s window=%lld,%lld mask=%s%s lens_q=%s lens_kv=%s%s scale=%s amp=%g "
        "layout=%d%d%d%d lse=%d workers=%lld threads=%lld split=%s tiles=%lld,%lld pipeline=%d "
        "ws+%zu",
        (unsigned long long)c->seed, (long long)B, (long long)sp->heads_q, (long long)sp->heads_kv,
        (long long)sp->seq_q, (long long)sp->seq_kv, (long long)sp->head_dim,
        (long long)pb->head_dim_v, fai_dtype_name(pb->q_dtype), fai_dtype_name(pb->k_dtype),
        pb->k_channel_scales ? "+channels" : "", fai_dtype_name(pb->v_dtype),
        fai_dtype_name(pb->o_dtype), causal_name(pb->causal), pb->q_positions ? " positions" : "",
        (long long)pb->window_left, (long long)pb->window_right, mask_desc, mods_desc, lq_desc,
        lk_desc, lens_desc, scale_desc, sp->amplitude, c->layout_q, c->layout_k, c->layout_v,
        c->layout_o, sp->lse ? 1 + c->lse_layout : 0, (long long)pb->workers,
        (long long)pb->threads, split_name(pb->split), (long long)pb->tile_q,
        (long long)pb->tile_kv, pb->pipeline_tiles, c->workspace_offset);
}

int fai_case_build(fai_case *c, const fai_case_spec *spec, uint64_t seed) {
    memset(c, 0, sizeof *c);
    c->seed = seed;
    fai_problem_init(&c->problem);
    case_draft draft = {.c = c, .given = spec, .sp = *spec};
    draft.rng.state = seed ^ 0x5DEECE66Dull;
    draft.quant_rng.state = seed ^ 0x9E3779B97F4A7C15ull;
    fai_rng_next(&draft.rng);
    fai_rng_next(&draft.quant_rng);
    /* the order of the draws: a seed's case is the same only while it stays the same */
    static int (*const steps[])(case_draft *) = {
        draw_dtypes,  draw_length_modes, draw_shape,     draw_seq_lengths, give_lengths,
        draw_masking, draw_scores,       draw_execution, alloc_qkvo,       alloc_kv_scales,
        alloc_lse,    build_block_table, fill_values,    build_mask,       finish_buffers,
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        if (steps[i](&draft)) return -1;
    describe_case(&draft);
    return 0;
}

void fai_case_reset(fai_case *c) {
    for (int i = 0; i < BUF_COUNT; i++) {
        if (!c->buf[i]) continue;
        if (i == BUF_O || i == BUF_LSE)
            memcpy(c->buf[i], c->init[i], c->bytes[i]);
        else
            memcpy(c->init[i], c->buf[i], c->bytes[i]);
    }
}

void fai_case_free(fai_case *c) {
    for (int i = 0; i < BUF_COUNT; i++) {
        free(c->buf[i]);
        free(c->init[i]);
    }
    free(c->len_q);
    free(c->len_kv);
    free(c->seqlens_q);
    free(c->seqlens_kv);
    free(c->cu_q);
    free(c->cu_kv);
    free(c->block_table);
    free(c->q_pos);
    free(c->kv_pos);
    free(c->alibi_slopes);
    free(c->sinks);
    memset(c, 0, sizeof *c);
}

/* -- checking ------------------------------------------------------------------------------- */

double fai_case_tolerance(fai_dtype q, fai_dtype k, fai_dtype v, fai_dtype o) {
    const int all_f32 = q == FAI_DTYPE_F32 && k == FAI_DTYPE_F32 && v == FAI_DTYPE_F32;
    double tol = all_f32 ? 0.0 : 0x1.0p-14;
    if (o == FAI_DTYPE_F16) tol += 0x1.0p-11;
    if (o == FAI_DTYPE_BF16) tol += 0x1.0p-8;
    return tol;
}

double fai_case_row_tolerance(const fai_oracle_out *ref, size_t row, double t) {
    /* the logits' rounding grows with their magnitude, the sums' with the keys they add */
    return t + FAI_CASE_ROUNDING * FAI_CASE_EPS_F32 *
                   (ref->logit_mag[row] + sqrt((double)ref->keys[row]));
}

double fai_case_o_limit(const fai_oracle_out *ref, size_t row, int64_t d, double t) {
    return fai_case_row_tolerance(ref, row, t) *
           fmax(1.0, ref->o_mag[row * (size_t)ref->head_dim_v + (size_t)d]);
}

double fai_case_lse_limit(const fai_oracle_out *ref, size_t row, double lse, double t) {
    return fai_case_row_tolerance(ref, row, t) * fmax(1.0, fabs(lse));
}

int fai_case_combo(fai_dtype q, fai_dtype k, fai_dtype v, fai_dtype o) {
    return (int)q + 3 * (int)k + 18 * (int)v + 108 * (int)o;
}

const char *fai_case_combo_name(int combo, char *buf, size_t size) {
    snprintf(buf, size, "q=%s k=%s v=%s o=%s", fai_dtype_name((fai_dtype)(combo % 3)),
             fai_dtype_name((fai_dtype)(combo / 3 % 6)),
             fai_dtype_name((fai_dtype)(combo / 18 % 6)),
             fai_dtype_name((fai_dtype)(combo / 108 % 3)));
    return buf;
}

/* Records a failure (the first reason is kept). A failed case has an infinite error ratio until
 * the comparison, if it gets that far, says how far off the values were. */
static void why(fai_case_result *r, const char *fmt, ...) {
    r->ok = 0;
    r->max_ratio = INFINITY;
    if (r->why[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
}

static const char *state_name(int state) {
    return state == FAI_ORACLE_ROW_MASKED ? "fully masked row" : "row past the length";
}

/* Zeroes, in a copy of the buffer after the run and in its initial contents, every logical
 * element, then compares what is left: any difference is a write outside the elements. */
static int64_t stray_write(const fai_case *c, int idx, const fai_tensor *t, int64_t groups,
                           int64_t rows, int64_t heads, int64_t dim, int packed) {
    const size_t es = idx == BUF_LSE ? 4 : fai_dtype_size(t->dtype);
    unsigned char *after = malloc(c->bytes[idx]);
    unsigned char *before = malloc(c->bytes[idx]);
    if (!after || !before) {
        free(after);
        free(before);
        return -2;
    }
    memcpy(after, c->buf[idx], c->bytes[idx]);
    memcpy(before, c->init[idx], c->bytes[idx]);
    for (int64_t g = 0; g < groups; g++)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t h = 0; h < heads; h++) {
                const int64_t off =
                    (packed ? 0 : g * t->stride_batch) + r * t->stride_seq + h * t->stride_head;
                memset(after + (size_t)off * es, 0, (size_t)dim * es);
                memset(before + (size_t)off * es, 0, (size_t)dim * es);
            }
    int64_t first = -1;
    for (size_t i = 0; i < c->bytes[idx]; i++)
        if (after[i] != before[i]) {
            first = (int64_t)(i / es);
            break;
        }
    free(after);
    free(before);
    return first;
}

int fai_case_check(fai_case *c, fai_pool *pool, fai_case_result *r) {
    const fai_problem *pb = &c->problem;
    memset(r, 0, sizeof *r);
    r->ok = 1;
    r->plan_visible_pairs = -1;
    snprintf(r->desc, sizeof r->desc, "%s", c->desc);
    r->combo = fai_case_combo(pb->q_dtype, pb->k_dtype, pb->v_dtype, pb->o_dtype);
    /* the dtypes' terms; each row adds its own (fai_case_row_tolerance) */
    const double t = fai_case_tolerance(pb->q_dtype, pb->k_dtype, pb->v_dtype, pb->o_dtype);
    const double t_lse = fai_case_tolerance(pb->q_dtype, pb->k_dtype, pb->v_dtype, FAI_DTYPE_F32);
    double ratio_o = 0.0, ratio_lse = 0.0;
    r->tol = t + FAI_CASE_ROUNDING * FAI_CASE_EPS_F32;
    r->tol_lse = t_lse + FAI_CASE_ROUNDING * FAI_CASE_EPS_F32;

    fai_plan *plan = NULL;
    r->status = fai_plan_create(pb, &plan);
    if (r->status != FAI_OK) {
        why(r, "fai_plan_create: %s: %s", fai_status_string(r->status), fai_last_error());
        return 0;
    }
    if (pool) fai_plan_set_pool(plan, pool);
    /* the plan copies the length arrays: scribble over them until the oracle needs them */
    const int64_t nb = pb->batch;
    int32_t *saved = malloc((size_t)(4 * nb + 2) * sizeof(int32_t) + 1);
    if (saved) {
        memcpy(saved, c->seqlens_q, (size_t)nb * sizeof(int32_t));
        memcpy(saved + nb, c->seqlens_kv, (size_t)nb * sizeof(int32_t));
        memcpy(saved + 2 * nb, c->cu_q, (size_t)(nb + 1) * sizeof(int32_t));
        memcpy(saved + 3 * nb + 1, c->cu_kv, (size_t)(nb + 1) * sizeof(int32_t));
        for (int64_t b = 0; b < nb; b++)
            c->seqlens_q[b] = c->seqlens_kv[b] = -7;
        for (int64_t b = 0; b <= nb; b++)
            c->cu_q[b] = c->cu_kv[b] = INT32_MAX - (int32_t)b;
    }
    int32_t *saved_pos = c->q_pos ? malloc((size_t)(2 * nb + 1) * sizeof(int32_t)) : NULL;
    if (saved_pos) {
        memcpy(saved_pos, c->q_pos, (size_t)nb * sizeof(int32_t));
        memcpy(saved_pos + nb, c->kv_pos, (size_t)nb * sizeof(int32_t));
        for (int64_t b = 0; b < nb; b++)
            c->q_pos[b] = c->kv_pos[b] = INT32_MIN + (int32_t)b;
    }
    fai_plan_info info;
    if (fai_plan_get_info(plan, &info) == FAI_OK) r->plan_visible_pairs = info.visible_pairs;
    const size_t ws_size = fai_plan_workspace_size(plan);
    const size_t alloc = (ws_size + c->workspace_offset + 64 + 63) / 64 * 64;
    unsigned char *ws_raw = aligned_alloc(64, alloc);
    if (!ws_raw) {
        fai_plan_free(plan);
        why(r, "workspace of %zu bytes: out of memory", ws_size);
        return 0;
    }
    memset(ws_raw, 0xFF, alloc); /* NaN floats for any scratch read before it is written */
    r->status = fai_run(plan, &c->tensors, ws_raw + c->workspace_offset, ws_size);
    free(ws_raw);
    fai_plan_free(plan);
    if (saved) {
        memcpy(c->seqlens_q, saved, (size_t)nb * sizeof(int32_t));
        memcpy(c->seqlens_kv, saved + nb, (size_t)nb * sizeof(int32_t));
        memcpy(c->cu_q, saved + 2 * nb, (size_t)(nb + 1) * sizeof(int32_t));
        memcpy(c->cu_kv, saved + 3 * nb + 1, (size_t)(nb + 1) * sizeof(int32_t));
        free(saved);
    }
    if (saved_pos) {
        memcpy(c->q_pos, saved_pos, (size_t)nb * sizeof(int32_t));
        memcpy(c->kv_pos, saved_pos + nb, (size_t)nb * sizeof(int32_t));
        free(saved_pos);
    }
    if (r->status != FAI_OK) {
        why(r, "fai_run: %s: %s", fai_status_string(r->status), fai_last_error());
        return 0;
    }

    fai_oracle_out ref;
    char err[256];
    const fai_status ost = fai_oracle_run(pb, &c->tensors, &ref, err, sizeof err);
    if (ost != FAI_OK) {
        why(r, "oracle: %s: %s", fai_status_string(ost), err);
        return 0;
    }
    r->visible_pairs = ref.visible_pairs;

    /* -- O -- */
    const fai_tensor *o = &c->tensors.o;
    const int packed_q = pb->cu_seqlens_q != NULL;
    const int64_t Hq = pb->heads_q, Dv = ref.head_dim_v;
    for (int64_t g = 0; g < ref.groups; g++)
        for (int64_t row = 0; row < ref.rows; row++)
            for (int64_t h = 0; h < Hq; h++) {
                const size_t ri = (size_t)((g * ref.rows + row) * Hq + h);
                const int state = ref.row_state[ri];
                const int64_t base =
                    (packed_q ? 0 : g * o->stride_batch) + row * o->stride_seq + h * o->stride_head;
                for (int64_t d = 0; d < Dv; d++) {
                    const double x = fai_oracle_load(o->data, o->dtype, base + d);
                    const double want = ref.o[ri * (size_t)Dv + (size_t)d];
                    if (isnan(x)) {
                        why(r, "O[b=%lld row=%lld h=%lld d=%lld] is NaN (%s)", (long long)g,
                            (long long)row, (long long)h, (long long)d,
                            state == FAI_ORACLE_ROW_VALID ? "valid row" : state_name(state));
                        r->max_err = INFINITY;
                        continue;
                    }
                    if (state != FAI_ORACLE_ROW_VALID) {
                        if (x != 0.0) {
                            why(r, "O[b=%lld row=%lld h=%lld d=%lld] = %g in a %s, expected 0",
                                (long long)g, (long long)row, (long long)h, (long long)d, x,
                                state_name(state));
                            r->max_err = INFINITY;
                        }
                        continue;
                    }
                    const double e =
                        fabs(x - want) / fmax(1.0, ref.o_mag[ri * (size_t)Dv + (size_t)d]);
                    const double tol = fai_case_row_tolerance(&ref, ri, t);
                    if (e > r->max_err || isnan(e)) r->max_err = isnan(e) ? INFINITY : e;
                    if (!(e / tol <= ratio_o)) ratio_o = e / tol, r->tol = tol;
                    if (!(e <= tol))
                        why(r,
                            "O[b=%lld row=%lld h=%lld d=%lld] = %.9g, reference %.9g (err %.3g > "
                            "tol %.3g)",
                            (long long)g, (long long)row, (long long)h, (long long)d, x, want, e,
                            tol);
                }
            }

    /* -- LSE -- */
    const fai_tensor *l = &c->tensors.lse;
    if (l->data) {
        for (int64_t g = 0; g < ref.groups; g++)
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t row = 0; row < ref.rows; row++) {
                    const double want = ref.lse[(g * Hq + h) * ref.rows + row];
                    const int64_t off = (packed_q ? 0 : g * l->stride_batch) + h * l->stride_head +
                                        row * l->stride_seq;
                    float f;
                    memcpy(&f, (const char *)l->data + off * 4, 4);
                    const double x = f;
                    const int state = ref.row_state[(size_t)((g * ref.rows + row) * Hq + h)];
                    if (want == -INFINITY) {
                        if (x != -INFINITY) {
                            why(r, "LSE[b=%lld h=%lld row=%lld] = %g in a %s, expected -inf",
                                (long long)g, (long long)h, (long long)row, x, state_name(state));
                            r->max_err_lse = INFINITY;
                        }
                        continue;
                    }
                    const double e = fabs(x - want) / fmax(1.0, fabs(want));
                    const double tol = fai_case_row_tolerance(
                        &ref, (size_t)((g * ref.rows + row) * Hq + h), t_lse);
                    if (!(e <= r->max_err_lse)) r->max_err_lse = isnan(e) ? INFINITY : e;
                    if (!(e / tol <= ratio_lse)) ratio_lse = e / tol, r->tol_lse = tol;
                    if (!(e <= tol))
                        why(r,
                            "LSE[b=%lld h=%lld row=%lld] = %.9g, reference %.9g (err %.3g > tol "
                            "%.3g)",
                            (long long)g, (long long)h, (long long)row, x, want, e, tol);
                }
    }

    /* -- nothing written outside O and LSE, inputs untouched -- */
    const int64_t o_groups = packed_q ? 1 : pb->batch;
    int64_t stray = stray_write(c, BUF_O, o, o_groups, pb->seq_q, Hq, Dv, packed_q);
    if (stray >= 0)
        why(r, "O buffer written outside its elements, at element %lld", (long long)stray);
    if (l->data) {
        stray = stray_write(c, BUF_LSE, l, o_groups, pb->seq_q, Hq, 1, packed_q);
        if (stray >= 0)
            why(r, "LSE buffer written outside its elements, at element %lld", (long long)stray);
    }
    static const char *names[BUF_COUNT] = {
        "Q", "K", "V", "O", "LSE", "mask", "k_scale", "v_scale", "k_channel_scale"};
    for (int i = 0; i < BUF_COUNT; i++) {
        if (i == BUF_O || i == BUF_LSE || !c->buf[i]) continue;
        if (memcmp(c->buf[i], c->init[i], c->bytes[i]))
            why(r, "input %s was modified by the run", names[i]);
    }

    r->max_ratio = fmax(ratio_o, ratio_lse);
    if (!r->ok && !(r->max_ratio > 1.0)) r->max_ratio = INFINITY; /* failed for another reason */
    fai_oracle_out_free(&ref);
    return r->ok;
}

int fai_case_run(const fai_case_spec *spec, uint64_t seed, fai_case_result *r) {
    fai_case c;
    if (fai_case_build(&c, spec, seed)) {
        memset(r, 0, sizeof *r);
        snprintf(r->why, sizeof r->why, "case build failed: %.400s", c.desc);
        snprintf(r->desc, sizeof r->desc, "seed=%llu", (unsigned long long)seed);
        r->max_ratio = INFINITY;
        fai_case_free(&c);
        return 0;
    }
    const int ok = fai_case_check(&c, NULL, r);
    fai_case_free(&c);
    return ok;
}

/* -- statistics ----------------------------------------------------------------------------- */

void fai_case_stats_init(fai_case_stats *s) { memset(s, 0, sizeof *s); }

void fai_case_stats_add(fai_case_stats *s, const fai_case_result *r) {
    s->cases++;
    if (r->ok)
        s->passed++;
    else
        s->failed++;
    if (!(r->max_ratio <= s->max_ratio)) s->max_ratio = r->max_ratio;
    const int k = r->combo;
    if (k < 0 || k >= FAI_CASE_COMBOS) return;
    s->combo_cases[k]++;
    if (!r->ok) s->combo_failed[k]++;
    if (!(r->max_err <= s->combo_err[k])) s->combo_err[k] = r->max_err;
    if (!(r->max_err_lse <= s->combo_lse[k])) s->combo_lse[k] = r->max_err_lse;
    if (!(r->max_ratio <= s->combo_ratio[k])) s->combo_ratio[k] = r->max_ratio;
    s->combo_tol[k] = r->tol;
}
