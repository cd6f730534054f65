/* test_data.c: the HDF5 data set reader, the batch loader and the CSV converter
 * (MPI, run at 1, 2 and 4 ranks).
 * - a synthetic data set (row r of inputs holds r + j/64, label (7r + 3) % 5) is
 *   read batch by batch under Shard/Replicate specs on 1-D and 2-D meshes: each
 *   rank's block must be exactly its part of the permuted global batch, and the
 *   epoch order must be the same on every mesh;
 * - read_rows with unsorted, repeated and empty row lists;
 * - malformed files are refused on every rank with a message naming the problem;
 * - a NaN or infinity in the inputs is refused when its row is read, naming
 *   the row; a label beyond 2^24 - 1 when the split is opened;
 * - `meshgrad data csv2h5` on good and bad CSV input; it never writes over its
 *   input or a file that is not a data set, and leaves nothing on failure.
 * (data/digits.h5 as the build makes it: tests/test_digits.c.) */
#include <dirent.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "dist/comm.h"
#include "dist/dtensor.h"
#include "dist/mesh.h"
#include "io/data.h"
#include "meshgrad.h"
#include "rng.h"
#include "status.h"
#include "testutil.h"
#include "testutil_h5.h"

static int rank, world;

static float value_at(int64_t row, int64_t j) { return (float)row + (float)j / 64.0f; }
static float label_at(int64_t row) { return (float)((row * 7 + 3) % 5); }

/* Writes /<split>/inputs (n_in, sample...) of in_type and /<split>/labels (n_lab)
 * of lab_type on rank 0 (serial HDF5); n < 0 leaves the dataset out. */
static void write_set(const char *path, const char *split, int64_t n_in, int sndim,
                      const int64_t *sample, hid_t in_type, int64_t n_lab, hid_t lab_type) {
    if (rank == 0) {
        hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
        hid_t g = H5Gcreate2(f, split, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        int64_t numel = 1;
        hsize_t dims[8];
        for (int i = 0; i < sndim; i++) {
            numel *= sample[i];
            dims[i + 1] = (hsize_t)sample[i];
        }
        if (n_in >= 0) {
            float *x = malloc((size_t)(n_in * numel + 1) * sizeof *x);
            for (int64_t r = 0; r < n_in; r++)
                for (int64_t j = 0; j < numel; j++) x[r * numel + j] = value_at(r, j);
            dims[0] = (hsize_t)n_in;
            mg_test_h5_write(g, "inputs", in_type, H5T_NATIVE_FLOAT, sndim + 1, dims, x);
            free(x);
        }
        if (n_lab >= 0) {
            int32_t *y = malloc((size_t)(n_lab + 1) * sizeof *y);
            for (int64_t r = 0; r < n_lab; r++) y[r] = (int32_t)label_at(r);
            hsize_t n = (hsize_t)n_lab;
            mg_test_h5_write(g, "labels", lab_type, H5T_NATIVE_INT32, 1, &n, y);
            free(y);
        }
        H5Gclose(g);
        H5Fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static const int64_t SAMPLE[2] = {3, 4};
enum { N = 37, SNUMEL = 12 };

START_TEST(test_open_metadata) {
    mg_dataset *ds = mg_dataset_open(mg_test_path("good.h5"), "train", mg_comm_world());
    mg_assert_all(ds != NULL, "open failed: %s", mg_last_error());
    mg_assert_all(mg_dataset_rows(ds) == N, "rows %lld", (long long)mg_dataset_rows(ds));
    mg_assert_all(mg_dataset_sample_ndim(ds) == 2 && mg_dataset_sample_shape(ds)[0] == 3 &&
                      mg_dataset_sample_shape(ds)[1] == 4,
                  "sample shape wrong");
    mg_assert_all(mg_dataset_num_classes(ds) == 5, "classes %d", mg_dataset_num_classes(ds));
    mg_dataset_close(ds);
}
END_TEST

/* read_rows: each rank asks for different rows (unsorted, repeated, none) */
START_TEST(test_read_rows) {
    mg_dataset *ds = mg_dataset_open(mg_test_path("good.h5"), "train", mg_comm_world());
    mg_assert_all(ds != NULL, "open failed: %s", mg_last_error());
    int64_t rows[8] = {36, 2, 2, 17, 0, 35, 18, 17};
    int64_t n = rank == 1 ? 0 : 8 - rank; /* rank 1 reads nothing */
    for (int64_t i = 0; i < n; i++) rows[i] = (rows[i] + rank) % N;
    float x[8 * SNUMEL], y[8];
    int st = mg_dataset_read_rows(ds, rows, n, x, y);
    mg_assert_all(st == MG_OK, "read_rows: %s", mg_last_error());
    int ok = 1;
    for (int64_t i = 0; i < n; i++) {
        if (y[i] != label_at(rows[i])) ok = 0;
        for (int j = 0; j < SNUMEL; j++)
            if (x[i * SNUMEL + j] != value_at(rows[i], j)) ok = 0;
    }
    mg_assert_all(ok, "read_rows returned wrong values");
    /* a row out of range on the last rank only: every rank fails, same message */
    int64_t bad[2] = {1, rank == world - 1 ? N : 3};
    st = mg_dataset_read_rows(ds, bad, 2, x, y);
    mg_assert_all(st == MG_EINVAL && strstr(mg_last_error(), "row 37 is out of range"),
                  "got %d: %s", st, mg_last_error());
    /* and the data set still works afterwards */
    st = mg_dataset_read_rows(ds, rows, n, x, y);
    mg_assert_all(st == MG_OK, "read after an error: %s", mg_last_error());
    mg_dataset_close(ds);
}
END_TEST

typedef struct {
    int mesh_ndim;
    int mesh_shape[2];
    mg_placement px[2], py[2];
    const char *what;
} layout;

/* Runs nb+2 batches (across an epoch boundary) and checks every rank's blocks. */
static void check_layout(mg_dataset *ds, const layout *L, int64_t batch, mg_arena *arena) {
    mg_mesh *mesh = mg_mesh_new(L->mesh_ndim, L->mesh_shape);
    mg_assert_all(mesh != NULL, "%s: mesh: %s", L->what, mg_last_error());
    int64_t xshape[3] = {batch, 3, 4};
    mg_spec xs, ys;
    mg_assert_all(mg_spec_make(&xs, mesh, L->px, L->mesh_ndim, 3, xshape, "x") == MG_OK &&
                      mg_spec_make(&ys, mesh, L->py, L->mesh_ndim, 1, &batch, "y") == MG_OK,
                  "%s: spec: %s", L->what, mg_last_error());
    mg_loader loader;
    mg_assert_all(mg_loader_init(&loader, ds, batch, 1234) == MG_OK, "init: %s", mg_last_error());
    int64_t nb = N / batch, perm[N];
    float *want_x = malloc((size_t)batch * SNUMEL * sizeof(float)), want_y[N];
    for (int64_t b = 0; b < nb + 2; b++) {
        int64_t epoch = b / nb, k = b % nb;
        mg_rng_permutation(1234, (uint64_t)epoch, N, perm);
        for (int64_t i = 0; i < batch; i++) {
            want_y[i] = label_at(perm[k * batch + i]);
            for (int j = 0; j < SNUMEL; j++)
                want_x[i * SNUMEL + j] = value_at(perm[k * batch + i], j);
        }
        mg_dtensor *x = NULL, *y = NULL;
        int st = mg_loader_next(&loader, &xs, &ys, &x, &y, arena);
        mg_assert_all(st == MG_OK, "%s: next: %s", L->what, mg_last_error());
        mg_assert_all(loader.epoch == epoch && loader.cursor == k + 1, "%s: position", L->what);
        // this rank's block, from the one function that says which block it holds
        int64_t xl[3], xo[3], yl[1], yo[1];
        mg_spec_local(&xs, NULL, xl, xo);
        mg_spec_local(&ys, NULL, yl, yo);
        const mg_tensor *lx = mg_local(x), *ly = mg_local(y);
        int ok = mg_shape_equal(lx->ndim, lx->shape, 3, xl) &&
                 mg_shape_equal(ly->ndim, ly->shape, 1, yl);
        for (int64_t i = 0; ok && i < xl[0]; i++)
            for (int64_t a = 0; a < xl[1]; a++)
                for (int64_t c = 0; c < xl[2]; c++)
                    if (lx->data[(i * xl[1] + a) * xl[2] + c] !=
                        want_x[(xo[0] + i) * SNUMEL + (xo[1] + a) * 4 + xo[2] + c])
                        ok = 0;
        for (int64_t i = 0; ok && i < yl[0]; i++)
            if (ly->data[i] != want_y[yo[0] + i]) ok = 0;
        mg_assert_all(ok, "%s: batch %lld: rank %d's block is wrong", L->what, (long long)b, rank);
        if (b == 0 || b == nb) { /* the whole batch, as every rank sees it */
            mg_tensor *fx = mg_full_tensor(x), *fy = mg_full_tensor(y);
            mg_assert_all(fx && fy, "full_tensor: %s", mg_last_error());
            mg_assert_all(memcmp(fx->data, want_x, (size_t)batch * SNUMEL * sizeof(float)) == 0 &&
                              memcmp(fy->data, want_y, (size_t)batch * sizeof(float)) == 0,
                          "%s: batch %lld: the global batch is wrong", L->what, (long long)b);
            mg_tensor_free(fx);
            mg_tensor_free(fy);
        }
        if (arena) {
            mg_arena_reset(arena);
        } else {
            mg_dtensor_free(x);
            mg_dtensor_free(y);
        }
    }
    free(want_x);
    // seek gives the same batch as walking there
    mg_assert_all(mg_loader_seek(&loader, 1, 1) == MG_OK, "seek: %s", mg_last_error());
    mg_dtensor *x, *y;
    mg_assert_all(mg_loader_next(&loader, &xs, &ys, &x, &y, NULL) == MG_OK, "next after seek");
    mg_rng_permutation(1234, 1, N, perm);
    int64_t yl[1], yo[1];
    mg_spec_local(&ys, NULL, yl, yo);
    int ok = 1;
    for (int64_t i = 0; i < yl[0]; i++)
        if (mg_local(y)->data[i] != label_at(perm[batch + yo[0] + i])) ok = 0;
    mg_assert_all(ok, "%s: seek(1, 1) gave another batch", L->what);
    mg_dtensor_free(x);
    mg_dtensor_free(y);
    mg_loader_free(&loader);
    mg_mesh_free(mesh);
}

START_TEST(test_loader_layouts) {
    mg_dataset *ds = mg_dataset_open(mg_test_path("good.h5"), "train", mg_comm_world());
    mg_assert_all(ds != NULL, "open failed: %s", mg_last_error());
    int half = world >= 2 ? world / 2 : 1, other = world >= 2 ? 2 : 1;
    layout layouts[] = {
        {1, {world, 0}, {MG_SHARD(0)}, {MG_SHARD(0)}, "1-D [S(0)]"},
        {1, {world, 0}, {MG_REPLICATE}, {MG_REPLICATE}, "1-D [R]"},
        {1, {world, 0}, {MG_SHARD(0)}, {MG_REPLICATE}, "1-D x [S(0)], y [R]"},
        {1, {world, 0}, {MG_SHARD(1)}, {MG_SHARD(0)}, "1-D x [S(1)] (a sample dim)"},
        {2,
         {half, other},
         {MG_SHARD(0), MG_REPLICATE},
         {MG_SHARD(0), MG_REPLICATE},
         "2-D [S(0), R]"},
        {2,
         {other, half},
         {MG_REPLICATE, MG_SHARD(0)},
         {MG_REPLICATE, MG_SHARD(0)},
         "2-D [R, S(0)]"},
        {2,
         {half, other},
         {MG_SHARD(0), MG_SHARD(0)},
         {MG_SHARD(0), MG_SHARD(0)},
         "2-D nested [S(0), S(0)]"},
        {2,
         {half, other},
         {MG_SHARD(0), MG_SHARD(2)},
         {MG_SHARD(0), MG_REPLICATE},
         "2-D [S(0), S(2)]"},
    };
    int64_t batches[2] = {8, 5}; /* 5 over 4 ranks: 2, 2, 1 and an empty shard */
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        for (int b = 0; b < 2; b++) check_layout(ds, &layouts[i], batches[b], NULL);
    mg_arena *arena = mg_arena_new(1 << 16);
    check_layout(ds, &layouts[0], 8, arena);
    mg_arena_free(arena);
    mg_dataset_close(ds);
}
END_TEST

START_TEST(test_loader_errors) {
    mg_dataset *ds = mg_dataset_open(mg_test_path("good.h5"), "train", mg_comm_world());
    mg_assert_all(ds != NULL, "open failed: %s", mg_last_error());
    mg_loader L;
    mg_assert_all(mg_loader_init(&L, ds, 0, 1) == MG_EINVAL, "batch 0 accepted");
    mg_assert_all(mg_loader_init(&L, ds, 38, 1) == MG_EINVAL &&
                      strstr(mg_last_error(), "use a batch of 1..37"),
                  "%s", mg_last_error());
    mg_assert_all(mg_loader_init(&L, ds, 4, 1) == MG_OK, "init: %s", mg_last_error());
    mg_mesh *mesh = mg_mesh_new(1, &world);
    int64_t wrong[3] = {4, 4, 3}, four = 4;
    mg_spec xs, ys;
    mg_placement s0 = MG_SHARD(0), p = MG_PARTIAL_SUM;
    mg_spec_make(&xs, mesh, &s0, 1, 3, wrong, "x");
    mg_spec_make(&ys, mesh, &s0, 1, 1, &four, "y");
    mg_dtensor *x, *y;
    mg_assert_all(mg_loader_next(&L, &xs, &ys, &x, &y, NULL) == MG_ESHAPE &&
                      strstr(mg_last_error(), "(4, 4, 3) but the batch is (4, 3, 4)"),
                  "%s", mg_last_error());
    int64_t right[3] = {4, 3, 4};
    mg_spec_make(&xs, mesh, &s0, 1, 3, right, "x");
    mg_spec_make(&ys, mesh, &p, 1, 1, &four, "y");
    mg_assert_all(mg_loader_next(&L, &xs, &ys, &x, &y, NULL) == MG_EPLACEMENT, "%s",
                  mg_last_error());
    mg_assert_all(L.cursor == 0, "a refused call moved the loader");
    L.cursor = 37 / 4; /* at the epoch's end: a refused call begins no new epoch */
    mg_assert_all(mg_loader_next(&L, &xs, &ys, &x, &y, NULL) == MG_EPLACEMENT && L.epoch == 0 &&
                      L.cursor == 37 / 4,
                  "a refused call at the epoch's end moved the loader to epoch %lld",
                  (long long)L.epoch);
    mg_assert_all(mg_loader_rows(&L, 34, 4, &xs, &ys, &x, &y, NULL) == MG_EINVAL &&
                      strstr(mg_last_error(), "rows 34..37 are not in the 37"),
                  "rows past the split: %s", mg_last_error());
    mg_loader_free(&L);
    mg_mesh_free(mesh);
    mg_dataset_close(ds);
}
END_TEST

static void expect_refused(const char *path, const char *split, const char *want1,
                           const char *want2) {
    mg_dataset *ds = mg_dataset_open(path, split, mg_comm_world());
    const char *msg = mg_last_error();
    mg_assert_all(ds == NULL, "%s was accepted", path);
    mg_assert_all(strstr(msg, want1) && (!want2 || strstr(msg, want2)),
                  "message \"%s\" lacks \"%s\" / \"%s\"", msg, want1, want2 ? want2 : "");
}

START_TEST(test_malformed) {
    int64_t s1[1] = {2};
    write_set(mg_test_path("nolabels.h5"), "train", 10, 1, s1, H5T_IEEE_F32LE, -1, H5T_STD_I32LE);
    expect_refused(mg_test_path("nolabels.h5"), "train",
                   "nolabels.h5: dataset /train/labels is missing", NULL);
    write_set(mg_test_path("noinputs.h5"), "train", -1, 1, s1, H5T_IEEE_F32LE, 10, H5T_STD_I32LE);
    expect_refused(mg_test_path("noinputs.h5"), "train", "dataset /train/inputs is missing", NULL);
    expect_refused(mg_test_path("good.h5"), "test", "good.h5: there is no group /test", NULL);
    write_set(mg_test_path("intinputs.h5"), "train", 10, 1, s1, H5T_STD_I32LE, 10, H5T_STD_I32LE);
    expect_refused(mg_test_path("intinputs.h5"), "train",
                   "dataset /train/inputs is int32, expected float32", NULL);
    write_set(mg_test_path("dblinputs.h5"), "train", 10, 1, s1, H5T_IEEE_F64LE, 10, H5T_STD_I32LE);
    expect_refused(mg_test_path("dblinputs.h5"), "train",
                   "dataset /train/inputs is float64, expected float32", NULL);
    write_set(mg_test_path("fltlabels.h5"), "train", 10, 1, s1, H5T_IEEE_F32LE, 10, H5T_IEEE_F32LE);
    expect_refused(mg_test_path("fltlabels.h5"), "train",
                   "dataset /train/labels is float32, expected int32", NULL);
    write_set(mg_test_path("rows.h5"), "train", 999, 1, s1, H5T_IEEE_F32LE, 1000, H5T_STD_I32LE);
    expect_refused(mg_test_path("rows.h5"), "train",
                   "rows.h5: /train/labels has 1000 rows but /train/inputs has 999", NULL);
    write_set(mg_test_path("empty.h5"), "train", 0, 1, s1, H5T_IEEE_F32LE, 0, H5T_STD_I32LE);
    expect_refused(mg_test_path("empty.h5"), "train", "/train/inputs has no rows", NULL);
    mg_test_write_text(mg_test_path("text.h5"), "0,1,2,3\n4,5,6,7\n");
    expect_refused(mg_test_path("text.h5"), "train", "text.h5 is not an HDF5 file", NULL);
    expect_refused(mg_test_path("missing.h5"), "train", "cannot open data set",
                   "No such file or directory");
    expect_refused(mg_test_dir(), "train", "it is a directory", NULL);
}
END_TEST

/* A copy of good.h5's /train in which /train/inputs is replaced (on rank 0) by
 * what `how` makes: the hostile kinds of test_hostile_storage. */
static void write_hostile(const char *name, const char *how) {
    if (rank == 0) {
        char good[1024];
        snprintf(good, sizeof good, "%s", mg_test_path("good.h5"));
        hid_t f = H5Fcreate(mg_test_path(name), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
        hid_t src = H5Fopen(good, H5F_ACC_RDONLY, H5P_DEFAULT);
        H5Ocopy(src, "train", f, "train", H5P_DEFAULT, H5P_DEFAULT);
        H5Fclose(src);
        H5Ldelete(f, "train/inputs", H5P_DEFAULT);
        hsize_t dims[3] = {N, (hsize_t)SAMPLE[0], (hsize_t)SAMPLE[1]};
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), space = H5Screate_simple(3, dims, NULL);
        if (!strcmp(how, "external-link"))
            H5Lcreate_external(good, "/train/inputs", f, "train/inputs", H5P_DEFAULT, H5P_DEFAULT);
        else if (!strcmp(how, "external-group")) {
            H5Ldelete(f, "train/labels", H5P_DEFAULT);
            H5Ldelete(f, "train", H5P_DEFAULT);
            H5Lcreate_external(good, "/train", f, "train", H5P_DEFAULT, H5P_DEFAULT);
        } else if (!strcmp(how, "soft-link")) {
            H5Ocopy(f, "train/labels", f, "copy", H5P_DEFAULT, H5P_DEFAULT);
            H5Lcreate_soft("/copy", f, "train/inputs", H5P_DEFAULT, H5P_DEFAULT);
        } else if (!strcmp(how, "group")) {
            H5Gclose(H5Gcreate2(f, "train/inputs", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        } else {
            if (!strcmp(how, "raw-file")) /* its bytes: any file, here good.h5 */
                H5Pset_external(dcpl, good, 0, (hsize_t)N * SAMPLE[0] * SAMPLE[1] * 4);
            if (!strcmp(how, "virtual")) {
                hid_t from = H5Screate_simple(3, dims, NULL);
                H5Pset_virtual(dcpl, space, good, "/train/inputs", from);
                H5Sclose(from);
            }
            if (!strcmp(how, "unwritten")) { /* 2^40 rows declared, none written */
                hsize_t chunk[3] = {1024, dims[1], dims[2]}, huge[3] = {(hsize_t)1 << 40, dims[1],
                                                                        dims[2]};
                H5Pset_chunk(dcpl, 3, chunk);
                H5Sset_extent_simple(space, 3, huge, NULL);
                H5Ldelete(f, "train/labels", H5P_DEFAULT);
                hid_t lab = H5Screate_simple(1, huge, NULL), lcpl = H5Pcreate(H5P_DATASET_CREATE);
                H5Pset_chunk(lcpl, 1, chunk);
                H5Dclose(H5Dcreate2(f, "train/labels", H5T_STD_I32LE, lab, H5P_DEFAULT, lcpl,
                                    H5P_DEFAULT));
                H5Pclose(lcpl);
                H5Sclose(lab);
            }
            H5Dclose(H5Dcreate2(f, "train/inputs", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl,
                                H5P_DEFAULT));
        }
        H5Sclose(space);
        H5Pclose(dcpl);
        H5Fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Data that is not stored in the file named, or not at all: refused at open
 * with a message, never read (they were: an external link or raw file read
 * another file, 2^40 declared rows took minutes and their size in memory). */
START_TEST(test_hostile_storage) {
    static const char *const cases[][3] = {
        {"external-link", "elink.h5", "/train/inputs is an external link (to /train/inputs in file"},
        {"external-group", "egroup.h5", "/train is an external link"},
        {"soft-link", "soft.h5", "/train/inputs is a soft link to /copy"},
        {"group", "group.h5", "/train/inputs is a group, not a dataset"},
        {"raw-file", "raw.h5", "dataset /train/inputs keeps its data in external raw files"},
        {"virtual", "virtual.h5", "dataset /train/inputs is a virtual dataset"},
        {"unwritten", "unwritten.h5", "declares 52776558133248 bytes but the file holds 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_hostile(cases[i][1], cases[i][0]);
        double t0 = MPI_Wtime();
        expect_refused(mg_test_path(cases[i][1]), "train", cases[i][1], cases[i][2]);
        mg_assert_all(MPI_Wtime() - t0 < 10, "%s: refused after %.1f s", cases[i][0],
                      MPI_Wtime() - t0);
    }
}
END_TEST

/* 1 when a file whose name starts with `prefix` is in the test directory */
static int leftover(const char *prefix) {
    int found = 0;
    if (rank == 0) {
        DIR *d = opendir(mg_test_dir());
        struct dirent *e;
        while (d && (e = readdir(d)))
            if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) found = 1;
        if (d) closedir(d);
    }
    return mg_test_agree(!found) ? 0 : 1;
}

/* csv2h5 runs on rank 0; the other ranks return 0 at once */
static int run_csv2h5(const char *in, const char *out, const char *shape, const char *every) {
    char *argv[] = {"data",         "csv2h5",      "--in",        (char *)in,  "--out",
                    (char *)out,    "--shape",     (char *)shape, "--scale",   "4",
                    "--test-every", (char *)every, "--source",    "synthetic", "--license",
                    "CC0",          NULL};
    mg_clear_error();
    int rc = mg_cli_data(16, argv);
    MPI_Barrier(MPI_COMM_WORLD);
    return rc;
}

START_TEST(test_csv2h5) {
    char csv[4096] = "";
    for (int r = 0; r < 13; r++) { /* 2x3 samples: value (r + j) * 4 / 4 = r + j */
        char line[128];
        snprintf(line, sizeof line, "%d,%d,%d,%d,%d,%d,%d\n", 4 * r, 4 * (r + 1), 4 * (r + 2),
                 4 * (r + 3), 4 * (r + 4), 4 * (r + 5), r % 3);
        strcat(csv, line);
    }
    mg_test_write_text(mg_test_path("good.csv"), csv);
    int rc = run_csv2h5(mg_test_path("good.csv"), mg_test_path("csv.h5"), "2x3", "4");
    mg_assert_all(rc == 0, "csv2h5: %s", mg_last_error());
    const char *splits[2] = {"train", "test"};
    int64_t want_rows[2] = {9, 4};
    for (int s = 0; s < 2; s++) {
        mg_dataset *ds = mg_dataset_open(mg_test_path("csv.h5"), splits[s], mg_comm_world());
        mg_assert_all(ds && mg_dataset_rows(ds) == want_rows[s] &&
                          mg_dataset_sample_ndim(ds) == 2 && mg_dataset_sample_shape(ds)[0] == 2 &&
                          mg_dataset_sample_shape(ds)[1] == 3 && mg_dataset_num_classes(ds) == 3,
                      "csv.h5 /%s: %s", splits[s], ds ? "wrong layout" : mg_last_error());
        int64_t rows[9];
        float x[9 * 6], y[9];
        for (int i = 0; i < want_rows[s]; i++) rows[i] = i;
        mg_assert_all(mg_dataset_read_rows(ds, rows, want_rows[s], x, y) == MG_OK, "read");
        int ok = 1;
        for (int i = 0, k = 0; i < 13; i++) {
            if ((i % 4 == 0) != (s == 1)) continue; /* test: rows 0, 4, 8, 12 */
            if (y[k] != (float)(i % 3)) ok = 0;
            for (int j = 0; j < 6; j++)
                if (x[k * 6 + j] != (float)(i + j)) ok = 0;
            k++;
        }
        mg_assert_all(ok, "csv.h5 /%s holds the wrong rows", splits[s]);
        mg_dataset_close(ds);
    }
    // bad input: the message names the line
    mg_test_write_text(mg_test_path("nan.csv"), "1,2,3,4,5,6,0\n1,2,3,4,5,6,1\n1,2,x3,4,5,6,1\n");
    rc = run_csv2h5(mg_test_path("nan.csv"), mg_test_path("bad.h5"), "2x3", "4");
    mg_assert_all(rank != 0 || (rc == 1 && strstr(mg_last_error(),
                                                  "nan.csv:3: field 3 \"x3\" is not a number")),
                  "rc %d: %s", rc, mg_last_error());
    mg_test_write_text(mg_test_path("cols.csv"), "1,2,3,4,5,6,0\n1,2,3,4,5,1\n");
    rc = run_csv2h5(mg_test_path("cols.csv"), mg_test_path("bad.h5"), "2x3", "4");
    mg_assert_all(rank != 0 ||
                      (rc == 1 && strstr(mg_last_error(), "cols.csv:2: 6 fields, expected 7")),
                  "rc %d: %s", rc, mg_last_error());
    mg_test_write_text(mg_test_path("label.csv"), "1,2,3,4,5,6,0.5\n");
    rc = run_csv2h5(mg_test_path("label.csv"), mg_test_path("bad.h5"), "2x3", "4");
    mg_assert_all(rank != 0 || (rc == 1 && strstr(mg_last_error(), "label.csv:1: the label")),
                  "rc %d: %s", rc, mg_last_error());
    rc = run_csv2h5(mg_test_path("absent.csv"), mg_test_path("bad.h5"), "2x3", "4");
    mg_assert_all(rank != 0 || (rc == 1 && strstr(mg_last_error(), "cannot open") &&
                                strstr(mg_last_error(), "absent.csv")),
                  "rc %d: %s", rc, mg_last_error());
    rc = run_csv2h5(mg_test_path("good.csv"), mg_test_path("bad.h5"), "2y3", "4");
    mg_assert_all(rc == 2, "a bad --shape was accepted");
    rc = run_csv2h5(mg_test_path("good.csv"), mg_test_path("bad.h5"), "4294967296x4294967296x4", "4");
    mg_assert_all(rc == 2 && strstr(mg_last_error(), "more than"), "an overflowing --shape: %d %s",
                  rc, mg_last_error());
    mg_assert_all(access(mg_test_path("bad.h5"), F_OK) != 0 && !leftover("bad.h5.tmp"),
                  "a failed conversion left a file behind");
    // it never writes over its input, or over a file that is not a data set
    rc = run_csv2h5(mg_test_path("good.csv"), mg_test_path("good.csv"), "2x3", "4");
    mg_assert_all(rank != 0 || (rc == 1 && strstr(mg_last_error(), "is the --in file")),
                  "--out equal to --in: rc %d: %s", rc, mg_last_error());
    mg_test_write_text(mg_test_path("notes.txt"), "my notes\n");
    rc = run_csv2h5(mg_test_path("good.csv"), mg_test_path("notes.txt"), "2x3", "4");
    mg_assert_all(rank != 0 || (rc == 1 && strstr(mg_last_error(), "will not replace") &&
                                strstr(mg_last_error(), "not a meshgrad data set")),
                  "--out over a text file: rc %d: %s", rc, mg_last_error());
    int intact = 1;
    if (rank == 0) {
        FILE *f = fopen(mg_test_path("good.csv"), "r");
        char line[64] = "";
        intact = f && fgets(line, sizeof line, f) && strcmp(line, "0,4,8,12,16,20,0\n") == 0;
        if (f) fclose(f);
        f = fopen(mg_test_path("notes.txt"), "r");
        intact &= f && fgets(line, sizeof line, f) && strcmp(line, "my notes\n") == 0;
        if (f) fclose(f);
    }
    mg_assert_all(intact, "a refused conversion changed its input or the file at --out");
    // a data set may be made again over the one it made before
    rc = run_csv2h5(mg_test_path("good.csv"), mg_test_path("csv.h5"), "2x3", "4");
    mg_assert_all(rc == 0 && !leftover("csv.h5.tmp"), "csv2h5 again: %s", mg_last_error());
}
END_TEST

/* A NaN in the inputs is refused when its row is read; so is a label past 2^24 - 1. */
START_TEST(test_nonfinite) {
    write_set(mg_test_path("nan.h5"), "train", 10, 2, SAMPLE, H5T_IEEE_F32LE, 10, H5T_STD_I32LE);
    if (rank == 0) { /* inputs[3, 2, 2] = nan, labels[5] = 2^31 - 1 in another file */
        hid_t f = H5Fopen(mg_test_path("nan.h5"), H5F_ACC_RDWR, H5P_DEFAULT);
        hid_t d = H5Dopen2(f, "train/inputs", H5P_DEFAULT), fs = H5Dget_space(d);
        hsize_t start[3] = {3, 2, 2}, one[3] = {1, 1, 1};
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, one, NULL);
        hid_t ms = H5Screate_simple(1, one, NULL);
        float nan = NAN;
        H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, &nan);
        H5Sclose(ms);
        H5Sclose(fs);
        H5Dclose(d);
        H5Fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    mg_dataset *ds = mg_dataset_open(mg_test_path("nan.h5"), "train", mg_comm_world());
    mg_assert_all(ds != NULL, "open: %s", mg_last_error());
    int64_t rows[3] = {1, 3, 7}, clean[2] = {0, 9};
    float x[3 * SNUMEL], y[3];
    mg_assert_all(mg_dataset_read_rows(ds, clean, 2, x, y) == MG_OK, "clean rows: %s",
                  mg_last_error());
    int st = mg_dataset_read_rows(ds, rows, rank == 0 ? 3 : 0, x, y);
    mg_assert_all(st == MG_EFORMAT && strstr(mg_last_error(), "/train/inputs row 3 holds a "
                                                            "non-finite value (nan at [2,2])"),
                  "a NaN row: %d %s", st, mg_last_error());
    mg_dataset_close(ds);
    write_set(mg_test_path("biglabel.h5"), "train", 10, 2, SAMPLE, H5T_IEEE_F32LE, 10, H5T_STD_I32LE);
    if (rank == 0) {
        hid_t f = H5Fopen(mg_test_path("biglabel.h5"), H5F_ACC_RDWR, H5P_DEFAULT);
        hid_t d = H5Dopen2(f, "train/labels", H5P_DEFAULT), fs = H5Dget_space(d);
        hsize_t at = 5, one = 1;
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, &at, NULL, &one, NULL);
        hid_t ms = H5Screate_simple(1, &one, NULL);
        int32_t big = 2147483647;
        H5Dwrite(d, H5T_NATIVE_INT32, ms, fs, H5P_DEFAULT, &big);
        H5Sclose(ms);
        H5Sclose(fs);
        H5Dclose(d);
        H5Fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    expect_refused(mg_test_path("biglabel.h5"), "train",
                   "/train/labels row 5 holds 2147483647; labels must be class indices 0..16777215",
                   NULL);
}
END_TEST

static Suite *make_suite(void) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    mg_test_dir_make("data");
    write_set(mg_test_path("good.h5"), "train", N, 2, SAMPLE, H5T_IEEE_F32LE, N, H5T_STD_I32LE);
    const TTest *tests[] = {test_open_metadata, test_read_rows, test_loader_layouts,
                            test_loader_errors, test_malformed, test_hostile_storage, test_csv2h5,
                            test_nonfinite, NULL};
    return mg_test_suite("data", tests);
}

int main(int argc, char **argv) {
    return mg_test_main_mpi(&argc, &argv, make_suite, mg_test_dir_remove);
}
