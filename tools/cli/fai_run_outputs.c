/* Outputs of `fai run` (and `fai-mpi run`): O and LSE allocated, written to temporary files and
 * renamed into place, both or neither; its options: fai_run_args.c. */
/* PATH_MAX */
#define _XOPEN_SOURCE 700
#include "fai_run_args.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

static int commit_one(ft_run_args *a, int opt, const char *tmp) {
    char err[FT_RUN_ERROR_LEN / 2];
    if (ft_npy_commit(tmp, a->value[opt], err, sizeof err))
        return ft_run_fail(a, "%s %s", ft_run_option_name(opt), err);
    return 0;
}

/* O is renamed into place, then LSE. Should the second rename still fail (check_files has ruled
 * out what it can foresee), O is put back as it was from a hard link kept of it. */
static int commit_both(ft_run_args *a, const char *o_tmp, const char *lse_tmp) {
    const char *out = a->value[FT_RUN_OPT_OUT];
    char kept[PATH_MAX], err[FT_RUN_ERROR_LEN / 2];
    const int kept_state = ft_npy_keep(out, kept, sizeof kept);
    if (commit_one(a, FT_RUN_OPT_OUT, o_tmp)) {
        ft_npy_discard(lse_tmp);
        ft_npy_discard(kept);
        return 2;
    }
    if (ft_npy_commit(lse_tmp, a->value[FT_RUN_OPT_LSE], err, sizeof err)) {
        const int undone = ft_npy_undo_commit(out, kept, kept_state) == 0;
        if (!undone) ft_npy_discard(kept);
        if (undone) return ft_run_fail(a, "--lse %s (--out left as it was)", err);
        return ft_run_fail(a, "--lse %s (--out %s was written all the same)", err, out);
    }
    ft_npy_discard(kept);
    return 0;
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
    return want_lse ? commit_both(a, o_tmp, lse_tmp) : commit_one(a, FT_RUN_OPT_OUT, o_tmp);
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
