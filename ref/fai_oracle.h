/*
 * fai_oracle.h - an fp64 reference of the attention operator, for tests and `fai check`.
 *
 * Written independently of the library and on purpose naive: no tiles, no online softmax. For
 * every (batch, query head, query row) it decodes the inputs exactly into double, computes the
 * visible logits, a two-pass softmax and O = P V, and LSE = log(sum exp S).
 *
 * Output layout (double, always contiguous):
 *   groups = batch for a padded Q, 1 for a packed Q (cu_seqlens_q); rows = seq_q.
 *   o[((g * rows + r) * heads_q + h) * dv + d]      r: query position (padded) or packed row
 *   lse[(g * heads_q + h) * rows + r]               -inf for masked rows and rows past a length
 *   row_state[(g * rows + r) * heads_q + h]         one of FAI_ORACLE_ROW_*
 * A packed row that belongs to no sequence (r >= cu_seqlens_q[batch]) is a row past the length.
 */
#ifndef FAI_ORACLE_H
#define FAI_ORACLE_H

#include <stddef.h>
#include <stdint.h>

#include "fai.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    FAI_ORACLE_ROW_VALID = 0,  /* at least one visible key: O = P V */
    FAI_ORACLE_ROW_MASKED = 1, /* inside the sequence, but no visible key: O = 0, LSE = -inf */
    FAI_ORACLE_ROW_PAST = 2    /* at or past the sequence's query length: O = 0, LSE = -inf */
};

typedef struct fai_oracle_out {
    int64_t groups;  /* batch (padded Q) or 1 (packed Q) */
    int64_t rows;    /* seq_q */
    int64_t heads_q; /* Hq */
    int64_t head_dim_v;
    double *o;                /* [groups][rows][heads_q][head_dim_v] */
    double *lse;              /* [groups][heads_q][rows] */
    unsigned char *row_state; /* [groups][rows][heads_q] */
    /* What the rounding of a valid row scales with (README, "Tolerances"), 0 elsewhere:
     *   o_mag[..][d]  sum_j p_j |v_jd|: O computed with |V|, at least |O|
     *   logit_mag     max over the visible keys of |scale| sum_d |q_d k_jd| + |mask_add|: a
     *                 bound of every |s_j| and of what the rounding of the dot products sees
     *   keys          the visible keys, n */
    double *o_mag;     /* [groups][rows][heads_q][head_dim_v] */
    double *logit_mag; /* [groups][rows][heads_q] */
    int64_t *keys;     /* [groups][rows][heads_q] */
    /* (query, key) pairs left by causal, window and lengths (explicit masks not applied),
     * summed over all query heads: what fai_plan_info.visible_pairs counts. */
    int64_t visible_pairs;
    int64_t rows_valid, rows_masked, rows_past; /* counts over (row, head) */
} fai_oracle_out;

/* Computes the reference for a problem and its tensors. Reads only positions inside each
 * sequence's lengths. On success returns FAI_OK and fills *out (free with fai_oracle_out_free);
 * on failure returns a status, writes a message to err (if not NULL) and leaves *out empty. */
fai_status fai_oracle_run(const fai_problem *problem, const fai_tensors *tensors,
                          fai_oracle_out *out, char *err, size_t err_size);

void fai_oracle_out_free(fai_oracle_out *out);

/* A problem's Dv: head_dim_v, or head_dim for FAI_HEAD_DIM_V_DEFAULT. */
int64_t fai_oracle_head_dim_v(const fai_problem *problem);

/* Exact conversions of the storage types. Decoding is exact (every f16 / bf16 value is a
 * double); encoding rounds to nearest, ties to even, with overflow to infinity and subnormals. */
double fai_oracle_f16_decode(uint16_t bits);
double fai_oracle_bf16_decode(uint16_t bits);
uint16_t fai_oracle_f16_encode(double x);
double fai_oracle_e4m3_decode(uint8_t bits);
uint16_t fai_oracle_bf16_encode(double x);

/* Element `index` of an array of `dtype`, as a double (a quantized element's own value, before
 * its scale) / stored from a double (f32, f16, bf16: rounded to nearest even; quantized dtypes
 * are not stored). K and V are decoded with their scales by fai_oracle_run. */
double fai_oracle_load(const void *data, fai_dtype dtype, int64_t index);
void fai_oracle_store(void *data, fai_dtype dtype, int64_t index, double value);

#ifdef __cplusplus
}
#endif

#endif /* FAI_ORACLE_H */
