/* Caches emptied between timed runs (`fai bench --cold`). A decode step reads its K/V once, and
 * a serving engine's cache is larger than any cache level; a benchmark that runs the same step
 * back to back finds K/V a run left in a large last-level cache (some machines report hundreds
 * of MiB) and times reads from it rather than from memory. */
#ifndef FAI_EVICT_H
#define FAI_EVICT_H

#include <stddef.h>

typedef struct ft_evictor {
    unsigned char *buffer;
    size_t bytes;
    volatile unsigned long long sink; /* what the reads sum to, kept so they are not dropped */
} ft_evictor;

/* A buffer of at least 1 GiB and twice the last-level cache fai reports, touched once now so its
 * pages exist. Returns 0, or -1 (out of memory; e is then empty). */
int ft_evictor_init(ft_evictor *e);

/* Reads the whole buffer, a word per 64-byte line: what the caches held before is pushed out. */
void ft_evict(ft_evictor *e);

void ft_evictor_free(ft_evictor *e);

#endif
