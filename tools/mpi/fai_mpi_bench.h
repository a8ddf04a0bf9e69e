/* The parts of `fai-mpi bench` (fai_mpi_cmd_bench.c): the link's calibration and the timed
 * steps of sharded decode and ring prefill (fai_mpi_bench_run.c). */
#ifndef FAI_MPI_BENCH_H
#define FAI_MPI_BENCH_H

#include "fai_mpi_tool.h"
#include "fai_shape.h"

#include <stdint.h>

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

/* The link's latency and bandwidth, all ranks exchanging around the ring (collective). */
void ft_mpi_bench_calibrate(link_model *link);

/* A decode-like shape with Skv scaled, K/V sharded over the ranks, and a ring prefill of P1's
 * sequence scaled the same way: the measured steps and the model's (collective). 0, or -1 on
 * every rank when one failed, with why in ft_mpi_bench_error() (on rank 0 at least: a failure of
 * the library's, or of the benchmark's own setup). */
int ft_mpi_bench_decode(const ft_shape *single, const bench_options *o, const link_model *link,
                        bench_result *res);
int ft_mpi_bench_ring(const ft_shape *single, const bench_options *o, const link_model *link,
                      bench_result *res);
const char *ft_mpi_bench_error(void);

#endif
