/* `fai bench --profile`: whether the seed's Cube and Vector stages hide each other on this CPU. */
#include "fai_bench_overlap.h"
#include "fai_stats.h"

#include <stdio.h>
#include <stdlib.h>

enum { KINDS = 4 };

/* What each kind of run leaves out, in the order of ft_bench_overlap's members. */
static const unsigned left_out_of[KINDS] = {
    0,
    FAI_LEAVE_OUT_SOFTMAX,
    FAI_LEAVE_OUT_QK | FAI_LEAVE_OUT_PV,
    FAI_LEAVE_OUT_QK | FAI_LEAVE_OUT_SOFTMAX | FAI_LEAVE_OUT_PV,
};

fai_status ft_bench_overlap_run(const fai_plan *plan, const fai_tensors *tensors, void *workspace,
                                size_t workspace_bytes, int64_t runs, ft_bench_overlap *out) {
    static fai_profile one; /* large (a busy time per possible thread) */
    double *ms = malloc((size_t)(KINDS * runs) * sizeof *ms);
    if (!ms) return FAI_ERR_NO_MEMORY;
    for (int64_t r = 0; r < runs; r++)
        for (int k = 0; k < KINDS; k++) {
            const fai_status status = fai_run_profiled_without(
                plan, tensors, workspace, workspace_bytes, left_out_of[k], &one);
            if (status != FAI_OK) {
                free(ms);
                return status;
            }
            ms[k * runs + r] = one.wall_seconds * 1e3;
        }
    double median[KINDS];
    for (int k = 0; k < KINDS; k++)
        median[k] = ft_median(ms + k * runs, (int)runs);
    free(ms);
    out->together_ms = median[0];
    out->qk_pv_alone_ms = median[1];
    out->softmax_alone_ms = median[2];
    out->neither_ms = median[3];
    return FAI_OK;
}

double ft_bench_overlap_hidden_ms(const ft_bench_overlap *o) {
    return (o->qk_pv_alone_ms - o->neither_ms) + (o->softmax_alone_ms - o->neither_ms) -
           (o->together_ms - o->neither_ms);
}

void ft_bench_overlap_print(const ft_bench_overlap *o) {
    const double qk_pv = o->qk_pv_alone_ms - o->neither_ms;
    const double softmax = o->softmax_alone_ms - o->neither_ms;
    const double hidden = ft_bench_overlap_hidden_ms(o);
    const double smaller = qk_pv < softmax ? qk_pv : softmax;
    const double size = hidden >= 0 ? hidden : -hidden;
    /* differences of medians below a microsecond are the timers' noise, not a share */
    char share[48] = "the stages too short to compare";
    if (smaller >= 1e-3)
        snprintf(share, sizeof share, "%.0f %% of the smaller", 100.0 * size / smaller);
    printf("       overlap, over the %.3f ms the other stages take (nothing stored): qk+pv alone "
           "%.3f ms, softmax alone %.3f ms, together %.3f ms: %.3f ms %s than one after the "
           "other (%s)\n",
           o->neither_ms, qk_pv, softmax, o->together_ms - o->neither_ms, size,
           hidden >= 0 ? "less" : "more", share);
}

void ft_bench_overlap_json(ft_json *json, const ft_bench_overlap *o) {
    ft_json_object(json, "overlap");
    ft_json_number(json, "together_ms", "%.5f", o->together_ms);
    ft_json_number(json, "qk_pv_alone_ms", "%.5f", o->qk_pv_alone_ms);
    ft_json_number(json, "softmax_alone_ms", "%.5f", o->softmax_alone_ms);
    ft_json_number(json, "neither_ms", "%.5f", o->neither_ms);
    ft_json_number(json, "hidden_ms", "%.5f", ft_bench_overlap_hidden_ms(o));
    ft_json_end(json);
}
