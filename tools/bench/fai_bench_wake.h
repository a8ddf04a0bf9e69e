/* `fai bench --wake`: how soon a run on a pool starts, right after another run (the helpers
 * still polling) and after the pool has idled long enough for its helpers to sleep, beside the
 * same run on the calling thread alone. */
#ifndef FAI_BENCH_WAKE_H
#define FAI_BENCH_WAKE_H

#include "fai.h"

#include <stdint.h>

/* Times a tiny decode (one query, 64 keys, 2 heads of 64) on `pool` with `threads` threads and
 * workers, `rounds` times each way, and prints the medians (text, or one JSON object). Returns 0,
 * or -1 after printing why. */
int ft_bench_wake(fai_pool *pool, int64_t threads, int rounds, int json);

#endif
