/* Row addressing for padded, packed and paged tensors, resolved once per run. */
#include "kv/fai_kv.h"

#include <stdint.h>
#include <string.h>

/* stride x element_bytes, wrapping instead of overflowing: the checks before a run have made
 * every stride it follows fit (fai__check_reach), but a stride it never follows (a batch stride
 * with one sequence, or a packed tensor's; those of an LSE or scales not given) may be anything,
 * and is resolved all the same. */
static int64_t stride_bytes(int64_t stride, int64_t element_bytes) {
    return (int64_t)((uint64_t)stride * (uint64_t)element_bytes);
}

/* Strides in elements of `element_bytes` each, into a fai_rows; packed and paged as the plan
 * says for that side (Q/O/LSE or K/V). */
static fai_rows resolve(const fai_plan *plan, const fai_tensors *t, void *data,
                        int64_t element_bytes, int64_t batch, int64_t seq, int64_t head,
                        int kv_side) {
    fai_rows r;
    r.data = data;
    r.batch = stride_bytes(batch, element_bytes);
    r.seq = stride_bytes(seq, element_bytes);
    r.head = stride_bytes(head, element_bytes);
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

/* A walk over keys [key, key + left) of sequence b, kv head h, one run of rows a time: the keys of
 * a page (paged; one division for the whole walk, then page after page) or all of them (not
 * paged). */
typedef struct row_walk {
    const fai_rows *r;
    const unsigned char *head; /* head h's element 0 of row 0 of a page, or of the sequence */
    const int32_t *pages;      /* sequence b's block-table row (paged) */
    int64_t page, slot, left;
} row_walk;

static row_walk walk_begin(const fai_rows *r, int64_t b, int64_t h, int64_t key, int64_t count) {
    row_walk w = {r, r->data + h * r->head, NULL, 0, 0, count};
    if (r->table) {
        w.pages = r->table + b * r->table_stride;
        w.page = key / r->page_size;
        w.slot = key - w.page * r->page_size;
    } else {
        w.head += row_offset(r, b, key);
    }
    return w;
}

/* The next run: its first row's address and its length (0 when the walk is done). */
static int64_t walk_next(row_walk *w, const unsigned char **first) {
    if (w->left == 0) return 0;
    int64_t run = w->left;
    if (w->pages) {
        const fai_rows *r = w->r;
        *first = w->head + (int64_t)w->pages[w->page] * r->batch + w->slot * r->seq;
        if (r->page_size - w->slot < run) run = r->page_size - w->slot;
        w->page++;
        w->slot = 0;
    } else {
        *first = w->head;
    }
    w->left -= run;
    return run;
}

void fai__kv_rows(const fai_rows *kv, int64_t b, int64_t h, int64_t key_begin, int64_t count,
                  const void **rows) {
    row_walk w = walk_begin(kv, b, h, key_begin, count);
    const unsigned char *row;
    for (int64_t run; (run = walk_next(&w, &row)) > 0;)
        for (int64_t k = 0; k < run; k++, row += kv->seq)
            *rows++ = row;
}

void fai__kv_scales(const fai_rows *scale, int64_t b, int64_t h, int64_t key_begin, int64_t count,
                    float *out) {
    row_walk w = walk_begin(scale, b, h, key_begin, count);
    const unsigned char *at;
    const int64_t stride = scale->seq; /* the scales are rows of one f32 */
    for (int64_t run; (run = walk_next(&w, &at)) > 0; out += run) {
        if (stride == (int64_t)sizeof(float)) {
            memcpy(out, at, (size_t)run * sizeof(float));
            continue;
        }
        /* a key per step; four at a time so the loop's own steps cost less than the loads */
        int64_t k = 0;
        for (; k + 4 <= run; k += 4, at += 4 * stride) {
            float four[4];
            memcpy(&four[0], at, sizeof(float));
            memcpy(&four[1], at + stride, sizeof(float));
            memcpy(&four[2], at + 2 * stride, sizeof(float));
            memcpy(&four[3], at + 3 * stride, sizeof(float));
            memcpy(out + k, four, sizeof four);
        }
        for (; k < run; k++, at += stride)
            memcpy(out + k, at, sizeof(float));
    }
}

void fai__kv_prefetch(const fai_rows *kv, int64_t b, int64_t h, int64_t key_begin, int64_t count,
                      int64_t row_bytes) {
    row_walk w = walk_begin(kv, b, h, key_begin, count);
    const unsigned char *row;
    for (int64_t run; (run = walk_next(&w, &row)) > 0;)
        for (int64_t k = 0; k < run; k++, row += kv->seq)
            for (int64_t offset = 0; offset < row_bytes; offset += 64)
                __builtin_prefetch(row + offset, 0, 2);
}

void *fai__q_row(const fai_rows *q, int64_t b, int64_t i, int64_t h) {
    return q->data + row_offset(q, b, i) + h * q->head;
}

float *fai__lse_at(const fai_rows *lse, int64_t b, int64_t i, int64_t h) {
    return (float *)(void *)(lse->data + row_offset(lse, b, i) + h * lse->head);
}
