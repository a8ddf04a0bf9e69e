/* What the memory system delivers to a decode step's reads, per K/V layout, with no arithmetic:
 * the ceiling fai's decode is measured against (bench/README.md).
 *
 * Each thread streams its own 128 MiB of K rows as decode reads them: 256-byte rows (D 128 in
 * f16) of 8 kv heads, one head after another, every row of a head in token order, the caches
 * emptied before each pass (fai_evict.h). Token-major pages ([page, token, head, D], fai's
 * benchmark default) put a head's consecutive rows 2 KiB apart; head-major pages ([page, head,
 * token, D], vLLM's) put them next to each other. Each row is asked for `ahead` rows before it is
 * read (0: no software prefetch, the hardware prefetchers alone).
 *
 *     make build && ./build/fai_layout_stream [THREADS]   (default: every online CPU)
 *
 * Prints GB/s per layout and prefetch distance: medians of 3 passes. */
#include "fai.h"
#include "fai_evict.h"
#include "fai_stats.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROW 256
#define HEADS 8
#define TOKENS ((size_t)65536) /* a thread's 128 MiB: 64 Ki tokens x 8 heads x 256 bytes */
#define PASSES 3
#define MAX_THREADS 64

typedef struct stream_task {
    const unsigned char *base;
    int head_major;
    size_t ahead;
    uint64_t sum; /* what the reads add up to, so that they are not dropped */
} stream_task;

static size_t row_offset(int head_major, int head, size_t token) {
    return (head_major ? (size_t)head * TOKENS + token : token * HEADS + (size_t)head) * ROW;
}

static void *stream(void *arg) {
    stream_task *task = arg;
    uint64_t sum = 0;
    for (int h = 0; h < HEADS; h++)
        for (size_t t = 0; t < TOKENS; t++) {
            if (task->ahead && t + task->ahead < TOKENS) {
                const unsigned char *next =
                    task->base + row_offset(task->head_major, h, t + task->ahead);
                for (int line = 0; line < ROW; line += 64)
                    __builtin_prefetch(next + line, 0, 3);
            }
            const uint64_t *row =
                (const uint64_t *)(task->base + row_offset(task->head_major, h, t));
            for (int word = 0; word < ROW / 8; word++)
                sum += row[word];
        }
    task->sum = sum;
    return NULL;
}

/* One pass of every thread over its region; returns GB/s, or -1 when a thread did not start. */
static double pass(unsigned char *const *regions, int threads, int head_major, size_t ahead) {
    stream_task tasks[MAX_THREADS];
    pthread_t ids[MAX_THREADS];
    for (int i = 0; i < threads; i++)
        tasks[i] = (stream_task){regions[i], head_major, ahead, 0};
    const double start = ft_now_seconds();
    int started = 1;
    for (int i = 1; i < threads && started == i; i++)
        started += pthread_create(&ids[i], NULL, stream, &tasks[i]) == 0;
    stream(&tasks[0]);
    for (int i = 1; i < started; i++)
        pthread_join(ids[i], NULL);
    const double seconds = ft_now_seconds() - start;
    return started == threads ? (double)threads * TOKENS * HEADS * ROW / seconds / 1e9 : -1.0;
}

int main(int argc, char **argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : (int)fai_cpu_count();
    if (threads < 1 || threads > MAX_THREADS) {
        fprintf(stderr, "usage: fai_layout_stream [THREADS]   (1 to %d)\n", MAX_THREADS);
        return 2;
    }
    static const size_t aheads[] = {0, 4, 8, 16, 24};
    unsigned char *regions[MAX_THREADS] = {0};
    ft_evictor evictor;
    int status = ft_evictor_init(&evictor);
    for (int i = 0; i < threads && !status; i++) {
        regions[i] = aligned_alloc(4096, TOKENS * HEADS * ROW);
        if (!regions[i])
            status = -1;
        else
            memset(regions[i], 1, TOKENS * HEADS * ROW);
    }
    const int no_memory = status != 0;
    if (no_memory) fprintf(stderr, "fai_layout_stream: out of memory\n");
    if (!status)
        printf("%d threads, each streaming 128 MiB of 256-byte rows of 8 kv heads, head by head,\n"
               "caches emptied before each pass; GB/s, median of %d passes\n\n"
               "layout         ahead=0   ahead=4   ahead=8  ahead=16  ahead=24  (rows)\n",
               threads, PASSES);
    for (int head_major = 0; head_major < 2 && !status; head_major++) {
        printf("%-12s", head_major ? "head-major" : "token-major");
        for (size_t a = 0; a < sizeof aheads / sizeof *aheads && !status; a++) {
            double rates[PASSES];
            for (int p = 0; p < PASSES && !status; p++) {
                ft_evict(&evictor);
                rates[p] = pass(regions, threads, head_major, aheads[a]);
                if (rates[p] < 0) status = -1;
            }
            if (!status) printf("  %8.1f", ft_median(rates, PASSES));
        }
        printf("\n");
    }
    if (status && !no_memory) fprintf(stderr, "fai_layout_stream: threads not started\n");
    for (int i = 0; i < threads; i++)
        free(regions[i]);
    ft_evictor_free(&evictor);
    return status ? 1 : 0;
}
