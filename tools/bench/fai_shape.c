/* Shape options, the problem of a shape and its metrics for the tool's plan, demo and bench
 * commands (the named shapes: fai_shape_table.c; random tensors for a shape: fai_shape_data.c). */
#include "fai_shape.h"

#include <errno.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
            if (!decimal || *end || !(cap >= 0.0) || cap > FLT_MAX ||
                (cap != 0.0 && (float)cap == 0.0f)) {
                fprintf(stderr,
                        "fai %s: --softcap needs 0 (off) or a number that stays nonzero and "
                        "finite in float32, got '%s'\n",
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

void ft_shape_visible_keys(const ft_shape *shape, int64_t i, int64_t *first, int64_t *last) {
    const int64_t diag = shape->causal == FAI_CAUSAL_TOP_LEFT ? i : i + shape->skv - shape->sq;
    const int64_t right = shape->causal != FAI_CAUSAL_NONE ? 0 : shape->window_right;
    *first = 0;
    *last = shape->skv - 1;
    if (shape->window_left >= 0 && diag - shape->window_left > *first)
        *first = diag - shape->window_left;
    if (right >= 0 && diag + right < *last) *last = diag + right;
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
