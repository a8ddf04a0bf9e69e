/* Spot checks of a shape's output against an fp64 reference, for `fai demo` and `fai bench`:
 * a few sampled query rows are recomputed in double from the same (rounded) inputs. */
#ifndef FAI_VERIFY_H
#define FAI_VERIFY_H

#include "fai_shape.h"

#include <stdint.h>

/* The sampled element of `rows` sampled (batch, query, head) rows of data->o after a run that
 * comes nearest its tolerance (README, "Tolerances"): returns its error relative to max(1,
 * sum_j p_j |v_j|) and stores its tolerance, t + 2 eps_f32 (L + sqrt(n)), in *tolerance; the
 * check passes when the one is at most the other. NaN or Inf in the output, or no memory, gives
 * INFINITY. Empty shapes give 0. Handles dense and paged K/V, both causal alignments and
 * sliding windows. */
double ft_verify_rows(const ft_shape *shape, const ft_shape_data *data, int rows, uint64_t seed,
                      double *tolerance);

/* The dtype term t of the tolerance: 0 with f32 inputs, 2^-14 with 16-bit or quantized inputs,
 * 2^-8 more with --round-p-bf16, plus half a step of a 16-bit output type (at 1.0). */
double ft_verify_tolerance(const ft_shape *shape);

#endif
