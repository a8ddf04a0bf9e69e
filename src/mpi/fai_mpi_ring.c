/* fai_mpi_ring_attention: Q, K and V sharded in zig-zag chunks; K/V blocks travel the ring.
 *
 *   -- Step 1 --  local checks, one plan per (q chunk, kv chunk) pair that sees anything (made
 *                 before any exchange, so that a bad problem fails on every rank before the
 *                 ring starts), buffers, and the rank's own K/V packed into the first block
 *   -- Step 2 --  the ranks agree on the outcome (MPI_Allreduce)
 *   -- Step 3 --  R steps: send the block held to rank + 1 and receive the next from rank - 1
 *                 while computing the pairs of the block held (double-buffered); each pair's
 *                 partial is folded into its q chunk's running partial as soon as it is done,
 *                 in the ring's step order (fixed for a rank and a ring size, whatever the
 *                 arrival), so memory stays at three partials however long the ring
 *   -- Step 4 --  the ranks agree on the local runs, then each q chunk's running partial is
 *                 stored into O and LSE
 *
 * A block holds the two chunks of one rank: the scales of a quantized K and of a quantized V,
 * f32 [B, rows, Hkv] each (one per token and kv head, whatever shape the owner's scales have:
 * per kv head or per tensor they are repeated, so every block reads alike), then K [B, rows,
 * Hkv, D] and V [B, rows, Hkv, Dv], each part starting on a cache line; the block at step s
 * comes from rank (rank - s) mod R. */
#include "fai_mpi_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define RING_TAG 0x6661

typedef struct ring_call {
    MPI_Comm comm;
    int rank, size;
    const fai_problem *local;
    const fai_tensors *tensors;
    int64_t seq;
    int64_t chunks;                   /* 2R */
    fai_mpi_zigzag mine;              /* this rank's q chunks (and its own kv block) */
    int64_t dim_v;                    /* Dv resolved */
    int64_t k_row_bytes, v_row_bytes; /* bytes of one position's K (all kv heads), and of V */
    int k_scaled, v_scaled;           /* K (V) is quantized: its scales travel in the blocks */
    fai_plan **plans;                 /* [2 * chunks]: q chunk qc, kv chunk c at qc * chunks + c;
                                         NULL where the pair is skipped */
    float *running[2];                /* per q chunk: the merge of its pairs so far */
    int64_t folded[2];                /* pairs in running[qc] */
    float *scratch;                   /* a pair's partial before it is folded in */
    void *block[2];
    void *ws;
    size_t ws_size;
    fai_mpi__outcome outcome;
    fai_mpi_stats stats;
} ring_call;

/* K's channel scales into the signature, as a hash (FNV-1a over their bits): every rank
 * dequantizes the K blocks it receives with its own, so the ranks must hold the same. Absent on a
 * rank that reads none (no rows: fai takes NULL then) or has failed (its sizes may be what
 * failed). */
static void add_channel_scales(fai_mpi__signature *sig, const ring_call *call) {
    const char *name = "k_channel_scale (its values)";
    const fai_problem *pb = call->local;
    const fai_channel_scale *c = &call->tensors->k_channel_scale;
    if (call->outcome.status != FAI_OK || call->mine.rows == 0 || !pb->k_channel_scales ||
        !c->data) {
        fai_mpi__signature_add_absent(sig, name);
        return;
    }
    uint64_t hash = FAI_MPI_HASH_START;
    for (int64_t h = 0; h < pb->heads_kv; h++)
        hash = fai_mpi__hash_floats(hash, c->data + h * c->stride_head, pb->head_dim, 1);
    fai_mpi__signature_add(sig, name, fai_mpi__hash_value(hash));
}

static void describe_ring(const ring_call *call, fai_mpi__signature *sig) {
    memset(sig, 0, sizeof *sig);
    const fai_problem *pb = call->local;
    fai_mpi__signature_add(sig, "seq", call->seq);
    fai_mpi__signature_add(sig, "batch", pb ? pb->batch : 0);
    fai_mpi__signature_add(sig, "heads_q", pb ? pb->heads_q : 0);
    fai_mpi__signature_add(sig, "heads_kv", pb ? pb->heads_kv : 0);
    fai_mpi__signature_add(sig, "head_dim", pb ? pb->head_dim : 0);
    fai_mpi__signature_add(sig, "head_dim_v", call->dim_v);
    fai_mpi__signature_add(sig, "q_dtype", pb ? pb->q_dtype : 0);
    fai_mpi__signature_add(sig, "k_dtype", pb ? pb->k_dtype : 0);
    fai_mpi__signature_add(sig, "v_dtype", pb ? pb->v_dtype : 0);
    fai_mpi__signature_add(sig, "o_dtype", pb ? pb->o_dtype : 0);
    fai_mpi__signature_add(sig, "causal", pb ? pb->causal != FAI_CAUSAL_NONE : 0);
    fai_mpi__signature_add(sig, "window_left", pb ? pb->window_left : 0);
    fai_mpi__signature_add(sig, "window_right", pb ? pb->window_right : 0);
    fai_mpi__signature_add_float(sig, "scale", fai_mpi__scale_of(pb));
    const int checked = call->outcome.status == FAI_OK; /* pb and its tensors, by fai */
    fai_mpi__signature_add_modifiers(sig, pb, checked ? call->tensors : NULL);
    fai_mpi__signature_add(sig, "k_channel_scales", pb ? pb->k_channel_scales : 0);
    if (checked)
        add_channel_scales(sig, call);
    else
        fai_mpi__signature_add_absent(sig, "k_channel_scale (its values)");
}

/* Chunk c of the whole sequence: its first position and rows. */
static void chunk_of(const ring_call *call, int64_t c, int64_t *start, int64_t *len) {
    fai_mpi_split_range(call->seq, (int)call->chunks, (int)c, start, len);
}

/* Whether any query of q chunk qc sees any key of kv chunk kc. A query at p sees keys
 * [p - window_left, p + window_right] (right 0 under causal; -1 unbounded), so the chunk's
 * queries together see one interval of keys. */
static int pair_visible(const ring_call *call, int64_t qc, int64_t kc) {
    int64_t qs, ql, ks, kl;
    chunk_of(call, qc, &qs, &ql);
    chunk_of(call, kc, &ks, &kl);
    if (ql == 0 || kl == 0) return 0;
    const fai_problem *pb = call->local;
    const int64_t right = pb->causal != FAI_CAUSAL_NONE ? 0 : pb->window_right;
    if (right >= 0 && ks > qs + ql - 1 + right) return 0;
    if (pb->window_left >= 0 && ks + kl - 1 < qs - pb->window_left) return 0;
    return 1;
}

/* -- Step 1 -- */

static int ring_supported(ring_call *call) {
    const fai_problem *pb = call->local;
    const char *what = pb->seqlens_q || pb->seqlens_kv         ? "seqlens (padded lengths)"
                       : pb->cu_seqlens_q || pb->cu_seqlens_kv ? "cu_seqlens (packed rows)"
                       : pb->page_size != 0                    ? "page_size (paged K/V)"
                       : pb->mask_kind != FAI_MASK_NONE        ? "mask_kind (explicit masks)"
                       : pb->q_positions || pb->kv_positions   ? "q_positions / kv_positions"
                                                               : NULL;
    if (what)
        fai_mpi__outcome_fail(&call->outcome, FAI_ERR_UNSUPPORTED,
                              "ring attention takes dense, unmasked shards: local %s is set", what);
    return what == NULL;
}

static int check_ring_arguments(ring_call *call) {
    fai_mpi__outcome *out = &call->outcome;
    const fai_problem *pb = call->local;
    if (!pb || !call->tensors) {
        fai_mpi__outcome_fail(out, FAI_ERR_INVALID_ARG, "%s = NULL", !pb ? "local" : "tensors");
        return 0;
    }
    /* any other value is the plan's to judge, before it sizes anything */
    call->dim_v = pb->head_dim_v == FAI_HEAD_DIM_V_DEFAULT ? pb->head_dim : pb->head_dim_v;
    if (!ring_supported(call)) return 0;
    const fai_status status = fai_mpi_zigzag_layout(call->seq, call->size, call->rank, &call->mine);
    if (status != FAI_OK) {
        fai_mpi__outcome_fail(out, status, "%s", fai_mpi_last_error());
        return 0;
    }
    if (pb->seq_q != call->mine.rows || pb->seq_kv != call->mine.rows) {
        fai_mpi__outcome_fail(out, FAI_ERR_INVALID_ARG,
                              "%s = %lld is not this rank's %lld rows (chunks %lld and %lld of "
                              "seq = %lld over %d ranks)",
                              pb->seq_q != call->mine.rows ? "seq_q" : "seq_kv",
                              (long long)(pb->seq_q != call->mine.rows ? pb->seq_q : pb->seq_kv),
                              (long long)call->mine.rows, (long long)call->mine.chunk[0],
                              (long long)call->mine.chunk[1], (long long)call->seq, call->size);
        return 0;
    }
    /* the whole local problem against the caller's tensors: fai names what is wrong */
    fai_plan *plan = NULL;
    fai_status fs = fai_plan_create(pb, &plan);
    if (fs == FAI_OK) fs = fai_check_tensors(plan, call->tensors);
    fai_mpi__outcome_fai(out, fs);
    fai_plan_free(plan);
    return fs == FAI_OK;
}

static int plan_pair(ring_call *call, int64_t qc, int64_t kc, int32_t *q_pos, int32_t *kv_pos) {
    int64_t qs, ql, ks, kl;
    chunk_of(call, call->mine.chunk[qc], &qs, &ql);
    chunk_of(call, kc, &ks, &kl);
    fai_problem pb = *call->local;
    pb.seq_q = ql;
    pb.seq_kv = kl;
    pb.o_dtype = FAI_DTYPE_F32;
    pb.sinks = 0; /* they join once, when the chunk is stored */
    for (int64_t b = 0; b < pb.batch; b++) {
        q_pos[b] = (int32_t)qs;
        kv_pos[b] = (int32_t)ks;
    }
    pb.q_positions = q_pos;
    pb.kv_positions = kv_pos;
    const int64_t at = qc * call->chunks + kc;
    const fai_status status = fai_plan_create(&pb, &call->plans[at]);
    if (status != FAI_OK) {
        fai_mpi__outcome_fai(&call->outcome, status);
        return 0;
    }
    const size_t ws = fai_plan_workspace_size(call->plans[at]);
    if (ws > call->ws_size) call->ws_size = ws;
    return 1;
}

/* The running partial of each q chunk (one that sees no key stores O = 0 and LSE = -inf from
 * it), and one scratch partial when a chunk has more than one pair to fold: all allocated before
 * the ranks agree to start, so that nothing can fail once they write. */
static int allocate_partials(ring_call *call, const int64_t pairs[2]) {
    const fai_problem *pb = call->local;
    int64_t scratch_rows = 0;
    for (int64_t qc = 0; qc < 2; qc++) {
        if (call->mine.len[qc] == 0) continue;
        const fai_mpi__part_shape shape = {pb->batch, call->mine.len[qc], pb->heads_q, call->dim_v};
        call->running[qc] = fai_mpi__alloc(sizeof(float) * (size_t)fai_mpi__part_floats(&shape));
        if (!call->running[qc]) break;
        if (pairs[qc] > 1 && call->mine.len[qc] > scratch_rows) scratch_rows = call->mine.len[qc];
    }
    const fai_mpi__part_shape widest = {pb->batch, scratch_rows, pb->heads_q, call->dim_v};
    if (scratch_rows > 0)
        call->scratch = fai_mpi__alloc(sizeof(float) * (size_t)fai_mpi__part_floats(&widest));
    if ((call->mine.len[0] && !call->running[0]) || (call->mine.len[1] && !call->running[1]) ||
        (scratch_rows > 0 && !call->scratch)) {
        fai_mpi__outcome_fail(&call->outcome, FAI_ERR_NO_MEMORY,
                              "no memory for the partial results of %lld and %lld rows",
                              (long long)call->mine.len[0], (long long)call->mine.len[1]);
        return 0;
    }
    return 1;
}

static int plan_pairs(ring_call *call) {
    const int64_t batch = call->local->batch;
    int32_t *q_pos = fai_mpi__alloc(sizeof(int32_t) * (size_t)batch);
    int32_t *kv_pos = fai_mpi__alloc(sizeof(int32_t) * (size_t)batch);
    call->plans = calloc((size_t)(2 * call->chunks), sizeof(fai_plan *));
    int ok = q_pos && kv_pos && call->plans;
    if (!ok) fai_mpi__outcome_fail(&call->outcome, FAI_ERR_NO_MEMORY, "no memory for the plans");
    if (call->seq > INT32_MAX) {
        fai_mpi__outcome_fail(&call->outcome, FAI_ERR_OVERFLOW,
                              "seq = %lld exceeds the int32 positions", (long long)call->seq);
        ok = 0;
    }
    int64_t pairs[2] = {0, 0};
    for (int64_t qc = 0; ok && qc < 2; qc++)
        for (int64_t kc = 0; ok && kc < call->chunks; kc++) {
            int64_t ks, kl;
            chunk_of(call, kc, &ks, &kl);
            if (pair_visible(call, call->mine.chunk[qc], kc)) {
                ok = plan_pair(call, qc, kc, q_pos, kv_pos);
                pairs[qc]++;
            } else if (call->mine.len[qc] > 0 && kl > 0) {
                call->stats.pairs_skipped++;
            }
        }
    free(q_pos);
    free(kv_pos);
    return ok && allocate_partials(call, pairs);
}

static int64_t block_rows(const ring_call *call, int owner) {
    int64_t l0, l1, start;
    chunk_of(call, owner, &start, &l0);
    chunk_of(call, call->chunks - 1 - owner, &start, &l1);
    return l0 + l1;
}

/* Where the parts of the block of `owner` start, in bytes, and its size. */
typedef struct block_layout {
    int64_t k_scale, v_scale, k, v, bytes;
} block_layout;

static int64_t cache_line_up(int64_t bytes) { return (bytes + 63) / 64 * 64; }

static block_layout layout_of(const ring_call *call, int owner) {
    const int64_t rows = call->local->batch * block_rows(call, owner);
    const int64_t scale_bytes = rows * call->local->heads_kv * (int64_t)sizeof(float);
    block_layout l;
    l.k_scale = 0;
    l.v_scale = cache_line_up(call->k_scaled ? scale_bytes : 0);
    l.k = cache_line_up(l.v_scale + (call->v_scaled ? scale_bytes : 0));
    l.v = cache_line_up(l.k + rows * call->k_row_bytes);
    l.bytes = l.v + rows * call->v_row_bytes;
    return l;
}

static int64_t block_bytes(const ring_call *call, int owner) {
    return layout_of(call, owner).bytes;
}

/* One scale per token and kv head of rows [0, rows) of every batch, read through the caller's
 * fai_scale (any strides, zeros broadcasting), into a contiguous [B, rows, Hkv] array. */
static void pack_scales(float *dst, const fai_scale *src, int64_t batch, int64_t rows,
                        int64_t heads) {
    for (int64_t b = 0; b < batch; b++)
        for (int64_t s = 0; s < rows; s++)
            for (int64_t h = 0; h < heads; h++)
                *dst++ =
                    src->data[b * src->stride_batch + s * src->stride_seq + h * src->stride_head];
}

static int allocate_blocks(ring_call *call) {
    const fai_problem *pb = call->local;
    call->k_row_bytes = pb->heads_kv * pb->head_dim * (int64_t)fai_dtype_size(pb->k_dtype);
    call->v_row_bytes = pb->heads_kv * call->dim_v * (int64_t)fai_dtype_size(pb->v_dtype);
    call->k_scaled = fai_dtype_is_quantized(pb->k_dtype);
    call->v_scaled = fai_dtype_is_quantized(pb->v_dtype);
    /* blocks differ by up to two rows, and which rank holds the longest depends on seq */
    int64_t bytes = 0;
    for (int owner = 0; owner < call->size; owner++)
        if (block_bytes(call, owner) > bytes) bytes = block_bytes(call, owner);
    if (bytes > INT_MAX) {
        fai_mpi__outcome_fail(&call->outcome, FAI_ERR_OVERFLOW,
                              "a K/V block of %lld bytes exceeds MPI's int count: use more ranks",
                              (long long)bytes);
        return 0;
    }
    call->block[0] = fai_mpi__alloc((size_t)bytes);
    call->block[1] = fai_mpi__alloc((size_t)bytes);
    call->ws = fai_mpi__alloc(call->ws_size);
    if (!call->block[0] || !call->block[1] || !call->ws) {
        fai_mpi__outcome_fail(&call->outcome, FAI_ERR_NO_MEMORY,
                              "no memory for two K/V blocks of %lld bytes", (long long)bytes);
        return 0;
    }
    const int64_t rows = call->mine.rows, batch = pb->batch;
    const block_layout l = layout_of(call, call->rank);
    char *mine = call->block[0];
    memset(mine, 0, (size_t)l.bytes); /* the padding between the parts travels too */
    if (call->k_scaled)
        pack_scales((float *)(mine + l.k_scale), &call->tensors->k_scale, batch, rows,
                    pb->heads_kv);
    if (call->v_scaled)
        pack_scales((float *)(mine + l.v_scale), &call->tensors->v_scale, batch, rows,
                    pb->heads_kv);
    fai_mpi__pack_rows(mine + l.k, &call->tensors->k, batch, rows, pb->heads_kv, pb->head_dim);
    fai_mpi__pack_rows(mine + l.v, &call->tensors->v, batch, rows, pb->heads_kv, call->dim_v);
    return 1;
}

/* -- Step 3 -- */

/* K or V of the chunk at row `row0` of a block of `rows` rows. */
static fai_tensor block_view(void *base, fai_dtype dtype, int64_t rows, int64_t row0, int64_t heads,
                             int64_t dim) {
    fai_tensor t = fai_tensor_bshd(base, dtype, rows, heads, dim);
    t.data = (char *)base + (size_t)(row0 * heads * dim) * fai_dtype_size(dtype);
    return t;
}

/* The scales of the chunk at row `row0` of a block of `rows` rows (none when not `scaled`). */
static fai_scale block_scales(void *base, int scaled, int64_t rows, int64_t row0, int64_t heads) {
    fai_scale s;
    memset(&s, 0, sizeof s);
    if (!scaled) return s;
    s.data = (float *)base + row0 * heads;
    s.stride_batch = rows * heads;
    s.stride_seq = heads;
    s.stride_head = 1;
    return s;
}

static void run_pair(ring_call *call, void *block, int owner, int64_t qc, int64_t half) {
    const fai_problem *pb = call->local;
    const int64_t kc = half ? call->chunks - 1 - owner : owner;
    const int64_t at = qc * call->chunks + kc;
    if (!call->plans[at]) return;
    int64_t start, l0;
    chunk_of(call, owner, &start, &l0);
    const int64_t rows = block_rows(call, owner), row0 = half ? l0 : 0;
    const block_layout l = layout_of(call, owner);
    char *base = block;
    fai_tensors t = *call->tensors;
    t.sinks = NULL;
    t.q = fai_mpi__tensor_from_row(&call->tensors->q, qc ? call->mine.len[0] : 0);
    t.k = block_view(base + l.k, pb->k_dtype, rows, row0, pb->heads_kv, pb->head_dim);
    t.v = block_view(base + l.v, pb->v_dtype, rows, row0, pb->heads_kv, call->dim_v);
    t.k_scale = block_scales(base + l.k_scale, call->k_scaled, rows, row0, pb->heads_kv);
    t.v_scale = block_scales(base + l.v_scale, call->v_scaled, rows, row0, pb->heads_kv);
    const fai_mpi__part_shape shape = {pb->batch, call->mine.len[qc], pb->heads_q, call->dim_v};
    /* the chunk's first pair lands in its running partial, later ones in the scratch */
    float *running = call->running[qc];
    float *target = call->folded[qc] ? call->scratch : running;
    t.o = fai_mpi__part_o(target, &shape);
    t.lse = fai_mpi__part_lse(target, &shape);
    const double t0 = MPI_Wtime();
    const fai_status status = fai_run(call->plans[at], &t, call->ws, call->ws_size);
    call->stats.compute_seconds += MPI_Wtime() - t0;
    call->stats.pairs_computed++;
    fai_mpi__outcome_fai(&call->outcome, status);
    if (status != FAI_OK) return;
    if (target != running) { /* running = merge(running, scratch), in place */
        const double t1 = MPI_Wtime();
        float *both[2] = {running, call->scratch};
        fai_tensor views[6];
        const fai_tensor o = fai_mpi__part_o(running, &shape);
        const fai_tensor lse = fai_mpi__part_lse(running, &shape);
        const fai_status merged = fai_mpi__merge_parts(2, both, &shape, &o, &lse, views, NULL);
        call->stats.merge_seconds += MPI_Wtime() - t1;
        if (merged != FAI_OK)
            fai_mpi__outcome_fail(&call->outcome, merged, "%s", fai_mpi_last_error());
    }
    call->folded[qc]++;
}

/* The pairs of the block of `owner`. Between runs MPI is given a chance to move the transfers
 * on: most MPI libraries progress a large message only inside MPI calls. */
static void compute_block(ring_call *call, void *block, int owner, MPI_Request *requests,
                          int pending) {
    for (int64_t qc = 0; qc < 2; qc++)
        for (int64_t half = 0; half < 2; half++) {
            run_pair(call, block, owner, qc, half);
            int done = 0;
            if (pending) MPI_Testall(pending, requests, &done, MPI_STATUSES_IGNORE);
        }
}

static fai_status run_ring(ring_call *call) {
    const int right = (call->rank + 1) % call->size;
    const int left = (call->rank + call->size - 1) % call->size;
    for (int step = 0; step < call->size; step++) {
        const int owner = (call->rank - step + call->size) % call->size;
        const int next_owner = (owner + call->size - 1) % call->size;
        void *held = call->block[step & 1], *incoming = call->block[(step + 1) & 1];
        MPI_Request requests[2];
        int pending = 0;
        if (step + 1 < call->size) {
            const int in_bytes = (int)block_bytes(call, next_owner);
            const int out_bytes = (int)block_bytes(call, owner);
            int rc =
                MPI_Irecv(incoming, in_bytes, MPI_BYTE, left, RING_TAG, call->comm, &requests[0]);
            if (rc != MPI_SUCCESS) return fai_mpi__check_mpi(rc, "MPI_Irecv");
            rc = MPI_Isend(held, out_bytes, MPI_BYTE, right, RING_TAG, call->comm, &requests[1]);
            if (rc != MPI_SUCCESS) {
                /* the receive must not outlive the buffer it writes into */
                MPI_Cancel(&requests[0]);
                MPI_Wait(&requests[0], MPI_STATUS_IGNORE);
                return fai_mpi__check_mpi(rc, "MPI_Isend");
            }
            pending = 2;
            call->stats.bytes_sent += out_bytes;
        }
        compute_block(call, held, owner, requests, pending);
        const double t0 = MPI_Wtime();
        const int rc = pending ? MPI_Waitall(pending, requests, MPI_STATUSES_IGNORE) : MPI_SUCCESS;
        const double waited = MPI_Wtime() - t0;
        call->stats.wait_seconds += waited;
        call->stats.exchange_seconds += waited;
        if (rc != MPI_SUCCESS) {
            /* requests the failure left active must not outlive the blocks (freed on return) */
            for (int r = 0; r < pending; r++)
                if (requests[r] != MPI_REQUEST_NULL) {
                    MPI_Cancel(&requests[r]);
                    MPI_Wait(&requests[r], MPI_STATUS_IGNORE);
                }
            return fai_mpi__check_mpi(rc, "MPI_Waitall");
        }
    }
    return FAI_OK;
}

/* -- Step 4 -- */

/* The running partial of q chunk qc into O (its dtype) and LSE. */
static fai_status store_chunk(ring_call *call, int64_t qc) {
    const fai_problem *pb = call->local;
    const fai_mpi__part_shape shape = {pb->batch, call->mine.len[qc], pb->heads_q, call->dim_v};
    float *part = call->running[qc];
    /* the masks leave these queries nothing: O = 0, LSE = -inf */
    if (call->folded[qc] == 0) fai_mpi__part_empty(part, &shape);
    const int64_t row0 = qc ? call->mine.len[0] : 0;
    const fai_tensor o = fai_mpi__tensor_from_row(&call->tensors->o, row0);
    const fai_tensor lse = fai_mpi__tensor_from_row(&call->tensors->lse, row0);
    fai_tensor views[4];
    /* a ring's rows are all queries: every row takes its head's sink */
    const fai_tensor sink_lse = fai_mpi__sinks_per_head(call->tensors->sinks);
    return fai_mpi__merge_parts(1, &part, &shape, &o, &lse, views, pb->sinks ? &sink_lse : NULL);
}

static fai_status ring_attend(ring_call *call) {
    if (check_ring_arguments(call) && plan_pairs(call)) allocate_blocks(call);
    fai_mpi__signature sig;
    describe_ring(call, &sig);
    fai_status status = fai_mpi__agree(call->comm, &call->outcome, &sig, &call->stats.wait_seconds);
    if (status != FAI_OK) return status;
    status = run_ring(call);
    if (status != FAI_OK) return status;
    status = fai_mpi__agree(call->comm, &call->outcome, NULL, &call->stats.wait_seconds);
    const double t0 = MPI_Wtime();
    for (int64_t qc = 0; status == FAI_OK && qc < 2; qc++)
        if (call->mine.len[qc] > 0) status = store_chunk(call, qc);
    call->stats.merge_seconds += MPI_Wtime() - t0;
    return status;
}

static void free_ring(ring_call *call) {
    for (int64_t i = 0; call->plans && i < 2 * call->chunks; i++)
        fai_plan_free(call->plans[i]);
    free(call->plans);
    free(call->running[0]);
    free(call->running[1]);
    free(call->scratch);
    free(call->block[0]);
    free(call->block[1]);
    free(call->ws);
}

fai_status fai_mpi_ring_attention(MPI_Comm comm, const fai_problem *local, int64_t seq,
                                  const fai_tensors *tensors, fai_mpi_stats *stats) {
    fai_mpi__clear_error();
    if (stats) memset(stats, 0, sizeof *stats);
    const double t0 = MPI_Wtime();
    ring_call call;
    memset(&call, 0, sizeof call);
    call.comm = comm;
    call.local = local;
    call.tensors = tensors;
    call.seq = seq;
    fai_mpi__outcome_init(&call.outcome);
    fai_status status = fai_mpi__comm_rank_size(comm, &call.rank, &call.size);
    call.chunks = 2 * (int64_t)call.size;
    call.stats.steps = call.size;
    if (status == FAI_OK) status = ring_attend(&call);
    free_ring(&call);
    call.stats.total_seconds = MPI_Wtime() - t0;
    if (stats) *stats = call.stats;
    return status;
}
