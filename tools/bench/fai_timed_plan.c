/* A plan with its workspace, timed one run at a time. */
#include "fai_timed_plan.h"
#include "fai_stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ft_timed_plan_create(ft_timed_plan *p, const ft_shape *shape, const ft_shape_data *data,
                         fai_pool *pool, int64_t threads, int64_t pieces) {
    memset(p, 0, sizeof *p);
    fai_problem problem = data->problem;
    problem.threads = threads;
    problem.workers = threads * pieces;
    if (fai_plan_create(&problem, &p->plan) != FAI_OK) {
        fprintf(stderr, "fai bench: %s: %s\n", shape->name, fai_last_error());
        return -1;
    }
    fai_plan_set_pool(p->plan, pool);
    p->shape = shape;
    p->data = data;
    p->bytes = fai_plan_workspace_size(p->plan);
    p->workspace = malloc(p->bytes + 1);
    if (!p->workspace) {
        fprintf(stderr, "fai bench: %s: out of memory for the workspace\n", shape->name);
        ft_timed_plan_free(p);
        return -1;
    }
    return 0;
}

int ft_timed_plans_rounds(const ft_timed_plan *plans, int count, int64_t rounds,
                          ft_evictor *evictor, double *seconds) {
    for (int64_t r = -1; r < rounds; r++)
        for (int i = 0; i < count; i++) {
            const ft_timed_plan *p = &plans[i];
            if (evictor) ft_evict(evictor);
            const double start = ft_now_seconds();
            const fai_status status = fai_run(p->plan, &p->data->tensors, p->workspace, p->bytes);
            if (status != FAI_OK) {
                fprintf(stderr, "fai bench: %s: %s\n", p->shape->name, fai_last_error());
                return -1;
            }
            if (r >= 0) seconds[i * rounds + r] = ft_now_seconds() - start;
        }
    return 0;
}

ft_speedups ft_timed_plans_speedups(const double *seconds, int64_t rounds, int i, double *ratios) {
    for (int64_t r = 0; r < rounds; r++)
        ratios[r] = seconds[r] / seconds[i * rounds + r];
    qsort(ratios, (size_t)rounds, sizeof *ratios, ft_compare_double);
    return (ft_speedups){rounds, ft_quantile(ratios, rounds, 0.5),
                         ft_quantile(ratios, rounds, 0.25), ft_quantile(ratios, rounds, 0.75)};
}

void ft_json_speedups(ft_json *out, ft_speedups s) {
    ft_json_int(out, "rounds", (long long)s.rounds);
    ft_json_number(out, "speedup_median", "%.4f", s.median);
    ft_json_number(out, "speedup_q1", "%.4f", s.q1);
    ft_json_number(out, "speedup_q3", "%.4f", s.q3);
}

void ft_timed_plan_free(ft_timed_plan *p) {
    fai_plan_free(p->plan);
    free(p->workspace);
    memset(p, 0, sizeof *p);
}
