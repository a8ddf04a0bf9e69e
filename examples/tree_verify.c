/*
 * tree_verify.c - speculative decoding: verify a draft tree against a paged KV cache in one call.
 *
 * A draft model proposes a tree of tokens after each sequence's prompt (every node continues its
 * parent; the root continues the prompt). The target model scores all the tree's nodes at once:
 * their K and V rows are appended to the sequence's pages after the prompt, and each node's query
 * attends to the whole prompt and to its own ancestors and itself, never to its siblings or
 * cousins. That visibility is a bit-packed keep mask, one bit per key (FAI_MASK_KEEP_BITS: bit j
 * % 8 of byte j / 8 of the node's row), as FlashInfer's packed custom masks are. Both sequences,
 * with trees of different sizes, go in one fai_run; the output is checked against a naive
 * reference in double.
 */
#include <fai.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    BATCH = 2,
    HEADS_Q = 8,
    HEADS_KV = 2,
    DIM = 64,
    PAGE_SIZE = 16,
    PAGES_PER_SEQ = 16,                    /* room for 256 tokens per sequence */
    NUM_PAGES = BATCH * PAGES_PER_SEQ + 3, /* the shared pool */
    MAX_TREE = 64,                         /* draft tokens per sequence, at most */
    MAX_KEYS = PAGES_PER_SEQ * PAGE_SIZE,  /* keys per sequence, at most */
    MASK_STRIDE = (MAX_KEYS + 7) / 8 + 6,  /* bytes per mask row (any >= ceil(keys / 8)) */
    ROW = HEADS_KV * DIM                   /* floats of one token's K (or V) in a page */
};

static const int prompt_len[BATCH] = {150, 97};
static const int tree_len[BATCH] = {48, 23};

/* Deterministic test data in [-1, 1). */
static float value(int kind, int b, int pos, int h, int d) {
    uint32_t x = (uint32_t)kind * 2654435761u ^ (uint32_t)(b * 7919 + pos * 131 + h * 31 + d);
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    return (float)(x & 0xffff) / 32768.0f - 1.0f;
}

/* The tree: node t's parent is an earlier node (-1: the prompt's last token). A few long chains
 * and some branching, as a draft tree has. */
static int parent_of(int b, int t) {
    if (t == 0) return -1;
    const int span = 4 + t / 3 < t ? 4 + t / 3 : t; /* parents among the first nodes */
    return (t * 7 + b) % span;
}

static int sees(int b, int t, int node) { /* whether node t sees tree node `node` */
    for (int a = t; a >= 0; a = parent_of(b, a))
        if (a == node) return 1;
    return 0;
}

int main(void) {
    static float k_pool[NUM_PAGES * PAGE_SIZE * ROW], v_pool[NUM_PAGES * PAGE_SIZE * ROW];
    static float q[BATCH * MAX_TREE * HEADS_Q * DIM], o[BATCH * MAX_TREE * HEADS_Q * DIM];
    static float lse[BATCH * HEADS_Q * MAX_TREE];
    static unsigned char mask[BATCH * MAX_TREE * MASK_STRIDE];
    int32_t block_table[BATCH * PAGES_PER_SEQ], seqlens_q[BATCH], seqlens_kv[BATCH];

    /* -- the cache: pages handed out in reversed order, the prompt then the tree's tokens -- */
    int next_page = NUM_PAGES - 1;
    for (int b = 0; b < BATCH; b++) {
        seqlens_q[b] = tree_len[b];
        seqlens_kv[b] = prompt_len[b] + tree_len[b];
        for (int p = 0; p < PAGES_PER_SEQ; p++)
            block_table[b * PAGES_PER_SEQ + p] = p * PAGE_SIZE < seqlens_kv[b] ? next_page-- : -1;
        for (int pos = 0; pos < seqlens_kv[b]; pos++) {
            const int page = block_table[b * PAGES_PER_SEQ + pos / PAGE_SIZE];
            float *k_row = k_pool + ((size_t)page * PAGE_SIZE + pos % PAGE_SIZE) * ROW;
            float *v_row = v_pool + ((size_t)page * PAGE_SIZE + pos % PAGE_SIZE) * ROW;
            for (int h = 0; h < HEADS_KV; h++)
                for (int d = 0; d < DIM; d++) {
                    k_row[h * DIM + d] = value('k', b, pos, h, d);
                    v_row[h * DIM + d] = value('v', b, pos, h, d);
                }
        }
        for (int t = 0; t < tree_len[b]; t++)
            for (int h = 0; h < HEADS_Q; h++)
                for (int d = 0; d < DIM; d++)
                    q[(((size_t)b * MAX_TREE + t) * HEADS_Q + h) * DIM + d] =
                        value('q', b, t, h, d);
    }

    /* -- the tree mask: a node sees the prompt, its ancestors and itself -- */
    memset(mask, 0, sizeof mask);
    for (int b = 0; b < BATCH; b++)
        for (int t = 0; t < tree_len[b]; t++) {
            unsigned char *row = mask + ((size_t)b * MAX_TREE + t) * MASK_STRIDE;
            for (int j = 0; j < seqlens_kv[b]; j++) {
                const int visible = j < prompt_len[b] || sees(b, t, j - prompt_len[b]);
                if (visible) row[j / 8] |= (unsigned char)(1u << (j % 8));
            }
        }

    /* -- one plan and one run for both sequences -- */
    fai_problem pb;
    fai_problem_init(&pb);
    pb.batch = BATCH;
    pb.heads_q = HEADS_Q;
    pb.heads_kv = HEADS_KV;
    pb.seq_q = MAX_TREE;
    pb.head_dim = DIM;
    pb.q_dtype = pb.k_dtype = pb.v_dtype = pb.o_dtype = FAI_DTYPE_F32;
    pb.mask_kind = FAI_MASK_KEEP_BITS; /* the mask decides; no causal */
    pb.seqlens_q = seqlens_q;
    pb.seqlens_kv = seqlens_kv;
    pb.page_size = PAGE_SIZE;
    pb.num_pages = NUM_PAGES;
    pb.pages_per_seq = PAGES_PER_SEQ;
    fai_plan *plan;
    if (fai_plan_create(&pb, &plan) != FAI_OK) {
        fprintf(stderr, "tree_verify: plan: %s\n", fai_last_error());
        return 1;
    }
    fai_tensors t;
    memset(&t, 0, sizeof t);
    t.q = fai_tensor_bshd(q, FAI_DTYPE_F32, MAX_TREE, HEADS_Q, DIM);
    t.k = fai_tensor_bshd(k_pool, FAI_DTYPE_F32, PAGE_SIZE, HEADS_KV, DIM); /* page pools */
    t.v = fai_tensor_bshd(v_pool, FAI_DTYPE_F32, PAGE_SIZE, HEADS_KV, DIM);
    t.o = fai_tensor_bshd(o, FAI_DTYPE_F32, MAX_TREE, HEADS_Q, DIM);
    t.lse.data = lse;
    t.lse.dtype = FAI_DTYPE_F32;
    t.lse.stride_batch = HEADS_Q * MAX_TREE;
    t.lse.stride_head = MAX_TREE;
    t.lse.stride_seq = 1;
    t.mask.data = mask; /* [B, Sq, MASK_STRIDE] bytes, broadcast over the heads */
    t.mask.stride_batch = MAX_TREE * MASK_STRIDE;
    t.mask.stride_head = 0;
    t.mask.stride_q = MASK_STRIDE;
    t.block_table = block_table;
    const size_t ws_size = fai_plan_workspace_size(plan);
    void *ws = malloc(ws_size ? ws_size : 1);
    const fai_status status = ws ? fai_run(plan, &t, ws, ws_size) : FAI_ERR_NO_MEMORY;
    free(ws);
    fai_plan_free(plan);
    if (status != FAI_OK) {
        fprintf(stderr, "tree_verify: run: %s\n", fai_last_error());
        return 1;
    }

    /* -- naive reference: every node, every head, in double -- */
    double worst = 0.0;
    for (int b = 0; b < BATCH; b++)
        for (int n = 0; n < tree_len[b]; n++)
            for (int h = 0; h < HEADS_Q; h++) {
                const int hk = h / (HEADS_Q / HEADS_KV);
                const float *qr = q + (((size_t)b * MAX_TREE + n) * HEADS_Q + h) * DIM;
                double scores[MAX_KEYS], max = -INFINITY, sum = 0.0, out[DIM] = {0};
                for (int j = 0; j < seqlens_kv[b]; j++) {
                    scores[j] = -INFINITY;
                    if (j >= prompt_len[b] && !sees(b, n, j - prompt_len[b])) continue;
                    double s = 0.0;
                    for (int d = 0; d < DIM; d++)
                        s += (double)qr[d] * value('k', b, j, hk, d);
                    scores[j] = s / sqrt((double)DIM);
                    if (scores[j] > max) max = scores[j];
                }
                for (int j = 0; j < seqlens_kv[b]; j++) {
                    if (scores[j] == -INFINITY) continue;
                    const double p = exp(scores[j] - max);
                    sum += p;
                    for (int d = 0; d < DIM; d++)
                        out[d] += p * value('v', b, j, hk, d);
                }
                const float *got = o + (((size_t)b * MAX_TREE + n) * HEADS_Q + h) * DIM;
                for (int d = 0; d < DIM; d++) {
                    const double err = fabs(got[d] - out[d] / sum);
                    if (err > worst || isnan(err)) worst = isnan(err) ? INFINITY : err;
                }
                const double lse_err =
                    fabs(lse[((size_t)b * HEADS_Q + h) * MAX_TREE + n] - (max + log(sum))) /
                    fmax(1.0, fabs(max + log(sum)));
                if (lse_err > worst || isnan(lse_err)) worst = isnan(lse_err) ? INFINITY : lse_err;
            }
    /* padding rows past each tree are written as zeros */
    for (int b = 0; b < BATCH; b++)
        for (size_t x = (size_t)tree_len[b] * HEADS_Q * DIM; x < (size_t)MAX_TREE * HEADS_Q * DIM;
             x++)
            if (o[(size_t)b * MAX_TREE * HEADS_Q * DIM + x] != 0.0f) worst = INFINITY;
    printf("tree_verify: trees of %d and %d draft tokens over prompts of %d and %d, max error "
           "%.3g\n",
           tree_len[0], tree_len[1], prompt_len[0], prompt_len[1], worst);
    return worst <= 2e-5 ? 0 : 1;
}
