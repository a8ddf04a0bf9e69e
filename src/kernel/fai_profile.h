/* Stage timers of the profiled kernel (fai_kernel_profiled.c). The kernel marks the end of every
 * stage with FAI_LAP(stage): the cycles since the previous mark go to that stage. In the kernel
 * that fai_run uses, FAI_LAP is empty, so profiling costs nothing when it is off. */
#ifndef FAI_PROFILE_H
#define FAI_PROFILE_H

#include "fai.h"

#include <stdint.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
static inline uint64_t fai__ticks(void) { return __rdtsc(); }
#elif defined(__aarch64__)
static inline uint64_t fai__ticks(void) {
    uint64_t ticks;
    __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(ticks));
    return ticks;
}
#else
static inline uint64_t fai__ticks(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
#endif

/* This thread's stage totals and its last mark. */
typedef struct fai_stage_clock {
    uint64_t ticks[FAI_STAGE_COUNT];
    uint64_t last;
} fai_stage_clock;

extern _Thread_local fai_stage_clock fai__stage_clock;

/* The stages this thread's profiled run leaves out, bits 1u << stage (fai_run_profiled_without):
 * FAI_STAGE_QK, FAI_STAGE_SOFTMAX, FAI_STAGE_PV and FAI_STAGE_STORE. */
extern _Thread_local unsigned fai__left_out;

static inline void fai__lap(fai_stage stage) {
    const uint64_t now = fai__ticks();
    fai__stage_clock.ticks[stage] += now - fai__stage_clock.last;
    fai__stage_clock.last = now;
}

#endif
