/* The unfused attention `fai bench --baseline` runs beside fai: what a competent user writes with
 * a CBLAS. Per (batch, kv head), the query heads of the GQA group are stacked as rows (G = Hq/Hkv
 * heads x Sq queries, row i*G + g), and
 *
 *     S = scale * Qg K^T    (cblas_sgemm, the whole score matrix of the pair held in memory)
 *     P = softmax(S)        (masks and row softmax in plain C, in place)
 *     Og = P V              (cblas_sgemm)
 *
 * with the (batch, kv head) pairs taken by pthreads from a shared counter, each calling a
 * single-threaded BLAS. Everything is fp32: Q, K and V are converted to f32, and paged K/V
 * gathered into contiguous [B, Hkv, Skv, D] arrays, once before timing (the layout most
 * favourable to the GEMMs, on huge pages like fai's K/V; its cost is not timed). The GEMMs cover
 * the keys some row of the pair sees, so a causal prefill also multiplies the masked half. Built
 * with FAI_HAVE_CBLAS only; the library never links a BLAS. */
#ifndef FAI_BASELINE_H
#define FAI_BASELINE_H

#include "fai_shape.h"

#include <stdint.h>

typedef struct ft_baseline ft_baseline;

/* Nonzero when the tool was built with a CBLAS. */
int ft_baseline_available(void);

/* One line naming the BLAS and, for OpenBLAS, its configuration and the core whose kernels it
 * runs. Static storage. */
const char *ft_baseline_blas(void);

/* Converts the shape's inputs to f32 (see above), allocates the scratch of up to max_threads
 * threads (per thread the scores of one (batch, kv head), its stacked Q rows and O rows) and
 * starts the threads, which sleep between runs. Makes the BLAS single-threaded
 * (openblas_set_num_threads(1) where it is OpenBLAS; others need OPENBLAS_NUM_THREADS=1 or
 * OMP_NUM_THREADS=1 in the environment). Returns 0, or -1 (no BLAS, not enough memory or
 * threads) with *baseline NULL. */
int ft_baseline_create(const ft_shape *shape, const ft_shape_data *data, int64_t max_threads,
                       ft_baseline **baseline);

/* Computes the attention on `threads` threads (at most the max_threads of create, which started
 * them; the caller is one of them) into the baseline's own output, f32 [B, Sq, Hq, Dv].
 * Returns 0. */
int ft_baseline_run(ft_baseline *baseline, int64_t threads);

/* Bytes of the score matrix of one (batch, kv head): G*Sq rows x the keys the rows see, f32.
 * Each running thread holds one. */
double ft_baseline_score_bytes(const ft_baseline *baseline);

/* FLOPs the two GEMMs execute per run, masked products included (fai's rates count only the
 * visible pairs; both columns of `fai bench` use that same count). */
double ft_baseline_gemm_flops(const ft_baseline *baseline);

/* Largest difference between the baseline's output and fai's (data->o, any dtype) over `rows`
 * sampled (batch, query, head) rows, relative to max(1, |fai|); NaN gives INFINITY. */
double ft_baseline_compare(const ft_baseline *baseline, const ft_shape_data *data, int rows,
                           uint64_t seed);

void ft_baseline_free(ft_baseline *baseline);

#endif
