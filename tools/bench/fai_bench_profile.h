/* `fai bench --profile`: where a plan's run time goes, by stage and by thread (fai_run_profiled),
 * summed over several runs. */
#ifndef FAI_BENCH_PROFILE_H
#define FAI_BENCH_PROFILE_H

#include "fai.h"
#include "fai_json.h"

#include <stdint.h>

typedef struct ft_bench_profile {
    int64_t runs, threads;
    double wall_seconds;                   /* summed over the runs */
    double stage_seconds[FAI_STAGE_COUNT]; /* summed over the runs and threads */
    double busy_seconds[FAI_MAX_WORKERS];  /* per thread, summed over the runs */
    double median_ms;                      /* of the profiled runs: the timers' own cost shows */
} ft_bench_profile;

/* `runs` profiled runs of the plan. Returns FAI_OK or the failing run's status. */
fai_status ft_bench_profile_run(const fai_plan *plan, const fai_tensors *tensors, void *workspace,
                                size_t workspace_bytes, int64_t runs, ft_bench_profile *out);

/* The profile as text lines under a table row (indented), or as the member "profile" of the
 * row's JSON object. plain_median_ms: the same plan's median without timers. */
void ft_bench_profile_print(const ft_bench_profile *profile, double plain_median_ms);
void ft_bench_profile_json(ft_json *json, const ft_bench_profile *profile, double plain_median_ms);

#endif
