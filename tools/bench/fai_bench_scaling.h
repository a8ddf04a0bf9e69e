/* `fai bench --scaling`: the speedup of each thread count over the first, from interleaved rounds
 * (one run of every thread count, back to back, per round), so that the shared machine's bursts
 * of noise hit both sides of a ratio alike. */
#ifndef FAI_BENCH_SCALING_H
#define FAI_BENCH_SCALING_H

#include "fai.h"
#include "fai_evict.h"
#include "fai_peak.h"
#include "fai_shape.h"

#include <stdint.h>

/* Plans the shape once per thread count (workers = threads x pieces, on pools[t]), runs `rounds`
 * interleaved rounds after one warmup round, and prints each count's median speedup over
 * threads[0] with its quartiles (text, or one JSON object per line). With peaks, the same
 * speedup of the machine's fp32 and read-bandwidth peaks is printed beside it, and the speedup
 * as a fraction of the bandwidth's (what decode can reach). With an evictor, the caches are
 * emptied before every run. Returns 0, or -1 after printing why. */
int ft_bench_scaling(const ft_shape *shape, const ft_shape_data *data, fai_pool *const *pools,
                     const int64_t *threads, int count, int64_t rounds, int64_t pieces,
                     ft_evictor *evictor, int json, const ft_peak *peaks);

#endif
