/* Row addressing for padded, packed and paged tensors. */
#include "kv/fai_kv.h"

static const unsigned char *element_at(const fai_tensor *tensor, int64_t offset) {
    return (const unsigned char *)tensor->data + offset * (int64_t)fai_dtype_size(tensor->dtype);
}

/* The run of keys from `key` on that share a page, at most `left` of them: their page in the
 * pool (through sequence b's block-table row) and the first key's slot in it. One table lookup
 * and one division per page, not per key. */
static int64_t page_run(const fai_plan *plan, const fai_tensors *t, int64_t b, int64_t key,
                        int64_t left, int64_t *page, int64_t *slot) {
    const int64_t page_size = plan->pb.page_size;
    const int64_t table_stride =
        t->block_table_stride ? t->block_table_stride : plan->pb.pages_per_seq;
    *page = t->block_table[b * table_stride + key / page_size];
    *slot = key % page_size;
    return page_size - *slot < left ? page_size - *slot : left;
}

/* One address computation per page (or per tile when dense), then a byte stride per row. */
void fai__kv_rows(const fai_plan *plan, const fai_tensors *t, const fai_tensor *tensor, int64_t b,
                  int64_t h, int64_t key_begin, int64_t count, const void **rows) {
    const int64_t element = (int64_t)fai_dtype_size(tensor->dtype);
    const int64_t row_step = tensor->stride_seq * element;
    const unsigned char *data = tensor->data;
    if (plan->paged) {
        int64_t page, slot;
        for (int64_t r = 0, run; r < count; r += run) {
            run = page_run(plan, t, b, key_begin + r, count - r, &page, &slot);
            const unsigned char *row =
                data + (page * tensor->stride_batch + slot * tensor->stride_seq +
                        h * tensor->stride_head) *
                           element;
            for (int64_t k = 0; k < run; k++, row += row_step)
                rows[r + k] = row;
        }
        return;
    }
    const int64_t first_row = plan->packed_kv ? plan->seqs[b].kv_row0 + key_begin : key_begin;
    const int64_t batch_offset = plan->packed_kv ? 0 : b * tensor->stride_batch;
    const unsigned char *row =
        data + (batch_offset + first_row * tensor->stride_seq + h * tensor->stride_head) * element;
    for (int64_t r = 0; r < count; r++, row += row_step)
        rows[r] = row;
}

void fai__kv_scales(const fai_plan *plan, const fai_tensors *t, const fai_scale *scale, int64_t b,
                    int64_t h, int64_t key_begin, int64_t count, float *out) {
    const float *data = scale->data + h * scale->stride_head;
    if (scale->stride_seq == 0 && (scale->stride_batch == 0 || !plan->paged)) {
        /* one scale for all the tile's keys (per kv head, or per sequence when dense) */
        const float value = data[plan->paged || plan->packed_kv ? 0 : b * scale->stride_batch];
        for (int64_t r = 0; r < count; r++)
            out[r] = value;
        return;
    }
    if (plan->paged) {
        int64_t page, slot;
        for (int64_t r = 0, run; r < count; r += run) {
            run = page_run(plan, t, b, key_begin + r, count - r, &page, &slot);
            const float *at = data + page * scale->stride_batch + slot * scale->stride_seq;
            for (int64_t k = 0; k < run; k++)
                out[r + k] = at[k * scale->stride_seq];
        }
        return;
    }
    const int64_t first_row = plan->packed_kv ? plan->seqs[b].kv_row0 + key_begin : key_begin;
    const float *row =
        data + (plan->packed_kv ? 0 : b * scale->stride_batch) + first_row * scale->stride_seq;
    for (int64_t r = 0; r < count; r++)
        out[r] = row[r * scale->stride_seq];
}

void fai__kv_prefetch(const fai_plan *plan, const fai_tensors *t, const fai_tensor *tensor,
                      int64_t b, int64_t h, int64_t key_begin, int64_t count, int64_t row_bytes) {
    enum { CHUNK = 16 };
    const void *rows[CHUNK];
    for (int64_t done = 0; done < count; done += CHUNK) {
        const int64_t chunk = count - done < CHUNK ? count - done : CHUNK;
        fai__kv_rows(plan, t, tensor, b, h, key_begin + done, chunk, rows);
        for (int64_t r = 0; r < chunk; r++)
            for (int64_t offset = 0; offset < row_bytes; offset += 64)
                __builtin_prefetch((const char *)rows[r] + offset, 0, 2);
    }
}

void *fai__q_row(const fai_plan *plan, const fai_tensor *tensor, int64_t b, int64_t i, int64_t h) {
    const int64_t row = plan->packed_q ? plan->seqs[b].q_row0 + i : i;
    const int64_t batch_offset = plan->packed_q ? 0 : b * tensor->stride_batch;
    return (void *)element_at(tensor,
                              batch_offset + row * tensor->stride_seq + h * tensor->stride_head);
}

float *fai__lse_at(const fai_plan *plan, const fai_tensor *lse, int64_t b, int64_t i, int64_t h) {
    const int64_t row = plan->packed_q ? plan->seqs[b].q_row0 + i : i;
    const int64_t batch_offset = plan->packed_q ? 0 : b * lse->stride_batch;
    return (float *)lse->data + batch_offset + h * lse->stride_head + row * lse->stride_seq;
}
