/* fai demo: the main job. Runs each benchmark shape once on built-in defaults, checks sampled
 * rows against an fp64 reference, and prints the time with GFLOP/s (compute-bound shapes) or
 * the K/V read rate (decode). */
#include "fai_cmd.h"
#include "fai_stats.h"
#include "fai_shape.h"
#include "fai_verify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SAMPLED_ROWS 24

static void print_usage(FILE *out) {
    fprintf(out,
            "usage: fai demo [--threads N] [--runs N] [SHAPE ...]\n"
            "Runs the benchmark shapes (default: P1 P2 D1 D2 C1; Q f32, K/V f16, O f32)\n"
            "--runs times each (default 3), checks %d sampled rows of each against an fp64\n"
            "reference, and prints the median time with GFLOP/s, and GB/s of K/V read.\n",
            SAMPLED_ROWS);
}

int ft_cmd_demo(int argc, char **argv) {
    int64_t threads = 0, runs = 3;
    int selected[16] = {0}, any_selected = 0;
    if (ft_options_once(argc, argv, "demo")) return 2;
    for (int i = 1; i < argc; i++) {
        int found = 0;
        for (int s = 0; s < ft_shape_count; s++)
            if (!strcmp(argv[i], ft_shape_table[s].name)) selected[s] = found = any_selected = 1;
        if (found) continue;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            print_usage(stdout);
            return 0;
        }
        const int is_threads = !strcmp(argv[i], "--threads"), is_runs = !strcmp(argv[i], "--runs");
        if (is_threads || is_runs) {
            const int64_t most = is_threads ? FAI_MAX_WORKERS : 1000;
            if (i + 1 >= argc ||
                ft_parse_int64(argv[i + 1], 1, most, is_threads ? &threads : &runs)) {
                fprintf(stderr, "fai demo: %s needs an integer 1..%lld, got '%s'\n", argv[i],
                        (long long)most, i + 1 < argc ? argv[i + 1] : "");
                return 2;
            }
            i++;
            continue;
        }
        fprintf(stderr, "fai demo: unknown or incomplete option '%s' (fai demo --help)\n", argv[i]);
        return 2;
    }
    int failures = 0;
    printf("%-5s %-34s %10s %10s %12s %10s  %s\n", "shape", "problem", "median_ms", "GFLOP/s",
           "KV GB/s", "max_err", "check");
    for (int s = 0; s < ft_shape_count; s++) {
        if (any_selected ? !selected[s] : s >= ft_shape_default_count) continue;
        const ft_shape *shape = &ft_shape_table[s];
        ft_shape_data data;
        fai_plan *plan = NULL;
        void *workspace = NULL;
        /* a shape that cannot be made or planned here is reported and the others still run;
         * it counts as a failure (exit 1), as a run that fails does */
        if (ft_shape_data_create(shape, 1000 + (uint64_t)s, &data)) {
            fprintf(stderr, "fai demo: %s: %s\n", shape->name, ft_shape_data_error());
            ft_shape_data_free(&data);
            failures++;
            continue;
        }
        data.problem.threads = threads;
        data.problem.workers = threads;
        if (fai_plan_create(&data.problem, &plan) != FAI_OK) {
            fprintf(stderr, "fai demo: %s: %s\n", shape->name, fai_last_error());
            ft_shape_data_free(&data);
            failures++;
            continue;
        }
        const size_t workspace_bytes = fai_plan_workspace_size(plan);
        workspace = malloc(workspace_bytes ? workspace_bytes : 1);
        double times[1000];
        fai_status status = workspace ? FAI_OK : FAI_ERR_NO_MEMORY;
        int64_t timed = 0;
        for (; timed < runs && status == FAI_OK; timed++) {
            const double start = ft_now_seconds();
            status = fai_run(plan, &data.tensors, workspace, workspace_bytes);
            times[timed] = ft_now_seconds() - start;
        }
        const double seconds = status == FAI_OK ? ft_median(times, timed) : 0.0;
        if (status != FAI_OK) {
            fprintf(stderr, "fai demo: %s: %s\n", shape->name,
                    workspace ? fai_last_error() : "out of memory for the workspace");
            failures++;
        } else {
            double tolerance;
            const double err =
                ft_verify_rows(shape, &data, SAMPLED_ROWS, 77 + (uint64_t)s, &tolerance);
            const int ok = err <= tolerance;
            failures += !ok;
            char problem[64];
            snprintf(problem, sizeof problem, "B%lld Hq%lld Hkv%lld Sq%lld Skv%lld D%lld%s%s",
                     (long long)shape->b, (long long)shape->hq, (long long)shape->hkv,
                     (long long)shape->sq, (long long)shape->skv, (long long)shape->d,
                     shape->causal ? " causal" : "", shape->page_size ? " paged" : "");
            printf("%-5s %-34s %10.2f %10.1f %12.2f %10.2e  %s\n", shape->name, problem,
                   seconds * 1e3, ft_shape_flops(plan, shape) / seconds * 1e-9,
                   ft_shape_kv_bytes(shape) / seconds * 1e-9, err, ok ? "ok" : "FAILED");
        }
        fflush(stdout);
        free(workspace);
        fai_plan_free(plan);
        ft_shape_data_free(&data);
    }
    if (failures) printf("%d shape(s) failed the reference check\n", failures);
    return failures ? 1 : 0;
}
