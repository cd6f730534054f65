/* test_digits.c: data/digits.h5 as the build makes it (MPI, run at 1, 2 and 4
 * ranks): 1497 train and 300 test rows of 8x8 images, 10 classes, and the first
 * rows of each split equal to the CSV it was made from. Without the file (a
 * build that did not make it) the program says so and exits 77: skipped, not
 * passed. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dist/comm.h"
#include "io/data.h"
#include "meshgrad.h"
#include "status.h"
#include "testutil.h"

static const char *const path = "data/digits.h5";

START_TEST(test_digits) {
    mg_dataset *tr = mg_dataset_open(path, "train", mg_comm_world());
    mg_dataset *te = mg_dataset_open(path, "test", mg_comm_world());
    mg_assert_all(tr && te, "digits: %s", mg_last_error());
    mg_assert_all(mg_dataset_rows(tr) == 1497 && mg_dataset_rows(te) == 300 &&
                      mg_dataset_num_classes(tr) == 10 && mg_dataset_sample_ndim(tr) == 2 &&
                      mg_dataset_sample_shape(tr)[0] == 8 && mg_dataset_sample_shape(tr)[1] == 8,
                  "digits layout");
    // test row 0 is CSV row 0; train row 0 is CSV row 1 (see digits.csv.gz)
    const float csv0[8] = {0, 0, 5, 13, 9, 1, 0, 0}, csv1[8] = {0, 0, 0, 12, 13, 5, 0, 0};
    int64_t row0 = 0;
    float x[64], y;
    mg_assert_all(mg_dataset_read_rows(te, &row0, 1, x, &y) == MG_OK, "read");
    int ok = y == 0.0f;
    for (int j = 0; j < 8; j++) ok &= x[j] == csv0[j] / 16.0f;
    mg_assert_all(mg_dataset_read_rows(tr, &row0, 1, x, &y) == MG_OK, "read");
    ok &= y == 1.0f;
    for (int j = 0; j < 8; j++) ok &= x[j] == csv1[j] / 16.0f;
    mg_assert_all(ok, "digits: first rows differ from the CSV");
    mg_dataset_close(tr);
    mg_dataset_close(te);
}
END_TEST

static Suite *make_suite(void) {
    int64_t have = access(path, R_OK) == 0;
    mg_comm_all_reduce_i64(mg_comm_world(), &have, 1, MG_CONTROL_MIN);
    if (!have) {
        if (mg_rank() == 0)
            printf("test_digits: %s was not built here (make builds it from data/digits.csv.gz): "
               "skipping\n", path);
        return NULL; /* exit 77 */
    }
    const TTest *tests[] = {test_digits, NULL};
    return mg_test_suite("digits", tests);
}

int main(int argc, char **argv) { return mg_test_main_mpi(&argc, &argv, make_suite, NULL); }
