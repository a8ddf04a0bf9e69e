/* fai bench: the benchmark shapes (or one given by the shape flags) on each thread count, with
 * the median, min and max of several runs, the rates derived from them, and the machine's own
 * limits measured in the same run, so every rate can be read as a fraction of a peak. With
 * --baseline, an unfused CBLAS attention (fai_baseline.h) runs on the same shapes and thread
 * counts in the same run. */
#include "fai_baseline.h"
#include "fai_stats.h"
#include "fai_bench_compare.h"
#include "fai_bench_profile.h"
#include "fai_bench_scaling.h"
#include "fai_bench_wake.h"
#include "fai_cmd.h"
#include "fai_cmd_bench.h"
#include "fai_oracle.h"
#include "fai_peak.h"
#include "fai_shape.h"
#include "fai_verify.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* -- timing ------------------------------------------------------------------------------- */

/* Median, min and max of the run times, in ms. */
static void summarize(double *seconds, int64_t count, double *median_ms, double *min_ms,
                      double *max_ms) {
    *median_ms = ft_median(seconds, count) * 1e3; /* sorts them */
    *min_ms = seconds[0] * 1e3;
    *max_ms = seconds[count - 1] * 1e3;
}

/* Warmup and timed runs of one plan. Returns FAI_OK or the failing run's status. */
static fai_status time_runs(const fai_plan *plan, const ft_shape_data *data, void *workspace,
                            size_t workspace_bytes, const bench_options *opt, double *seconds) {
    for (int64_t r = 0; r < opt->warmup + opt->runs; r++) {
        if (opt->evictor) ft_evict(opt->evictor);
        const double start = ft_now_seconds();
        const fai_status status = fai_run(plan, &data->tensors, workspace, workspace_bytes);
        if (status != FAI_OK) return status;
        if (r >= opt->warmup) seconds[r - opt->warmup] = ft_now_seconds() - start;
    }
    return FAI_OK;
}

/* The median time of fai_check_tensors: what fai_run spends checking before it computes (the
 * block-table walk, for paged shapes), and what trust_block_table saves. */
static double time_checks(const fai_plan *plan, const ft_shape_data *data) {
    enum { ROUNDS = 15, CALLS = 64 };
    double per_call[ROUNDS];
    for (int round = 0; round < ROUNDS; round++) {
        const double start = ft_now_seconds();
        for (int call = 0; call < CALLS; call++)
            fai_check_tensors(plan, &data->tensors);
        per_call[round] = (ft_now_seconds() - start) / CALLS;
    }
    return ft_median(per_call, ROUNDS) * 1e6;
}

/* Plans the shape for `threads` workers on the pool of that many threads and times it.
 * Returns 0, or -1 after printing why. */
static int bench_one(const ft_shape *shape, const ft_shape_data *data, fai_pool *pool,
                     int64_t threads, const bench_options *opt, bench_result *result) {
    fai_problem problem = data->problem;
    fai_plan *plan = NULL;
    problem.threads = threads;
    problem.workers = threads * opt->pieces;
    if (fai_plan_create(&problem, &plan) != FAI_OK) {
        fprintf(stderr, "fai bench: %s: %s\n", shape->name, fai_last_error());
        return -1;
    }
    fai_plan_set_pool(plan, pool);
    fai_plan_get_info(plan, &result->info);
    const size_t workspace_bytes = result->info.workspace_bytes;
    void *workspace = aligned_alloc(64, (workspace_bytes + 64) / 64 * 64);
    double *seconds = malloc((size_t)opt->runs * sizeof *seconds);
    fai_status status = workspace && seconds ? FAI_OK : FAI_ERR_NO_MEMORY;
    if (status == FAI_OK) status = time_runs(plan, data, workspace, workspace_bytes, opt, seconds);
    if (status == FAI_OK) {
        result->threads = threads;
        result->flops = ft_shape_flops(plan, shape);
        result->kv_bytes = ft_shape_kv_bytes(shape);
        summarize(seconds, opt->runs, &result->median_ms, &result->min_ms, &result->max_ms);
        result->check_us = time_checks(plan, data);
        if (opt->profile)
            status = ft_bench_profile_run(plan, &data->tensors, workspace, workspace_bytes,
                                          opt->runs, &result->profile);
        if (opt->profile && status == FAI_OK)
            status = ft_bench_overlap_run(plan, &data->tensors, workspace, workspace_bytes,
                                          opt->runs, &result->overlap);
    }
    if (status != FAI_OK) {
        fprintf(stderr, "fai bench: %s: %s %s\n", shape->name, fai_status_string(status),
                fai_last_error());
    }
    free(seconds);
    free(workspace);
    fai_plan_free(plan);
    return status == FAI_OK ? 0 : -1;
}

/* The baseline's warmup and timed runs on `threads` threads. Returns 0, or -1 after printing
 * why. */
static int bench_baseline(const ft_shape *shape, ft_baseline *baseline, int64_t threads,
                          const bench_options *opt, baseline_result *result) {
    double *seconds = malloc((size_t)opt->runs * sizeof *seconds);
    int status = seconds ? 0 : -1;
    for (int64_t r = 0; r < opt->warmup + opt->runs && !status; r++) {
        if (opt->evictor) ft_evict(opt->evictor);
        const double start = ft_now_seconds();
        status = ft_baseline_run(baseline, threads);
        if (r >= opt->warmup) seconds[r - opt->warmup] = ft_now_seconds() - start;
    }
    if (!status) {
        summarize(seconds, opt->runs, &result->median_ms, &result->min_ms, &result->max_ms);
        result->score_bytes = ft_baseline_score_bytes(baseline);
        result->gemm_flops = ft_baseline_gemm_flops(baseline);
    } else {
        fprintf(stderr, "fai bench: %s: baseline on %lld threads: out of memory\n", shape->name,
                (long long)threads);
    }
    free(seconds);
    return status;
}

/* -- driver ------------------------------------------------------------------------------- */

static int64_t max_threads(const bench_options *opt) {
    int64_t most = 1;
    for (int t = 0; t < opt->thread_count; t++)
        most = opt->threads[t] > most ? opt->threads[t] : most;
    return most;
}

/* Every thread count of one shape, fai and then (with --baseline) the unfused baseline; the
 * first thread count that runs has fai's output checked against fp64 and the baseline's against
 * fai's. Returns the number of failures (a failed check or run). */
static int bench_shape(const ft_shape *shape, uint64_t seed, fai_pool **pools,
                       const bench_options *opt, const ft_peak *peaks) {
    ft_shape_data data;
    ft_baseline *baseline = NULL;
    if (ft_shape_data_create(shape, seed, &data)) {
        fprintf(stderr, "fai bench: %s: %s\n", shape->name, ft_shape_data_error());
        ft_shape_data_free(&data);
        return 1;
    }
    /* the unfused baseline knows no score modifiers: shapes with them run without it */
    const int modifiers = shape->softcap > 0.0f || shape->alibi || shape->sinks;
    if (opt->baseline && !modifiers &&
        ft_baseline_create(shape, &data, max_threads(opt), &baseline)) {
        fprintf(stderr, "fai bench: %s: out of memory for the baseline\n", shape->name);
        ft_shape_data_free(&data);
        return 1;
    }
    /* the baseline is fp32 throughout, with roundings of its own: fai agrees with it within
     * 2e-3, or within fai's own bound where that is larger (a bf16 output's rounding) */
    bench_check check = {0.0, ft_verify_tolerance(shape), 0, 0.0,
                         fmax(2e-3, ft_verify_tolerance(shape))};
    int failures = 0, baseline_checked = 0;
    for (int t = 0; t < opt->thread_count; t++) {
        bench_result result;
        baseline_result base;
        if (bench_one(shape, &data, pools[t], opt->threads[t], opt, &result)) {
            failures++;
            continue;
        }
        if (!check.threads) {
            check.threads = opt->threads[t];
            check.max_err = ft_verify_rows(shape, &data, SAMPLED_ROWS, seed + 77, &check.tolerance);
            failures += !(check.max_err <= check.tolerance);
        }
        const int have_base =
            baseline && !bench_baseline(shape, baseline, opt->threads[t], opt, &base);
        failures += baseline && !have_base;
        if (have_base && !baseline_checked) { /* data.o still holds this thread count's fai run */
            baseline_checked = 1;
            check.baseline_diff = ft_baseline_compare(baseline, &data, SAMPLED_ROWS, seed + 78);
            failures += !ft_bench_baseline_ok(&check);
        }
        const ft_peak *peak = peaks ? &peaks[t] : NULL;
        if (opt->json)
            ft_bench_print_json(shape, &result, &check, opt, peak, have_base ? &base : NULL);
        else
            ft_bench_print_row(shape, &result, &check, peak, have_base ? &base : NULL);
        if (!opt->json && opt->profile) {
            ft_bench_profile_print(&result.profile, result.median_ms);
            ft_bench_overlap_print(&result.overlap);
        }
        fflush(stdout);
    }
    if (opt->scaling && !failures &&
        ft_bench_scaling(shape, &data, pools, opt->threads, opt->thread_count, 3 * opt->runs,
                         opt->pieces, opt->evictor, opt->json, peaks))
        failures++;
    ft_baseline_free(baseline);
    ft_shape_data_free(&data);
    return failures;
}

/* Runs every shape on one pool per thread count, so each count is exactly that many threads. */
static int bench_all(const bench_options *opt, const ft_peak *peaks) {
    fai_pool *pools[MAX_THREAD_COUNTS] = {0};
    int failures = 0;
    for (int t = 0; t < opt->thread_count && !failures; t++) {
        if (fai_pool_create(opt->threads[t], &pools[t]) != FAI_OK) {
            fprintf(stderr, "fai bench: pool of %lld threads: %s\n", (long long)opt->threads[t],
                    fai_last_error());
            failures++;
        }
    }
    if (!opt->json && !failures) ft_bench_print_table_header(opt->baseline);
    const int group = opt->kv_dtype_count;
    for (int s = 0; s < opt->shape_count && !failures; s++) {
        failures += bench_shape(&opt->shapes[s], 1000 + (uint64_t)s, pools, opt, peaks);
        /* after the last dtype of a --kv-dtypes group, the group's interleaved comparison */
        if (!failures && s < opt->compared_shapes && (s + 1) % group == 0)
            failures += ft_bench_compare(&opt->shapes[s + 1 - group], group, 1000 + (uint64_t)s,
                                         pools, opt->threads, opt->thread_count, 3 * opt->runs,
                                         opt->pieces, opt->evictor, opt->json) != 0;
    }
    for (int t = 0; t < opt->thread_count && opt->wake && !failures; t++)
        if (opt->threads[t] > 1)
            failures += ft_bench_wake(pools[t], opt->threads[t], 3 * opt->runs, opt->json) != 0;
    for (int t = 0; t < opt->thread_count; t++)
        fai_pool_free(pools[t]);
    if (failures && !opt->json) fprintf(stderr, "fai bench: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}

/* Says which BLAS the baseline runs (table only), and warns on stderr about the OpenBLAS
 * variables that slow it down here; they are left as they are. */
static void announce_baseline(const bench_options *opt) {
    const char *coretype = getenv("OPENBLAS_CORETYPE"), *l2 = getenv("OPENBLAS_L2_SIZE");
    if (!opt->json)
        printf("baseline: unfused fp32 attention with CBLAS SGEMMs, single-threaded BLAS,\n"
               "  (batch, kv head) pairs across threads; Q, K, V converted to f32 and paged\n"
               "  K/V gathered before timing. speedup = baseline median / fai median;\n"
               "  base_GF/s counts the same useful FLOPs as GFLOP/s; S_MiB = the scores of\n"
               "  one (batch, kv head), one per thread.\n"
               "  BLAS: %s\n\n",
               ft_baseline_blas());
    if (coretype || l2)
        fprintf(stderr,
                "fai bench: note: %s%s%s%s%s in the environment may slow OpenBLAS down; for its "
                "best run: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE fai bench --baseline\n",
                coretype ? "OPENBLAS_CORETYPE=" : "", coretype ? coretype : "",
                coretype && l2 ? " and " : "", l2 ? "OPENBLAS_L2_SIZE=" : "", l2 ? l2 : "");
}

int ft_cmd_bench(int argc, char **argv) {
    static bench_options opt; /* large: the shapes are kept by value */
    ft_bench_options_init(&opt);
    const int status = ft_bench_read_command_line(&opt, argc, argv);
    if (status >= 0) return status;
    if (opt.baseline && !ft_baseline_available()) {
        fprintf(stderr, "fai bench: --baseline: no CBLAS was found at build time; timing fai "
                        "alone\n");
        opt.baseline = 0;
    }
    ft_peak peaks[MAX_THREAD_COUNTS];
    int have_peaks = opt.peaks;
    if (have_peaks && ft_peak_measure(opt.threads, opt.thread_count, peaks)) {
        fprintf(stderr, "fai bench: machine peaks not measured (no 1 GiB buffer or threads)\n");
        have_peaks = 0;
    }
    if (have_peaks) ft_bench_print_peaks(&opt, peaks);
    if (opt.baseline) announce_baseline(&opt);
    static ft_evictor evictor;
    if (opt.cold) {
        if (ft_evictor_init(&evictor)) {
            fprintf(stderr, "fai bench: --cold: out of memory for the buffer that empties the "
                            "caches\n");
            return 1;
        }
        opt.evictor = &evictor;
        if (!opt.json)
            printf(
                "cold: before every timed run, %.0f MiB read to empty the caches (not timed)\n\n",
                (double)evictor.bytes / (1 << 20));
    }
    const int failed = bench_all(&opt, have_peaks ? peaks : NULL);
    ft_evictor_free(&evictor);
    return failed;
}
