/* Hardware profiles for `fai plan --hw NAME`: the machines whose buffers a tile is checked
 * against. The NPU profiles are the seed's targets (constants); `host` is this CPU, as fai's
 * planner sees it. Adding a machine is adding a row to the table in fai_hw.c. */
#ifndef FAI_HW_H
#define FAI_HW_H

#include <stdint.h>

typedef enum ft_hw_kind {
    FT_HW_CPU, /* fai's own tiles against L1d and L2, from fai_plan_get_info */
    FT_HW_NPU  /* the seed's kernel against UB, L1 and L0A/L0B/L0C (fai_budget.h) */
} ft_hw_kind;

typedef struct ft_hw {
    const char *name;
    ft_hw_kind kind;
    /* NPU: matrix cores (AIC, the seed's blockDim) and vector cores (AIV); CPU: online CPUs in
     * both. cv_ratio: vector cores per matrix core (the seed's CV_RATIO); 1 on a CPU. */
    int64_t matrix_cores, vector_cores, cv_ratio;
    /* NPU buffers in bytes: UB per vector core; L1, L0A, L0B, L0C per matrix core. */
    int64_t ub_bytes, l1_bytes, l0a_bytes, l0b_bytes, l0c_bytes;
    /* CPU caches in bytes per core (L3: the whole cache; 0 when the OS does not say). */
    int64_t l1d_bytes, l2_bytes, l3_bytes;
    const char *source; /* where the numbers come from */
} ft_hw;

/* Looks a profile up by name into *hw; `host` is filled in from this machine (online CPUs, and
 * L1d and L2 as fai's planner reads them). Returns 0, or -1 for an unknown name. */
int ft_hw_find(const char *name, ft_hw *hw);

/* The profile names for a message: "host, ascend950 or ascend910b". */
const char *ft_hw_names(void);

#endif
