/* Small statistics shared by the tools' timings. */
#include "fai_stats.h"

#include <stdlib.h>
#include <time.h>

int ft_compare_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double ft_median(double *values, int64_t count) {
    qsort(values, (size_t)count, sizeof *values, ft_compare_double);
    return ft_quantile(values, count, 0.5);
}

double ft_quantile(const double *sorted, int64_t n, double q) {
    const double at = q <= 0.0 ? 0.0 : q >= 1.0 ? (double)(n - 1) : q * (double)(n - 1);
    const int64_t below = (int64_t)at;
    if (below + 1 >= n) return sorted[n - 1];
    return sorted[below] + (at - (double)below) * (sorted[below + 1] - sorted[below]);
}

double ft_now_seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}
