/* CPU features, detected once. */
#ifndef FAI_CPUID_H
#define FAI_CPUID_H

#include <stdint.h>

typedef struct fai_cpu_features {
    int avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512bf16, neon;
    /* AMX-TILE and AMX-BF16 by CPUID, with the OS saving tile state (XCR0 bits 17 and 18).
     * Linux also wants a per-process request before the first tile instruction: see
     * fai__amx_enable. */
    int amx_bf16;
} fai_cpu_features;

const fai_cpu_features *fai__cpu_features(void);

/* Asks the kernel, once per process, for permission to use AMX tile data (Linux's
 * arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); nonzero when tiles may be used. A CPU
 * without AMX, a kernel that refuses or a sandbox that blocks the call gives 0, never SIGILL.
 * FAI_AMX=0 in the environment also gives 0 (a switch for comparing tables). */
int fai__amx_enable(void);

/* Per-core L1 data cache and L2 sizes in bytes, read once from the OS (sysfs, then sysconf);
 * 32 KiB and 1 MiB where the OS does not say. The shared L3 likewise, 0 where the OS does not
 * say (no tile is sized by it). */
typedef struct fai_cache_sizes {
    int64_t l1d, l2, l3;
} fai_cache_sizes;

const fai_cache_sizes *fai__cache_sizes(void);

/* The CPU's model name as /proc/cpuinfo gives it (x86: "model name"; Arm: implementer and part),
 * read once, with tabs and newlines replaced (it keys the tuning cache's lines); "unknown" where
 * the OS does not say. */
const char *fai__cpu_model(void);

#endif
