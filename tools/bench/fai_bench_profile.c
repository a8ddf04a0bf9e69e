/* `fai bench --profile`: the stage shares of the kernel's time and each thread's busy and idle
 * time, the CPU reading of the seed's question "who waits for whom": a stage that dominates is
 * the one to tune; a thread that idles waits for a slower one (imbalance) or for its wake-up. */
#include "fai_bench_profile.h"
#include "fai_stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

fai_status ft_bench_profile_run(const fai_plan *plan, const fai_tensors *tensors, void *workspace,
                                size_t workspace_bytes, int64_t runs, ft_bench_profile *out) {
    static fai_profile one; /* large (a busy time per possible thread) */
    double *ms = malloc((size_t)runs * sizeof *ms);
    if (!ms) return FAI_ERR_NO_MEMORY;
    memset(out, 0, sizeof *out);
    out->runs = runs;
    for (int64_t r = 0; r < runs; r++) {
        const fai_status status = fai_run_profiled(plan, tensors, workspace, workspace_bytes, &one);
        if (status != FAI_OK) {
            free(ms);
            return status;
        }
        ms[r] = one.wall_seconds * 1e3;
        out->threads = one.threads;
        out->wall_seconds += one.wall_seconds;
        for (int s = 0; s < FAI_STAGE_COUNT; s++)
            out->stage_seconds[s] += one.stage_seconds[s];
        for (int64_t t = 0; t < one.threads; t++)
            out->busy_seconds[t] += one.busy_seconds[t];
    }
    out->median_ms = ft_median(ms, runs);
    free(ms);
    return FAI_OK;
}

static double stage_total(const ft_bench_profile *p) {
    double total = 0.0;
    for (int s = 0; s < FAI_STAGE_COUNT; s++)
        total += p->stage_seconds[s];
    return total > 0.0 ? total : 1.0;
}

void ft_bench_profile_print(const ft_bench_profile *p, double plain_median_ms) {
    const double total = stage_total(p);
    printf("       stages:");
    for (int s = 0; s < FAI_STAGE_COUNT; s++)
        printf(" %s %.1f%%", fai_stage_name((fai_stage)s), 100.0 * p->stage_seconds[s] / total);
    printf("\n       threads busy/idle of the wall time:");
    for (int64_t t = 0; t < p->threads; t++) {
        const double busy = p->wall_seconds > 0 ? p->busy_seconds[t] / p->wall_seconds : 0.0;
        printf(" t%lld %.1f%%/%.1f%%", (long long)t, 100.0 * busy, 100.0 * (1.0 - busy));
    }
    printf("\n       profiled median %.3f ms, %.3fx the plain run's (the timers' cost)\n",
           p->median_ms, plain_median_ms > 0 ? p->median_ms / plain_median_ms : 0.0);
}

void ft_bench_profile_json(ft_json *json, const ft_bench_profile *p, double plain_median_ms) {
    const double total = stage_total(p);
    ft_json_object(json, "profile");
    ft_json_int(json, "runs", (long long)p->runs);
    ft_json_object(json, "stage_share");
    for (int s = 0; s < FAI_STAGE_COUNT; s++)
        ft_json_number(json, fai_stage_name((fai_stage)s), "%.5f", p->stage_seconds[s] / total);
    ft_json_end(json);
    ft_json_array(json, "thread_busy");
    for (int64_t t = 0; t < p->threads; t++)
        ft_json_number(json, NULL, "%.5f",
                       p->wall_seconds > 0 ? p->busy_seconds[t] / p->wall_seconds : 0.0);
    ft_json_end(json);
    ft_json_number(json, "median_ms", "%.5f", p->median_ms);
    ft_json_number(json, "overhead", "%.5f",
                   plain_median_ms > 0 ? p->median_ms / plain_median_ms : 0.0);
    ft_json_end(json);
}
