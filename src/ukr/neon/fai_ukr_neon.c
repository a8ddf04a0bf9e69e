/* AArch64 Advanced SIMD micro-kernels (4 lanes). */
#include "ukr/fai_simd_neon.h"
#include "ukr/fai_ukr_body.h"

void fai__cntx_init_neon(fai_cntx *cntx) { init_simd_table(cntx); }
