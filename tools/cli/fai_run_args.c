/* Options of `fai run` (and `fai-mpi run`); its inputs: fai_run_inputs.c, its outputs:
 * fai_run_outputs.c. */
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
    [FT_RUN_OPT_K_CHANNEL_SCALE] = {"--k-channel-scale", 1},
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
        if (ft_parse_int64(left, INT64_MIN, INT64_MAX, &a->window_left) ||
            ft_parse_int64(comma + 1, INT64_MIN, INT64_MAX, &a->window_right))
            return ft_run_fail(
                a, "--window %s: expected LEFT,RIGHT (two integers, -1 for unbounded)", w);
        if (a->window_left < -1 || a->window_right < -1)
            return ft_run_fail(a, "--window %s: each side must be >= 0, or -1 for unbounded", w);
    }
    return 0;
}

typedef enum number_status {
    NUMBER_OK,
    NUMBER_INVALID,       /* not a finite decimal number */
    NUMBER_BEYOND_FLOAT,  /* finite, but beyond the float32 range */
    NUMBER_ROUNDS_TO_ZERO /* nonzero, but too small for float32 */
} number_status;

/* A whole decimal number for a float32 option, nothing before or after it: strtod would skip
 * any leading white space (a newline or a form feed too), so the first character must be a
 * digit, a sign or a point. */
static number_status parse_float32(const char *s, double *d, float *f) {
    *d = 0.0, *f = 0.0f;
    if (!((*s >= '0' && *s <= '9') || *s == '-' || *s == '+' || *s == '.')) return NUMBER_INVALID;
    errno = 0;
    char *end = NULL;
    *d = strtod(s, &end);
    const int out_of_range = errno == ERANGE;
    if (end == s || *end || isnan(*d)) return NUMBER_INVALID;
    if (isinf(*d)) return out_of_range ? NUMBER_BEYOND_FLOAT : NUMBER_INVALID; /* 1e999 or inf */
    *f = (float)*d;
    if (!isfinite(*f)) return NUMBER_BEYOND_FLOAT;
    /* an underflow (1e-400) may come back as 0 with ERANGE */
    if (*f == 0.0f && (*d != 0.0 || out_of_range)) return NUMBER_ROUNDS_TO_ZERO;
    return NUMBER_OK;
}

static int parse_scale(ft_run_args *a, const char *s) {
    double d;
    const number_status status = parse_float32(s, &d, &a->scale);
    if (status == NUMBER_INVALID) return ft_run_fail(a, "--scale %s: not a finite number", s);
    if (status == NUMBER_BEYOND_FLOAT)
        return ft_run_fail(a, "--scale %s: beyond the float32 range", s);
    if (status == NUMBER_ROUNDS_TO_ZERO) /* it would weigh every key alike: not what was given */
        return ft_run_fail(a, "--scale %s: rounds to 0 in float32 (0 weighs every key alike)", s);
    return 0;
}

static int parse_softcap(ft_run_args *a, const char *s) {
    double d;
    const number_status status = parse_float32(s, &d, &a->softcap);
    if (status == NUMBER_INVALID || !(d >= 0.0))
        return ft_run_fail(a, "--softcap %s: expected a finite number >= 0 (0: off)", s);
    if (status == NUMBER_BEYOND_FLOAT)
        return ft_run_fail(a, "--softcap %s: beyond the float32 range", s);
    if (status == NUMBER_ROUNDS_TO_ZERO) /* 0 means off: a cap given must not turn into that */
        return ft_run_fail(a, "--softcap %s: rounds to 0 in float32, which means off", s);
    return 0;
}

static int parse_numbers(ft_run_args *a) {
    if (a->value[FT_RUN_OPT_SCALE] && parse_scale(a, a->value[FT_RUN_OPT_SCALE])) return 2;
    if (a->value[FT_RUN_OPT_SOFTCAP] && parse_softcap(a, a->value[FT_RUN_OPT_SOFTCAP])) return 2;

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
        if (ft_parse_int64(s, 0, FAI_MAX_WORKERS, dst[c]))
            return ft_run_fail(a, "%s %s: expected an integer 0..%d (0: automatic)",
                               options[counts[c]].name, s, FAI_MAX_WORKERS);
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

/* Whether an option's value names an input file. */
static int is_file_option(int opt) {
    switch (opt) {
    case FT_RUN_OPT_Q:
    case FT_RUN_OPT_K:
    case FT_RUN_OPT_V:
    case FT_RUN_OPT_MASK:
    case FT_RUN_OPT_MASK_DROP:
    case FT_RUN_OPT_MASK_ADD:
    case FT_RUN_OPT_MASK_BITS:
    case FT_RUN_OPT_ALIBI_SLOPES:
    case FT_RUN_OPT_SINKS:
    case FT_RUN_OPT_K_SCALE:
    case FT_RUN_OPT_V_SCALE:
    case FT_RUN_OPT_K_CHANNEL_SCALE:
    case FT_RUN_OPT_SEQLENS_Q:
    case FT_RUN_OPT_SEQLENS_KV:
    case FT_RUN_OPT_BLOCK_TABLE:
        return 1;
    default:
        return 0;
    }
}

static int check_files(ft_run_args *a) {
    if (a->value[FT_RUN_OPT_BLOCK_TABLE] && !a->value[FT_RUN_OPT_SEQLENS_KV])
        return ft_run_fail(
            a, "--block-table %s needs --seqlens-kv (paged K/V have no implicit length)",
            a->value[FT_RUN_OPT_BLOCK_TABLE]);
    if (a->value[FT_RUN_OPT_LSE] && same_file(a->value[FT_RUN_OPT_LSE], a->value[FT_RUN_OPT_OUT]))
        return ft_run_fail(a, "--lse %s: the same file as --out", a->value[FT_RUN_OPT_LSE]);
    /* the outputs are renamed into place one after the other: catch what would make the second
     * rename fail before anything is written, and what the writer would refuse (fai_npy.h) */
    static const int outputs[] = {FT_RUN_OPT_OUT, FT_RUN_OPT_LSE};
    for (int o = 0; o < 2; o++) {
        const char *path = a->value[outputs[o]], *name = options[outputs[o]].name;
        if (!path) continue;
        char err[FT_RUN_ERROR_LEN / 2];
        if (ft_npy_check_output(path, err, sizeof err)) return ft_run_fail(a, "%s %s", name, err);
        /* an output that names an input would destroy it */
        for (int i = 0; i < FT_RUN_OPT_COUNT; i++)
            if (options[i].takes_value && i != FT_RUN_OPT_OUT && i != FT_RUN_OPT_LSE &&
                is_file_option(i) && a->value[i] && same_file(path, a->value[i]))
                return ft_run_fail(a, "%s %s: the same file as %s (an input)", name, path,
                                   options[i].name);
    }
    return 0;
}

int ft_run_parse_args(int argc, char **argv, const char *command, int with_ring, ft_run_args *a) {
    memset(a, 0, sizeof *a);
    a->command = command;
    a->with_ring = with_ring;
    a->window_left = a->window_right = FAI_WINDOW_UNBOUNDED;
    a->scale = FAI_SCALE_DEFAULT; /* --scale replaces it with a finite value, 0 included */
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
