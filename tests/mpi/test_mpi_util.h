/* Shared pieces of the MPI tests: the ranks, deterministic data (the same on every rank), the
 * single-process reference (fai on the whole sequence) and the comparison with its tolerances.
 *
 * Every rank runs every test; a test fails when it fails on any rank (the runner agrees on it
 * with an MPI_Allreduce). */
#ifndef FAI_TEST_MPI_UTIL_H
#define FAI_TEST_MPI_UTIL_H

#include "fai_mpi.h"
#include "fai_oracle.h"
#include "test_util.h"

#include <stdint.h>

extern int test_rank, test_size; /* MPI_COMM_WORLD, set by the runner */

/* Values m / 128 for m in [-128, 128): exact in f32, f16 and bf16, so every dtype holds the same
 * numbers and the reference sees exactly the sharded runs' inputs. */
void test_fill(float *values, int64_t count, uint64_t seed);

/* Stores f32 values as dtype (exact for test_fill's values; the oracle's conversions). Element
 * sizes: fai_dtype_size. */
void test_encode(void *dst, fai_dtype dtype, const float *src, int64_t count);

void *test_alloc(size_t bytes); /* zeroed; never NULL for 0 bytes; aborts when out of memory */

/* Quantized K and V: how their scales vary. */
enum { TEST_SCALE_TOKEN, TEST_SCALE_HEAD, TEST_SCALE_TENSOR };

/* One scale per (b, s, h) of a [B, S, H] quantized tensor of `dtype`, in that order: varying per
 * token and head, per head only, or one for all (`kind`), sized so that test_fill's values use
 * most of the codes. */
void test_scales(float *scales, fai_dtype dtype, int kind, int64_t batch, int64_t seq,
                 int64_t heads);

/* The fai_scale of test_scales' array as fai reads it from a [B, seq, H] tensor: per token, the
 * whole array; per head or for the tensor, its first H or 1 values, the other strides 0. */
fai_scale test_scale_view(float *scales, int kind, int64_t seq, int64_t heads);
/* The same for a tensor of dtype: no scales (all 0) unless it is quantized. */
fai_scale test_scales_of(fai_dtype dtype, float *scales, int kind, int64_t seq, int64_t heads);

/* rows x dim values (f32), row r divided by scales[r], as the nearest codes of a quantized
 * dtype (one byte each). */
void test_quantize(void *codes, fai_dtype dtype, const float *values, const float *scales,
                   int64_t rows, int64_t dim);

/* Encodes f32 values as dtype, quantized ones with one scale per row of dim values (NULL for
 * the other dtypes). */
void test_encode_rows(void *dst, fai_dtype dtype, const float *values, const float *scales,
                      int64_t rows, int64_t dim);

/* Runs fai on one process: problem and tensors as given, O replaced by f32 [B, Sq, Hq, Dv] in
 * o_ref and LSE by [B, Hq, Sq] in lse_ref. Returns 0 on success. */
int test_reference(const fai_problem *whole, const fai_tensors *tensors, float *o_ref,
                   float *lse_ref);

/* Largest error of O (dtype, `count` elements) against the f32 reference, relative to
 * max(1, |ref|) less the tolerance: <= 0 passes. f32 inputs and output: 1e-5; 16-bit or
 * quantized inputs: 2^-14; a 16-bit output adds half a step of its type (round to nearest). */
double test_o_excess(const void *o, fai_dtype o_dtype, int low_precision_inputs, const float *ref,
                     int64_t count);
/* The same for LSE values (f32); -inf must match exactly. */
double test_lse_excess(const float *lse, int low_precision_inputs, const float *ref, int64_t count);

#endif
