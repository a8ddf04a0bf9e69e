/* Portable conversions of the quantized K/V element types (int8, fp8 e4m3, fp8 e5m2) to and from
 * f32. Decoding gives the element's own value (the scale is applied by the caller); encoding
 * rounds to nearest even and saturates finite values at the type's largest magnitude. */
#ifndef FAI_QUANT_H
#define FAI_QUANT_H

#include "fai.h"

#include <stdint.h>

/* Largest finite magnitude of each quantized dtype: 127, 448, 57344 (0 for other dtypes). */
float fai__quant_max(fai_dtype dtype);

float fai__e4m3_to_f32(uint8_t bits);
float fai__e5m2_to_f32(uint8_t bits);

/* value rounded to nearest even, finite values beyond the largest finite one saturated to it;
 * NaN gives NaN (e4m3: 0x7f with the sign; e5m2: a quiet NaN) and +-Inf gives e5m2's +-Inf and
 * e4m3's largest finite value (it has no infinity). */
uint8_t fai__f32_to_e4m3_sat(float value);
uint8_t fai__f32_to_e5m2_sat(float value);
/* value rounded to nearest even and clamped to [-127, 127]; NaN gives 0. */
int8_t fai__f32_to_i8_sat(float value);

#endif
