/* fai bench: its usage, options and shapes (fai_cmd_bench.h). */
#include "fai_baseline.h"
#include "fai_cmd_bench.h"

#include "fai.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_usage(FILE *out) {
    fprintf(
        out,
        "usage: fai bench [SHAPE ...] [shape flags] [--threads LIST] [--runs N] [--warmup N]\n"
        "                 [--pieces N] [--scaling] [--wake] [--cold]\n"
        "                 [--kv-dtypes LIST] [--bf16-too] [--baseline] [--profile] [--json]\n"
        "                 [--no-peaks] [--help]\n"
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
        "  --cold         empty the caches before every timed run (and warm-up) of fai, of\n"
        "                 the baseline and of the --kv-dtypes and --scaling rounds, by reading\n"
        "                 a buffer of at least 1 GiB and twice the L3, outside the timing: a\n"
        "                 decode step then reads its K/V from memory, as a serving engine's\n"
        "                 step does, not from what the run before left in a large L3\n"
        "  --pieces N     workers per thread (default 1): threads take workers from a shared\n"
        "                 counter, so smaller pieces let a faster thread take more of them\n"
        "  --kv-dtypes LIST  each shape once per K/V dtype of the comma-separated list (f32\n"
        "                 f16 bf16 int8 e4m3 e5m2), one after the other (e.g. --kv-dtypes\n"
        "                 f16,int8,e4m3); then each dtype's speedup over the first, as the\n"
        "                 median of --runs x 3 interleaved rounds (one run of every dtype per\n"
        "                 round), on every thread count\n"
        "  --bf16-too     also run each shape with Q, K, V and O all bf16\n"
        "  --json         one JSON object per line: the peaks, then one per (shape, threads)\n"
        "  --no-peaks     skip the machine-limit probes (about 1 s per thread count)\n"
        "  --profile      also run each plan --runs times with stage timers (fai_run_profiled):\n"
        "                 each stage's share of the kernel time (pack_q, pack_kv, qk, softmax,\n"
        "                 rescale, pv, store, merge, other) and each thread's busy and idle\n"
        "                 share of the wall time; the timed runs above carry no timers; and\n"
        "                 how much QK and PV and the softmax hide of each other: runs with\n"
        "                 them left out (fai_run_profiled_without), --runs rounds of each\n"
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

/* --kv-dtypes: the list into opt; -1 for an empty or unknown item (a trailing comma leaves an
 * empty one), -2 for more items than opt holds. */
static int parse_kv_dtypes(const char *text, bench_options *opt) {
    opt->kv_dtype_count = 0;
    const int max = (int)(sizeof opt->kv_dtypes / sizeof opt->kv_dtypes[0]);
    for (int more = text != NULL; more;) {
        char item[16];
        const size_t length = strcspn(text, ",");
        if (length == 0 || length >= sizeof item) return -1;
        if (opt->kv_dtype_count == max) return -2;
        memcpy(item, text, length);
        item[length] = 0;
        if (ft_parse_dtype(item, &opt->kv_dtypes[opt->kv_dtype_count++])) return -1;
        more = text[length] == ',';
        text += length + more;
    }
    return opt->kv_dtype_count > 0 ? 0 : -1;
}

/* Each shape once per --kv-dtypes dtype, in the list's order, the shapes' order kept. */
static int apply_kv_dtypes(bench_options *opt) {
    static ft_shape shapes[MAX_SHAPES];
    const int count = opt->shape_count;
    memcpy(shapes, opt->shapes, (size_t)count * sizeof shapes[0]);
    opt->shape_count = 0;
    for (int s = 0; s < count; s++)
        for (int k = 0; k < opt->kv_dtype_count; k++) {
            ft_shape shape = shapes[s];
            shape.kv_dtype = opt->kv_dtypes[k];
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
        else if (!strcmp(arg, "--cold"))
            opt->cold = 1;
        else if (!strcmp(arg, "--kv-dtypes")) {
            const int listed = parse_kv_dtypes(i + 1 < argc ? argv[i + 1] : NULL, opt);
            if (listed == -2) {
                fprintf(stderr, "fai bench: --kv-dtypes takes at most %d dtypes, got '%s'\n",
                        (int)(sizeof opt->kv_dtypes / sizeof opt->kv_dtypes[0]), argv[i + 1]);
                return -1;
            }
            if (listed) {
                fprintf(stderr,
                        "fai bench: --kv-dtypes needs a comma-separated list of f32 f16 bf16 "
                        "int8 e4m3 e5m2, got '%s'\n",
                        i + 1 < argc ? argv[i + 1] : "");
                return -1;
            }
            i++;
        } else if (!strcmp(arg, "--threads") || !strcmp(arg, "--runs") ||
                   !strcmp(arg, "--warmup") || !strcmp(arg, "--pieces")) {
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

int ft_bench_read_command_line(bench_options *opt, int argc, char **argv) {
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
    if (status < 0 && opt->kv_dtype_count > 0 && apply_kv_dtypes(opt)) status = 2;
    if (status < 0 && opt->kv_dtype_count > 1) opt->compared_shapes = opt->shape_count;
    if (status < 0 && opt->bf16_too && add_bf16_variants(opt)) status = 2;
    if (status < 0 && validate_shapes(opt)) status = 2;
    free(used);
    return status;
}

void ft_bench_options_init(bench_options *opt) {
    memset(opt, 0, sizeof *opt);
    opt->runs = 7;
    opt->warmup = 1;
    opt->pieces = 1;
    opt->peaks = 1;
    default_threads(opt);
}
