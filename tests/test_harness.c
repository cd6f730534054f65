/* test_harness.c: the MPI test harness checks itself (tests/test_harness.mpi).
 * Run by tests/mpi-run.sh at 1, 2 and 4 ranks. It checks that
 * - mg_test_agree() is the AND of every rank's verdict, on every rank;
 * - every rank sees the same verdict (gathered and compared);
 * - MPI_Allreduce of floats across ranks equals a naive sum of each rank's data;
 * - mg_test_close() tells close from not close and names the worst element;
 * - the suite really runs in Check's no-fork mode (MPI breaks under fork). */
#include "testutil.h"

#include <string.h>

static int rank(void) {
    int r;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

static int world(void) {
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

START_TEST(test_agree_is_and_of_all_ranks) {
    int n = world(), r = rank();
    ck_assert_int_eq(mg_test_agree(1), 1);
    ck_assert_int_eq(mg_test_agree(0), 0);
    // only the last rank says no: everyone must hear no
    ck_assert_int_eq(mg_test_agree(r != n - 1), 0);
    // only rank 0 says yes: still no unless rank 0 is alone
    ck_assert_int_eq(mg_test_agree(r == 0), n == 1 ? 1 : 0);
    // any non-zero value counts as yes
    ck_assert_int_eq(mg_test_agree(r + 7), 1);
}
END_TEST

START_TEST(test_every_rank_sees_the_same_verdict) {
    int n = world(), r = rank();
    // each rank's own opinion differs (odd ranks fail), the agreed verdict must not
    int verdict = mg_test_agree(r % 2 == 0);
    int *all = malloc(sizeof(int) * (size_t)n);
    ck_assert_ptr_nonnull(all);
    MPI_Allgather(&verdict, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    int same = 1;
    for (int i = 0; i < n; i++) same &= all[i] == all[0];
    free(all);
    mg_assert_all(same, "ranks disagree on the verdict");
    mg_assert_all(verdict == (n == 1), "verdict %d with %d rank(s)", verdict, n);
}
END_TEST

START_TEST(test_allreduce_matches_naive_sum) {
    enum { N = 1000 };
    int n = world(), r = rank();
    float *mine = malloc(sizeof(float) * N), *sum = malloc(sizeof(float) * N);
    float *want = calloc(N, sizeof(float)), *other = malloc(sizeof(float) * N);
    ck_assert(mine && sum && want && other);
    // integer-valued data: the sum is exact whatever the reduction order
    mg_test_fill_int(mine, N, 100 + (uint64_t)r);
    for (int q = 0; q < n; q++) {
        mg_test_fill_int(other, N, 100 + (uint64_t)q);
        for (int i = 0; i < N; i++) want[i] += other[i];
    }
    int rc = MPI_Allreduce(mine, sum, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    char msg[256] = "";
    int ok = rc == MPI_SUCCESS && mg_test_close(sum, want, N, 0, 0, msg, sizeof msg);
    mg_assert_all(ok, "allreduce at %d ranks: %s", n, msg);

    long long rank_sum = 0, mine_ll = r;
    MPI_Allreduce(&mine_ll, &rank_sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    mg_assert_all(rank_sum == (long long)n * (n - 1) / 2, "sum of ranks %lld", rank_sum);
    free(mine);
    free(sum);
    free(want);
    free(other);
}
END_TEST

START_TEST(test_close_helper) {
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 4};
    char msg[256] = "";
    ck_assert(mg_test_close(a, b, 4, 0, 0, msg, sizeof msg));
    b[2] = 3.5f;
    ck_assert(!mg_test_close(a, b, 4, 1e-3, 1e-3, msg, sizeof msg));
    ck_assert_msg(strstr(msg, "element 2") != NULL, "message: %s", msg);
    ck_assert(mg_test_close(a, b, 4, 0.2, 0, NULL, 0)); // |3 - 3.5| <= 0.2 * 3.5
    float nan_value = NAN;
    ck_assert(!mg_test_close(&nan_value, a, 1, 1, 1, NULL, 0)); // NaN is never close
}
END_TEST

START_TEST(test_fill_is_deterministic) {
    float x[64], y[64];
    mg_test_fill(x, 64, 5);
    mg_test_fill(y, 64, 5);
    ck_assert_mem_eq(x, y, sizeof x);
    int in_range = 1;
    for (int i = 0; i < 64; i++) in_range &= x[i] >= -1.0f && x[i] < 1.0f;
    ck_assert(in_range);
    mg_test_fill(y, 64, 6);
    ck_assert(memcmp(x, y, sizeof x) != 0);
    // and the same on every rank
    float x0[64];
    memcpy(x0, x, sizeof x);
    MPI_Bcast(x0, 64, MPI_FLOAT, 0, MPI_COMM_WORLD);
    mg_assert_all(memcmp(x0, x, sizeof x) == 0, "rank data differs from rank 0");
}
END_TEST

static int fork_status_seen = -1;

START_TEST(test_runs_without_fork) {
    // mg_test_run_mpi sets CK_NOFORK; a forked test could not write this global
    fork_status_seen = 1;
}
END_TEST

START_TEST(test_runs_without_fork_check) {
    ck_assert_int_eq(fork_status_seen, 1);
}
END_TEST

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const TTest *tests[] = {test_agree_is_and_of_all_ranks, test_every_rank_sees_the_same_verdict,
                            test_allreduce_matches_naive_sum, test_close_helper,
                            test_fill_is_deterministic, test_runs_without_fork,
                            test_runs_without_fork_check, NULL};
    Suite *s = suite_create("harness");
    mg_test_case(s, "mpi", tests);
    int status = mg_test_run_mpi(s);
    MPI_Finalize();
    return status;
}
