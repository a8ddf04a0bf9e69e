/* fai run: attention on .npy files.
 *
 * Reads Q, K, V (and the optional mask, lengths and block table), checks every shape against Q's,
 * plans and runs through the public API, and only then writes O (and LSE): each to a temporary
 * file next to its target, both renamed into place at the end. Any failure before that leaves
 * the outputs untouched and prints exactly one line on stderr; the exit status is then 2. */
#include "fai.h"
#include "fai_cli.h"
#include "fai_npy.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define ERR_LEN 1024
#define SHAPE_LEN (FAI_NPY_MAX_RANK * 22 + 8)

static void print_run_usage(FILE *out) {
    fprintf(out,
            "usage: fai run --q Q.npy --k K.npy --v V.npy --out O.npy [options]\n"
            "\n"
            "Computes O = softmax(scale * Q K^T + mask) V on .npy files (little-endian, C order).\n"
            "\n"
            "inputs:\n"
            "  --q Q.npy              [B, Sq, Hq, D]    float32 or float16\n"
            "  --k K.npy              [B, Skv, Hkv, D]  float32 or float16\n"
            "  --v V.npy              [B, Skv, Hkv, Dv] float32 or float16\n"
            "  --bf16                 uint16 arrays of Q, K, V hold bfloat16 bits\n"
            "outputs (written only when the run succeeds):\n"
            "  --out O.npy            [B, Sq, Hq, Dv], float32 unless --out-dtype\n"
            "  --out-dtype T          f32 (default), f16, or bf16 (written as uint16 bits)\n"
            "  --lse LSE.npy          [B, Hq, Sq] float32 log-sum-exp; -inf for empty rows\n"
            "masking:\n"
            "  --causal               bottom-right aligned: query i sees keys j <= i + Skv - Sq\n"
            "  --causal-top-left      top-left aligned: query i sees keys j <= i\n"
            "  --window LEFT,RIGHT    keys within LEFT before and RIGHT after the diagonal;\n"
            "                         -1 leaves a side unbounded\n"
            "  --mask KEEP.npy        bool/uint8, nonzero = attend      } shaped [Sq, Skv],\n"
            "  --mask-drop DROP.npy   bool/uint8, nonzero = masked out  } [B, Sq, Skv] or\n"
            "  --mask-add ADD.npy     float32 added to the scaled logit } [B, Hq, Sq, Skv]\n"
            "  --scale S              logit scale (default 1/sqrt(D))\n"
            "lengths and paging:\n"
            "  --seqlens-q SQ.npy     int32 [B]: valid queries per sequence (rows past are 0)\n"
            "  --seqlens-kv SKV.npy   int32 [B]: valid keys per sequence\n"
            "  --block-table BT.npy   int32 [B, max_pages]; K and V are then page pools\n"
            "                         [num_pages, page_size, Hkv, D|Dv]; needs --seqlens-kv\n"
            "execution:\n"
            "  --threads N            threads to run on (0: all of the pool's)\n"
            "  --workers N            pieces the work is split into (0: one per CPU)\n"
            "  --help                 this text\n"
            "\n"
            "Exit status: 0 on success; 2 on bad input, with one line on stderr and no output\n"
            "file created or changed.\n");
}

/* Prints "fai run: <message>" as exactly one line (control characters in file names or values
 * are replaced) and returns the bad-input exit status. */
static int run_error(const char *fmt, ...) {
    char msg[2 * ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    fprintf(stderr, "fai run: %s\n", msg);
    return 2;
}

/* -- options ----------------------------------------------------------------------------------- */

enum {
    OPT_Q,
    OPT_K,
    OPT_V,
    OPT_OUT,
    OPT_LSE,
    OPT_MASK,
    OPT_MASK_DROP,
    OPT_MASK_ADD,
    OPT_SEQLENS_Q,
    OPT_SEQLENS_KV,
    OPT_BLOCK_TABLE,
    OPT_WINDOW,
    OPT_SCALE,
    OPT_OUT_DTYPE,
    OPT_THREADS,
    OPT_WORKERS,
    OPT_CAUSAL,
    OPT_CAUSAL_TOP_LEFT,
    OPT_BF16,
    OPT_HELP,
    OPT_COUNT
};

static const struct {
    const char *name;
    int takes_value;
} options[OPT_COUNT] = {
    [OPT_Q] = {"--q", 1},
    [OPT_K] = {"--k", 1},
    [OPT_V] = {"--v", 1},
    [OPT_OUT] = {"--out", 1},
    [OPT_LSE] = {"--lse", 1},
    [OPT_MASK] = {"--mask", 1},
    [OPT_MASK_DROP] = {"--mask-drop", 1},
    [OPT_MASK_ADD] = {"--mask-add", 1},
    [OPT_SEQLENS_Q] = {"--seqlens-q", 1},
    [OPT_SEQLENS_KV] = {"--seqlens-kv", 1},
    [OPT_BLOCK_TABLE] = {"--block-table", 1},
    [OPT_WINDOW] = {"--window", 1},
    [OPT_SCALE] = {"--scale", 1},
    [OPT_OUT_DTYPE] = {"--out-dtype", 1},
    [OPT_THREADS] = {"--threads", 1},
    [OPT_WORKERS] = {"--workers", 1},
    [OPT_CAUSAL] = {"--causal", 0},
    [OPT_CAUSAL_TOP_LEFT] = {"--causal-top-left", 0},
    [OPT_BF16] = {"--bf16", 0},
    [OPT_HELP] = {"--help", 0},
};

typedef struct run_args {
    const char *value[OPT_COUNT]; /* the option's value, or "" for a given flag; NULL if absent */
    fai_causal causal;
    int64_t window_left, window_right;
    float scale;
    fai_dtype out_dtype;
    int64_t threads, workers;
    int mask_opt; /* OPT_MASK, OPT_MASK_DROP, OPT_MASK_ADD, or -1 */
    fai_mask_kind mask_kind;
} run_args;

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

/* Parses argv into *a. Returns -1 when the caller should print the usage and exit 0 (--help),
 * 0 on success and 2 after printing the error. */
static int parse_args(int argc, char **argv, run_args *a) {
    memset(a, 0, sizeof *a);
    a->window_left = a->window_right = -1;
    a->out_dtype = FAI_DTYPE_F32;
    a->mask_opt = -1;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "-h")) return -1;
        if (strncmp(arg, "--", 2) != 0)
            return run_error("unexpected argument '%s' (options start with --; see fai run "
                             "--help)",
                             arg);
        const char *eq = strchr(arg, '=');
        const size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
        int opt = -1;
        for (int o = 0; o < OPT_COUNT; o++)
            if (strlen(options[o].name) == nlen && !strncmp(arg, options[o].name, nlen)) opt = o;
        if (opt < 0) return run_error("unknown option '%.*s' (see fai run --help)", (int)nlen, arg);
        if (opt == OPT_HELP) return -1;
        const char *value = "";
        if (options[opt].takes_value) {
            if (eq) {
                value = eq + 1;
            } else {
                if (i + 1 >= argc) return run_error("%s needs a value", options[opt].name);
                value = argv[++i];
            }
        } else if (eq) {
            return run_error("%s takes no value (got '%s')", options[opt].name, arg);
        }
        if (a->value[opt]) return run_error("%s is given twice", options[opt].name);
        a->value[opt] = value;
    }

    static const int required[] = {OPT_Q, OPT_K, OPT_V, OPT_OUT};
    for (size_t r = 0; r < sizeof required / sizeof required[0]; r++)
        if (!a->value[required[r]])
            return run_error("missing required option %s (see fai run --help)",
                             options[required[r]].name);
    for (int o = 0; o < OPT_COUNT; o++)
        if (options[o].takes_value && a->value[o] && !*a->value[o])
            return run_error("%s has an empty value", options[o].name);

    if (a->value[OPT_CAUSAL] && a->value[OPT_CAUSAL_TOP_LEFT])
        return run_error("--causal and --causal-top-left exclude each other");
    a->causal = a->value[OPT_CAUSAL]            ? FAI_CAUSAL_BOTTOM_RIGHT
                : a->value[OPT_CAUSAL_TOP_LEFT] ? FAI_CAUSAL_TOP_LEFT
                                                : FAI_CAUSAL_NONE;

    static const int masks[] = {OPT_MASK, OPT_MASK_DROP, OPT_MASK_ADD};
    static const fai_mask_kind kinds[] = {FAI_MASK_KEEP, FAI_MASK_DROP, FAI_MASK_ADD};
    a->mask_kind = FAI_MASK_NONE;
    for (int m = 0; m < 3; m++) {
        if (!a->value[masks[m]]) continue;
        if (a->mask_opt >= 0)
            return run_error("%s and %s exclude each other", options[a->mask_opt].name,
                             options[masks[m]].name);
        a->mask_opt = masks[m];
        a->mask_kind = kinds[m];
    }

    if (a->value[OPT_WINDOW]) {
        const char *w = a->value[OPT_WINDOW];
        const char *comma = strchr(w, ',');
        char left[64];
        const size_t llen = comma ? (size_t)(comma - w) : 0;
        if (!comma || llen >= sizeof left || strchr(comma + 1, ','))
            return run_error("--window %s: expected LEFT,RIGHT (two integers, -1 for unbounded)",
                             w);
        memcpy(left, w, llen);
        left[llen] = '\0';
        if (parse_int64(left, &a->window_left) || parse_int64(comma + 1, &a->window_right))
            return run_error("--window %s: expected LEFT,RIGHT (two integers, -1 for unbounded)",
                             w);
        if (a->window_left < -1 || a->window_right < -1)
            return run_error("--window %s: each side must be >= 0, or -1 for unbounded", w);
    }

    if (a->value[OPT_SCALE]) {
        const char *s = a->value[OPT_SCALE];
        errno = 0;
        char *end = NULL;
        const double d = strtod(s, &end);
        const float f = (float)d;
        if (end == s || *end || *s == ' ' || *s == '\t' || !isfinite(d) || !isfinite(f))
            return run_error("--scale %s: not a finite number", s);
        a->scale = f;
    }

    if (a->value[OPT_OUT_DTYPE]) {
        const char *t = a->value[OPT_OUT_DTYPE];
        if (!strcmp(t, "f32") || !strcmp(t, "float32"))
            a->out_dtype = FAI_DTYPE_F32;
        else if (!strcmp(t, "f16") || !strcmp(t, "float16"))
            a->out_dtype = FAI_DTYPE_F16;
        else if (!strcmp(t, "bf16") || !strcmp(t, "bfloat16"))
            a->out_dtype = FAI_DTYPE_BF16;
        else
            return run_error("--out-dtype %s: expected f32, f16 or bf16", t);
    }

    static const int counts[] = {OPT_THREADS, OPT_WORKERS};
    int64_t *const dst[] = {&a->threads, &a->workers};
    for (int c = 0; c < 2; c++) {
        const char *s = a->value[counts[c]];
        if (!s) continue;
        if (parse_int64(s, dst[c]) || *dst[c] < 0)
            return run_error("%s %s: expected a non-negative integer (0: automatic)",
                             options[counts[c]].name, s);
    }

    if (a->value[OPT_BLOCK_TABLE] && !a->value[OPT_SEQLENS_KV])
        return run_error("--block-table %s needs --seqlens-kv (paged K/V have no implicit length)",
                         a->value[OPT_BLOCK_TABLE]);
    if (a->value[OPT_LSE] && !strcmp(a->value[OPT_LSE], a->value[OPT_OUT]))
        return run_error("--lse %s: the same file as --out", a->value[OPT_LSE]);
    /* the outputs are renamed into place one after the other: catch what would make the second
     * rename fail before anything is written */
    static const int outputs[] = {OPT_OUT, OPT_LSE};
    for (int o = 0; o < 2; o++) {
        struct stat st;
        const char *path = a->value[outputs[o]];
        if (path && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
            return run_error("%s %s: is a directory", options[outputs[o]].name, path);
    }
    return 0;
}

/* -- inputs ------------------------------------------------------------------------------------ */

typedef struct run_inputs {
    fai_npy q, k, v, mask, seqlens_q, seqlens_kv, block_table;
} run_inputs;

static void free_inputs(run_inputs *in) {
    fai_npy_free(&in->q);
    fai_npy_free(&in->k);
    fai_npy_free(&in->v);
    fai_npy_free(&in->mask);
    fai_npy_free(&in->seqlens_q);
    fai_npy_free(&in->seqlens_kv);
    fai_npy_free(&in->block_table);
}

static int load_input(const run_args *a, int opt, fai_npy *arr) {
    char err[ERR_LEN];
    if (fai_npy_load(a->value[opt], arr, err, sizeof err))
        return run_error("%s %s", options[opt].name, err);
    return 0;
}

/* "--k K.npy: shape (2, 5, 3, 64)": the start of a message about an input's shape. */
static const char *shape_of(const run_args *a, int opt, const fai_npy *arr, char *buf, size_t len) {
    char shape[SHAPE_LEN];
    fai_npy_format_shape(shape, sizeof shape, arr->rank, arr->shape);
    snprintf(buf, len, "%s %s: shape %s", options[opt].name, a->value[opt], shape);
    return buf;
}

static int check_qkv_dtype(const run_args *a, int opt, const fai_npy *arr, fai_dtype *dt) {
    switch (arr->dtype) {
    case FAI_NPY_F32:
        *dt = FAI_DTYPE_F32;
        return 0;
    case FAI_NPY_F16:
        *dt = FAI_DTYPE_F16;
        return 0;
    case FAI_NPY_U16:
        if (a->value[OPT_BF16]) {
            *dt = FAI_DTYPE_BF16;
            return 0;
        }
        return run_error("%s %s: dtype uint16 needs --bf16 (it then holds bfloat16 bits)",
                         options[opt].name, a->value[opt]);
    default:
        return run_error("%s %s: dtype %s is not float32 or float16%s", options[opt].name,
                         a->value[opt], fai_npy_dtype_name(arr->dtype),
                         a->value[OPT_BF16] ? " (or uint16 bfloat16 bits)" : "");
    }
}

static int check_rank(const run_args *a, int opt, const fai_npy *arr, int rank, const char *what) {
    if (arr->rank == rank) return 0;
    char head[ERR_LEN];
    return run_error("%s is not %s", shape_of(a, opt, arr, head, sizeof head), what);
}

/* An int32 [B] lengths array. */
static int check_lengths(const run_args *a, int opt, const fai_npy *arr, int64_t batch) {
    char head[ERR_LEN];
    if (arr->dtype != FAI_NPY_I32)
        return run_error("%s %s: dtype %s is not int32", options[opt].name, a->value[opt],
                         fai_npy_dtype_name(arr->dtype));
    if (arr->rank != 1 || arr->shape[0] != batch)
        return run_error("%s does not match q's batch %lld (expected (%lld,))",
                         shape_of(a, opt, arr, head, sizeof head), (long long)batch,
                         (long long)batch);
    return 0;
}

/* -- the command ------------------------------------------------------------------------------- */

static void *alloc_buffer(size_t bytes) {
    size_t n = bytes ? bytes : 1;
    if (n > SIZE_MAX - 63) return NULL;
    n = (n + 63) / 64 * 64;
    void *p = aligned_alloc(64, n);
    if (p) memset(p, 0, n);
    return p;
}

static int mul_size(size_t *acc, int64_t d) {
    if (d < 0) return -1;
    if (d && *acc > SIZE_MAX / (size_t)d) return -1;
    *acc *= (size_t)d;
    return 0;
}

static int run_with(const run_args *a, run_inputs *in) {
    char head[ERR_LEN];
    fai_dtype q_dt = FAI_DTYPE_F32, k_dt = FAI_DTYPE_F32, v_dt = FAI_DTYPE_F32;

    /* -- Step 1: Q, K, V and their shapes -- */
    if (load_input(a, OPT_Q, &in->q) || check_qkv_dtype(a, OPT_Q, &in->q, &q_dt) ||
        check_rank(a, OPT_Q, &in->q, 4, "[B, Sq, Hq, D]"))
        return 2;
    const int64_t B = in->q.shape[0], Sq = in->q.shape[1], Hq = in->q.shape[2], D = in->q.shape[3];
    const int paged = a->value[OPT_BLOCK_TABLE] != NULL;
    if (load_input(a, OPT_K, &in->k) || check_qkv_dtype(a, OPT_K, &in->k, &k_dt) ||
        check_rank(a, OPT_K, &in->k, 4,
                   paged ? "[num_pages, page_size, Hkv, D]" : "[B, Skv, Hkv, D]"))
        return 2;
    const int64_t *ks = in->k.shape;
    if (!paged && ks[0] != B)
        return run_error("%s does not match q's batch %lld",
                         shape_of(a, OPT_K, &in->k, head, sizeof head), (long long)B);
    if (ks[3] != D)
        return run_error("%s does not match q's head_dim %lld",
                         shape_of(a, OPT_K, &in->k, head, sizeof head), (long long)D);
    const int64_t Hkv = ks[2];
    if (Hkv > 0 && Hq % Hkv != 0)
        return run_error("%s: heads_kv %lld does not divide q's heads_q %lld",
                         shape_of(a, OPT_K, &in->k, head, sizeof head), (long long)Hkv,
                         (long long)Hq);
    if (load_input(a, OPT_V, &in->v) || check_qkv_dtype(a, OPT_V, &in->v, &v_dt) ||
        check_rank(a, OPT_V, &in->v, 4,
                   paged ? "[num_pages, page_size, Hkv, Dv]" : "[B, Skv, Hkv, Dv]"))
        return 2;
    const int64_t *vs = in->v.shape;
    const char *const kdim_names[3] = {paged ? "num_pages" : "batch",
                                       paged ? "page_size" : "seq_kv", "heads_kv"};
    for (int d = 0; d < 3; d++)
        if (vs[d] != ks[d])
            return run_error("%s does not match k's %s %lld",
                             shape_of(a, OPT_V, &in->v, head, sizeof head), kdim_names[d],
                             (long long)ks[d]);
    const int64_t Dv = vs[3];

    /* -- Step 2: lengths and the block table -- */
    if (a->value[OPT_SEQLENS_Q] && (load_input(a, OPT_SEQLENS_Q, &in->seqlens_q) ||
                                    check_lengths(a, OPT_SEQLENS_Q, &in->seqlens_q, B)))
        return 2;
    if (a->value[OPT_SEQLENS_KV] && (load_input(a, OPT_SEQLENS_KV, &in->seqlens_kv) ||
                                     check_lengths(a, OPT_SEQLENS_KV, &in->seqlens_kv, B)))
        return 2;
    int64_t page_size = 0, num_pages = 0, pages_per_seq = 0, seq_kv = ks[1];
    if (paged) {
        if (load_input(a, OPT_BLOCK_TABLE, &in->block_table)) return 2;
        const fai_npy *bt = &in->block_table;
        if (bt->dtype != FAI_NPY_I32)
            return run_error("--block-table %s: dtype %s is not int32", a->value[OPT_BLOCK_TABLE],
                             fai_npy_dtype_name(bt->dtype));
        if (bt->rank != 2 || bt->shape[0] != B)
            return run_error("%s is not [B, max_pages] with q's batch %lld",
                             shape_of(a, OPT_BLOCK_TABLE, bt, head, sizeof head), (long long)B);
        num_pages = ks[0];
        page_size = ks[1];
        pages_per_seq = bt->shape[1];
        seq_kv = 0;
        if (page_size > 0 && pages_per_seq > INT64_MAX / page_size)
            return run_error("%s: pages_per_seq %lld * page_size %lld overflows",
                             shape_of(a, OPT_BLOCK_TABLE, bt, head, sizeof head),
                             (long long)pages_per_seq, (long long)page_size);
        seq_kv = pages_per_seq * page_size;
    }

    /* -- Step 3: the mask -- */
    fai_mask mask = {0};
    if (a->mask_opt >= 0) {
        const int opt = a->mask_opt;
        if (load_input(a, opt, &in->mask)) return 2;
        const fai_npy *m = &in->mask;
        if (a->mask_kind == FAI_MASK_ADD ? m->dtype != FAI_NPY_F32
                                         : m->dtype != FAI_NPY_BOOL && m->dtype != FAI_NPY_U8)
            return run_error("%s %s: dtype %s is not %s", options[opt].name, a->value[opt],
                             fai_npy_dtype_name(m->dtype),
                             a->mask_kind == FAI_MASK_ADD ? "float32" : "bool or uint8");
        if (m->rank < 2 || m->rank > 4)
            return run_error("%s is not [Sq, Skv], [B, Sq, Skv] or [B, Hq, Sq, Skv]",
                             shape_of(a, opt, m, head, sizeof head));
        const int64_t mk = m->shape[m->rank - 1];
        /* dense: the mask covers the Skv keys; paged: at least the longest sequence */
        int64_t need_kv = seq_kv;
        if (paged) {
            need_kv = 0;
            const int32_t *len = in->seqlens_kv.data;
            for (int64_t b = 0; b < B; b++)
                if (len[b] > need_kv) need_kv = len[b];
        }
        int ok = m->shape[m->rank - 2] == Sq && (paged ? mk >= need_kv : mk == need_kv);
        if (m->rank >= 3) ok = ok && m->shape[0] == B;
        if (m->rank == 4) ok = ok && m->shape[1] == Hq;
        if (!ok) {
            const char *forms[] = {"", "", "[Sq, Skv]", "[B, Sq, Skv]", "[B, Hq, Sq, Skv]"};
            int64_t want[4];
            int n = 0;
            if (m->rank == 4) want[n++] = B, want[n++] = Hq;
            if (m->rank == 3) want[n++] = B;
            want[n++] = Sq;
            want[n++] = need_kv;
            char expect[SHAPE_LEN];
            fai_npy_format_shape(expect, sizeof expect, n, want);
            return run_error("%s does not match %s = %s%s", shape_of(a, opt, m, head, sizeof head),
                             forms[m->rank], expect,
                             paged ? " (Skv: at least the longest --seqlens-kv)" : "");
        }
        const int64_t plane = Sq * mk; /* fits: the mask holds at least this many elements */
        mask.data = m->data;
        mask.stride_q = mk;
        mask.stride_head = m->rank == 4 ? plane : 0;
        mask.stride_batch = m->rank == 4 ? Hq * plane : m->rank == 3 ? plane : 0;
    }

    /* -- Step 4: plan -- */
    fai_problem pb;
    fai_problem_init(&pb);
    pb.batch = B;
    pb.heads_q = Hq;
    pb.heads_kv = Hkv;
    pb.seq_q = Sq;
    pb.seq_kv = seq_kv;
    pb.head_dim = D;
    pb.head_dim_v = Dv;
    pb.q_dtype = q_dt;
    pb.k_dtype = k_dt;
    pb.v_dtype = v_dt;
    pb.o_dtype = a->out_dtype;
    pb.scale = a->scale;
    pb.causal = a->causal;
    pb.window_left = a->window_left;
    pb.window_right = a->window_right;
    pb.mask_kind = a->mask_kind;
    pb.seqlens_q = a->value[OPT_SEQLENS_Q] ? in->seqlens_q.data : NULL;
    pb.seqlens_kv = a->value[OPT_SEQLENS_KV] ? in->seqlens_kv.data : NULL;
    pb.page_size = page_size;
    pb.num_pages = num_pages;
    pb.pages_per_seq = pages_per_seq;
    pb.threads = a->threads;
    pb.workers = a->workers;

    fai_plan *plan = NULL;
    const fai_status st = fai_plan_create(&pb, &plan);
    if (st != FAI_OK) {
        const char *why = fai_last_error();
        return run_error("%s", why && *why ? why : fai_status_string(st));
    }

    /* Pages that hold keys must be inside the pool (the library checks too; this names the
     * file and the entry). Runs after planning, which has validated the lengths. */
    if (paged) {
        const int32_t *bt = in->block_table.data;
        const int32_t *len = in->seqlens_kv.data;
        for (int64_t b = 0; b < B; b++) {
            const int64_t used = page_size > 0 ? ((int64_t)len[b] + page_size - 1) / page_size : 0;
            for (int64_t p = 0; p < used && p < pages_per_seq; p++) {
                const int32_t e = bt[b * pages_per_seq + p];
                if (e < 0 || e >= num_pages) {
                    fai_plan_free(plan);
                    return run_error("--block-table %s: entry [%lld, %lld] = %d is outside the "
                                     "pool of %lld pages",
                                     a->value[OPT_BLOCK_TABLE], (long long)b, (long long)p, (int)e,
                                     (long long)num_pages);
                }
            }
        }
    }

    /* -- Step 5: run -- */
    size_t o_count = 1, lse_count = 1;
    const int o_bad = mul_size(&o_count, B) || mul_size(&o_count, Sq) || mul_size(&o_count, Hq) ||
                      mul_size(&o_count, Dv) || o_count > SIZE_MAX / 4;
    const int l_bad = mul_size(&lse_count, B) || mul_size(&lse_count, Hq) ||
                      mul_size(&lse_count, Sq) || lse_count > SIZE_MAX / 4;
    if (o_bad || l_bad) {
        fai_plan_free(plan);
        return run_error("the output [%lld, %lld, %lld, %lld] is too large", (long long)B,
                         (long long)Sq, (long long)Hq, (long long)Dv);
    }
    const size_t o_esize = a->out_dtype == FAI_DTYPE_F32 ? 4 : 2;
    const int want_lse = a->value[OPT_LSE] != NULL;
    const size_t ws_size = fai_plan_workspace_size(plan);
    void *ws = alloc_buffer(ws_size);
    void *o = alloc_buffer(o_count * o_esize);
    float *lse = want_lse ? alloc_buffer(lse_count * sizeof(float)) : NULL;
    if (!ws || !o || (want_lse && !lse)) {
        free(ws);
        free(o);
        free(lse);
        fai_plan_free(plan);
        return run_error("out of memory (workspace %zu bytes, output %zu bytes)", ws_size,
                         o_count * o_esize);
    }

    fai_tensors t;
    memset(&t, 0, sizeof t);
    t.q = fai_tensor_bshd(in->q.data, q_dt, Sq, Hq, D);
    t.k = fai_tensor_bshd(in->k.data, k_dt, ks[1], Hkv, D);
    t.v = fai_tensor_bshd(in->v.data, v_dt, vs[1], Hkv, Dv);
    t.o = fai_tensor_bshd(o, a->out_dtype, Sq, Hq, Dv);
    if (want_lse) {
        t.lse.data = lse;
        t.lse.dtype = FAI_DTYPE_F32;
        t.lse.stride_batch = Hq * Sq;
        t.lse.stride_head = Sq;
        t.lse.stride_seq = 1;
    }
    t.mask = mask;
    t.block_table = paged ? in->block_table.data : NULL;
    t.block_table_stride = 0;

    const fai_status rs = fai_run(plan, &t, ws, ws_size);
    const char *run_why = fai_last_error();
    char run_msg[ERR_LEN];
    snprintf(run_msg, sizeof run_msg, "%s", run_why && *run_why ? run_why : fai_status_string(rs));
    fai_plan_free(plan);
    free(ws);
    if (rs != FAI_OK) {
        free(o);
        free(lse);
        return run_error("%s", run_msg);
    }

    /* -- Step 6: write both outputs to temporary files, then rename both into place -- */
    const fai_npy_dtype o_file_dt = a->out_dtype == FAI_DTYPE_F32   ? FAI_NPY_F32
                                    : a->out_dtype == FAI_DTYPE_F16 ? FAI_NPY_F16
                                                                    : FAI_NPY_U16;
    const int64_t o_shape[4] = {B, Sq, Hq, Dv};
    const int64_t lse_shape[3] = {B, Hq, Sq};
    char err[ERR_LEN];
    char o_tmp[4096], lse_tmp[4096];
    lse_tmp[0] = '\0';
    int rc = 0;
    if (fai_npy_write_temp(a->value[OPT_OUT], o_file_dt, 4, o_shape, o, o_tmp, sizeof o_tmp, err,
                           sizeof err)) {
        rc = run_error("--out %s", err);
    } else if (want_lse && fai_npy_write_temp(a->value[OPT_LSE], FAI_NPY_F32, 3, lse_shape, lse,
                                              lse_tmp, sizeof lse_tmp, err, sizeof err)) {
        fai_npy_discard(o_tmp);
        rc = run_error("--lse %s", err);
    } else if (fai_npy_commit(o_tmp, a->value[OPT_OUT], err, sizeof err)) {
        if (want_lse) fai_npy_discard(lse_tmp);
        rc = run_error("--out %s", err);
    } else if (want_lse && fai_npy_commit(lse_tmp, a->value[OPT_LSE], err, sizeof err)) {
        rc = run_error("--lse %s", err);
    }
    free(o);
    free(lse);
    return rc;
}

int fai_cmd_run(int argc, char **argv) {
    run_args a;
    const int prc = parse_args(argc, argv, &a);
    if (prc < 0) {
        print_run_usage(stdout);
        return 0;
    }
    if (prc) return prc;
    run_inputs in;
    memset(&in, 0, sizeof in);
    const int rc = run_with(&a, &in);
    free_inputs(&in);
    return rc;
}
