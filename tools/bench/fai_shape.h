/* Shapes for `fai plan`, `fai demo` and `fai bench`: a benchmark shape by name (P1 P2 D1 D2 C1,
 * and the model shapes with and without their score modifiers: O1 O1S O2 O2S G1 G1C) or the
 * shape flags, and random tensors that fill such a problem. */
#ifndef FAI_SHAPE_H
#define FAI_SHAPE_H

#include "fai.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ft_shape {
    char name[32];
    int64_t b, hq, hkv, sq, skv, d, dv;
    fai_causal causal;
    int64_t window_left, window_right;
    int64_t page_size; /* 0: dense KV */
    fai_dtype q_dtype, kv_dtype, out_dtype;
    int round_p_bf16; /* --round-p-bf16: fai_problem.round_p_bf16 */
    /* score modifiers: --softcap C, --alibi (the standard slopes), --sinks (a sink per head) */
    float softcap;
    int alibi, sinks;
    int head_major;         /* --head-major: pages [num_pages, Hkv, page_size, D] (vLLM's blocks) */
    int k_channel_scales;   /* --k-channel-scales: a quantized K's scales per kv head and channel */
    int64_t pipeline_tiles; /* --pipeline-tiles N: fai_problem.pipeline_tiles (0: auto) */
} ft_shape;

/* The benchmark shapes of the design, then the model shapes, in order; the first
 * ft_shape_default_count are what `fai bench` and `fai demo` run when no shape is named. */
extern const ft_shape ft_shape_table[];
extern const int ft_shape_count;
extern const int ft_shape_default_count;

/* The starting point of a shape given only by flags: one query, one key, D = Dv = 128, no mask. */
extern const ft_shape ft_shape_custom_base;

/* Consumes the shape options in argv (a shape name, --b --hq --hkv --sq --skv --d --dv,
 * --causal, --causal-top-left, --window L,R, --page-size N, --head-major, --round-p-bf16,
 * --k-channel-scales, --pipeline-tiles N, --q-dtype, --kv-dtype, --out-dtype) starting from *shape:
 * a shape name anywhere replaces *shape first, then the flags change it (--d also sets Dv unless
 * --dv is given). Options it does not know are left for the caller: used[i] is set for every
 * argument consumed. Returns 0, or -1 after printing one line to stderr. */
int ft_shape_parse(int argc, char **argv, char *used, ft_shape *shape, const char *cmd);

/* The one shape of a command's arguments: the named shape changed by the flags; without a name,
 * the flags on ft_shape_custom_base; with neither, P1. As ft_shape_parse otherwise. */
int ft_shape_from_args(int argc, char **argv, char *used, ft_shape *shape, const char *cmd);

/* Shape option help text. */
extern const char ft_shape_usage[];

/* Whether every option (an argument starting with "--") appears at most once in argv: 0, or -1
 * after printing "fai CMD: OPTION is given twice" (a repeated option would otherwise let its
 * last value win silently). */
int ft_options_once(int argc, char **argv, const char *cmd);

int ft_parse_dtype(const char *text, fai_dtype *dtype);
int ft_parse_int64(const char *text, int64_t min, int64_t max, int64_t *out);

/* Random tensors for a shape (values uniform in [-1, 1), K/V pages in shuffled order). */
typedef struct ft_shape_data {
    fai_problem problem;
    fai_tensors tensors;
    int32_t *seqlens_kv;
    int32_t *block_table;
    void *q, *k, *v, *o;
    float *lse;
    float *alibi_slopes, *sinks; /* [hq] when the shape has them */
    float *kv_scales;            /* quantized K/V: K's scales [rows, hkv], then V's */
    float *k_channels;           /* --k-channel-scales: [hkv, d] */
} ft_shape_data;

/* K's channel scale of kv head h, channel x: 1 without channel scales (channels or its data
 * NULL). */
double ft_shape_channel_scale(const fai_channel_scale *channels, int64_t h, int64_t x);

/* The scale of row (b, s) (a page and slot when paged), kv head h, of K or V: 1 unless
 * quantized. */
double ft_shape_scale(const fai_tensor *kv, const fai_scale *scale, int64_t b, int64_t s,
                      int64_t h);

/* The shape's problem is first judged by the planner (a shape fai refuses allocates nothing),
 * then its tensors are sized with overflow checks and made. 0, or -1 with why in
 * ft_shape_data_error() (data is then empty: free it all the same). */
int ft_shape_data_create(const ft_shape *shape, uint64_t seed, ft_shape_data *data);
const char *ft_shape_data_error(void);
void ft_shape_data_free(ft_shape_data *data);

/* A large buffer (K/V caches, the baseline's gathered K/V) of at least `bytes`: 2 MiB aligned,
 * on transparent huge pages where the OS gives them, as serving engines keep their K/V caches,
 * so no measurement runs through a TLB miss every few rows. NULL when out of memory; free() it. */
void *ft_shape_alloc_huge(size_t bytes);

/* Keys [*first, *last] that query i sees under the shape's causal mask and window (every length
 * is full in a shape); *last < *first when the row sees nothing. The rule of fai.h: the window is
 * measured from the diagonal, and causal caps its right side at 0. */
void ft_shape_visible_keys(const ft_shape *shape, int64_t i, int64_t *first, int64_t *last);

/* The problem of a shape without allocating tensors (for plans only); lengths that a paged
 * shape needs live in *seqlens_kv, an array of shape->b entries the caller provides. */
void ft_shape_problem(const ft_shape *shape, fai_problem *problem, int32_t *seqlens_kv);

/* Useful FLOPs (2*D + 2*Dv per visible pair) and the K+V bytes a run must read. */
double ft_shape_flops(const fai_plan *plan, const ft_shape *shape);
double ft_shape_kv_bytes(const ft_shape *shape);

#endif
