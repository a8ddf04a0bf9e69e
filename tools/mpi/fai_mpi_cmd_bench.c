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
#include "fai_mpi_tool.h"
#include "fai_stats.h"
#include "fai_shape.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SHAPES 8
#define MAX_RUNS 1000

typedef struct bench_options {
    int runs;
    int json;
    int64_t threads, workers, scale;
    int count;
    const char *names[MAX_SHAPES];
} bench_options;

typedef struct link_model {
    double latency;   /* seconds per exchange step */
    double bandwidth; /* bytes per second, one link, all links busy */
} link_model;

/* One shape's figures, in seconds and bytes. */
typedef struct bench_result {
    const char *shape, *kind;
    int64_t seq_kv, seq_kv_rank, steps;
    double bytes_per_step;
    double step, compute, wait, exchange, merge, comm_alone;
    double model, model_compute, model_comm, model_merge;
} bench_result;

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
            const int64_t min = !strcmp(arg, "--workers") ? 0 : 1;
            if (i + 1 >= argc || ft_parse_int64(argv[i + 1], min, MAX_RUNS * 1000, &value) ||
                (!dst && value > MAX_RUNS)) {
                if (rank_ == 0)
                    fprintf(stderr, "fai-mpi bench: %s %s: expected an integer >= %lld\n", arg,
                            i + 1 < argc ? argv[i + 1] : "(missing)", (long long)min);
                return 2;
            }
            if (dst)
                *dst = value;
            else
                o->runs = (int)value;
            i++;
        } else if (!strcmp(arg, "D1") || !strcmp(arg, "D2") || !strcmp(arg, "C1") ||
                   !strcmp(arg, "P1")) {
            if (o->count < MAX_SHAPES) o->names[o->count++] = arg;
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

/* -- measurement helpers -------------------------------------------------------------------------
 */

static double max_over_ranks(double value) {
    MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return value;
}

static double mean_over_ranks(double value) {
    MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return value / ranks_;
}

/* 1 on every rank when every rank passes ok, else 0 on every rank: a rank whose setup failed
 * must not leave the others waiting in the collectives it would skip. */
static int all_ranks_ok(int ok) {
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return ok;
}

static int log2_ceil(int n) {
    int steps = 0;
    while ((1 << steps) < n)
        steps++;
    return steps;
}

/* Seconds of `steps` ring exchanges of `bytes` (each rank sends to the next, receives from the
 * previous), the slowest rank's, median over `runs`. */
static double time_ring_exchange(size_t bytes, int steps, int runs) {
    char *out = malloc(bytes ? bytes : 1), *in = malloc(bytes ? bytes : 1);
    double times[MAX_RUNS];
    memset(out, 1, bytes);
    const int right = (rank_ + 1) % ranks_, left = (rank_ + ranks_ - 1) % ranks_;
    for (int r = 0; r < runs; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        for (int s = 0; s < steps; s++) {
            MPI_Request req[2];
            MPI_Irecv(in, (int)bytes, MPI_BYTE, left, 7, MPI_COMM_WORLD, &req[0]);
            MPI_Isend(out, (int)bytes, MPI_BYTE, right, 7, MPI_COMM_WORLD, &req[1]);
            MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
        }
        times[r] = max_over_ranks(MPI_Wtime() - t0);
    }
    free(out);
    free(in);
    return ft_median(times, runs);
}

static void calibrate(link_model *link) {
    const size_t big = (size_t)4 << 20;
    link->latency = ranks_ > 1 ? time_ring_exchange(8, 20, 15) / 20 : 0.0;
    const double step = ranks_ > 1 ? time_ring_exchange(big, 4, 5) / 4 : 0.0;
    link->bandwidth = step > link->latency ? (double)big / (step - link->latency) : INFINITY;
}

/* Each timed run's figures, taken on every rank: the step is the slowest rank's, the parts the
 * ranks' mean. */
typedef struct run_samples {
    double step[MAX_RUNS], compute[MAX_RUNS], wait[MAX_RUNS], exchange[MAX_RUNS], merge[MAX_RUNS];
} run_samples;

static void record_run(run_samples *s, int r, double step_seconds, const fai_mpi_stats *st) {
    s->step[r] = max_over_ranks(step_seconds);
    s->compute[r] = mean_over_ranks(st->compute_seconds);
    s->wait[r] = mean_over_ranks(st->wait_seconds);
    s->exchange[r] = mean_over_ranks(st->exchange_seconds);
    s->merge[r] = mean_over_ranks(st->merge_seconds);
}

/* The medians over the runs into the result. */
static void summarize_runs(run_samples *s, int runs, bench_result *res) {
    res->step = ft_median(s->step, runs), res->compute = ft_median(s->compute, runs);
    res->wait = ft_median(s->wait, runs), res->exchange = ft_median(s->exchange, runs);
    res->merge = ft_median(s->merge, runs);
}

/* -- decode: K/V sharded, the same Q -------------------------------------------------------------
 */

typedef struct decode_setup {
    ft_shape shape;     /* the rank's shard as a shape: skv = its keys */
    ft_shape_data data; /* its problem and tensors (paged with a shuffled table) */
    int32_t *kv_start, *q_start;
    int64_t seq_kv; /* the whole sequence */
    float *part;    /* an f32 partial O and LSE, and R of them to merge */
    float *parts;
    size_t part_floats;
} decode_setup;

static int make_decode(const ft_shape *single, const bench_options *o, decode_setup *d) {
    memset(d, 0, sizeof *d);
    d->shape = *single;
    d->seq_kv = single->skv * o->scale;
    /* whole pages per rank (the last rank may hold fewer keys) */
    const int64_t ps = single->page_size > 0 ? single->page_size : 1;
    int64_t first_page, pages;
    fai_mpi_split_range((d->seq_kv + ps - 1) / ps, ranks_, rank_, &first_page, &pages);
    const int64_t start = first_page * ps;
    int64_t keys = pages * ps;
    if (start + keys > d->seq_kv) keys = d->seq_kv > start ? d->seq_kv - start : 0;
    d->shape.skv = keys;
    if (ft_shape_data_create(&d->shape, 1234, &d->data)) return -1;
    d->data.problem.threads = o->threads, d->data.problem.workers = o->workers;
    d->kv_start = calloc((size_t)single->b, sizeof(int32_t));
    d->q_start = calloc((size_t)single->b, sizeof(int32_t));
    const int64_t dv = single->dv;
    d->part_floats = (size_t)(single->b * single->sq * single->hq * (dv + 1));
    d->part = calloc(d->part_floats, sizeof(float));
    d->parts = calloc(d->part_floats * (size_t)ranks_, sizeof(float));
    if (!d->kv_start || !d->q_start || !d->part || !d->parts) return -1;
    for (int64_t b = 0; b < single->b; b++) {
        d->kv_start[b] = (int32_t)start;
        d->q_start[b] = (int32_t)(d->seq_kv - single->sq); /* bottom-right, as a step places it */
    }
    return 0;
}

static void free_decode(decode_setup *d) {
    ft_shape_data_free(&d->data);
    free(d->kv_start), free(d->q_start), free(d->part), free(d->parts);
}

/* The shard's fai_run alone (every rank at once, as in a step): the slowest rank's seconds. */
static double time_local_shard(decode_setup *d, int runs) {
    fai_problem pb = d->data.problem;
    pb.o_dtype = FAI_DTYPE_F32;
    pb.q_positions = d->q_start, pb.kv_positions = d->kv_start;
    const int64_t dv = d->shape.dv;
    fai_tensors t = d->data.tensors;
    t.o = fai_tensor_bshd(d->part, FAI_DTYPE_F32, d->shape.sq, d->shape.hq, dv);
    t.lse.data = d->part + d->shape.b * d->shape.sq * d->shape.hq * dv;
    fai_plan *plan = NULL;
    const int planned = fai_plan_create(&pb, &plan) == FAI_OK;
    const size_t bytes = planned ? fai_plan_workspace_size(plan) : 0;
    void *ws = malloc(bytes ? bytes : 1);
    if (!all_ranks_ok(planned && ws != NULL)) {
        free(ws);
        fai_plan_free(plan);
        return NAN;
    }
    double times[MAX_RUNS];
    for (int r = 0; r < runs; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        fai_run(plan, &t, ws, bytes);
        times[r] = max_over_ranks(MPI_Wtime() - t0);
    }
    free(ws);
    fai_plan_free(plan);
    return ft_median(times, runs);
}

/* The merge of R parts into O alone, as the library lays them out. */
static double time_merge(decode_setup *d, int runs) {
    const ft_shape *s = &d->shape;
    const int64_t dv = s->dv, rows = s->b * s->sq * s->hq;
    fai_tensor *views = calloc((size_t)(2 * ranks_), sizeof(fai_tensor));
    for (int p = 0; p < ranks_; p++) {
        float *part = d->parts + (size_t)p * d->part_floats;
        for (int64_t i = 0; i < rows; i++)
            part[rows * dv + i] = (float)(i % 7) * 0.25f; /* LSE values, none -inf */
        views[p] = fai_tensor_bshd(part, FAI_DTYPE_F32, s->sq, s->hq, dv);
        views[ranks_ + p] =
            (fai_tensor){part + rows * dv, FAI_DTYPE_F32, s->sq * s->hq, s->hq, 1, 0};
    }
    double times[MAX_RUNS];
    for (int r = 0; r < runs; r++) {
        const double t0 = MPI_Wtime();
        fai_merge_states(ranks_, views, views + ranks_, s->b, s->sq, s->hq, dv, &d->data.tensors.o,
                         &d->data.tensors.lse);
        times[r] = mean_over_ranks(MPI_Wtime() - t0);
    }
    free(views);
    return ft_median(times, runs);
}

/* The exchange of fai_mpi_attention alone: the agreements and the allgather of the partials. */
static double time_decode_exchange(decode_setup *d, int runs) {
    double times[MAX_RUNS];
    int64_t agree[32] = {0};
    for (int r = 0; r < runs; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        /* the agreement on the arguments (status and signature), and on the outcome */
        MPI_Allreduce(MPI_IN_PLACE, agree, 29, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, agree, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allgather(d->part, (int)d->part_floats, MPI_FLOAT, d->parts, (int)d->part_floats,
                      MPI_FLOAT, MPI_COMM_WORLD);
        times[r] = max_over_ranks(MPI_Wtime() - t0);
    }
    return ft_median(times, runs);
}

static int bench_decode(const ft_shape *single, const bench_options *o, const link_model *link,
                        bench_result *res) {
    decode_setup d;
    if (!all_ranks_ok(make_decode(single, o, &d) == 0)) {
        free_decode(&d);
        return -1;
    }
    res->kind = "decode", res->steps = 1;
    res->seq_kv = d.seq_kv, res->seq_kv_rank = d.shape.skv;
    const double local = time_local_shard(&d, o->runs);
    res->model_merge = time_merge(&d, o->runs);
    res->comm_alone = time_decode_exchange(&d, o->runs);

    static run_samples samples;
    int failed = 0;
    for (int r = 0; r < o->runs; r++) {
        fai_mpi_stats st;
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        failed |= fai_mpi_attention(MPI_COMM_WORLD, &d.data.problem, d.kv_start, d.q_start,
                                    &d.data.tensors, FAI_MPI_ALL_RANKS, &st) != FAI_OK;
        record_run(&samples, r, MPI_Wtime() - t0, &st);
        res->bytes_per_step = (double)st.bytes_sent;
    }
    summarize_runs(&samples, o->runs, res);
    const double n = (double)d.part_floats * sizeof(float);
    res->model_compute = local;
    res->model_comm = 2 * log2_ceil(ranks_) * link->latency + (ranks_ - 1) * n / link->bandwidth;
    res->model = res->model_compute + res->model_comm + res->model_merge;
    free_decode(&d);
    return failed ? -1 : 0;
}

/* -- ring prefill -------------------------------------------------------------------------------
 */

static int bench_ring(const ft_shape *single, const bench_options *o, const link_model *link,
                      bench_result *res) {
    const int64_t seq = single->sq * o->scale;
    fai_mpi_zigzag z;
    if (fai_mpi_zigzag_layout(seq, ranks_, rank_, &z) != FAI_OK) return -1;
    ft_shape shape = *single;
    shape.sq = shape.skv = z.rows;
    shape.page_size = 0;
    ft_shape_data data;
    if (!all_ranks_ok(ft_shape_data_create(&shape, 99 + (uint64_t)rank_, &data) == 0)) {
        ft_shape_data_free(&data);
        return -1;
    }
    data.problem.threads = o->threads, data.problem.workers = o->workers;
    res->kind = "ring", res->steps = ranks_;
    res->seq_kv = seq, res->seq_kv_rank = z.rows;

    /* the longest block, which sets each step's transfer */
    const int64_t dv = shape.dv;
    const double row_bytes =
        (double)(shape.hkv * (shape.d + dv)) * (double)fai_dtype_size(shape.kv_dtype);
    const double block = max_over_ranks((double)(shape.b * z.rows) * row_bytes);
    res->comm_alone = ranks_ > 1 ? time_ring_exchange((size_t)block, ranks_ - 1, o->runs) : 0.0;

    static run_samples samples;
    int failed = 0;
    for (int r = 0; r < o->runs; r++) {
        fai_mpi_stats st;
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        failed |= fai_mpi_ring_attention(MPI_COMM_WORLD, &data.problem, seq, &data.tensors, &st) !=
                  FAI_OK;
        record_run(&samples, r, MPI_Wtime() - t0, &st);
        res->bytes_per_step = max_over_ranks(ranks_ > 1 ? (double)st.bytes_sent / (ranks_ - 1) : 0);
    }
    summarize_runs(&samples, o->runs, res);
    const double per_step = res->compute / ranks_;
    const double transfer = link->latency + block / link->bandwidth;
    res->model_compute = res->compute;
    res->model_comm = 2 * log2_ceil(ranks_) * link->latency;
    res->model_merge = res->merge;
    res->model =
        (ranks_ - 1) * fmax(per_step, transfer) + per_step + res->model_merge + res->model_comm;
    /* the part of the transfers no compute hid, in the model */
    res->model_comm += (ranks_ - 1) * fmax(0.0, transfer - per_step);
    ft_shape_data_free(&data);
    return failed ? -1 : 0;
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
    calibrate(&link);
    if (rank_ == 0 && !o.json) print_header(&o, &link);
    int failed = 0;
    for (int s = 0; s < o.count; s++) {
        const ft_shape *single = single_node_shape(o.names[s]);
        bench_result res;
        memset(&res, 0, sizeof res);
        res.shape = o.names[s];
        const int bad = !strcmp(o.names[s], "P1") ? bench_ring(single, &o, &link, &res)
                                                  : bench_decode(single, &o, &link, &res);
        int any_bad = bad != 0;
        MPI_Allreduce(MPI_IN_PLACE, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (any_bad) {
            if (rank_ == 0)
                fprintf(stderr, "fai-mpi bench: %s failed: %s\n", o.names[s], fai_mpi_last_error());
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
