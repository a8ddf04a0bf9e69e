/* `fai bench --scaling`: interleaved rounds, and the median of the per-round speedups. */
#include "fai_bench_scaling.h"
#include "fai_json.h"
#include "fai_timed_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_result(const ft_shape *shape, int64_t base_threads, int64_t threads,
                         ft_speedups s, const ft_peak *base_peak, const ft_peak *peak, int json) {
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
        ft_json_speedups(&out, s);
        if (peak) {
            ft_json_number(&out, "fp32_peak_speedup", "%.4f", fp32);
            ft_json_number(&out, "read_speedup", "%.4f", read);
            ft_json_number(&out, "of_read_speedup", "%.4f", read > 0 ? s.median / read : 0.0);
        }
        ft_json_end(&out);
        return;
    }
    printf("scaling %-6s %lld threads over %lld: %.2fx (median of %lld interleaved rounds, "
           "quartiles %.2f-%.2f)",
           shape->name, (long long)threads, (long long)base_threads, s.median, (long long)s.rounds,
           s.q1, s.q3);
    if (peak)
        printf("; the machine's fp32 peak %.2fx, read bandwidth %.2fx (%.0f %% of it)", fp32, read,
               read > 0 ? 100.0 * s.median / read : 0.0);
    printf("\n");
}

int ft_bench_scaling(const ft_shape *shape, const ft_shape_data *data, fai_pool *const *pools,
                     const int64_t *threads, int count, int64_t rounds, int64_t pieces,
                     ft_evictor *evictor, int json, const ft_peak *peaks) {
    if (count < 2) return 0; /* nothing to compare */
    ft_timed_plan *plans = calloc((size_t)count, sizeof *plans);
    double *seconds = malloc(sizeof(double) * (size_t)(count * rounds));
    double *ratios = malloc(sizeof(double) * (size_t)rounds);
    int status = plans && seconds && ratios ? 0 : -1;
    if (status)
        fprintf(stderr, "fai bench: %s: out of memory for --scaling's %lld rounds\n", shape->name,
                (long long)rounds);
    for (int t = 0; t < count && !status; t++)
        status = ft_timed_plan_create(&plans[t], shape, data, pools[t], threads[t], pieces);
    /* a warmup round, then the timed ones: every thread count once per round */
    if (!status) status = ft_timed_plans_rounds(plans, count, rounds, evictor, seconds);
    for (int t = 1; t < count && !status; t++) {
        print_result(shape, threads[0], threads[t],
                     ft_timed_plans_speedups(seconds, rounds, t, ratios), peaks ? &peaks[0] : NULL,
                     peaks ? &peaks[t] : NULL, json);
    }
    fflush(stdout);
    for (int t = 0; plans && t < count; t++)
        ft_timed_plan_free(&plans[t]);
    free(plans);
    free(seconds);
    free(ratios);
    return status;
}
