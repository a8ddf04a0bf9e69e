/* Machine-limit probes for `fai bench` (see fai_peak.h).
 *
 * Compute peaks run chains of multiply-adds on independent accumulators, all held in registers:
 * with fewer chains than pipes x latency, or with accumulators spilled to the stack, a probe
 * measures the latency or the store port instead of the FMA units (an earlier probe written
 * with an accumulator array did exactly that and read 90 instead of 200 GFLOP/s). The vector
 * code is compiled per function with target attributes and chosen by __builtin_cpu_supports,
 * so the tool itself still runs on the baseline ISA. */
/* syscall(2): the AMX probe asks Linux for the tile state first */
#define _DEFAULT_SOURCE
#include "fai_peak.h"
#include "fai_stats.h"
#include "fai_shape.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PEAK_X86 1
#include <cpuid.h>
#include <immintrin.h>
#endif
#if defined(PEAK_X86) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#define PEAK_AMX 1
#endif

#define PASSES 5
#define FMA_ITERATIONS (1ull << 24)  /* about 40 ms of AVX-512 FMAs per pass on one core */
#define READ_BYTES ((size_t)1 << 30) /* far beyond any cache, also the VM's reported L3 */
#define READ_BLOCK 128               /* floats per iteration of every read kernel */

typedef struct probe_isa {
    const char *name;
    float (*fp32)(uint64_t iterations, float x, float y);
    double fp32_flops; /* per iteration */
    float (*read)(const float *data, size_t count);
} probe_isa;

#define REPEAT8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define REPEAT12(X) REPEAT8(X) X(8) X(9) X(10) X(11)
#define REPEAT16(X) REPEAT12(X) X(12) X(13) X(14) X(15)

/* -- portable ---------------------------------------------------------------------------- */

/* a = a * y + x: a multiply and an add per step that no compiler can hoist out of the loop
 * (a += x * y would leave one add); the chains settle at x / (1 - y). */
static float fp32_portable(uint64_t iterations, float x, float y) {
    float a0 = 0, a1 = 1, a2 = 2, a3 = 3, a4 = 4, a5 = 5, a6 = 6, a7 = 7;
    for (uint64_t i = 0; i < iterations; i++) {
#define STEP(n) a##n = a##n * y + x;
        REPEAT8(STEP)
#undef STEP
    }
    return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}

static float read_portable(const float *data, size_t count) {
    float sum[8] = {0};
    for (size_t i = 0; i < count; i += 8)
        for (int k = 0; k < 8; k++)
            sum[k] += data[i + k];
    return sum[0] + sum[1] + sum[2] + sum[3] + sum[4] + sum[5] + sum[6] + sum[7];
}

#ifdef PEAK_X86
/* -- AVX-512: 16 zmm accumulators (FMA latency 4 x 2 pipes needs 8; 16 covers slower parts
 * and leaves 14 registers free, so nothing spills) ------------------------------------------ */

__attribute__((target("avx512f"))) static float fp32_avx512(uint64_t iterations, float x, float y) {
    const __m512 vx = _mm512_set1_ps(x), vy = _mm512_set1_ps(y);
#define INIT(n) __m512 a##n = _mm512_set1_ps((float)n); /* distinct, so no two chains merge */
    REPEAT16(INIT)
#undef INIT
    for (uint64_t i = 0; i < iterations; i++) {
#define STEP(n) a##n = _mm512_fmadd_ps(vx, vy, a##n);
        REPEAT16(STEP)
#undef STEP
    }
    __m512 sum = _mm512_setzero_ps();
#define FOLD(n) sum = _mm512_add_ps(sum, a##n);
    REPEAT16(FOLD)
#undef FOLD
    return _mm512_reduce_add_ps(sum);
}

__attribute__((target("avx512f"))) static float read_avx512(const float *data, size_t count) {
#define INIT(n) __m512 a##n = _mm512_setzero_ps();
    REPEAT8(INIT)
#undef INIT
    for (size_t i = 0; i < count; i += READ_BLOCK) {
#define STEP(n) a##n = _mm512_add_ps(a##n, _mm512_load_ps(data + i + 16 * n));
        REPEAT8(STEP)
#undef STEP
    }
    const __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                                     _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    return _mm512_reduce_add_ps(sum);
}

/* vdpbf16ps: each of 16 lanes multiplies two bf16 pairs and adds both products, 64 flops. */
__attribute__((target("avx512bf16,avx512f"))) static float bf16_avx512(uint64_t iterations, float x,
                                                                       float y) {
    uint32_t x_bits, y_bits;
    memcpy(&x_bits, &x, sizeof x_bits);
    memcpy(&y_bits, &y, sizeof y_bits);
    const __m512bh vx = (__m512bh)_mm512_set1_epi32((int)((x_bits >> 16) * 0x10001u));
    const __m512bh vy = (__m512bh)_mm512_set1_epi32((int)((y_bits >> 16) * 0x10001u));
#define INIT(n) __m512 a##n = _mm512_set1_ps((float)n);
    REPEAT16(INIT)
#undef INIT
    for (uint64_t i = 0; i < iterations; i++) {
#define STEP(n) a##n = _mm512_dpbf16_ps(a##n, vx, vy);
        REPEAT16(STEP)
#undef STEP
    }
    __m512 sum = _mm512_setzero_ps();
#define FOLD(n) sum = _mm512_add_ps(sum, a##n);
    REPEAT16(FOLD)
#undef FOLD
    return _mm512_reduce_add_ps(sum);
}

/* -- AVX2: 12 ymm accumulators, leaving 4 of the 16 registers for the operands ------------ */

__attribute__((target("avx2,fma"))) static float fp32_avx2(uint64_t iterations, float x, float y) {
    const __m256 vx = _mm256_set1_ps(x), vy = _mm256_set1_ps(y);
#define INIT(n) __m256 a##n = _mm256_set1_ps((float)n);
    REPEAT12(INIT)
#undef INIT
    for (uint64_t i = 0; i < iterations; i++) {
#define STEP(n) a##n = _mm256_fmadd_ps(vx, vy, a##n);
        REPEAT12(STEP)
#undef STEP
    }
    __m256 sum = _mm256_setzero_ps();
#define FOLD(n) sum = _mm256_add_ps(sum, a##n);
    REPEAT12(FOLD)
#undef FOLD
    float lanes[8];
    _mm256_storeu_ps(lanes, sum);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7];
}

__attribute__((target("avx2"))) static float read_avx2(const float *data, size_t count) {
#define INIT(n) __m256 a##n = _mm256_setzero_ps();
    REPEAT8(INIT)
#undef INIT
    for (size_t i = 0; i < count; i += READ_BLOCK) {
#define STEP(n)                                                                                    \
    a##n = _mm256_add_ps(a##n, _mm256_add_ps(_mm256_load_ps(data + i + 16 * n),                    \
                                             _mm256_load_ps(data + i + 16 * n + 8)));
        REPEAT8(STEP)
#undef STEP
    }
    const __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                                     _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    float lanes[8];
    _mm256_storeu_ps(lanes, sum);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7];
}
#endif

static const probe_isa *probe_isa_select(void) {
    static const probe_isa portable = {"portable", fp32_portable, 8 * 2, read_portable};
#ifdef PEAK_X86
    static const probe_isa avx512 = {"avx512", fp32_avx512, 16 * 16 * 2, read_avx512};
    static const probe_isa avx2 = {"avx2", fp32_avx2, 12 * 8 * 2, read_avx2};
    if (__builtin_cpu_supports("avx512f")) return &avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &avx2;
#endif
    return &portable;
}

const char *ft_peak_isa(void) { return probe_isa_select()->name; }

int ft_peak_has_bf16(void) {
#ifdef PEAK_X86
    return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

#ifdef PEAK_AMX
/* AMX-BF16 (CPUID leaf 7 EDX bits 22 and 24, the OS saving tile state in XCR0 bits 17-18) and
 * Linux's per-process permission for tile data, asked for once. */
static int amx_usable(void) {
    static int state = -1;
    if (state >= 0) return state;
    unsigned eax, ebx, ecx, edx;
    state = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !((edx >> 22) & 1) ||
        !((edx >> 24) & 1))
        return state;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !((ecx >> 27) & 1)) return state;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0x60000) != 0x60000) return state;
    state = syscall(SYS_arch_prctl, 0x1023, 18) == 0; /* ARCH_REQ_XCOMP_PERM, XTILEDATA */
    return state;
}

/* TDPBF16PS on four accumulator tiles (two A, two B): 16 x 16 x 32 multiply-adds, 16384
 * flops each, four per iteration. In static memory: gcc 12's _tile_loadconfig tells the
 * compiler it reads only 8 bytes of the configuration. */
static const unsigned char amx_config[64] __attribute__((aligned(64))) = {
    [0] = 1,   [16] = 64, [18] = 64, [20] = 64, [22] = 64, [24] = 64,
    [26] = 64, [28] = 64, [30] = 64, [48] = 16, [49] = 16, [50] = 16,
    [51] = 16, [52] = 16, [53] = 16, [54] = 16, [55] = 16};

__attribute__((target("amx-tile,amx-bf16"))) static float amx_probe(uint64_t iterations) {
    float out[16 * 16];
    _tile_loadconfig(amx_config);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
    for (uint64_t i = 0; i < iterations; i++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    _tile_release();
    return out[0];
}
#endif

int ft_peak_has_amx(void) {
#ifdef PEAK_AMX
    return amx_usable();
#else
    return 0;
#endif
}

/* about 40 ms of tile products per pass on one core */
#define AMX_ITERATIONS (1ull << 21)

/* -- threads ------------------------------------------------------------------------------ */

typedef enum probe_kind { PROBE_FILL, PROBE_FP32, PROBE_BF16, PROBE_AMX, PROBE_READ } probe_kind;

typedef struct probe_task {
    probe_kind kind;
    const probe_isa *isa;
    float *data; /* this thread's slice of the read buffer */
    size_t count;
    float x, y;   /* FMA operands, read at run time so the compiler cannot fold the chains */
    float result; /* kept, so the work is not dead code */
} probe_task;

static void *probe_thread(void *arg) {
    probe_task *task = arg;
    switch (task->kind) {
    case PROBE_FILL:
        for (size_t i = 0; i < task->count; i++)
            task->data[i] = 1.0f;
        break;
    case PROBE_FP32:
        task->result = task->isa->fp32(FMA_ITERATIONS, task->x, task->y);
        break;
#ifdef PEAK_X86
    case PROBE_BF16:
        task->result = bf16_avx512(FMA_ITERATIONS, task->x, task->y);
        break;
#else
    case PROBE_BF16:
        break;
#endif
    case PROBE_AMX:
#ifdef PEAK_AMX
        task->result = amx_probe(AMX_ITERATIONS);
#endif
        break;
    case PROBE_READ:
        task->result = task->isa->read(task->data, task->count);
        break;
    }
    return NULL;
}

static volatile float probe_sink;
static volatile float probe_x = 1e-4f, probe_y = 0.999f;

/* Wall seconds of one pass of `kind` on `threads` new threads, each on its own slice of the
 * buffer; -1 when a thread cannot be started. Starting threads per pass costs tens of
 * microseconds against passes of tens of milliseconds, and keeps the probe free of barriers. */
static double probe_pass(probe_kind kind, int64_t threads, float *buffer, size_t floats) {
    probe_task tasks[FT_PEAK_MAX_THREADS];
    pthread_t ids[FT_PEAK_MAX_THREADS];
    const size_t blocks = floats / READ_BLOCK;
    int64_t started = 0;
    const double start = ft_now_seconds();
    for (; started < threads; started++) {
        const size_t begin = blocks * (size_t)started / (size_t)threads * READ_BLOCK;
        const size_t end = blocks * (size_t)(started + 1) / (size_t)threads * READ_BLOCK;
        tasks[started] = (probe_task){
            kind, probe_isa_select(), buffer + begin, end - begin, probe_x, probe_y, 0.0f};
        if (pthread_create(&ids[started], NULL, probe_thread, &tasks[started])) break;
    }
    for (int64_t t = 0; t < started; t++) {
        pthread_join(ids[t], NULL);
        probe_sink += tasks[t].result;
    }
    return started == threads ? ft_now_seconds() - start : -1.0;
}

/* Median wall seconds of PASSES passes; -1 when a pass failed. */
static double probe_median(probe_kind kind, int64_t threads, float *buffer, size_t floats) {
    double seconds[PASSES];
    for (int p = 0; p < PASSES; p++) {
        seconds[p] = probe_pass(kind, threads, buffer, floats);
        if (seconds[p] < 0) return -1.0;
    }
    qsort(seconds, PASSES, sizeof seconds[0], ft_compare_double);
    return seconds[PASSES / 2];
}

static int measure_one(int64_t threads, float *buffer, size_t floats, ft_peak *peak) {
    const probe_isa *isa = probe_isa_select();
    const double fma_ops = (double)threads * (double)FMA_ITERATIONS;
    memset(peak, 0, sizeof *peak);
    peak->threads = threads;
    const double fp32 = probe_median(PROBE_FP32, threads, buffer, floats);
    const double bf16 = ft_peak_has_bf16() ? probe_median(PROBE_BF16, threads, buffer, floats) : 0;
    const double amx = ft_peak_has_amx() ? probe_median(PROBE_AMX, threads, buffer, floats) : 0;
    const double read = probe_median(PROBE_READ, threads, buffer, floats);
    if (fp32 < 0 || bf16 < 0 || amx < 0 || read < 0) return -1;
    peak->amx_gflops =
        amx > 0 ? (double)threads * (double)AMX_ITERATIONS * 4 * 16384 / amx * 1e-9 : 0.0;
    peak->fp32_gflops = fma_ops * isa->fp32_flops / fp32 * 1e-9;
    peak->bf16_gflops = bf16 > 0 ? fma_ops * 16 * 64 / bf16 * 1e-9 : 0.0;
    peak->read_gbps = (double)(floats * sizeof(float)) / read * 1e-9;
    return 0;
}

int ft_peak_measure(const int64_t *threads, int count, ft_peak *peaks) {
    int64_t most = 1;
    for (int i = 0; i < count; i++) {
        if (threads[i] < 1 || threads[i] > FT_PEAK_MAX_THREADS) return -1;
        if (threads[i] > most) most = threads[i];
    }
    const size_t floats = READ_BYTES / sizeof(float);
    float *buffer = aligned_alloc(4096, READ_BYTES);
    if (!buffer) return -1;
    /* touch every page first (in parallel), so the read passes time DRAM, not page faults */
    int status = probe_pass(PROBE_FILL, most, buffer, floats) < 0 ? -1 : 0;
    for (int i = 0; i < count && !status; i++)
        status = measure_one(threads[i], buffer, floats, &peaks[i]);
    free(buffer);
    return status;
}
