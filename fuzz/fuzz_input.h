/* fuzz_input.h - a byte reader for the fuzz harnesses: values are taken from the front of the
 * input, and an exhausted input reads as zeros, so every input decodes to something; and what
 * the harnesses share: their CHECK and their pools. */
#ifndef FAI_FUZZ_INPUT_H
#define FAI_FUZZ_INPUT_H

#include "fai.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A harness's check: on failure the file and line, then abort, which libFuzzer reports as a
 * finding and keeps the input of. */
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

typedef struct fuzz_input {
    const uint8_t *data;
    size_t size, pos;
} fuzz_input;

static inline uint8_t fuzz_u8(fuzz_input *in) {
    return in->pos < in->size ? in->data[in->pos++] : 0;
}

static inline uint64_t fuzz_u64(fuzz_input *in) {
    uint64_t value = 0;
    for (int i = 0; i < 8; i++)
        value |= (uint64_t)fuzz_u8(in) << (8 * i);
    return value;
}

static inline uint32_t fuzz_u32(fuzz_input *in) {
    uint32_t value = 0;
    for (int i = 0; i < 4; i++)
        value |= (uint32_t)fuzz_u8(in) << (8 * i);
    return value;
}

/* An integer in [lo, hi] (hi - lo < 2^32). */
static inline int64_t fuzz_range(fuzz_input *in, int64_t lo, int64_t hi) {
    if (hi <= lo) return lo;
    const uint64_t span = (uint64_t)(hi - lo) + 1;
    const uint64_t raw = span <= 256 ? fuzz_u8(in) : fuzz_u32(in);
    return lo + (int64_t)(raw % span);
}

/* `count` one-byte fields from the front of the input (the harnesses' layouts start so). */
static inline void fuzz_fields(fuzz_input *in, uint8_t *fields, int count) {
    for (int i = 0; i < count; i++)
        fields[i] = fuzz_u8(in);
}

/* The pools of 1 and 2 threads a harness runs its calls on (NULL, the default pool, being the
 * third choice), made once by LLVMFuzzerInitialize; a harness that cannot have them stops. */
static inline void fuzz_pools_create(fai_pool *pools[2], const char *harness) {
    if (fai_pool_create(1, &pools[0]) != FAI_OK || fai_pool_create(2, &pools[1]) != FAI_OK) {
        fprintf(stderr, "%s: fai_pool_create: %s\n", harness, fai_last_error());
        abort();
    }
}

#endif
