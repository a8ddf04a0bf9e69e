/* CPU feature detection, run once and cached. */
#include "arch/fai_cpuid.h"

#include <pthread.h>

static fai_cpu_features features;
static pthread_once_t features_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static unsigned long long read_xcr0(void) {
    unsigned int eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}

static void detect(void) {
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return;
    const int osxsave = (ecx >> 27) & 1;
    const unsigned long long xcr0 = osxsave ? read_xcr0() : 0;
    const int ymm_state = (xcr0 & 0x6) == 0x6;
    const int zmm_state = (xcr0 & 0xe6) == 0xe6;
    features.fma = ymm_state && ((ecx >> 12) & 1);
    features.f16c = ymm_state && ((ecx >> 29) & 1);
    if (__get_cpuid_max(0, 0) < 7) return;
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    features.avx2 = ymm_state && ((ebx >> 5) & 1);
    features.avx512f = zmm_state && ((ebx >> 16) & 1);
    features.avx512bw = zmm_state && ((ebx >> 30) & 1);
    features.avx512vl = zmm_state && ((ebx >> 31) & 1);
    __cpuid_count(7, 1, eax, ebx, ecx, edx);
    features.avx512bf16 = features.avx512f && ((eax >> 5) & 1);
}
#elif defined(__aarch64__)
static void detect(void) {
    features.neon = 1; /* Advanced SIMD is mandatory on AArch64 */
}
#else
static void detect(void) {
}
#endif

const fai_cpu_features *fai__cpu_features(void) {
    pthread_once(&features_once, detect);
    return &features;
}
