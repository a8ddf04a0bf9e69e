/* The row softmax of `fai bench --baseline` (fai_baseline.c), compiled for the baseline ISA and,
 * on x86-64, once more for AVX2 and for AVX-512. */
#ifndef FAI_BASELINE_SOFTMAX_H
#define FAI_BASELINE_SOFTMAX_H

#include <stdint.h>

/* Row softmax in place over the visible columns [first, last] of s[0, n); the others become 0,
 * and so does a row with no visible column. */
typedef void ft_baseline_softmax_row_fn(float *s, int64_t n, int64_t first, int64_t last);

/* The row function for this CPU's widest vectors. */
ft_baseline_softmax_row_fn *ft_baseline_pick_softmax_row(void);

#endif
