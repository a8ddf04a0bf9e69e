/* Element sizes and names of the dtypes. */
#include "fai.h"

size_t fai_dtype_size(fai_dtype dtype) {
    switch (dtype) {
    case FAI_DTYPE_F32:
        return 4;
    case FAI_DTYPE_F16:
    case FAI_DTYPE_BF16:
        return 2;
    case FAI_DTYPE_I8:
    case FAI_DTYPE_E4M3:
    case FAI_DTYPE_E5M2:
        return 1;
    }
    return 0;
}

const char *fai_dtype_name(fai_dtype dtype) {
    switch (dtype) {
    case FAI_DTYPE_F32:
        return "f32";
    case FAI_DTYPE_F16:
        return "f16";
    case FAI_DTYPE_BF16:
        return "bf16";
    case FAI_DTYPE_I8:
        return "int8";
    case FAI_DTYPE_E4M3:
        return "e4m3";
    case FAI_DTYPE_E5M2:
        return "e5m2";
    }
    return "unknown";
}

int fai_dtype_is_quantized(fai_dtype dtype) {
    return dtype == FAI_DTYPE_I8 || dtype == FAI_DTYPE_E4M3 || dtype == FAI_DTYPE_E5M2;
}
