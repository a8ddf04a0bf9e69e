/* Row addressing for padded, packed and paged tensors, resolved once per run. */
#include "kv/fai_kv.h"

#include <string.h>

/* Strides in elements of `element_bytes` each, into a fai_rows; packed and paged as the plan
 * says for that side (Q/O/LSE or K/V). */
static fai_rows resolve(const fai_plan *plan, const fai_tensors *t, void *data,
                        int64_t element_bytes, int64_t batch, int64_t seq, int64_t head,
                        int kv_side) {
    fai_rows r;
    r.data = data;
    r.batch = batch * element_bytes;
    r.seq = seq * element_bytes;
    r.head = head * element_bytes;
    r.kv_side = kv_side;
    r.seqs = (kv_side ? plan->packed_kv : plan->packed_q) ? plan->seqs : NULL;
    r.table = kv_side && plan->paged ? t->block_table : NULL;
    r.table_stride = t->block_table_stride ? t->block_table_stride : plan->pb.pages_per_seq;
    r.page_size = plan->pb.page_size;
    return r;
}

static fai_rows resolve_tensor(const fai_plan *plan, const fai_tensors *t, const fai_tensor *x,
                               int kv_side) {
    return resolve(plan, t, x->data, (int64_t)fai_dtype_size(x->dtype), x->stride_batch,
                   x->stride_seq, x->stride_head, kv_side);
}

static fai_rows resolve_scale(const fai_plan *plan, const fai_tensors *t, const fai_scale *s) {
    return resolve(plan, t, s->data, (int64_t)sizeof(float), s->stride_batch, s->stride_seq,
                   s->stride_head, 1);
}

void fai__rows_resolve(const fai_plan *plan, const fai_tensors *t, fai_run_rows *rows) {
    rows->q = resolve_tensor(plan, t, &t->q, 0);
    rows->k = resolve_tensor(plan, t, &t->k, 1);
    rows->v = resolve_tensor(plan, t, &t->v, 1);
    rows->o = resolve_tensor(plan, t, &t->o, 0);
    /* LSE is f32 [B, Hq, Sq] by its strides: element (b, h, i) */
    rows->lse = resolve(plan, t, t->lse.data, (int64_t)sizeof(float), t->lse.stride_batch,
                        t->lse.stride_seq, t->lse.stride_head, 0);
    rows->k_scale = resolve_scale(plan, t, &t->k_scale);
    rows->v_scale = resolve_scale(plan, t, &t->v_scale);
}

/* Byte offset of row `s` of sequence b (not paged): its packed row, or its batch's row. */
static int64_t row_offset(const fai_rows *r, int64_t b, int64_t s) {
    if (r->seqs) return (s + (r->kv_side ? r->seqs[b].kv_row0 : r->seqs[b].q_row0)) * r->seq;
    return b * r->batch + s * r->seq;
}

/* The run of keys from `key` on that share a page, at most `left` of them: the byte offset of
 * the first one's row (head 0). One table lookup and one division per page, not per key. */
static int64_t page_run(const fai_rows *r, int64_t b, int64_t key, int64_t left, int64_t *offset) {
    const int64_t slot = key % r->page_size;
    *offset =
        (int64_t)r->table[b * r->table_stride + key / r->page_size] * r->batch + slot * r->seq;
    return r->page_size - slot < left ? r->page_size - slot : left;
}

void fai__kv_rows(const fai_rows *kv, int64_t b, int64_t h, int64_t key_begin, int64_t count,
                  const void **rows) {
    const unsigned char *head = kv->data + h * kv->head;
    if (kv->table) {
        int64_t offset;
        for (int64_t r = 0, run; r < count; r += run) {
            run = page_run(kv, b, key_begin + r, count - r, &offset);
            const unsigned char *row = head + offset;
            for (int64_t k = 0; k < run; k++, row += kv->seq)
                rows[r + k] = row;
        }
        return;
    }
    const unsigned char *row = head + row_offset(kv, b, key_begin);
    for (int64_t r = 0; r < count; r++, row += kv->seq)
        rows[r] = row;
}

void fai__kv_scales(const fai_rows *scale, int64_t b, int64_t h, int64_t key_begin, int64_t count,
                    float *out) {
    enum { CHUNK = 64 };
    const void *at[CHUNK]; /* the scales are rows of one f32 each */
    for (int64_t done = 0; done < count; done += CHUNK) {
        const int64_t chunk = count - done < CHUNK ? count - done : CHUNK;
        fai__kv_rows(scale, b, h, key_begin + done, chunk, at);
        for (int64_t r = 0; r < chunk; r++)
            memcpy(&out[done + r], at[r], sizeof(float));
    }
}

void fai__kv_prefetch(const fai_rows *kv, int64_t b, int64_t h, int64_t key_begin, int64_t count,
                      int64_t row_bytes) {
    enum { CHUNK = 16 };
    const void *rows[CHUNK];
    for (int64_t done = 0; done < count; done += CHUNK) {
        const int64_t chunk = count - done < CHUNK ? count - done : CHUNK;
        fai__kv_rows(kv, b, h, key_begin + done, chunk, rows);
        for (int64_t r = 0; r < chunk; r++)
            for (int64_t offset = 0; offset < row_bytes; offset += 64)
                __builtin_prefetch((const char *)rows[r] + offset, 0, 2);
    }
}

void *fai__q_row(const fai_rows *q, int64_t b, int64_t i, int64_t h) {
    return q->data + row_offset(q, b, i) + h * q->head;
}

float *fai__lse_at(const fai_rows *lse, int64_t b, int64_t i, int64_t h) {
    return (float *)(void *)(lse->data + row_offset(lse, b, i) + h * lse->head);
}
