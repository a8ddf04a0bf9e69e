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
    return count % 2 ? values[count / 2] : 0.5 * (values[count / 2 - 1] + values[count / 2]);
}

double ft_quantile(const double *sorted, int64_t n, double q) {
    const int64_t at = (int64_t)(q * (double)(n - 1) + 0.5);
    return sorted[at < 0 ? 0 : at >= n ? n - 1 : at];
}

double ft_now_seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}
