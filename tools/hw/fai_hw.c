/* Hardware profiles for `fai plan --hw`. The NPU rows are the constants of docs/design.md
 * ("Hardware profiles"); the host row is completed at run time from what fai's planner reads,
 * so that `fai plan --hw host` checks tiles against the same capacities the planner uses. */
/* sysconf's cache queries are a glibc extension */
#define _DEFAULT_SOURCE
#include "fai_hw.h"

#include "fai.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

/* A sysfs cache size ("32768K", "1M") in bytes; 0 if unreadable. */
static int64_t read_sysfs_bytes(const char *path) {
    FILE *file = fopen(path, "r");
    if (!file) return 0;
    long long value = 0;
    char unit = 0;
    const int fields = fscanf(file, "%lld%c", &value, &unit);
    fclose(file);
    if (fields < 1 || value < 0) return 0;
    if (fields == 2 && (unit == 'K' || unit == 'k')) return (int64_t)value * KIB;
    if (fields == 2 && unit == 'M') return (int64_t)value * KIB * KIB;
    return (int64_t)value;
}

/* L3 is not a planner input (fai's tiles live in L1d and L2), so the library does not report
 * it; it is shown for context, from sysfs first: some hypervisors' CPUID, which sysconf reads,
 * reports a different L3 than the OS's topology. */
static int64_t read_l3_bytes(void) {
    for (int index = 0; index < 8; index++) {
        char path[96];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", index);
        if (read_sysfs_bytes(path) != 3) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
        const int64_t bytes = read_sysfs_bytes(path);
        if (bytes > 0) return bytes;
    }
#if defined(_SC_LEVEL3_CACHE_SIZE)
    const long bytes = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (bytes > 0) return (int64_t)bytes;
#endif
    return 0;
}

/* The capacities fai_plan_get_info reports are the planner's own (read once from the OS); a
 * one-row problem is the cheapest plan that reports them. */
static int read_planner_caches(int64_t *l1d_bytes, int64_t *l2_bytes) {
    fai_problem problem;
    fai_problem_init(&problem);
    problem.batch = problem.heads_q = problem.heads_kv = 1;
    problem.seq_q = problem.seq_kv = 1;
    problem.head_dim = 16;
    problem.workers = 1;
    fai_plan *plan = NULL;
    if (fai_plan_create(&problem, &plan) != FAI_OK) return -1;
    fai_plan_info info;
    const fai_status status = fai_plan_get_info(plan, &info);
    fai_plan_free(plan);
    if (status != FAI_OK) return -1;
    *l1d_bytes = info.l1d_capacity;
    *l2_bytes = info.l2_capacity;
    return 0;
}

static void detect_host(ft_hw *hw) {
    hw->matrix_cores = hw->vector_cores = fai_cpu_count();
    if (read_planner_caches(&hw->l1d_bytes, &hw->l2_bytes)) hw->l1d_bytes = hw->l2_bytes = 0;
    hw->l3_bytes = read_l3_bytes();
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
