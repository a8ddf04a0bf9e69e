/*
 * chunked_prefill.c - a long prompt processed in chunks.
 *
 * An engine that prefills a long prompt in chunks (to bound memory or to interleave decode steps)
 * appends each chunk's K and V rows to the cache, then attends the chunk's queries over the whole
 * cache so far with bottom-right causal masking: the chunk's last query sees every cached key,
 * its first one sees the keys up to its own position. The chunks' outputs together must equal
 * one causal attention over the whole prompt, which this example checks, and that one against
 * a naive reference.
 */
#include <fai.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum {
    PROMPT = 100,           /* prompt length */
    CHUNK = 32,             /* tokens per chunk (the last one is shorter) */
    HEADS_Q = 8,            /* query heads */
    HEADS_KV = 2,           /* K/V heads */
    DIM = 32,               /* head dimension */
    ROW_Q = HEADS_Q * DIM,  /* floats of one token's Q (or O) row */
    ROW_KV = HEADS_KV * DIM /* floats of one token's K (or V) row */
};

/* Deterministic test data in [-1, 1). */
static float value(uint32_t i) {
    i *= 2654435761u;
    i ^= i >> 15;
    i *= 2246822519u;
    i ^= i >> 13;
    return (float)(i & 0xffff) / 32768.0f - 1.0f;
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

/* A problem of n_q queries over n_kv keys, all tensors f32, bottom-right causal. */
static fai_problem causal_problem(int64_t n_q, int64_t n_kv) {
    fai_problem pb;
    fai_problem_init(&pb);
    pb.batch = 1;
    pb.heads_q = HEADS_Q;
    pb.heads_kv = HEADS_KV;
    pb.seq_q = n_q;
    pb.seq_kv = n_kv;
    pb.head_dim = DIM;
    pb.k_dtype = pb.v_dtype = FAI_DTYPE_F32;
    pb.causal = FAI_CAUSAL_BOTTOM_RIGHT;
    return pb;
}

/* The larger of two errors; a NaN is larger than anything, so that it fails the check. */
static double worse(double worst, double err) { return err > worst || isnan(err) ? err : worst; }

/* Naive causal attention of query i, head h over keys 0..i, in double. */
static void reference(const float *q, const float *k, const float *v, int i, int h, double *out) {
    const int hkv = h / (HEADS_Q / HEADS_KV);
    double scores[PROMPT], max = -INFINITY, sum = 0;
    for (int j = 0; j <= i; j++) {
        double s = 0;
        for (int d = 0; d < DIM; d++)
            s += (double)q[i * ROW_Q + h * DIM + d] * k[j * ROW_KV + hkv * DIM + d];
        scores[j] = s / sqrt((double)DIM);
        if (scores[j] > max) max = scores[j];
    }
    for (int d = 0; d < DIM; d++)
        out[d] = 0;
    for (int j = 0; j <= i; j++) {
        const double p = exp(scores[j] - max);
        sum += p;
        for (int d = 0; d < DIM; d++)
            out[d] += p * v[j * ROW_KV + hkv * DIM + d];
    }
    for (int d = 0; d < DIM; d++)
        out[d] /= sum;
}

int main(void) {
    /* The prompt's projections, as the model would produce them chunk by chunk. */
    static float q[PROMPT * ROW_Q], k[PROMPT * ROW_KV], v[PROMPT * ROW_KV];
    for (int i = 0; i < PROMPT * ROW_Q; i++)
        q[i] = value(3u * i);
    for (int i = 0; i < PROMPT * ROW_KV; i++) {
        k[i] = value(3u * i + 1);
        v[i] = value(3u * i + 2);
    }

    /* The KV cache: a dense [PROMPT, HEADS_KV, DIM] buffer that grows chunk by chunk. */
    static float k_cache[PROMPT * ROW_KV], v_cache[PROMPT * ROW_KV];
    static float o_chunked[PROMPT * ROW_Q], o_whole[PROMPT * ROW_Q];

    for (int start = 0; start < PROMPT; start += CHUNK) {
        const int len = PROMPT - start < CHUNK ? PROMPT - start : CHUNK;
        const int cached = start + len; /* keys in the cache once this chunk is appended */

        /* 1. Append the chunk's K and V rows to the cache. */
        for (int i = start * ROW_KV; i < cached * ROW_KV; i++) {
            k_cache[i] = k[i];
            v_cache[i] = v[i];
        }

        /* 2. The chunk's queries over the whole cache, bottom-right causal: query i of the chunk
         * sees keys j <= i + cached - len, i.e. up to its own position in the prompt. The chunk's
         * Q and O are views into the prompt's buffers: only the pointer moves. */
        const fai_problem pb = causal_problem(len, cached);
        fai_tensors t = {0};
        t.q = fai_tensor_bshd(q + start * ROW_Q, FAI_DTYPE_F32, len, HEADS_Q, DIM);
        t.o = fai_tensor_bshd(o_chunked + start * ROW_Q, FAI_DTYPE_F32, len, HEADS_Q, DIM);
        t.k = fai_tensor_bshd(k_cache, FAI_DTYPE_F32, cached, HEADS_KV, DIM);
        t.v = fai_tensor_bshd(v_cache, FAI_DTYPE_F32, cached, HEADS_KV, DIM);
        if (attend(&pb, &t)) return 1;
    }

    /* The same prompt in one shot: causal attention of all queries over all keys. */
    const fai_problem pb = causal_problem(PROMPT, PROMPT);
    fai_tensors t = {0};
    t.q = fai_tensor_bshd(q, FAI_DTYPE_F32, PROMPT, HEADS_Q, DIM);
    t.o = fai_tensor_bshd(o_whole, FAI_DTYPE_F32, PROMPT, HEADS_Q, DIM);
    t.k = fai_tensor_bshd(k, FAI_DTYPE_F32, PROMPT, HEADS_KV, DIM);
    t.v = fai_tensor_bshd(v, FAI_DTYPE_F32, PROMPT, HEADS_KV, DIM);
    if (attend(&pb, &t)) return 1;

    /* Chunked against one-shot, and one-shot against the naive reference. */
    double chunked_err = 0, whole_err = 0;
    for (int i = 0; i < PROMPT; i++)
        for (int h = 0; h < HEADS_Q; h++) {
            double ref[DIM];
            reference(q, k, v, i, h, ref);
            for (int d = 0; d < DIM; d++) {
                const int at = i * ROW_Q + h * DIM + d;
                chunked_err = worse(chunked_err, fabs((double)o_chunked[at] - o_whole[at]));
                whole_err = worse(whole_err, fabs(o_whole[at] - ref[d]));
            }
        }
    printf("chunked_prefill: %d tokens in chunks of %d; chunked vs one-shot %.1e, one-shot vs "
           "reference %.1e\n",
           PROMPT, CHUNK, chunked_err, whole_err);
    return chunked_err < 1e-5 && whole_err < 1e-5 ? 0 : 1;
}
