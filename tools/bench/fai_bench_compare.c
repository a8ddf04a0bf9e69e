/* `fai bench --kv-dtypes`: interleaved rounds over a shape's K/V dtypes, and the median of the
 * per-round speedups. */
#include "fai_bench_compare.h"
#include "fai_json.h"
#include "fai_timed_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VARIANTS 8

static void print_result(const ft_shape *variant, const ft_shape *base, int64_t threads,
                         ft_speedups s, int json) {
    if (json) {
        ft_json out;
        ft_json_init(&out, stdout, 0);
        ft_json_object(&out, NULL);
        ft_json_string(&out, "shape", variant->name);
        ft_json_int(&out, "compare_threads", (long long)threads);
        ft_json_string(&out, "kv_dtype", fai_dtype_name(variant->kv_dtype));
        ft_json_string(&out, "over_kv_dtype", fai_dtype_name(base->kv_dtype));
        ft_json_speedups(&out, s);
        ft_json_end(&out);
        return;
    }
    printf("compare %-6s %lld threads  %s over %s: %.2fx (median of %lld interleaved rounds, "
           "quartiles %.2f-%.2f)\n",
           variant->name, (long long)threads, fai_dtype_name(variant->kv_dtype),
           fai_dtype_name(base->kv_dtype), s.median, (long long)s.rounds, s.q1, s.q3);
}

/* One thread count: a plan per variant, the rounds, the speedups printed. */
static int compare_on(const ft_shape *variants, const ft_shape_data *data, int count,
                      fai_pool *pool, int64_t threads, int64_t rounds, int64_t pieces,
                      ft_evictor *evictor, int json, double *seconds, double *ratios) {
    ft_timed_plan plans[MAX_VARIANTS];
    memset(plans, 0, sizeof plans);
    int status = 0;
    for (int v = 0; v < count && !status; v++)
        status = ft_timed_plan_create(&plans[v], &variants[v], &data[v], pool, threads, pieces);
    if (!status) status = ft_timed_plans_rounds(plans, count, rounds, evictor, seconds);
    for (int v = 1; v < count && !status; v++) {
        print_result(&variants[v], &variants[0], threads,
                     ft_timed_plans_speedups(seconds, rounds, v, ratios), json);
    }
    fflush(stdout);
    for (int v = 0; v < count; v++)
        ft_timed_plan_free(&plans[v]);
    return status;
}

int ft_bench_compare(const ft_shape *variants, int count, uint64_t seed, fai_pool *const *pools,
                     const int64_t *threads, int thread_count, int64_t rounds, int64_t pieces,
                     ft_evictor *evictor, int json) {
    if (count < 2 || count > MAX_VARIANTS || rounds < 1) return 0;
    ft_shape_data data[MAX_VARIANTS];
    memset(data, 0, sizeof data);
    double *seconds = malloc(sizeof(double) * (size_t)(count * rounds));
    double *ratios = malloc(sizeof(double) * (size_t)rounds);
    int status = seconds && ratios ? 0 : -1;
    int made = 0;
    for (; made < count && !status; made++)
        if (ft_shape_data_create(&variants[made], seed, &data[made])) {
            fprintf(stderr, "fai bench: %s with %s K/V: %s\n", variants[made].name,
                    fai_dtype_name(variants[made].kv_dtype), ft_shape_data_error());
            status = -1;
        }
    if (!seconds || !ratios)
        fprintf(stderr, "fai bench: %s: out of memory for the comparison\n", variants->name);
    for (int t = 0; t < thread_count && !status; t++)
        status = compare_on(variants, data, count, pools[t], threads[t], rounds, pieces, evictor,
                            json, seconds, ratios);
    for (int v = 0; v < made; v++)
        ft_shape_data_free(&data[v]);
    free(seconds);
    free(ratios);
    return status;
}
