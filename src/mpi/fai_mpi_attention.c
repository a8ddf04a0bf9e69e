/* fai_mpi_attention: K/V sharded by sequence, the same Q on every rank.
 *
 *   -- Step 1 --  local checks, the positions of the shard and its plan; the ranks agree on the
 *                 outcome and on what they must hold alike (when the queries are placed from
 *                 the whole sequence's length, they then agree on it, MAX of each sequence's
 *                 kv_start + shard length, and the positions and the plan follow)
 *   -- Step 2 --  fai on the shard, into an f32 partial O and LSE
 *   -- Step 3 --  the ranks agree on the outcome (MPI_Allreduce), then exchange the partials
 *                 (MPI_Allgather, or MPI_Gather to a root) and merge them in rank order */
#include "fai_mpi_internal.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct shard_call {
    MPI_Comm comm;
    int rank, size, root;
    const fai_problem *local;
    const fai_tensors *tensors;
    const int32_t *kv_start, *q_start;
    fai_mpi__part_shape shape;
    int32_t *q_pos, *kv_pos; /* [batch]: what the plan is given */
    fai_plan *plan;          /* the shard's plan, with its positions */
    int64_t *kv_end;         /* [batch]: the shard's end, then the agreed sequence length */
    float *part;             /* this rank's partial result */
    float *gathered;         /* size parts, on the ranks that merge */
    float **part_ptrs;       /* [size]: each part in gathered, on the ranks that merge */
    float *sink_lse;         /* the sinks' part's LSE, on the ranks that merge sinks */
    fai_tensor *views;       /* [2 * size]: the merge's views of them */
    fai_mpi__outcome outcome;
    fai_mpi_stats stats;
} shard_call;

static int receives_result(const shard_call *call) {
    return call->root < 0 || call->root == call->rank;
}

static int64_t query_length(const fai_problem *pb, int64_t b) {
    if (pb->cu_seqlens_q) return (int64_t)pb->cu_seqlens_q[b + 1] - pb->cu_seqlens_q[b];
    return pb->seqlens_q ? pb->seqlens_q[b] : pb->seq_q;
}

static int64_t key_length(const fai_problem *pb, int64_t b) {
    if (pb->cu_seqlens_kv) return (int64_t)pb->cu_seqlens_kv[b + 1] - pb->cu_seqlens_kv[b];
    return pb->seqlens_kv ? pb->seqlens_kv[b] : pb->seq_kv;
}

/* What every rank must hold alike: the shapes of the exchanged partials, the receivers, the
 * masks (shards merged under different masks would be a different attention), the heads, dims,
 * dtypes and scale of the header's contract, and whether the queries are placed by q_start
 * (which decides the collectives that follow). */
static void describe_call(const shard_call *call, fai_mpi__signature *sig) {
    memset(sig, 0, sizeof *sig);
    const fai_problem *pb = call->local;
    fai_mpi__signature_add(sig, "batch", pb ? pb->batch : 0);
    fai_mpi__signature_add(sig, "heads_q", pb ? pb->heads_q : 0);
    fai_mpi__signature_add(sig, "heads_kv", pb ? pb->heads_kv : 0);
    fai_mpi__signature_add(sig, "seq_q", pb ? pb->seq_q : 0);
    fai_mpi__signature_add(sig, "head_dim", pb ? pb->head_dim : 0);
    fai_mpi__signature_add(sig, "head_dim_v", call->shape.dim_v);
    fai_mpi__signature_add(sig, "q_dtype", pb ? pb->q_dtype : 0);
    fai_mpi__signature_add(sig, "k_dtype", pb ? pb->k_dtype : 0);
    fai_mpi__signature_add(sig, "v_dtype", pb ? pb->v_dtype : 0);
    fai_mpi__signature_add(sig, "o_dtype", pb ? pb->o_dtype : 0);
    fai_mpi__signature_add_float(sig, "scale", fai_mpi__scale_of(pb));
    fai_mpi__signature_add(sig, "q_start (given or NULL)", call->q_start != NULL);
    fai_mpi__signature_add(sig, "cu_seqlens_q (packed queries)", pb && pb->cu_seqlens_q);
    fai_mpi__signature_add(sig, "causal", pb ? pb->causal : 0);
    fai_mpi__signature_add(sig, "window_left", pb ? pb->window_left : 0);
    fai_mpi__signature_add(sig, "window_right", pb ? pb->window_right : 0);
    fai_mpi__signature_add(sig, "root", call->root);
    /* the arrays are read only once fai has judged the sizes they are read by */
    fai_mpi__signature_add_modifiers(sig, pb,
                                     call->outcome.status == FAI_OK ? call->tensors : NULL);
}

/* -- Step 1 -- */

/* Query and key positions of every sequence. Positions are only ever compared with each other,
 * so a sequence whose queries would start before 0 moves up whole. */
static void place_shard(shard_call *call) {
    const fai_problem *pb = call->local;
    for (int64_t b = 0; b < pb->batch; b++) {
        int64_t q_begin = call->q_start ? call->q_start[b]
                          : pb->causal == FAI_CAUSAL_TOP_LEFT
                              ? 0
                              : call->kv_end[b] - query_length(pb, b);
        const int64_t shift = q_begin < 0 ? -q_begin : 0;
        q_begin += shift;
        /* a shard without keys of the sequence places none: its kv_start tells nothing */
        const int64_t kv_begin = key_length(pb, b) == 0 ? 0 : call->kv_start[b] + shift;
        if (kv_begin > INT32_MAX) {
            fai_mpi__outcome_fail(&call->outcome, FAI_ERR_OVERFLOW,
                                  "sequence %lld: its keys would start at %lld (kv_start[%lld] = "
                                  "%d moved up by %lld), past int32",
                                  (long long)b, (long long)kv_begin, (long long)b,
                                  call->kv_start[b], (long long)shift);
            return;
        }
        if (q_begin > INT32_MAX) { /* only placed from the length the ranks agreed on: q_start
                                      holds int32 values, and is not negative */
            fai_mpi__outcome_fail(&call->outcome, FAI_ERR_OVERFLOW,
                                  "sequence %lld: its queries would start at %lld (the whole "
                                  "sequence's length %lld, the largest kv_start + shard "
                                  "length over the ranks, minus %lld queries), past int32",
                                  (long long)b, (long long)q_begin, (long long)call->kv_end[b],
                                  (long long)query_length(pb, b));
            return;
        }
        call->q_pos[b] = (int32_t)q_begin;
        call->kv_pos[b] = (int32_t)kv_begin;
    }
}

/* The shard's plan: its problem with the positions, into f32 partials, without sinks (they join
 * once, in the merge). */
static void plan_shard(shard_call *call) {
    fai_problem pb = *call->local;
    pb.o_dtype = FAI_DTYPE_F32;
    pb.sinks = 0;
    pb.q_positions = call->q_pos;
    pb.kv_positions = call->kv_pos;
    fai_mpi__outcome_fai(&call->outcome, fai_plan_create(&pb, &call->plan));
}

static void check_arguments(shard_call *call) {
    fai_mpi__outcome *out = &call->outcome;
    const fai_problem *pb = call->local;
    if (!pb || !call->tensors || !call->kv_start) {
        fai_mpi__outcome_fail(out, FAI_ERR_INVALID_ARG, "%s = NULL",
                              !pb              ? "local"
                              : !call->tensors ? "tensors"
                                               : "kv_start");
        return;
    }
    /* any other value is the plan's to judge, before it sizes anything */
    call->shape.dim_v = pb->head_dim_v == FAI_HEAD_DIM_V_DEFAULT ? pb->head_dim : pb->head_dim_v;
    if (pb->q_positions || pb->kv_positions)
        fai_mpi__outcome_fail(out, FAI_ERR_INVALID_ARG,
                              "local->%s is set: fai_mpi_attention fills the positions from "
                              "kv_start and q_start",
                              pb->q_positions ? "q_positions" : "kv_positions");
    else if (pb->o_dtype != FAI_DTYPE_F32 && pb->o_dtype != FAI_DTYPE_F16 &&
             pb->o_dtype != FAI_DTYPE_BF16) /* the shard's own plan writes f32 partials */
        fai_mpi__outcome_fail(out, FAI_ERR_INVALID_ARG,
                              "local->o_dtype = %d is not f32, f16 or bf16 (FAI_DTYPE_*)",
                              (int)pb->o_dtype);
    else if (call->root < FAI_MPI_ALL_RANKS || call->root >= call->size)
        fai_mpi__outcome_fail(out, FAI_ERR_INVALID_ARG, "root = %d is outside [-1, %d)", call->root,
                              call->size);
    if (out->status != FAI_OK) return;
    /* the problem as fai judges it (its sizes and its arrays) before anything here reads arrays
     * by them; with q_start the shard's own plan, with its positions, follows */
    fai_plan *plan = NULL;
    fai_mpi__outcome_fai(out, fai_plan_create(pb, &plan));
    fai_plan_free(plan);
    if (out->status == FAI_OK) fai_mpi__check_sinks(out, pb, call->tensors);
    if (out->status != FAI_OK) return;
    const size_t batch = (size_t)pb->batch;
    call->q_pos = fai_mpi__alloc(sizeof(int32_t) * batch);
    call->kv_pos = fai_mpi__alloc(sizeof(int32_t) * batch);
    call->kv_end = fai_mpi__alloc(sizeof(int64_t) * batch);
    if (!call->q_pos || !call->kv_pos || !call->kv_end) {
        fai_mpi__outcome_fail(out, FAI_ERR_NO_MEMORY,
                              "no memory for the positions of %zu "
                              "sequences",
                              batch);
        return;
    }
    for (int64_t b = 0; b < pb->batch; b++) {
        if (call->kv_start[b] < 0 || (call->q_start && call->q_start[b] < 0)) {
            const int kv = call->kv_start[b] < 0;
            fai_mpi__outcome_fail(out, FAI_ERR_INVALID_ARG, "%s[%lld] = %d is negative",
                                  kv ? "kv_start" : "q_start", (long long)b,
                                  kv ? call->kv_start[b] : call->q_start[b]);
            return;
        }
        /* an empty shard tells nothing of the length, wherever it starts; a negative length is
         * left for fai_plan_create to name */
        const int64_t len = key_length(pb, b);
        call->kv_end[b] = len > 0 ? call->kv_start[b] + len : 0;
    }
    /* a rank's own bad field is reported as such, before the ranks compare what they hold */
    if (call->q_start) { /* the positions are known: the shard's plan itself */
        place_shard(call);
        if (out->status == FAI_OK) plan_shard(call);
    } /* else they wait for the agreed lengths, and only move the diagonal */
}

/* Without q_start the queries are placed from the whole sequence's length, which no rank knows
 * alone: the largest shard end over the ranks (after the first agreement, so every rank is
 * here). */
static fai_status agree_sequence_lengths(shard_call *call) {
    const double t0 = MPI_Wtime();
    const int rc = MPI_Allreduce(MPI_IN_PLACE, call->kv_end, (int)call->local->batch, MPI_INT64_T,
                                 MPI_MAX, call->comm);
    call->stats.wait_seconds += MPI_Wtime() - t0;
    return fai_mpi__check_mpi(rc, "MPI_Allreduce");
}

/* -- Step 2 -- */

static int allocate_parts(shard_call *call) {
    const int64_t rows = fai_mpi__part_rows(&call->shape);
    const int64_t floats = fai_mpi__part_floats(&call->shape);
    if (rows > INT_MAX || floats > (int64_t)(SIZE_MAX / sizeof(float)) / call->size) {
        fai_mpi__outcome_fail(&call->outcome, FAI_ERR_OVERFLOW,
                              "%lld rows of partial results exceed MPI's counts", (long long)rows);
        return 0;
    }
    call->part = fai_mpi__alloc(sizeof(float) * (size_t)floats);
    const size_t size = (size_t)call->size;
    if (receives_result(call)) {
        call->gathered = fai_mpi__alloc(sizeof(float) * (size_t)floats * size);
        call->part_ptrs = fai_mpi__alloc(sizeof(float *) * size);
        call->views = fai_mpi__alloc(sizeof(fai_tensor) * 2 * (size + 1));
        if (call->local->sinks) call->sink_lse = fai_mpi__alloc(sizeof(float) * (size_t)rows);
    }
    if (!call->part ||
        (receives_result(call) && (!call->gathered || !call->part_ptrs || !call->views ||
                                   (call->local->sinks && !call->sink_lse)))) {
        fai_mpi__outcome_fail(&call->outcome, FAI_ERR_NO_MEMORY,
                              "no memory for partial results (%lld floats per rank)",
                              (long long)floats);
        return 0;
    }
    return 1;
}

static int outputs_ok(shard_call *call) {
    const fai_tensors *t = call->tensors;
    if (!receives_result(call) || fai_mpi__part_rows(&call->shape) == 0) return 1;
    if (!fai_mpi__output_ok(&call->outcome, &t->o, call->local->o_dtype, 0, "o", &call->shape))
        return 0;
    return !t->lse.data ||
           (fai_mpi__output_ok(&call->outcome, &t->lse, FAI_DTYPE_F32, 1, "lse", &call->shape) &&
            fai_mpi__outputs_apart(&call->outcome, &t->o, &t->lse, &call->shape));
}

static void run_shard(shard_call *call) {
    const fai_problem *pb = call->local;
    fai_plan *plan = call->plan;
    call->shape.batch = pb->cu_seqlens_q ? 1 : pb->batch;
    call->shape.seq = pb->seq_q;
    call->shape.heads = pb->heads_q;
    void *ws = NULL;
    const size_t ws_size = fai_plan_workspace_size(plan);
    if (outputs_ok(call) && allocate_parts(call)) {
        ws = fai_mpi__alloc(ws_size);
        if (!ws) {
            fai_mpi__outcome_fail(&call->outcome, FAI_ERR_NO_MEMORY,
                                  "no memory for a workspace of %zu bytes", ws_size);
        } else {
            fai_tensors t = *call->tensors;
            t.sinks = NULL; /* the plan has none: they join in the merge */
            t.o = fai_mpi__part_o(call->part, &call->shape);
            t.lse = fai_mpi__part_lse(call->part, &call->shape);
            const double t0 = MPI_Wtime();
            fai_mpi__outcome_fai(&call->outcome, fai_run(plan, &t, ws, ws_size));
            call->stats.compute_seconds += MPI_Wtime() - t0;
            call->stats.pairs_computed = 1;
        }
    }
    free(ws);
}

/* -- Step 3 -- */

/* The sinks' part's LSE: the head's sink on the rows of a sequence's queries, -inf on the rows
 * past its length (or past the packed rows), which fai leaves empty (O = 0, LSE = -inf) and
 * the merge must too. */
static fai_tensor sink_lse_of(shard_call *call) {
    const fai_problem *pb = call->local;
    const fai_mpi__part_shape *shape = &call->shape;
    float *row = call->sink_lse;
    for (int64_t b = 0; b < shape->batch; b++) {
        const int64_t queries =
            pb->cu_seqlens_q ? pb->cu_seqlens_q[pb->batch] : query_length(pb, b);
        for (int64_t i = 0; i < shape->seq; i++)
            for (int64_t h = 0; h < shape->heads; h++)
                *row++ = i < queries ? call->tensors->sinks[h] : -INFINITY;
    }
    fai_tensor lse = fai_mpi__part_lse(call->part, shape);
    lse.data = call->sink_lse;
    return lse;
}

static fai_status exchange_and_merge(shard_call *call) {
    fai_status status = fai_mpi__gather_parts(call->comm, call->root, call->part, &call->shape,
                                              call->gathered, &call->stats);
    if (status != FAI_OK || !receives_result(call)) return status;
    const int64_t floats = fai_mpi__part_floats(&call->shape);
    for (int p = 0; p < call->size; p++)
        call->part_ptrs[p] = call->gathered + (size_t)p * (size_t)floats;
    const double t0 = MPI_Wtime();
    const fai_tensor sink_lse = call->sink_lse ? sink_lse_of(call) : (fai_tensor){0};
    status =
        fai_mpi__merge_parts(call->size, call->part_ptrs, &call->shape, &call->tensors->o,
                             &call->tensors->lse, call->views, call->sink_lse ? &sink_lse : NULL);
    call->stats.merge_seconds += MPI_Wtime() - t0;
    return status;
}

/* Every rank must hold the same queries of every sequence (their parts are merged row by row):
 * their lengths, and where given their start positions; a rank with other values would make a
 * silently wrong merge. Each value and its negation go through one MPI_MAX, giving the largest
 * and the smallest over the ranks, in blocks of sequences (the batch is agreed already, so every
 * rank makes the same calls). */
static fai_status agree_queries(shard_call *call) {
    enum { BLOCK = 128 };
    const fai_problem *pb = call->local;
    const int per = call->q_start ? 4 : 2;
    int64_t values[4 * BLOCK];
    for (int64_t b0 = 0; b0 < pb->batch; b0 += BLOCK) {
        const int64_t n = pb->batch - b0 < BLOCK ? pb->batch - b0 : BLOCK;
        for (int64_t i = 0; i < n; i++) {
            const int64_t length = query_length(pb, b0 + i);
            values[per * i] = length, values[per * i + 1] = -length;
            if (call->q_start)
                values[per * i + 2] = call->q_start[b0 + i],
                                 values[per * i + 3] = -(int64_t)call->q_start[b0 + i];
        }
        const double t0 = MPI_Wtime();
        const int rc =
            MPI_Allreduce(MPI_IN_PLACE, values, (int)(per * n), MPI_INT64_T, MPI_MAX, call->comm);
        call->stats.wait_seconds += MPI_Wtime() - t0;
        const fai_status status = fai_mpi__check_mpi(rc, "MPI_Allreduce");
        if (status != FAI_OK) return status;
        for (int64_t i = 0; i < n; i++)
            for (int k = 0; k < per; k += 2)
                if (values[per * i + k] != -values[per * i + k + 1])
                    return fai_mpi__fail(FAI_ERR_INVALID_ARG,
                                         "the ranks disagree on %s of sequence %lld: from %lld to "
                                         "%lld",
                                         k == 0 ? "the query length (seq_q, seqlens_q or "
                                                  "cu_seqlens_q)"
                                                : "q_start",
                                         (long long)(b0 + i), (long long)-values[per * i + k + 1],
                                         (long long)values[per * i + k]);
    }
    return FAI_OK;
}

/* A shard's keys of a sequence as [begin, end) global positions, and the rank holding them. */
typedef struct shard_keys {
    int64_t begin, end;
    int rank;
} shard_keys;

static int by_begin(const void *a, const void *b) {
    const shard_keys *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : x->rank - y->rank;
}

/* No two ranks may hold keys at one global position of a sequence: the merge would count such
 * keys twice. (Positions no rank holds are allowed: such keys are not attended, as a cache that
 * dropped them would have it.) Every rank gathers every rank's shards, in blocks of sequences,
 * and judges them alike. */
static fai_status agree_shards_apart(shard_call *call) {
    enum { BLOCK = 128 };
    const fai_problem *pb = call->local;
    int64_t mine[2 * BLOCK];
    int64_t *all = fai_mpi__alloc(sizeof(int64_t) * 2 * BLOCK * (size_t)call->size);
    shard_keys *keys = fai_mpi__alloc(sizeof(shard_keys) * (size_t)call->size);
    int ok = all && keys;
    /* every rank learns whether every rank has the memory, before the first gather */
    const double t_alloc = MPI_Wtime();
    int rc = MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, call->comm);
    call->stats.wait_seconds += MPI_Wtime() - t_alloc;
    fai_status status = fai_mpi__check_mpi(rc, "MPI_Allreduce");
    if (status == FAI_OK && !ok)
        status =
            fai_mpi__fail(FAI_ERR_NO_MEMORY, "no memory for the shards of %d ranks", call->size);
    for (int64_t b0 = 0; status == FAI_OK && b0 < pb->batch; b0 += BLOCK) {
        const int64_t n = pb->batch - b0 < BLOCK ? pb->batch - b0 : BLOCK;
        for (int64_t i = 0; i < n; i++) {
            const int64_t length = key_length(pb, b0 + i);
            mine[2 * i] = call->kv_start[b0 + i];
            mine[2 * i + 1] = call->kv_start[b0 + i] + (length > 0 ? length : 0);
        }
        const double t0 = MPI_Wtime();
        rc = MPI_Allgather(mine, (int)(2 * n), MPI_INT64_T, all, (int)(2 * n), MPI_INT64_T,
                           call->comm);
        call->stats.wait_seconds += MPI_Wtime() - t0;
        status = fai_mpi__check_mpi(rc, "MPI_Allgather");
        for (int64_t i = 0; status == FAI_OK && i < n; i++) {
            int count = 0;
            for (int r = 0; r < call->size; r++) {
                const int64_t *at = all + (size_t)r * (size_t)(2 * n) + 2 * i;
                if (at[1] > at[0]) keys[count++] = (shard_keys){at[0], at[1], r};
            }
            qsort(keys, (size_t)count, sizeof *keys, by_begin);
            for (int k = 1; k < count; k++)
                if (keys[k].begin < keys[k - 1].end) {
                    status = fai_mpi__fail(
                        FAI_ERR_INVALID_ARG,
                        "the shards of sequence %lld overlap: rank %d holds its keys [%lld, "
                        "%lld) and rank %d [%lld, %lld) (kv_start and the shards' lengths)",
                        (long long)(b0 + i), keys[k - 1].rank, (long long)keys[k - 1].begin,
                        (long long)keys[k - 1].end, keys[k].rank, (long long)keys[k].begin,
                        (long long)keys[k].end);
                    break;
                }
        }
    }
    free(all);
    free(keys);
    return status;
}

static fai_status attend(shard_call *call) {
    check_arguments(call);
    fai_mpi__signature sig;
    describe_call(call, &sig);
    /* the arguments and the signature first: the collectives that follow depend on them */
    fai_status status = fai_mpi__agree(call->comm, &call->outcome, &sig, &call->stats.wait_seconds);
    if (status == FAI_OK) status = agree_queries(call);
    if (status == FAI_OK) status = agree_shards_apart(call);
    if (status != FAI_OK) return status;
    if (!call->q_start) {
        status = agree_sequence_lengths(call);
        if (status != FAI_OK) return status;
        place_shard(call);
        if (call->outcome.status == FAI_OK) plan_shard(call);
    }
    if (call->outcome.status == FAI_OK) run_shard(call);
    status = fai_mpi__agree(call->comm, &call->outcome, NULL, &call->stats.wait_seconds);
    if (status != FAI_OK) return status;
    return exchange_and_merge(call);
}

fai_status fai_mpi_attention(MPI_Comm comm, const fai_problem *local, const int32_t *kv_start,
                             const int32_t *q_start, const fai_tensors *tensors, int root,
                             fai_mpi_stats *stats) {
    fai_mpi__clear_error();
    if (stats) memset(stats, 0, sizeof *stats);
    const double t0 = MPI_Wtime();
    shard_call call;
    memset(&call, 0, sizeof call);
    call.comm = comm;
    call.root = root;
    call.local = local;
    call.tensors = tensors;
    call.kv_start = kv_start;
    call.q_start = q_start;
    call.stats.steps = 1;
    fai_mpi__outcome_init(&call.outcome);
    fai_status status = fai_mpi__comm_rank_size(comm, &call.rank, &call.size);
    if (status == FAI_OK) status = attend(&call);
    fai_plan_free(call.plan);
    free(call.q_pos);
    free(call.kv_pos);
    free(call.kv_end);
    free(call.part);
    free(call.gathered);
    free(call.part_ptrs);
    free(call.views);
    free(call.sink_lse);
    call.stats.total_seconds = MPI_Wtime() - t0;
    if (stats) *stats = call.stats;
    return status;
}
