/* Row addressing of Q, K, V and O: padded, packed (cu_seqlens) and paged (block table) layouts
 * all reduce to "pointer to row r of sequence b, head h". The kernel asks for whole tiles of row
 * pointers, so the layout costs one computation per row, never per element. */
#ifndef FAI_KV_H
#define FAI_KV_H

#include "fai_internal.h"

/* Pointers to keys [key_begin, key_begin + count) of sequence b, kv head h, in `tensor` (K or V).
 */
void fai__kv_rows(const fai_plan *plan, const fai_tensors *t, const fai_tensor *tensor, int64_t b,
                  int64_t h, int64_t key_begin, int64_t count, const void **rows);

/* The dequantization scales (fai_tensors.k_scale or v_scale) of keys [key_begin, key_begin +
 * count) of sequence b, kv head h, into out[0 .. count). */
void fai__kv_scales(const fai_plan *plan, const fai_tensors *t, const fai_scale *scale, int64_t b,
                    int64_t h, int64_t key_begin, int64_t count, float *out);

/* Asks for keys [key_begin, key_begin + count) of sequence b, kv head h (row_bytes each) to be
 * brought into L2: the next kv tile of a prefill unit, fetched while the current one is
 * computed, following the block table across pages where the hardware prefetchers cannot. */
void fai__kv_prefetch(const fai_plan *plan, const fai_tensors *t, const fai_tensor *tensor,
                      int64_t b, int64_t h, int64_t key_begin, int64_t count, int64_t row_bytes);

/* Address of query row i (a position inside sequence b) of head h in Q or O. */
void *fai__q_row(const fai_plan *plan, const fai_tensor *tensor, int64_t b, int64_t i, int64_t h);

/* Address of the LSE element of sequence b, head h, row i. */
float *fai__lse_at(const fai_plan *plan, const fai_tensor *lse, int64_t b, int64_t i, int64_t h);

#endif
