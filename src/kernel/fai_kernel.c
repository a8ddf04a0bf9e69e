/* The kernel driver fai_run uses: the body of fai_kernel_body.h without stage timers. */
#define FAI_KERNEL_LAPS 0
#include "kernel/fai_kernel_body.h"

void fai__kernel_run_worker(const fai_plan *plan, const fai_tensors *t, int64_t worker,
                            unsigned char *ws, unsigned char *ws_base) {
    kernel_run_worker(plan, t, worker, ws, ws_base);
}
