/* A plan with its workspace, on a given pool, for the benchmarks that time several plans in
 * interleaved rounds (fai_bench_scaling.c, fai_bench_compare.c). */
#ifndef FAI_TIMED_PLAN_H
#define FAI_TIMED_PLAN_H

#include "fai.h"
#include "fai_evict.h"
#include "fai_json.h"
#include "fai_shape.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ft_timed_plan {
    fai_plan *plan;
    void *workspace;
    size_t bytes;
    const ft_shape *shape;     /* what it runs, for messages */
    const ft_shape_data *data; /* the tensors it runs on */
} ft_timed_plan;

/* Plans data's problem for `threads` threads (workers = threads x pieces) on the pool, with its
 * workspace; p keeps shape and data. Returns 0, or -1 after printing why (the plan is then left
 * empty). */
int ft_timed_plan_create(ft_timed_plan *p, const ft_shape *shape, const ft_shape_data *data,
                         fai_pool *pool, int64_t threads, int64_t pieces);

/* One warmup round, then `rounds` interleaved rounds, each one fai_run of every plan back to
 * back: seconds[i * rounds + r] is plan i's time in round r; with an evictor, the caches are
 * emptied before every run (not timed). Returns 0, or -1 after printing why a run failed. */
int ft_timed_plans_rounds(const ft_timed_plan *plans, int count, int64_t rounds,
                          ft_evictor *evictor, double *seconds);

/* The median and quartiles of plan i's per-round speedups over plan 0 (its time in a round over
 * theirs), ratios[0 .. rounds) their scratch. */
typedef struct ft_speedups {
    int64_t rounds;
    double median, q1, q3;
} ft_speedups;
ft_speedups ft_timed_plans_speedups(const double *seconds, int64_t rounds, int i, double *ratios);

/* Their JSON fields: rounds, speedup_median, speedup_q1, speedup_q3. */
void ft_json_speedups(ft_json *out, ft_speedups s);

/* Frees the plan and its workspace (an empty one too). */
void ft_timed_plan_free(ft_timed_plan *p);

#endif
