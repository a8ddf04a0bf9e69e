/* Element sizes and names of the dtypes. */
#include "fai.h"

size_t fai_dtype_size(fai_dtype dtype) {
    switch (dtype) {
    case FAI_DTYPE_F32:
        return 4;
    case FAI_DTYPE_F16:
    case FAI_DTYPE_BF16:
        return 2;
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
    }
    return "unknown";
}
