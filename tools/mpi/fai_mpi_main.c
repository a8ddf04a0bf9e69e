/* fai-mpi: fai across the ranks of MPI_COMM_WORLD. Dispatches to one command per file; every rank
 * runs the command and exits with the same status. */
#include "fai_mpi_tool.h"

#include <stdio.h>
#include <string.h>

static void print_usage(FILE *out) {
    fprintf(out, "usage: mpirun -np R fai-mpi <command> [options]\n"
                 "\n"
                 "commands:\n"
                 "  run    attention on .npy files, sharded over the ranks (fai-mpi run --help)\n"
                 "  bench  time the steps of sharded decode and ring prefill against a model\n");
}

static int dispatch(int argc, char **argv, int rank) {
    if (argc < 2) {
        if (rank == 0) print_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        if (rank == 0) print_usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "run")) return ft_mpi_cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return ft_mpi_cmd_bench(argc - 1, argv + 1);
    if (rank == 0) {
        fprintf(stderr, "fai-mpi: unknown command '%s'\n", cmd);
        print_usage(stderr);
    }
    return 2;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const int rc = dispatch(argc, argv, rank);
    MPI_Finalize();
    return rc;
}
