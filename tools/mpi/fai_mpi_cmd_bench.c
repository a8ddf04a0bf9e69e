/* fai-mpi bench: the steps of sharded attention timed on every rank, beside a model of them.
 *
 * Shapes: the decode-like benchmark shapes D1, D2 and C1 with Skv scaled up (by the number of
 * ranks unless --scale says otherwise; each rank holds a contiguous range of every sequence's
 * pages) through fai_mpi_attention, and P1 as ring prefill over a sequence scaled the same way
 * through fai_mpi_ring_attention.
 *
 * The model (docs/distributed.md) takes the link's latency a and bandwidth b from a calibration
 * in the same run (all ranks exchanging around the ring, as the ring attention does):
 *   decode  T = T_local + 2 ceil(log2 R) a + (R - 1) n / b + T_merge
 *           T_local: the shard's fai_run alone, T_merge: the merge of R parts alone, n: the
 *           bytes of one rank's partial O and LSE
 *   ring    T = (R - 1) max(C / R, a + k / b) + C / R + T_merge + 2 ceil(log2 R) a
 *           C: the run's own fai time, k: the bytes of one K/V block
 * and prints it beside the measured step. Figures are medians over --runs of each run's value;
 * the step is the slowest rank's, the parts are averaged over the ranks. */
#include "fai_json.h"
#include "fai_mpi_bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank_, ranks_;

static void print_usage(FILE *out) {
    fprintf(out,
            "usage: mpirun -np R fai-mpi bench [D1 D2 C1 P1 ...] [options]\n"
            "\n"
            "Times sharded attention per step on every rank (medians over the runs) beside the\n"
            "model of docs/distributed.md: D1, D2, C1 (decode-like, K/V sharded, the same Q) and\n"
            "P1 (ring prefill), with Skv (P1: the sequence) scaled up.\n"
            "\n"
            "options:\n"
            "  --runs N       timed runs per shape (default 5)\n"
            "  --scale N      Skv (P1: S) times N; default: the number of ranks, so that each\n"
            "                 rank holds what one machine holds in the single-node shape\n"
            "  --threads N    fai threads per rank (default 1)\n"
            "  --workers N    fai workers per rank (default 0: one per CPU)\n"
            "  --json         one JSON object per shape\n");
}

static int parse_options(int argc, char **argv, bench_options *o) {
    memset(o, 0, sizeof *o);
    o->runs = 5, o->threads = 1, o->scale = ranks_;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        int64_t value = 0;
        int64_t *dst = !strcmp(arg, "--scale")     ? &o->scale
                       : !strcmp(arg, "--threads") ? &o->threads
                       : !strcmp(arg, "--workers") ? &o->workers
                                                   : NULL;
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) return -1;
        if (!strcmp(arg, "--json")) {
            o->json = 1;
        } else if (!strcmp(arg, "--runs") || dst) {
            /* each option's own range: runs as the samples hold, threads and workers as fai
             * takes them, a scale that keeps Skv within int32 */
            const int64_t min = !strcmp(arg, "--workers") ? 0 : 1;
            const int64_t max = !dst ? MAX_RUNS : dst == &o->scale ? 1 << 20 : FAI_MAX_WORKERS;
            if (i + 1 >= argc || ft_parse_int64(argv[i + 1], min, max, &value)) {
                if (rank_ == 0)
                    fprintf(stderr, "fai-mpi bench: %s needs an integer %lld..%lld, got '%s'\n",
                            arg, (long long)min, (long long)max,
                            i + 1 < argc ? argv[i + 1] : "(missing)");
                return 2;
            }
            if (dst)
                *dst = value;
            else
                o->runs = (int)value;
            i++;
        } else if (!strcmp(arg, "D1") || !strcmp(arg, "D2") || !strcmp(arg, "C1") ||
                   !strcmp(arg, "P1")) {
            if (o->count == MAX_SHAPES) {
                if (rank_ == 0) fprintf(stderr, "fai-mpi bench: more than %d shapes\n", MAX_SHAPES);
                return 2;
            }
            o->names[o->count++] = arg;
        } else {
            if (rank_ == 0)
                fprintf(stderr, "fai-mpi bench: unknown argument '%s' (see fai-mpi bench --help)\n",
                        arg);
            return 2;
        }
    }
    if (o->count == 0) {
        static const char *const all[] = {"D1", "D2", "C1", "P1"};
        for (int s = 0; s < 4; s++)
            o->names[o->count++] = all[s];
    }
    return 0;
}

/* -- output --------------------------------------------------------------------------------------
 */

/* Ring: the share of the K/V transfers, timed alone, that the step did not wait for (its waits
 * also hold a slower neighbour's compute, so this is a lower bound). Decode: none by design, the
 * gather follows the local run (NAN, printed as "-"). */
static double overlap_of(const bench_result *r) {
    if (strcmp(r->kind, "ring") || r->comm_alone <= 0) return NAN;
    const double hidden = 1.0 - r->exchange / r->comm_alone;
    return hidden < 0 ? 0.0 : hidden > 1 ? 1.0 : hidden;
}

/* The overlap as text: a percentage, or "-" when there is none. */
static void format_overlap(const bench_result *r, char *text, size_t size) {
    const double overlap = overlap_of(r);
    if (isnan(overlap))
        snprintf(text, size, "-");
    else
        snprintf(text, size, "%.0f%%", 100.0 * overlap);
}

static void print_header(const bench_options *o, const link_model *link) {
    printf("fai-mpi bench: %d ranks, %lld fai thread(s) per rank, %d runs, Skv (P1: S) x %lld\n",
           ranks_, (long long)o->threads, o->runs, (long long)o->scale);
    printf("link (ring exchange, all ranks): latency %.1f us, bandwidth %.2f GB/s\n",
           link->latency * 1e6, link->bandwidth / 1e9);
    printf("%-5s %-6s %9s %9s %12s | %9s %9s %9s %9s %9s %8s | %9s %7s\n", "shape", "kind", "Skv",
           "per rank", "sent/step", "step ms", "compute", "wait", "exchange", "merge", "overlap",
           "model ms", "model/");
}

static void print_result(const bench_result *r, const bench_options *o, const link_model *link) {
    if (o->json) {
        ft_json json;
        ft_json_init(&json, stdout, 0);
        ft_json_object(&json, NULL);
        ft_json_string(&json, "shape", r->shape);
        ft_json_string(&json, "kind", r->kind);
        ft_json_int(&json, "ranks", ranks_);
        ft_json_int(&json, "threads", o->threads);
        ft_json_int(&json, "runs", o->runs);
        ft_json_int(&json, "seq_kv", r->seq_kv);
        ft_json_int(&json, "seq_kv_per_rank", r->seq_kv_rank);
        ft_json_int(&json, "steps", r->steps);
        ft_json_number(&json, "bytes_sent_per_step", "%.0f", r->bytes_per_step);
        ft_json_number(&json, "median_ms", "%.4f", r->step * 1e3);
        ft_json_number(&json, "compute_ms", "%.4f", r->compute * 1e3);
        ft_json_number(&json, "wait_ms", "%.4f", r->wait * 1e3);
        ft_json_number(&json, "exchange_ms", "%.4f", r->exchange * 1e3);
        ft_json_number(&json, "merge_ms", "%.4f", r->merge * 1e3);
        ft_json_number(&json, "comm_alone_ms", "%.4f", r->comm_alone * 1e3);
        ft_json_number(&json, "overlap", "%.3f", overlap_of(r)); /* null when not defined */
        ft_json_number(&json, "model_ms", "%.4f", r->model * 1e3);
        ft_json_number(&json, "model_compute_ms", "%.4f", r->model_compute * 1e3);
        ft_json_number(&json, "model_comm_ms", "%.4f", r->model_comm * 1e3);
        ft_json_number(&json, "model_merge_ms", "%.4f", r->model_merge * 1e3);
        ft_json_number(&json, "latency_us", "%.3f", link->latency * 1e6);
        ft_json_number(&json, "bandwidth_gbps", "%.4f", link->bandwidth / 1e9);
        ft_json_end(&json);
        return;
    }
    char overlap[16];
    format_overlap(r, overlap, sizeof overlap);
    printf("%-5s %-6s %9lld %9lld %9.1f KB | %9.3f %9.3f %9.3f %9.3f %9.3f %8s | %9.3f %6.2fx\n",
           r->shape, r->kind, (long long)r->seq_kv, (long long)r->seq_kv_rank,
           r->bytes_per_step / 1024.0, r->step * 1e3, r->compute * 1e3, r->wait * 1e3,
           r->exchange * 1e3, r->merge * 1e3, overlap, r->model * 1e3, r->model / r->step);
}

static const ft_shape *single_node_shape(const char *name) {
    for (int s = 0; s < ft_shape_count; s++)
        if (!strcmp(ft_shape_table[s].name, name)) return &ft_shape_table[s];
    return NULL;
}

int ft_mpi_cmd_bench(int argc, char **argv) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks_);
    bench_options o;
    const int rc = parse_options(argc, argv, &o);
    if (rc < 0) {
        if (rank_ == 0) print_usage(stdout);
        return 0;
    }
    if (rc) return rc;
    link_model link;
    ft_mpi_bench_calibrate(&link);
    if (rank_ == 0 && !o.json) print_header(&o, &link);
    int failed = 0;
    for (int s = 0; s < o.count; s++) {
        const ft_shape *single = single_node_shape(o.names[s]);
        bench_result res;
        memset(&res, 0, sizeof res);
        res.shape = o.names[s];
        const int bad = !strcmp(o.names[s], "P1") ? ft_mpi_bench_ring(single, &o, &link, &res)
                                                  : ft_mpi_bench_decode(single, &o, &link, &res);
        int any_bad = bad != 0;
        MPI_Allreduce(MPI_IN_PLACE, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (any_bad) {
            if (rank_ == 0)
                fprintf(stderr, "fai-mpi bench: %s failed: %s\n", o.names[s], ft_mpi_bench_error());
            failed = 1;
            continue;
        }
        if (rank_ == 0) print_result(&res, &o, &link);
        fflush(stdout);
    }
    if (rank_ == 0 && !o.json)
        printf("model: decode T_local + 2 ceil(log2 R) a + (R-1) n/b + T_merge; ring (R-1) "
               "max(C/R, a + k/b) + C/R + T_merge + 2 ceil(log2 R) a (docs/distributed.md)\n");
    return failed;
}
