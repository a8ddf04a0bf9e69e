/* fai bench: its output, one JSON line or one table row per (shape, thread count), and the
 * machine's peaks (fai_cmd_bench.h). */
#include "fai_baseline.h"
#include "fai_cmd_bench.h"
#include "fai_json.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* -- output ------------------------------------------------------------------------------- */

static int is_all_bf16(const ft_shape *shape) {
    return shape->q_dtype == FAI_DTYPE_BF16 && shape->kv_dtype == FAI_DTYPE_BF16;
}

/* Decode (one query per sequence) is a stream over K and V: its yardstick is read bandwidth. */
static int is_decode(const ft_shape *shape) { return shape->sq == 1; }

static double gflops(const bench_result *r) { return r->flops / r->median_ms * 1e-6; }
static double kv_gbps(const bench_result *r) { return r->kv_bytes / r->median_ms * 1e-6; }

static const char *causal_name(fai_causal causal) {
    return causal == FAI_CAUSAL_BOTTOM_RIGHT ? "bottom-right"
           : causal == FAI_CAUSAL_TOP_LEFT   ? "top-left"
                                             : "none";
}

/* A JSON number: non-finite values (an empty shape's rate) become null. */
static void json_number(ft_json *json, const char *key, double value) {
    ft_json_number(json, key, "%.6g", value);
}

static void json_shape_fields(ft_json *json, const ft_shape *shape) {
    ft_json_string(json, "shape", shape->name);
    ft_json_string(json, "q_dtype", fai_dtype_name(shape->q_dtype));
    ft_json_string(json, "kv_dtype", fai_dtype_name(shape->kv_dtype));
    ft_json_string(json, "out_dtype", fai_dtype_name(shape->out_dtype));
    ft_json_int(json, "b", shape->b);
    ft_json_int(json, "hq", shape->hq);
    ft_json_int(json, "hkv", shape->hkv);
    ft_json_int(json, "sq", shape->sq);
    ft_json_int(json, "skv", shape->skv);
    ft_json_int(json, "d", shape->d);
    ft_json_int(json, "dv", shape->dv);
    ft_json_string(json, "causal", causal_name(shape->causal));
    ft_json_int(json, "window_left", shape->window_left);
    ft_json_int(json, "window_right", shape->window_right);
    ft_json_int(json, "page_size", shape->page_size);
    ft_json_number(json, "softcap", "%g", (double)shape->softcap);
    ft_json_bool(json, "alibi", shape->alibi);
    ft_json_bool(json, "sinks", shape->sinks);
}

static void json_peak_ratios(ft_json *json, const ft_shape *shape, const bench_result *r,
                             const ft_peak *p) {
    json_number(json, "peak_fp32_gflops", p->fp32_gflops);
    json_number(json, "fp32_peak_ratio", gflops(r) / p->fp32_gflops);
    if (p->bf16_gflops > 0) json_number(json, "peak_bf16_gflops", p->bf16_gflops);
    if (p->bf16_gflops > 0 && is_all_bf16(shape))
        json_number(json, "bf16_peak_ratio", gflops(r) / p->bf16_gflops);
    if (p->amx_gflops > 0) json_number(json, "peak_amx_gflops", p->amx_gflops);
    if (p->amx_gflops > 0 && !strcmp(r->info.isa, "amx") && !is_decode(shape))
        json_number(json, "amx_peak_ratio", gflops(r) / p->amx_gflops);
    json_number(json, "peak_read_gbps", p->read_gbps);
    if (is_decode(shape)) json_number(json, "bw_ratio", kv_gbps(r) / p->read_gbps);
}

int ft_bench_baseline_ok(const bench_check *check) {
    return check->baseline_diff <= check->baseline_tolerance;
}

/* The baseline's keys: its times and rate (the same useful FLOPs as fai's), fai's speedup over
 * it (baseline median / fai median), its score matrix and its agreement with fai. */
static void json_baseline(ft_json *json, const bench_result *r, const baseline_result *base,
                          const bench_check *check, const ft_peak *peak) {
    json_number(json, "baseline_median_ms", base->median_ms);
    json_number(json, "baseline_min_ms", base->min_ms);
    json_number(json, "baseline_max_ms", base->max_ms);
    json_number(json, "baseline_gflops", r->flops / base->median_ms * 1e-6);
    if (peak)
        json_number(json, "baseline_fp32_peak_ratio",
                    r->flops / base->median_ms * 1e-6 / peak->fp32_gflops);
    json_number(json, "speedup_vs_baseline", base->median_ms / r->median_ms);
    ft_json_number(json, "baseline_gemm_flops", "%.0f", base->gemm_flops);
    ft_json_number(json, "baseline_score_bytes", "%.0f", base->score_bytes);
    json_number(json, "baseline_max_diff", check->baseline_diff);
    json_number(json, "baseline_tolerance", check->baseline_tolerance);
    ft_json_string(json, "baseline_check", ft_bench_baseline_ok(check) ? "ok" : "failed");
    ft_json_string(json, "baseline_blas", ft_baseline_blas());
}

void ft_bench_print_json(const ft_shape *shape, const bench_result *r, const bench_check *check,
                         const bench_options *opt, const ft_peak *peak,
                         const baseline_result *base) {
    ft_json json;
    ft_json_init(&json, stdout, 0);
    ft_json_object(&json, NULL);
    json_shape_fields(&json, shape);
    ft_json_int(&json, "threads", r->threads);
    ft_json_int(&json, "workers", r->info.workers);
    ft_json_int(&json, "runs", opt->runs);
    ft_json_int(&json, "warmup", opt->warmup);
    ft_json_bool(&json, "cold", opt->cold);
    json_number(&json, "median_ms", r->median_ms);
    json_number(&json, "min_ms", r->min_ms);
    json_number(&json, "max_ms", r->max_ms);
    json_number(&json, "gflops", gflops(r));
    json_number(&json, "kv_gbps", kv_gbps(r));
    ft_json_number(&json, "flops", "%.0f", r->flops); /* exact counts */
    ft_json_number(&json, "kv_bytes", "%.0f", r->kv_bytes);
    ft_json_int(&json, "workspace_bytes", (long long)r->info.workspace_bytes);
    ft_json_string(&json, "isa", r->info.isa);
    ft_json_int(&json, "tile_q", r->info.tile_q);
    ft_json_int(&json, "tile_kv", r->info.tile_kv);
    json_number(&json, "imbalance", r->info.imbalance);
    json_number(&json, "check_us", r->check_us);
    json_number(&json, "check_ratio", r->check_us * 1e-3 / r->median_ms);
    json_number(&json, "max_err", check->max_err);
    json_number(&json, "tolerance", check->tolerance);
    ft_json_int(&json, "checked_threads", check->threads);
    ft_json_string(&json, "check", check->max_err <= check->tolerance ? "ok" : "failed");
    if (peak) json_peak_ratios(&json, shape, r, peak);
    if (base) json_baseline(&json, r, base, check, peak);
    if (opt->profile) ft_bench_profile_json(&json, &r->profile, r->median_ms);
    if (opt->profile) ft_bench_overlap_json(&json, &r->overlap);
    ft_json_end(&json);
}

void ft_bench_print_table_header(int baseline) {
    printf("%-6s %-14s %3s %10s %10s %10s %9s %6s %6s %6s %8s %6s %8s %10s %-6s %s", "shape",
           "q/kv/out", "thr", "median_ms", "min_ms", "max_ms", "GFLOP/s", "%fp32", "%bf16", "%amx",
           "KV_GB/s", "%read", "check_us", "workspace", "isa", "check (max_err)");
    if (baseline)
        printf(" %10s %9s %8s %8s %s", " base_ms", "base_GF/s", "speedup", "S_MiB",
               "base_check (diff)");
    printf("\n");
}

/* A percentage column, or "-" where the ratio does not apply. */
static void print_percent(int applies, double value, double peak) {
    if (applies && peak > 0)
        printf(" %6.1f", 100.0 * value / peak);
    else
        printf(" %6s", "-");
}

void ft_bench_print_row(const ft_shape *shape, const bench_result *r, const bench_check *check,
                        const ft_peak *peak, const baseline_result *base) {
    char dtypes[32];
    snprintf(dtypes, sizeof dtypes, "%s/%s/%s", fai_dtype_name(shape->q_dtype),
             fai_dtype_name(shape->kv_dtype), fai_dtype_name(shape->out_dtype));
    printf("%-6s %-14s %3lld %10.3f %10.3f %10.3f %9.1f", shape->name, dtypes,
           (long long)r->threads, r->median_ms, r->min_ms, r->max_ms, gflops(r));
    print_percent(peak != NULL, gflops(r), peak ? peak->fp32_gflops : 0);
    print_percent(peak && is_all_bf16(shape), gflops(r), peak ? peak->bf16_gflops : 0);
    /* decode plans on the amx table run on the vector unit: their %read is what counts */
    print_percent(peak && !strcmp(r->info.isa, "amx") && !is_decode(shape), gflops(r),
                  peak ? peak->amx_gflops : 0);
    printf(" %8.2f", kv_gbps(r));
    print_percent(peak && is_decode(shape), kv_gbps(r), peak ? peak->read_gbps : 0);
    char verdict[32];
    snprintf(verdict, sizeof verdict, "%s (%.1e)",
             check->max_err <= check->tolerance ? "ok" : "FAILED", check->max_err);
    printf(" %8.2f %10zu %-6s %-*s", r->check_us, r->info.workspace_bytes, r->info.isa,
           base ? 15 : 0, verdict);
    if (base)
        printf(" %10.3f %9.1f %8.2f %8.1f %s (%.1e)", base->median_ms,
               r->flops / base->median_ms * 1e-6, base->median_ms / r->median_ms,
               base->score_bytes / (1024.0 * 1024.0), ft_bench_baseline_ok(check) ? "ok" : "FAILED",
               check->baseline_diff);
    printf("\n");
}

void ft_bench_print_peaks(const bench_options *opt, const ft_peak *peaks) {
    if (opt->json) {
        ft_json json;
        ft_json_init(&json, stdout, 0);
        ft_json_object(&json, NULL);
        ft_json_array(&json, "peaks");
        for (int t = 0; t < opt->thread_count; t++) {
            ft_json_object(&json, NULL);
            ft_json_int(&json, "threads", peaks[t].threads);
            ft_json_string(&json, "isa", ft_peak_isa());
            json_number(&json, "peak_fp32_gflops", peaks[t].fp32_gflops);
            if (ft_peak_has_bf16()) json_number(&json, "peak_bf16_gflops", peaks[t].bf16_gflops);
            if (ft_peak_has_amx()) json_number(&json, "peak_amx_gflops", peaks[t].amx_gflops);
            json_number(&json, "peak_read_gbps", peaks[t].read_gbps);
            ft_json_end(&json);
        }
        ft_json_end(&json);
        ft_json_end(&json);
        return;
    }
    printf("machine peaks, measured now (median of 5 passes; fp32 FMA and read probes: %s)\n",
           ft_peak_isa());
    printf("%7s %13s %13s %13s %10s\n", "threads", "fp32 GFLOP/s", "bf16 GFLOP/s", "AMX GFLOP/s",
           "read GB/s");
    for (int t = 0; t < opt->thread_count; t++) {
        printf("%7lld %13.1f ", (long long)peaks[t].threads, peaks[t].fp32_gflops);
        if (ft_peak_has_bf16())
            printf("%13.1f", peaks[t].bf16_gflops);
        else
            printf("%13s", "-");
        if (ft_peak_has_amx())
            printf(" %13.1f", peaks[t].amx_gflops);
        else
            printf(" %13s", "-");
        printf(" %10.1f\n", peaks[t].read_gbps);
    }
    printf("\n");
}
