/* A rank's shard of the keys of a `fai run` problem: contiguous ranges of Skv when K/V are dense,
 * of each sequence's pages when they are paged (the rank's pool then holds only the pages its
 * table refers to), and the mask columns of those keys. */
#include "fai_mpi_tool.h"
#include "fai_shape.h"

#include <stdlib.h>
#include <string.h>

static int out_of_memory(ft_run_args *a, size_t bytes) {
    return ft_run_fail(a, "out of memory (a shard buffer of %zu bytes)", bytes);
}

/* The scales of a quantized K and V as the shard's tensors take them: shared with the whole
 * when they are per kv head or per tensor; per token (stride_seq set), a buffer of `rows` rows of
 * Hkv scales to fill, the shard's scales then laid out as [rows / rows_per_block,
 * rows_per_block, Hkv]. Returns 0, or 2 when out of memory. */
static int shard_scales(ft_run_args *a, const ft_run_problem *p, ft_mpi_kv_shard *s, int64_t rows,
                        int64_t rows_per_block) {
    const fai_scale *whole[2] = {&p->k_scale, &p->v_scale};
    fai_scale *dst[2] = {&s->tensors.k_scale, &s->tensors.v_scale};
    float **own[2] = {&s->k_scale, &s->v_scale};
    for (int i = 0; i < 2; i++) {
        *dst[i] = *whole[i];
        if (!whole[i]->data || !whole[i]->stride_seq) continue;
        const size_t bytes = sizeof(float) * (size_t)(rows * p->heads_kv);
        *own[i] = ft_run_alloc(bytes);
        if (!*own[i]) return out_of_memory(a, bytes);
        dst[i]->data = *own[i];
        dst[i]->stride_batch = rows_per_block * p->heads_kv;
        dst[i]->stride_seq = p->heads_kv;
        dst[i]->stride_head = 1;
    }
    return 0;
}

/* Copies `rows` rows of Hkv per-token scales from row `from` of the whole to row `to` of the
 * shard, for K and V (those that have per-token scales). */
static void copy_scale_rows(const ft_run_problem *p, ft_mpi_kv_shard *s, int64_t from, int64_t to,
                            int64_t rows) {
    const fai_scale *whole[2] = {&p->k_scale, &p->v_scale};
    float *own[2] = {s->k_scale, s->v_scale};
    const size_t row = (size_t)p->heads_kv;
    for (int i = 0; i < 2; i++)
        if (own[i])
            memcpy(own[i] + (size_t)to * row, whole[i]->data + (size_t)from * row,
                   sizeof(float) * (size_t)rows * row);
}

/* Keys [start, start + len) of Skv on every sequence; lengths clipped to the range. */
static int shard_dense(ft_run_args *a, const ft_run_inputs *in, const ft_run_problem *p, int rank,
                       int ranks, ft_mpi_kv_shard *s, int64_t *lens) {
    int64_t start = 0, len = 0;
    fai_mpi_split_range(p->k_rows, ranks, rank, &start, &len);
    const int32_t *whole = p->problem.seqlens_kv;
    for (int64_t b = 0; b < p->batch; b++) {
        const int64_t rest = (whole ? whole[b] : p->k_rows) - start;
        s->kv_start[b] = (int32_t)start;
        lens[b] = rest < 0 ? 0 : rest < len ? rest : len;
        s->seqlens_kv[b] = (int32_t)lens[b];
    }
    const size_t k_row = (size_t)(p->heads_kv * p->head_dim) * fai_dtype_size(p->k_dtype);
    const size_t v_row = (size_t)(p->heads_kv * p->head_dim_v) * fai_dtype_size(p->v_dtype);
    const size_t rows = (size_t)(p->batch * len);
    s->k = ft_run_alloc(rows * k_row);
    s->v = ft_run_alloc(rows * v_row);
    if (!s->k || !s->v) return out_of_memory(a, rows * (k_row + v_row));
    if (shard_scales(a, p, s, (int64_t)rows, len)) return 2;
    for (int64_t b = 0; b < p->batch; b++) {
        const size_t from = (size_t)(b * p->k_rows + start), to = (size_t)(b * len);
        memcpy((char *)s->k + to * k_row, (const char *)in->k.data + from * k_row,
               (size_t)len * k_row);
        memcpy((char *)s->v + to * v_row, (const char *)in->v.data + from * v_row,
               (size_t)len * v_row);
        copy_scale_rows(p, s, (int64_t)from, (int64_t)to, len);
    }
    s->problem.seq_kv = len;
    s->problem.seqlens_kv = whole ? s->seqlens_kv : NULL;
    s->tensors.k = fai_tensor_bshd(s->k, p->k_dtype, len, p->heads_kv, p->head_dim);
    s->tensors.v = fai_tensor_bshd(s->v, p->v_dtype, len, p->heads_kv, p->head_dim_v);
    return 0;
}

/* Pages [first, first + count) of each sequence's used pages; the pool keeps the pages referred
 * to, in order of first use, and the table is rewritten onto them. */
static int shard_paged(ft_run_args *a, const ft_run_inputs *in, const ft_run_problem *p, int rank,
                       int ranks, ft_mpi_kv_shard *s, int64_t *lens) {
    const fai_problem *whole = &p->problem;
    const int64_t ps = whole->page_size, pps = whole->pages_per_seq, B = p->batch;
    const int32_t *table = in->block_table.data;
    int64_t *first = calloc((size_t)(B ? B : 1), sizeof *first);
    int64_t *count = calloc((size_t)(B ? B : 1), sizeof *count);
    int32_t *local_of = malloc(sizeof(int32_t) * (size_t)(whole->num_pages ? whole->num_pages : 1));
    if (!first || !count || !local_of) {
        free(first), free(count), free(local_of);
        return out_of_memory(a, sizeof(int32_t) * (size_t)whole->num_pages);
    }
    int64_t width = 1;
    for (int64_t b = 0; b < B; b++) {
        const int64_t length = whole->seqlens_kv[b];
        const int64_t used = ps > 0 ? (length + ps - 1) / ps : 0;
        fai_mpi_split_range(used, ranks, rank, &first[b], &count[b]);
        const int64_t rest = length - first[b] * ps;
        s->kv_start[b] = (int32_t)(first[b] * ps);
        lens[b] = rest < 0 ? 0 : rest < count[b] * ps ? rest : count[b] * ps;
        s->seqlens_kv[b] = (int32_t)lens[b];
        if (count[b] > width) width = count[b];
    }
    for (int64_t g = 0; g < whole->num_pages; g++)
        local_of[g] = -1;
    s->table = calloc((size_t)(B * width + 1), sizeof(int32_t));
    int32_t pages = 0;
    for (int64_t b = 0; s->table && b < B; b++)
        for (int64_t i = 0; i < count[b]; i++) {
            const int32_t g = table[b * pps + first[b] + i];
            if (local_of[g] < 0) local_of[g] = pages++;
            s->table[b * width + i] = local_of[g];
        }
    const size_t k_page = (size_t)(ps * p->heads_kv * p->head_dim) * fai_dtype_size(p->k_dtype);
    const size_t v_page = (size_t)(ps * p->heads_kv * p->head_dim_v) * fai_dtype_size(p->v_dtype);
    s->k = ft_run_alloc((size_t)pages * k_page);
    s->v = ft_run_alloc((size_t)pages * v_page);
    int rc = 0;
    if (!s->table || !s->k || !s->v) {
        rc = out_of_memory(a, (size_t)pages * (k_page + v_page));
    } else if (!(rc = shard_scales(a, p, s, pages * ps, ps))) {
        for (int64_t g = 0; g < whole->num_pages; g++) {
            if (local_of[g] < 0) continue;
            memcpy((char *)s->k + (size_t)local_of[g] * k_page,
                   (const char *)in->k.data + (size_t)g * k_page, k_page);
            memcpy((char *)s->v + (size_t)local_of[g] * v_page,
                   (const char *)in->v.data + (size_t)g * v_page, v_page);
            copy_scale_rows(p, s, g * ps, local_of[g] * ps, ps);
        }
    }
    free(first), free(count), free(local_of);
    s->problem.num_pages = pages;
    s->problem.pages_per_seq = width;
    s->problem.seqlens_kv = s->seqlens_kv;
    s->tensors.k = fai_tensor_bshd(s->k, p->k_dtype, ps, p->heads_kv, p->head_dim);
    s->tensors.v = fai_tensor_bshd(s->v, p->v_dtype, ps, p->heads_kv, p->head_dim_v);
    s->tensors.block_table = s->table;
    return rc;
}

/* The bits of keys [from, from + count) of a bit-mask row, moved to start at bit 0 of dst. */
static void copy_bits(unsigned char *dst, const unsigned char *src, int64_t from, int64_t count) {
    for (int64_t j = 0; j < count; j++)
        if ((src[(from + j) / 8] >> ((from + j) % 8)) & 1)
            dst[j / 8] = (unsigned char)(dst[j / 8] | (1u << (j % 8)));
}

/* The mask columns of the shard's keys, per sequence (shards start at different keys in
 * different sequences when paged): [B, Hm, Sq, widest shard], Hm = Hq for a per-head mask; a
 * bit mask keeps its rows of whole bytes, the shard's first key at bit 0. */
static int shard_mask(ft_run_args *a, const ft_run_problem *p, ft_mpi_kv_shard *s,
                      const int64_t *lens) {
    const int bits = p->problem.mask_kind == FAI_MASK_KEEP_BITS;
    const size_t es = p->problem.mask_kind == FAI_MASK_ADD ? 4 : 1;
    const int64_t heads = p->mask.stride_head ? p->heads_q : 1, Sq = p->seq_q;
    int64_t widest = 1;
    for (int64_t b = 0; b < p->batch; b++)
        if (lens[b] > widest) widest = lens[b];
    if (bits) widest = (widest + 7) / 8;
    const size_t bytes = (size_t)(p->batch * heads * Sq * widest) * es;
    s->mask = ft_run_alloc(bytes);
    if (!s->mask) return out_of_memory(a, bytes);
    const char *whole = p->mask.data;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < Sq; i++) {
                const int64_t row =
                    b * p->mask.stride_batch + h * p->mask.stride_head + i * p->mask.stride_q;
                const int64_t from = row + s->kv_start[b];
                if (bits) {
                    copy_bits((unsigned char *)s->mask +
                                  (size_t)(((b * heads + h) * Sq + i) * widest),
                              (const unsigned char *)whole + row, s->kv_start[b], lens[b]);
                    continue;
                }
                memcpy((char *)s->mask + (size_t)(((b * heads + h) * Sq + i) * widest) * es,
                       whole + (size_t)from * es, (size_t)lens[b] * es);
            }
    s->tensors.mask.data = s->mask;
    s->tensors.mask.stride_q = widest;
    s->tensors.mask.stride_head = heads > 1 ? Sq * widest : 0;
    s->tensors.mask.stride_batch = heads * Sq * widest;
    return 0;
}

int ft_mpi_kv_shard_make(ft_run_args *a, ft_run_inputs *in, const ft_run_problem *p, int rank,
                         int ranks, ft_mpi_kv_shard *s) {
    memset(s, 0, sizeof *s);
    s->problem = p->problem;
    const size_t batch = (size_t)(p->batch ? p->batch : 1);
    s->kv_start = calloc(batch, sizeof(int32_t));
    s->seqlens_kv = calloc(batch, sizeof(int32_t));
    int64_t *lens = calloc(batch, sizeof(int64_t));
    int rc = !s->kv_start || !s->seqlens_kv || !lens ? out_of_memory(a, batch * 16) : 0;
    if (!rc)
        rc = p->paged ? shard_paged(a, in, p, rank, ranks, s, lens)
                      : shard_dense(a, in, p, rank, ranks, s, lens);
    if (!rc && p->problem.mask_kind != FAI_MASK_NONE) rc = shard_mask(a, p, s, lens);
    free(lens);
    s->tensors.q = fai_tensor_bshd(in->q.data, p->q_dtype, p->seq_q, p->heads_q, p->head_dim);
    /* the rank keeps its shard only */
    ft_npy_free(&in->k);
    ft_npy_free(&in->v);
    ft_npy_free(&in->mask);
    return rc;
}

void ft_mpi_kv_shard_free(ft_mpi_kv_shard *s) {
    free(s->kv_start), free(s->seqlens_kv), free(s->table), free(s->k), free(s->v), free(s->mask);
    free(s->k_scale), free(s->v_scale);
    memset(s, 0, sizeof *s);
}
