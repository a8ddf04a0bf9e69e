/* Portable conversions between f32 and the 16-bit float formats. */
#ifndef FAI_HALF_H
#define FAI_HALF_H

#include <stdint.h>

float fai__f16_to_f32(uint16_t bits);
float fai__bf16_to_f32(uint16_t bits);
/* Round to nearest even; finite values beyond the f16 range saturate to +-65504; NaN stays NaN. */
uint16_t fai__f32_to_f16_sat(float value);
/* Round to nearest even; NaN stays a (quiet) NaN. */
uint16_t fai__f32_to_bf16(float value);

#endif
