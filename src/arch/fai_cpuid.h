/* CPU features, detected once. */
#ifndef FAI_CPUID_H
#define FAI_CPUID_H

#include <stdint.h>

typedef struct fai_cpu_features {
    int avx2, fma, f16c, avx512f, avx512bw, avx512dq, avx512vl, avx512bf16, neon;
    /* AMX-TILE and AMX-BF16 by CPUID, with the OS saving tile state (XCR0 bits 17 and 18).
     * Linux also wants a per-process request before the first tile instruction: see
     * fai__amx_enable. */
    int amx_bf16;
    int vendor_amd; /* "AuthenticAMD" */
} fai_cpu_features;

const fai_cpu_features *fai__cpu_features(void);

/* Asks the kernel, once per process, for permission to use AMX tile data (Linux's
 * arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); nonzero when tiles may be used. A CPU
 * without AMX, a kernel that refuses or a sandbox that blocks the call gives 0, never SIGILL.
 * FAI_AMX=0 in the environment also gives 0 (a switch for comparing tables). */
int fai__amx_enable(void);

/* Why fai__amx_enable gave 0 on a CPU whose CPUID has AMX, for the error that refuses
 * FAI_ISA=amx: "FAI_AMX=0", "the kernel refused tile data", or NULL when the CPU has no AMX. */
const char *fai__amx_refusal(void);

/* Whether the avx512 table (and the amx table built on it) takes the bf16 dot-product entries
 * (vdpbf16ps) of a CPU that has them, rather than leaving bf16 operands to be widened to f32 for
 * FMAs: where the CPU runs them at least at the f32 FMAs' rate per element. AMD's Zen 4 and 5 run
 * them at twice that rate; a Sapphire Rapids Xeon at half (123 against 245 GFLOP/s, a product
 * counted as two), where the FMA path ran all-bf16 prefill 2.1-2.3x and decode 1.04-1.07x faster;
 * so AMD only, by the CPUID vendor. FAI_BF16_DOT=1 or 0 in the environment forces the choice when
 * the tables are set up (a switch for tests and comparisons). */
int fai__bf16_dot_preferred(void);

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
