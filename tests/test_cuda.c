/* test_cuda.c: the CUDA backend and the NCCL comm, against the CPU.
 *
 * Kernel suite: every kernel of backend.h runs on the same inputs on the CPU
 * backend and on the CUDA backend; the largest error relative to the largest
 * CPU value is asserted under a per-kernel tolerance, and rank 0 prints a
 * table of them ("kernel <name> max_rel_err <e> tol <t>"). Ops suite: a few
 * sharded ops with autograd (linear, gelu, matmul, permute, sums, expand,
 * losses, redistribute) give the same loss and gradients on both devices, NCCL
 * collectives give the expected values on device buffers and fall back to MPI
 * on host buffers, and device shards survive every redistribute.
 *
 * The network ops' kernels and ops are in cuda_nn_cases.h, included here.
 *
 * Without a GPU (or built without CUDA) it prints "no CUDA device: skipping"
 * and exits 77. The ops suite needs one GPU per rank (NCCL); with more ranks on
 * a node than GPUs only the kernel suite runs (every rank on a shared GPU). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

#include "backend/backend.h"
#include "backend/device.h"
#include "dist/comm.h"
#include "dist/dtensor.h"
#include "dist/mesh.h"
#include "status.h"
#include "tensor.h"
#include "testutil.h"

static mg_backend *CPU, *GPU;

/* ---- results table --------------------------------------------------------------- */

#define MAX_KERNELS 64
static struct {
    char name[40];
    double worst, tol;
    int cases;
} table[MAX_KERNELS];
static int ntable;

static void note(const char *kernel, double err, double tol) {
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

static void print_table(void) {
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

static mg_tensor *host(int nd, const int64_t *shape) {
    mg_tensor *t = mg_tensor_alloc_on(NULL, MG_DEVICE_CPU, nd, shape);
    ck_assert_ptr_nonnull(t);
    return t;
}

static mg_tensor *host_rand(int nd, const int64_t *shape, uint64_t seed) {
    mg_tensor *t = host(nd, shape);
    mg_test_fill(t->data, t->numel, seed);
    return t;
}

static mg_tensor *to_gpu(const mg_tensor *h) {
    mg_tensor *d = mg_tensor_alloc_on(NULL, MG_DEVICE_CUDA, h->ndim, h->shape);
    ck_assert_msg(d != NULL, "device alloc: %s", mg_last_error());
    ck_assert_int_eq(mg_tensor_copy_any(h, d), MG_OK);
    return d;
}

static mg_tensor *to_cpu(const mg_tensor *d) {
    mg_tensor *h = host(d->ndim, d->shape);
    ck_assert_int_eq(mg_tensor_copy_any(d, h), MG_OK);
    return h;
}

/* a tensor full of a sentinel, on either device, so a missed element shows */
static mg_tensor *junk_on(int device, int nd, const int64_t *shape) {
    mg_tensor *t = mg_tensor_alloc_on(NULL, device, nd, shape);
    ck_assert_ptr_nonnull(t);
    mg_backend *be = mg_backend_of(t);
    be->iface->fill(be->context, t, 12345.0f);
    return t;
}

/* max |a - b| / max |b|; NaN and inf must match exactly */
static double rel_err(const float *a, const float *b, int64_t n) {
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
static void expect(const char *kernel, const mg_tensor *d, const mg_tensor *h, double tol) {
    mg_assert_all(d->numel == h->numel, "%s: %lld vs %lld elements", kernel, (long long)d->numel,
                  (long long)h->numel);
    mg_tensor *got = to_cpu(d);
    double e = rel_err(got->data, h->data, h->numel);
    note(kernel, e, tol);
    mg_assert_all(e <= tol, "%s: max relative error %.3g above %.1g", kernel, e, tol);
    mg_tensor_free(got);
}

static void expect_synced(void) {
    int rc = mg_cuda_synchronize();
    mg_assert_all(rc == MG_OK, "CUDA error: %s", mg_last_error());
}

#define TOL_EXACT 0.0   /* moves and copies */
#define TOL_ARITH 1e-6  /* one rounding, maybe fused */
#define TOL_MATH 1e-5   /* expf, tanhf, logf: a few ulps */
#define TOL_SUM 1e-5    /* sums in another order */
#define TOL_GEMM 1e-5   /* fp32 GEMM, another blocking */

/* ---- gemm --------------------------------------------------------------------------- */

static void gemm_case(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t pad, float beta,
                      const char *name, double tol) {
    int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    int64_t lda = ac + pad, ldb = bc + pad, ldc = n + pad;
    int64_t na = ar * lda + 1, nb = br * ldb + 1, nc = m * ldc + 1;
    mg_tensor *a = host_rand(1, &na, 1), *b = host_rand(1, &nb, 2), *c = host_rand(1, &nc, 3);
    mg_tensor *da = to_gpu(a), *db = to_gpu(b), *dc = to_gpu(c);
    CPU->iface->gemm(CPU->context, ta, tb, m, n, k, 1.5f, a->data, lda, b->data, ldb, beta, c->data,
                     ldc);
    GPU->iface->gemm(GPU->context, ta, tb, m, n, k, 1.5f, da->data, lda, db->data, ldb, beta,
                     dc->data, ldc);
    expect(name, dc, c, tol);
    mg_tensor_free(a), mg_tensor_free(b), mg_tensor_free(c);
    mg_tensor_free(da), mg_tensor_free(db), mg_tensor_free(dc);
}

START_TEST(test_gemm) {
    static const int64_t sizes[][3] = {{1, 1, 1},    {3, 5, 7},     {0, 4, 3},    {4, 0, 3},
                                       {4, 3, 0},    {17, 33, 65},  {64, 1, 128}, {1, 70, 1},
                                       {128, 96, 257}, {256, 512, 384}};
    for (int combo = 0; combo < 4; combo++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int64_t pad = 0; pad <= 3; pad += 3) {
                gemm_case(combo & 1, combo >> 1, sizes[s][0], sizes[s][1], sizes[s][2], pad, 0.0f,
                          "gemm", TOL_GEMM);
                gemm_case(combo & 1, combo >> 1, sizes[s][0], sizes[s][1], sizes[s][2], pad, 0.5f,
                          "gemm", TOL_GEMM);
            }
    expect_synced();
}
END_TEST

START_TEST(test_gemm_tf32) {
    mg_backend_cuda_set_tf32(1);
    ck_assert_int_eq(mg_backend_cuda_tf32(), 1);
    for (int combo = 0; combo < 4; combo++)
        gemm_case(combo & 1, combo >> 1, 256, 256, 512, 0, 0.0f, "gemm (tf32)", 1e-2);
    mg_backend_cuda_set_tf32(0);
    expect_synced();
}
END_TEST

START_TEST(test_gemm_batched) {
    int64_t batch = 5, m = 24, n = 20, k = 36;
    for (int combo = 0; combo < 4; combo++)
        for (int shared_b = 0; shared_b < 2; shared_b++) {
            bool ta = combo & 1, tb = combo >> 1;
            int64_t lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
            int64_t na = batch * m * k, nb = (shared_b ? 1 : batch) * k * n, nc = batch * m * n;
            mg_tensor *a = host_rand(1, &na, 4), *b = host_rand(1, &nb, 5), *c = host_rand(1, &nc, 6);
            mg_tensor *da = to_gpu(a), *db = to_gpu(b), *dc = to_gpu(c);
            int64_t sb = shared_b ? 0 : k * n;
            CPU->iface->gemm_batched(CPU->context, ta, tb, m, n, k, 2.0f, a->data, lda, m * k,
                                     b->data, ldb, sb, 1.0f, c->data, ldc, m * n, batch);
            GPU->iface->gemm_batched(GPU->context, ta, tb, m, n, k, 2.0f, da->data, lda, m * k,
                                     db->data, ldb, sb, 1.0f, dc->data, ldc, m * n, batch);
            expect("gemm_batched", dc, c, TOL_GEMM);
            /* k = 0: C = beta C in every entry */
            CPU->iface->gemm_batched(CPU->context, ta, tb, m, n, 0, 2.0f, a->data, lda, m * k,
                                     b->data, ldb, sb, 0.5f, c->data, ldc, m * n, batch);
            GPU->iface->gemm_batched(GPU->context, ta, tb, m, n, 0, 2.0f, da->data, lda, m * k,
                                     db->data, ldb, sb, 0.5f, dc->data, ldc, m * n, batch);
            expect("gemm_batched", dc, c, TOL_EXACT);
            mg_tensor_free(a), mg_tensor_free(b), mg_tensor_free(c);
            mg_tensor_free(da), mg_tensor_free(db), mg_tensor_free(dc);
        }
    expect_synced();
}
END_TEST

/* ---- layout -------------------------------------------------------------------------- */

static void permute_case(int nd, const int64_t *shape, const int *perm) {
    mg_tensor *x = host_rand(nd, shape, 7), *dx = to_gpu(x);
    int64_t os[MG_MAX_DIMS];
    for (int i = 0; i < nd; i++) os[i] = shape[perm[i]];
    mg_tensor *out = junk_on(MG_DEVICE_CPU, nd, os), *dout = junk_on(MG_DEVICE_CUDA, nd, os);
    CPU->iface->permute(CPU->context, x, perm, out);
    GPU->iface->permute(GPU->context, dx, perm, dout);
    expect("permute", dout, out, TOL_EXACT);
    mg_tensor_free(x), mg_tensor_free(dx), mg_tensor_free(out), mg_tensor_free(dout);
}

START_TEST(test_permute) {
    int64_t s3[3] = {5, 7, 9}, s4[4] = {2, 3, 4, 5}, s1[1] = {11}, s2[2] = {65, 33};
    int p3[][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    for (int i = 0; i < 6; i++) permute_case(3, s3, p3[i]);
    int p4[][4] = {{3, 2, 1, 0}, {0, 2, 3, 1}, {1, 0, 3, 2}};
    for (int i = 0; i < 3; i++) permute_case(4, s4, p4[i]);
    permute_case(1, s1, (int[]){0});
    permute_case(2, s2, (int[]){1, 0});
    int64_t s0[3] = {3, 0, 4};
    permute_case(3, s0, p3[3]);
    expect_synced();
}
END_TEST

static void copy_block_case(int nd, const int64_t *ss, const int64_t *ds, const int64_t *so,
                            const int64_t *dof, const int64_t *ext) {
    mg_tensor *src = host_rand(nd, ss, 8), *dsrc = to_gpu(src);
    mg_tensor *dst = host_rand(nd, ds, 9), *ddst = to_gpu(dst);
    CPU->iface->copy_block(CPU->context, src, so, dst, dof, ext);
    GPU->iface->copy_block(GPU->context, dsrc, so, ddst, dof, ext);
    expect("copy_block", ddst, dst, TOL_EXACT);
    mg_tensor_free(src), mg_tensor_free(dsrc), mg_tensor_free(dst), mg_tensor_free(ddst);
}

START_TEST(test_copy_block) {
    copy_block_case(3, (int64_t[]){6, 7, 8}, (int64_t[]){4, 9, 8}, (int64_t[]){1, 2, 0},
                    (int64_t[]){0, 3, 0}, (int64_t[]){3, 5, 8});
    copy_block_case(3, (int64_t[]){6, 7, 8}, (int64_t[]){6, 7, 8}, (int64_t[]){2, 0, 0},
                    (int64_t[]){0, 0, 0}, (int64_t[]){4, 7, 8}); /* one contiguous run */
    copy_block_case(2, (int64_t[]){5, 9}, (int64_t[]){7, 4}, (int64_t[]){1, 3},
                    (int64_t[]){2, 1}, (int64_t[]){3, 3});
    copy_block_case(4, (int64_t[]){2, 3, 4, 5}, (int64_t[]){3, 3, 2, 6}, (int64_t[]){1, 0, 2, 1},
                    (int64_t[]){0, 0, 0, 2}, (int64_t[]){1, 3, 2, 4});
    copy_block_case(2, (int64_t[]){5, 9}, (int64_t[]){7, 4}, (int64_t[]){1, 3},
                    (int64_t[]){2, 1}, (int64_t[]){0, 3}); /* empty box */
    copy_block_case(0, NULL, NULL, NULL, NULL, NULL);
    expect_synced();
}
END_TEST

START_TEST(test_copy_fill) {
    int64_t n = 100003;
    mg_tensor *x = host_rand(1, &n, 10), *dx = to_gpu(x);
    mg_tensor *y = junk_on(MG_DEVICE_CPU, 1, &n), *dy = junk_on(MG_DEVICE_CUDA, 1, &n);
    CPU->iface->copy(CPU->context, x, y);
    GPU->iface->copy(GPU->context, dx, dy);
    expect("copy", dy, y, TOL_EXACT);
    float values[3] = {0.0f, -0.0f, 3.5f};
    for (int i = 0; i < 3; i++) {
        CPU->iface->fill(CPU->context, y, values[i]);
        GPU->iface->fill(GPU->context, dy, values[i]);
        expect("fill", dy, y, TOL_EXACT);
        mg_tensor *back = to_cpu(dy);
        mg_assert_all(signbit(back->data[7]) == signbit(values[i]), "fill keeps the sign of %g",
                      values[i]);
        mg_tensor_free(back);
    }
    mg_tensor_free(x), mg_tensor_free(dx), mg_tensor_free(y), mg_tensor_free(dy);
    expect_synced();
}
END_TEST

/* ---- elementwise ----------------------------------------------------------------------- */

static void binary_case(mg_binary_op op, int nd, const int64_t *as, int ndb, const int64_t *bs,
                        bool in_place) {
    int64_t os[MG_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        int j = i - (nd - ndb);
        os[i] = as[i] != 1 ? as[i] : (j >= 0 ? bs[j] : 1);
    }
    mg_tensor *a = host_rand(nd, as, 11), *b = host_rand(ndb, bs, 12);
    mg_tensor *da = to_gpu(a), *db = to_gpu(b);
    mg_tensor *out = in_place ? a : junk_on(MG_DEVICE_CPU, nd, os);
    mg_tensor *dout = in_place ? da : junk_on(MG_DEVICE_CUDA, nd, os);
    CPU->iface->binary(CPU->context, op, a, b, out);
    GPU->iface->binary(GPU->context, op, da, db, dout);
    char name[40];
    snprintf(name, sizeof name, "binary %s", mg_binary_names[op]);
    expect(name, dout, out, op == MG_BINARY_GELU_BACKWARD ? TOL_MATH : TOL_ARITH);
    if (!in_place) mg_tensor_free(out), mg_tensor_free(dout);
    mg_tensor_free(a), mg_tensor_free(b), mg_tensor_free(da), mg_tensor_free(db);
}

START_TEST(test_binary) {
    mg_binary_op op = (mg_binary_op)_i;
    int64_t full[3] = {4, 5, 6}, mid[3] = {1, 5, 1}, outer[3] = {4, 1, 6}, one[3] = {1, 1, 1};
    int64_t bias[1] = {6}, big[2] = {300, 517}, row[1] = {517}, col[2] = {300, 1};
    binary_case(op, 3, full, 3, full, false);
    binary_case(op, 3, full, 3, mid, false);
    binary_case(op, 3, outer, 3, mid, false);
    binary_case(op, 3, full, 3, one, false);
    binary_case(op, 3, full, 1, bias, false);
    binary_case(op, 2, big, 1, row, false);
    binary_case(op, 2, big, 2, col, false);
    binary_case(op, 3, full, 3, mid, true);
    int64_t empty[2] = {0, 5}, erow[2] = {1, 5};
    binary_case(op, 2, empty, 2, erow, false);
    binary_case(op, 0, NULL, 0, NULL, false);
    expect_synced();
}
END_TEST

START_TEST(test_unary) {
    int64_t n = 70001;
    for (int op = 0; op < MG_UNARY_COUNT; op++) {
        mg_tensor *x = host_rand(1, &n, 13);
        if (op == MG_UNARY_LOG)
            for (int64_t i = 0; i < n; i++) x->data[i] = fabsf(x->data[i]) + 0.01f;
        mg_tensor *dx = to_gpu(x);
        mg_tensor *out = junk_on(MG_DEVICE_CPU, 1, &n), *dout = junk_on(MG_DEVICE_CUDA, 1, &n);
        CPU->iface->unary(CPU->context, (mg_unary_op)op, x, -0.75f, out);
        GPU->iface->unary(GPU->context, (mg_unary_op)op, dx, -0.75f, dout);
        char name[40];
        snprintf(name, sizeof name, "unary %s", mg_unary_names[op]);
        bool math = op == MG_UNARY_GELU || op == MG_UNARY_LOG;
        expect(name, dout, out, math ? TOL_MATH : TOL_ARITH);
        mg_tensor_free(x), mg_tensor_free(dx), mg_tensor_free(out), mg_tensor_free(dout);
    }
    expect_synced();
}
END_TEST

START_TEST(test_axpy) {
    int64_t sizes[3] = {1, 1000, 123457};
    for (int s = 0; s < 3; s++) {
        mg_tensor *x = host_rand(1, &sizes[s], 14), *y = host_rand(1, &sizes[s], 15);
        mg_tensor *dx = to_gpu(x), *dy = to_gpu(y);
        CPU->iface->axpy(CPU->context, 0.3f, x, y);
        GPU->iface->axpy(GPU->context, 0.3f, dx, dy);
        expect("axpy", dy, y, TOL_ARITH);
        mg_tensor_free(x), mg_tensor_free(y), mg_tensor_free(dx), mg_tensor_free(dy);
    }
    expect_synced();
}
END_TEST

/* ---- reductions ------------------------------------------------------------------------ */

static void reduce_case(int nd, const int64_t *xs, unsigned mask, bool with_nan) {
    int64_t os[MG_MAX_DIMS];
    for (int d = 0; d < nd; d++) os[d] = (mask >> d) & 1 ? 1 : xs[d];
    mg_tensor *x = host_rand(nd, xs, 16 + mask);
    if (with_nan && x->numel > 3) x->data[x->numel / 3] = NAN;
    mg_tensor *dx = to_gpu(x);
    for (int max = 0; max < 2; max++) {
        mg_tensor *out = junk_on(MG_DEVICE_CPU, nd, os), *dout = junk_on(MG_DEVICE_CUDA, nd, os);
        if (max) {
            CPU->iface->reduce_max(CPU->context, x, out);
            GPU->iface->reduce_max(GPU->context, dx, dout);
        } else {
            CPU->iface->reduce_sum(CPU->context, x, out);
            GPU->iface->reduce_sum(GPU->context, dx, dout);
        }
        expect(max ? "reduce_max" : "reduce_sum", dout, out, max ? TOL_EXACT : TOL_SUM);
        mg_tensor_free(out), mg_tensor_free(dout);
    }
    mg_tensor_free(x), mg_tensor_free(dx);
}

START_TEST(test_reduce) {
    int64_t s4[4] = {3, 4, 5, 6};
    for (unsigned mask = 0; mask < 16; mask++) reduce_case(4, s4, mask, false);
    int64_t s3[3] = {7, 1, 9};
    for (unsigned mask = 0; mask < 8; mask++) reduce_case(3, s3, mask, false);
    /* big enough to split the work both ways */
    int64_t tall[2] = {4096, 256}, wide[2] = {256, 4096}, flat[1] = {1000003}, two[2] = {2, 300000};
    reduce_case(2, tall, 1, false); /* inner dim kept */
    reduce_case(2, tall, 2, false);
    reduce_case(2, wide, 2, false); /* inner dim reduced */
    reduce_case(2, wide, 1, false);
    reduce_case(1, flat, 1, false);
    reduce_case(2, two, 2, false);
    reduce_case(2, two, 3, false);
    reduce_case(2, tall, 1, true); /* NaN wins the max */
    reduce_case(2, wide, 2, true);
    reduce_case(0, NULL, 0, false);
    int64_t empty[2] = {0, 5};
    reduce_case(2, empty, 1, false); /* sum 0, max -inf */
    reduce_case(2, empty, 2, false);
    expect_synced();
}
END_TEST

START_TEST(test_sum_squares) {
    int64_t sizes[4] = {0, 1, 777, 2000003};
    for (int s = 0; s < 4; s++) {
        mg_tensor *x = host_rand(1, &sizes[s], 20), *dx = to_gpu(x);
        double want = CPU->iface->sum_squares(CPU->context, x);
        double got = GPU->iface->sum_squares(GPU->context, dx);
        double e = fabs(got - want) / (want > 0 ? want : 1);
        note("sum_squares", e, 1e-9);
        mg_assert_all(e <= 1e-9, "sum_squares of %lld: got %.17g want %.17g", (long long)sizes[s],
                      got, want);
        mg_tensor_free(x), mg_tensor_free(dx);
    }
    expect_synced();
}
END_TEST

/* ---- softmax and cross-entropy ------------------------------------------------------------ */

/* labels: class indices, with `bad` rows made bad in several ways */
static mg_tensor *labels_for(int64_t rows, int64_t c, int bad) {
    mg_tensor *l = host(1, &rows);
    for (int64_t i = 0; i < rows; i++) l->data[i] = (float)((i * 7 + 3) % (c > 0 ? c : 1));
    const float bad_values[4] = {-1.0f, (float)c, 0.5f, NAN};
    for (int i = 0; i < bad && i < rows; i++) l->data[(i * 5) % rows] = bad_values[i % 4];
    return l;
}

static void cross_entropy_case(int64_t rows, int64_t c, int bad) {
    int64_t shape[2] = {rows, c};
    mg_tensor *x = host_rand(2, shape, 22), *labels = labels_for(rows, c, bad);
    mg_tensor *dx = to_gpu(x), *dl = to_gpu(labels);
    mg_tensor *out = junk_on(MG_DEVICE_CPU, 0, NULL), *dout = junk_on(MG_DEVICE_CUDA, 0, NULL);
    float scale = rows > 0 ? 1.0f / (float)rows : 0.0f;
    int64_t want_bad = CPU->iface->cross_entropy(CPU->context, x, labels, scale, out);
    int64_t got_bad = GPU->iface->cross_entropy(GPU->context, dx, dl, scale, dout);
    mg_assert_all(got_bad == want_bad, "cross_entropy (%lld, %lld): %lld bad labels, want %lld",
                  (long long)rows, (long long)c, (long long)got_bad, (long long)want_bad);
    expect("cross_entropy", dout, out, TOL_MATH);
    if (c > 0) {
        mg_tensor *g = junk_on(MG_DEVICE_CPU, 2, shape), *dg = junk_on(MG_DEVICE_CUDA, 2, shape);
        CPU->iface->cross_entropy_backward(CPU->context, x, labels, NULL, 0, c, 0.25f, g);
        GPU->iface->cross_entropy_backward(GPU->context, dx, dl, NULL, 0, c, 0.25f, dg);
        expect("cross_entropy_backward", dg, g, TOL_MATH);
        mg_tensor_free(g), mg_tensor_free(dg);
    }
    mg_tensor_free(x), mg_tensor_free(labels), mg_tensor_free(dx), mg_tensor_free(dl);
    mg_tensor_free(out), mg_tensor_free(dout);
}

START_TEST(test_cross_entropy) {
    cross_entropy_case(64, 10, 0);
    cross_entropy_case(64, 10, 4);
    cross_entropy_case(1000, 37, 9);
    cross_entropy_case(5000, 1000, 0);
    cross_entropy_case(3, 1, 0);
    cross_entropy_case(0, 10, 0);
    cross_entropy_case(5, 0, 0); /* no classes: every row is bad */
    expect_synced();
}
END_TEST

/* ---- optimizers ----------------------------------------------------------------------------- */

START_TEST(test_sgd) {
    struct {
        int64_t n;
        float momentum, wd;
    } cases[4] = {{10, 0.9f, 0.01f}, {10, 0.0f, 0.1f}, {50000, 0.9f, 0.0f}, {0, 0.9f, 0.01f}};
    for (int c = 0; c < 4; c++) {
        int64_t n = cases[c].n;
        mg_tensor *p = host_rand(1, &n, 30), *buf = junk_on(MG_DEVICE_CPU, 1, &n);
        mg_tensor *dp = to_gpu(p), *dbuf = to_gpu(buf);
        for (int step = 0; step < 3; step++) {
            mg_tensor *g = host_rand(1, &n, 31 + step), *dg = to_gpu(g);
            CPU->iface->sgd_step(CPU->context, p, g, cases[c].momentum != 0 ? buf : NULL, 0.1f,
                                 cases[c].momentum, cases[c].wd, step == 0);
            GPU->iface->sgd_step(GPU->context, dp, dg, cases[c].momentum != 0 ? dbuf : NULL, 0.1f,
                                 cases[c].momentum, cases[c].wd, step == 0);
            mg_tensor_free(g), mg_tensor_free(dg);
        }
        expect("sgd_step", dp, p, TOL_ARITH);
        expect("sgd_step", dbuf, buf, TOL_ARITH);
        mg_tensor_free(p), mg_tensor_free(buf), mg_tensor_free(dp), mg_tensor_free(dbuf);
    }
    expect_synced();
}
END_TEST

START_TEST(test_adamw) {
    int64_t sizes[3] = {10, 40000, 0};
    for (int s = 0; s < 3; s++) {
        int64_t n = sizes[s];
        mg_tensor *p = host_rand(1, &n, 40), *m = host(1, &n), *v = host(1, &n);
        CPU->iface->fill(CPU->context, m, 0.0f);
        CPU->iface->fill(CPU->context, v, 0.0f);
        mg_tensor *dp = to_gpu(p), *dm = to_gpu(m), *dv = to_gpu(v);
        for (int64_t t = 1; t <= 4; t++) {
            mg_tensor *g = host_rand(1, &n, 41 + t), *dg = to_gpu(g);
            CPU->iface->adamw_step(CPU->context, p, g, m, v, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, t);
            GPU->iface->adamw_step(GPU->context, dp, dg, dm, dv, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, t);
            mg_tensor_free(g), mg_tensor_free(dg);
        }
        expect("adamw_step", dp, p, TOL_MATH);
        expect("adamw_step", dm, m, TOL_ARITH);
        expect("adamw_step", dv, v, TOL_ARITH);
        mg_tensor_free(p), mg_tensor_free(m), mg_tensor_free(v);
        mg_tensor_free(dp), mg_tensor_free(dm), mg_tensor_free(dv);
    }
    expect_synced();
}
END_TEST

START_TEST(test_backend_basics) {
    ck_assert_ptr_eq(mg_backend_cuda(), GPU);
    ck_assert_str_eq(GPU->iface->name, "cuda");
    ck_assert_int_eq(GPU->iface->device, MG_DEVICE_CUDA);
    const void *const *fn = (const void *const *)&GPU->iface->alloc;
    size_t nfn = (sizeof *GPU->iface - offsetof(struct mg_backend_iface, alloc)) / sizeof(void *);
    for (size_t i = 0; i < nfn; i++) ck_assert_msg(fn[i] != NULL, "iface entry %zu is NULL", i);
    ck_assert_ptr_nonnull(mg_cuda_stream());
    float h[4] = {1, 2, 3, 4}, d[4] = {0};
    float *dev = GPU->iface->alloc(GPU->context, sizeof h);
    ck_assert_ptr_nonnull(dev);
    ck_assert(mg_cuda_is_device_pointer(dev));
    ck_assert(!mg_cuda_is_device_pointer(h));
    GPU->iface->from_host(GPU->context, dev, h, 4);
    GPU->iface->to_host(GPU->context, d, dev, 4);
    ck_assert(memcmp(h, d, sizeof h) == 0);
    GPU->iface->free(GPU->context, dev);
    /* a huge allocation fails cleanly with a message */
    void *huge = GPU->iface->alloc(GPU->context, (size_t)1 << 50);
    ck_assert_ptr_null(huge);
    ck_assert(strstr(mg_last_error(), "cudaMalloc") != NULL);
    expect_synced();
}
END_TEST

/* ---- ops on both devices ---------------------------------------------------------------------- */

enum { NCASES = 4, MAX_LEAVES = 4 };

typedef struct {
    double loss;
    int nleaves;
    mg_tensor *grad[MAX_LEAVES]; /* host, full */
} op_result;

static mg_dtensor *leaf(const mg_mesh *mesh, int nd, const int64_t *shape, uint64_t seed,
                        mg_placement p, int grad) {
    mg_tensor *h = mg_tensor_new(nd, shape);
    mg_test_fill(mg_tensor_data(h), mg_tensor_numel(h), seed);
    mg_dtensor *t = mg_distribute(mesh, h, &p, 1);
    mg_tensor_free(h);
    ck_assert_msg(t != NULL, "distribute: %s", mg_last_error());
    if (grad) mg_set_requires_grad(t, 1);
    return t;
}

/* one small model per case; loss and leaf gradients on the current device */
static void run_case(int which, op_result *r) {
    int world = mg_world_size();
    mg_mesh *mesh = mg_mesh_new(1, &world);
    ck_assert_msg(mesh != NULL, "mesh: %s", mg_last_error());
    mg_placement R = MG_REPLICATE, S0 = MG_SHARD(0);
    mg_dtensor *leaves[MAX_LEAVES] = {0}, *extra = NULL, *loss = NULL;
    int n = 0;
    if (which == 0) { /* cross_entropy(linear(x, w, b), labels) */
        leaves[n++] = leaf(mesh, 2, (int64_t[]){8, 16}, 1, S0, 1);
        leaves[n++] = leaf(mesh, 2, (int64_t[]){12, 16}, 2, R, 1);
        leaves[n++] = leaf(mesh, 1, (int64_t[]){12}, 3, R, 1);
        mg_tensor *lh = mg_tensor_new(1, (int64_t[]){8});
        for (int i = 0; i < 8; i++) mg_tensor_data(lh)[i] = (float)((i * 5) % 12);
        extra = mg_distribute(mesh, lh, &S0, 1);
        mg_tensor_free(lh);
        loss = mg_cross_entropy(mg_linear(leaves[0], leaves[1], leaves[2]), extra);
    } else if (which == 1) { /* mse(matmul(gelu(linear(x, w)) as (2, 4, 12), v), t) */
        leaves[n++] = leaf(mesh, 2, (int64_t[]){8, 16}, 4, S0, 1);
        leaves[n++] = leaf(mesh, 2, (int64_t[]){12, 16}, 5, S0, 1);
        leaves[n++] = leaf(mesh, 2, (int64_t[]){12, 6}, 6, R, 1);
        extra = leaf(mesh, 3, (int64_t[]){2, 4, 6}, 7, S0, 0);
        mg_dtensor *h = mg_gelu(mg_linear(leaves[0], leaves[1], NULL));
        mg_dtensor *y = mg_matmul(mg_reshape(h, 3, (int64_t[]){2, 4, 12}), leaves[2]);
        loss = mg_mse_loss(y, extra);
    } else if (which == 2) { /* mean(relu(p * expand(sum(p, 2)))), p = permute(a) */
        leaves[n++] = leaf(mesh, 3, (int64_t[]){4, 6, 5}, 8, S0, 1);
        mg_dtensor *p = mg_permute(leaves[0], (int[]){2, 0, 1}); /* (5, 4, 6) */
        mg_dtensor *s = mg_sum_dims(p, 1, (int[]){2}, 1);          /* (5, 4, 1) */
        mg_dtensor *e = mg_expand(s, 3, (int64_t[]){5, 4, 6});
        loss = mg_mean(mg_relu(mg_mul(p, e)));
    } else { /* sum(scale(redistribute(x S(0) -> R) + matmul(a, b) batched, 2)) */
        leaves[n++] = leaf(mesh, 3, (int64_t[]){4, 3, 5}, 9, S0, 1);
        leaves[n++] = leaf(mesh, 3, (int64_t[]){4, 5, 2}, 10, S0, 1);
        leaves[n++] = leaf(mesh, 3, (int64_t[]){4, 3, 2}, 11, S0, 1);
        mg_dtensor *c = mg_matmul(leaves[0], leaves[1]);
        mg_dtensor *d = mg_redistribute(leaves[2], &R, 1);
        loss = mg_sum(mg_scale(mg_sub(c, d), 2.0f));
    }
    ck_assert_msg(loss != NULL, "case %d forward: %s", which, mg_last_error());
    ck_assert_int_eq(mg_backward(loss), MG_OK);
    mg_tensor *lf = mg_full_tensor(loss);
    ck_assert_ptr_nonnull(lf);
    ck_assert_int_eq(lf->device, MG_DEVICE_CPU);
    r->loss = lf->data[0];
    mg_tensor_free(lf);
    r->nleaves = n;
    for (int i = 0; i < n; i++) {
        mg_dtensor *g = mg_grad(leaves[i]);
        ck_assert_msg(g != NULL, "case %d: leaf %d has no gradient", which, i);
        ck_assert_int_eq(g->local->device, mg_get_device());
        r->grad[i] = mg_full_tensor(g);
        ck_assert_ptr_nonnull(r->grad[i]);
    }
    mg_step_end();
    for (int i = 0; i < n; i++) mg_dtensor_free(leaves[i]);
    mg_dtensor_free(extra);
    mg_mesh_free(mesh);
}

START_TEST(test_ops_both_devices) {
    for (int which = 0; which < NCASES; which++) {
        op_result cpu, gpu;
        ck_assert_int_eq(mg_set_device(MG_DEVICE_CPU), MG_OK);
        run_case(which, &cpu);
        mg_assert_all(mg_set_device(MG_DEVICE_CUDA) == MG_OK, "mg_set_device: %s", mg_last_error());
        run_case(which, &gpu);
        expect_synced();
        ck_assert_int_eq(mg_set_device(MG_DEVICE_CPU), MG_OK);
        char name[40];
        snprintf(name, sizeof name, "ops case %d loss", which);
        double e = fabs(gpu.loss - cpu.loss) / (fabs(cpu.loss) > 1e-6 ? fabs(cpu.loss) : 1.0);
        note(name, e, 1e-4);
        mg_assert_all(e <= 1e-4, "%s: cuda %.9g cpu %.9g", name, gpu.loss, cpu.loss);
        for (int i = 0; i < cpu.nleaves; i++) {
            snprintf(name, sizeof name, "ops case %d grad", which);
            double ge = rel_err(gpu.grad[i]->data, cpu.grad[i]->data, cpu.grad[i]->numel);
            note(name, ge, 1e-4);
            mg_assert_all(ge <= 1e-4, "%s %d: max relative error %.3g", name, i, ge);
            mg_tensor_free(cpu.grad[i]);
            mg_tensor_free(gpu.grad[i]);
        }
    }
}
END_TEST

/* Labels out of range fail on the device too: the bad-label count reaches every
 * rank through the NCCL comm's MPI fallback for host buffers. */
START_TEST(test_bad_labels_on_device) {
    mg_assert_all(mg_set_device(MG_DEVICE_CUDA) == MG_OK, "mg_set_device: %s", mg_last_error());
    int world = mg_world_size();
    mg_mesh *mesh = mg_mesh_new(1, &world);
    ck_assert_ptr_nonnull(mesh);
    ck_assert_str_eq(mesh->world->iface->name, "nccl");
    mg_placement S0 = MG_SHARD(0);
    mg_dtensor *x = leaf(mesh, 2, (int64_t[]){8, 4}, 12, S0, 0);
    mg_tensor *lh = mg_tensor_new(1, (int64_t[]){8});
    mg_tensor_data(lh)[7] = 9; /* one bad row */
    mg_dtensor *labels = mg_distribute(mesh, lh, &S0, 1);
    mg_tensor_free(lh);
    mg_dtensor *loss = mg_cross_entropy(x, labels);
    mg_assert_all(loss == NULL && mg_last_code() == MG_EINVAL, "bad labels accepted: %s",
                  mg_last_error());
    mg_step_end();
    mg_dtensor_free(x), mg_dtensor_free(labels);
    mg_mesh_free(mesh);
    ck_assert_int_eq(mg_set_device(MG_DEVICE_CPU), MG_OK);
}
END_TEST

/* NCCL collectives on device buffers, and host buffers through MPI. */
START_TEST(test_nccl_collectives) {
    mg_assert_all(mg_set_device(MG_DEVICE_CUDA) == MG_OK, "mg_set_device: %s", mg_last_error());
    int world = mg_world_size(), rank = mg_rank();
    mg_mesh *mesh = mg_mesh_new(1, &world);
    ck_assert_ptr_nonnull(mesh);
    mg_comm *c = mesh->dim_comm[0];
    ck_assert_str_eq(c->iface->name, "nccl");
    int64_t n = 1001, kn = n * world;
    mg_tensor *h = host(1, &kn), *want = host(1, &kn);
    /* all_reduce sum / avg / max */
    for (int op = 0; op < 3; op++) {
        for (int64_t i = 0; i < n; i++) h->data[i] = (float)(rank + 1) * (float)(i % 17);
        mg_tensor *d = to_gpu(h);
        ck_assert_int_eq(mg_comm_all_reduce(c, d->data, n, (mg_reduce_op)op), MG_OK);
        float ranks_sum = world * (world + 1) / 2.0f;
        for (int64_t i = 0; i < n; i++)
            want->data[i] = (float)(i % 17) * (op == MG_REDUCE_SUM   ? ranks_sum
                                               : op == MG_REDUCE_AVG ? ranks_sum / world
                                                                     : (float)world);
        mg_tensor *back = to_cpu(d);
        double e = rel_err(back->data, want->data, n);
        note("nccl all_reduce", e, 1e-6);
        mg_assert_all(e <= 1e-6, "all_reduce op %d: error %.3g", op, e);
        mg_tensor_free(back), mg_tensor_free(d);
    }
    /* all_gather, reduce_scatter, all_to_all, broadcast */
    for (int64_t i = 0; i < kn; i++) h->data[i] = (float)(rank * 100000 + i);
    mg_tensor *d = to_gpu(h), *dr = junk_on(MG_DEVICE_CUDA, 1, &kn);
    ck_assert_int_eq(mg_comm_all_gather(c, d->data, n, dr->data), MG_OK);
    for (int r = 0; r < world; r++)
        for (int64_t i = 0; i < n; i++) want->data[r * n + i] = (float)(r * 100000 + i);
    expect("nccl all_gather", dr, want, 0);
    ck_assert_int_eq(mg_comm_all_to_all(c, d->data, n, dr->data), MG_OK);
    for (int r = 0; r < world; r++)
        for (int64_t i = 0; i < n; i++) want->data[r * n + i] = (float)(r * 100000 + rank * n + i);
    expect("nccl all_to_all", dr, want, 0);
    ck_assert_int_eq(mg_comm_reduce_scatter(c, d->data, dr->data, n), MG_OK);
    mg_tensor *got = to_cpu(dr);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double s = 0;
        for (int r = 0; r < world; r++) s += (float)(r * 100000 + rank * n + i);
        double e = fabs(got->data[i] - s) / s;
        if (e > worst) worst = e;
    }
    note("nccl reduce_scatter", worst, 1e-6);
    mg_assert_all(worst <= 1e-6, "reduce_scatter: error %.3g", worst);
    mg_tensor_free(got);
    ck_assert_int_eq(mg_comm_broadcast(c, d->data, n, world - 1), MG_OK);
    for (int64_t i = 0; i < n; i++) want->data[i] = (float)((world - 1) * 100000 + i);
    got = to_cpu(d);
    mg_assert_all(memcmp(got->data, want->data, (size_t)n * sizeof(float)) == 0, "broadcast");
    mg_tensor_free(got);
    /* host buffers on an NCCL comm go through MPI */
    float v = (float)(rank + 1);
    ck_assert_int_eq(mg_comm_all_reduce(mesh->world, &v, 1, MG_REDUCE_SUM), MG_OK);
    mg_assert_all(v == world * (world + 1) / 2.0f, "host all_reduce gave %g", v);
    /* one host and one device buffer: refused */
    ck_assert_int_eq(mg_comm_all_gather(c, h->data, n, dr->data), MG_EINVAL);
    ck_assert_int_eq(mg_comm_barrier(c), MG_OK);
    mg_tensor_free(d), mg_tensor_free(dr), mg_tensor_free(h), mg_tensor_free(want);
    mg_mesh_free(mesh);
    ck_assert_int_eq(mg_set_device(MG_DEVICE_CPU), MG_OK);
    expect_synced();
}
END_TEST

/* Device shards through every redistribute primitive equal the host tensor. */
START_TEST(test_redistribute_on_device) {
    mg_assert_all(mg_set_device(MG_DEVICE_CUDA) == MG_OK, "mg_set_device: %s", mg_last_error());
    int world = mg_world_size();
    mg_mesh *mesh = mg_mesh_new(1, &world);
    ck_assert_ptr_nonnull(mesh);
    int64_t shape[3] = {5, 7, 3}; /* uneven on 2 and 4 ranks */
    mg_tensor *full = host_rand(3, shape, 50);
    mg_placement ps[5] = {MG_SHARD(0), MG_SHARD(1), MG_SHARD(2), MG_REPLICATE, MG_PARTIAL_SUM};
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 5; b++) {
            mg_dtensor *x = mg_distribute(mesh, full, &ps[a], 1);
            ck_assert_ptr_nonnull(x);
            ck_assert_int_eq(x->local->device, MG_DEVICE_CUDA);
            mg_dtensor *y = mg_redistribute(x, &ps[b], 1);
            ck_assert_msg(y != NULL, "redistribute %d -> %d: %s", a, b, mg_last_error());
            ck_assert_int_eq(y->local->device, MG_DEVICE_CUDA);
            mg_tensor *back = mg_full_tensor(y);
            ck_assert_ptr_nonnull(back);
            ck_assert_int_eq(back->device, MG_DEVICE_CPU);
            double e = rel_err(back->data, full->data, full->numel);
            note("redistribute (device)", e, 1e-6);
            mg_assert_all(e <= 1e-6, "redistribute %d -> %d: error %.3g", a, b, e);
            mg_tensor_free(back);
            mg_step_end();
            mg_dtensor_free(x);
        }
    /* mg_from_local takes a host block and keeps a device copy */
    mg_placement s0 = MG_SHARD(0);
    mg_dtensor *x = mg_distribute(mesh, full, &s0, 1);
    mg_tensor *hl = to_cpu(x->local);
    mg_dtensor *z = mg_from_local(mesh, hl, &s0, 1, 3, shape);
    ck_assert_ptr_nonnull(z);
    ck_assert_int_eq(z->local->device, MG_DEVICE_CUDA);
    mg_tensor *back = mg_full_tensor(z);
    mg_assert_all(rel_err(back->data, full->data, full->numel) == 0, "from_local round trip");
    mg_tensor_free(back), mg_tensor_free(hl), mg_tensor_free(full);
    mg_dtensor_free(x), mg_dtensor_free(z);
    mg_mesh_free(mesh);
    ck_assert_int_eq(mg_set_device(MG_DEVICE_CPU), MG_OK);
    expect_synced();
}
END_TEST

/* ---- main ----------------------------------------------------------------------------------- */

#include "cuda_nn_cases.h" /* softmax, layer norm, embedding, attention, ... */

int main(int argc, char **argv) {
    if (mg_init(&argc, &argv) != MG_OK) return 1;
    int rank = mg_rank();
    int count = mg_cuda_device_count(), fewest = count;
    MPI_Allreduce(&count, &fewest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (fewest == 0) {
        if (rank == 0) printf("no CUDA device: skipping\n");
        mg_finalize();
        return 77;
    }
    /* the kernel suite runs on this rank's GPU even when ranks share one */
    MPI_Comm node;
    int local = 0, local_size = 1;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_size(node, &local_size);
    MPI_Comm_free(&node);
    int rc = mg_cuda_backend_init(local % count);
    if (rc != MG_OK) fprintf(stderr, "rank %d: %s\n", rank, mg_last_error());
    if (!mg_test_agree(rc == MG_OK)) {
        mg_finalize();
        return 1;
    }
    CPU = mg_backend_cpu();
    GPU = mg_backend_cuda();
    int one_gpu_each = mg_test_agree(local_size <= count);

    Suite *s = suite_create("cuda");
    TCase *k = tcase_create("kernels");
    tcase_add_test(k, test_backend_basics);
    tcase_add_test(k, test_gemm);
    tcase_add_test(k, test_gemm_tf32);
    tcase_add_test(k, test_gemm_batched);
    tcase_add_test(k, test_permute);
    tcase_add_test(k, test_copy_block);
    tcase_add_test(k, test_copy_fill);
    tcase_add_loop_test(k, test_binary, 0, MG_BINARY_COUNT);
    tcase_add_test(k, test_unary);
    tcase_add_test(k, test_axpy);
    tcase_add_test(k, test_reduce);
    tcase_add_test(k, test_sum_squares);
    tcase_add_test(k, test_cross_entropy);
    tcase_add_test(k, test_sgd);
    tcase_add_test(k, test_adamw);
    nn_kernel_tests(k);
    suite_add_tcase(s, k);
    if (one_gpu_each) {
        TCase *o = tcase_create("ops");
        tcase_add_test(o, test_nccl_collectives);
        tcase_add_test(o, test_redistribute_on_device);
        tcase_add_test(o, test_bad_labels_on_device);
        tcase_add_test(o, test_ops_both_devices);
        nn_ops_tests(o);
        suite_add_tcase(s, o);
    } else if (rank == 0) {
        printf("ops on CUDA skipped: %d ranks share %d GPU%s on a node (NCCL needs one GPU per "
               "rank)\n", local_size, count, count == 1 ? "" : "s");
    }
    int status = mg_test_run_mpi(s);
    print_table();
    mg_finalize();
    return status;
}
