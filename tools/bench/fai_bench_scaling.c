/* `fai bench --scaling`: interleaved rounds, and the median of the per-round speedups. */
#include "fai_bench_scaling.h"
#include "fai_json.h"
#include "fai_stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_COUNTS 16

/* The value at fraction q of a sorted array (nearest rank). */
static double quantile(const double *sorted, int64_t n, double q) {
    int64_t at = (int64_t)(q * (double)(n - 1) + 0.5);
    return sorted[at < 0 ? 0 : at >= n ? n - 1 : at];
}

typedef struct timed_plan {
    fai_plan *plan;
    void *workspace;
    size_t bytes;
} timed_plan;

static double time_one(const timed_plan *p, const ft_shape_data *data, fai_status *status) {
    const double start = ft_now_seconds();
    *status = fai_run(p->plan, &data->tensors, p->workspace, p->bytes);
    return ft_now_seconds() - start;
}

static void print_result(const ft_shape *shape, int64_t base_threads, int64_t threads,
                         const double *sorted, int64_t rounds, const ft_peak *base_peak,
                         const ft_peak *peak, int json) {
    const double median = quantile(sorted, rounds, 0.5);
    const double low = quantile(sorted, rounds, 0.25), high = quantile(sorted, rounds, 0.75);
    const double fp32 =
        peak && base_peak->fp32_gflops > 0 ? peak->fp32_gflops / base_peak->fp32_gflops : 0.0;
    const double read =
        peak && base_peak->read_gbps > 0 ? peak->read_gbps / base_peak->read_gbps : 0.0;
    if (json) {
        ft_json out;
        ft_json_init(&out, stdout, 0);
        ft_json_object(&out, NULL);
        ft_json_string(&out, "shape", shape->name);
        ft_json_int(&out, "scaling_threads", (long long)threads);
        ft_json_int(&out, "over_threads", (long long)base_threads);
        ft_json_int(&out, "rounds", (long long)rounds);
        ft_json_number(&out, "speedup_median", "%.4f", median);
        ft_json_number(&out, "speedup_q1", "%.4f", low);
        ft_json_number(&out, "speedup_q3", "%.4f", high);
        if (peak) {
            ft_json_number(&out, "fp32_peak_speedup", "%.4f", fp32);
            ft_json_number(&out, "read_speedup", "%.4f", read);
            ft_json_number(&out, "of_read_speedup", "%.4f", read > 0 ? median / read : 0.0);
        }
        ft_json_end(&out);
        return;
    }
    printf("scaling %-6s %lld threads over %lld: %.2fx (median of %lld interleaved rounds, "
           "quartiles %.2f-%.2f)",
           shape->name, (long long)threads, (long long)base_threads, median, (long long)rounds, low,
           high);
    if (peak)
        printf("; the machine's fp32 peak %.2fx, read bandwidth %.2fx (%.0f %% of it)", fp32, read,
               read > 0 ? 100.0 * median / read : 0.0);
    printf("\n");
}

int ft_bench_scaling(const ft_shape *shape, const ft_shape_data *data, fai_pool *const *pools,
                     const int64_t *threads, int count, int64_t rounds, int64_t pieces, int json,
                     const ft_peak *peaks) {
    if (count < 2 || count > MAX_COUNTS) return 0;
    timed_plan plans[MAX_COUNTS];
    memset(plans, 0, sizeof plans);
    double *seconds = malloc(sizeof(double) * (size_t)(count * rounds));
    double *ratios = malloc(sizeof(double) * (size_t)rounds);
    int status = seconds && ratios ? 0 : -1;
    for (int t = 0; t < count && !status; t++) {
        fai_problem problem = data->problem;
        problem.threads = threads[t];
        problem.workers = threads[t] * pieces;
        if (fai_plan_create(&problem, &plans[t].plan) != FAI_OK) {
            fprintf(stderr, "fai bench: %s: %s\n", shape->name, fai_last_error());
            status = -1;
            break;
        }
        fai_plan_set_pool(plans[t].plan, pools[t]);
        plans[t].bytes = fai_plan_workspace_size(plans[t].plan);
        plans[t].workspace = malloc(plans[t].bytes + 1);
        if (!plans[t].workspace) status = -1;
    }
    /* a warmup round, then the timed ones: every thread count once per round */
    for (int64_t r = -1; r < rounds && !status; r++)
        for (int t = 0; t < count && !status; t++) {
            fai_status run_status;
            const double s = time_one(&plans[t], data, &run_status);
            if (run_status != FAI_OK) {
                fprintf(stderr, "fai bench: %s: %s\n", shape->name, fai_last_error());
                status = -1;
            }
            if (r >= 0) seconds[t * rounds + r] = s;
        }
    for (int t = 1; t < count && !status; t++) {
        for (int64_t r = 0; r < rounds; r++)
            ratios[r] = seconds[r] / seconds[t * rounds + r];
        qsort(ratios, (size_t)rounds, sizeof *ratios, ft_compare_double);
        print_result(shape, threads[0], threads[t], ratios, rounds, peaks ? &peaks[0] : NULL,
                     peaks ? &peaks[t] : NULL, json);
    }
    fflush(stdout);
    for (int t = 0; t < count; t++) {
        fai_plan_free(plans[t].plan);
        free(plans[t].workspace);
    }
    free(seconds);
    free(ratios);
    return status;
}
