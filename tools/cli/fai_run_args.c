/* Options, inputs and outputs of `fai run` (and `fai-mpi run`). */
/* realpath is POSIX.1-2008 with XSI */
#define _XOPEN_SOURCE 700
#include "fai_run_args.h"
#include "fai_shape.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SHAPE_LEN (FT_NPY_MAX_RANK * 22 + 8)

static const struct {
    const char *name;
    int takes_value;
} options[FT_RUN_OPT_COUNT] = {
    [FT_RUN_OPT_Q] = {"--q", 1},
    [FT_RUN_OPT_K] = {"--k", 1},
    [FT_RUN_OPT_V] = {"--v", 1},
    [FT_RUN_OPT_OUT] = {"--out", 1},
    [FT_RUN_OPT_LSE] = {"--lse", 1},
    [FT_RUN_OPT_MASK] = {"--mask", 1},
    [FT_RUN_OPT_MASK_DROP] = {"--mask-drop", 1},
    [FT_RUN_OPT_MASK_ADD] = {"--mask-add", 1},
    [FT_RUN_OPT_MASK_BITS] = {"--mask-bits", 1},
    [FT_RUN_OPT_SOFTCAP] = {"--softcap", 1},
    [FT_RUN_OPT_ALIBI_SLOPES] = {"--alibi-slopes", 1},
    [FT_RUN_OPT_SINKS] = {"--sinks", 1},
    [FT_RUN_OPT_K_SCALE] = {"--k-scale", 1},
    [FT_RUN_OPT_V_SCALE] = {"--v-scale", 1},
    [FT_RUN_OPT_K_DTYPE] = {"--k-dtype", 1},
    [FT_RUN_OPT_V_DTYPE] = {"--v-dtype", 1},
    [FT_RUN_OPT_SEQLENS_Q] = {"--seqlens-q", 1},
    [FT_RUN_OPT_SEQLENS_KV] = {"--seqlens-kv", 1},
    [FT_RUN_OPT_BLOCK_TABLE] = {"--block-table", 1},
    [FT_RUN_OPT_WINDOW] = {"--window", 1},
    [FT_RUN_OPT_SCALE] = {"--scale", 1},
    [FT_RUN_OPT_OUT_DTYPE] = {"--out-dtype", 1},
    [FT_RUN_OPT_THREADS] = {"--threads", 1},
    [FT_RUN_OPT_WORKERS] = {"--workers", 1},
    [FT_RUN_OPT_CAUSAL] = {"--causal", 0},
    [FT_RUN_OPT_CAUSAL_TOP_LEFT] = {"--causal-top-left", 0},
    [FT_RUN_OPT_BF16] = {"--bf16", 0},
    [FT_RUN_OPT_ROUND_P_BF16] = {"--round-p-bf16", 0},
    [FT_RUN_OPT_HELP] = {"--help", 0},
    [FT_RUN_OPT_RING] = {"--ring", 0},
};

const char *ft_run_option_name(int opt) { return options[opt].name; }

int ft_run_fail(ft_run_args *a, const char *fmt, ...) {
    if (a->error[0]) return 2;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->error, sizeof a->error, fmt, ap);
    va_end(ap);
    for (char *p = a->error; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    return 2;
}

/* -- options ----------------------------------------------------------------------------------- */

/* A whole decimal integer, nothing before or after it. */
static int parse_int64(const char *s, int64_t *out) {
    if (!s || !*s || !((*s >= '0' && *s <= '9') || *s == '-' || *s == '+')) return -1;
    errno = 0;
    char *end = NULL;
    const long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return -1;
    *out = (int64_t)v;
    return 0;
}

/* argv into a->value; -1 for --help */
static int collect_values(int argc, char **argv, ft_run_args *a) {
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "-h")) return -1;
        if (strncmp(arg, "--", 2) != 0)
            return ft_run_fail(a,
                               "unexpected argument '%s' (options start with --; see %s "
                               "--help)",
                               arg, a->command);
        const char *eq = strchr(arg, '=');
        const size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
        int opt = -1;
        for (int o = 0; o < FT_RUN_OPT_COUNT; o++)
            if (strlen(options[o].name) == nlen && !strncmp(arg, options[o].name, nlen) &&
                (o != FT_RUN_OPT_RING || a->with_ring))
                opt = o;
        if (opt < 0)
            return ft_run_fail(a, "unknown option '%.*s' (see %s --help)", (int)nlen, arg,
                               a->command);
        if (opt == FT_RUN_OPT_HELP) return -1;
        const char *value = "";
        if (options[opt].takes_value) {
            if (eq) {
                value = eq + 1;
            } else {
                if (i + 1 >= argc) return ft_run_fail(a, "%s needs a value", options[opt].name);
                value = argv[++i];
            }
        } else if (eq) {
            return ft_run_fail(a, "%s takes no value (got '%s')", options[opt].name, arg);
        }
        if (a->value[opt]) return ft_run_fail(a, "%s is given twice", options[opt].name);
        a->value[opt] = value;
    }
    return 0;
}

static int parse_masking(ft_run_args *a) {
    if (a->value[FT_RUN_OPT_CAUSAL] && a->value[FT_RUN_OPT_CAUSAL_TOP_LEFT])
        return ft_run_fail(a, "--causal and --causal-top-left exclude each other");
    a->causal = a->value[FT_RUN_OPT_CAUSAL]            ? FAI_CAUSAL_BOTTOM_RIGHT
                : a->value[FT_RUN_OPT_CAUSAL_TOP_LEFT] ? FAI_CAUSAL_TOP_LEFT
                                                       : FAI_CAUSAL_NONE;

    static const int masks[] = {FT_RUN_OPT_MASK, FT_RUN_OPT_MASK_DROP, FT_RUN_OPT_MASK_ADD,
                                FT_RUN_OPT_MASK_BITS};
    static const fai_mask_kind kinds[] = {FAI_MASK_KEEP, FAI_MASK_DROP, FAI_MASK_ADD,
                                          FAI_MASK_KEEP_BITS};
    a->mask_kind = FAI_MASK_NONE;
    for (int m = 0; m < 4; m++) {
        if (!a->value[masks[m]]) continue;
        if (a->mask_opt >= 0)
            return ft_run_fail(a, "%s and %s exclude each other", options[a->mask_opt].name,
                               options[masks[m]].name);
        a->mask_opt = masks[m];
        a->mask_kind = kinds[m];
    }

    if (a->value[FT_RUN_OPT_WINDOW]) {
        const char *w = a->value[FT_RUN_OPT_WINDOW];
        const char *comma = strchr(w, ',');
        char left[64];
        const size_t llen = comma ? (size_t)(comma - w) : 0;
        if (!comma || llen >= sizeof left || strchr(comma + 1, ','))
            return ft_run_fail(
                a, "--window %s: expected LEFT,RIGHT (two integers, -1 for unbounded)", w);
        memcpy(left, w, llen);
        left[llen] = '\0';
        if (parse_int64(left, &a->window_left) || parse_int64(comma + 1, &a->window_right))
            return ft_run_fail(
                a, "--window %s: expected LEFT,RIGHT (two integers, -1 for unbounded)", w);
        if (a->window_left < -1 || a->window_right < -1)
            return ft_run_fail(a, "--window %s: each side must be >= 0, or -1 for unbounded", w);
    }
    return 0;
}

static int parse_numbers(ft_run_args *a) {
    if (a->value[FT_RUN_OPT_SCALE]) {
        const char *s = a->value[FT_RUN_OPT_SCALE];
        errno = 0;
        char *end = NULL;
        const double d = strtod(s, &end);
        const float f = (float)d;
        if (end == s || *end || *s == ' ' || *s == '\t' || !isfinite(d) || !isfinite(f))
            return ft_run_fail(a, "--scale %s: not a finite number", s);
        a->scale = f;
    }
    if (a->value[FT_RUN_OPT_SOFTCAP]) {
        const char *s = a->value[FT_RUN_OPT_SOFTCAP];
        char *end = NULL;
        const double d = strtod(s, &end);
        const float f = (float)d;
        if (end == s || *end || *s == ' ' || *s == '\t' || !isfinite(d) || !isfinite(f) ||
            !(f >= 0.0f))
            return ft_run_fail(a, "--softcap %s: expected a finite number >= 0 (0: off)", s);
        a->softcap = f;
    }

    if (a->value[FT_RUN_OPT_OUT_DTYPE]) {
        const char *t = a->value[FT_RUN_OPT_OUT_DTYPE];
        if (!strcmp(t, "f32") || !strcmp(t, "float32"))
            a->out_dtype = FAI_DTYPE_F32;
        else if (!strcmp(t, "f16") || !strcmp(t, "float16"))
            a->out_dtype = FAI_DTYPE_F16;
        else if (!strcmp(t, "bf16") || !strcmp(t, "bfloat16"))
            a->out_dtype = FAI_DTYPE_BF16;
        else
            return ft_run_fail(a, "--out-dtype %s: expected f32, f16 or bf16", t);
    }

    static const int code_opts[] = {FT_RUN_OPT_K_DTYPE, FT_RUN_OPT_V_DTYPE};
    fai_dtype *const code_dst[] = {&a->k_code_dtype, &a->v_code_dtype};
    for (int c = 0; c < 2; c++) {
        const char *t = a->value[code_opts[c]];
        if (!t) continue;
        if (!strcmp(t, "e4m3") || !strcmp(t, "e4m3fn") || !strcmp(t, "float8_e4m3fn"))
            *code_dst[c] = FAI_DTYPE_E4M3;
        else if (!strcmp(t, "e5m2") || !strcmp(t, "float8_e5m2"))
            *code_dst[c] = FAI_DTYPE_E5M2;
        else
            return ft_run_fail(a,
                               "%s %s: expected e4m3 or e5m2 (how the uint8 bytes of %s are read)",
                               options[code_opts[c]].name, t, c ? "--v" : "--k");
    }

    static const int counts[] = {FT_RUN_OPT_THREADS, FT_RUN_OPT_WORKERS};
    int64_t *const dst[] = {&a->threads, &a->workers};
    for (int c = 0; c < 2; c++) {
        const char *s = a->value[counts[c]];
        if (!s) continue;
        if (parse_int64(s, dst[c]) || *dst[c] < 0)
            return ft_run_fail(a, "%s %s: expected a non-negative integer (0: automatic)",
                               options[counts[c]].name, s);
    }
    return 0;
}

/* The real path of the directory holding `path`, then its file name; 0 if unresolvable. */
static int resolve_parent(const char *path, char *dir, char *name) {
    char copy[PATH_MAX];
    if (snprintf(copy, sizeof copy, "%s", path) >= (int)sizeof copy) return 0;
    snprintf(name, PATH_MAX, "%s", basename(copy));
    if (snprintf(copy, sizeof copy, "%s", path) >= (int)sizeof copy) return 0;
    return realpath(dirname(copy), dir) != NULL;
}

/* Whether two paths name one file however they are spelt: the same inode when both exist, else
 * the same name in the same directory. */
static int same_file(const char *a, const char *b) {
    if (!strcmp(a, b)) return 1;
    struct stat sa, sb;
    const int a_exists = stat(a, &sa) == 0, b_exists = stat(b, &sb) == 0;
    if (a_exists && b_exists) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (a_exists || b_exists) return 0;
    char dir_a[PATH_MAX], dir_b[PATH_MAX], name_a[PATH_MAX], name_b[PATH_MAX];
    return resolve_parent(a, dir_a, name_a) && resolve_parent(b, dir_b, name_b) &&
           !strcmp(dir_a, dir_b) && !strcmp(name_a, name_b);
}

static int check_files(ft_run_args *a) {
    if (a->value[FT_RUN_OPT_BLOCK_TABLE] && !a->value[FT_RUN_OPT_SEQLENS_KV])
        return ft_run_fail(
            a, "--block-table %s needs --seqlens-kv (paged K/V have no implicit length)",
            a->value[FT_RUN_OPT_BLOCK_TABLE]);
    if (a->value[FT_RUN_OPT_LSE] && same_file(a->value[FT_RUN_OPT_LSE], a->value[FT_RUN_OPT_OUT]))
        return ft_run_fail(a, "--lse %s: the same file as --out", a->value[FT_RUN_OPT_LSE]);
    /* the outputs are renamed into place one after the other: catch what would make the second
     * rename fail before anything is written */
    static const int outputs[] = {FT_RUN_OPT_OUT, FT_RUN_OPT_LSE};
    for (int o = 0; o < 2; o++) {
        struct stat st;
        const char *path = a->value[outputs[o]];
        if (path && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
            return ft_run_fail(a, "%s %s: is a directory", options[outputs[o]].name, path);
    }
    return 0;
}

int ft_run_parse_args(int argc, char **argv, const char *command, int with_ring, ft_run_args *a) {
    memset(a, 0, sizeof *a);
    a->command = command;
    a->with_ring = with_ring;
    a->window_left = a->window_right = FAI_WINDOW_UNBOUNDED;
    a->scale = FAI_SCALE_DEFAULT; /* --scale replaces it with any finite value, 0 included */
    a->out_dtype = FAI_DTYPE_F32;
    a->mask_opt = -1;
    const int rc = collect_values(argc, argv, a);
    if (rc) return rc;

    static const int required[] = {FT_RUN_OPT_Q, FT_RUN_OPT_K, FT_RUN_OPT_V, FT_RUN_OPT_OUT};
    for (size_t r = 0; r < sizeof required / sizeof required[0]; r++)
        if (!a->value[required[r]])
            return ft_run_fail(a, "missing required option %s (see %s --help)",
                               options[required[r]].name, a->command);
    for (int o = 0; o < FT_RUN_OPT_COUNT; o++)
        if (options[o].takes_value && a->value[o] && !*a->value[o])
            return ft_run_fail(a, "%s has an empty value", options[o].name);
    if (parse_masking(a) || parse_numbers(a)) return 2;
    return check_files(a);
}

/* -- inputs ------------------------------------------------------------------------------------ */

void ft_run_free_inputs(ft_run_inputs *in) {
    ft_npy_free(&in->q);
    ft_npy_free(&in->k);
    ft_npy_free(&in->v);
    ft_npy_free(&in->mask);
    ft_npy_free(&in->seqlens_q);
    ft_npy_free(&in->seqlens_kv);
    ft_npy_free(&in->block_table);
    ft_npy_free(&in->alibi_slopes);
    ft_npy_free(&in->sinks);
    ft_npy_free(&in->k_scale);
    ft_npy_free(&in->v_scale);
}

static int load_input(ft_run_args *a, int opt, ft_npy *arr) {
    char err[FT_RUN_ERROR_LEN / 2];
    if (ft_npy_load(a->value[opt], arr, err, sizeof err))
        return ft_run_fail(a, "%s %s", options[opt].name, err);
    return 0;
}

/* "--k K.npy: shape (2, 5, 3, 64)": the start of a message about an input's shape. */
static const char *shape_of(const ft_run_args *a, int opt, const ft_npy *arr, char *buf,
                            size_t len) {
    char shape[SHAPE_LEN];
    ft_npy_format_shape(shape, sizeof shape, arr->rank, arr->shape);
    snprintf(buf, len, "%s %s: shape %s", options[opt].name, a->value[opt], shape);
    return buf;
}

/* The dtype of Q, K or V. K and V may also hold quantized codes: int8, or fp8 as uint8 bytes
 * read as --k-dtype / --v-dtype says. */
static int check_qkv_dtype(ft_run_args *a, int opt, const ft_npy *arr, fai_dtype *dt) {
    const int kv = opt != FT_RUN_OPT_Q;
    const int code_opt = opt == FT_RUN_OPT_K ? FT_RUN_OPT_K_DTYPE : FT_RUN_OPT_V_DTYPE;
    const char *code = kv ? a->value[code_opt] : NULL;
    if (code && arr->dtype != FT_NPY_U8)
        return ft_run_fail(a,
                           "%s %s: %s %s reads uint8 bytes as fp8 codes, but the file's dtype is "
                           "%s",
                           options[opt].name, a->value[opt], options[code_opt].name, code,
                           ft_npy_dtype_name(arr->dtype));
    switch (arr->dtype) {
    case FT_NPY_F32:
        *dt = FAI_DTYPE_F32;
        return 0;
    case FT_NPY_F16:
        *dt = FAI_DTYPE_F16;
        return 0;
    case FT_NPY_U16:
        if (a->value[FT_RUN_OPT_BF16]) {
            *dt = FAI_DTYPE_BF16;
            return 0;
        }
        return ft_run_fail(a, "%s %s: dtype uint16 needs --bf16 (it then holds bfloat16 bits)",
                           options[opt].name, a->value[opt]);
    case FT_NPY_I8:
        if (!kv) break;
        *dt = FAI_DTYPE_I8;
        return 0;
    case FT_NPY_U8:
        if (!kv) break;
        if (code) {
            *dt = opt == FT_RUN_OPT_K ? a->k_code_dtype : a->v_code_dtype;
            return 0;
        }
        return ft_run_fail(a,
                           "%s %s: dtype uint8 needs %s e4m3 or %s e5m2 (the bytes are then "
                           "read as fp8 codes)",
                           options[opt].name, a->value[opt], options[code_opt].name,
                           options[code_opt].name);
    default:
        break;
    }
    return ft_run_fail(a, "%s %s: dtype %s is not float32 or float16%s%s%s%s", options[opt].name,
                       a->value[opt], ft_npy_dtype_name(arr->dtype),
                       a->value[FT_RUN_OPT_BF16] ? " (or uint16 bfloat16 bits)" : "",
                       kv ? " (or int8 codes, or uint8 fp8 codes with " : "",
                       kv ? options[code_opt].name : "", kv ? ")" : "");
}

static int check_rank(ft_run_args *a, int opt, const ft_npy *arr, int rank, const char *what) {
    if (arr->rank == rank) return 0;
    char head[FT_RUN_ERROR_LEN / 2];
    return ft_run_fail(a, "%s is not %s", shape_of(a, opt, arr, head, sizeof head), what);
}

/* An int32 [B] lengths array. */
static int check_lengths(ft_run_args *a, int opt, const ft_npy *arr, int64_t batch) {
    char head[FT_RUN_ERROR_LEN / 2];
    if (arr->dtype != FT_NPY_I32)
        return ft_run_fail(a, "%s %s: dtype %s is not int32", options[opt].name, a->value[opt],
                           ft_npy_dtype_name(arr->dtype));
    if (arr->rank != 1 || arr->shape[0] != batch)
        return ft_run_fail(a, "%s does not match q's batch %lld (expected (%lld,))",
                           shape_of(a, opt, arr, head, sizeof head), (long long)batch,
                           (long long)batch);
    return 0;
}

/* -- Step 1: Q, K, V and their shapes -- */
static int load_qkv(ft_run_args *a, ft_run_inputs *in, ft_run_problem *p) {
    char head[FT_RUN_ERROR_LEN / 2];
    if (load_input(a, FT_RUN_OPT_Q, &in->q) ||
        check_qkv_dtype(a, FT_RUN_OPT_Q, &in->q, &p->q_dtype) ||
        check_rank(a, FT_RUN_OPT_Q, &in->q, 4, "[B, Sq, Hq, D]"))
        return 2;
    p->batch = in->q.shape[0], p->seq_q = in->q.shape[1];
    p->heads_q = in->q.shape[2], p->head_dim = in->q.shape[3];
    const int64_t B = p->batch, Hq = p->heads_q, D = p->head_dim;
    const int paged = p->paged;
    if (load_input(a, FT_RUN_OPT_K, &in->k) ||
        check_qkv_dtype(a, FT_RUN_OPT_K, &in->k, &p->k_dtype) ||
        check_rank(a, FT_RUN_OPT_K, &in->k, 4,
                   paged ? "[num_pages, page_size, Hkv, D]" : "[B, Skv, Hkv, D]"))
        return 2;
    const int64_t *ks = in->k.shape;
    if (!paged && ks[0] != B)
        return ft_run_fail(a, "%s does not match q's batch %lld",
                           shape_of(a, FT_RUN_OPT_K, &in->k, head, sizeof head), (long long)B);
    if (ks[3] != D)
        return ft_run_fail(a, "%s does not match q's head_dim %lld",
                           shape_of(a, FT_RUN_OPT_K, &in->k, head, sizeof head), (long long)D);
    const int64_t Hkv = ks[2];
    if (Hkv > 0 && Hq % Hkv != 0)
        return ft_run_fail(a, "%s: heads_kv %lld does not divide q's heads_q %lld",
                           shape_of(a, FT_RUN_OPT_K, &in->k, head, sizeof head), (long long)Hkv,
                           (long long)Hq);
    if (load_input(a, FT_RUN_OPT_V, &in->v) ||
        check_qkv_dtype(a, FT_RUN_OPT_V, &in->v, &p->v_dtype) ||
        check_rank(a, FT_RUN_OPT_V, &in->v, 4,
                   paged ? "[num_pages, page_size, Hkv, Dv]" : "[B, Skv, Hkv, Dv]"))
        return 2;
    const int64_t *vs = in->v.shape;
    const char *const kdim_names[3] = {paged ? "num_pages" : "batch",
                                       paged ? "page_size" : "seq_kv", "heads_kv"};
    for (int d = 0; d < 3; d++)
        if (vs[d] != ks[d])
            return ft_run_fail(a, "%s does not match k's %s %lld",
                               shape_of(a, FT_RUN_OPT_V, &in->v, head, sizeof head), kdim_names[d],
                               (long long)ks[d]);
    p->heads_kv = Hkv;
    p->head_dim_v = vs[3];
    p->k_rows = ks[1];
    return 0;
}

/* -- Step 2: lengths and the block table -- */
static int load_lengths(ft_run_args *a, ft_run_inputs *in, ft_run_problem *p, int64_t *seq_kv) {
    char head[FT_RUN_ERROR_LEN / 2];
    const int64_t B = p->batch;
    if (a->value[FT_RUN_OPT_SEQLENS_Q] &&
        (load_input(a, FT_RUN_OPT_SEQLENS_Q, &in->seqlens_q) ||
         check_lengths(a, FT_RUN_OPT_SEQLENS_Q, &in->seqlens_q, B)))
        return 2;
    if (a->value[FT_RUN_OPT_SEQLENS_KV] &&
        (load_input(a, FT_RUN_OPT_SEQLENS_KV, &in->seqlens_kv) ||
         check_lengths(a, FT_RUN_OPT_SEQLENS_KV, &in->seqlens_kv, B)))
        return 2;
    *seq_kv = p->k_rows;
    if (!p->paged) return 0;
    if (load_input(a, FT_RUN_OPT_BLOCK_TABLE, &in->block_table)) return 2;
    const ft_npy *bt = &in->block_table;
    if (bt->dtype != FT_NPY_I32)
        return ft_run_fail(a, "--block-table %s: dtype %s is not int32",
                           a->value[FT_RUN_OPT_BLOCK_TABLE], ft_npy_dtype_name(bt->dtype));
    if (bt->rank != 2 || bt->shape[0] != B)
        return ft_run_fail(a, "%s is not [B, max_pages] with q's batch %lld",
                           shape_of(a, FT_RUN_OPT_BLOCK_TABLE, bt, head, sizeof head),
                           (long long)B);
    fai_problem *pb = &p->problem;
    pb->num_pages = in->k.shape[0];
    pb->page_size = in->k.shape[1];
    pb->pages_per_seq = bt->shape[1];
    *seq_kv = 0;
    if (pb->page_size == 0)
        return ft_run_fail(a, "%s: page_size 0: a page pool holds at least one key per page",
                           shape_of(a, FT_RUN_OPT_K, &in->k, head, sizeof head));
    if (pb->pages_per_seq > INT64_MAX / pb->page_size)
        return ft_run_fail(a, "%s: pages_per_seq %lld * page_size %lld overflows",
                           shape_of(a, FT_RUN_OPT_BLOCK_TABLE, bt, head, sizeof head),
                           (long long)pb->pages_per_seq, (long long)pb->page_size);
    *seq_kv = pb->pages_per_seq * pb->page_size;
    return 0;
}

/* -- Step 2b: the scales of a quantized K and V -- */

/* "(2, 8, 1) per token, (1,) per kv head or () for the whole tensor": the shapes a scale file
 * may have, from K's (V's) shape. */
static void scale_forms(const ft_npy *kv, char *buf, size_t len) {
    char token[SHAPE_LEN], head[SHAPE_LEN];
    ft_npy_format_shape(token, sizeof token, 3, kv->shape);
    ft_npy_format_shape(head, sizeof head, 1, kv->shape + 2);
    snprintf(buf, len, "%s per token, %s per kv head or () for the whole tensor", token, head);
}

/* --k-scale (--v-scale): float32, given exactly when K (V) is quantized, shaped as K's leading
 * dims (per token), [Hkv] (per kv head), or [] / [1] (one scale). */
static int load_scale(ft_run_args *a, int opt, int kv_opt, fai_dtype dtype, const ft_npy *kv,
                      ft_npy *arr, fai_scale *out) {
    char head[FT_RUN_ERROR_LEN / 2], forms[3 * SHAPE_LEN];
    memset(out, 0, sizeof *out);
    const int quantized = fai_dtype_is_quantized(dtype);
    scale_forms(kv, forms, sizeof forms);
    if (!a->value[opt]) {
        if (!quantized) return 0;
        return ft_run_fail(a, "%s %s holds %s codes: %s is required (float32 scales: %s)",
                           options[kv_opt].name, a->value[kv_opt], fai_dtype_name(dtype),
                           options[opt].name, forms);
    }
    if (!quantized)
        return ft_run_fail(a,
                           "%s %s given, but %s %s holds %s values: scales belong to int8, e4m3 "
                           "and e5m2 codes",
                           options[opt].name, a->value[opt], options[kv_opt].name, a->value[kv_opt],
                           fai_dtype_name(dtype));
    if (load_input(a, opt, arr)) return 2;
    if (arr->dtype != FT_NPY_F32)
        return ft_run_fail(a, "%s %s: dtype %s is not float32", options[opt].name, a->value[opt],
                           ft_npy_dtype_name(arr->dtype));
    const int64_t *s = arr->shape, *k = kv->shape;
    if (arr->rank == 3 && s[0] == k[0] && s[1] == k[1] && s[2] == k[2]) {
        out->stride_batch = k[1] * k[2], out->stride_seq = k[2], out->stride_head = 1;
    } else if (arr->rank == 1 && s[0] == k[2]) {
        out->stride_head = 1;
    } else if (!(arr->rank == 0 || (arr->rank == 1 && s[0] == 1))) {
        return ft_run_fail(a, "%s does not match %s: expected %s",
                           shape_of(a, opt, arr, head, sizeof head), options[kv_opt].name, forms);
    }
    out->data = arr->data;
    return 0;
}

/* -- Step 3: the mask -- */
static int load_mask(ft_run_args *a, ft_run_inputs *in, ft_run_problem *p, int64_t seq_kv) {
    char head[FT_RUN_ERROR_LEN / 2];
    const int opt = a->mask_opt;
    const int64_t B = p->batch, Sq = p->seq_q, Hq = p->heads_q;
    if (load_input(a, opt, &in->mask)) return 2;
    const ft_npy *m = &in->mask;
    const int bits = a->mask_kind == FAI_MASK_KEEP_BITS;
    if (a->mask_kind == FAI_MASK_ADD ? m->dtype != FT_NPY_F32
        : bits                       ? m->dtype != FT_NPY_U8
                                     : m->dtype != FT_NPY_BOOL && m->dtype != FT_NPY_U8)
        return ft_run_fail(a, "%s %s: dtype %s is not %s", options[opt].name, a->value[opt],
                           ft_npy_dtype_name(m->dtype),
                           a->mask_kind == FAI_MASK_ADD ? "float32"
                           : bits                       ? "uint8 (8 keys per byte)"
                                                        : "bool or uint8");
    if (m->rank < 2 || m->rank > 4)
        return ft_run_fail(a, "%s is not [Sq, %s], [B, Sq, %s] or [B, Hq, Sq, %s]",
                           shape_of(a, opt, m, head, sizeof head), bits ? "ceil(Skv/8)" : "Skv",
                           bits ? "ceil(Skv/8)" : "Skv", bits ? "ceil(Skv/8)" : "Skv");
    const int64_t mk = m->shape[m->rank - 1];
    /* dense: the mask covers the Skv keys; paged: at least the longest sequence */
    int64_t need_kv = seq_kv;
    if (p->paged) {
        need_kv = 0;
        const int32_t *len = in->seqlens_kv.data;
        for (int64_t b = 0; b < B; b++)
            if (len[b] > need_kv) need_kv = len[b];
    }
    if (bits) need_kv = (need_kv + 7) / 8; /* bytes of 8 keys */
    int ok = m->shape[m->rank - 2] == Sq && (p->paged ? mk >= need_kv : mk == need_kv);
    if (m->rank >= 3) ok = ok && m->shape[0] == B;
    if (m->rank == 4) ok = ok && m->shape[1] == Hq;
    if (!ok) {
        const char *forms[] = {"", "", "[Sq, Skv]", "[B, Sq, Skv]", "[B, Hq, Sq, Skv]"};
        const char *bit_forms[] = {"", "", "[Sq, ceil(Skv/8)]", "[B, Sq, ceil(Skv/8)]",
                                   "[B, Hq, Sq, ceil(Skv/8)]"};
        int64_t want[4];
        int n = 0;
        if (m->rank == 4) want[n++] = B, want[n++] = Hq;
        if (m->rank == 3) want[n++] = B;
        want[n++] = Sq;
        want[n++] = need_kv;
        char expect[SHAPE_LEN];
        ft_npy_format_shape(expect, sizeof expect, n, want);
        return ft_run_fail(a, "%s does not match %s = %s%s", shape_of(a, opt, m, head, sizeof head),
                           bits ? bit_forms[m->rank] : forms[m->rank], expect,
                           p->paged ? " (Skv: at least the longest --seqlens-kv)" : "");
    }
    const int64_t plane = Sq * mk; /* fits: the mask holds at least this many elements */
    p->mask.data = m->data;
    p->mask.stride_q = mk;
    p->mask.stride_head = m->rank == 4 ? plane : 0;
    p->mask.stride_batch = m->rank == 4 ? Hq * plane : m->rank == 3 ? plane : 0;
    p->mask_kv = mk;
    return 0;
}

/* -- Step 3b: the modifiers' per-head arrays (float32 [Hq]) -- */
static int load_head_values(ft_run_args *a, int opt, ft_npy *arr, const ft_run_problem *p,
                            const float **out) {
    char head[FT_RUN_ERROR_LEN / 2];
    *out = NULL;
    if (!a->value[opt]) return 0;
    if (load_input(a, opt, arr)) return 2;
    if (arr->dtype != FT_NPY_F32)
        return ft_run_fail(a, "%s %s: dtype %s is not float32", options[opt].name, a->value[opt],
                           ft_npy_dtype_name(arr->dtype));
    if (arr->rank != 1 || arr->shape[0] != p->heads_q)
        return ft_run_fail(a, "%s does not match q's heads_q %lld (expected (%lld,))",
                           shape_of(a, opt, arr, head, sizeof head), (long long)p->heads_q,
                           (long long)p->heads_q);
    *out = arr->data;
    return 0;
}

/* -- Step 4: the problem -- */
static void describe_problem(const ft_run_args *a, const ft_run_inputs *in, ft_run_problem *p,
                             int64_t seq_kv) {
    fai_problem *pb = &p->problem;
    pb->batch = p->batch;
    pb->heads_q = p->heads_q;
    pb->heads_kv = p->heads_kv;
    pb->seq_q = p->seq_q;
    pb->seq_kv = seq_kv;
    pb->head_dim = p->head_dim;
    pb->head_dim_v = p->head_dim_v;
    pb->q_dtype = p->q_dtype;
    pb->k_dtype = p->k_dtype;
    pb->v_dtype = p->v_dtype;
    pb->o_dtype = a->out_dtype;
    pb->scale = a->scale;
    pb->causal = a->causal;
    pb->window_left = a->window_left;
    pb->window_right = a->window_right;
    pb->mask_kind = a->mask_kind;
    pb->round_p_bf16 = a->value[FT_RUN_OPT_ROUND_P_BF16] != NULL;
    pb->softcap = a->softcap;
    pb->alibi = p->alibi_slopes != NULL;
    pb->sinks = p->sinks != NULL;
    pb->seqlens_q = a->value[FT_RUN_OPT_SEQLENS_Q] ? in->seqlens_q.data : NULL;
    pb->seqlens_kv = a->value[FT_RUN_OPT_SEQLENS_KV] ? in->seqlens_kv.data : NULL;
    pb->threads = a->threads;
    pb->workers = a->workers;
}

int ft_run_load(ft_run_args *a, ft_run_inputs *in, ft_run_problem *p) {
    memset(p, 0, sizeof *p);
    fai_problem_init(&p->problem);
    p->paged = a->value[FT_RUN_OPT_BLOCK_TABLE] != NULL;
    int64_t seq_kv = 0;
    if (load_qkv(a, in, p) || load_lengths(a, in, p, &seq_kv) ||
        load_scale(a, FT_RUN_OPT_K_SCALE, FT_RUN_OPT_K, p->k_dtype, &in->k, &in->k_scale,
                   &p->k_scale) ||
        load_scale(a, FT_RUN_OPT_V_SCALE, FT_RUN_OPT_V, p->v_dtype, &in->v, &in->v_scale,
                   &p->v_scale))
        return 2;
    if (a->mask_opt >= 0 && load_mask(a, in, p, seq_kv)) return 2;
    if (load_head_values(a, FT_RUN_OPT_ALIBI_SLOPES, &in->alibi_slopes, p, &p->alibi_slopes) ||
        load_head_values(a, FT_RUN_OPT_SINKS, &in->sinks, p, &p->sinks))
        return 2;
    describe_problem(a, in, p, seq_kv);
    return 0;
}

int ft_run_check_block_table(ft_run_args *a, const ft_run_inputs *in, const ft_run_problem *p) {
    if (!p->paged) return 0;
    const fai_problem *pb = &p->problem;
    const int32_t *bt = in->block_table.data;
    const int32_t *len = in->seqlens_kv.data;
    for (int64_t b = 0; b < pb->batch; b++) {
        const int64_t used =
            pb->page_size > 0 ? ((int64_t)len[b] + pb->page_size - 1) / pb->page_size : 0;
        for (int64_t pg = 0; pg < used && pg < pb->pages_per_seq; pg++) {
            const int32_t e = bt[b * pb->pages_per_seq + pg];
            if (e < 0 || e >= pb->num_pages)
                return ft_run_fail(a,
                                   "--block-table %s: entry [%lld, %lld] = %d is outside the "
                                   "pool of %lld pages",
                                   a->value[FT_RUN_OPT_BLOCK_TABLE], (long long)b, (long long)pg,
                                   (int)e, (long long)pb->num_pages);
        }
    }
    return 0;
}

int ft_run_plan(ft_run_args *a, const ft_run_inputs *in, const ft_run_problem *p, fai_plan **plan) {
    *plan = NULL;
    const fai_status status = fai_plan_create(&p->problem, plan);
    if (status != FAI_OK) {
        const char *why = fai_last_error();
        return ft_run_fail(a, "%s", why && *why ? why : fai_status_string(status));
    }
    /* pages that hold keys must be inside the pool (the library checks too; this names the file
     * and the entry); after planning, which has validated the lengths */
    if (ft_run_check_block_table(a, in, p)) {
        fai_plan_free(*plan);
        *plan = NULL;
        return 2;
    }
    return 0;
}

/* -- outputs ----------------------------------------------------------------------------------- */

int ft_run_alloc_outputs(ft_run_args *a, const ft_run_problem *p, int with_lse, void **o,
                         float **lse) {
    *o = NULL;
    *lse = NULL;
    size_t o_count = 1, lse_count = 1;
    const int bad = ft_run_mul_size(&o_count, p->batch) || ft_run_mul_size(&o_count, p->seq_q) ||
                    ft_run_mul_size(&o_count, p->heads_q) ||
                    ft_run_mul_size(&o_count, p->head_dim_v) || o_count > SIZE_MAX / 4 ||
                    ft_run_mul_size(&lse_count, p->batch) ||
                    ft_run_mul_size(&lse_count, p->heads_q) ||
                    ft_run_mul_size(&lse_count, p->seq_q) || lse_count > SIZE_MAX / 4;
    if (bad)
        return ft_run_fail(a, "the output [%lld, %lld, %lld, %lld] is too large",
                           (long long)p->batch, (long long)p->seq_q, (long long)p->heads_q,
                           (long long)p->head_dim_v);
    const size_t o_bytes = o_count * fai_dtype_size(a->out_dtype);
    *o = ft_run_alloc(o_bytes);
    if (with_lse) *lse = ft_run_alloc(lse_count * sizeof(float));
    if (!*o || (with_lse && !*lse)) {
        free(*o), free(*lse);
        *o = NULL, *lse = NULL;
        return ft_run_fail(a, "out of memory (an output of %zu bytes)", o_bytes);
    }
    return 0;
}

fai_tensor ft_run_lse_tensor(float *lse, int64_t heads, int64_t seq) {
    fai_tensor t;
    memset(&t, 0, sizeof t);
    t.data = lse;
    t.dtype = FAI_DTYPE_F32;
    t.stride_batch = heads * seq;
    t.stride_head = seq;
    t.stride_seq = 1;
    return t;
}

int ft_run_write_outputs(ft_run_args *a, const ft_run_problem *p, const void *o, const float *lse) {
    const ft_npy_dtype o_file_dt = a->out_dtype == FAI_DTYPE_F32   ? FT_NPY_F32
                                   : a->out_dtype == FAI_DTYPE_F16 ? FT_NPY_F16
                                                                   : FT_NPY_U16;
    const int64_t o_shape[4] = {p->batch, p->seq_q, p->heads_q, p->head_dim_v};
    const int64_t lse_shape[3] = {p->batch, p->heads_q, p->seq_q};
    const int want_lse = a->value[FT_RUN_OPT_LSE] != NULL;
    const char *out = a->value[FT_RUN_OPT_OUT], *lse_path = a->value[FT_RUN_OPT_LSE];
    char err[FT_RUN_ERROR_LEN / 2];
    char o_tmp[4096], lse_tmp[4096];
    lse_tmp[0] = '\0';
    if (ft_npy_write_temp(out, o_file_dt, 4, o_shape, o, o_tmp, sizeof o_tmp, err, sizeof err))
        return ft_run_fail(a, "--out %s", err);
    if (want_lse && ft_npy_write_temp(lse_path, FT_NPY_F32, 3, lse_shape, lse, lse_tmp,
                                      sizeof lse_tmp, err, sizeof err)) {
        ft_npy_discard(o_tmp);
        return ft_run_fail(a, "--lse %s", err);
    }
    if (ft_npy_commit(o_tmp, out, err, sizeof err)) {
        if (want_lse) ft_npy_discard(lse_tmp);
        return ft_run_fail(a, "--out %s", err);
    }
    if (want_lse && ft_npy_commit(lse_tmp, lse_path, err, sizeof err))
        return ft_run_fail(a, "--lse %s", err);
    return 0;
}

void *ft_run_alloc(size_t bytes) {
    size_t n = bytes ? bytes : 1;
    if (n > SIZE_MAX - 63) return NULL;
    n = (n + 63) / 64 * 64;
    void *p = aligned_alloc(64, n);
    if (p) memset(p, 0, n);
    return p;
}

int ft_run_mul_size(size_t *acc, int64_t d) {
    if (d < 0) return -1;
    if (d && *acc > SIZE_MAX / (size_t)d) return -1;
    *acc *= (size_t)d;
    return 0;
}
