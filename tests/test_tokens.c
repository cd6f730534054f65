/* test_tokens.c (MPI): token data sets and the window loader (io/tokens.h),
 * against the text they were made from, read directly in the test:
 * - text2h5's split (first 90% train, the rest val) and counts;
 * - training windows: the same starts on every rank, inside the split, a
 *   different set each step, and batches whose blocks, gathered, are the
 *   windows of the text (x) and the same shifted by one (y), for the batch dim
 *   sharded, the sequence dim sharded (empty shards included) and Replicate;
 * - evaluation windows: floor((N - 1) / T) of them, at k T;
 * - uint16 tokens (nanoGPT's and llm.c's), values past 255 read back exactly;
 * - refused: a split that is missing, tokens outside the vocabulary (uint8 and
 *   uint16), a 2-D tokens dataset, tokens of a type not taken (float), a
 *   window longer than the split. */
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>

#include "dist/mesh.h"
#include "io/tokens.h"
#include "meshgrad.h"
#include "testutil.h"
#include "testutil_h5.h"

int mg_cli_text2h5(int argc, char **argv); /* src/cli/data_text.c, linked in */

enum { TEXT = 5000 };
static int world;
static unsigned char text[TEXT];
static const char *path = "test_tokens.h5";

/* A text with a pattern a wrong offset cannot match: byte i = (i * 7 + i / 256) mod 256. */
static void make_text(void) {
    for (int i = 0; i < TEXT; i++) text[i] = (unsigned char)((i * 7 + i / 256) % 256);
}

/* Rank 0 writes the text and runs text2h5 on it; every rank waits for it. */
static void make_data_set(const char *out, double val_fraction) {
    if (mg_rank() == 0) {
        FILE *f = fopen("test_tokens.txt", "wb");
        fwrite(text, 1, TEXT, f);
        fclose(f);
        remove(out);
        char vf[32];
        snprintf(vf, sizeof vf, "%g", val_fraction);
        char *argv[] = {"text2h5", "test_tokens.txt", (char *)out, "--val-fraction", vf, NULL};
        int rc = mg_cli_text2h5(5, argv);
        if (rc != 0) fprintf(stderr, "text2h5: %s\n", mg_last_error());
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static mg_comm *comm_of(const mg_mesh *mesh) { return mesh->world; }

START_TEST(splits_and_counts) {
    make_data_set(path, 0.1);
    mg_mesh *mesh = mg_mesh_new(1, &world);
    mg_tokens *tr = mg_tokens_open(path, "train", comm_of(mesh));
    mg_tokens *va = mg_tokens_open(path, "val", comm_of(mesh));
    mg_assert_all(tr && va, "open: %s", mg_last_error());
    int64_t ntr = (int64_t)(0.9 * TEXT);
    mg_assert_all(mg_tokens_count(tr) == ntr && mg_tokens_count(va) == TEXT - ntr,
                  "train %lld, val %lld tokens; want %lld, %lld", (long long)mg_tokens_count(tr),
                  (long long)mg_tokens_count(va), (long long)ntr, (long long)(TEXT - ntr));
    mg_assert_all(mg_tokens_vocab(tr) == 256, "vocab %d", mg_tokens_vocab(tr));
    float got[64];
    mg_assert_all(mg_tokens_read(va, 10, 64, got) == MG_OK, "read: %s", mg_last_error());
    int same = 1;
    for (int i = 0; i < 64; i++) same &= got[i] == (float)text[ntr + 10 + i];
    mg_assert_all(same, "val tokens 10..73 are not the text's bytes after the train split");
    mg_tokens_close(tr);
    mg_tokens_close(va);
    mg_mesh_free(mesh);
}
END_TEST

/* The window of `start` as floats, shifted by `shift`. */
static void expect_window(int64_t start, int64_t T, int shift, float *out) {
    for (int64_t j = 0; j < T; j++) out[j] = (float)text[start + shift + j];
}

START_TEST(training_batches) {
    make_data_set(path, 0.1);
    mg_mesh *mesh = mg_mesh_new(1, &world);
    mg_tokens *tr = mg_tokens_open(path, "train", comm_of(mesh));
    mg_assert_all(tr != NULL, "open: %s", mg_last_error());
    enum { B = 6, T = 3 }; /* T = 3 over 4 ranks: an empty shard on the sequence dim */
    int64_t starts[B], again[B], next[B];
    mg_tokens_train_starts(tr, 42, 7, B, T, starts);
    mg_tokens_train_starts(tr, 42, 7, B, T, again);
    mg_tokens_train_starts(tr, 42, 8, B, T, next);
    int inside = 1, differ = 0;
    for (int r = 0; r < B; r++) {
        inside &= starts[r] >= 0 && starts[r] + T + 1 <= mg_tokens_count(tr) && starts[r] == again[r];
        differ |= starts[r] != next[r];
    }
    mg_assert_all(inside, "training windows outside the split or not repeatable");
    mg_assert_all(differ, "steps 7 and 8 drew the same windows");
    long long mine = 0, lo, hi;
    for (int r = 0; r < B; r++) mine = mine * 1000003 + starts[r];
    MPI_Allreduce(&mine, &lo, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&mine, &hi, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    mg_assert_all(lo == hi, "ranks drew different windows");

    mg_placement ps[3] = {MG_SHARD(0), MG_SHARD(1), MG_REPLICATE};
    const char *names[3] = {"batch sharded", "sequence sharded", "replicated"};
    float want_x[B * T], want_y[B * T];
    for (int r = 0; r < B; r++) {
        expect_window(starts[r], T, 0, want_x + r * T);
        expect_window(starts[r], T, 1, want_y + r * T);
    }
    for (int k = 0; k < 3; k++) {
        mg_spec spec;
        mg_assert_all(mg_spec_make(&spec, mesh, &ps[k], 1, 2, (int64_t[]){B, T}, "test") == MG_OK,
                      "spec: %s", mg_last_error());
        mg_dtensor *x = NULL, *y = NULL;
        mg_assert_all(mg_tokens_batch(tr, starts, B, T, &spec, &spec, &x, &y, NULL) == MG_OK,
                      "%s batch: %s", names[k], mg_last_error());
        mg_tensor *fx = mg_full_tensor(x), *fy = mg_full_tensor(y);
        char msg[256] = "";
        mg_assert_all(mg_test_close(mg_tensor_data(fx), want_x, B * T, 0, 0, msg, sizeof msg),
                      "%s: x is not the text's windows: %s", names[k], msg);
        mg_assert_all(mg_test_close(mg_tensor_data(fy), want_y, B * T, 0, 0, msg, sizeof msg),
                      "%s: y is not x shifted by one: %s", names[k], msg);
        mg_tensor_free(fx);
        mg_tensor_free(fy);
        mg_dtensor_free(x);
        mg_dtensor_free(y);
    }
    /* a window longer than the split is refused on every rank */
    int64_t far[1] = {mg_tokens_count(tr) - 2};
    mg_spec one;
    mg_spec_make(&one, mesh, &ps[2], 1, 2, (int64_t[]){1, T}, "test");
    mg_dtensor *x = NULL, *y = NULL;
    mg_assert_all(mg_tokens_batch(tr, far, 1, T, &one, &one, &x, &y, NULL) != MG_OK &&
                      strstr(mg_last_error(), "too few"),
                  "a window past the end was not refused: %s", mg_last_error());
    mg_tokens_close(tr);
    mg_mesh_free(mesh);
}
END_TEST

START_TEST(evaluation_windows) {
    make_data_set(path, 0.1);
    mg_mesh *mesh = mg_mesh_new(1, &world);
    mg_tokens *va = mg_tokens_open(path, "val", comm_of(mesh));
    mg_assert_all(va != NULL, "open: %s", mg_last_error());
    int64_t n = mg_tokens_count(va), T = 64, w = mg_tokens_eval_windows(va, T);
    mg_assert_all(w == (n - 1) / T && w * T + 1 <= n && (w + 1) * T + 1 > n,
                  "%lld windows of %lld in %lld tokens", (long long)w, (long long)T, (long long)n);
    int64_t starts[3];
    mg_tokens_eval_starts(w - 3, 3, T, starts);
    mg_assert_all(starts[0] == (w - 3) * T && starts[2] == (w - 1) * T, "evaluation starts");
    mg_tokens_close(va);
    mg_mesh_free(mesh);
}
END_TEST

/* The root attribute vocab_size of a token file. */
static void write_vocab(hid_t f, int vocab) {
    hid_t a_sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "vocab_size", H5T_NATIVE_INT, a_sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT, &vocab);
    H5Aclose(a);
    H5Sclose(a_sp);
}

/* Rank 0 writes a token file by hand: `tokens` (of memory type mem_type, shape
 * dims[0..ndim)) as /train/tokens of HDF5 type file_type, with vocab_size
 * `vocab`. Every rank has closed the file it may have open before (the first
 * barrier): HDF5 truncates a file it creates before it locks it, and the lock
 * fails while another rank still holds it open, which left an empty file. */
static void write_tokens(const char *out, const void *tokens, hid_t mem_type, hid_t file_type,
                         int ndim, const hsize_t *dims, int vocab) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (mg_rank() == 0) {
        hid_t f = H5Fcreate(out, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
        write_vocab(f, vocab);
        hid_t g = H5Gcreate2(f, "train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        mg_test_h5_write(g, "tokens", file_type, mem_type, ndim, dims, tokens);
        H5Gclose(g);
        H5Fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* n uint8 tokens as uint8, 1-D unless two_d (then (2, n / 2)) */
static void write_by_hand(const char *out, const uint8_t *tokens, hsize_t n, int vocab, int two_d) {
    hsize_t dims[2] = {two_d ? 2 : n, two_d ? n / 2 : 1};
    write_tokens(out, tokens, H5T_NATIVE_UINT8, H5T_STD_U8LE, two_d ? 2 : 1, dims, vocab);
}

/* n uint16 tokens as HDF5 type `type` (converted from uint16), 1-D */
static void write_typed(const char *out, const uint16_t *tokens, hsize_t n, int vocab, hid_t type) {
    write_tokens(out, tokens, H5T_NATIVE_UINT16, type, 1, &n, vocab);
}

/* Opening `split` of `file` is refused on every rank with a message holding
 * `want`; `what` is the failure's message. */
static void expect_refused(const mg_mesh *mesh, const char *file, const char *split,
                           const char *want, const char *what) {
    mg_tokens *t = mg_tokens_open(file, split, comm_of(mesh));
    mg_assert_all(!t && strstr(mg_last_error(), want), "%s: %s", what, mg_last_error());
}

START_TEST(uint16_tokens) {
    enum { N = 300 };
    mg_mesh *mesh = mg_mesh_new(1, &world);
    uint16_t tokens[N];
    for (int i = 0; i < N; i++) tokens[i] = (uint16_t)((i * 997 + 40000) % 65536);
    write_typed("test_tokens_u16.h5", tokens, N, 65536, H5T_STD_U16LE);
    mg_tokens *t = mg_tokens_open("test_tokens_u16.h5", "train", comm_of(mesh));
    mg_assert_all(t, "uint16 tokens were refused: %s", mg_last_error());
    mg_assert_all(mg_tokens_count(t) == N && mg_tokens_vocab(t) == 65536, "count %lld, vocab %d",
                  (long long)mg_tokens_count(t), mg_tokens_vocab(t));
    float got[N];
    int rc = mg_tokens_read(t, 0, N, got), bad = -1;
    for (int i = 0; rc == MG_OK && i < N && bad < 0; i++)
        if (got[i] != (float)tokens[i]) bad = i;
    mg_assert_all(rc == MG_OK && bad < 0, "uint16 token %d read as %g, want %d (%s)", bad,
                  bad >= 0 ? got[bad] : 0.0, bad >= 0 ? tokens[bad] : 0, mg_last_error());
    mg_tokens_close(t);
    write_typed("test_tokens_u16.h5", tokens, N, 50257, H5T_STD_U16LE);
    expect_refused(mesh, "test_tokens_u16.h5", "train",
                   "token 11 is 50967, outside the vocabulary of 50257",
                   "a uint16 token outside the vocabulary was not named");
    write_typed("test_tokens_u16.h5", tokens, N, 65536, H5T_IEEE_F32LE);
    expect_refused(mesh, "test_tokens_u16.h5", "train", "it must be uint8, uint16 or int32",
                   "float tokens were not refused");
    if (mg_rank() == 0) remove("test_tokens_u16.h5");
    mg_mesh_free(mesh);
}
END_TEST

START_TEST(refusals) {
    mg_mesh *mesh = mg_mesh_new(1, &world);
    uint8_t tokens[100];
    for (int i = 0; i < 100; i++) tokens[i] = (uint8_t)(i % 10);
    tokens[77] = 12; /* outside a vocabulary of 10 */
    write_by_hand("test_tokens_bad.h5", tokens, 100, 10, 0);
    expect_refused(mesh, "test_tokens_bad.h5", "train", "token 77 is 12",
                   "a token outside the vocabulary was not named");
    expect_refused(mesh, "test_tokens_bad.h5", "val", "has no /val/tokens",
                   "a missing split was not refused");
    write_by_hand("test_tokens_bad.h5", tokens, 100, 256, 1);
    expect_refused(mesh, "test_tokens_bad.h5", "train", "1-D", "2-D tokens were not refused");
    /* tokens that are not in the file named (an external link to a good file),
     * or not stored at all (2^40 declared: their scan ran past 60 s) */
    for (int i = 0; i < 100; i++) tokens[i] = (uint8_t)(i % 10);
    write_by_hand("test_tokens_ok.h5", tokens, 100, 10, 0);
    if (mg_rank() == 0) {
        hid_t f = H5Fcreate("test_tokens_link.h5", H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
        write_vocab(f, 10);
        hid_t g = H5Gcreate2(f, "train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5Lcreate_external("test_tokens_ok.h5", "/train/tokens", g, "tokens", H5P_DEFAULT,
                           H5P_DEFAULT);
        hsize_t huge = (hsize_t)1 << 40, chunk = 1 << 20;
        hid_t sp = H5Screate_simple(1, &huge, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_chunk(dcpl, 1, &chunk);
        hid_t v = H5Gcreate2(f, "val", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5Dclose(H5Dcreate2(v, "tokens", H5T_STD_U8LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT));
        H5Gclose(v);
        H5Pclose(dcpl);
        H5Sclose(sp);
        H5Gclose(g);
        H5Fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    expect_refused(mesh, "test_tokens_link.h5", "train",
                   "/train/tokens is an external link (to /train/tokens in file test_tokens_ok.h5)",
                   "tokens behind an external link were not refused");
    double t0 = MPI_Wtime();
    expect_refused(mesh, "test_tokens_link.h5", "val",
                   "/val/tokens declares 1099511627776 bytes but the file holds 0",
                   "2^40 unwritten tokens were not refused");
    mg_assert_all(MPI_Wtime() - t0 < 10, "2^40 unwritten tokens: refused after %.1f s",
                  MPI_Wtime() - t0);
    if (mg_rank() == 0) remove("test_tokens_ok.h5"), remove("test_tokens_link.h5");
    expect_refused(mesh, "test_tokens_none.h5", "train", "test_tokens_none.h5",
                   "a missing file was not named");
    if (mg_rank() == 0) remove("test_tokens_bad.h5");
    mg_mesh_free(mesh);
}
END_TEST

static Suite *make_suite(void) {
    world = mg_world_size();
    make_text();
    const TTest *tests[] = {splits_and_counts, training_batches, evaluation_windows,
                            uint16_tokens, refusals, NULL};
    return mg_test_suite("tokens", tests);
}

static void teardown(void) {
    if (mg_rank() == 0) {
        remove(path);
        remove("test_tokens.txt");
    }
}

int main(int argc, char **argv) { return mg_test_main_mpi(&argc, &argv, make_suite, teardown); }
