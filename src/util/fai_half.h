/* Portable conversions between f32 and the 16-bit float formats. */
#ifndef FAI_HALF_H
#define FAI_HALF_H

#include "fai.h"

#include <stdint.h>

float fai__f16_to_f32(uint16_t bits);
float fai__bf16_to_f32(uint16_t bits);
/* Round to nearest even; finite values beyond the f16 range saturate to +-65504; +-Inf stays
 * +-Inf and NaN stays NaN (a non-finite result is never hidden as a finite one). */
uint16_t fai__f32_to_f16_sat(float value);
/* Round to nearest even; NaN stays a (quiet) NaN. */
uint16_t fai__f32_to_bf16(float value);

/* Element `index` of an array of `dtype`, as f32 (a quantized element's own value, unscaled);
 * and storing an f32 there, rounded as above (quantized: as fai_quant.h encodes). */
float fai__load_element(const void *data, int64_t index, fai_dtype dtype);
void fai__store_element(void *data, int64_t index, fai_dtype dtype, float value);
/* Storing a double there, rounded once as the dtype rounds (f32: to nearest even; the narrower
 * formats through an f32 rounded to odd, whose 24 bits hold theirs and two more, so that the
 * second rounding gives what rounding the double itself would: no double rounding). */
void fai__store_element_f64(void *data, int64_t index, fai_dtype dtype, double value);

#endif
