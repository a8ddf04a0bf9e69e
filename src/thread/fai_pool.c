/* A persistent pthread pool. The caller of a run is thread 0; threads 1..n-1 wait between runs.
 * A waiting thread first polls the run counter for a short while (a model's layers call fai_run
 * back to back, and waking a sleeping thread costs several microseconds, tens in a virtual
 * machine), then sleeps on a condition variable: an idle pool uses no CPU. Runs on one pool are
 * serialised by run_lock, so concurrent fai_run calls from several user threads are safe.
 *
 * Helpers join a run as they wake, and the caller waits only for those that joined: once the
 * caller has done its own share it closes the run, and a helper that wakes after that leaves the
 * run alone. The task takes its work from a shared counter, so a run whose helpers are still
 * asleep is simply done by the threads that are awake, never held up by a wake-up.
 *
 * fork copies only the thread that called it: a child has none of the helpers, and a lock a
 * parent's thread held at that moment stays held for ever. A pool knows the process that
 * started it (the fork generation: an atfork handler counts the forks, so telling costs a load,
 * not a system call per run); in any other, its runs are done by the caller alone, its locks
 * untouched, and fai_pool_free releases its memory without joining anything. */
#include "fai_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* How long a thread polls for the next run before it sleeps, and how long after a caller
 * announced a run (fai_plan_wake). */
#define SPIN_NANOSECONDS 20000
#define WAKE_NANOSECONDS 1000000
/* The bit of `joined` that closes a run to late helpers. */
#define RUN_CLOSED ((int_fast64_t)1 << 40)

struct fai_pool {
    int64_t size;        /* threads in all, the caller included */
    uint_fast64_t forks; /* the fork generation whose threads these are */
    pthread_t *threads;

    pthread_mutex_t run_lock; /* held for the whole of one run */
    pthread_mutex_t lock;     /* guards sleeping and waking */
    pthread_cond_t wake, done;
    atomic_uint_fast64_t generation; /* one more per run */
    atomic_int stopping;
    atomic_int sleepers;             /* helpers asleep on `wake` */
    atomic_int_fast64_t active;      /* threads the current run may use, the caller included */
    atomic_int_fast64_t joined;      /* helpers that joined the current run; RUN_CLOSED once the
                                        caller has stopped admitting them */
    atomic_int_fast64_t finished;    /* helpers of the current run that are done with it */
    atomic_int caller_sleeping;      /* the caller waits on `done` */
    atomic_uint_fast64_t wakes;      /* announced runs (fai__pool_wake) */
    atomic_int_fast64_t awake_until; /* helpers poll until then (CLOCK_MONOTONIC ns) */
    fai_pool_task_fn fn;
    void *arg;
};

static int64_t now_nanoseconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

/* Waits until the run counter moves past `seen` (or the pool stops); returns the new value.
 * Polls for SPIN_NANOSECONDS, or until `awake_until` when a run was announced, then sleeps; an
 * announcement wakes it to poll again. */
static uint_fast64_t wait_for_run(fai_pool *pool, uint_fast64_t seen) {
    uint_fast64_t generation;
    for (;;) {
        int64_t deadline = now_nanoseconds() + SPIN_NANOSECONDS;
        const int64_t announced = atomic_load(&pool->awake_until);
        if (announced > deadline) deadline = announced;
        int polls = 0;
        while ((generation = atomic_load(&pool->generation)) == seen &&
               !atomic_load(&pool->stopping)) {
            cpu_relax();
            if (++polls % 64 == 0 && now_nanoseconds() > deadline) break;
        }
        if (generation != seen || atomic_load(&pool->stopping)) return generation;
        pthread_mutex_lock(&pool->lock);
        atomic_fetch_add(&pool->sleepers, 1);
        /* the caller bumps the counter, then wakes sleepers if it sees any: whichever of the two
         * increments comes second sees the other, so no run is missed (an announcement may be:
         * it is only a hint) */
        const uint_fast64_t wakes = atomic_load(&pool->wakes);
        while ((generation = atomic_load(&pool->generation)) == seen &&
               !atomic_load(&pool->stopping) && atomic_load(&pool->wakes) == wakes)
            pthread_cond_wait(&pool->wake, &pool->lock);
        atomic_fetch_sub(&pool->sleepers, 1);
        pthread_mutex_unlock(&pool->lock);
        if (generation != seen || atomic_load(&pool->stopping)) return generation;
    }
}

/* A helper that joined a run is done with it: the caller may be asleep waiting for it. */
static void leave_run(fai_pool *pool) {
    atomic_fetch_add(&pool->finished, 1);
    /* the caller sets caller_sleeping, then reads `finished`; here the order is the reverse:
     * one of the two sees the other's write, so the caller never sleeps through the last one */
    if (atomic_load(&pool->caller_sleeping)) {
        pthread_mutex_lock(&pool->lock);
        pthread_cond_signal(&pool->done);
        pthread_mutex_unlock(&pool->lock);
    }
}

/* A helper's loop. Helpers have no fixed place in a run: each takes the next index as it joins. */
static void *helper_main(void *pool_arg) {
    fai_pool *pool = pool_arg;
    uint_fast64_t seen = 0;
    for (;;) {
        seen = wait_for_run(pool, seen);
        if (atomic_load(&pool->stopping)) break;
        const int_fast64_t ticket = atomic_fetch_add(&pool->joined, 1);
        if (ticket & RUN_CLOSED) continue; /* its caller is gone: the run is not ours to touch */
        /* joined the current run (perhaps a newer one than seen: it cannot move on before we
         * leave it, so this is the one) */
        seen = atomic_load(&pool->generation);
        const int64_t index = (int64_t)ticket + 1; /* the caller is 0; in order of joining */
        if (index < atomic_load(&pool->active)) pool->fn(pool->arg, index);
        leave_run(pool);
    }
    return NULL;
}

/* Forks this process descends from since the first pool was made (one more in each child). */
static atomic_uint_fast64_t fork_generation;
static pthread_once_t fork_count_once = PTHREAD_ONCE_INIT;

static void count_fork(void) { atomic_fetch_add(&fork_generation, 1); }
static void count_forks(void) { pthread_atfork(NULL, NULL, count_fork); }

/* Read once: sysconf reads /sys on every call, which would cost a plan tens of microseconds. */
static int64_t online_cpus;
static pthread_once_t online_once = PTHREAD_ONCE_INIT;

static void count_cpus(void) {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    online_cpus = online > 0 ? (int64_t)online : 1;
}

int64_t fai_cpu_count(void) {
    pthread_once(&online_once, count_cpus);
    return online_cpus;
}

fai_status fai_pool_create(int64_t threads, fai_pool **out) {
    fai__clear_error();
    if (!out) return fai__fail(FAI_ERR_INVALID_ARG, "pool = NULL: nowhere to return the pool");
    *out = NULL;
    if (threads < 0 || threads > FAI_MAX_WORKERS)
        return fai__fail(FAI_ERR_INVALID_ARG, "threads = %lld is outside [0, %d]",
                         (long long)threads, FAI_MAX_WORKERS);
    if (threads == 0) /* one per online CPU, within the same bound */
        threads = fai_cpu_count() < FAI_MAX_WORKERS ? fai_cpu_count() : FAI_MAX_WORKERS;
    fai_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return fai__fail(FAI_ERR_NO_MEMORY, "no memory for a pool");
    pool->size = threads;
    pthread_once(&fork_count_once, count_forks);
    pool->forks = atomic_load(&fork_generation);
    pool->threads = calloc((size_t)threads, sizeof *pool->threads);
    if (!pool->threads) {
        free(pool);
        return fai__fail(FAI_ERR_NO_MEMORY, "no memory for %lld threads", (long long)threads);
    }
    pthread_mutex_init(&pool->run_lock, NULL);
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->stopping, 0);
    atomic_init(&pool->sleepers, 0);
    atomic_init(&pool->active, 0);
    atomic_init(&pool->joined, RUN_CLOSED); /* no run yet */
    atomic_init(&pool->finished, 0);
    atomic_init(&pool->caller_sleeping, 0);
    atomic_init(&pool->wakes, 0);
    atomic_init(&pool->awake_until, 0);
    for (int64_t i = 1; i < threads; i++) {
        if (pthread_create(&pool->threads[i], NULL, helper_main, pool) != 0) {
            pool->size = i; /* join only the threads started */
            fai_pool_free(pool);
            return fai__fail(FAI_ERR_NO_MEMORY, "could not start thread %lld of %lld", (long long)i,
                             (long long)threads);
        }
    }
    *out = pool;
    return FAI_OK;
}

/* Whether the pool's helpers live in this process (not a child forked after it started). */
static int helpers_here(const fai_pool *pool) {
    return pool->forks == atomic_load_explicit(&fork_generation, memory_order_relaxed);
}

void fai_pool_free(fai_pool *pool) {
    if (!pool) return;
    if (!helpers_here(pool)) { /* nothing to stop or join; its locks may be held for ever */
        free(pool->threads);
        free(pool);
        return;
    }
    pthread_mutex_lock(&pool->lock);
    atomic_store(&pool->stopping, 1);
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

int64_t fai__pool_helpers_joined(const fai_pool *pool) {
    return (int64_t)(atomic_load(&pool->joined) & (RUN_CLOSED - 1));
}

/* Wakes `wanted` sleeping helpers (all of them when no more sleep): a run wakes as many as it
 * can use, not all, since one woken past the run's threads would only join it, leave and poll
 * again, a core's time for nothing (on a large machine, a small decode step would wake every
 * core). Helpers still polling join by themselves; a helper woken late, or not at all, only
 * leaves more of the work to the others. */
static void wake_for_run(fai_pool *pool, int64_t wanted) {
    const int sleeping = atomic_load(&pool->sleepers);
    if (sleeping <= 0 || wanted <= 0) return;
    pthread_mutex_lock(&pool->lock);
    if (wanted >= sleeping)
        pthread_cond_broadcast(&pool->wake);
    else
        for (int64_t i = 0; i < wanted; i++)
            pthread_cond_signal(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
}

/* An announcement wakes every sleeper: the run's thread count is not known yet. */
void fai__pool_wake(fai_pool *pool) {
    if (pool->size <= 1 || !helpers_here(pool)) return;
    atomic_store(&pool->awake_until, now_nanoseconds() + WAKE_NANOSECONDS);
    atomic_fetch_add(&pool->wakes, 1);
    wake_for_run(pool, pool->size - 1);
}

void fai__pool_run(fai_pool *pool, int64_t threads, fai_pool_task_fn fn, void *arg) {
    if (threads > pool->size) threads = pool->size;
    if (threads <= 1 || !helpers_here(pool)) { /* the tasks take their work from a counter */
        fn(arg, 0);
        return;
    }
    pthread_mutex_lock(&pool->run_lock);
    /* an announced run has come: after it, helpers poll only SPIN_NANOSECONDS again (a caller's
     * other work, such as another library's threads, gets the CPUs back) */
    atomic_store(&pool->awake_until, 0);
    pool->fn = fn;
    pool->arg = arg;
    atomic_store(&pool->active, threads);
    atomic_store(&pool->finished, 0);
    atomic_store(&pool->joined, 0);         /* open: publishes fn, arg, active, finished */
    atomic_fetch_add(&pool->generation, 1); /* and calls the helpers */
    wake_for_run(pool, threads - 1);

    fn(arg, 0);

    /* close the run, then wait for the helpers that joined it: poll briefly, then sleep until
     * the last one signals */
    const int_fast64_t joined = atomic_fetch_or(&pool->joined, RUN_CLOSED);
    const int64_t deadline = now_nanoseconds() + SPIN_NANOSECONDS;
    int polls = 0;
    while (atomic_load(&pool->finished) < joined) {
        cpu_relax();
        if (++polls % 64 == 0 && now_nanoseconds() > deadline) break;
    }
    if (atomic_load(&pool->finished) < joined) {
        pthread_mutex_lock(&pool->lock);
        atomic_store(&pool->caller_sleeping, 1);
        while (atomic_load(&pool->finished) < joined)
            pthread_cond_wait(&pool->done, &pool->lock);
        atomic_store(&pool->caller_sleeping, 0);
        pthread_mutex_unlock(&pool->lock);
    }
    pthread_mutex_unlock(&pool->run_lock);
}

/* The process-wide pool, started on first use with one thread per online CPU and kept for the
 * life of the process. Where the system will not start that many (a container's pids limit,
 * RLIMIT_NPROC), half as many, and so on: a pool of one (the caller alone) needs no thread. The
 * message of a count refused does not outlive the call that succeeds. A child forked after it
 * started gets one of its own on first use (its parent's is left alone: its memory is the
 * parent's image, and its locks may be held). */
static _Atomic(fai_pool *) default_pool;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static fai_pool *start_default_pool(void) {
    int64_t threads = fai_cpu_count() < FAI_MAX_WORKERS ? fai_cpu_count() : FAI_MAX_WORKERS;
    fai_pool *pool = NULL;
    while (fai_pool_create(threads, &pool) != FAI_OK && threads > 1)
        threads /= 2;
    fai__clear_error();
    return pool;
}

static void create_default_pool(void) { atomic_store(&default_pool, start_default_pool()); }

fai_pool *fai__default_pool(void) {
    pthread_once(&default_once, create_default_pool);
    fai_pool *pool = atomic_load(&default_pool);
    if (pool && !helpers_here(pool)) {
        fai_pool *own = start_default_pool();
        if (own && atomic_compare_exchange_strong(&default_pool, &pool, own)) return own;
        fai_pool_free(own); /* another thread of the child was first: `pool` is its pool */
    }
    return pool;
}
