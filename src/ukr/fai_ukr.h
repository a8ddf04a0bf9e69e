/* The micro-kernel table (the context): one entry per stage of the tile loop. The kernel driver
 * never names a micro-kernel; it calls through the plan's table. Every entry works on a whole
 * tile, never on one element.
 *
 * Shapes are given beside each pointer: m rows of the Q tile (query positions x group heads),
 * n keys of the kv tile, d and dv head dims. All tiles are f32 and row-major. */
#ifndef FAI_UKR_H
#define FAI_UKR_H

#include "fai.h"

#include <stdint.h>

typedef struct fai_cntx {
    const char *name;
    /* Vector width in f32 lanes. Head dims are padded to a multiple of it (with zeros) in the
     * packed tiles and the O accumulator, so the kernels run whole vectors along d. */
    int64_t simd_width;

    /* Converts n rows of `dim` elements of `dtype` (rows[r] points at row r) into f32
     * dst [n, ld_dst], zero-filling columns [dim, ld_dst). Packs the Q, K and V tiles. */
    void (*pack_rows)(float *dst, int64_t ld_dst, const void *const *rows, int64_t n,
                      int64_t dim, fai_dtype dtype);

    /* Stage 1, QK: s [m, ld_s] = scale * q [m, ld_qk] . k [n, ld_qk]^T (padding is zero). */
    void (*qk)(float *s, int64_t ld_s, const float *q, const float *k, int64_t ld_qk, int64_t m,
               int64_t n, float scale);

    /* Stage 2, online softmax: for each row, the new running max m' = max(row_max, max s); s is
     * overwritten by P = exp(s - m'); row_sum = row_sum * alpha + sum P with alpha =
     * exp(row_max - m'), returned in row_alpha; row_max = m'. Rows still all -inf keep
     * row_max = -inf, P = 0, alpha = 1. */
    void (*softmax)(float *s, int64_t ld_s, int64_t m, int64_t n, float *row_max,
                    float *row_sum, float *row_alpha);

    /* Stage 4 (applied before PV of the same tile), rescale O: o [m, ld_o] rows with alpha != 1
     * are multiplied by alpha. */
    void (*rescale_o)(float *o, int64_t ld_o, int64_t m, const float *row_alpha);

    /* Stage 3, PV: o [m, ld_o] += p [m, ld_p] . v [n, ld_o]. A zero P adds nothing, even where
     * V holds NaN or Inf: positions a row cannot see never reach it. */
    void (*pv)(float *o, int64_t ld_o, const float *p, int64_t ld_p, const float *v, int64_t m,
               int64_t n);

    /* Writes dim f32 values times mul to dst in dtype (round to nearest even; f16 saturates to
     * +-65504 instead of overflowing to infinity). */
    void (*store_row)(void *dst, fai_dtype dtype, const float *src, int64_t dim, float mul);
} fai_cntx;

void fai_cntx_init_ref(fai_cntx *cntx);

/* The table chosen for this CPU (FAI_ISA may force one); NULL and a message if FAI_ISA names a
 * table this build or CPU cannot run. */
const fai_cntx *fai__cntx_select(void);

#endif
