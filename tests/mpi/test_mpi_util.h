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

/* Runs fai on one process: problem and tensors as given, O replaced by f32 [B, Sq, Hq, Dv] in
 * o_ref and LSE by [B, Hq, Sq] in lse_ref. Returns 0 on success. */
int test_reference(const fai_problem *whole, const fai_tensors *tensors, float *o_ref,
                   float *lse_ref);

/* Largest error of O (dtype, `count` elements) against the f32 reference, relative to
 * max(1, |ref|) less the tolerance: <= 0 passes. f32 inputs and output: 1e-5; f16/bf16 inputs:
 * 2e-3; a 16-bit output adds one rounding step of its type. */
double test_o_excess(const void *o, fai_dtype o_dtype, int low_precision_inputs, const float *ref,
                     int64_t count);
/* The same for LSE values (f32); -inf must match exactly. */
double test_lse_excess(const float *lse, int low_precision_inputs, const float *ref, int64_t count);

#endif
