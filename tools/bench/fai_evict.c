/* Caches emptied between timed runs: see fai_evict.h. */
#include "fai_evict.h"

#include "fai.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EVICT_MIN_BYTES ((size_t)1 << 30)
#define LINE 64

int ft_evictor_init(ft_evictor *e) {
    memset(e, 0, sizeof *e);
    size_t bytes = EVICT_MIN_BYTES;
    for (int level = 2; level <= 3; level++) {
        const int64_t cache = fai_cpu_cache_bytes(level);
        if (cache > 0 && (size_t)cache * 2 > bytes) bytes = (size_t)cache * 2;
    }
    bytes = (bytes + 4095) / 4096 * 4096;
    e->buffer = aligned_alloc(4096, bytes);
    if (!e->buffer) return -1;
    memset(e->buffer, 1, bytes);
    e->bytes = bytes;
    return 0;
}

void ft_evict(ft_evictor *e) {
    unsigned long long sum = 0;
    for (size_t at = 0; at < e->bytes; at += LINE)
        sum += e->buffer[at];
    e->sink = sum;
}

void ft_evictor_free(ft_evictor *e) {
    free(e->buffer);
    memset(e, 0, sizeof *e);
}
