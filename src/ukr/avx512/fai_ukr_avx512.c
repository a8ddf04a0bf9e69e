/* AVX-512F micro-kernels (16 lanes, F16C conversions). Compiled with -mavx512f -mfma -mf16c
 * only here; nothing in this file runs before the dispatcher has seen the CPU features. */
#include "ukr/fai_simd_avx512.h"
#include "ukr/fai_ukr_body.h"

void fai__cntx_init_avx512(fai_cntx *cntx) { init_simd_table(cntx); }
