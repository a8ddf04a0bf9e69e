/* fai-mpi run: `fai run` across the ranks of MPI_COMM_WORLD.
 *
 * Every rank parses the same options and reads the same files, checks them exactly as `fai run`
 * does (planning the whole problem names any bad field), then keeps only its shard: the keys of
 * a contiguous range of Skv, or of each sequence's pages, with Q whole (fai_mpi_attention,
 * merged on rank 0); or with --ring its zig-zag chunks of Q, K and V (fai_mpi_ring_attention,
 * each rank's rows gathered on rank 0). Rank 0 writes O and LSE, all or nothing. The ranks agree
 * on every failure, so every rank exits with the same status and rank 0 prints the one line. */
#include "fai_mpi_tool.h"
#include "fai_shape.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_usage(FILE *out) {
    fprintf(out,
            "usage: mpirun -np R fai-mpi run --q Q.npy --k K.npy --v V.npy --out O.npy [options]\n"
            "\n"
            "`fai run` (see fai run --help for the options and the files) with the attention\n"
            "spread over the ranks; every rank reads the same files and keeps its shard:\n"
            "  without --ring  K/V by contiguous ranges of Skv (dense) or of each sequence's\n"
            "                  pages (--block-table), mask columns with them; Q whole\n"
            "  --ring          ring attention: Q, K and V in zig-zag chunks (chunks r and\n"
            "                  2R-1-r of 2R on rank r); needs Sq = Skv and takes no --mask*,\n"
            "                  --seqlens-* or --block-table\n"
            "Rank 0 writes O and LSE. Exit status: 0 on success; 2 on bad input on any rank,\n"
            "with one line on rank 0's stderr and no output file created or changed.\n");
}

int ft_mpi_tool_agree(int rc, ft_run_args *a) {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int code = rc ? size - rank : 0; /* the largest is the first failing rank's */
    MPI_Allreduce(MPI_IN_PLACE, &code, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (!code) return 0;
    MPI_Bcast(a->error, (int)sizeof a->error, MPI_CHAR, size - code, MPI_COMM_WORLD);
    return 2;
}

/* What `fai run` would refuse, refused alike: planning the whole problem names the field. */
static int check_whole(ft_run_args *a, ft_run_inputs *in, ft_run_problem *p) {
    fai_plan *plan = NULL;
    const int rc = ft_run_plan(a, in, p, &plan);
    fai_plan_free(plan);
    return rc;
}

static int check_ring(ft_run_args *a, const ft_run_problem *p) {
    if (p->paged)
        return ft_run_fail(a,
                           "--ring with --block-table %s: ring attention shards dense K/V "
                           "(paged K/V are sharded by pages without --ring)",
                           a->value[FT_RUN_OPT_BLOCK_TABLE]);
    if (a->mask_opt >= 0)
        return ft_run_fail(a,
                           "--ring with %s %s: ring attention takes no explicit mask (without "
                           "--ring the mask columns are sharded with the keys)",
                           ft_run_option_name(a->mask_opt), a->value[a->mask_opt]);
    const int lens = a->value[FT_RUN_OPT_SEQLENS_Q]    ? FT_RUN_OPT_SEQLENS_Q
                     : a->value[FT_RUN_OPT_SEQLENS_KV] ? FT_RUN_OPT_SEQLENS_KV
                                                       : -1;
    if (lens >= 0)
        return ft_run_fail(a, "--ring with %s %s: ring attention takes whole sequences",
                           ft_run_option_name(lens), a->value[lens]);
    if (p->seq_q != p->k_rows)
        return ft_run_fail(a,
                           "--ring: q has Sq = %lld and k has Skv = %lld; ring attention is "
                           "self-attention (Sq = Skv)",
                           (long long)p->seq_q, (long long)p->k_rows);
    return 0;
}

/* -- K/V sharded, Q whole ------------------------------------------------------------------------
 */

static int run_kv_sharded(ft_run_args *a, ft_run_inputs *in, const ft_run_problem *p, int rank,
                          int size) {
    ft_mpi_kv_shard s;
    void *o = NULL;
    float *lse = NULL;
    int rc = ft_mpi_kv_shard_make(a, in, p, rank, size, &s);
    if (!rc && rank == 0)
        rc = ft_run_alloc_outputs(a, p, a->value[FT_RUN_OPT_LSE] != NULL, &o, &lse);
    rc = ft_mpi_tool_agree(rc, a);
    if (!rc) {
        s.tensors.o = fai_tensor_bshd(o, a->out_dtype, p->seq_q, p->heads_q, p->head_dim_v);
        s.tensors.alibi_slopes = p->alibi_slopes;
        s.tensors.sinks = p->sinks;
        s.tensors.k_channel_scale = p->k_channel_scale;
        if (a->value[FT_RUN_OPT_LSE]) s.tensors.lse = ft_run_lse_tensor(lse, p->heads_q, p->seq_q);
        /* the queries are placed by the library, as fai run places them, from the agreed length */
        if (fai_mpi_attention(MPI_COMM_WORLD, &s.problem, s.kv_start, NULL, &s.tensors, 0, NULL) !=
            FAI_OK)
            rc = ft_run_fail(a, "%s", fai_mpi_last_error());
    }
    if (!rc && rank == 0) rc = ft_run_write_outputs(a, p, o, lse);
    ft_mpi_kv_shard_free(&s);
    free(o);
    free(lse);
    return rc;
}

/* -- ring ----------------------------------------------------------------------------------------
 */

/* The rank's rows (its two chunks) of a [B, S, H, dim] array, as [B, rows, H, dim]. */
static void *take_chunks(const ft_npy *whole, const fai_mpi_zigzag *z, size_t row_bytes) {
    const int64_t batch = whole->shape[0], seq = whole->shape[1];
    char *out = ft_run_alloc((size_t)(batch * z->rows) * row_bytes);
    if (!out) return NULL;
    for (int64_t b = 0; b < batch; b++)
        for (int k = 0, at = 0; k < 2; at += (int)z->len[k], k++)
            memcpy(out + (size_t)(b * z->rows + at) * row_bytes,
                   (const char *)whole->data + (size_t)(b * seq + z->start[k]) * row_bytes,
                   (size_t)z->len[k] * row_bytes);
    return out;
}

/* Rank r's rows of O ([B, rows_r, Hq, Dv] in `part`) and LSE ([B, Hq, rows_r]) into the whole. */
static void place_rows(const ft_run_problem *p, const fai_mpi_zigzag *z, const char *o_part,
                       const float *lse_part, size_t o_row, char *o, float *lse) {
    const int64_t B = p->batch, S = p->seq_q, Hq = p->heads_q;
    for (int64_t b = 0; b < B; b++)
        for (int k = 0, at = 0; k < 2; at += (int)z->len[k], k++) {
            memcpy(o + (size_t)(b * S + z->start[k]) * o_row,
                   o_part + (size_t)(b * z->rows + at) * o_row, (size_t)z->len[k] * o_row);
            for (int64_t h = 0; h < Hq; h++)
                memcpy(lse + (b * Hq + h) * S + z->start[k], lse_part + (b * Hq + h) * z->rows + at,
                       sizeof(float) * (size_t)z->len[k]);
        }
}

/* Collective: every rank's rows of O and LSE to rank 0, placed in o and lse there. */
static int gather_rows(ft_run_args *a, const ft_run_problem *p, const void *o_local,
                       const float *lse_local, int rank, int size, void *o, float *lse) {
    const int64_t S = p->seq_q, B = p->batch, Hq = p->heads_q;
    const size_t o_row = (size_t)(Hq * p->head_dim_v) * fai_dtype_size(a->out_dtype);
    if (B * S > INT_MAX || B * Hq * S > INT_MAX)
        return ft_run_fail(a, "--ring: %lld rows are more than one gather can take",
                           (long long)(B * S));
    int *counts = calloc((size_t)size * 4, sizeof(int));
    char *o_all = rank == 0 ? ft_run_alloc((size_t)(B * S) * o_row) : NULL;
    float *lse_all = rank == 0 ? ft_run_alloc(sizeof(float) * (size_t)(B * Hq * S)) : NULL;
    int rc = !counts || (rank == 0 && (!o_all || !lse_all))
                 ? ft_run_fail(a, "out of memory (gathering the rows of O)")
                 : 0;
    rc = ft_mpi_tool_agree(rc, a);
    if (!rc) {
        int *displs = counts + size, *lse_counts = counts + 2 * size;
        int *lse_displs = counts + 3 * size;
        fai_mpi_zigzag z;
        for (int r = 0, row = 0; r < size; row += counts[r], r++) {
            fai_mpi_zigzag_layout(S, size, r, &z);
            counts[r] = (int)(B * z.rows), displs[r] = row;
            lse_counts[r] = (int)(B * Hq * z.rows), lse_displs[r] = (int)(row * Hq);
        }
        MPI_Datatype row_type;
        MPI_Type_contiguous((int)o_row, MPI_BYTE, &row_type);
        MPI_Type_commit(&row_type);
        MPI_Gatherv(o_local, counts[rank], row_type, o_all, counts, displs, row_type, 0,
                    MPI_COMM_WORLD);
        MPI_Type_free(&row_type);
        MPI_Gatherv(lse_local, lse_counts[rank], MPI_FLOAT, lse_all, lse_counts, lse_displs,
                    MPI_FLOAT, 0, MPI_COMM_WORLD);
        for (int r = 0; rank == 0 && r < size; r++) {
            fai_mpi_zigzag_layout(S, size, r, &z);
            place_rows(p, &z, o_all + (size_t)displs[r] * o_row, lse_all + lse_displs[r], o_row, o,
                       lse);
        }
    }
    free(counts);
    free(o_all);
    free(lse_all);
    return rc;
}

static int run_ring(ft_run_args *a, ft_run_inputs *in, const ft_run_problem *p, int rank,
                    int size) {
    fai_mpi_zigzag z;
    int rc = 0;
    if (fai_mpi_zigzag_layout(p->seq_q, size, rank, &z) != FAI_OK)
        rc = ft_run_fail(a, "--ring: %s", fai_mpi_last_error());
    const size_t q_row = (size_t)(p->heads_q * p->head_dim) * fai_dtype_size(p->q_dtype);
    const size_t k_row = (size_t)(p->heads_kv * p->head_dim) * fai_dtype_size(p->k_dtype);
    const size_t v_row = (size_t)(p->heads_kv * p->head_dim_v) * fai_dtype_size(p->v_dtype);
    const size_t o_row = (size_t)(p->heads_q * p->head_dim_v) * fai_dtype_size(a->out_dtype);
    void *q = NULL, *k = NULL, *v = NULL, *o_local = NULL, *o = NULL;
    float *lse_local = NULL, *lse = NULL;
    /* the scales of a quantized K and V: per token, the rank's rows like K's; else shared */
    fai_scale scales[2] = {p->k_scale, p->v_scale};
    const ft_npy *scale_files[2] = {&in->k_scale, &in->v_scale};
    void *own_scales[2] = {NULL, NULL};
    if (!rc) {
        q = take_chunks(&in->q, &z, q_row);
        k = take_chunks(&in->k, &z, k_row);
        v = take_chunks(&in->v, &z, v_row);
        o_local = ft_run_alloc((size_t)(p->batch * z.rows) * o_row);
        lse_local = ft_run_alloc(sizeof(float) * (size_t)(p->batch * p->heads_q * z.rows));
        int scales_ok = 1;
        for (int i = 0; i < 2; i++) {
            if (!scales[i].data || !scales[i].stride_seq) continue;
            own_scales[i] = take_chunks(scale_files[i], &z, sizeof(float) * (size_t)p->heads_kv);
            scales_ok = scales_ok && own_scales[i];
            scales[i].data = own_scales[i];
            scales[i].stride_batch = z.rows * p->heads_kv;
        }
        if (!q || !k || !v || !o_local || !lse_local || !scales_ok)
            rc = ft_run_fail(a, "out of memory (this rank's %lld rows)", (long long)z.rows);
    }
    ft_npy_free(&in->q); /* the rank keeps its chunks only */
    ft_npy_free(&in->k);
    ft_npy_free(&in->v);
    if (!rc && rank == 0) rc = ft_run_alloc_outputs(a, p, 1, &o, &lse);
    rc = ft_mpi_tool_agree(rc, a);
    if (!rc) {
        fai_problem local = p->problem;
        local.seq_q = local.seq_kv = z.rows;
        fai_tensors t;
        memset(&t, 0, sizeof t);
        t.q = fai_tensor_bshd(q, p->q_dtype, z.rows, p->heads_q, p->head_dim);
        t.k = fai_tensor_bshd(k, p->k_dtype, z.rows, p->heads_kv, p->head_dim);
        t.v = fai_tensor_bshd(v, p->v_dtype, z.rows, p->heads_kv, p->head_dim_v);
        t.o = fai_tensor_bshd(o_local, a->out_dtype, z.rows, p->heads_q, p->head_dim_v);
        t.lse = ft_run_lse_tensor(lse_local, p->heads_q, z.rows);
        t.alibi_slopes = p->alibi_slopes;
        t.sinks = p->sinks;
        t.k_scale = scales[0];
        t.v_scale = scales[1];
        t.k_channel_scale = p->k_channel_scale;
        if (fai_mpi_ring_attention(MPI_COMM_WORLD, &local, p->seq_q, &t, NULL) != FAI_OK)
            rc = ft_run_fail(a, "%s", fai_mpi_last_error());
    }
    if (!rc) rc = gather_rows(a, p, o_local, lse_local, rank, size, o, lse);
    if (!rc && rank == 0) rc = ft_run_write_outputs(a, p, o, lse);
    free(q), free(k), free(v), free(o_local), free(lse_local), free(o), free(lse);
    free(own_scales[0]), free(own_scales[1]);
    return rc;
}

int ft_mpi_cmd_run(int argc, char **argv) {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ft_run_args a;
    int rc = ft_run_parse_args(argc, argv, "fai-mpi run", 1, &a);
    if (rc < 0) {
        if (rank == 0) print_usage(stdout);
        return 0;
    }
    ft_run_inputs in;
    memset(&in, 0, sizeof in);
    ft_run_problem p;
    memset(&p, 0, sizeof p);
    if (!rc) rc = ft_run_load(&a, &in, &p);
    if (!rc) rc = check_whole(&a, &in, &p);
    if (!rc && a.value[FT_RUN_OPT_RING]) rc = check_ring(&a, &p);
    rc = ft_mpi_tool_agree(rc, &a);
    if (!rc)
        rc = a.value[FT_RUN_OPT_RING] ? run_ring(&a, &in, &p, rank, size)
                                      : run_kv_sharded(&a, &in, &p, rank, size);
    /* writing the files can fail on rank 0 alone: every rank exits with its status */
    rc = ft_mpi_tool_agree(rc, &a);
    ft_run_free_inputs(&in);
    if (rc && rank == 0) fprintf(stderr, "fai-mpi run: %s\n", a.error);
    return rc;
}
