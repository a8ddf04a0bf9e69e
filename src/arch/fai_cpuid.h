/* CPU features, detected once. */
#ifndef FAI_CPUID_H
#define FAI_CPUID_H

typedef struct fai_cpu_features {
    int avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512bf16, neon;
} fai_cpu_features;

const fai_cpu_features *fai__cpu_features(void);

#endif
