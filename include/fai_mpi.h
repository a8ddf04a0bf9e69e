/*
 * fai_mpi.h - fai across processes: sequence-parallel attention on MPI (libfai_mpi).
 *
 * Two ways to spread one attention over the ranks of a communicator, both built on fai's global
 * positions (fai_problem.q_positions / kv_positions) and on fai_merge_states:
 *
 *   fai_mpi_attention       K/V sharded by sequence, the same Q on every rank (decode, chunked
 *                           prefill, prefill over a sharded cache). Each rank attends over its
 *                           shard; the partial results (O in f32, LSE) are merged exactly, in
 *                           rank order, on every rank or on one root.
 *   fai_mpi_ring_attention  Q, K and V all sharded (prefill, self-attention): zig-zag chunks of
 *                           the sequence, K/V blocks passed around the ring while the current
 *                           block is computed, partials folded in the ring's step order.
 *
 * Both are collective: every rank of the communicator calls them with the same collective
 * arguments (documented per function), from one thread at a time per communicator. fai's own
 * worker threads never call MPI, so MPI_Init (MPI_THREAD_SINGLE or FUNNELED) is enough. The
 * ring's point-to-point messages use one tag on comm: a program that keeps its own receives
 * (MPI_ANY_TAG) pending on the same communicator should give fai one of its own (MPI_Comm_dup).
 *
 * Errors. A failure on any rank - a problem fai_plan_create refuses, tensors fai_check_tensors
 * refuses, ranks that disagree on a shape, an allocation - makes every rank return the same
 * status, and fai_mpi_last_error() gives on every rank the message of the first failing rank (in
 * rank order), "rank R: <fai's message naming the field and the value>". The ranks agree on the
 * status with a small MPI_Allreduce before any attention data is exchanged and again after the
 * local compute, so no rank waits for a peer that gave up. Nothing is written to O or LSE unless
 * every rank succeeded. MPI errors themselves follow the communicator's error handler (by default
 * MPI aborts the job); under MPI_ERRORS_RETURN a failed MPI call returns FAI_ERR_UNSUPPORTED with
 * MPI's error text on the ranks where it failed, whose requests are cancelled first; its
 * neighbours may then wait in theirs (MPI gives no way to tell them).
 *
 * Quantized K and V (int8, e4m3, e5m2) work in both, with their scales (fai_tensors.k_scale,
 * v_scale) given for the rank's own keys: fai_mpi_attention reads them with the shard, and the
 * ring sends them around with the K/V blocks.
 *
 * Score modifiers. local->softcap and local->alibi apply within each shard or chunk (ALiBi over
 * the global positions, so every key gets the bias it has in the whole sequence);
 * local->sinks (with tensors->sinks) are counted once per row, in the final merge: the shards
 * and the ring's pairs run without them (rows past a sequence's queries stay O = 0, LSE = -inf,
 * as fai leaves them). The ranks must hold the same ALiBi slopes and sinks
 * (compared by a hash of their bits, like the other values they must agree on). Bit-packed masks
 * shard with the keys like the byte masks (fai_mpi_attention; the ring takes no explicit mask).
 * A receiving rank's O and LSE are checked as fai_run checks its outputs (aligned, each row its
 * own place, O and LSE apart), before the ranks agree.
 *
 * Determinism. Partial results are merged in a fixed order (rank order; in the ring, the order
 * of its steps, which is fixed for a rank and a ring size), never in arrival order, and each rank's
 * fai_run is deterministic for its plan, so the result does not depend on timing or thread counts,
 * and every rank that receives it receives the same bits.
 *
 * This header is separate from fai.h, which stays free of MPI. Link with libfai_mpi, libfai and
 * the MPI library.
 */
#ifndef FAI_MPI_H
#define FAI_MPI_H

#include <mpi.h>

#include "fai.h"

#ifdef __cplusplus
extern "C" {
#endif

/* root argument of fai_mpi_attention: every rank receives the merged result (allgather). */
#define FAI_MPI_ALL_RANKS (-1)

/* What one call did on this rank (all times in seconds, from MPI_Wtime). */
typedef struct fai_mpi_stats {
    int64_t bytes_sent;      /* attention data this rank sent (partials, or K/V blocks) */
    int64_t steps;           /* exchange steps: 1 for fai_mpi_attention, the ranks in the ring */
    int64_t pairs_computed;  /* local fai runs: 1, or (q chunk, kv chunk) pairs in the ring */
    int64_t pairs_skipped;   /* ring pairs left out as fully masked (no fai run) */
    double compute_seconds;  /* in fai_run */
    double wait_seconds;     /* blocked in MPI: status agreement, the exchange, ring waits */
    double exchange_seconds; /* the part of wait_seconds spent on attention data: the gather of
                                the partials, or the ring's waits for its K/V transfers (which
                                also wait for a slower neighbour) */
    double merge_seconds;    /* in fai_merge_states, writing O and LSE */
    double total_seconds;    /* the whole call */
} fai_mpi_stats;

/* The message of the last failing fai_mpi call of this thread, the same on every rank: "rank R:
 * ..." for the first failing rank R, or a message about the ranks' disagreement. Empty after a
 * successful call. Valid until this thread's next fai_mpi call. */
const char *fai_mpi_last_error(void);

/* ---------------------------------------------------------------------------------------------
 * Sharding helpers (local, not collective)
 * ------------------------------------------------------------------------------------------- */

/* Contiguous sharding: rank `rank` of `ranks` gets [*start, *start + *len) of [0, total); the
 * first total % ranks ranks get one element more, so lengths differ by at most one. Used for key
 * ranges (fai_mpi_attention), and for pages of a paged cache. */
fai_status fai_mpi_split_range(int64_t total, int ranks, int rank, int64_t *start, int64_t *len);

/* Zig-zag layout of ring attention: a sequence of `seq` positions is cut into 2 * ranks chunks
 * (the first seq % (2 * ranks) of them one row longer), and rank r holds chunks r and
 * 2 * ranks - 1 - r, of Q, K and V alike, in that order: its local rows [0, len[0]) are global
 * rows [start[0], start[0] + len[0]) and its rows [len[0], rows) are [start[1], start[1] +
 * len[1]). Under a causal mask this gives every rank the same work. */
typedef struct fai_mpi_zigzag {
    int64_t chunk[2]; /* chunk indices: rank and 2 * ranks - 1 - rank */
    int64_t start[2]; /* global position of each chunk's first row */
    int64_t len[2];   /* rows of each chunk */
    int64_t rows;     /* len[0] + len[1]: the rank's seq_q and seq_kv */
} fai_mpi_zigzag;

fai_status fai_mpi_zigzag_layout(int64_t seq, int ranks, int rank, fai_mpi_zigzag *layout);

/* ---------------------------------------------------------------------------------------------
 * K/V sharded, Q replicated
 * ------------------------------------------------------------------------------------------- */

/* Attention of the same queries over keys sharded across the ranks of comm (collective).
 *
 * Each rank holds a disjoint shard of every sequence's keys, a contiguous run of global positions
 * (shards may be empty; together they are the whole sequence, or the keys of it that are kept:
 * a position no shard holds is not attended; shards that overlap are refused):
 *   local     the problem of the shard, as for fai_plan_create: the same batch, heads, seq_q,
 *             head dims, dtypes, scale, causal and window on every rank; seq_kv / seqlens_kv /
 *             cu_seqlens_kv are the shard's own lengths, and a paged shard has its own
 *             page_size, num_pages and pages_per_seq. q_positions and kv_positions must be NULL:
 *             they are filled here. threads, workers, split and tiles apply to the local run.
 *   kv_start  int32 [batch]: global position of the shard's first key of each sequence.
 *   q_start   int32 [batch]: global position of each sequence's first query (given on every
 *             rank, or NULL on every rank); NULL places the queries as fai does without
 *             shards: the last seqlens_q[b] positions of the whole sequence, or from position
 *             0 with FAI_CAUSAL_TOP_LEFT. The whole sequence's length is then agreed across
 *             the ranks: the largest kv_start[b] + shard length over the shards that hold keys
 *             of it. When the queries would start before position 0 (more queries than keys),
 *             all positions of that sequence move up by the same amount, which changes no
 *             mask.
 *   tensors   q: the same queries on every rank. k, v: the shard (dense or packed rows, or the
 *             shard's page pools with tensors->block_table, its own table of its own pools).
 *             k_scale, v_scale: for a quantized K / V, the shard's scales, addressed like its
 *             K / V (its rows, or its pools' pages); per kv head or per tensor they may be the
 *             same on every rank, per token each rank gives those of its own keys.
 *             mask: an explicit mask, if any, covers the shard's keys only (column j is the
 *             shard's key j). o (dtype local->o_dtype: f32, f16 or bf16) and lse (optional, f32,
 *             [B, Hq, Sq] by strides as in fai_tensors): the merged result, written on the ranks
 *             that receive it and read on no other (o.data may be NULL there).
 *   root      FAI_MPI_ALL_RANKS: every rank receives the result (MPI_Allgather of the partials,
 *             every rank merges them); or a rank: only it receives and merges (MPI_Gather).
 *             The same on every rank.
 *   stats     NULL, or filled with this rank's bytes and times.
 *
 * Each rank runs fai on its shard with its positions into an f32 partial O and LSE (allocated
 * here: (B Sq Hq (Dv + 1)) floats, and on the receiving ranks that times the ranks), then the
 * partials are merged by fai_merge_states in rank order and stored once in o's dtype. Equal to fai
 * on the whole sequence within fai's tolerances; bitwise the same on every rank and run.
 * Collectives: one MPI_Allreduce before the local run (the ranks' status and the arguments
 * that must match, q_start given or NULL among them), one for every 128 sequences' query
 * lengths and q_start (ranks holding other queries of a sequence are refused: their parts would
 * merge into a wrong result), an MPI_Allreduce and an MPI_Allgather of every 128 sequences'
 * shards (each rank's first key and length, to refuse overlaps), one more MPI_Allreduce for the
 * sequence lengths when q_start is NULL, one after the local run, then the gather; an MPI_Bcast
 * of the message on failure. */
fai_status fai_mpi_attention(MPI_Comm comm, const fai_problem *local, const int32_t *kv_start,
                             const int32_t *q_start, const fai_tensors *tensors, int root,
                             fai_mpi_stats *stats);

/* ---------------------------------------------------------------------------------------------
 * Ring attention: Q, K and V sharded
 * ------------------------------------------------------------------------------------------- */

/* Self-attention over a sequence of `seq` positions whose queries, keys and values are spread
 * over the ranks of comm in the zig-zag layout of fai_mpi_zigzag_layout (collective).
 *
 *   local    the same on every rank but for nothing: batch, heads_q, heads_kv, head_dim(_v),
 *            q/k/v/o dtypes, scale, causal (either corner: with Sq = Skv they coincide), window;
 *            seq_q = seq_kv = this rank's zig-zag rows. Dense padded batches only: no
 *            seqlens, cu_seqlens, paging, explicit mask or positions (refused with
 *            FAI_ERR_UNSUPPORTED). threads, workers, split and tiles apply to the local runs.
 *   seq      the whole sequence's length S (any S >= 0; chunks differ by at most one row).
 *   tensors  q, k, v: the rank's rows of chunks r and 2R - 1 - r, [B, rows, H, D] by strides; o
 *            and lse (optional): the result for those same rows, written on every rank.
 *            k_scale, v_scale: for a quantized K / V, the scales of the rank's rows, any
 *            fai_scale shape (per token, per kv head, per tensor: each rank its own).
 *            k_channel_scale (local->k_channel_scales): the same on every rank, which reads
 *            every rank's K blocks with its own (compared, by a hash of their values); a rank
 *            whose chunks hold no rows reads none, and may pass none.
 *   stats    NULL, or filled with this rank's bytes and times.
 *
 * In R steps each rank computes its two q chunks against the K/V block (two chunks) it holds
 * while sending that block to rank r + 1 and receiving the next from rank r - 1 (MPI_Isend /
 * MPI_Irecv into a second buffer, progressed between the local runs). A (q chunk, kv chunk) pair
 * is run by fai with the chunks' global positions, unless the masks leave it nothing to see
 * (under causal: keys after every query), in which case it is skipped. Each pair's partial is
 * folded into its q chunk's running partial by fai_merge_states as soon as it is computed, in
 * step order. Memory: two K/V blocks and three f32 partials (chunk rows x Hq x (Dv + 1)),
 * whatever the number of ranks. A quantized K or V travels with its scales, one f32 per token
 * and kv head whatever their shape on the owner (per kv head and per tensor scales are repeated
 * into the block), so that every block is read alike: 4 bytes per row and kv head more for each
 * quantized tensor. Collectives: one MPI_Allreduce before
 * the ring, one after the local runs; an MPI_Bcast of the message on failure. */
fai_status fai_mpi_ring_attention(MPI_Comm comm, const fai_problem *local, int64_t seq,
                                  const fai_tensors *tensors, fai_mpi_stats *stats);

#ifdef __cplusplus
}
#endif

#endif /* FAI_MPI_H */
