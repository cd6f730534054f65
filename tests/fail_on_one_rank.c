/* fail_on_one_rank.c: an MPI Check program that goes wrong on purpose on the last
 * rank, for tests/test_harness_failure.sh (it is not a test by itself).
 *   fail_on_one_rank.mpi assert  the last rank fails an mg_assert_all; the others pass
 *   fail_on_one_rank.mpi crash   the last rank aborts while the others wait in a barrier
 *   fail_on_one_rank.mpi hang    the last rank sleeps while the others wait in a barrier
 *   fail_on_one_rank.mpi pass    nothing goes wrong (the control run)
 * In every mode but pass, the run must end non-zero, quickly, and name the rank. */
#include "testutil.h"

#include <string.h>
#include <unistd.h>

static const char *mode = "pass";

START_TEST(test_one_rank_goes_wrong) {
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int culprit = rank == size - 1;
    if (culprit && strcmp(mode, "crash") == 0) {
        fprintf(stderr, "rank %d: aborting on purpose\n", rank);
        abort();
    }
    if (culprit && strcmp(mode, "hang") == 0) {
        fprintf(stderr, "rank %d: hanging on purpose\n", rank);
        for (;;) sleep(1);
    }
    if (strcmp(mode, "crash") == 0 || strcmp(mode, "hang") == 0) MPI_Barrier(MPI_COMM_WORLD);
    int value = culprit && strcmp(mode, "assert") == 0 ? 41 : 42;
    mg_assert_all(value == 42, "rank %d computed %d, want 42", rank, value);
}
END_TEST

START_TEST(test_later_collective_still_runs) {
    // after a failed test every rank still reaches the next collective together
    int one = 1, n = 0, size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&one, &n, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    mg_assert_all(n == size, "allreduce gave %d", n);
}
END_TEST

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    if (argc > 1) mode = argv[1];
    Suite *s = suite_create("fail_on_one_rank");
    const TTest *tests[] = {test_one_rank_goes_wrong, test_later_collective_still_runs, NULL};
    mg_test_case(s, mode, tests);
    int status = mg_test_run_mpi(s);
    MPI_Finalize();
    return status;
}
