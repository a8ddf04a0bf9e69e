/* fai-mpi: the `fai` tool's run and bench across the ranks of MPI_COMM_WORLD (public APIs only:
 * fai.h and fai_mpi.h). Each command returns the process exit status, the same on every rank:
 * 0 success, 2 bad input or usage, 1 a failed check. */
#ifndef FAI_MPI_TOOL_H
#define FAI_MPI_TOOL_H

#include "fai_mpi.h"
#include "fai_run_args.h"

int ft_mpi_cmd_run(int argc, char **argv);   /* fai-mpi run: attention on .npy files */
int ft_mpi_cmd_bench(int argc, char **argv); /* fai-mpi bench: steps timed and modelled */

/* Collective: 0 when every rank's rc is 0; otherwise 2 on every rank, with the message of the
 * first failing rank copied into every rank's args->error. */
int ft_mpi_tool_agree(int rc, ft_run_args *args);

/* One rank's share of the keys of a `fai run` problem, K/V sharded by contiguous ranges of Skv
 * (dense) or of each sequence's pages (paged), with its own copy of K, V, the block table, the
 * per-token scales of a quantized K and V (scales per kv head or per tensor are shared with the
 * inputs) and the mask columns of its keys. The whole K, V and mask are released once copied. */
typedef struct ft_mpi_kv_shard {
    fai_problem problem; /* the rank's problem: its lengths, pool, mask */
    fai_tensors tensors; /* q: the whole Q; k, v, block_table, mask: the shard's */
    int32_t *kv_start;   /* [B] */
    int32_t *seqlens_kv; /* [B]: the shard's lengths */
    int32_t *table;      /* paged: [B, pages_per_seq] */
    void *k, *v, *mask;
    float *k_scale, *v_scale; /* per-token scales of the shard's keys, or NULL */
} ft_mpi_kv_shard;

/* Cuts this rank's shard out of the loaded inputs. Returns 0, or 2 with the failure in args. */
int ft_mpi_kv_shard_make(ft_run_args *args, ft_run_inputs *inputs, const ft_run_problem *problem,
                         int rank, int ranks, ft_mpi_kv_shard *shard);
void ft_mpi_kv_shard_free(ft_mpi_kv_shard *shard);

#endif
