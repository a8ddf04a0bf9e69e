/* The machine's limits, measured by `fai bench` in the same run as the attention shapes, so
 * that a rate can be read as a fraction of what this machine does right now (a shared VM's
 * bandwidth moves by a factor of two from hour to hour). Plain pthreads, not fai's pool. */
#ifndef FAI_PEAK_H
#define FAI_PEAK_H

#include <stdint.h>

typedef struct ft_peak {
    int64_t threads;
    double fp32_gflops; /* FMA throughput, 2 flops per multiply-add */
    double bf16_gflops; /* bf16 dot products (vdpbf16ps); 0 when the CPU has none */
    double amx_gflops;  /* AMX-BF16 tile products (tdpbf16ps); 0 without AMX */
    double read_gbps;   /* DRAM read: vector sums over a 1 GiB buffer, 1e9 bytes/s */
} ft_peak;

/* Largest thread count a probe runs. */
#define FT_PEAK_MAX_THREADS 1024

/* Instruction set of the fp32 and read probes: "avx512", "avx2" or "portable". */
const char *ft_peak_isa(void);

/* Nonzero when the bf16 probe can run (AVX512_BF16). */
int ft_peak_has_bf16(void);

/* Nonzero when the AMX probe can run (AMX-BF16, and the kernel granted the tile state). */
int ft_peak_has_amx(void);

/* Measures the peaks with each of `count` thread counts (the median of a few passes each) into
 * peaks[0..count). Returns 0, or -1 when the buffer or the threads cannot be had. */
int ft_peak_measure(const int64_t *threads, int count, ft_peak *peaks);

#endif
