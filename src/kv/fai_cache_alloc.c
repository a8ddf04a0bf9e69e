/* fai_cache_alloc / fai_cache_free: memory for K/V caches on 2 MiB-aligned anonymous mappings
 * with transparent huge pages asked for. Decode streams the whole cache once per step, and on
 * 4 KiB pages that is a TLB miss every few rows; an aligned mapping lets the kernel back it with
 * huge pages from the first touch. The first touch is made by the pool's threads, contiguous
 * shares of whole huge pages taken from a counter (a helper that wakes late takes fewer), so the
 * faulting is divided among them and on a NUMA machine the pages spread over their nodes instead
 * of all landing on the caller's. It spreads, it does not place: which thread reads a page later
 * is not fixed, since fai_run hands workers to threads as they come. */
/* MAP_ANONYMOUS and madvise(MADV_HUGEPAGE) are outside POSIX */
#define _DEFAULT_SOURCE
#include "fai_internal.h"

#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)
/* The smallest page: one write in each faults in every page of the share. */
#define SMALL_PAGE ((size_t)4 << 10)

typedef struct touch_job {
    unsigned char *memory;
    size_t huge_pages; /* the mapping's length in 2 MiB pages */
    int64_t shares;    /* contiguous runs of whole huge pages, one per thread */
    atomic_llong next_share;
} touch_job;

static size_t round_to_huge(size_t bytes) {
    return (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
}

/* Writes one zero per small page: the mapping is zero already, the write only faults it in. */
static void touch_shares(void *arg, int64_t thread_index) {
    touch_job *job = arg;
    (void)thread_index;
    for (int64_t share = atomic_fetch_add(&job->next_share, 1); share < job->shares;
         share = atomic_fetch_add(&job->next_share, 1)) {
        const size_t first = (size_t)share * job->huge_pages / (size_t)job->shares;
        const size_t last = (size_t)(share + 1) * job->huge_pages / (size_t)job->shares;
        volatile unsigned char *bytes = job->memory;
        for (size_t at = first * HUGE_PAGE; at < last * HUGE_PAGE; at += SMALL_PAGE)
            bytes[at] = 0;
    }
}

static void first_touch(unsigned char *memory, size_t length, fai_pool *pool) {
    touch_job job;
    job.memory = memory;
    job.huge_pages = length / HUGE_PAGE;
    const int64_t threads = pool ? fai__pool_size(pool) : 1;
    job.shares = (size_t)threads < job.huge_pages ? threads : (int64_t)job.huge_pages;
    atomic_init(&job.next_share, 0);
    if (job.shares > 1)
        fai__pool_run(pool, job.shares, touch_shares, &job);
    else
        touch_shares(&job, 0);
}

/* A mapping of `length` bytes (a multiple of 2 MiB) starting on a 2 MiB boundary: map 2 MiB
 * more than asked and give back what lies before the boundary and after the end. */
static void *map_aligned(size_t length) {
    const size_t mapped = length + HUGE_PAGE;
    unsigned char *base =
        mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return NULL;
    unsigned char *aligned =
        (unsigned char *)(((uintptr_t)base + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    const size_t before = (size_t)(aligned - base), after = mapped - before - length;
    if (before) munmap(base, before);
    if (after) munmap(aligned + length, after);
    return aligned;
}

fai_status fai_cache_alloc(size_t bytes, fai_pool *pool, void **memory) {
    fai__clear_error();
    if (!memory)
        return fai__fail(FAI_ERR_INVALID_ARG, "memory = NULL: nowhere to return the memory");
    *memory = NULL;
    if (bytes == 0) return fai__fail(FAI_ERR_INVALID_ARG, "bytes = 0: nothing to allocate");
    if (bytes > SIZE_MAX - 2 * HUGE_PAGE)
        return fai__fail(FAI_ERR_OVERFLOW, "bytes = %zu rounded up to 2 MiB pages overflows",
                         bytes);
    const size_t length = round_to_huge(bytes);
    unsigned char *aligned = map_aligned(length);
    if (!aligned)
        return fai__fail(FAI_ERR_NO_MEMORY, "bytes = %zu: could not map %zu bytes", bytes, length);
#ifdef MADV_HUGEPAGE
    (void)madvise(aligned, length, MADV_HUGEPAGE); /* a hint: without huge pages it still works */
#endif
    first_touch(aligned, length, pool ? pool : fai__default_pool());
    *memory = aligned;
    return FAI_OK;
}

void fai_cache_free(void *memory, size_t bytes) {
    if (!memory || bytes == 0 || bytes > SIZE_MAX - 2 * HUGE_PAGE) return;
    munmap(memory, round_to_huge(bytes));
}
