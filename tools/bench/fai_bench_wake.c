/* `fai bench --wake`: a run's latency on a polling and on a sleeping pool. A tiny problem, so
 * that the time is the pool's hand-over and not the work. */
#define _POSIX_C_SOURCE 200809L
#include "fai_bench_wake.h"
#include "fai_json.h"
#include "fai_stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Long enough for every helper to have stopped polling and gone to sleep. */
#define IDLE_NANOSECONDS 50000000L
#define MAX_ROUNDS 1000

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

typedef struct tiny_run {
    fai_plan *plan;
    fai_tensors tensors;
    void *workspace;
    size_t workspace_size;
    float *buffers;
} tiny_run;

static int tiny_run_create(tiny_run *run, fai_pool *pool, int64_t threads) {
    memset(run, 0, sizeof *run);
    enum { HEADS = 2, KEYS = 64, DIM = 64 };
    fai_problem pb;
    fai_problem_init(&pb);
    pb.batch = 1, pb.heads_q = pb.heads_kv = HEADS, pb.seq_q = 1, pb.seq_kv = KEYS;
    pb.head_dim = DIM, pb.k_dtype = pb.v_dtype = FAI_DTYPE_F32;
    pb.threads = threads, pb.workers = threads;
    if (fai_plan_create(&pb, &run->plan) != FAI_OK) return -1;
    if (pool) fai_plan_set_pool(run->plan, pool);
    const size_t q = HEADS * DIM, kv = (size_t)KEYS * HEADS * DIM;
    run->buffers = calloc(2 * q + 2 * kv, sizeof(float));
    run->workspace_size = fai_plan_workspace_size(run->plan);
    run->workspace = malloc(run->workspace_size ? run->workspace_size : 1);
    if (!run->buffers || !run->workspace) return -1;
    float *at = run->buffers;
    for (size_t i = 0; i < 2 * q + 2 * kv; i++)
        at[i] = (float)(i % 17) * 0.0625f;
    run->tensors.q = fai_tensor_bshd(at, FAI_DTYPE_F32, 1, HEADS, DIM);
    run->tensors.o = fai_tensor_bshd(at + q, FAI_DTYPE_F32, 1, HEADS, DIM);
    run->tensors.k = fai_tensor_bshd(at + 2 * q, FAI_DTYPE_F32, KEYS, HEADS, DIM);
    run->tensors.v = fai_tensor_bshd(at + 2 * q + kv, FAI_DTYPE_F32, KEYS, HEADS, DIM);
    return 0;
}

static void tiny_run_free(tiny_run *run) {
    fai_plan_free(run->plan);
    free(run->workspace);
    free(run->buffers);
}

static double timed_run(tiny_run *run, int *failed) {
    const double start = now_us();
    *failed |= fai_run(run->plan, &run->tensors, run->workspace, run->workspace_size) != FAI_OK;
    return now_us() - start;
}

/* Medians of a run right after another (hot) and of one after the pool idled (cold). */
static int measure(tiny_run *run, int rounds, double *hot, double *cold) {
    static double hot_us[MAX_ROUNDS], cold_us[MAX_ROUNDS];
    const struct timespec idle = {0, IDLE_NANOSECONDS};
    int failed = 0;
    for (int r = 0; r < rounds; r++) {
        timed_run(run, &failed);
        hot_us[r] = timed_run(run, &failed);
        nanosleep(&idle, NULL);
        cold_us[r] = timed_run(run, &failed);
    }
    *hot = ft_median(hot_us, rounds);
    *cold = ft_median(cold_us, rounds);
    return failed ? -1 : 0;
}

int ft_bench_wake(fai_pool *pool, int64_t threads, int rounds, int json) {
    if (rounds < 1) rounds = 1;
    if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
    tiny_run pooled, alone;
    double hot = 0, cold = 0, alone_hot = 0, alone_cold = 0;
    int bad = tiny_run_create(&pooled, pool, threads) || tiny_run_create(&alone, NULL, 1);
    if (!bad)
        bad = measure(&pooled, rounds, &hot, &cold) ||
              measure(&alone, rounds, &alone_hot, &alone_cold);
    tiny_run_free(&pooled);
    tiny_run_free(&alone);
    if (bad) {
        fprintf(stderr, "fai bench: --wake on %lld threads: %s\n", (long long)threads,
                fai_last_error());
        return -1;
    }
    if (json) {
        ft_json out;
        ft_json_init(&out, stdout, 0);
        ft_json_object(&out, NULL);
        ft_json_bool(&out, "wake", 1);
        ft_json_int(&out, "threads", (long long)threads);
        ft_json_int(&out, "rounds", rounds);
        ft_json_number(&out, "after_run_us", "%.2f", hot);
        ft_json_number(&out, "after_idle_us", "%.2f", cold);
        ft_json_number(&out, "one_thread_after_run_us", "%.2f", alone_hot);
        ft_json_number(&out, "one_thread_after_idle_us", "%.2f", alone_cold);
        ft_json_end(&out);
    } else
        printf("wake   %lld threads, tiny decode (median of %d): right after a run %.1f us, "
               "after %ld ms idle %.1f us; on the calling thread alone %.1f us and %.1f us\n",
               (long long)threads, rounds, hot, IDLE_NANOSECONDS / 1000000, cold, alone_hot,
               alone_cold);
    return 0;
}
