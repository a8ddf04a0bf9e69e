/* The thread pool's runs: no index of a run done twice or past its thread count, and a run that
 * uses fewer threads than the pool has wakes no more sleeping helpers than it can use. */
#include "fai.h"
#include "fai_internal.h"
#include "test_util.h"

#include <stdatomic.h>
#include <time.h>

typedef struct index_counts {
    atomic_int calls[8];
} index_counts;

static void count_index(void *arg, int64_t index) {
    index_counts *counts = arg;
    atomic_fetch_add(&counts->calls[index], 1);
}

static void pause_ms(long ms) {
    const struct timespec pause = {0, ms * 1000000L};
    nanosleep(&pause, NULL);
}

/* A pool of 8 whose helpers have gone to sleep (they poll for 20 us after a run): a run of 2
 * threads does indices 0 and at most 1 once each, and wakes at most the one helper it needs,
 * where a wake-all would bring all 7 (each then polling before it sleeps again). A helper may
 * still be polling, or be woken spuriously, in a loaded round; the best of five rounds must
 * show one at most. */
TEST(pool_wakes_only_the_helpers_a_run_uses) {
    fai_pool *pool = NULL;
    REQUIRE(fai_pool_create(8, &pool) == FAI_OK);
    index_counts counts = {0};
    fai__pool_run(pool, 8, count_index, &counts); /* the helpers start */
    CHECK(atomic_load(&counts.calls[0]) == 1);
    int64_t fewest = 8;
    for (int round = 0; round < 5; round++) {
        pause_ms(50); /* asleep by now */
        index_counts two = {0};
        fai__pool_run(pool, 2, count_index, &two);
        CHECK(atomic_load(&two.calls[0]) == 1 && atomic_load(&two.calls[1]) <= 1);
        for (int i = 2; i < 8; i++)
            CHECK(atomic_load(&two.calls[i]) == 0);
        pause_ms(20); /* a helper woken for the run has joined it by now, late or not */
        const int64_t joined = fai__pool_helpers_joined(pool);
        if (joined < fewest) fewest = joined;
    }
    printf("  fewest helpers woken for a run of 2 threads: %lld of 7\n", (long long)fewest);
    CHECK(fewest <= 1);
    fai_pool_free(pool);
}
