/* fai_baseline_softmax.c - the baseline's row softmax (fai_baseline_softmax.h). */
#include "fai_baseline_softmax.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

enum { LANES = 16 }; /* partial maxima and sums of a softmax row */

/* -- the row softmax ---------------------------------------------------------------------- */

/* The loops below are written so that the compiler vectorises them (fixed-width partial maxima
 * and sums, no calls); the row function is compiled once more for AVX2 and for AVX-512 and
 * picked when the baseline is created, so the softmax runs the vectors of the machine, as a
 * user's build with -march=native would. (Chosen at run time rather than by target_clones,
 * whose resolver runs before a sanitizer's runtime is up.) */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define BASELINE_X86_CLONES 1
#define BASELINE_INLINE __attribute__((always_inline)) inline
#else
#define BASELINE_X86_CLONES 0
#define BASELINE_INLINE inline
#endif

/* e^x for x <= 0: x = n ln2 + r with |r| <= ln2/2, e^r by its Taylor polynomial to r^6
 * (relative error about 2e-7), 2^n written into the exponent bits. */
static BASELINE_INLINE float exp_nonpositive(float x) {
    const float shifter = 12582912.0f; /* 1.5 * 2^23: x * log2(e) + shifter rounds to an integer */
    /* x >= -87 keeps 2^n normal (e^-87 is 1.6e-38). Compared as bits: for x <= 0 a larger
     * magnitude is a larger unsigned pattern, and integer compares vectorise where a float
     * compare, which may trap, does not */
    uint32_t x_bits;
    memcpy(&x_bits, &x, sizeof x_bits);
    x_bits = x_bits > 0xC2AE0000u ? 0xC2AE0000u : x_bits; /* -87.0f */
    memcpy(&x, &x_bits, sizeof x);
    const float n = (x * 1.44269504f + shifter) - shifter;
    const float r = (x - n * 0.693145752f) - n * 1.42860677e-6f; /* ln 2 in two parts */
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const int32_t bits = ((int32_t)n + 127) * (1 << 23);
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}

/* The row softmax (softmax_row_fn). */
static BASELINE_INLINE void softmax_row_body(float *s, int64_t n, int64_t first, int64_t last) {
    if (last < first) {
        memset(s, 0, (size_t)n * sizeof *s);
        return;
    }
    memset(s, 0, (size_t)first * sizeof *s);
    memset(s + last + 1, 0, (size_t)(n - last - 1) * sizeof *s);
    float *row = s + first;
    const int64_t count = last - first + 1, whole = count / LANES * LANES;

    float lane[LANES], max = row[0];
    for (int k = 0; k < LANES; k++)
        lane[k] = row[0];
    for (int64_t j = 0; j < whole; j += LANES)
        for (int k = 0; k < LANES; k++)
            lane[k] = row[j + k] > lane[k] ? row[j + k] : lane[k];
    for (int k = 0; k < LANES; k++)
        max = lane[k] > max ? lane[k] : max;
    for (int64_t j = whole; j < count; j++)
        max = row[j] > max ? row[j] : max;

    float sum = 0.0f;
    for (int k = 0; k < LANES; k++)
        lane[k] = 0.0f;
    for (int64_t j = 0; j < whole; j += LANES)
        for (int k = 0; k < LANES; k++) {
            const float e = exp_nonpositive(row[j + k] - max);
            row[j + k] = e;
            lane[k] += e;
        }
    for (int64_t j = whole; j < count; j++) {
        row[j] = exp_nonpositive(row[j] - max);
        sum += row[j];
    }
    for (int k = 0; k < LANES; k++)
        sum += lane[k];

    const float inverse = 1.0f / sum;
    for (int64_t j = 0; j < count; j++)
        row[j] *= inverse;
}

static void softmax_row_default(float *s, int64_t n, int64_t first, int64_t last) {
    softmax_row_body(s, n, first, last);
}

#if BASELINE_X86_CLONES
__attribute__((target("avx2"))) static void softmax_row_avx2(float *s, int64_t n, int64_t first,
                                                             int64_t last) {
    softmax_row_body(s, n, first, last);
}

__attribute__((target("avx512f"))) static void softmax_row_avx512(float *s, int64_t n,
                                                                  int64_t first, int64_t last) {
    softmax_row_body(s, n, first, last);
}
#endif

ft_baseline_softmax_row_fn *ft_baseline_pick_softmax_row(void) {
#if BASELINE_X86_CLONES
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return softmax_row_avx512;
    if (__builtin_cpu_supports("avx2")) return softmax_row_avx2;
#endif
    return softmax_row_default;
}
