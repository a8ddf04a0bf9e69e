/*
 * merge_partials.c - attention over two key sets, merged by their LSE.
 *
 * Attention over a union of disjoint key sets can be computed one set at a time (a shared prompt
 * prefix and each request's own suffix, the chunks of a long context, the shards of sequence
 * parallelism) and merged afterwards, if each part also returns its log-sum-exp (LSE) per query
 * row: fai_merge_states weights each part's output by e^LSE. Here the keys are split into a
 * prefix and a suffix; the merge must equal attention over all keys, checked against a naive
 * reference (both O and LSE).
 */
#include <fai.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum {
    QUERIES = 3,           /* query positions */
    KEYS = 70,             /* keys in all */
    PREFIX = 48,           /* keys of the first part; the second has the remaining 22 */
    HEADS_Q = 4,           /* query heads */
    HEADS_KV = 2,          /* K/V heads */
    DIM = 24,              /* head dimension */
    ROW_Q = HEADS_Q * DIM, /* floats of one position's Q (or O) row */
    ROW_KV = HEADS_KV * DIM
};

/* Deterministic test data in [-1, 1). */
static float value(uint32_t i) {
    i *= 2654435761u;
    i ^= i >> 15;
    i *= 2246822519u;
    i ^= i >> 13;
    return (float)(i & 0xffff) / 32768.0f - 1.0f;
}

/* An f32 LSE tensor laid out [batch, heads, seq] (the same description serves fai_run and
 * fai_merge_states: both address it by the named strides). */
static fai_tensor lse_tensor(float *data) {
    fai_tensor t = {0};
    t.data = data;
    t.dtype = FAI_DTYPE_F32;
    t.stride_batch = HEADS_Q * QUERIES;
    t.stride_head = QUERIES;
    t.stride_seq = 1;
    return t;
}

/* Attention of all queries over `keys` keys starting at key `first`, writing O and LSE. */
static int attend(float *q, float *k, float *v, int first, int keys, float *o, float *lse) {
    fai_problem pb;
    fai_problem_init(&pb);
    pb.batch = 1;
    pb.heads_q = HEADS_Q;
    pb.heads_kv = HEADS_KV;
    pb.seq_q = QUERIES;
    pb.seq_kv = keys;
    pb.head_dim = DIM;
    pb.k_dtype = pb.v_dtype = FAI_DTYPE_F32;

    fai_plan *plan;
    if (fai_plan_create(&pb, &plan) != FAI_OK) {
        fprintf(stderr, "plan: %s\n", fai_last_error());
        return 1;
    }
    /* A key subset is a view: the same strides, the pointer moved to its first row. */
    fai_tensors t = {0};
    t.q = fai_tensor_bshd(q, FAI_DTYPE_F32, QUERIES, HEADS_Q, DIM);
    t.k = fai_tensor_bshd(k + first * ROW_KV, FAI_DTYPE_F32, keys, HEADS_KV, DIM);
    t.v = fai_tensor_bshd(v + first * ROW_KV, FAI_DTYPE_F32, keys, HEADS_KV, DIM);
    t.o = fai_tensor_bshd(o, FAI_DTYPE_F32, QUERIES, HEADS_Q, DIM);
    t.lse = lse_tensor(lse);

    const size_t ws_size = fai_plan_workspace_size(plan);
    void *ws = malloc(ws_size ? ws_size : 1); /* any alignment will do */
    const fai_status st = ws ? fai_run(plan, &t, ws, ws_size) : FAI_ERR_NO_MEMORY;
    if (st != FAI_OK) fprintf(stderr, "run: %s\n", fai_last_error());
    free(ws);
    fai_plan_free(plan);
    return st != FAI_OK;
}

/* The larger of two errors; a NaN is larger than anything, so that it fails the check. */
static double worse(double worst, double err) { return err > worst || isnan(err) ? err : worst; }

int main(void) {
    static float q[QUERIES * ROW_Q], k[KEYS * ROW_KV], v[KEYS * ROW_KV];
    for (int i = 0; i < QUERIES * ROW_Q; i++)
        q[i] = 2 * value(3u * i); /* sharper softmax */
    for (int i = 0; i < KEYS * ROW_KV; i++) {
        k[i] = value(3u * i + 1);
        v[i] = value(3u * i + 2);
    }

    /* 1. One attention per key set, each with its LSE. */
    static float o_parts[2][QUERIES * ROW_Q], lse_parts[2][HEADS_Q * QUERIES];
    if (attend(q, k, v, 0, PREFIX, o_parts[0], lse_parts[0]) ||
        attend(q, k, v, PREFIX, KEYS - PREFIX, o_parts[1], lse_parts[1]))
        return 1;

    /* 2. Merge them: O is [batch, seq, heads, dim] by its strides, LSE by lse_tensor's. */
    static float o[QUERIES * ROW_Q], lse[HEADS_Q * QUERIES];
    const fai_tensor o_in[2] = {fai_tensor_bshd(o_parts[0], FAI_DTYPE_F32, QUERIES, HEADS_Q, DIM),
                                fai_tensor_bshd(o_parts[1], FAI_DTYPE_F32, QUERIES, HEADS_Q, DIM)};
    const fai_tensor lse_in[2] = {lse_tensor(lse_parts[0]), lse_tensor(lse_parts[1])};
    const fai_tensor o_out = fai_tensor_bshd(o, FAI_DTYPE_F32, QUERIES, HEADS_Q, DIM);
    const fai_tensor lse_out = lse_tensor(lse);
    if (fai_merge_states(2, o_in, lse_in, 1, QUERIES, HEADS_Q, DIM, &o_out, &lse_out) != FAI_OK) {
        fprintf(stderr, "merge: %s\n", fai_last_error());
        return 1;
    }

    /* 3. The naive reference over all keys: O and LSE = log sum_j e^(s_j). */
    double worst = 0;
    for (int i = 0; i < QUERIES; i++)
        for (int h = 0; h < HEADS_Q; h++) {
            const int hkv = h / (HEADS_Q / HEADS_KV);
            double s[KEYS], max = -INFINITY, sum = 0, ref[DIM] = {0};
            for (int j = 0; j < KEYS; j++) {
                s[j] = 0;
                for (int d = 0; d < DIM; d++)
                    s[j] += (double)q[i * ROW_Q + h * DIM + d] * k[j * ROW_KV + hkv * DIM + d];
                s[j] /= sqrt((double)DIM);
                max = fmax(max, s[j]);
            }
            for (int j = 0; j < KEYS; j++) {
                const double p = exp(s[j] - max);
                sum += p;
                for (int d = 0; d < DIM; d++)
                    ref[d] += p * v[j * ROW_KV + hkv * DIM + d];
            }
            for (int d = 0; d < DIM; d++)
                worst = worse(worst, fabs(o[i * ROW_Q + h * DIM + d] - ref[d] / sum));
            const double ref_lse = max + log(sum);
            worst = worse(worst, fabs(lse[h * QUERIES + i] - ref_lse) / fmax(1, fabs(ref_lse)));
        }
    printf("merge_partials: %d + %d keys merged, max error against all %d keys %.1e\n", PREFIX,
           KEYS - PREFIX, KEYS, worst);
    return worst < 1e-5 ? 0 : 1;
}
