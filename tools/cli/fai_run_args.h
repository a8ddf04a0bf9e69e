/* The options and inputs of `fai run`, shared with `fai-mpi run`: parsing the command line,
 * loading the .npy files with every shape checked against Q's, the problem they describe, and
 * writing O and LSE all or nothing.
 *
 * Failures are recorded, not printed: the first one's message (one line, naming the option, the
 * file and the value) is kept in the arguments, and the caller prints it as "<command>: <message>"
 * and exits 2. A program made of several processes can so agree on one message first. */
#ifndef FAI_RUN_ARGS_H
#define FAI_RUN_ARGS_H

#include "fai.h"
#include "fai_npy.h"

#include <stdint.h>

#define FT_RUN_ERROR_LEN 2048

enum {
    FT_RUN_OPT_Q,
    FT_RUN_OPT_K,
    FT_RUN_OPT_V,
    FT_RUN_OPT_OUT,
    FT_RUN_OPT_LSE,
    FT_RUN_OPT_MASK,
    FT_RUN_OPT_MASK_DROP,
    FT_RUN_OPT_MASK_ADD,
    FT_RUN_OPT_MASK_BITS,
    FT_RUN_OPT_SOFTCAP,
    FT_RUN_OPT_ALIBI_SLOPES,
    FT_RUN_OPT_SINKS,
    FT_RUN_OPT_K_SCALE,
    FT_RUN_OPT_V_SCALE,
    FT_RUN_OPT_K_CHANNEL_SCALE,
    FT_RUN_OPT_K_DTYPE,
    FT_RUN_OPT_V_DTYPE,
    FT_RUN_OPT_SEQLENS_Q,
    FT_RUN_OPT_SEQLENS_KV,
    FT_RUN_OPT_BLOCK_TABLE,
    FT_RUN_OPT_WINDOW,
    FT_RUN_OPT_SCALE,
    FT_RUN_OPT_OUT_DTYPE,
    FT_RUN_OPT_THREADS,
    FT_RUN_OPT_WORKERS,
    FT_RUN_OPT_CAUSAL,
    FT_RUN_OPT_CAUSAL_TOP_LEFT,
    FT_RUN_OPT_BF16,
    FT_RUN_OPT_ROUND_P_BF16,
    FT_RUN_OPT_HELP,
    FT_RUN_OPT_RING, /* fai-mpi run only */
    FT_RUN_OPT_COUNT
};

typedef struct ft_run_args {
    const char *command;                 /* "fai run", "fai-mpi run": what usage hints name */
    int with_ring;                       /* --ring is an option (else it is unknown) */
    const char *value[FT_RUN_OPT_COUNT]; /* the option's value, "" for a flag, NULL if absent */
    fai_causal causal;
    int64_t window_left, window_right;
    float scale;
    fai_dtype out_dtype;
    int64_t threads, workers;
    int mask_opt;  /* FT_RUN_OPT_MASK, _MASK_DROP, _MASK_ADD, _MASK_BITS, or -1 */
    float softcap; /* --softcap, 0 without it */
    /* --k-dtype, --v-dtype: how the bytes of a uint8 K and V are read (FAI_DTYPE_E4M3 or
     * FAI_DTYPE_E5M2; unset without the option) */
    fai_dtype k_code_dtype, v_code_dtype;
    fai_mask_kind mask_kind;
    char error[FT_RUN_ERROR_LEN]; /* the first failure's message, without the command */
} ft_run_args;

/* "--q", "--block-table", ... */
const char *ft_run_option_name(int opt);

/* Records a failure (control characters replaced, so that it stays one line) unless one is
 * recorded already, and returns 2, the bad-input exit status. */
int ft_run_fail(ft_run_args *args, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parses argv (argv[0] is the command's name) into *args for `command`. Returns -1 when the
 * caller should print its usage and exit 0 (--help, -h), 0 on success, 2 after a failure. */
int ft_run_parse_args(int argc, char **argv, const char *command, int with_ring, ft_run_args *args);

typedef struct ft_run_inputs {
    ft_npy q, k, v, mask, seqlens_q, seqlens_kv, block_table;
    ft_npy alibi_slopes, sinks; /* float32 [Hq] */
    ft_npy k_scale, v_scale;    /* float32 scales of a quantized K and V */
    ft_npy k_channel_scale;     /* float32 [Hkv, D] or [D]: K's per-channel scales */
} ft_run_inputs;

void ft_run_free_inputs(ft_run_inputs *inputs);

/* What the files describe. */
typedef struct ft_run_problem {
    int64_t batch, seq_q, heads_q, head_dim, heads_kv, head_dim_v;
    fai_dtype q_dtype, k_dtype, v_dtype;
    int paged;
    int64_t k_rows;  /* K's second dimension: Skv, or page_size when paged */
    fai_mask mask;   /* the mask's data and strides over [B, Hq, Sq, mask_kv] */
    int64_t mask_kv; /* the mask's last dimension (0 without a mask): keys, or bytes of a
                        bit mask */
    const float *alibi_slopes, *sinks; /* [Hq] from --alibi-slopes and --sinks, or NULL */
    /* --k-scale and --v-scale over K's (V's) [B, Skv, Hkv] or [num_pages, page_size, Hkv]: per
     * token (those shapes), per kv head ([Hkv]: stride_head 1, the others 0) or one scale (all
     * strides 0); data NULL for a float K (V) */
    fai_scale k_scale, v_scale;
    /* --k-channel-scale: [Hkv, D] (stride_head D) or [D] (stride_head 0); data NULL without */
    fai_channel_scale k_channel_scale;
    fai_problem problem; /* everything fai_plan_create needs, lengths pointing into the inputs */
} ft_run_problem;

/* Loads Q, K, V, the lengths, the block table, the scales of a quantized K and V and the mask,
 * checks each shape against Q's (a scale's against K's or V's) and fills *problem. Returns 0, or 2
 * after a failure. The inputs must outlive the problem. */
int ft_run_load(ft_run_args *args, ft_run_inputs *inputs, ft_run_problem *problem);

/* Every block-table entry of a page that holds keys lies in the pool (after planning, which has
 * validated the lengths). Returns 0, or 2 naming the file and the entry. */
int ft_run_check_block_table(ft_run_args *args, const ft_run_inputs *inputs,
                             const ft_run_problem *problem);

/* Plans the problem (a refusal names the field) and checks the block table. Returns 0 with *plan
 * to free, or 2 after a failure (*plan NULL). */
int ft_run_plan(ft_run_args *args, const ft_run_inputs *inputs, const ft_run_problem *problem,
                fai_plan **plan);

/* O [B, Sq, Hq, Dv] in args->out_dtype and, with with_lse, LSE [B, Hq, Sq] f32, zeroed. Returns 0,
 * or 2 after a failure (too large, out of memory; nothing left allocated). Release with free(). */
int ft_run_alloc_outputs(ft_run_args *args, const ft_run_problem *problem, int with_lse, void **o,
                         float **lse);

/* The view of an LSE buffer [B, heads, seq] as fai_tensors.lse. */
fai_tensor ft_run_lse_tensor(float *lse, int64_t heads, int64_t seq);

/* Writes O (in args->out_dtype, shape [B, Sq, Hq, Dv]) and, when --lse was given, LSE (f32
 * [B, Hq, Sq]) to temporary files, then renames both into place: both or neither. Returns 0, or
 * 2 after a failure. */
int ft_run_write_outputs(ft_run_args *args, const ft_run_problem *problem, const void *o,
                         const float *lse);

/* A zeroed buffer of at least `bytes` (never NULL for 0 bytes), 64-byte aligned; NULL when out of
 * memory. Release with free(). */
void *ft_run_alloc(size_t bytes);

/* Multiplies *acc by d; -1 when d is negative or the product overflows. */
int ft_run_mul_size(size_t *acc, int64_t d);

#endif
