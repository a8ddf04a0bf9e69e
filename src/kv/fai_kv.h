/* Row addressing of Q, K, V, O, LSE and the K/V scales: padded, packed (cu_seqlens) and paged
 * (block table) layouts all reduce to "address of row r of sequence b, head h". Each tensor's
 * addressing is resolved once per run into a fai_rows (byte strides, where a packed sequence
 * starts, the block table), and the kernel asks for whole tiles of row pointers, so the layout
 * costs one computation per row (per page when paged), never per element. */
#ifndef FAI_KV_H
#define FAI_KV_H

#include "fai_internal.h"

/* One tensor's rows: element (b, s, h, 0) at data + b*batch + s*seq + h*head (bytes), where s
 * is a packed row (the sequence's first row added) when packed, and (b, s) a pool page and its
 * slot when paged (table not NULL: sequence b's key j is on page table[b*table_stride +
 * j/page_size], slot j % page_size). */
typedef struct fai_rows {
    unsigned char *data;
    int64_t batch, seq, head; /* strides in bytes */
    const fai_seq *seqs;      /* packed: the plan's sequences (first rows), else NULL */
    int kv_side;              /* packed: 1 for K/V (kv_row0), 0 for Q/O/LSE (q_row0) */
    const int32_t *table;     /* paged K/V and their scales, else NULL */
    int64_t table_stride, page_size;
} fai_rows;

/* A run's tensors, resolved: fai__rows_resolve fills it from the plan and the tensors. */
typedef struct fai_run_rows {
    fai_rows q, k, v, o, lse, k_scale, v_scale;
} fai_run_rows;

void fai__rows_resolve(const fai_plan *plan, const fai_tensors *t, fai_run_rows *rows);

/* Pointers to keys [key_begin, key_begin + count) of sequence b, kv head h, in K or V. */
void fai__kv_rows(const fai_rows *kv, int64_t b, int64_t h, int64_t key_begin, int64_t count,
                  const void **rows);

/* Asks for keys [key_begin, key_begin + count) of sequence b, kv head h (row_bytes each) to be
 * brought into L2: the next kv tile of a prefill unit, fetched while the current one is
 * computed, following the block table across pages where the hardware prefetchers cannot. */
void fai__kv_prefetch(const fai_rows *kv, int64_t b, int64_t h, int64_t key_begin, int64_t count,
                      int64_t row_bytes);

/* The dequantization scales (rows of the k_scale or v_scale resolution) of keys [key_begin,
 * key_begin + count) of sequence b, kv head h, into out[0 .. count). */
void fai__kv_scales(const fai_rows *scale, int64_t b, int64_t h, int64_t key_begin, int64_t count,
                    float *out);

/* Address of query row i (a position inside sequence b) of head h in Q or O; of the LSE element
 * of sequence b, head h, row i. */
void *fai__q_row(const fai_rows *q, int64_t b, int64_t i, int64_t h);
float *fai__lse_at(const fai_rows *lse, int64_t b, int64_t i, int64_t h);

#endif
