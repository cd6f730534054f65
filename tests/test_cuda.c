/* test_cuda.c: every kernel of the CUDA backend against the CPU backend.
 *
 * Every kernel of backend.h runs on the same inputs on the CPU backend and on
 * the CUDA backend; the largest error relative to the largest CPU value is
 * asserted under a per-kernel tolerance, and rank 0 prints a table of them
 * ("kernel <name> max_rel_err <e> tol <t>", test_cuda.h). The GEMMs also run
 * with TF32 math and in bf16 mode (against the CPU's bf16 GEMM, which rounds
 * the inputs the same way). NCCL, redistribute and ops with autograd are in
 * test_cuda_ops.c.
 *
 * The network ops' kernels and ops are in cuda_nn_cases.h, the Llama family's
 * (RMS norm, rotary embedding, grouped-query attention) in cuda_llama_cases.h,
 * both included here.
 *
 * Without a GPU (or built without CUDA) it prints "no CUDA device: skipping"
 * and exits 77. Ranks on one node may share a GPU here. */
#include "test_cuda.h"

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

/* every (M, N, K) of sizes, each transpose combination, padded or not, beta 0 and 0.5 */
static void gemm_cases(const int64_t (*sizes)[3], size_t n, const char *name, double tol) {
    for (int combo = 0; combo < 4; combo++)
        for (size_t s = 0; s < n; s++)
            for (int64_t pad = 0; pad <= 3; pad += 3)
                for (int b = 0; b < 2; b++)
                    gemm_case(combo & 1, combo >> 1, sizes[s][0], sizes[s][1], sizes[s][2], pad,
                              b ? 0.5f : 0.0f, name, tol);
}

START_TEST(test_gemm) {
    static const int64_t sizes[][3] = {{1, 1, 1},    {3, 5, 7},     {0, 4, 3},    {4, 0, 3},
                                       {4, 3, 0},    {17, 33, 65},  {64, 1, 128}, {1, 70, 1},
                                       {128, 96, 257}, {256, 512, 384}};
    gemm_cases(sizes, sizeof sizes / sizeof sizes[0], "gemm", TOL_GEMM);
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

/* bf16 mode: the GPU rounds with __float2bfloat16_rn, the CPU with
 * mg_bf16_round (both to nearest, ties to even): the same products, summed in
 * another order. The GPU's result must also be far nearer the CPU's bf16 one
 * than the fp32 one (the rounding happened on both). */
START_TEST(test_gemm_bf16) {
    static const int64_t sizes[][3] = {{1, 1, 1},     {3, 5, 7},      {4, 3, 0},   {17, 33, 65},
                                       {64, 1, 128},  {128, 96, 257}, {256, 512, 384}};
    mg_backend_set_gemm_bf16(1);
    gemm_cases(sizes, sizeof sizes / sizeof sizes[0], "gemm (bf16)", TOL_BF16);
    int64_t m = 256, n = 192, k = 1024, na = m * k, nb = k * n, nc = m * n;
    mg_tensor *a = host_rand(1, &na, 41), *b = host_rand(1, &nb, 42);
    mg_tensor *c16 = host(1, &nc), *c32 = host(1, &nc), *dc = junk_on(MG_DEVICE_CUDA, 1, &nc);
    mg_tensor *da = to_gpu(a), *db = to_gpu(b);
    GPU->iface->gemm(GPU->context, false, false, m, n, k, 1.0f, da->data, k, db->data, n, 0.0f,
                     dc->data, n);
    CPU->iface->gemm(CPU->context, false, false, m, n, k, 1.0f, a->data, k, b->data, n, 0.0f,
                     c16->data, n);
    mg_backend_set_gemm_bf16(0);
    CPU->iface->gemm(CPU->context, false, false, m, n, k, 1.0f, a->data, k, b->data, n, 0.0f,
                     c32->data, n);
    mg_tensor *got = to_cpu(dc);
    double e16 = rel_err(got->data, c16->data, nc), e32 = rel_err(got->data, c32->data, nc);
    mg_assert_all(e32 > 10 * e16 && e32 > 1e-4,
                  "bf16 GEMM on the GPU: %.3g from the CPU's bf16, %.3g from its fp32", e16, e32);
    mg_tensor_free(a), mg_tensor_free(b), mg_tensor_free(c16), mg_tensor_free(c32);
    mg_tensor_free(dc), mg_tensor_free(da), mg_tensor_free(db), mg_tensor_free(got);
    expect_synced();
}
END_TEST

/* _i: 0 fp32, 1 bf16 mode */
START_TEST(test_gemm_batched) {
    int64_t batch = 5, m = 24, n = 20, k = 36;
    const char *name = _i ? "gemm_batched (bf16)" : "gemm_batched";
    mg_backend_set_gemm_bf16(_i);
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
            expect(name, dc, c, _i ? TOL_BF16 : TOL_GEMM);
            /* k = 0: C = beta C in every entry */
            CPU->iface->gemm_batched(CPU->context, ta, tb, m, n, 0, 2.0f, a->data, lda, m * k,
                                     b->data, ldb, sb, 0.5f, c->data, ldc, m * n, batch);
            GPU->iface->gemm_batched(GPU->context, ta, tb, m, n, 0, 2.0f, da->data, lda, m * k,
                                     db->data, ldb, sb, 0.5f, dc->data, ldc, m * n, batch);
            expect(name, dc, c, TOL_EXACT);
            mg_tensor_free(a), mg_tensor_free(b), mg_tensor_free(c);
            mg_tensor_free(da), mg_tensor_free(db), mg_tensor_free(dc);
        }
    mg_backend_set_gemm_bf16(0);
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
    CPU->iface->add_block(CPU->context, src, so, dst, dof, ext); /* the box doubled */
    GPU->iface->add_block(GPU->context, dsrc, so, ddst, dof, ext);
    expect("add_block", ddst, dst, TOL_EXACT);
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

/* ---- main ----------------------------------------------------------------------------------- */

#include "cuda_nn_cases.h"    /* softmax, layer norm, embedding, attention, ... */
#include "cuda_llama_cases.h" /* RMS norm, rotary embedding, grouped-query attention */

int main(int argc, char **argv) {
    if (mg_init(&argc, &argv) != MG_OK) return 1;
    if (cuda_test_gpus() == 0) {
        if (mg_rank() == 0) printf("no CUDA device: skipping\n");
        mg_finalize();
        return 77;
    }
    int one_gpu_each = 0;
    if (!cuda_test_start(&one_gpu_each)) {
        mg_finalize();
        return 1;
    }
    const TTest *tests[] = {test_backend_basics, test_gemm, test_gemm_tf32, test_gemm_bf16,
                            test_permute, test_copy_block, test_copy_fill, test_unary, test_axpy,
                            test_reduce, test_sum_squares, test_cross_entropy, test_sgd, test_adamw,
                            NULL};
    Suite *s = suite_create("cuda");
    TCase *k = mg_test_case(s, "kernels", tests);
    tcase_add_loop_test(k, test_gemm_batched, 0, 2);
    tcase_add_loop_test(k, test_binary, 0, MG_BINARY_COUNT);
    nn_kernel_tests(k);
    llama_kernel_tests(k);
    int status = mg_test_run_mpi(s);
    print_table();
    mg_finalize();
    return status;
}
