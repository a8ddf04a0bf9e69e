/* The kernel driver fai_run_profiled uses: the body of fai_kernel_body.h with a timer at the end
 * of every stage (see fai_profile.h). */
#define FAI_KERNEL_LAPS 1
#include "kernel/fai_kernel_body.h"

_Thread_local fai_stage_clock fai__stage_clock;
_Thread_local unsigned fai__left_out;

void fai__kernel_run_worker_profiled(const fai_plan *plan, const fai_tensors *t, int64_t worker,
                                     unsigned char *ws, unsigned char *ws_base) {
    kernel_run_worker(plan, t, worker, ws, ws_base);
}
