/* Bit-level f16 and bf16 conversions, exact in both directions (f32 -> 16 bit rounds to nearest
 * even). Written for the reference micro-kernels; SIMD tables use the hardware instructions. */
#include "util/fai_half.h"
#include "util/fai_quant.h"

#include <math.h>
#include <string.h>

static float bits_to_f32(uint32_t bits) {
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

static uint32_t f32_to_bits(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

float fai__f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1fu;
    uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1f) return bits_to_f32(sign | 0x7f800000u | (mantissa << 13));
    if (exponent != 0) return bits_to_f32(sign | ((exponent + 112) << 23) | (mantissa << 13));
    if (mantissa == 0) return bits_to_f32(sign);
    /* subnormal: value = mantissa * 2^-24, exact in f32 */
    const float magnitude = (float)mantissa * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
}

float fai__bf16_to_f32(uint16_t bits) { return bits_to_f32((uint32_t)bits << 16); }

uint16_t fai__f32_to_f16_sat(float value) {
    const uint32_t bits = f32_to_bits(value);
    const uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    const uint32_t abs_bits = bits & 0x7fffffffu;
    if (abs_bits > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (abs_bits == 0x7f800000u) return (uint16_t)(sign | 0x7c00u); /* Inf is a result, kept */
    if (abs_bits >= 0x477ff000u) return (uint16_t)(sign | 0x7bffu); /* finite, rounds past 65504 */
    if (abs_bits >= 0x38800000u) {                                  /* normal f16 */
        const uint32_t exponent = (abs_bits >> 23) - 112;
        uint32_t mantissa = abs_bits & 0x7fffffu;
        uint32_t result = (exponent << 10) | (mantissa >> 13);
        const uint32_t rest = mantissa & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (result & 1u))) result++;
        return (uint16_t)(sign | result);
    }
    if (abs_bits < 0x33000000u) return sign; /* below half the smallest subnormal */
    /* subnormal f16: value / 2^-24 rounded to an integer mantissa */
    const uint32_t exponent = abs_bits >> 23;
    const uint32_t mantissa = (abs_bits & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent; /* 14..24 */
    uint32_t result = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (result & 1u))) result++;
    return (uint16_t)(sign | result);
}

uint16_t fai__f32_to_bf16(float value) {
    const uint32_t bits = f32_to_bits(value);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40u);
    const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)((bits + rounding) >> 16);
}

float fai__load_element(const void *data, int64_t index, fai_dtype dtype) {
    switch (dtype) {
    case FAI_DTYPE_F16:
        return fai__f16_to_f32(((const uint16_t *)data)[index]);
    case FAI_DTYPE_BF16:
        return fai__bf16_to_f32(((const uint16_t *)data)[index]);
    case FAI_DTYPE_I8:
        return (float)((const int8_t *)data)[index];
    case FAI_DTYPE_E4M3:
        return fai__e4m3_to_f32(((const uint8_t *)data)[index]);
    case FAI_DTYPE_E5M2:
        return fai__e5m2_to_f32(((const uint8_t *)data)[index]);
    default:
        return ((const float *)data)[index];
    }
}

void fai__store_element(void *data, int64_t index, fai_dtype dtype, float value) {
    switch (dtype) {
    case FAI_DTYPE_F16:
        ((uint16_t *)data)[index] = fai__f32_to_f16_sat(value);
        break;
    case FAI_DTYPE_BF16:
        ((uint16_t *)data)[index] = fai__f32_to_bf16(value);
        break;
    case FAI_DTYPE_I8:
        ((int8_t *)data)[index] = fai__f32_to_i8_sat(value);
        break;
    case FAI_DTYPE_E4M3:
        ((uint8_t *)data)[index] = fai__f32_to_e4m3_sat(value);
        break;
    case FAI_DTYPE_E5M2:
        ((uint8_t *)data)[index] = fai__f32_to_e5m2_sat(value);
        break;
    default:
        ((float *)data)[index] = value;
    }
}

/* value rounded to an f32 with its last bit set when inexact (rounding to odd): the f32 below
 * |value| (truncation), made odd. Exact values, infinities and NaN pass as they are. */
static float f64_to_f32_odd(double value) {
    float rounded = (float)value;
    if ((double)rounded == value || isnan(value)) return rounded;
    if (fabs((double)rounded) > fabs(value)) rounded = nextafterf(rounded, 0.0f);
    uint32_t bits;
    memcpy(&bits, &rounded, sizeof bits);
    bits |= 1u;
    memcpy(&rounded, &bits, sizeof rounded);
    return rounded;
}

void fai__store_element_f64(void *data, int64_t index, fai_dtype dtype, double value) {
    if (dtype == FAI_DTYPE_F32)
        ((float *)data)[index] = (float)value;
    else
        fai__store_element(data, index, dtype, f64_to_f32_odd(value));
}
