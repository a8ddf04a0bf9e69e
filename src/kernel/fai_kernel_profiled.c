/* The kernel driver once more, with a timer at the end of every stage (see fai_profile.h):
 * fai_run_profiled runs this copy, fai_run the one without timers. */
#define FAI_KERNEL_PROFILED 1
#include "fai_kernel.c"
