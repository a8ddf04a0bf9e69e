/* `fai bench --kv-dtypes`: the speedup of each K/V dtype over the list's first on the same shape,
 * from interleaved rounds (one run of every dtype, back to back, per round), so that the shared
 * machine's bursts of noise, which move a decode's time by half, hit both sides of a ratio
 * alike. */
#ifndef FAI_BENCH_COMPARE_H
#define FAI_BENCH_COMPARE_H

#include "fai.h"
#include "fai_evict.h"
#include "fai_shape.h"

#include <stdint.h>

/* The count >= 2 variants of one shape (variants[0] the one the others are compared with) get
 * their tensors (seed) and, per thread count, a plan each (workers = threads x pieces, on
 * pools[t]); after one warmup round, `rounds` interleaved rounds, and each variant's median
 * speedup over variants[0] with its quartiles is printed (text, or one JSON object per line).
 * With an evictor, the caches are emptied before every run. Returns 0, or -1 after printing why.
 */
int ft_bench_compare(const ft_shape *variants, int count, uint64_t seed, fai_pool *const *pools,
                     const int64_t *threads, int thread_count, int64_t rounds, int64_t pieces,
                     ft_evictor *evictor, int json);

#endif
