/* A plan with its workspace, on a given pool, for the benchmarks that time several plans in
 * interleaved rounds (fai_bench_scaling.c, fai_bench_compare.c). */
#ifndef FAI_TIMED_PLAN_H
#define FAI_TIMED_PLAN_H

#include "fai.h"
#include "fai_shape.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ft_timed_plan {
    fai_plan *plan;
    void *workspace;
    size_t bytes;
} ft_timed_plan;

/* Plans data's problem for `threads` threads (workers = threads x pieces) on the pool, with its
 * workspace. Returns 0, or -1 after printing why (the plan is then left empty). */
int ft_timed_plan_create(ft_timed_plan *p, const ft_shape *shape, const ft_shape_data *data,
                         fai_pool *pool, int64_t threads, int64_t pieces);

/* Seconds of one fai_run of the plan on data; -1 after printing why when the run fails. */
double ft_timed_plan_run(const ft_timed_plan *p, const ft_shape *shape, const ft_shape_data *data);

/* Frees the plan and its workspace (an empty one too). */
void ft_timed_plan_free(ft_timed_plan *p);

#endif
