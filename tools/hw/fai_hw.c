/* Hardware profiles for `fai plan --hw`. The NPU rows are the constants of docs/design.md
 * ("Hardware profiles"); the host row is completed at run time from what fai's planner reads,
 * so that `fai plan --hw host` checks tiles against the same capacities the planner uses. */
#include "fai_hw.h"

#include "fai.h"

#include <stdio.h>
#include <string.h>

#define KIB INT64_C(1024)

static const ft_hw hw_table[] = {
    {
        .name = "host",
        .kind = FT_HW_CPU,
        .cv_ratio = 1,
        .source = "detected: online CPUs, and L1d and L2 as fai's planner reads them",
    },
    {
        .name = "ascend950",
        .kind = FT_HW_NPU,
        .matrix_cores = 28,
        .vector_cores = 56,
        .cv_ratio = 2,
        .ub_bytes = 248 * KIB,
        .l1_bytes = 512 * KIB,
        .l0a_bytes = 64 * KIB,
        .l0b_bytes = 64 * KIB,
        .l0c_bytes = 256 * KIB,
        .source = "CATLASS arch constants; core counts from a CANN platform config",
    },
    {
        .name = "ascend910b",
        .kind = FT_HW_NPU,
        .matrix_cores = 24,
        .vector_cores = 48,
        .cv_ratio = 2,
        .ub_bytes = 192 * KIB,
        .l1_bytes = 512 * KIB,
        .l0a_bytes = 64 * KIB,
        .l0b_bytes = 64 * KIB,
        .l0c_bytes = 128 * KIB,
        .source = "CATLASS arch constants (AtlasA2)",
    },
};
static const int hw_count = (int)(sizeof hw_table / sizeof hw_table[0]);

const char *ft_hw_names(void) {
    static char names[256];
    if (names[0]) return names;
    size_t used = 0;
    for (int i = 0; i < hw_count && used < sizeof names; i++) {
        const char *separator = i == 0 ? "" : i == hw_count - 1 ? " or " : ", ";
        used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", separator,
                                 hw_table[i].name);
    }
    return names;
}

/* The caches as fai's planner reads them (L3 for context: no tile is sized by it). */
static void detect_host(ft_hw *hw) {
    hw->matrix_cores = hw->vector_cores = fai_cpu_count();
    hw->l1d_bytes = fai_cpu_cache_bytes(1);
    hw->l2_bytes = fai_cpu_cache_bytes(2);
    hw->l3_bytes = fai_cpu_cache_bytes(3);
}

int ft_hw_find(const char *name, ft_hw *hw) {
    for (int i = 0; i < hw_count; i++) {
        if (strcmp(name, hw_table[i].name)) continue;
        *hw = hw_table[i];
        if (hw->kind == FT_HW_CPU) detect_host(hw);
        return 0;
    }
    return -1;
}
