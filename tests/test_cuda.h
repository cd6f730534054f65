/* test_cuda.h: what the CUDA test programs share (test_cuda.c: every kernel;
 * test_cuda_ops.c: NCCL, redistribute and ops with autograd): the two
 * backends, a table of the worst error met per kernel or op (rank 0 prints it
 * as "kernel <name> max_rel_err <e> tol <t> cases <n>" lines, which
 * scripts/gpu-kit/run.sh reads), tensors on either device, the relative error
 * and the tolerances, and the start: the GPUs every rank sees, and this rank's
 * GPU (its rank on the node modulo the GPUs). Functions are static inline so
 * each program uses what it needs. */
#ifndef MG_TEST_CUDA_H
#define MG_TEST_CUDA_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

#include "backend/backend.h"
#include "backend/device.h"
#include "status.h"
#include "tensor.h"
#include "testutil.h"

static mg_backend *CPU, *GPU; /* set by cuda_test_start */

/* ---- results table --------------------------------------------------------------- */

#define MAX_KERNELS 128 /* rows of the table; a kernel past them goes unlisted */
static struct {
    char name[40];
    double worst, tol;
    int cases;
} table[MAX_KERNELS];
static int ntable;

static inline void note(const char *kernel, double err, double tol) {
    int i = 0;
    while (i < ntable && strcmp(table[i].name, kernel) != 0) i++;
    if (i == ntable) {
        if (ntable == MAX_KERNELS) return;
        snprintf(table[i].name, sizeof table[i].name, "%s", kernel);
        table[i].worst = 0;
        table[i].tol = tol;
        ntable++;
    }
    if (!(err <= table[i].worst)) table[i].worst = err; /* NaN sticks */
    table[i].cases++;
}

static inline void print_table(void) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank != 0) return;
    printf("CUDA vs CPU, max relative error per kernel (relative to the largest CPU value):\n");
    for (int i = 0; i < ntable; i++) {
        char name[sizeof table[i].name];
        memcpy(name, table[i].name, sizeof name);
        for (char *c = name; *c; c++)
            if (*c == ' ') *c = '_'; /* one field per column */
        printf("kernel %-28s max_rel_err %-10.3g tol %-8.1g cases %d\n", name, table[i].worst,
               table[i].tol, table[i].cases);
    }
    fflush(stdout);
}

/* ---- helpers ------------------------------------------------------------------------ */

static inline mg_tensor *host(int nd, const int64_t *shape) {
    mg_tensor *t = mg_tensor_alloc_on(NULL, MG_DEVICE_CPU, nd, shape);
    ck_assert_ptr_nonnull(t);
    return t;
}

static inline mg_tensor *host_rand(int nd, const int64_t *shape, uint64_t seed) {
    mg_tensor *t = host(nd, shape);
    mg_test_fill(t->data, t->numel, seed);
    return t;
}

static inline mg_tensor *to_gpu(const mg_tensor *h) {
    mg_tensor *d = mg_tensor_alloc_on(NULL, MG_DEVICE_CUDA, h->ndim, h->shape);
    ck_assert_msg(d != NULL, "device alloc: %s", mg_last_error());
    ck_assert_int_eq(mg_tensor_copy_any(h, d), MG_OK);
    return d;
}

static inline mg_tensor *to_cpu(const mg_tensor *d) {
    mg_tensor *h = host(d->ndim, d->shape);
    ck_assert_int_eq(mg_tensor_copy_any(d, h), MG_OK);
    return h;
}

/* a tensor full of a sentinel, on either device, so a missed element shows */
static inline mg_tensor *junk_on(int device, int nd, const int64_t *shape) {
    mg_tensor *t = mg_tensor_alloc_on(NULL, device, nd, shape);
    ck_assert_ptr_nonnull(t);
    mg_backend *be = mg_backend_of(t);
    be->iface->fill(be->context, t, 12345.0f);
    return t;
}

/* max |a - b| / max |b|; NaN and inf must match exactly */
static inline double rel_err(const float *a, const float *b, int64_t n) {
    double scale = 0, worst = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(b[i]) && fabs(b[i]) > scale) scale = fabs(b[i]);
    if (scale == 0) scale = 1;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(b[i]) || isinf(b[i])) {
            if (!(isnan(b[i]) ? isnan(a[i]) : a[i] == b[i])) return INFINITY;
            continue;
        }
        double e = fabs((double)a[i] - (double)b[i]) / scale;
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

/* device result d against host result h */
static inline void expect(const char *kernel, const mg_tensor *d, const mg_tensor *h, double tol) {
    mg_assert_all(d->numel == h->numel, "%s: %lld vs %lld elements", kernel, (long long)d->numel,
                  (long long)h->numel);
    mg_tensor *got = to_cpu(d);
    double e = rel_err(got->data, h->data, h->numel);
    note(kernel, e, tol);
    mg_assert_all(e <= tol, "%s: max relative error %.3g above %.1g", kernel, e, tol);
    mg_tensor_free(got);
}

static inline void expect_synced(void) {
    int rc = mg_cuda_synchronize();
    mg_assert_all(rc == MG_OK, "CUDA error: %s", mg_last_error());
}

#define TOL_EXACT 0.0   /* moves and copies */
#define TOL_ARITH 1e-6  /* one rounding, maybe fused */
#define TOL_MATH 1e-5   /* expf, tanhf, logf: a few ulps */
#define TOL_SUM 1e-5    /* sums in another order */
#define TOL_GEMM 1e-5   /* fp32 GEMM, another blocking */
#define TOL_BF16 5e-4   /* bf16 GEMM: the same rounded inputs, fp32 sums in another order (tensor cores) */

/* The fewest GPUs any rank sees (collective). */
static inline int cuda_test_gpus(void) {
    int count = mg_cuda_device_count(), fewest = count;
    MPI_Allreduce(&count, &fewest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return fewest;
}

/* Collective: the CUDA backend on this rank's GPU (its rank on the node modulo
 * the GPUs, so ranks may share one), CPU and GPU set. Returns 1 when every rank
 * has it; *one_gpu_each is 1 when no two ranks of a node share a GPU (NCCL
 * needs that). */
static inline int cuda_test_start(int *one_gpu_each) {
    MPI_Comm node;
    int local = 0, local_size = 1, count = mg_cuda_device_count();
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_size(node, &local_size);
    MPI_Comm_free(&node);
    int rc = count > 0 ? mg_cuda_backend_init(local % count) : MG_EDEVICE;
    if (rc != MG_OK) fprintf(stderr, "rank %d: %s\n", mg_rank(), mg_last_error());
    if (!mg_test_agree(rc == MG_OK)) return 0;
    CPU = mg_backend_cpu();
    GPU = mg_backend_cuda();
    *one_gpu_each = mg_test_agree(local_size <= count);
    return 1;
}

#endif
