/* Runs every registered MPI test on every rank of MPI_COMM_WORLD (or those whose name contains
 * argv[1]). A test fails if it fails on any rank; rank 0 prints one line per test and the
 * summary, and every rank exits with the same status. Meant for mpirun -np 4. */
#include "test_mpi_util.h"

int test_rank, test_size;

/* A test fails when it fails on any rank. */
static int failed_on_any_rank(int failed) {
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return failed;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &test_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &test_size);
    const char *filter = argc > 1 ? argv[1] : NULL;
    int passed = 0, failed = 0;
    if (test_run_registered(filter, NULL, failed_on_any_rank, test_rank == 0, &passed, &failed)) {
        MPI_Finalize();
        return 1;
    }
    if (test_rank == 0) printf("%d passed, %d failed (%d ranks)\n", passed, failed, test_size);
    MPI_Finalize();
    return failed ? 1 : 0;
}
