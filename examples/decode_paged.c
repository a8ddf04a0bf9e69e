/*
 * decode_paged.c - a decode loop over a paged KV cache.
 *
 * Two sequences share one pool of fixed-size pages. Every step appends each sequence's new token
 * (its K and V rows) to the sequence's last page, taking a fresh page from a free list when the
 * last one is full, then attends the step's query over everything cached so far. The lengths
 * change every step, so every step makes a new plan (cheap; an engine reuses it for all layers).
 * The last step's output is checked against a naive reference.
 *
 * The cache is f32 here for brevity; an f16 or bf16 cache only changes k_dtype/v_dtype and the
 * tensors' dtype.
 */
#include <fai.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum {
    BATCH = 2,           /* sequences decoded together */
    HEADS_Q = 4,         /* query heads */
    HEADS_KV = 2,        /* K/V heads (GQA: two query heads share one K/V head) */
    DIM = 16,            /* head dimension */
    PAGE_SIZE = 4,       /* tokens per page */
    NUM_PAGES = 16,      /* pages in the pool, shared by all sequences */
    PAGES_PER_SEQ = 8,   /* width of the block table: at most 32 tokens per sequence */
    STEPS = 12,          /* decode steps */
    ROW = HEADS_KV * DIM /* floats of one token's K (or V) row in a page */
};

/* Deterministic test data in [-1, 1): K ('k'), V ('v') and Q ('q') of token `pos` of sequence b. */
static float value(int kind, int b, int pos, int h, int d) {
    uint32_t x = (uint32_t)kind * 2654435761u ^ (uint32_t)(b * 7919 + pos * 131 + h * 31 + d);
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    return (float)(x & 0xffff) / 32768.0f - 1.0f;
}

/* The larger of two errors; a NaN is larger than anything, so that it fails the check. */
static double worse(double worst, double err) { return err > worst || isnan(err) ? err : worst; }

/* Naive attention of one query head over keys 0..len-1 of sequence b, in double. */
static void reference(int b, int hq, int len, const float *q, double *out) {
    const int hkv = hq / (HEADS_Q / HEADS_KV);
    double scores[PAGES_PER_SEQ * PAGE_SIZE], max = -INFINITY, sum = 0;
    for (int j = 0; j < len; j++) {
        double s = 0;
        for (int d = 0; d < DIM; d++)
            s += (double)q[d] * value('k', b, j, hkv, d);
        scores[j] = s / sqrt((double)DIM);
        if (scores[j] > max) max = scores[j];
    }
    for (int d = 0; d < DIM; d++)
        out[d] = 0;
    for (int j = 0; j < len; j++) {
        const double p = exp(scores[j] - max);
        sum += p;
        for (int d = 0; d < DIM; d++)
            out[d] += p * value('v', b, j, hkv, d);
    }
    for (int d = 0; d < DIM; d++)
        out[d] /= sum;
}

/* The paged KV cache: two page pools, a free list and the block table. */
typedef struct kv_cache {
    float k[NUM_PAGES * PAGE_SIZE * ROW]; /* page p holds PAGE_SIZE rows of [HEADS_KV, DIM] */
    float v[NUM_PAGES * PAGE_SIZE * ROW];
    int free_pages[NUM_PAGES], num_free;
    int32_t block_table[BATCH][PAGES_PER_SEQ]; /* page i of sequence b is block_table[b][i] */
    int32_t lens[BATCH];                       /* tokens cached per sequence */
} kv_cache;

/* Appends the next token of sequence b: takes a page from the free list when the sequence's
 * last page is full (or it has none yet), then writes the token's K and V rows into its slot. */
static int append_token(kv_cache *c, int b) {
    const int pos = c->lens[b];
    if (pos % PAGE_SIZE == 0) {
        if (c->num_free == 0 || pos / PAGE_SIZE == PAGES_PER_SEQ) return 1; /* cache full */
        c->block_table[b][pos / PAGE_SIZE] = c->free_pages[--c->num_free];
    }
    const int64_t slot = (int64_t)c->block_table[b][pos / PAGE_SIZE] * PAGE_SIZE + pos % PAGE_SIZE;
    for (int h = 0; h < HEADS_KV; h++)
        for (int d = 0; d < DIM; d++) {
            c->k[slot * ROW + h * DIM + d] = value('k', b, pos, h, d);
            c->v[slot * ROW + h * DIM + d] = value('v', b, pos, h, d);
        }
    c->lens[b]++;
    return 0;
}

/* Plans the problem, runs it with a workspace of the plan's size, and frees the plan. */
static int attend(const fai_problem *pb, const fai_tensors *t) {
    fai_plan *plan;
    if (fai_plan_create(pb, &plan) != FAI_OK) {
        fprintf(stderr, "plan: %s\n", fai_last_error());
        return 1;
    }
    const size_t ws_size = fai_plan_workspace_size(plan);
    void *ws = malloc(ws_size ? ws_size : 1); /* any alignment will do */
    const fai_status st = ws ? fai_run(plan, t, ws, ws_size) : FAI_ERR_NO_MEMORY;
    if (st != FAI_OK) fprintf(stderr, "run: %s\n", fai_last_error());
    free(ws);
    fai_plan_free(plan);
    return st != FAI_OK;
}

int main(void) {
    static kv_cache cache;
    for (int p = 0; p < NUM_PAGES; p++) /* pages handed out in a scrambled order */
        cache.free_pages[cache.num_free++] = (p * 5) % NUM_PAGES;
    /* the prompts, already in the cache: 5 tokens of sequence 0 and 2 of sequence 1 */
    const int prompt[BATCH] = {5, 2};
    for (int b = 0; b < BATCH; b++)
        for (int i = 0; i < prompt[b]; i++)
            if (append_token(&cache, b)) return 1;

    static float q[BATCH * HEADS_Q * DIM], o[BATCH * HEADS_Q * DIM];
    for (int step = 0; step < STEPS; step++) {
        /* 1. Append this step's token of every sequence; its query attends to the whole cache. */
        for (int b = 0; b < BATCH; b++) {
            if (append_token(&cache, b)) {
                fprintf(stderr, "out of pages\n");
                return 1;
            }
            for (int h = 0; h < HEADS_Q; h++)
                for (int d = 0; d < DIM; d++)
                    q[(b * HEADS_Q + h) * DIM + d] = value('q', b, cache.lens[b] - 1, h, d);
        }

        /* 2. Describe the step: one query per sequence over its cached keys. The lengths are
         * part of the plan, so each step makes a new one. */
        fai_problem pb;
        fai_problem_init(&pb);
        pb.batch = BATCH;
        pb.heads_q = HEADS_Q;
        pb.heads_kv = HEADS_KV;
        pb.seq_q = 1;
        pb.head_dim = DIM;
        pb.k_dtype = pb.v_dtype = FAI_DTYPE_F32;
        pb.page_size = PAGE_SIZE;
        pb.num_pages = NUM_PAGES;
        pb.pages_per_seq = PAGES_PER_SEQ;
        pb.seqlens_kv = cache.lens; /* copied by the plan */

        /* 3. The tensors: Q and O are [BATCH, 1, HEADS_Q, DIM]; a page pool is a
         * [NUM_PAGES, PAGE_SIZE, HEADS_KV, DIM] tensor whose batch stride is the page stride. */
        fai_tensors t = {0};
        t.q = fai_tensor_bshd(q, FAI_DTYPE_F32, 1, HEADS_Q, DIM);
        t.o = fai_tensor_bshd(o, FAI_DTYPE_F32, 1, HEADS_Q, DIM);
        t.k = fai_tensor_bshd(cache.k, FAI_DTYPE_F32, PAGE_SIZE, HEADS_KV, DIM);
        t.v = fai_tensor_bshd(cache.v, FAI_DTYPE_F32, PAGE_SIZE, HEADS_KV, DIM);
        t.block_table = &cache.block_table[0][0];

        if (attend(&pb, &t)) return 1;
    }

    /* Check the last step's output against the naive reference. */
    double worst = 0;
    for (int b = 0; b < BATCH; b++)
        for (int h = 0; h < HEADS_Q; h++) {
            double ref[DIM];
            reference(b, h, cache.lens[b], &q[(b * HEADS_Q + h) * DIM], ref);
            for (int d = 0; d < DIM; d++) {
                const double err = fabs(o[(b * HEADS_Q + h) * DIM + d] - ref[d]);
                worst = worse(worst, err);
            }
        }
    printf("decode_paged: %d steps, lengths %d and %d, %d pages in use, max error %.1e\n", STEPS,
           cache.lens[0], cache.lens[1], NUM_PAGES - cache.num_free, worst);
    return worst < 1e-5 ? 0 : 1;
}
