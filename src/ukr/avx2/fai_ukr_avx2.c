/* AVX2 + FMA micro-kernels (8 lanes, F16C conversions). Compiled with -mavx2 -mfma -mf16c only
 * here; nothing in this file runs before the dispatcher has seen the CPU features. */
#include "ukr/fai_simd_avx2.h"
#include "ukr/fai_ukr_body.h"

void fai__cntx_init_avx2(fai_cntx *cntx) { init_simd_table(cntx); }
