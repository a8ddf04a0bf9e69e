/* Shape options and random tensors for the tool's plan, demo and bench commands (the named
 * shapes: fai_shape_table.c). */
/* madvise(MADV_HUGEPAGE) is a Linux extension */
#define _DEFAULT_SOURCE
#include "fai_shape.h"

#include <errno.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int ft_options_once(int argc, char **argv, const char *cmd) {
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) != 0) continue;
        for (int j = 1; j < i; j++)
            if (!strcmp(argv[i], argv[j])) {
                fprintf(stderr, "fai %s: %s is given twice\n", cmd, argv[i]);
                return -1;
            }
    }
    return 0;
}

int ft_parse_dtype(const char *text, fai_dtype *dtype) {
    /* the names fai_dtype_name gives, so the tools and the library spell them one way */
    static const fai_dtype all[] = {FAI_DTYPE_F32, FAI_DTYPE_F16,  FAI_DTYPE_BF16,
                                    FAI_DTYPE_I8,  FAI_DTYPE_E4M3, FAI_DTYPE_E5M2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(text, fai_dtype_name(all[i]))) {
            *dtype = all[i];
            return 0;
        }
    return -1;
}

/* A decimal integer within [min, max]: digits, an optional '-' before them, nothing else (no
 * blanks, no '+'). */
int ft_parse_int64(const char *text, int64_t min, int64_t max, int64_t *out) {
    const char *digits = text[0] == '-' ? text + 1 : text;
    if (!(digits[0] >= '0' && digits[0] <= '9')) return -1;
    char *end;
    errno = 0;
    const long long value = strtoll(text, &end, 10);
    if (errno || end == text || *end || value < min || value > max) return -1;
    *out = value;
    return 0;
}

/* The flags a shape takes, each at most once: --causal and --causal-top-left count as one. */
static const char *const shape_flags[] = {"--b",
                                          "--hq",
                                          "--hkv",
                                          "--sq",
                                          "--skv",
                                          "--d",
                                          "--dv",
                                          "--page-size",
                                          "--round-p-bf16",
                                          "--pipeline-tiles",
                                          "--head-major",
                                          "--k-channel-scales",
                                          "--alibi",
                                          "--sinks",
                                          "--softcap",
                                          "--causal",
                                          "--causal-top-left",
                                          "--window",
                                          "--q-dtype",
                                          "--kv-dtype",
                                          "--out-dtype"};

static int flag_once(const char *flag, const char **seen, int *seen_count, const char *cmd) {
    const int causal = !strncmp(flag, "--causal", 8);
    for (int s = 0; s < *seen_count; s++) {
        if (causal && !strncmp(seen[s], "--causal", 8) && strcmp(seen[s], flag)) {
            fprintf(stderr, "fai %s: %s and %s exclude each other\n", cmd, seen[s], flag);
            return -1;
        }
        if (!strcmp(seen[s], flag)) {
            fprintf(stderr, "fai %s: %s is given twice\n", cmd, flag);
            return -1;
        }
    }
    seen[(*seen_count)++] = flag;
    return 0;
}

int ft_shape_parse(int argc, char **argv, char *used, ft_shape *shape, const char *cmd) {
    static const struct {
        const char *flag;
        size_t offset;
        int64_t min;
    } int_flags[] = {
        {"--b", offsetof(ft_shape, b), 0},     {"--hq", offsetof(ft_shape, hq), 1},
        {"--hkv", offsetof(ft_shape, hkv), 1}, {"--sq", offsetof(ft_shape, sq), 0},
        {"--skv", offsetof(ft_shape, skv), 0}, {"--d", offsetof(ft_shape, d), 1},
        {"--dv", offsetof(ft_shape, dv), 1},   {"--page-size", offsetof(ft_shape, page_size), 0},
    };
    /* the named shape first, wherever it stands, so that the flags change it */
    for (int i = 1; i < argc; i++)
        for (int s = 0; s < ft_shape_count; s++)
            if (!strcmp(argv[i], ft_shape_table[s].name)) {
                *shape = ft_shape_table[s];
                used[i] = 1;
            }
    int d_given = 0, dv_given = 0;
    const char *seen[sizeof shape_flags / sizeof shape_flags[0]];
    int seen_count = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        int found = 0;
        if (used[i]) continue;
        for (size_t f = 0; f < sizeof shape_flags / sizeof shape_flags[0]; f++)
            if (!strcmp(arg, shape_flags[f]) && flag_once(arg, seen, &seen_count, cmd)) return -1;
        for (size_t f = 0; f < sizeof int_flags / sizeof int_flags[0]; f++) {
            if (strcmp(arg, int_flags[f].flag)) continue;
            int64_t *field = (int64_t *)((char *)shape + int_flags[f].offset);
            if (i + 1 >= argc || ft_parse_int64(argv[i + 1], int_flags[f].min, INT32_MAX, field)) {
                fprintf(stderr, "fai %s: %s needs an integer >= %lld, got '%s'\n", cmd, arg,
                        (long long)int_flags[f].min, i + 1 < argc ? argv[i + 1] : "");
                return -1;
            }
            used[i] = used[i + 1] = 1;
            i++;
            found = 1;
            d_given |= !strcmp(arg, "--d");
            dv_given |= !strcmp(arg, "--dv");
            snprintf(shape->name, sizeof shape->name, "custom");
        }
        if (found) continue;
        if (!strcmp(arg, "--round-p-bf16")) {
            shape->round_p_bf16 = 1;
            used[i] = 1;
        } else if (!strcmp(arg, "--pipeline-tiles")) {
            if (i + 1 >= argc || ft_parse_int64(argv[i + 1], 0, 2, &shape->pipeline_tiles)) {
                fprintf(stderr, "fai %s: --pipeline-tiles needs 0 (auto), 1 or 2, got '%s'\n", cmd,
                        i + 1 < argc ? argv[i + 1] : "");
                return -1;
            }
            used[i] = used[i + 1] = 1;
            i++;
        } else if (!strcmp(arg, "--head-major")) {
            shape->head_major = 1;
            used[i] = 1;
        } else if (!strcmp(arg, "--k-channel-scales")) {
            shape->k_channel_scales = 1;
            used[i] = 1;
        } else if (!strcmp(arg, "--alibi") || !strcmp(arg, "--sinks")) {
            *(arg[2] == 'a' ? &shape->alibi : &shape->sinks) = 1;
            used[i] = 1;
        } else if (!strcmp(arg, "--softcap")) {
            char *end = NULL;
            const char *text = i + 1 < argc ? argv[i + 1] : "";
            /* a plain decimal number: no blanks, sign, hex or names */
            const int decimal = ((text[0] >= '0' && text[0] <= '9') ||
                                 (text[0] == '.' && text[1] >= '0' && text[1] <= '9')) &&
                                text[strspn(text, "0123456789.eE+-")] == '\0';
            const double cap = decimal ? strtod(text, &end) : -1.0;
            if (!decimal || *end || !(cap >= 0.0) || cap > 1e30 ||
                (cap != 0.0 && (float)cap == 0.0f)) {
                fprintf(stderr,
                        "fai %s: --softcap needs 0 (off) or a number in (0, 1e30] that stays "
                        "nonzero in float32, got '%s'\n",
                        cmd, i + 1 < argc ? argv[i + 1] : "");
                return -1;
            }
            shape->softcap = (float)cap;
            used[i] = used[i + 1] = 1;
            i++;
        } else if (!strcmp(arg, "--causal") || !strcmp(arg, "--causal-top-left")) {
            shape->causal = arg[8] ? FAI_CAUSAL_TOP_LEFT : FAI_CAUSAL_BOTTOM_RIGHT;
            used[i] = 1;
        } else if (!strcmp(arg, "--window")) {
            int64_t left = 0, right = 0;
            const char *comma = i + 1 < argc ? strchr(argv[i + 1], ',') : NULL;
            char left_text[32];
            const size_t left_len = comma ? (size_t)(comma - argv[i + 1]) : sizeof left_text;
            if (left_len < sizeof left_text) {
                memcpy(left_text, argv[i + 1], left_len);
                left_text[left_len] = '\0';
            }
            if (left_len >= sizeof left_text || ft_parse_int64(left_text, -1, INT64_MAX, &left) ||
                ft_parse_int64(comma + 1, -1, INT64_MAX, &right)) {
                fprintf(stderr, "fai %s: --window needs LEFT,RIGHT (integers >= -1), got '%s'\n",
                        cmd, i + 1 < argc ? argv[i + 1] : "");
                return -1;
            }
            shape->window_left = left;
            shape->window_right = right;
            used[i] = used[i + 1] = 1;
            i++;
        } else if (!strcmp(arg, "--q-dtype") || !strcmp(arg, "--kv-dtype") ||
                   !strcmp(arg, "--out-dtype")) {
            fai_dtype *field = arg[2] == 'q'   ? &shape->q_dtype
                               : arg[2] == 'k' ? &shape->kv_dtype
                                               : &shape->out_dtype;
            if (i + 1 >= argc || ft_parse_dtype(argv[i + 1], field)) {
                fprintf(stderr, "fai %s: %s needs %s, got '%s'\n", cmd, arg,
                        arg[2] == 'k' ? "f32, f16, bf16, int8, e4m3 or e5m2" : "f32, f16 or bf16",
                        i + 1 < argc ? argv[i + 1] : "");
                return -1;
            }
            used[i] = used[i + 1] = 1;
            i++;
        }
    }
    if (d_given && !dv_given) shape->dv = shape->d;
    return 0;
}

int ft_shape_from_args(int argc, char **argv, char *used, ft_shape *shape, const char *cmd) {
    /* a name replaces the base whatever it is; with neither a name nor a flag, P1 */
    const char *name = NULL;
    for (int i = 1; i < argc; i++)
        for (int s = 0; s < ft_shape_count; s++)
            if (!strcmp(argv[i], ft_shape_table[s].name)) {
                if (name) {
                    fprintf(stderr, "fai %s: one shape at a time (got %s and %s)\n", cmd, name,
                            argv[i]);
                    return -1;
                }
                name = argv[i];
            }
    *shape = ft_shape_custom_base;
    if (ft_shape_parse(argc, argv, used, shape, cmd)) return -1;
    int consumed = 0;
    for (int i = 1; i < argc; i++)
        consumed |= used[i];
    if (!consumed) *shape = ft_shape_table[0];
    /* one shape: a flag it cannot take is refused, not dropped (a list of shapes or dtypes in
     * fai bench applies such flags where they fit) */
    if (shape->head_major && shape->page_size == 0) {
        fprintf(stderr, "fai %s: --head-major needs paged K/V (--page-size N)\n", cmd);
        return -1;
    }
    if (shape->k_channel_scales && !fai_dtype_is_quantized(shape->kv_dtype)) {
        fprintf(stderr,
                "fai %s: --k-channel-scales needs a quantized K (--kv-dtype int8, e4m3 or "
                "e5m2), got %s\n",
                cmd, fai_dtype_name(shape->kv_dtype));
        return -1;
    }
    return 0;
}

void ft_shape_problem(const ft_shape *shape, fai_problem *pb, int32_t *seqlens_kv) {
    fai_problem_init(pb);
    pb->batch = shape->b;
    pb->heads_q = shape->hq;
    pb->heads_kv = shape->hkv;
    pb->seq_q = shape->sq;
    pb->seq_kv = shape->skv;
    pb->head_dim = shape->d;
    pb->head_dim_v = shape->dv;
    pb->q_dtype = shape->q_dtype;
    pb->k_dtype = pb->v_dtype = shape->kv_dtype;
    pb->o_dtype = shape->out_dtype;
    pb->causal = shape->causal;
    pb->window_left = shape->window_left;
    pb->window_right = shape->window_right;
    pb->round_p_bf16 = shape->round_p_bf16;
    pb->pipeline_tiles = (int)shape->pipeline_tiles;
    pb->k_channel_scales = shape->k_channel_scales && fai_dtype_is_quantized(shape->kv_dtype);
    pb->softcap = shape->softcap;
    pb->alibi = shape->alibi;
    pb->sinks = shape->sinks;
    if (shape->page_size > 0) {
        pb->page_size = shape->page_size;
        pb->pages_per_seq = (shape->skv + shape->page_size - 1) / shape->page_size;
        pb->num_pages = pb->pages_per_seq * shape->b;
        for (int64_t b = 0; b < shape->b; b++)
            seqlens_kv[b] = (int32_t)shape->skv;
        pb->seqlens_kv = seqlens_kv;
    }
}

static uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Codes of a quantized dtype: int8 uniform in [-127, 127]; fp8 of either sign with magnitudes
 * spread evenly over the binades [2^-6, 4) (e4m3) or [2^-7, 4) (e5m2), never NaN or Inf. With
 * the scales ft_shape_data_create gives, the values lie within about [-1, 1]. */
static void fill_codes(uint8_t *data, fai_dtype dtype, size_t count, uint64_t *state) {
    for (size_t i = 0; i < count; i++) {
        const uint64_t r = next_random(state);
        const uint8_t sign = (uint8_t)((r >> 63) << 7);
        if (dtype == FAI_DTYPE_I8)
            data[i] = (uint8_t)(int8_t)((int)(r % 255) - 127);
        else if (dtype == FAI_DTYPE_E4M3) /* exponent fields 1..8 (bias 7), any mantissa */
            data[i] = (uint8_t)(sign | (((r >> 8) % 8 + 1) << 3) | (r & 7));
        else /* e5m2: exponent fields 8..16 (bias 15) */
            data[i] = (uint8_t)(sign | (((r >> 8) % 9 + 8) << 2) | (r & 3));
    }
}

/* Uniform values in [-1, 1) that are exact in every float dtype (multiples of 2^-7); codes for
 * the quantized ones. */
static void fill_random(void *data, fai_dtype dtype, size_t count, uint64_t *state) {
    if (fai_dtype_is_quantized(dtype)) {
        fill_codes(data, dtype, count, state);
        return;
    }
    for (size_t i = 0; i < count; i++) {
        const int step = (int)(next_random(state) >> 56) - 128; /* -128..127 */
        const float value = (float)step / 128.0f;
        if (dtype == FAI_DTYPE_F32) {
            ((float *)data)[i] = value;
        } else if (dtype == FAI_DTYPE_BF16) {
            uint32_t bits;
            memcpy(&bits, &value, sizeof bits);
            ((uint16_t *)data)[i] = (uint16_t)(bits >> 16);
        } else { /* f16 of k/128: sign, exponent, mantissa built exactly */
            uint16_t h = 0;
            int magnitude = step < 0 ? -step : step;
            if (magnitude) {
                int exponent = 0;
                while ((magnitude << exponent) < 128)
                    exponent++;
                /* value = magnitude/128 = 1.f * 2^-exponent */
                const int mantissa = ((magnitude << exponent) - 128) << 3;
                h = (uint16_t)(((15 - exponent) << 10) | mantissa);
            }
            ((uint16_t *)data)[i] = (uint16_t)(h | (step < 0 ? 0x8000u : 0));
        }
    }
}

/* K/V caches of serving engines are large, long-lived buffers, usually on huge pages; the
 * benchmark gives its K/V the same, so decode is not measured through a TLB miss every few
 * rows. */
void *ft_shape_alloc_huge(size_t bytes) {
    const size_t huge = (size_t)2 << 20;
    const size_t rounded = (bytes + huge - 1) / huge * huge;
    void *memory = aligned_alloc(huge, rounded ? rounded : huge);
#if defined(MADV_HUGEPAGE)
    if (memory) madvise(memory, rounded, MADV_HUGEPAGE);
#endif
    return memory;
}

void ft_shape_visible_keys(const ft_shape *shape, int64_t i, int64_t *first, int64_t *last) {
    const int64_t diag = shape->causal == FAI_CAUSAL_TOP_LEFT ? i : i + shape->skv - shape->sq;
    const int64_t right = shape->causal != FAI_CAUSAL_NONE ? 0 : shape->window_right;
    *first = 0;
    *last = shape->skv - 1;
    if (shape->window_left >= 0 && diag - shape->window_left > *first)
        *first = diag - shape->window_left;
    if (right >= 0 && diag + right < *last) *last = diag + right;
}

static char data_error[256];

const char *ft_shape_data_error(void) { return data_error; }

/* The product of n factors, or -1 past 2^60 elements (the planner's own bound on a tensor): the
 * bytes of such a count, up to 8 an element, cannot wrap a 64-bit size. */
static int64_t product(const int64_t *factors, int n) {
    int64_t result = 1;
    for (int i = 0; i < n; i++)
        if (factors[i] < 0 || __builtin_mul_overflow(result, factors[i], &result) ||
            result > (INT64_C(1) << 60))
            return -1;
    return result;
}

/* Whether the planner takes the shape's problem, judged before anything is sized by it: the
 * dense problem first (its batch bounds the lengths array a paged one needs; a paged pool's
 * size is bounded by `product` below). */
static int shape_plannable(const ft_shape *shape) {
    ft_shape dense = *shape;
    dense.page_size = 0;
    fai_problem pb;
    ft_shape_problem(&dense, &pb, NULL);
    pb.ignore_tuning = 1, pb.threads = 1, pb.workers = 1;
    fai_plan *plan = NULL;
    const fai_status status = fai_plan_create(&pb, &plan);
    fai_plan_free(plan);
    if (status != FAI_OK) snprintf(data_error, sizeof data_error, "%s", fai_last_error());
    return status == FAI_OK;
}

int ft_shape_data_create(const ft_shape *shape, uint64_t seed, ft_shape_data *data) {
    memset(data, 0, sizeof *data);
    data_error[0] = '\0';
    if (!shape_plannable(shape)) return -1;
    const int64_t dv = shape->dv;
    const int paged = shape->page_size > 0;
    data->seqlens_kv = calloc((size_t)shape->b + 1, sizeof(int32_t));
    if (!data->seqlens_kv) {
        snprintf(data_error, sizeof data_error, "out of memory for %lld sequence lengths",
                 (long long)shape->b);
        return -1;
    }
    ft_shape_problem(shape, &data->problem, data->seqlens_kv);
    const fai_problem *pb = &data->problem;
    const int64_t kv_rows = paged ? product((const int64_t[]){pb->num_pages, shape->page_size}, 2)
                                  : product((const int64_t[]){shape->b, shape->skv}, 2);
    const int64_t counts[5] = {
        product((const int64_t[]){shape->b, shape->sq, shape->hq, shape->d}, 4),
        product((const int64_t[]){shape->b, shape->sq, shape->hq, dv}, 4),
        product((const int64_t[]){kv_rows, shape->hkv, shape->d}, 3),
        product((const int64_t[]){kv_rows, shape->hkv, dv}, 3),
        product((const int64_t[]){shape->b, shape->hq, shape->sq}, 3)};
    for (int i = 0; i < 5; i++)
        if (kv_rows < 0 || counts[i] < 0) {
            snprintf(data_error, sizeof data_error,
                     "its tensors would hold more than 2^60 elements");
            return -1;
        }
    const size_t q_count = (size_t)counts[0], o_count = (size_t)counts[1];
    const size_t k_count = (size_t)counts[2], v_count = (size_t)counts[3];
    data->q = malloc(q_count * fai_dtype_size(shape->q_dtype) + 1);
    data->k = ft_shape_alloc_huge(k_count * fai_dtype_size(shape->kv_dtype) + 1);
    data->v = ft_shape_alloc_huge(v_count * fai_dtype_size(shape->kv_dtype) + 1);
    data->o = malloc(o_count * fai_dtype_size(shape->out_dtype) + 1);
    data->lse = malloc((size_t)counts[4] * sizeof(float) + 1);
    data->alibi_slopes = malloc((size_t)shape->hq * sizeof(float) + 1);
    data->sinks = malloc((size_t)shape->hq * sizeof(float) + 1);
    /* quantized K/V: a scale per token and kv head, [rows, Hkv] like their rows */
    const size_t scale_count = (size_t)(kv_rows * shape->hkv);
    const int quantized = fai_dtype_is_quantized(shape->kv_dtype);
    if (quantized) data->kv_scales = ft_shape_alloc_huge(2 * scale_count * sizeof(float) + 1);
    if (!data->q || !data->k || !data->v || !data->o || !data->lse || !data->alibi_slopes ||
        !data->sinks || (quantized && !data->kv_scales)) {
        snprintf(data_error, sizeof data_error, "out of memory for its tensors (%.3g GB of K/V)",
                 (double)(k_count + v_count) * (double)fai_dtype_size(shape->kv_dtype) / 1e9);
        return -1;
    }
    /* scales that bring the codes to about [-1, 1], varying from row to row */
    const double code_range = shape->kv_dtype == FAI_DTYPE_I8 ? 127.0 : 4.0;
    for (size_t r = 0; quantized && r < 2 * scale_count; r++)
        data->kv_scales[r] = (float)((1.0 + (double)(r % 7) / 16.0) / code_range);
    /* the standard slopes, and sinks around the scores' own size */
    if (shape->hq > 0) fai_alibi_slopes(shape->hq, data->alibi_slopes);
    for (int64_t h = 0; h < shape->hq; h++)
        data->sinks[h] = (float)(h % 5) * 0.5f - 1.0f;
    uint64_t state = seed;
    fill_random(data->q, shape->q_dtype, q_count, &state);
    fill_random(data->k, shape->kv_dtype, k_count, &state);
    fill_random(data->v, shape->kv_dtype, v_count, &state);

    fai_tensors *t = &data->tensors;
    memset(t, 0, sizeof *t);
    const int64_t k_seq = paged ? shape->page_size : shape->skv;
    t->q = fai_tensor_bshd(data->q, shape->q_dtype, shape->sq, shape->hq, shape->d);
    t->k = fai_tensor_bshd(data->k, shape->kv_dtype, k_seq, shape->hkv, shape->d);
    t->v = fai_tensor_bshd(data->v, shape->kv_dtype, k_seq, shape->hkv, dv);
    t->o = fai_tensor_bshd(data->o, shape->out_dtype, shape->sq, shape->hq, dv);
    t->lse.data = data->lse;
    t->lse.dtype = FAI_DTYPE_F32;
    t->lse.stride_batch = shape->hq * shape->sq;
    t->lse.stride_head = shape->sq;
    t->lse.stride_seq = 1;
    t->alibi_slopes = shape->alibi ? data->alibi_slopes : NULL;
    t->sinks = shape->sinks ? data->sinks : NULL;
    if (paged && shape->head_major) { /* each kv head's rows of a page follow each other */
        fai_tensor *kv[2] = {&t->k, &t->v};
        for (int i = 0; i < 2; i++) {
            const int64_t dim = i == 0 ? shape->d : dv;
            kv[i]->stride_seq = dim;
            kv[i]->stride_head = k_seq * dim;
        }
    }
    if (quantized) {
        fai_scale per_token = {data->kv_scales, k_seq * shape->hkv, shape->hkv, 1};
        if (paged && shape->head_major) {
            per_token.stride_seq = 1;
            per_token.stride_head = k_seq;
        }
        t->k_scale = per_token;
        t->v_scale = per_token;
        t->v_scale.data = data->kv_scales + scale_count;
    }
    if (pb->k_channel_scales) { /* from 1/2 to 2, channel by channel */
        data->k_channels = malloc((size_t)(shape->hkv * shape->d) * sizeof(float));
        if (!data->k_channels) {
            snprintf(data_error, sizeof data_error, "out of memory for %lld channel scales",
                     (long long)(shape->hkv * shape->d));
            return -1;
        }
        for (int64_t x = 0; x < shape->hkv * shape->d; x++)
            data->k_channels[x] = (float)(0.5 + 1.5 * (double)((x * 37) % 64) / 63.0);
        t->k_channel_scale.data = data->k_channels;
        t->k_channel_scale.stride_head = shape->d;
    }
    if (paged) {
        /* a shuffled block table: page order in memory is not sequence order */
        const int64_t pages = pb->num_pages;
        data->block_table = malloc((size_t)(pages ? pages : 1) * sizeof(int32_t));
        if (!data->block_table) {
            snprintf(data_error, sizeof data_error, "out of memory for a block table of %lld pages",
                     (long long)pages);
            return -1;
        }
        for (int64_t p = 0; p < pages; p++)
            data->block_table[p] = (int32_t)p;
        for (int64_t p = pages - 1; p > 0; p--) {
            const int64_t other = (int64_t)(next_random(&state) % (uint64_t)(p + 1));
            const int32_t keep = data->block_table[p];
            data->block_table[p] = data->block_table[other];
            data->block_table[other] = keep;
        }
        t->block_table = data->block_table;
    }
    return 0;
}

void ft_shape_data_free(ft_shape_data *data) {
    free(data->seqlens_kv);
    free(data->block_table);
    free(data->q);
    free(data->k);
    free(data->v);
    free(data->o);
    free(data->lse);
    free(data->alibi_slopes);
    free(data->sinks);
    free(data->kv_scales);
    free(data->k_channels);
    memset(data, 0, sizeof *data);
}

double ft_shape_flops(const fai_plan *plan, const ft_shape *shape) {
    fai_plan_info info;
    if (fai_plan_get_info(plan, &info) != FAI_OK) return 0.0;
    const int64_t dv = shape->dv;
    return (double)info.visible_pairs * (double)(2 * shape->d + 2 * dv);
}

double ft_shape_kv_bytes(const ft_shape *shape) {
    const int64_t dv = shape->dv;
    if (shape->sq == 0) return 0.0; /* no query reads a key */
    /* a quantized K and V also read a scale per token and kv head each */
    const double scales = fai_dtype_is_quantized(shape->kv_dtype) ? 2.0 * sizeof(float) : 0.0;
    return (double)shape->b * (double)shape->skv * (double)shape->hkv *
           ((double)(shape->d + dv) * (double)fai_dtype_size(shape->kv_dtype) + scales);
}

double ft_shape_channel_scale(const fai_channel_scale *channels, int64_t h, int64_t x) {
    return channels && channels->data ? (double)channels->data[h * channels->stride_head + x] : 1.0;
}

double ft_shape_scale(const fai_tensor *kv, const fai_scale *scale, int64_t b, int64_t s,
                      int64_t h) {
    if (!fai_dtype_is_quantized(kv->dtype)) return 1.0;
    return (double)
        scale->data[b * scale->stride_batch + s * scale->stride_seq + h * scale->stride_head];
}
