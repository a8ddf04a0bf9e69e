/* The micro-kernels' own speed: each stage of one table called alone on operands that stay in
 * the caches, as a fraction of the peak of the unit it runs on, measured in the same run.
 *
 * `fai bench --profile` times stages inside whole problems, where a stage's time also holds its
 * cache misses and the walk around it. Here the same kernels run on one prefill tile (128 query
 * rows, 64 keys, D 128: P1's tile with its GQA group) and on decode rows (4 query rows, 128 keys,
 * D 128), a few operand sets in turn. The gap between a stage's rate here and the peak is the
 * kernel's own; the gap between here and `fai bench` is what the caches and the loop cost.
 *
 *     make build && ./build/fai_kernel_rates [--quick]
 *
 * FAI_ISA chooses the table, as for fai itself. One thread; each figure is the median of 7
 * batches (--quick: of 1/50 the calls, for a smoke test). */
#include "fai_peak.h"
#include "fai_shape.h"
#include "fai_stats.h"
#include "ukr/fai_ukr.h"
#include "util/fai_half.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SETS 4     /* operand sets taken in turn */
#define BATCHES 7  /* timed batches; the median is reported */
#define M 128      /* prefill: query rows of a tile (32 positions x GQA 4) */
#define N 64       /* prefill: keys of a tile */
#define D 128      /* head dim of K and V */
#define ROWS_M 4   /* decode: query rows (GQA 4) */
#define ROWS_N 128 /* decode: keys per call */
#define SCALE 0.088f

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t random_bits(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 32);
}
static float uniform(void) { return (float)random_bits() / 2147483648.0f - 1.0f; } /* [-1, 1) */

/* Every buffer the run allocates, freed together at its end (free_all). */
#define MAX_BUFFERS 256
static void *buffers[MAX_BUFFERS];
static int buffer_count;

static void free_all(void) {
    while (buffer_count > 0)
        free(buffers[--buffer_count]);
}

static void *zeroed(size_t bytes) {
    void *p = buffer_count < MAX_BUFFERS ? aligned_alloc(64, (bytes + 63) / 64 * 64) : NULL;
    if (!p) {
        fprintf(stderr, "fai_kernel_rates: out of memory\n");
        free_all();
        exit(1);
    }
    buffers[buffer_count++] = p;
    return memset(p, 0, bytes);
}

/* n rows of D random elements of dtype, row j at rows[j] (quantized codes avoid NaN codes) */
static void random_rows(const void **rows, int64_t n, fai_dtype dtype) {
    const size_t size = fai_dtype_size(dtype);
    uint8_t *data = zeroed((size_t)n * D * size);
    for (int64_t i = 0; i < n * D; i++) {
        const float x = uniform();
        uint8_t *at = data + (size_t)i * size;
        const uint32_t bits = random_bits();
        switch (dtype) {
        case FAI_DTYPE_F32:
            memcpy(at, &x, 4);
            break;
        case FAI_DTYPE_F16:
            *(uint16_t *)(void *)at = fai__f32_to_f16_sat(x);
            break;
        case FAI_DTYPE_BF16:
            *(uint16_t *)(void *)at = fai__f32_to_bf16(x);
            break;
        case FAI_DTYPE_I8:
            *at = (uint8_t)(bits % 255);
            break;
        case FAI_DTYPE_E4M3:
            *at = (uint8_t)(bits & 0xf7);
            break; /* exponent below 1111 */
        case FAI_DTYPE_E5M2:
            *at = (uint8_t)(bits & 0xbf);
            break; /* exponent below 11111 */
        }
    }
    for (int64_t j = 0; j < n; j++)
        rows[j] = data + (size_t)(j * D) * size;
}

struct operands {
    const fai_cntx *cntx;
    int calls_divisor; /* the scalar tables (ref, amx-emu) run fewer calls */
    /* prefill, f32 path */
    float *q_t, *k[SETS], *v[SETS], *s_t, *p_saved, *o;
    float row_max[M], row_sum[M], row_alpha[M], mx_sums[M * FAI_MX_SUM_LANES];
    /* prefill, bf16 dot products and matrix engine */
    const void *k_bf16[SETS][N];
    uint16_t *q_pairs, *v_pairs[SETS], *mx_q, *mx_k[SETS], *mx_v[SETS], *mx_p;
    int p_parts;
    /* decode */
    fai_dtype dtype;
    const void *k_rows[SETS][ROWS_N], *v_rows[SETS][ROWS_N];
    float *q_rows, *s_rows, *o_rows, key_scale[ROWS_N];
};
typedef struct operands operands;
typedef void (*kernel_fn)(operands *t, int set);

/* Seconds per call: the median of BATCHES batches of `calls` calls, less the time of `undo`
 * (restoring an input the kernel overwrites) where one is given. */
static double seconds_per_call(kernel_fn kernel, kernel_fn undo, operands *t, int calls) {
    double batch[BATCHES];
    calls = calls / t->calls_divisor > 0 ? calls / t->calls_divisor : 1;
    for (int b = 0; b < BATCHES; b++) {
        double start = ft_now_seconds();
        for (int c = 0; c < calls; c++) {
            if (undo) undo(t, c % SETS);
            kernel(t, c % SETS);
        }
        double spent = ft_now_seconds() - start;
        start = ft_now_seconds();
        for (int c = 0; undo && c < calls; c++)
            undo(t, c % SETS);
        spent -= ft_now_seconds() - start;
        batch[b] = spent / calls;
    }
    return ft_median(batch, BATCHES);
}

static void report(const char *stage, double flops, double seconds, double peak,
                   const char *peak_name) {
    const double gflops = flops / seconds * 1e-9;
    if (peak > 0)
        printf("  %-30s %8.1f GFLOP/s  %5.1f %% of the %s peak\n", stage, gflops,
               100.0 * gflops / peak, peak_name);
    else /* amx-emu on a CPU without AMX */
        printf("  %-30s %8.1f GFLOP/s  (no %s peak on this CPU)\n", stage, gflops, peak_name);
}

static void qk(operands *t, int set) { t->cntx->qk(t->s_t, M, t->q_t, t->k[set], N, D, SCALE); }
static void softmax(operands *t, int set) {
    (void)set;
    t->cntx->softmax(t->s_t, M, M, N, t->row_max, t->row_sum, t->row_alpha);
}
static void restore_p(operands *t, int set) {
    (void)set;
    memcpy(t->s_t, t->p_saved, sizeof(float) * N * M);
}
static void pv(operands *t, int set) { t->cntx->pv(t->o, D, t->s_t, M, t->v[set], M, N, 0); }
static void qk_bf16(operands *t, int set) {
    t->cntx->qk_bf16(t->s_t, M, t->q_pairs, t->k_bf16[set], N, D, SCALE);
}
static void pv_bf16(operands *t, int set) {
    t->cntx->pv_bf16(t->o, D, t->s_t, M, t->v_pairs[set], M, N, t->p_parts, 0);
}
static void mx_qk(operands *t, int set) {
    t->cntx->mx_qk(t->s_t, N, t->mx_q, 1, t->mx_k[set], 1, M, N, 0, N, D);
}
static void mx_softmax(operands *t, int set) {
    (void)set;
    t->cntx->mx_softmax(t->s_t, N, M, M, N, N, 0, N, SCALE, t->row_max, t->mx_sums, t->row_alpha,
                        t->mx_p, t->p_parts, NULL);
}
static void mx_pv(operands *t, int set) {
    t->cntx->mx_pv(t->o, D, t->mx_p, t->p_parts, t->mx_v[set], 1, M, N, 0, N, D);
}
static void qk_rows(operands *t, int set) {
    const int quantized = t->dtype >= FAI_DTYPE_I8;
    t->cntx->qk_rows(t->s_rows, ROWS_N, t->q_rows, D, ROWS_M, t->k_rows[set], 0, NULL, t->dtype,
                     ROWS_N, D, SCALE, quantized ? t->key_scale : NULL);
}
static void pv_rows(operands *t, int set) {
    t->cntx->pv_rows(t->o_rows, D, t->s_rows, ROWS_N, ROWS_M, t->v_rows[set], 0, NULL, t->dtype,
                     ROWS_N, D, 0);
}

static void reset_softmax_state(operands *t) {
    for (int i = 0; i < M; i++)
        t->row_max[i] = -1e30f, t->row_sum[i] = 0.0f, t->row_alpha[i] = 1.0f;
    memset(t->mx_sums, 0, sizeof t->mx_sums);
}

/* The f32 tile stages; with the scores' softmax, each stage's share of the tile's time. */
static double prefill_f32(operands *t, const ft_peak *peak) {
    const void *rows[M];
    random_rows(rows, M, FAI_DTYPE_F32);
    t->cntx->pack_q(t->q_t, M, rows, M, D, FAI_DTYPE_F32);
    for (int set = 0; set < SETS; set++) {
        random_rows(rows, N, FAI_DTYPE_F32);
        t->cntx->pack_rows(t->k[set], D, rows, N, D, FAI_DTYPE_F32, NULL);
        random_rows(rows, N, FAI_DTYPE_F32);
        t->cntx->pack_rows(t->v[set], D, rows, N, D, FAI_DTYPE_F32, NULL);
    }
    const double flops = 2.0 * M * N * D;
    const double t_qk = seconds_per_call(qk, NULL, t, 2000);
    reset_softmax_state(t);
    memcpy(t->p_saved, t->s_t, sizeof(float) * N * M);
    const double t_softmax = seconds_per_call(softmax, restore_p, t, 2000);
    softmax(t, 0);
    memcpy(t->p_saved, t->s_t, sizeof(float) * N * M);
    const double t_pv = seconds_per_call(pv, NULL, t, 2000);
    printf("prefill tile, f32 (%d rows x %d keys, D %d):\n", M, N, D);
    report("qk", flops, t_qk, peak->fp32_gflops, "fp32 FMA");
    printf("  %-30s %8.2f ns per 16 scores\n", "softmax", t_softmax * 1e9 / (M * N / 16.0));
    report("pv", flops, t_pv, peak->fp32_gflops, "fp32 FMA");
    const double tile = t_qk + t_softmax + t_pv;
    printf("  the tile: %.1f %% of the fp32 FMA peak (qk %.0f %%, softmax %.0f %%, pv %.0f %%)\n",
           100.0 * 2 * flops / tile * 1e-9 / peak->fp32_gflops, 100 * t_qk / tile,
           100 * t_softmax / tile, 100 * t_pv / tile);
    return t_softmax;
}

/* The tile on bf16 dot products, P as hi + lo and rounded (needs AVX512_BF16). */
static void prefill_bf16(operands *t, const ft_peak *peak, double t_softmax) {
    const void *rows[M];
    random_rows(rows, M, FAI_DTYPE_BF16);
    t->cntx->pack_q_bf16(t->q_pairs, M, rows, M, D);
    for (int set = 0; set < SETS; set++) {
        random_rows(t->k_bf16[set], N, FAI_DTYPE_BF16);
        random_rows(rows, N, FAI_DTYPE_BF16);
        t->cntx->pack_v_bf16(t->v_pairs[set], D, rows, N, D);
    }
    const double flops = 2.0 * M * N * D;
    printf("prefill tile, bf16 dot products (the softmax as above):\n");
    const double t_qk = seconds_per_call(qk_bf16, NULL, t, 2000);
    report("qk_bf16", flops, t_qk, peak->bf16_gflops, "bf16 dot");
    reset_softmax_state(t);
    softmax(t, 0);
    memcpy(t->p_saved, t->s_t, sizeof(float) * N * M);
    for (t->p_parts = 2; t->p_parts >= 1; t->p_parts--) {
        const double t_pv = seconds_per_call(pv_bf16, restore_p, t, 2000);
        report(t->p_parts == 2 ? "pv_bf16, P as hi + lo" : "pv_bf16, P rounded", flops, t_pv,
               peak->bf16_gflops, "bf16 dot");
        const double tile = t_qk + t_softmax + t_pv;
        printf("    the tile: %.1f %% of the bf16 dot peak (qk %.0f %%, softmax %.0f %%, pv %.0f "
               "%%)\n",
               100.0 * 2 * flops / tile * 1e-9 / peak->bf16_gflops, 100 * t_qk / tile,
               100 * t_softmax / tile, 100 * t_pv / tile);
    }
}

/* The tile on the matrix engine: bf16 operands in one part, P as hi + lo and rounded. */
static void prefill_mx(operands *t, const ft_peak *peak) {
    const void *rows[M];
    random_rows(rows, M, FAI_DTYPE_BF16);
    t->cntx->mx_enter();
    t->cntx->mx_pack_q(t->mx_q, 1, rows, M, M, D, D, FAI_DTYPE_BF16);
    for (int set = 0; set < SETS; set++) {
        random_rows(rows, N, FAI_DTYPE_BF16);
        t->cntx->mx_pack_k(t->mx_k[set], 1, rows, N, N, D, D, FAI_DTYPE_BF16, 0);
        random_rows(rows, N, FAI_DTYPE_BF16);
        t->cntx->mx_pack_v(t->mx_v[set], 1, rows, N, N, D, D, FAI_DTYPE_BF16);
    }
    const double flops = 2.0 * M * N * D;
    const int calls = 2000;
    const double amx = peak->amx_gflops;
    printf("prefill tile, matrix engine (%s):\n", t->cntx->name);
    const double t_qk = seconds_per_call(mx_qk, NULL, t, calls);
    report("mx_qk", flops, t_qk, amx, "AMX");
    reset_softmax_state(t);
    for (t->p_parts = 2; t->p_parts >= 1; t->p_parts--) {
        const double t_softmax = seconds_per_call(mx_softmax, NULL, t, calls);
        const double t_pv = seconds_per_call(mx_pv, NULL, t, calls);
        printf("  P %s:\n", t->p_parts == 2 ? "as hi + lo" : "rounded");
        printf("  %-30s %8.2f ns per 16 scores\n", "  mx_softmax",
               t_softmax * 1e9 / (M * N / 16.0));
        report("  mx_pv", flops, t_pv, amx, "AMX");
        const double tile = t_qk + t_softmax + t_pv;
        printf("    the tile, stages one after another: %.1f GFLOP/s (qk %.0f %%, softmax %.0f %%, "
               "pv %.0f %%)",
               2 * flops / tile * 1e-9, 100 * t_qk / tile, 100 * t_softmax / tile,
               100 * t_pv / tile);
        if (amx > 0) printf(", %.1f %% of the AMX peak", 100.0 * 2 * flops / tile * 1e-9 / amx);
        printf("\n");
    }
    t->cntx->mx_leave();
}

/* Decode's row kernels on each K/V dtype (K/V rows read where they lie, converted in registers). */
static void decode_rows(operands *t, const ft_peak *peak) {
    static const fai_dtype dtypes[] = {FAI_DTYPE_F32, FAI_DTYPE_F16,  FAI_DTYPE_BF16,
                                       FAI_DTYPE_I8,  FAI_DTYPE_E4M3, FAI_DTYPE_E5M2};
    for (int64_t i = 0; i < ROWS_M * D; i++)
        t->q_rows[i] = uniform();
    for (int j = 0; j < ROWS_N; j++)
        t->key_scale[j] = 0.01f + 0.001f * (float)j;
    printf("decode rows (%d query rows x %d keys, D %d; K/V of the 4 sets: %d KiB in f32):\n",
           ROWS_M, ROWS_N, D, SETS * ROWS_N * D * 4 * 2 / 1024);
    const double flops = 2.0 * ROWS_M * ROWS_N * D;
    for (size_t i = 0; i < sizeof dtypes / sizeof *dtypes; i++) {
        t->dtype = dtypes[i];
        for (int set = 0; set < SETS; set++) {
            random_rows(t->k_rows[set], ROWS_N, t->dtype);
            random_rows(t->v_rows[set], ROWS_N, t->dtype);
        }
        for (int64_t k = 0; k < ROWS_M * ROWS_N; k++)
            t->s_rows[k] = 0.5f * (uniform() + 1.0f);
        char name[64];
        snprintf(name, sizeof name, "qk_rows, K %s", fai_dtype_name(t->dtype));
        report(name, flops, seconds_per_call(qk_rows, NULL, t, 20000), peak->fp32_gflops,
               "fp32 FMA");
        for (int64_t k = 0; k < ROWS_M * ROWS_N; k++) /* P, as the softmax leaves it */
            t->s_rows[k] = 0.5f * (uniform() + 1.0f);
        snprintf(name, sizeof name, "pv_rows, V %s", fai_dtype_name(t->dtype));
        report(name, flops, seconds_per_call(pv_rows, NULL, t, 20000), peak->fp32_gflops,
               "fp32 FMA");
    }
}

int main(int argc, char **argv) {
    const int quick = argc == 2 && !strcmp(argv[1], "--quick");
    if (argc > 2 || (argc == 2 && !quick)) {
        fprintf(stderr, "usage: fai_kernel_rates [--quick]   (FAI_ISA chooses the table; --quick:"
                        " 1/50 of the calls, rougher figures)\n");
        return 2;
    }
    operands *t = zeroed(sizeof *t);
    if (fai__cntx_select(&t->cntx) != FAI_OK) {
        fprintf(stderr, "fai_kernel_rates: %s\n", fai_last_error());
        free_all();
        return 1;
    }
    const int scalar = !strcmp(t->cntx->name, "ref") || !strcmp(t->cntx->name, "amx-emu");
    t->calls_divisor = (scalar ? 200 : 1) * (quick ? 50 : 1);
    const int64_t one = 1;
    ft_peak peak;
    if (ft_peak_measure(&one, 1, &peak)) {
        fprintf(stderr, "fai_kernel_rates: the peak probes could not run\n");
        free_all();
        return 1;
    }
    printf("table %s, one thread; peaks measured now: fp32 FMA %.1f, bf16 dot %.1f, AMX %.1f "
           "GFLOP/s\n",
           t->cntx->name, peak.fp32_gflops, peak.bf16_gflops, peak.amx_gflops);
    if (!strcmp(ft_peak_isa(), "avx512") && t->cntx->simd_width > 1 && t->cntx->simd_width < 16)
        printf("(the peaks are the machine's, on 16-lane vectors: a %d-lane table's own ceiling is "
               "%.0f %% of them)\n",
               (int)t->cntx->simd_width, 100.0 * (double)t->cntx->simd_width / 16.0);
    t->q_t = zeroed(sizeof(float) * D * M);
    t->s_t = zeroed(sizeof(float) * N * M);
    t->p_saved = zeroed(sizeof(float) * N * M);
    t->o = zeroed(sizeof(float) * M * D);
    t->q_pairs = zeroed(sizeof(uint16_t) * D * M);
    t->mx_q = zeroed(sizeof(uint16_t) * M * D);
    t->mx_p = zeroed(sizeof(uint16_t) * 2 * M * N);
    t->q_rows = zeroed(sizeof(float) * ROWS_M * D);
    t->s_rows = zeroed(sizeof(float) * ROWS_M * ROWS_N);
    t->o_rows = zeroed(sizeof(float) * ROWS_M * D);
    for (int set = 0; set < SETS; set++) {
        t->k[set] = zeroed(sizeof(float) * N * D);
        t->v[set] = zeroed(sizeof(float) * N * D);
        t->v_pairs[set] = zeroed(sizeof(uint16_t) * N * D);
        t->mx_k[set] = zeroed(sizeof(uint16_t) * N * D);
        t->mx_v[set] = zeroed(sizeof(uint16_t) * N * D);
    }
    const double t_softmax = prefill_f32(t, &peak);
    if (t->cntx->qk_bf16 && t->cntx->pv_bf16) prefill_bf16(t, &peak, t_softmax);
    if (t->cntx->mx_qk) prefill_mx(t, &peak);
    decode_rows(t, &peak);
    free_all();
    return 0;
}
