/* Private helpers of libfai_mpi, which uses only the public API of libfai (fai.h). */
#ifndef FAI_MPI_INTERNAL_H
#define FAI_MPI_INTERNAL_H

#include "fai_mpi.h"

#include <stddef.h>
#include <stdint.h>

#define FAI_MPI_MESSAGE_LEN 512

/* -- errors (fai_mpi_error.c) ------------------------------------------------------------------ */

/* Records status and a formatted message for fai_mpi_last_error, and returns status. */
fai_status fai_mpi__fail(fai_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void fai_mpi__clear_error(void);

/* FAI_OK for MPI_SUCCESS; otherwise FAI_ERR_UNSUPPORTED with "<call>: <MPI's error text>". */
fai_status fai_mpi__check_mpi(int rc, const char *call);
/* This rank's place in comm (FAI_ERR_INVALID_ARG for MPI_COMM_NULL). */
fai_status fai_mpi__comm_rank_size(MPI_Comm comm, int *rank, int *size);

/* A rank's own outcome before the ranks agree: the first failure it met and its message. */
typedef struct fai_mpi__outcome {
    fai_status status;
    char message[FAI_MPI_MESSAGE_LEN];
} fai_mpi__outcome;

void fai_mpi__outcome_init(fai_mpi__outcome *outcome);
/* Records a failure unless one is recorded already (the first cause is the one reported). */
void fai_mpi__outcome_fail(fai_mpi__outcome *outcome, fai_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Records the failure of a libfai call with libfai's own message (fai_last_error). */
void fai_mpi__outcome_fai(fai_mpi__outcome *outcome, fai_status status);

/* -- agreement (fai_mpi_agree.c) --------------------------------------------------------------- */

#define FAI_MPI_SIGNATURE_MAX 32

/* Values every rank must hold alike (shapes that size the exchanged buffers, masks that give the
 * merge its meaning), each with the name used when the ranks disagree. */
typedef struct fai_mpi__signature {
    int count;
    int64_t value[FAI_MPI_SIGNATURE_MAX];
    const char *name[FAI_MPI_SIGNATURE_MAX];
    int is_float[FAI_MPI_SIGNATURE_MAX]; /* value holds a float's bits: compared exactly, shown
                                            as the float */
    int absent[FAI_MPI_SIGNATURE_MAX];   /* this rank holds no such value */
} fai_mpi__signature;

void fai_mpi__signature_add(fai_mpi__signature *signature, const char *name, int64_t value);
void fai_mpi__signature_add_float(fai_mpi__signature *signature, const char *name, float value);
/* A value this rank does not hold: it reads none (a rank without rows reads no scales), or it
 * has failed already, and its failure is what the ranks will agree on (values are not read
 * through sizes fai refused). The ranks that hold the value are compared among themselves. */
void fai_mpi__signature_add_absent(fai_mpi__signature *signature, const char *name);
/* FNV-1a over the bits of `count` floats `stride` apart, continuing `hash` (start with
 * FAI_MPI_HASH_START): values the ranks must hold alike, compared as one signature value. */
#define FAI_MPI_HASH_START UINT64_C(1469598103934665603)
uint64_t fai_mpi__hash_floats(uint64_t hash, const float *values, int64_t count, int64_t stride);
/* A hash as a signature value (nonnegative: the agreement also negates it). */
static inline int64_t fai_mpi__hash_value(uint64_t hash) { return (int64_t)(hash >> 1); }
/* The score modifiers every rank must hold alike into the signature: softcap, the alibi and sinks
 * switches, and a hash of the slopes' and sinks' values (each rank biases its keys with its own
 * slopes and weighs its rows with its own sinks: ranks that differ would merge rows of no single
 * attention, or receive different results). t NULL: the values are absent (the rank has failed,
 * and its arrays are not read). */
void fai_mpi__signature_add_modifiers(fai_mpi__signature *sig, const fai_problem *pb,
                                      const fai_tensors *t);
/* The scale a problem asks for, FAI_SCALE_DEFAULT resolved (1/sqrt(D)), as the ranks compare it:
 * the default on one rank and the same value written out on another agree. 0 for NULL. */
float fai_mpi__scale_of(const fai_problem *pb);

/* Collective: every rank passes its outcome (and the same number of signature values). Returns
 * FAI_OK on every rank when every rank succeeded and the signatures match; otherwise the same
 * status on every rank with fai_mpi_last_error() set alike: the first failing rank's message, or
 * the first signature value the ranks disagree on. Adds the time spent to *wait_seconds. */
fai_status fai_mpi__agree(MPI_Comm comm, const fai_mpi__outcome *outcome,
                          const fai_mpi__signature *signature, double *wait_seconds);

/* -- tensors (fai_mpi_tensor.c) ---------------------------------------------------------------- */

/* The same tensor starting at sequence row `row` (a pointer offset; strides unchanged). */
fai_tensor fai_mpi__tensor_from_row(const fai_tensor *tensor, int64_t row);

/* Copies rows [0, rows) of every batch and head of a strided [B, S, H, dim] tensor into a
 * contiguous [B, rows, H, dim] buffer. */
void fai_mpi__pack_rows(void *dst, const fai_tensor *src, int64_t batch, int64_t rows,
                        int64_t heads, int64_t dim);

/* malloc that never returns NULL for 0 bytes, and refuses sizes that overflowed. */
void *fai_mpi__alloc(size_t bytes);

/* -- partial results (fai_mpi_merge.c) --------------------------------------------------------- */

/* One partial result in a float buffer: O f32 [batch, seq, heads, dim_v] followed by its LSE f32
 * [batch, seq, heads]. For packed queries batch is 1 and seq the packed rows. */
typedef struct fai_mpi__part_shape {
    int64_t batch, seq, heads, dim_v;
} fai_mpi__part_shape;

/* 1 if `tensor` can receive an output of `dtype` over `shape` (data set and aligned to its
 * elements, dtype, strides none negative, within 2^63 bytes and giving each row its own place:
 * fai_merge_states would refuse them after the ranks agreed, or write rows over each other);
 * else 0, with the failure, naming `name`, recorded in the outcome. */
int fai_mpi__output_ok(fai_mpi__outcome *outcome, const fai_tensor *tensor, fai_dtype dtype,
                       int is_lse, const char *name, const fai_mpi__part_shape *shape);
/* 1 if O and LSE (checked by fai_mpi__output_ok) share no memory, else 0 with the failure. */
int fai_mpi__outputs_apart(fai_mpi__outcome *outcome, const fai_tensor *o, const fai_tensor *lse,
                           const fai_mpi__part_shape *shape);
int64_t fai_mpi__part_rows(const fai_mpi__part_shape *shape);
int64_t fai_mpi__part_floats(const fai_mpi__part_shape *shape);
/* The views fai_run writes and fai_merge_states reads: (b, i, h) of the LSE at
 * b * stride_batch + i * stride_seq + h * stride_head in both conventions. */
fai_tensor fai_mpi__part_o(float *part, const fai_mpi__part_shape *shape);
fai_tensor fai_mpi__part_lse(float *part, const fai_mpi__part_shape *shape);
/* Fills a part with what attention over no keys gives: O = 0, LSE = -inf. */
void fai_mpi__part_empty(float *part, const fai_mpi__part_shape *shape);

/* Merges `count` parts (parts[p] points to part p, merged in that order) into o (its dtype) and
 * lse (NULL data skips it); views is room for 2 * (count + 1) tensors, so that nothing is
 * allocated once the ranks have agreed to write. sink_lse (or NULL): the attention sinks, merged
 * once as one more part whose O is 0 and whose LSE, indexed as the parts' LSE, is this tensor
 * (the parts themselves are computed without them). */
fai_status fai_mpi__merge_parts(int64_t count, float *const *parts,
                                const fai_mpi__part_shape *shape, const fai_tensor *o,
                                const fai_tensor *lse, fai_tensor *views,
                                const fai_tensor *sink_lse);
/* The sinks (f32 [heads]) as a sink part's LSE: the head's sink on every row, for parts
 * whose rows are all queries. */
fai_tensor fai_mpi__sinks_per_head(const float *sinks);

/* Checks the problem's per-head arrays of sinks against the tensors (given exactly when the
 * problem has sinks, each finite or -inf); records a failure in out. */
void fai_mpi__check_sinks(fai_mpi__outcome *out, const fai_problem *pb, const fai_tensors *t);

/* Collective: the parts of all ranks, in rank order, into `gathered` (size * part floats) on
 * every rank (root < 0) or on root alone. Counts bytes sent and the time into *stats. */
fai_status fai_mpi__gather_parts(MPI_Comm comm, int root, const float *part,
                                 const fai_mpi__part_shape *shape, float *gathered,
                                 fai_mpi_stats *stats);

#endif
