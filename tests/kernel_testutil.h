/* kernel_testutil.h: what the CPU kernel suites (test_kernels.c,
 * test_nn_kernels.c, test_llama_kernels.c) share: the backend under test (BE,
 * CTX), a tensor of test data (rnd) and an output tensor full of a sentinel
 * (junk, vec), so that an element a kernel misses shows; the pieces of a row
 * split in two as an op splits it across ranks (columns, put_columns, slice);
 * floats against a reference in double (expect_close_d). */
#ifndef MG_KERNEL_TESTUTIL_H
#define MG_KERNEL_TESTUTIL_H

#include "backend/backend.h"
#include "tensor.h"
#include "testutil.h"

#define BE (mg_backend_cpu()->iface)
#define CTX (mg_backend_cpu()->context)

static inline mg_tensor *rnd(int nd, const int64_t *shape, uint64_t seed) {
    mg_tensor *t = mg_tensor_alloc(NULL, nd, shape);
    ck_assert_ptr_nonnull(t);
    mg_test_fill(t->data, t->numel, seed);
    return t;
}

static inline mg_tensor *junk(int nd, const int64_t *shape) {
    mg_tensor *t = mg_tensor_alloc(NULL, nd, shape);
    ck_assert_ptr_nonnull(t);
    for (int64_t i = 0; i < t->numel; i++) t->data[i] = 12345.0f;
    return t;
}

static inline mg_tensor *vec(int64_t n) { return junk(1, &n); }

/* columns [c0, c0 + n) of x (R, C) as a new (R, n) tensor */
static inline mg_tensor *columns(const mg_tensor *x, int64_t c0, int64_t n) {
    int64_t rows = x->shape[0], c = x->shape[1];
    mg_tensor *t = junk(2, (int64_t[]){rows, n});
    for (int64_t r = 0; r < rows; r++)
        memcpy(t->data + r * n, x->data + r * c + c0, (size_t)n * sizeof(float));
    return t;
}

/* part (R, n) into columns [c0, c0 + n) of x (R, C) */
static inline void put_columns(mg_tensor *x, const mg_tensor *part, int64_t c0) {
    int64_t rows = x->shape[0], c = x->shape[1], n = part->shape[1];
    for (int64_t r = 0; r < rows; r++)
        memcpy(x->data + r * c + c0, part->data + r * n, (size_t)n * sizeof(float));
}

/* elements [c0, c0 + n) of a vector (NULL stays NULL) */
static inline mg_tensor *slice(const mg_tensor *x, int64_t c0, int64_t n) {
    if (!x) return NULL;
    mg_tensor *t = vec(n);
    memcpy(t->data, x->data + c0, (size_t)n * sizeof(float));
    return t;
}

/* every got[i] within tol of want[i], relative to the largest |want| (at least 1) */
static inline void expect_close_d(const float *got, const double *want, int64_t n, double tol,
                                  const char *what) {
    double big = 1e-30;
    for (int64_t i = 0; i < n; i++) big = fmax(big, fabs(want[i]));
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(fabs(got[i] - want[i]) <= tol * fmax(big, 1.0),
                      "%s[%lld]: got %.9g want %.9g", what, (long long)i, got[i], want[i]);
}

#endif
