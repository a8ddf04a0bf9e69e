/* fai tune: the seed's tuning method on this CPU. List the candidate tiles, keep those whose
 * slice fits the core's L2 budget (the planner's L1d budget is a rule of thumb that measurement
 * may overrule: a tile past it can be faster on a core whose L2 feeds L1d well), measure them,
 * pick the fastest, and store it in the tuning cache, which every later plan of the same CPU and
 * shape class uses.
 *
 * Measuring on a shared machine is noisy: every candidate gets a short first round; then the
 * few fastest and the planner's own choice meet again in interleaved rounds, so that a burst of
 * noise hits them alike, and the winner is the best median of those rounds. */
#include "fai_cmd.h"
#include "fai_json.h"
#include "fai_stats.h"
#include "fai_shape.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const int64_t candidate_q[] = {1, 2, 4, 8, 16, 32, 64, 128};
static const int64_t candidate_kv[] = {16, 32, 64, 128, 256, 512};
#define CANDIDATE_COUNT ((int)(sizeof candidate_q / sizeof *candidate_q) * 6)
#define FINALISTS 3
#define FINAL_ROUNDS 5

typedef struct tune_options {
    double max_seconds;
    int64_t runs, threads;
    int store, json;
} tune_options;

typedef struct tile_timing {
    int64_t tile_q, tile_kv;
    int heuristic;
    double first_ms; /* first round: median of `runs` */
    double final_ms; /* interleaved rounds (finalists only; else 0) */
} tile_timing;

static void print_usage(FILE *out) {
    fprintf(
        out,
        "usage: fai tune [SHAPE] [--max-seconds N] [--runs N] [--threads N] [--no-store]\n"
        "                [--json]\n"
        "(no shape: P1)\n"
        "Measures every candidate tile (tile_q in 1..128, tile_kv in 16..512, powers of two)\n"
        "whose slice fits half of this core's L2 (the planner's L1d budget is not applied;\n"
        "decode tiles: the K/V rows they stream within a quarter of L2, the planner's check),\n"
        "then the %d fastest and the planner's own choice again in %d interleaved rounds, and\n"
        "stores the fastest in the tuning cache for this CPU and the shape's class; later plans\n"
        "of that class use it (`fai plan` shows tile_source tuned). Prints the planner's choice\n"
        "and the tuned one with their times.\n"
        "\n"
        "  --max-seconds N  stop measuring new candidates after N seconds (default 60)\n"
        "  --runs N         timed runs per candidate and round (default 5)\n"
        "  --threads N      threads and workers, 1..%d (default: every online CPU)\n"
        "  --no-store       measure and report only\n"
        "  --json           one JSON object instead of the table\n"
        "The cache file: $FAI_TUNE_CACHE (\"off\" disables it), else\n"
        "$XDG_CACHE_HOME/fai/tiles.tsv, else ~/.cache/fai/tiles.tsv.\n\n%s"
        "\nExit status: 0 success, 2 bad options or shape or an unwritable cache.\n",
        FINALISTS, FINAL_ROUNDS, FAI_MAX_WORKERS, ft_shape_usage);
}

static int parse_options(int argc, char **argv, const char *used, tune_options *opt) {
    for (int i = 1; i < argc; i++) {
        if (used[i]) continue;
        const char *arg = argv[i], *value = i + 1 < argc ? argv[i + 1] : "";
        int64_t number;
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            print_usage(stdout);
            return 1;
        } else if (!strcmp(arg, "--no-store")) {
            opt->store = 0;
        } else if (!strcmp(arg, "--json")) {
            opt->json = 1;
        } else if (!strcmp(arg, "--max-seconds") || !strcmp(arg, "--runs") ||
                   !strcmp(arg, "--threads")) {
            const int64_t most = arg[2] == 't' ? FAI_MAX_WORKERS : 100000;
            if (ft_parse_int64(value, 1, most, &number)) {
                fprintf(stderr, "fai tune: %s needs an integer in 1..%lld, got '%s'\n", arg,
                        (long long)most, value);
                return -1;
            }
            if (arg[2] == 'm')
                opt->max_seconds = (double)number;
            else if (arg[2] == 'r')
                opt->runs = number;
            else
                opt->threads = number;
            i++;
        } else {
            fprintf(stderr, "fai tune: unknown option '%s' (fai tune --help)\n", arg);
            return -1;
        }
    }
    return 0;
}

/* Median ms of `runs` runs of a plan with this tile (after one warmup); -1 on failure. */
static double time_tile(const ft_shape_data *data, const tune_options *opt, fai_pool *pool,
                        int64_t tile_q, int64_t tile_kv) {
    fai_problem problem = data->problem;
    problem.tile_q = tile_q, problem.tile_kv = tile_kv;
    problem.threads = problem.workers = opt->threads;
    fai_plan *plan;
    if (fai_plan_create(&problem, &plan) != FAI_OK) return -1.0;
    fai_plan_set_pool(plan, pool);
    const size_t bytes = fai_plan_workspace_size(plan);
    void *workspace = aligned_alloc(64, (bytes + 64) / 64 * 64);
    double *ms = malloc((size_t)opt->runs * sizeof *ms);
    double median = -1.0;
    if (workspace && ms && fai_run(plan, &data->tensors, workspace, bytes) == FAI_OK) {
        int64_t r = 0;
        for (; r < opt->runs; r++) {
            const double start = ft_now_seconds();
            if (fai_run(plan, &data->tensors, workspace, bytes) != FAI_OK) break;
            ms[r] = (ft_now_seconds() - start) * 1e3;
        }
        if (r == opt->runs) median = ft_median(ms, r);
    }
    free(ms);
    free(workspace);
    fai_plan_free(plan);
    return median;
}

/* The plan's tile and whether it fits the caches, for a tile override (0, 0: the planner's own
 * choice, the cache ignored). Returns 0 on success. */
static int plan_tile(const ft_shape_data *data, const tune_options *opt, int64_t tile_q,
                     int64_t tile_kv, fai_plan_info *info) {
    fai_problem problem = data->problem;
    problem.tile_q = tile_q, problem.tile_kv = tile_kv;
    problem.threads = problem.workers = opt->threads;
    problem.ignore_tuning = 1;
    fai_plan *plan;
    if (fai_plan_create(&problem, &plan) != FAI_OK) return -1;
    fai_plan_get_info(plan, info);
    fai_plan_free(plan);
    return 0;
}

/* Whether a tile's slice is within the planner's L2 budget, half of L2 (fai_tile.c, fai_plan.c):
 * for prefill tiles (those with an L1d count) whatever their L1d bytes, for decode tiles (K and
 * V read in place, bounded by L2 alone) the planner's answer. */
static int fits_l2(const fai_plan_info *info) {
    return info->tile_fits || (info->l1d_bytes > 0 && info->l2_bytes <= info->l2_capacity / 2);
}

/* The planner's choice first, then every candidate that fits L2, each tile once. A tile longer than
 * the sequences is measured as the sequences' length, the tile a tuned plan of this shape gets
 * (the tuning cache's tiles are clamped to the lengths; a tile given by the caller is not). */
static int list_candidates(const ft_shape_data *data, const tune_options *opt, tile_timing *list) {
    fai_plan_info info;
    if (plan_tile(data, opt, 0, 0, &info)) return -1;
    const int64_t max_q = data->problem.seq_q, max_kv = data->problem.seq_kv;
    int count = 0;
    list[count++] = (tile_timing){info.tile_q, info.tile_kv, 1, 0.0, 0.0};
    for (size_t q = 0; q < sizeof candidate_q / sizeof *candidate_q; q++)
        for (size_t kv = 0; kv < sizeof candidate_kv / sizeof *candidate_kv; kv++) {
            const int64_t tile_q = candidate_q[q] < max_q ? candidate_q[q] : max_q;
            const int64_t tile_kv = candidate_kv[kv] < max_kv ? candidate_kv[kv] : max_kv;
            if (plan_tile(data, opt, tile_q, tile_kv, &info) || !fits_l2(&info)) continue;
            int seen = 0;
            for (int c = 0; c < count; c++)
                seen |= list[c].tile_q == info.tile_q && list[c].tile_kv == info.tile_kv;
            if (!seen) list[count++] = (tile_timing){info.tile_q, info.tile_kv, 0, 0.0, 0.0};
        }
    return count;
}

static void show_progress(int done, int total, const tile_timing *t) {
    enum { WIDTH = 30 };
    const int filled = total ? done * WIDTH / total : WIDTH;
    fprintf(stderr, "\r[");
    for (int i = 0; i < WIDTH; i++)
        fputc(i < filled ? '#' : ' ', stderr);
    fprintf(stderr, "] %d/%d  %4lldx%-4lld %9.3f ms", done, total, (long long)t->tile_q,
            (long long)t->tile_kv, t->first_ms);
    fflush(stderr);
}

static int by_first_ms(const void *a, const void *b) {
    const tile_timing *x = a, *y = b;
    if (x->first_ms < 0 || y->first_ms < 0) return (x->first_ms < 0) - (y->first_ms < 0);
    return (x->first_ms > y->first_ms) - (x->first_ms < y->first_ms);
}

/* Interleaved rounds of the finalists (the first `finalists` entries, the heuristic among them);
 * each one's final time is the median over the rounds. */
static void final_rounds(const ft_shape_data *data, const tune_options *opt, fai_pool *pool,
                         tile_timing *list, int finalists) {
    double rounds[FINALISTS + 1][FINAL_ROUNDS];
    for (int r = 0; r < FINAL_ROUNDS; r++)
        for (int c = 0; c < finalists; c++)
            rounds[c][r] = time_tile(data, opt, pool, list[c].tile_q, list[c].tile_kv);
    for (int c = 0; c < finalists; c++)
        list[c].final_ms = ft_median(rounds[c], FINAL_ROUNDS);
}

static void print_report(const ft_shape *shape, const tile_timing *list, int measured, int listed,
                         int finalists, const tile_timing *heuristic, const tile_timing *best,
                         const fai_plan_info *after, const char *path, int stored,
                         const tune_options *opt) {
    const double speedup = heuristic->final_ms / best->final_ms;
    if (opt->json) {
        ft_json json;
        ft_json_init(&json, stdout, 1);
        ft_json_object(&json, NULL);
        ft_json_string(&json, "shape", shape->name);
        ft_json_int(&json, "threads", opt->threads);
        ft_json_int(&json, "candidates", listed);
        ft_json_int(&json, "measured", measured);
        ft_json_array(&json, "heuristic_tile");
        ft_json_int(&json, NULL, heuristic->tile_q);
        ft_json_int(&json, NULL, heuristic->tile_kv);
        ft_json_end(&json);
        ft_json_number(&json, "heuristic_ms", "%.4f", heuristic->final_ms);
        ft_json_array(&json, "tuned_tile");
        ft_json_int(&json, NULL, best->tile_q);
        ft_json_int(&json, NULL, best->tile_kv);
        ft_json_end(&json);
        ft_json_number(&json, "tuned_ms", "%.4f", best->final_ms);
        ft_json_number(&json, "speedup", "%.4f", speedup);
        ft_json_bool(&json, "stored", stored);
        ft_json_string(&json, "cache", path);
        ft_json_string(&json, "tile_source", after->tile_source);
        ft_json_string(&json, "tile_class", after->tile_class);
        ft_json_array(&json, "timings");
        for (int c = 0; c < measured; c++) {
            ft_json_object(&json, NULL);
            ft_json_int(&json, "tile_q", list[c].tile_q);
            ft_json_int(&json, "tile_kv", list[c].tile_kv);
            ft_json_number(&json, "first_ms", "%.4f", list[c].first_ms);
            if (c < finalists) ft_json_number(&json, "final_ms", "%.4f", list[c].final_ms);
            ft_json_bool(&json, "heuristic", list[c].heuristic);
            ft_json_end(&json);
        }
        ft_json_end(&json);
        ft_json_end(&json);
        return;
    }
    printf("shape %s on %lld threads: %d candidate tiles fit L2, %d measured\n", shape->name,
           (long long)opt->threads, listed, measured);
    printf("  tile        first round ms   final rounds ms\n");
    for (int c = 0; c < measured; c++) {
        printf("  %4lldx%-4lld  %14.3f", (long long)list[c].tile_q, (long long)list[c].tile_kv,
               list[c].first_ms);
        if (c < finalists) printf("   %15.3f", list[c].final_ms);
        printf("%s\n", list[c].heuristic ? "   (planner's choice)" : "");
    }
    printf("before: %lldx%lld (heuristic)  %.3f ms\n", (long long)heuristic->tile_q,
           (long long)heuristic->tile_kv, heuristic->final_ms);
    printf("after:  %lldx%lld (tuned)      %.3f ms  %.3fx\n", (long long)best->tile_q,
           (long long)best->tile_kv, best->final_ms, speedup);
    if (stored)
        printf("stored in %s for class %s; fai_plan_create now gives %lldx%lld (tile_source "
               "%s)\n",
               path, after->tile_class, (long long)after->tile_q, (long long)after->tile_kv,
               after->tile_source);
    else
        printf("not stored (--no-store)\n");
}

/* Measures, chooses, stores and reports. Returns the exit status. */
static int tune(const ft_shape *shape, const tune_options *opt) {
    ft_shape_data data;
    if (ft_shape_data_create(shape, 7, &data)) {
        fprintf(stderr, "fai tune: %s: %s\n", shape->name, ft_shape_data_error());
        ft_shape_data_free(&data);
        return 2;
    }
    fai_pool *pool = NULL;
    tile_timing list[CANDIDATE_COUNT + 1];
    int status = 2;
    const int listed = list_candidates(&data, opt, list);
    if (listed < 0) {
        fprintf(stderr, "fai tune: %s: %s\n", shape->name, fai_last_error());
        goto done;
    }
    if (fai_pool_create(opt->threads, &pool) != FAI_OK) {
        fprintf(stderr, "fai tune: %s\n", fai_last_error());
        goto done;
    }
    const int progress = !opt->json && isatty(STDERR_FILENO);
    const double start = ft_now_seconds();
    int measured = 0;
    while (measured < listed && (measured == 0 || ft_now_seconds() - start < opt->max_seconds)) {
        tile_timing *t = &list[measured++];
        t->first_ms = time_tile(&data, opt, pool, t->tile_q, t->tile_kv);
        if (progress) show_progress(measured, listed, t);
    }
    if (progress) fputc('\n', stderr);
    /* the heuristic (entry 0) always goes to the final rounds, with the fastest others */
    qsort(list + 1, (size_t)(measured - 1), sizeof *list, by_first_ms);
    const int finalists = measured < FINALISTS + 1 ? measured : FINALISTS + 1;
    final_rounds(&data, opt, pool, list, finalists);
    const tile_timing *heuristic = &list[0], *best = &list[0];
    for (int c = 1; c < finalists; c++)
        if (list[c].final_ms > 0 && list[c].final_ms < best->final_ms) best = &list[c];
    if (best->final_ms <= 0) {
        fprintf(stderr, "fai tune: %s: the runs failed: %s\n", shape->name, fai_last_error());
        goto done;
    }

    int stored = 0;
    fai_plan_info after;
    fai_problem problem = data.problem;
    problem.threads = problem.workers = opt->threads;
    fai_plan *plan;
    if (fai_plan_create(&problem, &plan) != FAI_OK) {
        fprintf(stderr, "fai tune: %s: %s\n", shape->name, fai_last_error());
        goto done;
    }
    if (opt->store) {
        if (fai_tuning_store(plan, best->tile_q, best->tile_kv) != FAI_OK) {
            fprintf(stderr, "fai tune: %s\n", fai_last_error());
            fai_plan_free(plan);
            goto done;
        }
        stored = 1;
        fai_plan_free(plan);
        if (fai_plan_create(&problem, &plan) != FAI_OK) {
            fprintf(stderr, "fai tune: %s: %s\n", shape->name, fai_last_error());
            goto done;
        }
    }
    fai_plan_get_info(plan, &after);
    print_report(shape, list, measured, listed, finalists, heuristic, best, &after,
                 fai_tuning_path(), stored, opt);
    fai_plan_free(plan);
    status = 0;
done:
    fai_pool_free(pool);
    ft_shape_data_free(&data);
    return status;
}

int ft_cmd_tune(int argc, char **argv) {
    ft_shape shape;
    tune_options opt = {.max_seconds = 60.0, .runs = 5, .threads = 0, .store = 1};
    char *used = calloc((size_t)argc + 1, 1);
    if (!used) return 2;
    int status = 2;
    if (ft_shape_from_args(argc, argv, used, &shape, "tune")) goto done;
    const int parsed = parse_options(argc, argv, used, &opt);
    if (parsed) {
        status = parsed > 0 ? 0 : 2;
        goto done;
    }
    if (ft_options_once(argc, argv, "tune")) goto done;
    /* a store that cannot be made is said before a minute of measuring, not after */
    if (opt.store && fai_tuning_check_store() != FAI_OK) {
        fprintf(stderr, "fai tune: %s: use --no-store to measure only\n", fai_last_error());
        goto done;
    }
    if (opt.threads == 0) opt.threads = fai_cpu_count();
    status = tune(&shape, &opt);
done:
    free(used);
    return status;
}
