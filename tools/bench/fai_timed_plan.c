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
    p->bytes = fai_plan_workspace_size(p->plan);
    p->workspace = malloc(p->bytes + 1);
    if (!p->workspace) {
        fprintf(stderr, "fai bench: %s: out of memory for the workspace\n", shape->name);
        ft_timed_plan_free(p);
        return -1;
    }
    return 0;
}

double ft_timed_plan_run(const ft_timed_plan *p, const ft_shape *shape, const ft_shape_data *data) {
    const double start = ft_now_seconds();
    const fai_status status = fai_run(p->plan, &data->tensors, p->workspace, p->bytes);
    const double seconds = ft_now_seconds() - start;
    if (status == FAI_OK) return seconds;
    fprintf(stderr, "fai bench: %s: %s\n", shape->name, fai_last_error());
    return -1.0;
}

void ft_timed_plan_free(ft_timed_plan *p) {
    fai_plan_free(p->plan);
    free(p->workspace);
    memset(p, 0, sizeof *p);
}
