/* A persistent pthread pool. The caller of a run is thread 0; threads 1..n-1 sleep on a
 * condition variable between runs (no spinning), wake on a new generation, run their share and
 * report back. Runs on one pool are serialised by run_lock, so concurrent fai_run calls from
 * several user threads are safe. */
#include "fai_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

struct fai_pool {
    int64_t size; /* threads in all, the caller included */
    pthread_t *threads;

    pthread_mutex_t run_lock; /* held for the whole of one run */
    pthread_mutex_t lock;     /* guards the fields below */
    pthread_cond_t wake, done;
    uint64_t generation;
    int stopping;
    int64_t active;  /* threads taking part in the current run, the caller included */
    int64_t pending; /* helpers of the current run not finished yet */
    fai_pool_task_fn fn;
    void *arg;
};

typedef struct helper_start {
    fai_pool *pool;
    int64_t index;
} helper_start;

static void *helper_main(void *start_arg) {
    helper_start start = *(helper_start *)start_arg;
    free(start_arg);
    fai_pool *pool = start.pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        while (!pool->stopping && pool->generation == seen)
            pthread_cond_wait(&pool->wake, &pool->lock);
        if (pool->stopping) break;
        seen = pool->generation;
        if (start.index >= pool->active) continue;
        fai_pool_task_fn fn = pool->fn;
        void *arg = pool->arg;
        pthread_mutex_unlock(&pool->lock);
        fn(arg, start.index);
        pthread_mutex_lock(&pool->lock);
        if (--pool->pending == 0) pthread_cond_signal(&pool->done);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

int64_t fai_cpu_count(void) {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int64_t)online : 1;
}

fai_status fai_pool_create(int64_t threads, fai_pool **out) {
    fai__clear_error();
    if (!out) return fai__fail(FAI_ERR_INVALID_ARG, "pool = NULL: nowhere to return the pool");
    *out = NULL;
    if (threads < 0 || threads > FAI_MAX_WORKERS)
        return fai__fail(FAI_ERR_INVALID_ARG, "threads = %lld is outside [0, %d]",
                         (long long)threads, FAI_MAX_WORKERS);
    if (threads == 0) threads = fai_cpu_count();
    fai_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return fai__fail(FAI_ERR_NO_MEMORY, "no memory for a pool");
    pool->size = threads;
    pool->threads = calloc((size_t)threads, sizeof *pool->threads);
    if (!pool->threads) {
        free(pool);
        return fai__fail(FAI_ERR_NO_MEMORY, "no memory for %lld threads", (long long)threads);
    }
    pthread_mutex_init(&pool->run_lock, NULL);
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
    for (int64_t i = 1; i < threads; i++) {
        helper_start *start = malloc(sizeof *start);
        if (start) start->pool = pool, start->index = i;
        if (!start || pthread_create(&pool->threads[i], NULL, helper_main, start) != 0) {
            free(start);
            pool->size = i; /* join only the threads started */
            fai_pool_free(pool);
            return fai__fail(FAI_ERR_NO_MEMORY, "could not start thread %lld of %lld", (long long)i,
                             (long long)threads);
        }
    }
    *out = pool;
    return FAI_OK;
}

void fai_pool_free(fai_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->lock);
    pool->stopping = 1;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    for (int64_t i = 1; i < pool->size; i++)
        pthread_join(pool->threads[i], NULL);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->done);
    pthread_mutex_destroy(&pool->lock);
    pthread_mutex_destroy(&pool->run_lock);
    free(pool->threads);
    free(pool);
}

int64_t fai__pool_size(const fai_pool *pool) { return pool->size; }

void fai__pool_run(fai_pool *pool, int64_t threads, fai_pool_task_fn fn, void *arg) {
    if (threads > pool->size) threads = pool->size;
    if (threads <= 1) {
        fn(arg, 0);
        return;
    }
    pthread_mutex_lock(&pool->run_lock);
    pthread_mutex_lock(&pool->lock);
    pool->fn = fn;
    pool->arg = arg;
    pool->active = threads;
    pool->pending = threads - 1;
    pool->generation++;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);

    fn(arg, 0);

    pthread_mutex_lock(&pool->lock);
    while (pool->pending > 0)
        pthread_cond_wait(&pool->done, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
    pthread_mutex_unlock(&pool->run_lock);
}

/* The process-wide pool, started on first use with one thread per online CPU and kept for the
 * life of the process. */
static fai_pool *default_pool;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static void create_default_pool(void) {
    if (fai_pool_create(0, &default_pool) != FAI_OK) default_pool = NULL;
}

fai_pool *fai__default_pool(void) {
    pthread_once(&default_once, create_default_pool);
    return default_pool;
}
