/* fai bench: the benchmark shapes (or one given by the shape flags) on each thread count, with
 * the median, min and max of several runs, the rates derived from them, and the machine's own
 * limits measured in the same run, so every rate can be read as a fraction of a peak. With
 * --baseline, an unfused CBLAS attention (fai_baseline.h) runs on the same shapes and thread
 * counts in the same run. */
#include "fai_baseline.h"
#include "fai_stats.h"
#include "fai_bench_profile.h"
#include "fai_bench_scaling.h"
#include "fai_bench_wake.h"
#include "fai_cmd.h"
#include "fai_json.h"
#include "fai_oracle.h"
#include "fai_peak.h"
#include "fai_shape.h"
#include "fai_verify.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SHAPES 64
#define MAX_THREAD_COUNTS 64
#define MAX_RUNS 1000
#define SAMPLED_ROWS 8 /* enough to catch a wrong tile or page; cheap even on D2 */

typedef struct bench_options {
    ft_shape shapes[MAX_SHAPES];
    int shape_count;
    int64_t threads[MAX_THREAD_COUNTS];
    int thread_count;
    int64_t runs, warmup;
    int64_t pieces; /* workers per thread */
    int json, peaks, bf16_too, baseline, profile, scaling, wake;
} bench_options;

/* One (shape, thread count) measurement. */
typedef struct bench_result {
    int64_t threads;
    double median_ms, min_ms, max_ms;
    double flops, kv_bytes;
    double check_us; /* median cost of fai_run's tensor checks (block table included) */
    fai_plan_info info;
    ft_bench_profile profile; /* with --profile */
} bench_result;

/* The unfused baseline on one (shape, thread count): its times and its score matrix. */
typedef struct baseline_result {
    double median_ms, min_ms, max_ms;
    double score_bytes; /* S of one (batch, kv head); each running thread holds one */
    double gemm_flops;  /* what its GEMMs execute, masked products included */
} baseline_result;

/* The shape's fp64 spot check, done once per shape on the first thread count's output. */
typedef struct bench_check {
    double max_err, tolerance;
    int64_t threads;
    double baseline_diff, baseline_tolerance; /* baseline against fai, on sampled rows */
} bench_check;

static void print_usage(FILE *out) {
    fprintf(
        out,
        "usage: fai bench [SHAPE ...] [shape flags] [--threads LIST] [--runs N] [--warmup N]\n"
        "                 [--pieces N] [--scaling] [--wake]\n"
        "                 [--bf16-too] [--baseline] [--profile] [--json] [--no-peaks] [--help]\n"
        "Times fai_run on each shape and thread count: median, min and max of --runs runs\n"
        "(default 7) after --warmup runs (default 1), GFLOP/s of useful work (2*D + 2*Dv\n"
        "per visible (query, key) pair) and GB/s of K/V that must be read. Each shape's\n"
        "output is checked on %d sampled rows against an fp64 reference (on the first\n"
        "thread count). Unless --no-peaks, the machine's fp32 FMA, bf16 dot-product and\n"
        "AMX tile (where the CPU has it) GFLOP/s and DRAM read GB/s are measured first on\n"
        "the same thread counts, and every rate is also given as a fraction of them (%%amx:\n"
        "of plans that run on the AMX table).\n\n"
        "  SHAPE          P1 P2 D1 D2 C1 (default: all five; Q f32, K/V f16, O f32), or the\n"
        "                 model shapes beside themselves without their score modifiers: O1 O1S\n"
        "                 (gpt-oss-like prefill, window 128, sinks), O2 O2S (its batched\n"
        "                 decode), G1 G1C (Gemma-2-like, D 256, window 4096, softcap 50)\n"
        "  shape flags    describe one shape, or change every named shape\n"
        "  --threads LIST comma-separated thread counts (default: 1, 2, 4, ... and the\n"
        "                 number of online CPUs); each runs on its own pool, workers = threads\n"
        "  --scaling      then the speedup of each thread count over the first, as the median\n"
        "                 of --runs x 3 interleaved rounds (one run of every count per round)\n"
        "  --wake         then, per thread count above 1, a tiny decode's latency right\n"
        "                 after another run and after the pool idled 50 ms (its helpers\n"
        "                 asleep), beside the calling thread alone (medians of --runs x 3)\n"
        "  --pieces N     workers per thread (default 1): threads take workers from a shared\n"
        "                 counter, so smaller pieces let a faster thread take more of them\n"
        "  --bf16-too     also run each shape with Q, K, V and O all bf16\n"
        "  --json         one JSON object per line: the peaks, then one per (shape, threads)\n"
        "  --no-peaks     skip the machine-limit probes (about 1 s per thread count)\n"
        "  --profile      also run each plan --runs times with stage timers (fai_run_profiled):\n"
        "                 each stage's share of the kernel time (pack_q, pack_kv, qk, softmax,\n"
        "                 rescale, pv, store, merge, other) and each thread's busy and idle\n"
        "                 share of the wall time; the timed runs above carry no timers\n"
        "  --baseline     also time, on the same shapes and thread counts, an unfused fp32\n"
        "                 attention with CBLAS SGEMMs (S = scale Q K^T for each batch and kv\n"
        "                 head with the GQA group's heads stacked, row softmax, O = P V; pairs\n"
        "                 across threads, each BLAS single-threaded; Q, K, V converted to f32\n"
        "                 and paged K/V gathered before timing), and give fai's speedup over\n"
        "                 it; its output must agree with fai's within 2e-3 on sampled rows.\n"
        "                 Needs a CBLAS at build time (this build: %s). OpenBLAS honours\n"
        "                 OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE, which can slow it down: run\n"
        "                 env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE fai bench --baseline\n\n%s"
        "\nExit status: 0 success, 1 a check failed, 2 bad options or shape.\n",
        SAMPLED_ROWS, ft_baseline_available() ? "yes" : "none found", ft_shape_usage);
}

/* -- options ------------------------------------------------------------------------------ */

static int same_geometry(const ft_shape *a, const ft_shape *b) {
    return a->b == b->b && a->hq == b->hq && a->hkv == b->hkv && a->sq == b->sq &&
           a->skv == b->skv && a->d == b->d && a->dv == b->dv && a->causal == b->causal &&
           a->window_left == b->window_left && a->window_right == b->window_right &&
           a->page_size == b->page_size;
}

static const ft_shape *named_shape(const char *text) {
    for (int s = 0; s < ft_shape_count; s++)
        if (!strcmp(text, ft_shape_table[s].name)) return &ft_shape_table[s];
    return NULL;
}

static int add_shape(bench_options *opt, const ft_shape *shape) {
    if (opt->shape_count == MAX_SHAPES) {
        fprintf(stderr, "fai bench: more than %d shapes\n", MAX_SHAPES);
        return -1;
    }
    opt->shapes[opt->shape_count++] = *shape;
    return 0;
}

/* Sorts the arguments ft_shape_parse consumed into shape names and flags with their values
 * (flags[0] stays unused: ft_shape_parse reads from argv[1]). */
static int split_shape_args(int argc, char **argv, const char *used, const ft_shape **bases,
                            int *base_count, char **flags, int *flag_count) {
    for (int i = 1; i < argc; i++) {
        if (!used[i]) continue;
        if (!named_shape(argv[i])) {
            flags[(*flag_count)++] = argv[i];
        } else if (*base_count == MAX_SHAPES) {
            fprintf(stderr, "fai bench: more than %d shapes\n", MAX_SHAPES);
            return -1;
        } else {
            bases[(*base_count)++] = named_shape(argv[i]);
        }
    }
    return 0;
}

/* The flags apply to each named shape, or to ft_shape_custom_base when none is named (no names and
 * no flags: the benchmark shapes); a shape whose geometry they change is called "custom", as in
 * `fai plan`. */
static int build_shapes(bench_options *opt, int argc, char **argv, const char *used) {
    const ft_shape *bases[MAX_SHAPES];
    int base_count = 0, flag_count = 1;
    char **flags = calloc((size_t)argc + 1, sizeof *flags);
    char *scratch = calloc((size_t)argc + 1, 1);
    int status = flags && scratch ? 0 : -1;
    if (!status)
        status = split_shape_args(argc, argv, used, bases, &base_count, flags, &flag_count);
    if (!base_count && flag_count > 1) bases[base_count++] = &ft_shape_custom_base;
    if (!base_count)
        for (int s = 0; s < ft_shape_default_count; s++)
            bases[base_count++] = &ft_shape_table[s];
    for (int s = 0; s < base_count && !status; s++) {
        ft_shape shape = *bases[s];
        /* the parser skips what it has marked used: every shape takes all the flags afresh */
        memset(scratch, 0, (size_t)argc + 1);
        status = ft_shape_parse(flag_count, flags, scratch, &shape, "bench");
        snprintf(shape.name, sizeof shape.name, "%s",
                 same_geometry(&shape, bases[s]) ? bases[s]->name : "custom");
        if (!status) status = add_shape(opt, &shape);
    }
    free(flags);
    free(scratch);
    return status;
}

static int add_bf16_variants(bench_options *opt) {
    const int count = opt->shape_count;
    for (int s = 0; s < count; s++) {
        ft_shape shape = opt->shapes[s];
        if (shape.q_dtype == FAI_DTYPE_BF16 && shape.kv_dtype == FAI_DTYPE_BF16 &&
            shape.out_dtype == FAI_DTYPE_BF16)
            continue; /* already all-bf16 */
        shape.q_dtype = shape.kv_dtype = shape.out_dtype = FAI_DTYPE_BF16;
        if (add_shape(opt, &shape)) return -1;
    }
    return 0;
}

static int parse_thread_list(const char *text, bench_options *opt) {
    opt->thread_count = 0;
    while (opt->thread_count < MAX_THREAD_COUNTS) {
        char item[32];
        const size_t length = strcspn(text, ",");
        if (length >= sizeof item) return -1;
        memcpy(item, text, length);
        item[length] = 0;
        if (ft_parse_int64(item, 1, FAI_MAX_WORKERS, &opt->threads[opt->thread_count++])) return -1;
        if (!text[length]) return 0;
        text += length + 1;
    }
    return -1;
}

/* 1, 2, 4, ... up to the online CPUs, and the CPU count itself. */
static void default_threads(bench_options *opt) {
    const int64_t cpus = fai_cpu_count();
    opt->thread_count = 0;
    for (int64_t t = 1; t < cpus && opt->thread_count < MAX_THREAD_COUNTS - 1; t *= 2)
        opt->threads[opt->thread_count++] = t;
    opt->threads[opt->thread_count++] = cpus;
}

/* The value of an option that takes one: 0, or -1 after one line on stderr. */
static int parse_value(bench_options *opt, const char *arg, const char *value) {
    int bad = !value;
    if (!bad && !strcmp(arg, "--threads"))
        bad = parse_thread_list(value, opt);
    else if (!bad && !strcmp(arg, "--runs"))
        bad = ft_parse_int64(value, 1, MAX_RUNS, &opt->runs);
    else if (!bad && !strcmp(arg, "--pieces"))
        bad = ft_parse_int64(value, 1, 64, &opt->pieces);
    else if (!bad)
        bad = ft_parse_int64(value, 0, MAX_RUNS, &opt->warmup);
    if (bad)
        fprintf(stderr, "fai bench: %s needs %s, got '%s'\n", arg,
                !strcmp(arg, "--threads")  ? "a comma-separated list of integers 1..1024"
                : !strcmp(arg, "--runs")   ? "an integer 1..1000"
                : !strcmp(arg, "--pieces") ? "an integer 1..64"
                                           : "an integer 0..1000",
                value ? value : "");
    return bad ? -1 : 0;
}

/* Options other than the shape's. Returns 0, 1 after --help, or -1 after one line on stderr. */
static int parse_options(bench_options *opt, int argc, char **argv, const char *used) {
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (used[i]) continue;
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) return 1;
        if (!strcmp(arg, "--json"))
            opt->json = 1;
        else if (!strcmp(arg, "--no-peaks"))
            opt->peaks = 0;
        else if (!strcmp(arg, "--bf16-too"))
            opt->bf16_too = 1;
        else if (!strcmp(arg, "--baseline"))
            opt->baseline = 1;
        else if (!strcmp(arg, "--profile"))
            opt->profile = 1;
        else if (!strcmp(arg, "--scaling"))
            opt->scaling = 1;
        else if (!strcmp(arg, "--wake"))
            opt->wake = 1;
        else if (!strcmp(arg, "--threads") || !strcmp(arg, "--runs") || !strcmp(arg, "--warmup") ||
                 !strcmp(arg, "--pieces")) {
            if (parse_value(opt, arg, i + 1 < argc ? argv[i + 1] : NULL)) return -1;
            i++;
        } else {
            fprintf(stderr, "fai bench: unknown option '%s' (fai bench --help)\n", arg);
            return -1;
        }
    }
    return 0;
}

/* -- validation --------------------------------------------------------------------------- */

/* Plans every shape once before anything is measured, so a bad shape costs no probe time. */
static int validate_shapes(const bench_options *opt) {
    for (int s = 0; s < opt->shape_count; s++) {
        const ft_shape *shape = &opt->shapes[s];
        int32_t *seqlens_kv = calloc((size_t)shape->b + 1, sizeof *seqlens_kv);
        fai_problem problem;
        fai_plan *plan = NULL;
        if (!seqlens_kv) return -1;
        ft_shape_problem(shape, &problem, seqlens_kv);
        problem.workers = problem.threads = 1;
        const fai_status status = fai_plan_create(&problem, &plan);
        if (status != FAI_OK)
            fprintf(stderr, "fai bench: shape %s: %s\n", shape->name, fai_last_error());
        fai_plan_free(plan);
        free(seqlens_kv);
        if (status != FAI_OK) return -1;
    }
    return 0;
}

/* -- timing ------------------------------------------------------------------------------- */

/* Median, min and max of the run times, in ms. */
static void summarize(double *seconds, int64_t count, double *median_ms, double *min_ms,
                      double *max_ms) {
    qsort(seconds, (size_t)count, sizeof *seconds, ft_compare_double);
    const double median =
        count % 2 ? seconds[count / 2] : 0.5 * (seconds[count / 2 - 1] + seconds[count / 2]);
    *median_ms = median * 1e3;
    *min_ms = seconds[0] * 1e3;
    *max_ms = seconds[count - 1] * 1e3;
}

/* Warmup and timed runs of one plan. Returns FAI_OK or the failing run's status. */
static fai_status time_runs(const fai_plan *plan, const ft_shape_data *data, void *workspace,
                            size_t workspace_bytes, const bench_options *opt, double *seconds) {
    for (int64_t r = 0; r < opt->warmup + opt->runs; r++) {
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
    qsort(per_call, ROUNDS, sizeof *per_call, ft_compare_double);
    return per_call[ROUNDS / 2] * 1e6;
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

/* -- output ------------------------------------------------------------------------------- */

static int is_all_bf16(const ft_shape *shape) {
    return shape->q_dtype == FAI_DTYPE_BF16 && shape->kv_dtype == FAI_DTYPE_BF16;
}

/* Decode (one query per sequence) is a stream over K and V: its yardstick is read bandwidth. */
static int is_decode(const ft_shape *shape) { return shape->sq == 1; }

static double gflops(const bench_result *r) { return r->flops / r->median_ms * 1e-6; }
static double kv_gbps(const bench_result *r) { return r->kv_bytes / r->median_ms * 1e-6; }

static const char *causal_name(fai_causal causal) {
    return causal == FAI_CAUSAL_BOTTOM_RIGHT ? "bottom-right"
           : causal == FAI_CAUSAL_TOP_LEFT   ? "top-left"
                                             : "none";
}

/* A JSON number: non-finite values (an empty shape's rate) become null. */
static void json_number(ft_json *json, const char *key, double value) {
    ft_json_number(json, key, "%.6g", value);
}

static void json_shape_fields(ft_json *json, const ft_shape *shape) {
    ft_json_string(json, "shape", shape->name);
    ft_json_string(json, "q_dtype", fai_dtype_name(shape->q_dtype));
    ft_json_string(json, "kv_dtype", fai_dtype_name(shape->kv_dtype));
    ft_json_string(json, "out_dtype", fai_dtype_name(shape->out_dtype));
    ft_json_int(json, "b", shape->b);
    ft_json_int(json, "hq", shape->hq);
    ft_json_int(json, "hkv", shape->hkv);
    ft_json_int(json, "sq", shape->sq);
    ft_json_int(json, "skv", shape->skv);
    ft_json_int(json, "d", shape->d);
    ft_json_int(json, "dv", shape->dv);
    ft_json_string(json, "causal", causal_name(shape->causal));
    ft_json_int(json, "window_left", shape->window_left);
    ft_json_int(json, "window_right", shape->window_right);
    ft_json_int(json, "page_size", shape->page_size);
    ft_json_number(json, "softcap", "%g", (double)shape->softcap);
    ft_json_bool(json, "alibi", shape->alibi);
    ft_json_bool(json, "sinks", shape->sinks);
}

static void json_peak_ratios(ft_json *json, const ft_shape *shape, const bench_result *r,
                             const ft_peak *p) {
    json_number(json, "peak_fp32_gflops", p->fp32_gflops);
    json_number(json, "fp32_peak_ratio", gflops(r) / p->fp32_gflops);
    if (p->bf16_gflops > 0) json_number(json, "peak_bf16_gflops", p->bf16_gflops);
    if (p->bf16_gflops > 0 && is_all_bf16(shape))
        json_number(json, "bf16_peak_ratio", gflops(r) / p->bf16_gflops);
    if (p->amx_gflops > 0) json_number(json, "peak_amx_gflops", p->amx_gflops);
    if (p->amx_gflops > 0 && !strcmp(r->info.isa, "amx") && !is_decode(shape))
        json_number(json, "amx_peak_ratio", gflops(r) / p->amx_gflops);
    json_number(json, "peak_read_gbps", p->read_gbps);
    if (is_decode(shape)) json_number(json, "bw_ratio", kv_gbps(r) / p->read_gbps);
}

static int baseline_ok(const bench_check *check) {
    return check->baseline_diff <= check->baseline_tolerance;
}

/* The baseline's keys: its times and rate (the same useful FLOPs as fai's), fai's speedup over
 * it (baseline median / fai median), its score matrix and its agreement with fai. */
static void json_baseline(ft_json *json, const bench_result *r, const baseline_result *base,
                          const bench_check *check, const ft_peak *peak) {
    json_number(json, "baseline_median_ms", base->median_ms);
    json_number(json, "baseline_min_ms", base->min_ms);
    json_number(json, "baseline_max_ms", base->max_ms);
    json_number(json, "baseline_gflops", r->flops / base->median_ms * 1e-6);
    if (peak)
        json_number(json, "baseline_fp32_peak_ratio",
                    r->flops / base->median_ms * 1e-6 / peak->fp32_gflops);
    json_number(json, "speedup_vs_baseline", base->median_ms / r->median_ms);
    ft_json_number(json, "baseline_gemm_flops", "%.0f", base->gemm_flops);
    ft_json_number(json, "baseline_score_bytes", "%.0f", base->score_bytes);
    json_number(json, "baseline_max_diff", check->baseline_diff);
    json_number(json, "baseline_tolerance", check->baseline_tolerance);
    ft_json_string(json, "baseline_check", baseline_ok(check) ? "ok" : "failed");
    ft_json_string(json, "baseline_blas", ft_baseline_blas());
}

static void print_json(const ft_shape *shape, const bench_result *r, const bench_check *check,
                       const bench_options *opt, const ft_peak *peak, const baseline_result *base) {
    ft_json json;
    ft_json_init(&json, stdout, 0);
    ft_json_object(&json, NULL);
    json_shape_fields(&json, shape);
    ft_json_int(&json, "threads", r->threads);
    ft_json_int(&json, "workers", r->info.workers);
    ft_json_int(&json, "runs", opt->runs);
    ft_json_int(&json, "warmup", opt->warmup);
    json_number(&json, "median_ms", r->median_ms);
    json_number(&json, "min_ms", r->min_ms);
    json_number(&json, "max_ms", r->max_ms);
    json_number(&json, "gflops", gflops(r));
    json_number(&json, "kv_gbps", kv_gbps(r));
    ft_json_number(&json, "flops", "%.0f", r->flops); /* exact counts */
    ft_json_number(&json, "kv_bytes", "%.0f", r->kv_bytes);
    ft_json_int(&json, "workspace_bytes", (long long)r->info.workspace_bytes);
    ft_json_string(&json, "isa", r->info.isa);
    ft_json_int(&json, "tile_q", r->info.tile_q);
    ft_json_int(&json, "tile_kv", r->info.tile_kv);
    json_number(&json, "imbalance", r->info.imbalance);
    json_number(&json, "check_us", r->check_us);
    json_number(&json, "check_ratio", r->check_us * 1e-3 / r->median_ms);
    json_number(&json, "max_err", check->max_err);
    json_number(&json, "tolerance", check->tolerance);
    ft_json_int(&json, "checked_threads", check->threads);
    ft_json_string(&json, "check", check->max_err <= check->tolerance ? "ok" : "failed");
    if (peak) json_peak_ratios(&json, shape, r, peak);
    if (base) json_baseline(&json, r, base, check, peak);
    if (opt->profile) ft_bench_profile_json(&json, &r->profile, r->median_ms);
    ft_json_end(&json);
}

static void print_table_header(int baseline) {
    printf("%-6s %-14s %3s %10s %10s %10s %9s %6s %6s %6s %8s %6s %8s %10s %-6s %s", "shape",
           "q/kv/out", "thr", "median_ms", "min_ms", "max_ms", "GFLOP/s", "%fp32", "%bf16", "%amx",
           "KV_GB/s", "%read", "check_us", "workspace", "isa", "check (max_err)");
    if (baseline)
        printf(" %10s %9s %8s %8s %s", " base_ms", "base_GF/s", "speedup", "S_MiB",
               "base_check (diff)");
    printf("\n");
}

/* A percentage column, or "-" where the ratio does not apply. */
static void print_percent(int applies, double value, double peak) {
    if (applies && peak > 0)
        printf(" %6.1f", 100.0 * value / peak);
    else
        printf(" %6s", "-");
}

static void print_row(const ft_shape *shape, const bench_result *r, const bench_check *check,
                      const ft_peak *peak, const baseline_result *base) {
    char dtypes[32];
    snprintf(dtypes, sizeof dtypes, "%s/%s/%s", fai_dtype_name(shape->q_dtype),
             fai_dtype_name(shape->kv_dtype), fai_dtype_name(shape->out_dtype));
    printf("%-6s %-14s %3lld %10.3f %10.3f %10.3f %9.1f", shape->name, dtypes,
           (long long)r->threads, r->median_ms, r->min_ms, r->max_ms, gflops(r));
    print_percent(peak != NULL, gflops(r), peak ? peak->fp32_gflops : 0);
    print_percent(peak && is_all_bf16(shape), gflops(r), peak ? peak->bf16_gflops : 0);
    /* decode plans on the amx table run on the vector unit: their %read is what counts */
    print_percent(peak && !strcmp(r->info.isa, "amx") && !is_decode(shape), gflops(r),
                  peak ? peak->amx_gflops : 0);
    printf(" %8.2f", kv_gbps(r));
    print_percent(peak && is_decode(shape), kv_gbps(r), peak ? peak->read_gbps : 0);
    char verdict[32];
    snprintf(verdict, sizeof verdict, "%s (%.1e)",
             check->max_err <= check->tolerance ? "ok" : "FAILED", check->max_err);
    printf(" %8.2f %10zu %-6s %-*s", r->check_us, r->info.workspace_bytes, r->info.isa,
           base ? 15 : 0, verdict);
    if (base)
        printf(" %10.3f %9.1f %8.2f %8.1f %s (%.1e)", base->median_ms,
               r->flops / base->median_ms * 1e-6, base->median_ms / r->median_ms,
               base->score_bytes / (1024.0 * 1024.0), baseline_ok(check) ? "ok" : "FAILED",
               check->baseline_diff);
    printf("\n");
}

static void print_peaks(const bench_options *opt, const ft_peak *peaks) {
    if (opt->json) {
        ft_json json;
        ft_json_init(&json, stdout, 0);
        ft_json_object(&json, NULL);
        ft_json_array(&json, "peaks");
        for (int t = 0; t < opt->thread_count; t++) {
            ft_json_object(&json, NULL);
            ft_json_int(&json, "threads", peaks[t].threads);
            ft_json_string(&json, "isa", ft_peak_isa());
            json_number(&json, "peak_fp32_gflops", peaks[t].fp32_gflops);
            if (ft_peak_has_bf16()) json_number(&json, "peak_bf16_gflops", peaks[t].bf16_gflops);
            if (ft_peak_has_amx()) json_number(&json, "peak_amx_gflops", peaks[t].amx_gflops);
            json_number(&json, "peak_read_gbps", peaks[t].read_gbps);
            ft_json_end(&json);
        }
        ft_json_end(&json);
        ft_json_end(&json);
        return;
    }
    printf("machine peaks, measured now (median of 5 passes; fp32 FMA and read probes: %s)\n",
           ft_peak_isa());
    printf("%7s %13s %13s %13s %10s\n", "threads", "fp32 GFLOP/s", "bf16 GFLOP/s", "AMX GFLOP/s",
           "read GB/s");
    for (int t = 0; t < opt->thread_count; t++) {
        printf("%7lld %13.1f ", (long long)peaks[t].threads, peaks[t].fp32_gflops);
        if (ft_peak_has_bf16())
            printf("%13.1f", peaks[t].bf16_gflops);
        else
            printf("%13s", "-");
        if (ft_peak_has_amx())
            printf(" %13.1f", peaks[t].amx_gflops);
        else
            printf(" %13s", "-");
        printf(" %10.1f\n", peaks[t].read_gbps);
    }
    printf("\n");
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
        fprintf(stderr, "fai bench: %s: out of memory for the tensors\n", shape->name);
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
    /* the baseline is fp32 throughout; fai's rounding to an f16 or bf16 output comes on top */
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
            failures += !baseline_ok(&check);
        }
        const ft_peak *peak = peaks ? &peaks[t] : NULL;
        if (opt->json)
            print_json(shape, &result, &check, opt, peak, have_base ? &base : NULL);
        else
            print_row(shape, &result, &check, peak, have_base ? &base : NULL);
        if (!opt->json && opt->profile) ft_bench_profile_print(&result.profile, result.median_ms);
        fflush(stdout);
    }
    if (opt->scaling && !failures &&
        ft_bench_scaling(shape, &data, pools, opt->threads, opt->thread_count, 3 * opt->runs,
                         opt->pieces, opt->json, peaks))
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
    if (!opt->json && !failures) print_table_header(opt->baseline);
    for (int s = 0; s < opt->shape_count && !failures; s++)
        failures += bench_shape(&opt->shapes[s], 1000 + (uint64_t)s, pools, opt, peaks);
    for (int t = 0; t < opt->thread_count && opt->wake && !failures; t++)
        if (opt->threads[t] > 1)
            failures += ft_bench_wake(pools[t], opt->threads[t], 3 * opt->runs, opt->json) != 0;
    for (int t = 0; t < opt->thread_count; t++)
        fai_pool_free(pools[t]);
    if (failures && !opt->json) fprintf(stderr, "fai bench: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}

/* Reads the command line into *opt. Returns -1 to go on, else the exit status. */
static int read_command_line(bench_options *opt, int argc, char **argv) {
    char *used = calloc((size_t)argc + 1, 1);
    ft_shape scratch = ft_shape_custom_base;
    int status = used ? -1 : 2;
    if (status < 0 && ft_shape_parse(argc, argv, used, &scratch, "bench")) status = 2;
    if (status < 0) {
        const int parsed = parse_options(opt, argc, argv, used);
        if (parsed == 1) print_usage(stdout);
        if (parsed) status = parsed == 1 ? 0 : 2;
    }
    if (status < 0 && build_shapes(opt, argc, argv, used)) status = 2;
    if (status < 0 && opt->bf16_too && add_bf16_variants(opt)) status = 2;
    if (status < 0 && validate_shapes(opt)) status = 2;
    free(used);
    return status;
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
    memset(&opt, 0, sizeof opt);
    opt.runs = 7;
    opt.warmup = 1;
    opt.pieces = 1;
    opt.peaks = 1;
    default_threads(&opt);
    const int status = read_command_line(&opt, argc, argv);
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
    if (have_peaks) print_peaks(&opt, peaks);
    if (opt.baseline) announce_baseline(&opt);
    return bench_all(&opt, have_peaks ? peaks : NULL);
}
