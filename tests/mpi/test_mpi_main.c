/* Runs every registered MPI test on every rank of MPI_COMM_WORLD (or those whose name contains
 * argv[1]). A test fails if it fails on any rank; rank 0 prints one line per test and the
 * summary, and every rank exits with the same status. Meant for mpirun -np 4. */
#include "test_mpi_util.h"

#include <string.h>

#define MAX_TESTS 128

static struct {
    const char *name;
    test_fn fn;
} tests[MAX_TESTS];
static int test_count;

int test_rank, test_size;

void test_register(const char *name, test_fn fn) {
    if (test_count < MAX_TESTS) {
        tests[test_count].name = name;
        tests[test_count].fn = fn;
        test_count++;
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &test_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &test_size);
    const char *filter = argc > 1 ? argv[1] : NULL;
    int passed = 0, failed = 0;
    for (int i = 0; i < test_count; i++) {
        if (filter && !strstr(tests[i].name, filter)) continue;
        int test_failed = 0;
        tests[i].fn(&test_failed);
        MPI_Allreduce(MPI_IN_PLACE, &test_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (test_rank == 0) {
            printf("%s %s\n", test_failed ? "FAIL" : "ok  ", tests[i].name);
            fflush(stdout);
        }
        if (test_failed)
            failed++;
        else
            passed++;
    }
    if (test_rank == 0) printf("%d passed, %d failed (%d ranks)\n", passed, failed, test_size);
    MPI_Finalize();
    return failed ? 1 : 0;
}
