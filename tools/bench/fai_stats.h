/* Small statistics shared by the tools' timings. */
#ifndef FAI_STATS_H
#define FAI_STATS_H

#include <stdint.h>

/* Seconds on the monotonic clock, for timing a run. */
double ft_now_seconds(void);

/* qsort's comparison for doubles, ascending. */
int ft_compare_double(const void *a, const void *b);

/* The median of count > 0 values (the mean of the middle two when count is even); sorts them. */
double ft_median(double *values, int64_t count);

/* The value at fraction q of n > 0 sorted values, between the two nearest ranks in proportion
 * (numpy's default "linear" quantile): q = 0.5 is ft_median's value. */
double ft_quantile(const double *sorted, int64_t n, double q);

#endif
