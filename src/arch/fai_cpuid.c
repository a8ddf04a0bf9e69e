/* What this CPU is: its features, its caches and its model name, each read once and cached. */
/* syscall(2) for the AMX permission request */
#define _DEFAULT_SOURCE
#include "arch/fai_cpuid.h"
#include "fai.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__) && (defined(__x86_64__) || defined(__i386__))
#include <sys/syscall.h>
#endif

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
    if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return;
    /* the vendor string is in EBX, EDX, ECX */
    features.vendor_amd = ebx == 0x68747541u && edx == 0x69746e65u && ecx == 0x444d4163u;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return;
    const int osxsave = (ecx >> 27) & 1;
    const unsigned long long xcr0 = osxsave ? read_xcr0() : 0;
    /* the AVX bit too: a hypervisor may save the state and still mask the instructions */
    const int ymm_state = (xcr0 & 0x6) == 0x6 && ((ecx >> 28) & 1);
    const int zmm_state = (xcr0 & 0xe6) == 0xe6;
    features.fma = ymm_state && ((ecx >> 12) & 1);
    features.f16c = ymm_state && ((ecx >> 29) & 1);
    if (__get_cpuid_max(0, 0) < 7) return;
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    features.avx2 = ymm_state && ((ebx >> 5) & 1);
    features.avx512f = zmm_state && ((ebx >> 16) & 1);
    features.avx512bw = zmm_state && ((ebx >> 30) & 1);
    features.avx512dq = zmm_state && ((ebx >> 17) & 1);
    features.avx512vl = zmm_state && ((ebx >> 31) & 1);
    __cpuid_count(7, 1, eax, ebx, ecx, edx);
    features.avx512bf16 = features.avx512f && ((eax >> 5) & 1);
    /* leaf 7 EDX: bit 22 AMX-BF16, bit 24 AMX-TILE; XCR0 bits 17-18: XTILECFG, XTILEDATA */
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    const int tile_state = (xcr0 & 0x60000) == 0x60000;
    features.amx_bf16 = tile_state && features.avx512bf16 && ((edx >> 22) & 1) && ((edx >> 24) & 1);
}
#elif defined(__aarch64__)
static void detect(void) { features.neon = 1; /* Advanced SIMD is mandatory on AArch64 */ }
#else
static void detect(void) {}
#endif

static fai_cache_sizes caches;
static pthread_once_t caches_once = PTHREAD_ONCE_INIT;

/* "48K" / "1024K" / "1M" from sysfs, in bytes; 0 if unreadable. */
static int64_t read_sysfs_size(const char *path) {
    FILE *file = fopen(path, "r");
    if (!file) return 0;
    long long value = 0;
    char unit = 0;
    const int fields = fscanf(file, "%lld%c", &value, &unit);
    fclose(file);
    if (fields < 1 || value <= 0) return 0;
    if (unit == 'K') value <<= 10;
    if (unit == 'M') value <<= 20;
    return (int64_t)value;
}

static void read_sysfs_level(int level, const char *type, int64_t *size) {
    char path[128], text[32];
    for (int index = 0; index < 8; index++) {
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", index);
        if (read_sysfs_size(path) != level) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", index);
        FILE *file = fopen(path, "r");
        if (!file) continue;
        const int ok = fscanf(file, "%31s", text) == 1;
        fclose(file);
        if (!ok || strcmp(text, type)) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
        const int64_t bytes = read_sysfs_size(path);
        if (bytes > 0) *size = bytes;
        return;
    }
}

static void detect_caches(void) {
    caches.l1d = caches.l2 = caches.l3 = 0;
    read_sysfs_level(1, "Data", &caches.l1d);
    read_sysfs_level(2, "Unified", &caches.l2);
    /* sysfs first for L3 too: some hypervisors' CPUID, which sysconf reads, reports a different
     * L3 than the OS's topology */
    read_sysfs_level(3, "Unified", &caches.l3);
#if defined(_SC_LEVEL1_DCACHE_SIZE) && defined(_SC_LEVEL2_CACHE_SIZE)
    if (caches.l1d <= 0) caches.l1d = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    if (caches.l2 <= 0) caches.l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
#if defined(_SC_LEVEL3_CACHE_SIZE)
    if (caches.l3 <= 0) caches.l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    if (caches.l3 < 0) caches.l3 = 0;
    if (caches.l1d < 4096 || caches.l1d > (INT64_C(1) << 24)) caches.l1d = INT64_C(32) << 10;
    if (caches.l2 < 65536 || caches.l2 > (INT64_C(1) << 30)) caches.l2 = INT64_C(1) << 20;
}

const fai_cache_sizes *fai__cache_sizes(void) {
    pthread_once(&caches_once, detect_caches);
    return &caches;
}

int64_t fai_cpu_cache_bytes(int level) {
    const fai_cache_sizes *sizes = fai__cache_sizes();
    return level == 1 ? sizes->l1d : level == 2 ? sizes->l2 : level == 3 ? sizes->l3 : 0;
}

const fai_cpu_features *fai__cpu_features(void) {
    pthread_once(&features_once, detect);
    return &features;
}

static int amx_permitted;
static const char *amx_refused;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void request_amx(void) {
    if (!fai__cpu_features()->amx_bf16) return;
    const char *env = getenv("FAI_AMX");
    if (env && !strcmp(env, "0")) {
        amx_refused = "FAI_AMX=0 turns it off";
        return;
    }
    amx_refused = "the kernel refused it tile data (arch_prctl ARCH_REQ_XCOMP_PERM)";
#if defined(__linux__) && defined(__x86_64__) && defined(SYS_arch_prctl)
    /* ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18); the grant covers every thread of
     * the process, so asking once before any thread touches a tile is enough */
    amx_permitted = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#endif
}

int fai__amx_enable(void) {
    pthread_once(&amx_once, request_amx);
    return amx_permitted;
}

const char *fai__amx_refusal(void) {
    pthread_once(&amx_once, request_amx);
    return amx_permitted ? NULL : amx_refused;
}

int fai__bf16_dot_preferred(void) {
    const char *env = getenv("FAI_BF16_DOT");
    if (env && !strcmp(env, "1")) return 1;
    if (env && !strcmp(env, "0")) return 0;
    return fai__cpu_features()->vendor_amd;
}

/* The CPU's model name as /proc/cpuinfo gives it (x86: "model name"; Arm: implementer and
 * part), read once; tabs and newlines would break the file format and are replaced. */
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static char cpu_model[128] = "unknown";

static void read_cpu_model(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[256], implementer[32] = "", part[32] = "";
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        char *value = colon + 1;
        while (*value == ' ' || *value == '\t')
            value++;
        value[strcspn(value, "\n")] = '\0';
        if (strncmp(line, "model name", 10) == 0) {
            snprintf(cpu_model, sizeof cpu_model, "%s", value);
            break;
        }
        if (strncmp(line, "CPU implementer", 15) == 0)
            snprintf(implementer, sizeof implementer, "%s", value);
        if (strncmp(line, "CPU part", 8) == 0) snprintf(part, sizeof part, "%s", value);
    }
    fclose(f);
    if (strcmp(cpu_model, "unknown") == 0 && implementer[0])
        snprintf(cpu_model, sizeof cpu_model, "arm implementer %s part %s", implementer, part);
    for (char *c = cpu_model; *c; c++)
        if (*c == '\t' || *c == '\n') *c = ' ';
}

const char *fai__cpu_model(void) {
    pthread_once(&cpu_once, read_cpu_model);
    return cpu_model;
}
