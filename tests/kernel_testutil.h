/* kernel_testutil.h: what the CPU kernel suites (test_kernels.c,
 * test_nn_kernels.c) share: the backend under test (BE, CTX), a tensor of test
 * data (rnd) and an output tensor full of a sentinel (junk), so that an element
 * a kernel misses shows. */
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

#endif
