/* CPU features, detected once. */
#ifndef FAI_CPUID_H
#define FAI_CPUID_H

#include <stdint.h>

typedef struct fai_cpu_features {
    int avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512bf16, neon;
} fai_cpu_features;

const fai_cpu_features *fai__cpu_features(void);

/* Per-core L1 data cache and L2 sizes in bytes, read once from the OS (sysfs, then sysconf);
 * 32 KiB and 1 MiB where the OS does not say. */
typedef struct fai_cache_sizes {
    int64_t l1d, l2;
} fai_cache_sizes;

const fai_cache_sizes *fai__cache_sizes(void);

#endif
