/* testutil.h: helpers shared by the Check suites.
 * - mg_test_rand / mg_test_fill: deterministic test data (xorshift).
 * - mg_test_close: relative comparison of float arrays, reporting the worst element.
 * - mg_test_same_full: the same for two distributed tensors, gathered whole.
 * - mg_test_mesh1d / mg_test_dtensor: a 1-D mesh of the world, and a tensor of
 *   mg_test_fill data placed on it.
 * - mg_test_dump_record: one tensor written as a record of the dump files that
 *   the PyTorch references read (tests/llama_ops_dump.c, llama_model_dump.c);
 *   mg_test_dump_finish: the end of such a program.
 * - MPI suites: mg_test_agree(ok) all-reduces a verdict so every rank asserts the
 *   same thing (a failure on one rank never leaves the others waiting), and
 *   mg_test_run_mpi() runs a suite in no-fork mode on every rank and returns the
 *   exit status agreed by all ranks. Rank 0 prints the Check summary.
 * - Building and running suites: mg_test_case adds a test case of a NULL-terminated
 *   list of tests to a suite, mg_test_suite makes a suite of one such case, and
 *   mg_test_main_mpi is the whole main of an MPI suite (init, setup, run, teardown,
 *   finalize).
 * - A scratch folder for an MPI suite's files: mg_test_dir_make(tag) makes
 *   /tmp/mg-test-TAG-XXXXXX (rank 0) and tells every rank its name, mg_test_dir()
 *   is that name, mg_test_path(name) a file in it, mg_test_dir_remove() removes it
 *   with what it holds (mg_test_remove_tree: files, and subfolders to a depth);
 *   mg_test_write_text(path, text) writes a text file there (rank 0) for every
 *   rank to read. */
#ifndef MG_TESTUTIL_H
#define MG_TESTUTIL_H

#include <check.h>
#include <dirent.h>
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "meshgrad.h"

static inline uint64_t mg_test_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}
/* uniform in [-1, 1) */
static inline float mg_test_rand(uint64_t *s) {
    return (float)((mg_test_next(s) >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
}
static inline void mg_test_fill(float *x, int64_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) x[i] = mg_test_rand(&s);
}
/* integer-valued floats in [-8, 8]: sums of these are exact */
static inline void mg_test_fill_int(float *x, int64_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) x[i] = (float)((int64_t)(mg_test_next(&s) % 17) - 8);
}

/* 1 when |a-b| <= atol + rtol*|b| everywhere; else 0 and a message in msg. */
static inline int mg_test_close(const float *a, const float *b, int64_t n, double rtol, double atol,
                                char *msg, size_t len) {
    int64_t worst = -1;
    double worst_err = 0;
    for (int64_t i = 0; i < n; i++) {
        double err = fabs((double)a[i] - (double)b[i]);
        double lim = atol + rtol * fabs((double)b[i]);
        if (!(err <= lim) && (worst < 0 || err - lim > worst_err)) {
            worst = i;
            worst_err = err - lim;
        }
    }
    if (worst < 0) return 1;
    if (msg)
        snprintf(msg, len, "element %lld: got %.9g, want %.9g (rtol %g, atol %g)", (long long)worst,
                 a[worst], b[worst], rtol, atol);
    return 0;
}

/* 1 when the full tensors of a and b agree within rtol, relative to each
 * element and to the largest |b| (sums in another order cancel differently);
 * else 0 and a message. A reference of all zeros fails: it shows nothing. */
static inline int mg_test_same_full(const mg_dtensor *a, const mg_dtensor *b, double rtol, char *msg,
                                    size_t len) {
    if (!a || !b) {
        snprintf(msg, len, "missing tensor (%s)", a ? "reference" : "result");
        return 0;
    }
    mg_tensor *fa = mg_full_tensor(a), *fb = mg_full_tensor(b);
    int64_t n = mg_tensor_numel(fb);
    const float *pb = mg_tensor_data(fb);
    double big = 0;
    for (int64_t i = 0; i < n; i++) big = fmax(big, fabs(pb[i]));
    int ok = mg_tensor_numel(fa) == n &&
             mg_test_close(mg_tensor_data(fa), pb, n, rtol, rtol * big, msg, len);
    if (ok && big == 0) {
        snprintf(msg, len, "the reference is all zeros: the comparison shows nothing");
        ok = 0;
    }
    mg_tensor_free(fa);
    mg_tensor_free(fb);
    return ok;
}

static inline mg_mesh *mg_test_mesh1d(void) {
    int n = mg_world_size();
    return mg_mesh_new(1, &n);
}

/* (ndim, shape) of mg_test_fill(seed) data, at placement p of a 1-D mesh */
static inline mg_dtensor *mg_test_dtensor(const mg_mesh *mesh, int ndim, const int64_t *shape,
                                          mg_placement p, uint64_t seed) {
    mg_tensor *t = mg_tensor_new(ndim, shape);
    mg_test_fill(mg_tensor_data(t), mg_tensor_numel(t), seed);
    mg_dtensor *d = mg_distribute(mesh, t, &p, 1);
    mg_tensor_free(t);
    return d;
}

/* Writes t to f as one record of a dump file (tests/llama_torch_ref.py's
 * read_dump reads them): a 64-byte name, an int32 ndim, ndim int64 sizes and
 * the float32 data, in the host's byte order (little-endian, as the readers
 * take it). */
static inline void mg_test_dump_record(FILE *f, const char *name, const mg_tensor *t) {
    char tag[64] = {0}; /* the name, cut to 63 bytes, zero-padded */
    memcpy(tag, name, strnlen(name, sizeof tag - 1));
    int32_t nd = mg_tensor_ndim(t);
    fwrite(tag, 1, sizeof tag, f);
    fwrite(&nd, sizeof nd, 1, f);
    fwrite(mg_tensor_shape(t), sizeof(int64_t), (size_t)nd, f);
    fwrite(mg_tensor_data((mg_tensor *)t), sizeof(float), (size_t)mg_tensor_numel(t), f);
}

static inline int mg_test_agree(int ok) {
    int all = ok ? 1 : 0, mine = all;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all;
}

/* The end of a dump program: closes out (a failed close is a failure) and
 * frees mesh, either NULL when not made; agrees on rc == 0 with every rank and
 * finalizes. Returns the exit status: 0 when every rank succeeded, else 1. */
static inline int mg_test_dump_finish(FILE *out, mg_mesh *mesh, int rc) {
    if (out && fclose(out) != 0) rc = 1;
    if (mesh) mg_mesh_free(mesh);
    rc = mg_test_agree(rc == 0) ? 0 : 1;
    mg_finalize();
    return rc;
}

/* Prints "rank R: FILE:LINE: failed: EXPR: message" to stderr in one write, so
 * that lines of several ranks do not mix. Used by mg_assert_all. */
static inline void mg_test_say_failed(const char *file, int line, const char *expr, const char *fmt,
                                      ...) __attribute__((format(printf, 4, 5)));
static inline void mg_test_say_failed(const char *file, int line, const char *expr, const char *fmt,
                                      ...) {
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    int rank = 0, initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "rank %d: %s:%d: failed: %s: %s\n", rank, file, line, expr, what);
    fflush(stderr);
}

/* Assert `expr` on every rank after agreeing on it: the message names the rank(s)
 * that failed (each failing rank prints its own line to stderr). */
#define mg_assert_all(expr, ...)                                                       \
    do {                                                                               \
        int ok_ = (expr) ? 1 : 0;                                                      \
        if (!ok_) mg_test_say_failed(__FILE__, __LINE__, #expr, __VA_ARGS__);          \
        int all_ = mg_test_agree(ok_);                                                 \
        ck_assert_msg(all_, "failed on some rank: %s", #expr);                         \
    } while (0)

/* Runs the suite on every rank (CK_NOFORK), prints rank 0's summary and returns
 * the exit status all ranks agree on. Call between MPI_Init and MPI_Finalize. */
static inline int mg_test_run_mpi(Suite *suite) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    SRunner *sr = srunner_create(suite);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, rank == 0 ? CK_NORMAL : CK_SILENT);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    int ok = mg_test_agree(failed == 0);
    return ok ? 0 : 1;
}

/* Serial suites: fork mode unless CK_FORK=no. */
static inline int mg_test_run(Suite *suite) {
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}

/* The scratch folder's name: empty until mg_test_dir_make, or when it could not be made. */
static inline char *mg_test_dir(void) {
    static char dir[256];
    return dir;
}

/* Rank 0 writes `text` to path; every rank returns once it is there. */
static inline void mg_test_write_text(const char *path, const char *text) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        FILE *f = fopen(path, "w");
        fputs(text, f);
        fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Every rank: rank 0 makes /tmp/mg-test-TAG-XXXXXX, every rank learns its name. */
static inline void mg_test_dir_make(const char *tag) {
    char *dir = mg_test_dir();
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        snprintf(dir, 256, "/tmp/mg-test-%s-XXXXXX", tag);
        if (!mkdtemp(dir)) dir[0] = '\0';
    }
    MPI_Bcast(dir, 256, MPI_CHAR, 0, MPI_COMM_WORLD);
}

/* DIR/name in the scratch folder; the four latest results stay valid. */
static inline const char *mg_test_path(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", mg_test_dir(), name);
    return buf[k];
}

/* Removes the files in `path` (and in its subfolders when depth > 0), then it. */
static inline void mg_test_remove_tree(const char *path, int depth) {
    DIR *d = opendir(path);
    struct dirent *e;
    char sub[1024];
    while (d && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(sub, sizeof sub, "%.500s/%.500s", path, e->d_name);
        struct stat sb;
        if (depth > 0 && stat(sub, &sb) == 0 && S_ISDIR(sb.st_mode))
            mg_test_remove_tree(sub, depth - 1);
        else
            unlink(sub);
    }
    if (d) closedir(d);
    rmdir(path);
}

/* Every rank, after the tests: rank 0 removes the scratch folder (subfolders one deep). */
static inline void mg_test_dir_remove(void) {
    int rank = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0 && mg_test_dir()[0]) mg_test_remove_tree(mg_test_dir(), 1);
}

/* A fork-mode test may run this long (seconds); the whole program is bounded by
 * MG_TEST_TIMEOUT in serial-run.sh / mpi-run.sh. No-fork runs (MPI) have no limit. */
#define MG_TEST_CASE_TIMEOUT 120

/* Adds a test case `name` holding `tests` (NULL-terminated, in order) to suite s and
 * returns it, for loop tests and fixtures. */
static inline TCase *mg_test_case(Suite *s, const char *name, const TTest *const *tests) {
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, MG_TEST_CASE_TIMEOUT);
    for (int i = 0; tests[i]; i++) tcase_add_test(tc, tests[i]);
    suite_add_tcase(s, tc);
    return tc;
}

/* A suite `name` of one test case, also `name`, holding `tests` (NULL-terminated). */
static inline Suite *mg_test_suite(const char *name, const TTest *const *tests) {
    Suite *s = suite_create(name);
    mg_test_case(s, name, tests);
    return s;
}

/* The main of an MPI suite: mg_init (exit 1 when it fails), then make_suite() on every
 * rank (it sets up what the tests share and returns the suite; NULL skips the suite
 * with exit 77, after saying why), the suite on every rank (mg_test_run_mpi), then
 * teardown() (NULL: none) on every rank and mg_finalize. Returns the exit status. */
static inline int mg_test_main_mpi(int *argc, char ***argv, Suite *(*make_suite)(void),
                                   void (*teardown)(void)) {
    if (mg_init(argc, argv) != MG_OK) return 1;
    Suite *s = make_suite();
    int rc = s ? mg_test_run_mpi(s) : 77;
    if (s && teardown) teardown();
    mg_finalize();
    return rc;
}

#endif
