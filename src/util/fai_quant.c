/* Bit-level int8 and fp8 conversions. e4m3 and e5m2 decode exactly to f32; encoding rounds the
 * f32 mantissa to the fp8 one (nearest even) on the bits, with the subnormal range (below the
 * smallest normal, steps of its smallest subnormal) rounded as an integer multiple. */
#include "util/fai_quant.h"

#include <math.h>
#include <string.h>

float fai__quant_max(fai_dtype dtype) {
    switch (dtype) {
    case FAI_DTYPE_I8:
        return 127.0f;
    case FAI_DTYPE_E4M3:
        return 448.0f;
    case FAI_DTYPE_E5M2:
        return 57344.0f;
    default:
        return 0.0f;
    }
}

/* An fp8 with `mantissa_bits` and exponent `bias`: sign, exponent field e, mantissa m give
 * (-1)^s 2^(e - bias) (1 + m / 2^mb) for e > 0 and (-1)^s 2^(1 - bias) m / 2^mb for e = 0. */
static float fp8_to_f32(uint8_t bits, int mantissa_bits, int bias) {
    const int exponent = (bits & 0x7f) >> mantissa_bits;
    const int mantissa = bits & ((1 << mantissa_bits) - 1);
    const float magnitude = exponent == 0 ? ldexpf((float)mantissa, 1 - bias - mantissa_bits)
                                          : ldexpf((float)((1 << mantissa_bits) | mantissa),
                                                   exponent - bias - mantissa_bits);
    return bits & 0x80 ? -magnitude : magnitude;
}

float fai__e4m3_to_f32(uint8_t bits) {
    if ((bits & 0x7f) == 0x7f) return bits & 0x80 ? -NAN : NAN;
    return fp8_to_f32(bits, 3, 7);
}

float fai__e5m2_to_f32(uint8_t bits) {
    if ((bits & 0x7c) == 0x7c) { /* the binary16 exponent of all ones */
        if (bits & 0x03) return bits & 0x80 ? -NAN : NAN;
        return bits & 0x80 ? -INFINITY : INFINITY;
    }
    return fp8_to_f32(bits, 2, 15);
}

/* |value| (finite, not NaN) to the unsigned fp8 code, saturated at max_code. */
static uint32_t encode_magnitude(float magnitude, int mantissa_bits, int bias, uint32_t max_code) {
    const float smallest_normal = ldexpf(1.0f, 1 - bias);
    uint32_t code;
    if (magnitude < smallest_normal) {
        /* multiples of the smallest subnormal, rounded to nearest even by the FPU's mode; a
         * result equal to 2^mb is the smallest normal's code, as the encoding is continuous */
        code = (uint32_t)nearbyintf(ldexpf(magnitude, bias - 1 + mantissa_bits));
    } else {
        uint32_t bits;
        memcpy(&bits, &magnitude, sizeof bits);
        const int drop = 23 - mantissa_bits;
        bits += ((uint32_t)1 << (drop - 1)) - 1 + ((bits >> drop) & 1); /* nearest even */
        const int64_t rebased = (int64_t)(bits >> drop) - ((int64_t)(127 - bias) << mantissa_bits);
        code = rebased > (int64_t)max_code ? max_code : (uint32_t)rebased;
    }
    return code > max_code ? max_code : code;
}

uint8_t fai__f32_to_e4m3_sat(float value) {
    const uint8_t sign = signbit(value) ? 0x80 : 0;
    if (isnan(value)) return (uint8_t)(sign | 0x7f);
    const float magnitude = fabsf(value);
    if (isinf(magnitude)) return (uint8_t)(sign | 0x7e);
    return (uint8_t)(sign | encode_magnitude(magnitude, 3, 7, 0x7e));
}

uint8_t fai__f32_to_e5m2_sat(float value) {
    const uint8_t sign = signbit(value) ? 0x80 : 0;
    if (isnan(value)) return (uint8_t)(sign | 0x7e);
    const float magnitude = fabsf(value);
    if (isinf(magnitude)) return (uint8_t)(sign | 0x7c);
    return (uint8_t)(sign | encode_magnitude(magnitude, 2, 15, 0x7b));
}

int8_t fai__f32_to_i8_sat(float value) {
    if (isnan(value)) return 0;
    const float clamped = value < -127.0f ? -127.0f : value > 127.0f ? 127.0f : value;
    return (int8_t)nearbyintf(clamped);
}
