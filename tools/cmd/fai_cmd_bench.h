/* The parts of `fai bench` (fai_cmd_bench.c): its options (fai_cmd_bench_options.c) and its
 * output, as JSON lines or a table (fai_cmd_bench_report.c). */
#ifndef FAI_CMD_BENCH_H
#define FAI_CMD_BENCH_H

#include "fai_bench_overlap.h"
#include "fai_bench_profile.h"
#include "fai_evict.h"
#include "fai_peak.h"
#include "fai_shape.h"

#include <stdint.h>

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
    int cold;               /* --cold: the caches emptied before every timed run */
    ft_evictor *evictor;    /* with --cold, set up by the command before the runs */
    fai_dtype kv_dtypes[8]; /* --kv-dtypes: each shape once per K/V dtype listed */
    int kv_dtype_count;
    int compared_shapes; /* shapes [0, this) are groups of kv_dtype_count dtypes of one shape */
} bench_options;

/* One (shape, thread count) measurement. */
typedef struct bench_result {
    int64_t threads;
    double median_ms, min_ms, max_ms;
    double flops, kv_bytes;
    double check_us; /* median cost of fai_run's tensor checks (block table included) */
    fai_plan_info info;
    ft_bench_profile profile; /* with --profile */
    ft_bench_overlap overlap; /* with --profile */
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

/* The defaults: 7 runs after 1 warm-up, one worker per thread, the peaks measured, thread
 * counts 1, 2, 4, ... and the online CPU count. */
void ft_bench_options_init(bench_options *opt);

/* Reads the shapes and options over the defaults; -1 to go on, else the exit status (0 after
 * --help, 2 after a message on stderr). */
int ft_bench_read_command_line(bench_options *opt, int argc, char **argv);

/* One (shape, thread count) as a JSON line, or as a table row under the header. */
void ft_bench_print_json(const ft_shape *shape, const bench_result *r, const bench_check *check,
                         const bench_options *opt, const ft_peak *peak,
                         const baseline_result *base);
void ft_bench_print_table_header(int baseline);
void ft_bench_print_row(const ft_shape *shape, const bench_result *r, const bench_check *check,
                        const ft_peak *peak, const baseline_result *base);

/* The baseline's agreement with fai on the sampled rows. */
int ft_bench_baseline_ok(const bench_check *check);

/* The machine's peaks measured for each thread count. */
void ft_bench_print_peaks(const bench_options *opt, const ft_peak *peaks);

#endif
