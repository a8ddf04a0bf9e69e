/* Row addressing for padded, packed and paged tensors. */
#include "kv/fai_kv.h"

static const unsigned char *element_at(const fai_tensor *tensor, int64_t offset) {
    return (const unsigned char *)tensor->data + offset * (int64_t)fai__dtype_size(tensor->dtype);
}

void fai__kv_rows(const fai_plan *plan, const fai_tensors *t, const fai_tensor *tensor, int64_t b,
                  int64_t h, int64_t key_begin, int64_t count, const void **rows) {
    const int64_t head_offset = h * tensor->stride_head;
    if (plan->paged) {
        const int64_t page_size = plan->pb.page_size;
        const int64_t table_stride =
            t->block_table_stride ? t->block_table_stride : plan->pb.pages_per_seq;
        const int32_t *table = t->block_table + b * table_stride;
        int64_t page_index = key_begin / page_size, slot = key_begin % page_size;
        for (int64_t r = 0; r < count; r++) {
            const int64_t page = table[page_index];
            rows[r] = element_at(tensor, page * tensor->stride_batch + slot * tensor->stride_seq +
                                             head_offset);
            if (++slot == page_size) slot = 0, page_index++;
        }
        return;
    }
    const int64_t base = plan->packed_kv ? plan->seqs[b].kv_row0 * tensor->stride_seq
                                         : b * tensor->stride_batch;
    for (int64_t r = 0; r < count; r++)
        rows[r] = element_at(tensor, base + (key_begin + r) * tensor->stride_seq + head_offset);
}

void *fai__q_row(const fai_plan *plan, const fai_tensor *tensor, int64_t b, int64_t i, int64_t h) {
    const int64_t row = plan->packed_q ? plan->seqs[b].q_row0 + i : i;
    const int64_t batch_offset = plan->packed_q ? 0 : b * tensor->stride_batch;
    return (void *)element_at(tensor, batch_offset + row * tensor->stride_seq +
                                          h * tensor->stride_head);
}

float *fai__lse_at(const fai_plan *plan, const fai_tensor *lse, int64_t b, int64_t i, int64_t h) {
    const int64_t row = plan->packed_q ? plan->seqs[b].q_row0 + i : i;
    const int64_t batch_offset = plan->packed_q ? 0 : b * lse->stride_batch;
    return (float *)lse->data + batch_offset + h * lse->stride_head + row * lse->stride_seq;
}
