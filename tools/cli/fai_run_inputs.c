/* The inputs of `fai run` (and `fai-mpi run`): the .npy files loaded and checked against Q's
 * shape, and the problem they describe (fai_run_args.h). */
#include "fai_run_args.h"
#include "fai_shape.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHAPE_LEN (FT_NPY_MAX_RANK * 22 + 8)

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
    ft_npy_free(&in->k_channel_scale);
    ft_npy_free(&in->v_scale);
}

static int load_input(ft_run_args *a, int opt, ft_npy *arr) {
    char err[FT_RUN_ERROR_LEN / 2];
    if (ft_npy_load(a->value[opt], arr, err, sizeof err))
        return ft_run_fail(a, "%s %s", ft_run_option_name(opt), err);
    return 0;
}

/* "--k K.npy: shape (2, 5, 3, 64)": the start of a message about an input's shape. */
static const char *shape_of(const ft_run_args *a, int opt, const ft_npy *arr, char *buf,
                            size_t len) {
    char shape[SHAPE_LEN];
    ft_npy_format_shape(shape, sizeof shape, arr->rank, arr->shape);
    snprintf(buf, len, "%s %s: shape %s", ft_run_option_name(opt), a->value[opt], shape);
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
                           ft_run_option_name(opt), a->value[opt], ft_run_option_name(code_opt),
                           code, ft_npy_dtype_name(arr->dtype));
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
                           ft_run_option_name(opt), a->value[opt]);
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
                           ft_run_option_name(opt), a->value[opt], ft_run_option_name(code_opt),
                           ft_run_option_name(code_opt));
    default:
        break;
    }
    return ft_run_fail(a, "%s %s: dtype %s is not float32 or float16%s%s%s%s",
                       ft_run_option_name(opt), a->value[opt], ft_npy_dtype_name(arr->dtype),
                       a->value[FT_RUN_OPT_BF16] ? " (or uint16 bfloat16 bits)" : "",
                       kv ? " (or int8 codes, or uint8 fp8 codes with " : "",
                       kv ? ft_run_option_name(code_opt) : "", kv ? ")" : "");
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
        return ft_run_fail(a, "%s %s: dtype %s is not int32", ft_run_option_name(opt),
                           a->value[opt], ft_npy_dtype_name(arr->dtype));
    if (arr->rank != 1 || arr->shape[0] != batch)
        return ft_run_fail(a, "%s does not match q's batch %lld (expected (%lld,))",
                           shape_of(a, opt, arr, head, sizeof head), (long long)batch,
                           (long long)batch);
    return 0;
}

/* Every length of an int32 [B] array in 0..limit, `limit` told as `what` ("q's seq_q 4"). The
 * library checks them too; this names the option, the file and the entry before planning. */
static int check_length_values(ft_run_args *a, int opt, const ft_npy *arr, int64_t limit,
                               const char *what) {
    const int32_t *len = arr->data;
    for (int64_t b = 0; b < arr->shape[0]; b++) {
        if (len[b] < 0)
            return ft_run_fail(a, "%s %s: entry [%lld] = %d is negative", ft_run_option_name(opt),
                               a->value[opt], (long long)b, (int)len[b]);
        if (len[b] > limit)
            return ft_run_fail(a, "%s %s: entry [%lld] = %d is above %s", ft_run_option_name(opt),
                               a->value[opt], (long long)b, (int)len[b], what);
    }
    return 0;
}

/* A size of the page pool or the block table that the library takes: at most INT32_MAX, as the
 * lengths it bounds are int32. */
static int check_page_count(ft_run_args *a, int opt, const ft_npy *arr, const char *name,
                            int64_t value) {
    if (value <= INT32_MAX) return 0;
    char head[FT_RUN_ERROR_LEN / 2];
    return ft_run_fail(a, "%s: %s %lld is above %d (lengths are int32)",
                       shape_of(a, opt, arr, head, sizeof head), name, (long long)value, INT32_MAX);
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

/* The block table, for paged K and V: *seq_kv gets the keys it holds per sequence. */
static int load_block_table(ft_run_args *a, ft_run_inputs *in, ft_run_problem *p, int64_t *seq_kv) {
    char head[FT_RUN_ERROR_LEN / 2];
    if (load_input(a, FT_RUN_OPT_BLOCK_TABLE, &in->block_table)) return 2;
    const ft_npy *bt = &in->block_table;
    if (bt->dtype != FT_NPY_I32)
        return ft_run_fail(a, "--block-table %s: dtype %s is not int32",
                           a->value[FT_RUN_OPT_BLOCK_TABLE], ft_npy_dtype_name(bt->dtype));
    if (bt->rank != 2 || bt->shape[0] != p->batch)
        return ft_run_fail(a, "%s is not [B, max_pages] with q's batch %lld",
                           shape_of(a, FT_RUN_OPT_BLOCK_TABLE, bt, head, sizeof head),
                           (long long)p->batch);
    fai_problem *pb = &p->problem;
    pb->num_pages = in->k.shape[0];
    pb->page_size = in->k.shape[1];
    pb->pages_per_seq = bt->shape[1];
    if (pb->page_size == 0)
        return ft_run_fail(a, "%s: page_size 0: a page pool holds at least one key per page",
                           shape_of(a, FT_RUN_OPT_K, &in->k, head, sizeof head));
    if (check_page_count(a, FT_RUN_OPT_K, &in->k, "num_pages", pb->num_pages) ||
        check_page_count(a, FT_RUN_OPT_K, &in->k, "page_size", pb->page_size) ||
        check_page_count(a, FT_RUN_OPT_BLOCK_TABLE, bt, "pages_per_seq", pb->pages_per_seq))
        return 2;
    *seq_kv = pb->pages_per_seq * pb->page_size; /* both below 2^31 */
    return 0;
}

static int load_lengths(ft_run_args *a, ft_run_inputs *in, ft_run_problem *p, int64_t *seq_kv) {
    char what[192];
    const int64_t B = p->batch;
    *seq_kv = p->paged ? 0 : p->k_rows;
    if (a->value[FT_RUN_OPT_SEQLENS_Q]) {
        snprintf(what, sizeof what, "q's seq_q %lld", (long long)p->seq_q);
        if (load_input(a, FT_RUN_OPT_SEQLENS_Q, &in->seqlens_q) ||
            check_lengths(a, FT_RUN_OPT_SEQLENS_Q, &in->seqlens_q, B) ||
            check_length_values(a, FT_RUN_OPT_SEQLENS_Q, &in->seqlens_q, p->seq_q, what))
            return 2;
    }
    if (a->value[FT_RUN_OPT_SEQLENS_KV] &&
        (load_input(a, FT_RUN_OPT_SEQLENS_KV, &in->seqlens_kv) ||
         check_lengths(a, FT_RUN_OPT_SEQLENS_KV, &in->seqlens_kv, B)))
        return 2;
    if (p->paged && load_block_table(a, in, p, seq_kv)) return 2;
    if (!a->value[FT_RUN_OPT_SEQLENS_KV]) return 0;
    if (p->paged)
        snprintf(what, sizeof what,
                 "the %lld keys a sequence's pages hold (block table's "
                 "pages_per_seq %lld x k's page_size %lld)",
                 (long long)*seq_kv, (long long)p->problem.pages_per_seq,
                 (long long)p->problem.page_size);
    else
        snprintf(what, sizeof what, "k's seq_kv %lld", (long long)*seq_kv);
    return check_length_values(a, FT_RUN_OPT_SEQLENS_KV, &in->seqlens_kv, *seq_kv, what);
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
                           ft_run_option_name(kv_opt), a->value[kv_opt], fai_dtype_name(dtype),
                           ft_run_option_name(opt), forms);
    }
    if (!quantized)
        return ft_run_fail(a,
                           "%s %s given, but %s %s holds %s values: scales belong to int8, e4m3 "
                           "and e5m2 codes",
                           ft_run_option_name(opt), a->value[opt], ft_run_option_name(kv_opt),
                           a->value[kv_opt], fai_dtype_name(dtype));
    if (load_input(a, opt, arr)) return 2;
    if (arr->dtype != FT_NPY_F32)
        return ft_run_fail(a, "%s %s: dtype %s is not float32", ft_run_option_name(opt),
                           a->value[opt], ft_npy_dtype_name(arr->dtype));
    const int64_t *s = arr->shape, *k = kv->shape;
    if (arr->rank == 3 && s[0] == k[0] && s[1] == k[1] && s[2] == k[2]) {
        out->stride_batch = k[1] * k[2], out->stride_seq = k[2], out->stride_head = 1;
    } else if (arr->rank == 1 && s[0] == k[2]) {
        out->stride_head = 1;
    } else if (!(arr->rank == 0 || (arr->rank == 1 && s[0] == 1))) {
        return ft_run_fail(a, "%s does not match %s: expected %s",
                           shape_of(a, opt, arr, head, sizeof head), ft_run_option_name(kv_opt),
                           forms);
    }
    out->data = arr->data;
    return 0;
}

/* --k-channel-scale: float32 [Hkv, D] or [D], only with a quantized K. */
static int load_channel_scale(ft_run_args *a, ft_run_inputs *in, ft_run_problem *p) {
    const int opt = FT_RUN_OPT_K_CHANNEL_SCALE;
    char head[FT_RUN_ERROR_LEN / 2];
    memset(&p->k_channel_scale, 0, sizeof p->k_channel_scale);
    if (!a->value[opt]) return 0;
    if (!fai_dtype_is_quantized(p->k_dtype))
        return ft_run_fail(a,
                           "%s %s given, but %s %s holds %s values: channel scales belong to "
                           "int8, e4m3 and e5m2 codes",
                           ft_run_option_name(opt), a->value[opt], ft_run_option_name(FT_RUN_OPT_K),
                           a->value[FT_RUN_OPT_K], fai_dtype_name(p->k_dtype));
    if (load_input(a, opt, &in->k_channel_scale)) return 2;
    const ft_npy *arr = &in->k_channel_scale;
    if (arr->dtype != FT_NPY_F32)
        return ft_run_fail(a, "%s %s: dtype %s is not float32", ft_run_option_name(opt),
                           a->value[opt], ft_npy_dtype_name(arr->dtype));
    if (arr->rank == 2 && arr->shape[0] == p->heads_kv && arr->shape[1] == p->head_dim)
        p->k_channel_scale.stride_head = p->head_dim;
    else if (!(arr->rank == 1 && arr->shape[0] == p->head_dim))
        return ft_run_fail(a,
                           "%s does not match %s: expected (%lld, %lld) (kv heads, channels) "
                           "or (%lld,) (the same for every kv head)",
                           shape_of(a, opt, arr, head, sizeof head),
                           ft_run_option_name(FT_RUN_OPT_K), (long long)p->heads_kv,
                           (long long)p->head_dim, (long long)p->head_dim);
    p->k_channel_scale.data = arr->data;
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
        return ft_run_fail(a, "%s %s: dtype %s is not %s", ft_run_option_name(opt), a->value[opt],
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
    if (bits) need_kv = need_kv / 8 + (need_kv % 8 != 0); /* bytes of 8 keys, Skv up to INT64_MAX */
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
        return ft_run_fail(a, "%s %s: dtype %s is not float32", ft_run_option_name(opt),
                           a->value[opt], ft_npy_dtype_name(arr->dtype));
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
    pb->k_channel_scales = p->k_channel_scale.data != NULL;
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
                   &p->v_scale) ||
        load_channel_scale(a, in, p))
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
