/* fai-mpi bench: the link's calibration and the timed steps of sharded decode and ring prefill,
 * beside the model of them (fai_mpi_bench.h; the model is described in fai_mpi_cmd_bench.c). */
#include "fai_mpi_bench.h"
#include "fai_stats.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank_, ranks_;

static void find_ranks(void) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks_);
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

/* Why the last shape failed, when the benchmark's own setup failed (else the library's error). */
static char setup_error[256];

static void setup_failed(const char *what) {
    snprintf(setup_error, sizeof setup_error, "%s", what);
}

const char *ft_mpi_bench_error(void) { return setup_error[0] ? setup_error : fai_mpi_last_error(); }

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
    if (!all_ranks_ok(out && in)) { /* (every rank skips the exchanges alike) */
        free(out);
        free(in);
        setup_failed("no memory for the ring's calibration blocks");
        return NAN;
    }
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

void ft_mpi_bench_calibrate(link_model *link) {
    find_ranks();
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
        setup_failed("the shard's plan or its workspace could not be made on every rank");
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

int ft_mpi_bench_decode(const ft_shape *single, const bench_options *o, const link_model *link,
                        bench_result *res) {
    find_ranks();
    setup_error[0] = '\0';
    decode_setup d;
    if (!all_ranks_ok(make_decode(single, o, &d) == 0)) {
        free_decode(&d);
        setup_failed("the shape's tensors could not be made on every rank (memory, or a Skv past "
                     "2^31 with this --scale)");
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

int ft_mpi_bench_ring(const ft_shape *single, const bench_options *o, const link_model *link,
                      bench_result *res) {
    find_ranks();
    setup_error[0] = '\0';
    const int64_t seq = single->sq * o->scale;
    fai_mpi_zigzag z;
    if (fai_mpi_zigzag_layout(seq, ranks_, rank_, &z) != FAI_OK) return -1;
    ft_shape shape = *single;
    shape.sq = shape.skv = z.rows;
    shape.page_size = 0;
    ft_shape_data data;
    if (!all_ranks_ok(ft_shape_data_create(&shape, 99 + (uint64_t)rank_, &data) == 0)) {
        ft_shape_data_free(&data);
        setup_failed("the shape's tensors could not be made on every rank (memory?)");
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
    if (block > INT_MAX) { /* MPI's counts are int: the library would refuse it too */
        snprintf(setup_error, sizeof setup_error,
                 "a K/V block of %.0f bytes exceeds MPI's int count: --scale %lld is too large "
                 "for %d ranks",
                 block, (long long)o->scale, ranks_);
        ft_shape_data_free(&data);
        return -1;
    }
    res->comm_alone = ranks_ > 1 ? time_ring_exchange((size_t)block, ranks_ - 1, o->runs) : 0.0;
    if (isnan(res->comm_alone)) {
        ft_shape_data_free(&data);
        return -1;
    }

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
