/* test_kernels.c: every CPU kernel of backend.h against a naive reference loop,
 * on shapes with size-1 and size-0 dims, and big enough ones to take the OpenMP
 * paths; derivatives against finite differences; optimizers against a scalar
 * reference of the PyTorch update rules. */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

#include "kernel_testutil.h"

/* ---- helpers ------------------------------------------------------------------- */

static void unravel(int64_t idx, int nd, const int64_t *shape, int64_t *coord) {
    for (int d = nd - 1; d >= 0; d--) {
        coord[d] = shape[d] ? idx % shape[d] : 0;
        idx = shape[d] ? idx / shape[d] : 0;
    }
}

static int64_t ravel(const int64_t *coord, int nd, const int64_t *shape) {
    int64_t idx = 0;
    for (int d = 0; d < nd; d++) idx = idx * shape[d] + coord[d];
    return idx;
}

static void expect_close(const float *got, const float *want, int64_t n, double rtol, double atol,
                         const char *what) {
    char msg[256];
    int ok = mg_test_close(got, want, n, rtol, atol, msg, sizeof msg);
    ck_assert_msg(ok, "%s: %s", what, msg);
}

/* next permutation in lexicographic order; 0 after the last */
static int next_perm(int *p, int n) {
    int i = n - 2;
    while (i >= 0 && p[i] >= p[i + 1]) i--;
    if (i < 0) return 0;
    int j = n - 1;
    while (p[j] <= p[i]) j--;
    int t = p[i];
    p[i] = p[j];
    p[j] = t;
    for (int a = i + 1, b = n - 1; a < b; a++, b--) {
        t = p[a];
        p[a] = p[b];
        p[b] = t;
    }
    return 1;
}

/* ---- gemm ---------------------------------------------------------------------- */

static void gemm_case(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t pad, float beta) {
    int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    int64_t lda = ac + pad, ldb = bc + pad, ldc = n + pad;
    int64_t na = ar * lda, nb = br * ldb, nc = m * ldc;
    float *a = malloc((na + 1) * sizeof *a), *b = malloc((nb + 1) * sizeof *b);
    float *c = malloc((nc + 1) * sizeof *c), *want = malloc((nc + 1) * sizeof *want);
    mg_test_fill(a, na, 1);
    mg_test_fill(b, nb, 2);
    mg_test_fill(c, nc, 3);
    if (beta == 0.0f)
        for (int64_t i = 0; i < nc; i++) c[i] = NAN; /* beta 0 must overwrite, not scale */
    float alpha = 1.5f;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldc; j++) {
            if (j >= n) {
                want[i * ldc + j] = c[i * ldc + j]; /* padding untouched */
                continue;
            }
            double s = 0;
            for (int64_t p = 0; p < k; p++)
                s += (double)(ta ? a[p * lda + i] : a[i * lda + p]) *
                     (tb ? b[j * ldb + p] : b[p * ldb + j]);
            want[i * ldc + j] = (float)(alpha * s + (beta == 0.0f ? 0.0 : beta * c[i * ldc + j]));
        }
    BE->gemm(CTX, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    char what[128];
    snprintf(what, sizeof what, "gemm ta=%d tb=%d m=%lld n=%lld k=%lld pad=%lld beta=%g", ta, tb,
             (long long)m, (long long)n, (long long)k, (long long)pad, beta);
    for (int64_t i = 0; i < m; i++) /* padding compared bitwise (NaN == NaN here) */
        for (int64_t j = n; j < ldc; j++)
            ck_assert_msg(memcmp(&c[i * ldc + j], &want[i * ldc + j], sizeof(float)) == 0,
                          "%s: padding written", what);
    for (int64_t i = 0; i < m; i++) expect_close(c + i * ldc, want + i * ldc, n, 1e-5, 1e-5, what);
    free(a);
    free(b);
    free(c);
    free(want);
}

/* _i: the transpose combination (bit 0: A, bit 1: B) */
START_TEST(test_gemm) {
    bool ta = _i & 1, tb = (_i >> 1) & 1;
    static const int64_t sizes[][3] = {{1, 1, 1},   {3, 5, 7},   {0, 4, 3},  {4, 0, 3},
                                       {4, 3, 0},   {17, 33, 65}, {64, 1, 128}, {1, 70, 1}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int64_t pad = 0; pad <= 3; pad += 3) {
            gemm_case(ta, tb, sizes[s][0], sizes[s][1], sizes[s][2], pad, 0.0f);
            gemm_case(ta, tb, sizes[s][0], sizes[s][1], sizes[s][2], pad, 0.5f);
        }
}
END_TEST

/* Micro-batch shapes against a large operand (cpu_gemm_small.c on AVX2
 * machines for nt, sgemm elsewhere): rows that do not fill a register
 * tile, weights whose edges do not, leading dims with padding, beta 0 over NaN
 * and 0.5; past 64 rows sgemm; one row (a generated token: the AVX-512 row
 * kernel for nt, sgemv elsewhere) with weight rows and K that do not fill
 * four rows or 16 lanes. _i: 0 nt (x W^T), 1 nn
 * (dy W), 2 tn (dy^T x). */
START_TEST(test_gemm_small) {
    static const int64_t rows_first[][3] = {{2, 300, 257}, {17, 259, 300}, {32, 1030, 70},
                                            {64, 300, 230}, {5, 600, 120},  {65, 300, 257},
                                            {1, 300, 257},  {1, 259, 300},  {1, 3, 40}};
    mg_backend_cpu_set_threads(1); /* the kernels take a call when sgemm would get no more */
    for (size_t s = 0; s < sizeof rows_first / sizeof rows_first[0]; s++)
        for (int64_t pad = 0; pad <= 3; pad += 3)
            for (int z = 0; z < 2; z++) {
                const int64_t *d = rows_first[s];
                float beta = z ? 0.5f : 0.0f;
                if (_i == 0) gemm_case(false, true, d[0], d[1], d[2], pad, beta);
                if (_i == 1) gemm_case(false, false, d[0], d[1], d[2], pad, beta);
                if (_i == 2) gemm_case(true, false, d[1], d[2], d[0], pad, beta); /* K small */
            }
    mg_backend_cpu_set_threads(0);
}
END_TEST

/* The micro-batch product that the small kernel takes, x (32, 300) W^T with W
 * (1030, 300), on one thread (the kernels take a call when sgemm would get no
 * more): a (M, K) and b (N, K) of test data (seeds 1 and 2), c (M, N). */
enum { SM_M = 32, SM_N = 1030, SM_K = 300 };
typedef struct {
    float *a, *b, *c;
} small_gemm;

static small_gemm small_gemm_new(void) {
    mg_backend_cpu_set_threads(1);
    small_gemm g = {malloc(sizeof(float) * SM_M * SM_K), malloc(sizeof(float) * SM_N * SM_K),
                    malloc(sizeof(float) * SM_M * SM_N)};
    mg_test_fill(g.a, SM_M * SM_K, 1);
    mg_test_fill(g.b, SM_N * SM_K, 2);
    return g;
}

static void small_gemm_free(small_gemm *g) {
    free(g->a);
    free(g->b);
    free(g->c);
    mg_backend_cpu_set_threads(0);
}

/* A row of C does not depend on the rows around it: 32 rows at once and in
 * row shards of 5 and 27 give the same bits (nt: each element one sum in
 * order), as data-parallel row shards of a batch need. */
START_TEST(test_gemm_small_row_shards) {
    enum { M = SM_M, N = SM_N, K = SM_K };
    small_gemm g = small_gemm_new();
    float *parts = malloc(sizeof(float) * M * N);
    BE->gemm(CTX, false, true, M, N, K, 1.0f, g.a, K, g.b, K, 0.0f, g.c, N);
    BE->gemm(CTX, false, true, 5, N, K, 1.0f, g.a, K, g.b, K, 0.0f, parts, N);
    BE->gemm(CTX, false, true, M - 5, N, K, 1.0f, g.a + 5 * K, K, g.b, K, 0.0f, parts + 5 * N, N);
    ck_assert_msg(memcmp(g.c, parts, sizeof(float) * M * N) == 0,
                  "x W^T: row shards differ from the whole");
    free(parts);
    small_gemm_free(&g);
}
END_TEST

/* alpha 0 (BLAS): C = beta C, A and B not read, so a NaN in A stays out; on
 * the micro-batch shape that the small kernel would otherwise take */
START_TEST(test_gemm_alpha_zero) {
    enum { M = SM_M, N = SM_N, K = SM_K };
    small_gemm g = small_gemm_new();
    for (int64_t i = 0; i < M * K; i++) g.a[i] = NAN;
    for (int64_t i = 0; i < M * N; i++) g.c[i] = 2.0f;
    BE->gemm(CTX, false, true, M, N, K, 0.0f, g.a, K, g.b, K, 0.5f, g.c, N);
    for (int64_t i = 0; i < M * N; i++)
        ck_assert_msg(g.c[i] == 1.0f, "x W^T with alpha 0: c[%lld] = %g, want beta c = 1",
                      (long long)i, g.c[i]);
    small_gemm_free(&g);
}
END_TEST

/* The small kernel's packed buffer is a thread's own (cpu_gemm_small.c): a
 * thread that calls it and ends gives the buffer back. 16 threads, one after
 * another, each one 32-row product, leave the heap (every arena: mallinfo2)
 * within one buffer of where the first such thread left it. */
static void *gemm_in_thread(void *arg) {
    small_gemm *g = arg;
    BE->gemm(CTX, false, true, SM_M, SM_N, SM_K, 1.0f, g->a, SM_K, g->b, SM_K, 0.0f, g->c, SM_N);
    return NULL;
}

static void run_gemm_thread(small_gemm *g) {
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, gemm_in_thread, g), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
}

START_TEST(test_gemm_small_thread_exit) {
    small_gemm g = small_gemm_new();
    run_gemm_thread(&g); /* the first makes the threads' arena */
    size_t before = mallinfo2().uordblks;
    for (int i = 0; i < 16; i++) run_gemm_thread(&g);
    size_t after = mallinfo2().uordblks, buffer = sizeof(float) * SM_M * SM_K;
    ck_assert_msg(after < before + buffer,
                  "16 threads that called gemm and ended left %zu more bytes on the heap (one "
                  "packed buffer: %zu): their buffers were not freed",
                  after - before, buffer);
    small_gemm_free(&g);
}
END_TEST

/* batched: A strided, B shared (stride 0), and C strided; _i is the transpose combo */
START_TEST(test_gemm_batched) {
    bool ta = _i & 1, tb = (_i >> 1) & 1;
    int64_t batch = 3, m = 4, n = 5, k = 6;
    int64_t lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
    float *a = malloc(batch * m * k * sizeof *a), *b = malloc(k * n * sizeof *b);
    float *c = malloc(batch * m * n * sizeof *c), *want = malloc(batch * m * n * sizeof *want);
    mg_test_fill(a, batch * m * k, 4);
    mg_test_fill(b, k * n, 5);
    mg_test_fill(c, batch * m * n, 6);
    memcpy(want, c, batch * m * n * sizeof *c);
    float c_last[20]; /* entry 2 before the call */
    memcpy(c_last, c + 2 * m * n, sizeof c_last);
    for (int64_t e = 0; e < batch; e++) /* reference: one plain gemm per entry */
        BE->gemm(CTX, ta, tb, m, n, k, 2.0f, a + e * m * k, lda, b, ldb, 1.0f, want + e * m * n, ldc);
    BE->gemm_batched(CTX, ta, tb, m, n, k, 2.0f, a, lda, m * k, b, ldb, 0, 1.0f, c, ldc, m * n, batch);
    ck_assert(memcmp(c, want, batch * m * n * sizeof *c) == 0);
    /* and against a naive loop for the last entry */
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            const float *ae = a + 2 * m * k;
            double s = 0;
            for (int64_t p = 0; p < k; p++)
                s += (double)(ta ? ae[p * lda + i] : ae[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
            ck_assert(fabs(c[2 * m * n + i * n + j] - (2.0 * s + c_last[i * n + j])) < 1e-5);
        }
    BE->gemm_batched(CTX, ta, tb, m, n, k, 2.0f, a, lda, m * k, b, ldb, 0, 1.0f, c, ldc, m * n, 0);
    ck_assert(memcmp(c, want, batch * m * n * sizeof *c) == 0); /* batch 0: untouched */
    free(a);
    free(b);
    free(c);
    free(want);
}
END_TEST

/* ---- layout -------------------------------------------------------------------- */

static void permute_case(int nd, const int64_t *shape, const int *perm) {
    mg_tensor *x = rnd(nd, shape, 7);
    int64_t oshape[MG_MAX_DIMS], oc[MG_MAX_DIMS], xc[MG_MAX_DIMS];
    for (int i = 0; i < nd; i++) oshape[i] = shape[perm[i]];
    mg_tensor *out = junk(nd, oshape);
    BE->permute(CTX, x, perm, out);
    for (int64_t o = 0; o < out->numel; o++) {
        unravel(o, nd, oshape, oc);
        for (int i = 0; i < nd; i++) xc[perm[i]] = oc[i];
        float want = x->data[ravel(xc, nd, shape)];
        if (out->data[o] != want) {
            char s[64];
            ck_abort_msg("permute of %s, perm (%d %d %d %d): element %lld got %g want %g",
                         mg_shape_format(s, sizeof s, nd, shape), perm[0], nd > 1 ? perm[1] : -1,
                         nd > 2 ? perm[2] : -1, nd > 3 ? perm[3] : -1, (long long)o, out->data[o], want);
        }
    }
    mg_tensor_free(x);
    mg_tensor_free(out);
}

START_TEST(test_permute_3d) {
    static const int64_t shapes[][3] = {{2, 3, 4}, {5, 1, 7}, {3, 0, 2}, {1, 1, 1}, {40, 50, 3}, {64, 33, 40}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int perm[3] = {0, 1, 2};
        do permute_case(3, shapes[s], perm);
        while (next_perm(perm, 3));
    }
}
END_TEST

START_TEST(test_permute_4d_and_small) {
    static const int64_t shapes[][4] = {{2, 3, 4, 5}, {3, 40, 1, 37}};
    for (size_t s = 0; s < 2; s++) {
        int perm[4] = {0, 1, 2, 3};
        do permute_case(4, shapes[s], perm);
        while (next_perm(perm, 4));
    }
    int64_t m[2] = {70, 45}; /* a plain transpose over several tiles */
    int p2[2] = {1, 0};
    permute_case(2, m, p2);
    int64_t v[1] = {9};
    int p1[1] = {0};
    permute_case(1, v, p1);
    permute_case(0, NULL, p1);
}
END_TEST

/* copy_block, or add_block (add), of the box against element-by-element */
static void block_case(bool add, int nd, const int64_t *ss, const int64_t *ds, const int64_t *so,
                       const int64_t *dof, const int64_t *ext) {
    mg_tensor *src = rnd(nd, ss, 8), *dst = rnd(nd, ds, 9), *orig = mg_tensor_clone(NULL, dst);
    (add ? BE->add_block : BE->copy_block)(CTX, src, so, dst, dof, ext);
    int64_t c[MG_MAX_DIMS], sc[MG_MAX_DIMS];
    for (int64_t i = 0; i < dst->numel; i++) {
        unravel(i, nd, ds, c);
        bool inside = true;
        for (int d = 0; d < nd; d++) {
            if (c[d] < dof[d] || c[d] >= dof[d] + ext[d]) inside = false;
            sc[d] = c[d] - dof[d] + so[d];
        }
        float in = inside ? src->data[ravel(sc, nd, ss)] : 0.0f;
        float want = !inside ? orig->data[i] : add ? orig->data[i] + in : in;
        ck_assert_msg(dst->data[i] == want, "%s %d-d: element %lld (%s)",
                      add ? "add_block" : "copy_block", nd, (long long)i,
                      inside ? "inside" : "outside");
    }
    mg_tensor_free(src);
    mg_tensor_free(dst);
    mg_tensor_free(orig);
}

static void copy_block_case(int nd, const int64_t *ss, const int64_t *ds, const int64_t *so,
                            const int64_t *dof, const int64_t *ext) {
    block_case(false, nd, ss, ds, so, dof, ext);
    block_case(true, nd, ss, ds, so, dof, ext);
}

START_TEST(test_copy_block) {
    { /* a box in the middle */
        int64_t ss[3] = {5, 6, 7}, ds[3] = {4, 8, 7}, so[3] = {1, 3, 2}, dof[3] = {0, 5, 1}, ext[3] = {3, 2, 4};
        copy_block_case(3, ss, ds, so, dof, ext);
    }
    { /* whole trailing dims: one memcpy per outer index */
        int64_t ss[3] = {5, 6, 7}, ds[3] = {4, 6, 7}, so[3] = {2, 0, 0}, dof[3] = {1, 0, 0}, ext[3] = {3, 6, 7};
        copy_block_case(3, ss, ds, so, dof, ext);
    }
    { /* an empty box */
        int64_t ss[3] = {5, 6, 7}, ds[3] = {4, 6, 7}, so[3] = {2, 0, 0}, dof[3] = {1, 0, 0}, ext[3] = {3, 0, 7};
        copy_block_case(3, ss, ds, so, dof, ext);
    }
    { /* 1-d and 0-d */
        int64_t ss[1] = {10}, ds[1] = {6}, so[1] = {7}, dof[1] = {2}, ext[1] = {3};
        copy_block_case(1, ss, ds, so, dof, ext);
        copy_block_case(0, NULL, NULL, NULL, NULL, NULL);
    }
    { /* big enough for the parallel path */
        int64_t ss[2] = {400, 300}, ds[2] = {300, 200}, so[2] = {50, 60}, dof[2] = {10, 5}, ext[2] = {250, 190};
        copy_block_case(2, ss, ds, so, dof, ext);
    }
    { /* trailing dims whole in src but not in dst: no merged run */
        int64_t ss[3] = {5, 2, 3}, ds[3] = {4, 4, 3}, so[3] = {1, 0, 0}, dof[3] = {0, 1, 0}, ext[3] = {3, 2, 3};
        copy_block_case(3, ss, ds, so, dof, ext);
        copy_block_case(3, ds, ss, dof, so, ext); /* and the other way round */
    }
    /* random boxes in random 4-d shapes (sizes 1 and 0 included) */
    uint64_t s = 99;
    for (int iter = 0; iter < 200; iter++) {
        int64_t ss[4], ds[4], so[4], dof[4], ext[4];
        for (int d = 0; d < 4; d++) {
            ss[d] = (int64_t)(mg_test_next(&s) % 5);
            ds[d] = (int64_t)(mg_test_next(&s) % 5);
            int64_t lim = ss[d] < ds[d] ? ss[d] : ds[d];
            ext[d] = lim ? 1 + (int64_t)(mg_test_next(&s) % lim) : 0;
            so[d] = (int64_t)(mg_test_next(&s) % (ss[d] - ext[d] + 1));
            dof[d] = (int64_t)(mg_test_next(&s) % (ds[d] - ext[d] + 1));
        }
        copy_block_case(4, ss, ds, so, dof, ext);
    }
}
END_TEST

START_TEST(test_copy_fill) {
    int64_t big[1] = {100003}, empty[2] = {0, 5};
    mg_tensor *x = rnd(1, big, 10), *y = junk(1, big);
    BE->copy(CTX, x, y);
    ck_assert(memcmp(x->data, y->data, x->numel * sizeof(float)) == 0);
    BE->fill(CTX, y, 2.5f);
    for (int64_t i = 0; i < y->numel; i++) ck_assert_float_eq(y->data[i], 2.5f);
    BE->fill(CTX, y, -0.0f);
    for (int64_t i = 0; i < y->numel; i++) ck_assert(y->data[i] == 0.0f && signbit(y->data[i]));
    BE->fill(CTX, y, 0.0f);
    for (int64_t i = 0; i < y->numel; i++) ck_assert(y->data[i] == 0.0f && !signbit(y->data[i]));
    mg_tensor *e = junk(2, empty), *f = junk(2, empty);
    BE->fill(CTX, e, 1.0f);
    BE->copy(CTX, e, f);
    mg_tensor_free(e);
    mg_tensor_free(f);
    mg_tensor_free(x);
    mg_tensor_free(y);
}
END_TEST

/* ---- elementwise --------------------------------------------------------------- */

static double gelu_ref(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static double gelu_grad_ref(double x) {
    double k = sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x), t = tanh(u);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

static double silu_ref(double x) { return x / (1.0 + exp(-x)); }

static double silu_grad_ref(double x) {
    double s = 1.0 / (1.0 + exp(-x));
    return s * (1.0 + x * (1.0 - s));
}

static double binary_ref(mg_binary_op op, double x, double y) {
    switch (op) {
    case MG_BINARY_ADD: return x + y;
    case MG_BINARY_SUB: return x - y;
    case MG_BINARY_MUL: return x * y;
    case MG_BINARY_RELU_BACKWARD: return y > 0 ? x : 0;
    case MG_BINARY_GELU_BACKWARD: return x * gelu_grad_ref(y);
    case MG_BINARY_SILU_BACKWARD: return x * silu_grad_ref(y);
    default: return NAN;
    }
}

/* out = op(a, b), a and b broadcast to out's shape (b may have fewer dims) */
static void binary_case(mg_binary_op op, int nd, const int64_t *as, int ndb, const int64_t *bs) {
    int64_t os[MG_MAX_DIMS], oc[MG_MAX_DIMS], ac[MG_MAX_DIMS], bc[MG_MAX_DIMS], bsf[MG_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        int j = d - (nd - ndb);
        bsf[d] = j >= 0 ? bs[j] : 1;
        os[d] = as[d] == 1 ? bsf[d] : as[d];
    }
    mg_tensor *a = rnd(nd, as, 11), *b = rnd(ndb, bs, 12), *out = junk(nd, os);
    BE->binary(CTX, op, a, b, out);
    float *want = malloc((out->numel + 1) * sizeof *want);
    for (int64_t o = 0; o < out->numel; o++) {
        unravel(o, nd, os, oc);
        for (int d = 0; d < nd; d++) {
            ac[d] = as[d] == 1 ? 0 : oc[d];
            bc[d] = bsf[d] == 1 ? 0 : oc[d];
        }
        want[o] = (float)binary_ref(op, a->data[ravel(ac, nd, as)], b->data[ravel(bc, nd, bsf)]);
    }
    char what[160], s1[64], s2[64];
    snprintf(what, sizeof what, "%s %s with %s", mg_binary_names[op], mg_shape_format(s1, sizeof s1, nd, as),
             mg_shape_format(s2, sizeof s2, ndb, bs));
    expect_close(out->data, want, out->numel, 1e-5, 1e-6, what);
    free(want);
    mg_tensor_free(a);
    mg_tensor_free(b);
    mg_tensor_free(out);
}

/* every broadcast pattern of a and b over (2, 3, 4) and (2, 0, 3), every op */
START_TEST(test_binary_broadcast_patterns) {
    mg_binary_op op = (mg_binary_op)_i;
    static const int64_t bases[][3] = {{2, 3, 4}, {2, 0, 3}};
    for (int base = 0; base < 2; base++)
        for (int ma = 0; ma < 8; ma++)
            for (int mb = 0; mb < 8; mb++) {
                int64_t as[3], bs[3];
                for (int d = 0; d < 3; d++) {
                    as[d] = (ma >> d) & 1 ? 1 : bases[base][d];
                    bs[d] = (mb >> d) & 1 ? 1 : bases[base][d];
                }
                binary_case(op, 3, as, 3, bs);
            }
}
END_TEST

START_TEST(test_binary_bias_large_scalar) {
    for (int op = 0; op < MG_BINARY_COUNT; op++) {
        int64_t x[3] = {4, 5, 6}, bias[1] = {6}, bias3[3] = {1, 1, 6};
        binary_case(op, 3, x, 1, bias);  /* trailing broadcast with fewer dims */
        binary_case(op, 3, x, 3, bias3); /* the same with leading 1s */
        int64_t big[2] = {300, 200}, row[2] = {1, 200}, col[2] = {300, 1};
        binary_case(op, 2, big, 2, big);
        binary_case(op, 2, big, 2, row);
        binary_case(op, 2, big, 2, col);
        binary_case(op, 2, col, 2, row); /* outer product shape */
        int64_t mid[3] = {64, 64, 16}, midb[3] = {64, 1, 16};
        binary_case(op, 3, mid, 3, midb);
        binary_case(op, 0, NULL, 0, NULL); /* 0-d */
    }
}
END_TEST

START_TEST(test_binary_in_place) {
    int64_t s[2] = {50, 40}, bs[2] = {1, 40};
    mg_tensor *a = rnd(2, s, 13), *b = rnd(2, bs, 14), *orig = mg_tensor_clone(NULL, a);
    BE->binary(CTX, MG_BINARY_ADD, a, b, a);
    for (int64_t i = 0; i < a->numel; i++) ck_assert_float_eq(a->data[i], orig->data[i] + b->data[i % 40]);
    mg_tensor_free(a);
    mg_tensor_free(b);
    mg_tensor_free(orig);
}
END_TEST

START_TEST(test_unary) {
    static const int64_t shapes[][2] = {{7, 13}, {1, 50000}, {0, 3}};
    for (int op = 0; op < MG_UNARY_COUNT; op++)
        for (int s = 0; s < 3; s++) {
            mg_tensor *x = rnd(2, shapes[s], 15 + op), *out = junk(2, shapes[s]);
            for (int64_t i = 0; i < x->numel; i++) {
                x->data[i] *= 3.0f;
                if (op == MG_UNARY_LOG) x->data[i] = fabsf(x->data[i]) + 0.1f;
            }
            BE->unary(CTX, op, x, -0.75f, out);
            for (int64_t i = 0; i < x->numel; i++) {
                double v = x->data[i], want = 0;
                switch (op) {
                case MG_UNARY_RELU: want = v > 0 ? v : 0; break;
                case MG_UNARY_GELU: want = gelu_ref(v); break;
                case MG_UNARY_SCALE: want = -0.75 * v; break;
                case MG_UNARY_LOG: want = log(v); break;
                case MG_UNARY_SILU: want = silu_ref(v); break;
                default: ck_abort_msg("no reference for unary kernel %s", mg_unary_names[op]);
                }
                ck_assert_msg(fabs(out->data[i] - want) <= 1e-6 + 2e-6 * fabs(want),
                              "%s(%g): got %.9g want %.9g", mg_unary_names[op], v, out->data[i], want);
            }
            mg_tensor_free(x);
            mg_tensor_free(out);
        }
}
END_TEST

/* relu passes NaN on, as torch does: a NaN input must not turn into a healthy 0 */
START_TEST(test_relu_nan) {
    int64_t n = 6;
    mg_tensor *x = junk(1, &n), *y = junk(1, &n);
    const float in[6] = {NAN, -NAN, -1.0f, 0.0f, 2.0f, -INFINITY};
    memcpy(x->data, in, sizeof in);
    BE->unary(CTX, MG_UNARY_RELU, x, 0, y);
    ck_assert(isnan(y->data[0]) && isnan(y->data[1]));
    ck_assert_float_eq(y->data[2], 0.0f);
    ck_assert_float_eq(y->data[3], 0.0f);
    ck_assert_float_eq(y->data[4], 2.0f);
    ck_assert_float_eq(y->data[5], 0.0f);
    mg_tensor_free(x);
    mg_tensor_free(y);
}
END_TEST

/* silu at the edges: NaN stays NaN, -inf gives NaN (-inf times a sigmoid of
 * 0, as torch), +inf stays, far below zero a signed zero or a tiny value */
START_TEST(test_silu_edges) {
    int64_t n = 7;
    mg_tensor *x = junk(1, &n), *y = junk(1, &n), *g = junk(1, &n), *dy = junk(1, &n);
    const float in[7] = {NAN, -INFINITY, INFINITY, -1000.0f, -90.0f, 1000.0f, 0.0f};
    memcpy(x->data, in, sizeof in);
    for (int i = 0; i < 7; i++) dy->data[i] = 1.0f;
    BE->unary(CTX, MG_UNARY_SILU, x, 0, y);
    BE->binary(CTX, MG_BINARY_SILU_BACKWARD, dy, x, g);
    ck_assert(isnan(y->data[0]) && isnan(y->data[1]) && isnan(g->data[0]));
    ck_assert_float_eq(y->data[2], INFINITY);
    ck_assert(fabsf(y->data[3]) < 1e-30f && fabsf(y->data[4]) < 1e-30f);
    ck_assert_float_eq(y->data[5], 1000.0f);
    ck_assert_float_eq(y->data[6], 0.0f);
    ck_assert(fabsf(g->data[3]) < 1e-30f && g->data[5] == 1.0f && g->data[6] == 0.5f);
    mg_tensor *all[] = {x, y, g, dy};
    for (int i = 0; i < 4; i++) mg_tensor_free(all[i]);
}
END_TEST

START_TEST(test_axpy) {
    static const int64_t sizes[] = {0, 1, 17, 70001};
    for (int s = 0; s < 4; s++) {
        mg_tensor *x = rnd(1, &sizes[s], 20), *y = rnd(1, &sizes[s], 21), *y0 = mg_tensor_clone(NULL, y);
        BE->axpy(CTX, -1.25f, x, y);
        for (int64_t i = 0; i < sizes[s]; i++) ck_assert_float_eq(y->data[i], y0->data[i] + -1.25f * x->data[i]);
        mg_tensor_free(x);
        mg_tensor_free(y);
        mg_tensor_free(y0);
    }
}
END_TEST

/* relu, gelu and silu backward against central differences of the forward kernels */
START_TEST(test_activation_backward_fd) {
    int64_t n[1] = {200};
    mg_tensor *x = rnd(1, n, 22), *dy = rnd(1, n, 23), *dx = junk(1, n);
    mg_tensor *xp = junk(1, n), *xm = junk(1, n), *yp = junk(1, n), *ym = junk(1, n);
    for (int64_t i = 0; i < 200; i++) {
        x->data[i] *= 3.0f;
        if (fabsf(x->data[i]) < 0.05f) x->data[i] = 0.5f; /* keep relu away from its kink */
    }
    const float h = 1e-3f;
    static const mg_unary_op fwds[3] = {MG_UNARY_RELU, MG_UNARY_GELU, MG_UNARY_SILU};
    static const mg_binary_op bwds[3] = {MG_BINARY_RELU_BACKWARD, MG_BINARY_GELU_BACKWARD,
                                         MG_BINARY_SILU_BACKWARD};
    for (int act = 0; act < 3; act++) {
        mg_unary_op fwd = fwds[act];
        mg_binary_op bwd = bwds[act];
        for (int64_t i = 0; i < 200; i++) {
            xp->data[i] = x->data[i] + h;
            xm->data[i] = x->data[i] - h;
        }
        BE->unary(CTX, fwd, xp, 0, yp);
        BE->unary(CTX, fwd, xm, 0, ym);
        BE->binary(CTX, bwd, dy, x, dx);
        for (int64_t i = 0; i < 200; i++) {
            double fd = dy->data[i] * ((double)yp->data[i] - ym->data[i]) / ((double)xp->data[i] - xm->data[i]);
            ck_assert_msg(fabs(dx->data[i] - fd) < 1e-3, "%s at x=%g: got %g, finite difference %g",
                          mg_binary_names[bwd], x->data[i], dx->data[i], fd);
        }
    }
    mg_tensor *all[] = {x, dy, dx, xp, xm, yp, ym};
    for (int i = 0; i < 7; i++) mg_tensor_free(all[i]);
}
END_TEST

/* ---- reductions ---------------------------------------------------------------- */

static void reduce_case(int nd, const int64_t *xs, unsigned mask) {
    int64_t os[MG_MAX_DIMS], c[MG_MAX_DIMS];
    for (int d = 0; d < nd; d++) os[d] = (mask >> d) & 1 ? 1 : xs[d];
    mg_tensor *x = rnd(nd, xs, 30 + mask), *sum = junk(nd, os), *max = junk(nd, os);
    int64_t no = mg_shape_numel(nd, os);
    double *wsum = calloc(no + 1, sizeof *wsum);
    float *wmax = malloc((no + 1) * sizeof *wmax), *wsumf = malloc((no + 1) * sizeof *wsumf);
    for (int64_t o = 0; o < no; o++) wmax[o] = -INFINITY;
    for (int64_t i = 0; i < x->numel; i++) {
        unravel(i, nd, xs, c);
        for (int d = 0; d < nd; d++)
            if ((mask >> d) & 1) c[d] = 0;
        int64_t o = ravel(c, nd, os);
        wsum[o] += x->data[i];
        if (x->data[i] > wmax[o]) wmax[o] = x->data[i];
    }
    for (int64_t o = 0; o < no; o++) wsumf[o] = (float)wsum[o];
    BE->reduce_sum(CTX, x, sum);
    BE->reduce_max(CTX, x, max);
    char what[128], s[64];
    snprintf(what, sizeof what, "reduce of %s, mask %u", mg_shape_format(s, sizeof s, nd, xs), mask);
    expect_close(sum->data, wsumf, no, 1e-6, 1e-6, what);
    for (int64_t o = 0; o < no; o++) ck_assert_msg(max->data[o] == wmax[o], "%s: max[%lld]", what, (long long)o);
    free(wsum);
    free(wsumf);
    free(wmax);
    mg_tensor_free(x);
    mg_tensor_free(sum);
    mg_tensor_free(max);
}

/* every subset of dims of 3-d (sizes 1 and 0 included) and 4-d tensors */
START_TEST(test_reduce_subsets) {
    static const int64_t shapes[][3] = {{3, 4, 5}, {1, 6, 2}, {4, 0, 3}, {7, 1, 1}, {2, 3, 1}, {70, 80, 9}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (unsigned mask = 0; mask < 8; mask++) reduce_case(3, shapes[s], mask);
    int64_t s4[4] = {3, 4, 5, 6};
    for (unsigned mask = 0; mask < 16; mask++) reduce_case(4, s4, mask);
    int64_t big[2] = {300, 700}; /* parallel paths, wider than one column tile */
    for (unsigned mask = 0; mask < 4; mask++) reduce_case(2, big, mask);
    reduce_case(0, NULL, 0);
}
END_TEST

START_TEST(test_reduce_empty) {
    int64_t xs[2] = {0, 3}, os[2] = {1, 3}, o0[2] = {1, 1};
    mg_tensor *x = junk(2, xs), *sum = junk(2, os), *max = junk(2, os), *all = junk(2, o0);
    BE->reduce_sum(CTX, x, sum);
    BE->reduce_max(CTX, x, max);
    for (int i = 0; i < 3; i++) {
        ck_assert_float_eq(sum->data[i], 0.0f);
        ck_assert(isinf(max->data[i]) && max->data[i] < 0);
    }
    BE->reduce_sum(CTX, x, all);
    ck_assert_float_eq(all->data[0], 0.0f);
    BE->reduce_max(CTX, x, all);
    ck_assert(isinf(all->data[0]) && all->data[0] < 0);
    mg_tensor_free(x);
    mg_tensor_free(sum);
    mg_tensor_free(max);
    mg_tensor_free(all);
}
END_TEST

/* a NaN wins a max, as in torch */
START_TEST(test_reduce_max_nan) {
    int64_t xs[2] = {3, 4}, rows[2] = {3, 1}, cols[2] = {1, 4};
    mg_tensor *x = rnd(2, xs, 95), *r = junk(2, rows), *c = junk(2, cols);
    x->data[5] = NAN; /* row 1, column 1 */
    BE->reduce_max(CTX, x, r);
    BE->reduce_max(CTX, x, c);
    ck_assert(!isnan(r->data[0]) && isnan(r->data[1]) && !isnan(r->data[2]));
    ck_assert(!isnan(c->data[0]) && isnan(c->data[1]) && !isnan(c->data[2]));
    mg_tensor_free(x);
    mg_tensor_free(r);
    mg_tensor_free(c);
}
END_TEST

/* sums accumulate in double: a million 0.1f sum to 100000 * 0.1f to 1e-7 */
START_TEST(test_reduce_sum_accuracy) {
    int64_t xs[2] = {1000, 1000}, os[2] = {1, 1}, cs[2] = {1, 1000};
    mg_tensor *x = junk(2, xs), *s = junk(2, os), *cols = junk(2, cs);
    for (int64_t i = 0; i < x->numel; i++) x->data[i] = 0.1f;
    double want = 1e6 * (double)0.1f;
    BE->reduce_sum(CTX, x, s);
    ck_assert_msg(fabs(s->data[0] - want) <= 1e-7 * want, "got %.9g want %.9g", s->data[0], want);
    BE->reduce_sum(CTX, x, cols);
    for (int i = 0; i < 1000; i++) ck_assert(fabs(cols->data[i] - 1000 * (double)0.1f) <= 1e-4);
    double sq = BE->sum_squares(CTX, x);
    ck_assert(fabs(sq - 1e6 * (double)0.1f * 0.1f) <= 1e-9 * sq);
    mg_tensor_free(x);
    mg_tensor_free(s);
    mg_tensor_free(cols);
}
END_TEST

START_TEST(test_sum_squares) {
    static const int64_t sizes[] = {0, 1, 33, 100001};
    for (int s = 0; s < 4; s++) {
        mg_tensor *x = rnd(1, &sizes[s], 40);
        double want = 0;
        for (int64_t i = 0; i < sizes[s]; i++) want += (double)x->data[i] * x->data[i];
        double got = BE->sum_squares(CTX, x);
        ck_assert_msg(fabs(got - want) <= 1e-12 * (1 + want), "n=%lld got %.17g want %.17g",
                      (long long)sizes[s], got, want);
        mg_tensor_free(x);
    }
}
END_TEST

/* ---- softmax and cross-entropy -------------------------------------------------- */

static void log_softmax_ref(const float *x, int64_t rows, int64_t c, float *out) {
    for (int64_t r = 0; r < rows; r++) {
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < c; j++) m = fmax(m, x[r * c + j]);
        for (int64_t j = 0; j < c; j++) s += exp(x[r * c + j] - m);
        for (int64_t j = 0; j < c; j++) out[r * c + j] = (float)(x[r * c + j] - m - log(s));
    }
}

START_TEST(test_cross_entropy_value) {
    int64_t ls[2] = {6, 5}, ys[1] = {6};
    mg_tensor *logits = rnd(2, ls, 60), *labels = junk(1, ys), *out = junk(0, NULL);
    float lab[6] = {0, 4, 2, 2, 1, 3};
    memcpy(labels->data, lab, sizeof lab);
    float lsm[30];
    log_softmax_ref(logits->data, 6, 5, lsm);
    double want = 0;
    for (int r = 0; r < 6; r++) want -= lsm[r * 5 + (int)lab[r]];
    ck_assert_int_eq(BE->cross_entropy(CTX, logits, labels, 1.0f / 6, out), 0);
    ck_assert_msg(fabs(out->data[0] - want / 6) < 1e-6, "got %g want %g", out->data[0], want / 6);
    mg_tensor_free(logits);
    mg_tensor_free(labels);
    mg_tensor_free(out);
}
END_TEST

START_TEST(test_cross_entropy_bad_labels) {
    int64_t ls[2] = {6, 5}, ys[1] = {6};
    mg_tensor *logits = rnd(2, ls, 61), *labels = junk(1, ys), *out = junk(0, NULL), *g = junk(2, ls);
    float lab[6] = {0, -1, 5, 2.5f, NAN, 4};
    memcpy(labels->data, lab, sizeof lab);
    float lsm[30];
    log_softmax_ref(logits->data, 6, 5, lsm);
    double want = -(lsm[0] + lsm[5 * 5 + 4]);
    ck_assert_int_eq(BE->cross_entropy(CTX, logits, labels, 1.0f, out), 4);
    ck_assert(fabs(out->data[0] - want) < 1e-5);
    BE->cross_entropy_backward(CTX, logits, labels, NULL, 0, 5, 1.0f, g);
    for (int r = 1; r <= 4; r++)
        for (int j = 0; j < 5; j++) ck_assert_float_eq(g->data[r * 5 + j], 0.0f);
    double row0 = 0;
    for (int j = 0; j < 5; j++) row0 += g->data[j];
    ck_assert(fabs(row0) < 1e-6); /* softmax - onehot sums to 0 */
    mg_tensor_free(logits);
    mg_tensor_free(labels);
    mg_tensor_free(out);
    mg_tensor_free(g);
}
END_TEST

/* dlogits against central differences of the loss, with a scale (a mean) */
START_TEST(test_cross_entropy_backward_fd) {
    int64_t ls[2] = {4, 7}, ys[1] = {4};
    mg_tensor *logits = rnd(2, ls, 62), *labels = junk(1, ys), *g = junk(2, ls), *out = junk(0, NULL);
    float lab[4] = {6, 0, 3, 3};
    memcpy(labels->data, lab, sizeof lab);
    float scale = 0.25f;
    BE->cross_entropy_backward(CTX, logits, labels, NULL, 0, 7, scale, g);
    const float h = 1e-2f;
    for (int64_t i = 0; i < logits->numel; i++) {
        float keep = logits->data[i];
        logits->data[i] = keep + h;
        BE->cross_entropy(CTX, logits, labels, scale, out);
        double up = out->data[0];
        logits->data[i] = keep - h;
        BE->cross_entropy(CTX, logits, labels, scale, out);
        double down = out->data[0];
        logits->data[i] = keep;
        double fd = (up - down) / (2.0 * h);
        ck_assert_msg(fabs(g->data[i] - fd) < 1e-3, "dlogits[%lld]: got %g, finite difference %g",
                      (long long)i, g->data[i], fd);
    }
    mg_tensor_free(logits);
    mg_tensor_free(labels);
    mg_tensor_free(g);
    mg_tensor_free(out);
}
END_TEST

/* the parallel path (many rows) agrees with the reference */
START_TEST(test_cross_entropy_large) {
    int64_t n = 5000, c = 10, ls[2] = {5000, 10}, ys[1] = {5000};
    mg_tensor *logits = rnd(2, ls, 63), *labels = junk(1, ys), *out = junk(0, NULL), *g = junk(2, ls);
    for (int64_t r = 0; r < n; r++) labels->data[r] = (float)(r % c);
    float *lsm = malloc(n * c * sizeof *lsm);
    log_softmax_ref(logits->data, n, c, lsm);
    double want = 0;
    for (int64_t r = 0; r < n; r++) want -= lsm[r * c + r % c];
    ck_assert_int_eq(BE->cross_entropy(CTX, logits, labels, 1.0f / n, out), 0);
    ck_assert(fabs(out->data[0] - want / n) < 1e-5);
    BE->cross_entropy_backward(CTX, logits, labels, NULL, 0, c, 1.0f / n, g);
    for (int64_t i = 0; i < n * c; i++) {
        double w = (exp(lsm[i]) - (i % c == (i / c) % c ? 1.0 : 0.0)) / n;
        ck_assert(fabs(g->data[i] - w) < 1e-8);
    }
    free(lsm);
    mg_tensor_free(logits);
    mg_tensor_free(labels);
    mg_tensor_free(out);
    mg_tensor_free(g);
}
END_TEST

/* ---- optimizers ------------------------------------------------------------------- */

static void sgd_case(int64_t n, float momentum, float wd) {
    mg_tensor *p = rnd(1, &n, 70), *buf = momentum != 0 ? junk(1, &n) : NULL, *g = junk(1, &n);
    double *rp = malloc((n + 1) * sizeof *rp), *rb = malloc((n + 1) * sizeof *rb);
    for (int64_t i = 0; i < n; i++) rp[i] = p->data[i];
    float lr = 0.1f;
    for (int step = 0; step < 4; step++) {
        mg_test_fill(g->data, n, 71 + step);
        BE->sgd_step(CTX, p, g, buf, lr, momentum, wd, step == 0);
        for (int64_t i = 0; i < n; i++) { /* torch.optim.SGD, dampening 0, no nesterov */
            double d = g->data[i] + (double)wd * rp[i];
            if (momentum != 0) {
                rb[i] = step == 0 ? d : momentum * rb[i] + d;
                d = rb[i];
            }
            rp[i] -= lr * d;
        }
    }
    for (int64_t i = 0; i < n; i++) {
        ck_assert_msg(fabs(p->data[i] - rp[i]) < 1e-6, "sgd p[%lld]: got %.9g want %.9g", (long long)i,
                      p->data[i], rp[i]);
        if (buf) ck_assert(fabs(buf->data[i] - rb[i]) < 1e-5);
    }
    free(rp);
    free(rb);
    mg_tensor_free(p);
    mg_tensor_free(buf);
    mg_tensor_free(g);
}

START_TEST(test_sgd) {
    sgd_case(10, 0.9f, 0.01f);
    sgd_case(10, 0.0f, 0.0f); /* no momentum: no buffer */
    sgd_case(10, 0.0f, 0.1f);
    sgd_case(50000, 0.9f, 0.0f);
    sgd_case(0, 0.9f, 0.01f);
}
END_TEST

static void adamw_case(int64_t n, float wd) {
    mg_tensor *p = rnd(1, &n, 80), *m = junk(1, &n), *v = junk(1, &n), *g = junk(1, &n);
    BE->fill(CTX, m, 0);
    BE->fill(CTX, v, 0);
    double *rp = malloc((n + 1) * sizeof *rp), *rm = calloc(n + 1, sizeof *rm), *rv = calloc(n + 1, sizeof *rv);
    for (int64_t i = 0; i < n; i++) rp[i] = p->data[i];
    const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8;
    for (int64_t t = 1; t <= 5; t++) {
        mg_test_fill(g->data, n, 81 + t);
        BE->adamw_step(CTX, p, g, m, v, (float)lr, (float)b1, (float)b2, (float)eps, wd, t);
        for (int64_t i = 0; i < n; i++) { /* torch.optim.AdamW, amsgrad off */
            double gi = g->data[i];
            rp[i] *= 1 - lr * wd;
            rm[i] = b1 * rm[i] + (1 - b1) * gi;
            rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
            double mhat = rm[i] / (1 - pow(b1, t)), vhat = rv[i] / (1 - pow(b2, t));
            rp[i] -= lr * mhat / (sqrt(vhat) + eps);
        }
    }
    for (int64_t i = 0; i < n; i++) {
        ck_assert_msg(fabs(p->data[i] - rp[i]) < 2e-6, "adamw p[%lld]: got %.9g want %.9g", (long long)i,
                      p->data[i], rp[i]);
        ck_assert(fabs(m->data[i] - rm[i]) < 1e-6);
        ck_assert(fabs(v->data[i] - rv[i]) < 1e-7);
    }
    free(rp);
    free(rm);
    free(rv);
    mg_tensor_free(p);
    mg_tensor_free(m);
    mg_tensor_free(v);
    mg_tensor_free(g);
}

START_TEST(test_adamw) {
    adamw_case(10, 0.01f);
    adamw_case(10, 0.0f);
    adamw_case(40000, 0.1f);
    adamw_case(0, 0.1f);
}
END_TEST

/* ---- zero-size everywhere, names, threads ------------------------------------------- */

START_TEST(test_zero_size_kernels) {
    int64_t e[2] = {0, 5}, e1[1] = {0}, r[2] = {1, 5};
    mg_tensor *x = junk(2, e), *y = junk(2, e), *labels = junk(1, e1), *out0 = junk(0, NULL);
    mg_tensor *rs = junk(2, r), *bias = rnd(2, r, 90);
    int perm[2] = {1, 0};
    int64_t et[2] = {5, 0};
    mg_tensor *xt = junk(2, et);
    BE->permute(CTX, x, perm, xt);
    BE->unary(CTX, MG_UNARY_GELU, x, 1, y);
    BE->binary(CTX, MG_BINARY_ADD, x, bias, y);
    BE->axpy(CTX, 2, x, y);
    BE->softmax(CTX, x, NULL, NULL, true, y);
    BE->cross_entropy_backward(CTX, x, labels, NULL, 0, 5, 1, y);
    ck_assert_int_eq(BE->cross_entropy(CTX, x, labels, 1, out0), 0);
    ck_assert_float_eq(out0->data[0], 0.0f);
    BE->reduce_sum(CTX, x, rs);
    for (int i = 0; i < 5; i++) ck_assert_float_eq(rs->data[i], 0.0f);
    ck_assert(BE->sum_squares(CTX, x) == 0.0);
    BE->sgd_step(CTX, x, y, y, 0.1f, 0.9f, 0, true);
    BE->adamw_step(CTX, x, y, y, y, 0.1f, 0.9f, 0.99f, 1e-8f, 0, 1);
    float dummy = 7;
    BE->gemm(CTX, false, false, 0, 0, 0, 1, &dummy, 1, &dummy, 1, 0, &dummy, 1);
    ck_assert_float_eq(dummy, 7.0f);
    BE->gemm(CTX, false, false, 1, 1, 0, 1, &dummy, 1, &dummy, 1, 0, &dummy, 1); /* k = 0: C = 0 */
    ck_assert_float_eq(dummy, 0.0f);
    void *p = BE->alloc(CTX, 0);
    ck_assert_ptr_nonnull(p);
    BE->free(CTX, p);
    mg_tensor *all[] = {x, y, labels, out0, rs, bias, xt};
    for (int i = 0; i < 7; i++) mg_tensor_free(all[i]);
}
END_TEST

START_TEST(test_names_and_backend) {
    ck_assert_str_eq(mg_binary_names[MG_BINARY_ADD], "add");
    ck_assert_str_eq(mg_binary_names[MG_BINARY_GELU_BACKWARD], "gelu_backward");
    ck_assert_str_eq(mg_unary_names[MG_UNARY_RELU], "relu");
    ck_assert_str_eq(mg_unary_names[MG_UNARY_LOG], "log");
    for (int i = 0; i < MG_BINARY_COUNT; i++)
        for (int j = 0; j < i; j++) ck_assert_str_ne(mg_binary_names[i], mg_binary_names[j]);
    for (int i = 0; i < MG_UNARY_COUNT; i++)
        for (int j = 0; j < i; j++) ck_assert_str_ne(mg_unary_names[i], mg_unary_names[j]);
    mg_backend *cpu = mg_backend_cpu();
    ck_assert_ptr_eq(cpu, mg_backend_cpu());
    ck_assert_str_eq(cpu->iface->name, "cpu");
    ck_assert_int_eq(cpu->iface->device, MG_DEVICE_CPU);
    /* every entry is filled in, the meta backend's too (it runs plan --estimate's step:
     * an entry it lacks would be called there as NULL) */
    const void *const *fn = (const void *const *)&cpu->iface->alloc;
    size_t nfn = (sizeof *cpu->iface - offsetof(struct mg_backend_iface, alloc)) / sizeof(void *);
    for (size_t i = 0; i < nfn; i++) ck_assert_msg(fn[i] != NULL, "iface entry %zu is NULL", i);
    fn = (const void *const *)&mg_backend_meta()->iface->alloc;
    for (size_t i = 0; i < nfn; i++)
        ck_assert_msg(fn[i] != NULL, "meta iface entry %zu is NULL", i);
#ifndef MG_HAVE_CUDA
    ck_assert_ptr_null(mg_backend_cuda());
#endif
    float h[4] = {1, 2, 3, 4}, d[4];
    float *dev = cpu->iface->alloc(cpu->context, sizeof h);
    cpu->iface->from_host(cpu->context, dev, h, 4);
    cpu->iface->to_host(cpu->context, d, dev, 4);
    ck_assert(memcmp(h, d, sizeof h) == 0);
    cpu->iface->free(cpu->context, dev);
}
END_TEST

void openblas_set_num_threads(int);
int openblas_get_num_threads(void);

START_TEST(test_threads) {
    mg_backend_cpu_set_threads(1);
    ck_assert_int_eq(mg_backend_cpu_threads(), 1);
    ck_assert_int_eq(openblas_get_num_threads(), 1);
    mg_backend_cpu_set_threads(0); /* default: cores / local ranks, at least 1 */
    int def = mg_backend_cpu_threads();
    ck_assert_int_ge(def, 1);
    ck_assert_int_eq(openblas_get_num_threads(), def);
    const char *old = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    char *saved = old ? strdup(old) : NULL;
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "100000", 1);
    mg_backend_cpu_set_threads(0);
    ck_assert_int_eq(mg_backend_cpu_threads(), 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1", 1);
    mg_backend_cpu_set_threads(0);
    ck_assert_int_ge(mg_backend_cpu_threads(), def);
    if (saved) setenv("OMPI_COMM_WORLD_LOCAL_SIZE", saved, 1);
    else unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    free(saved);
    mg_backend_cpu_set_threads(0);
}
END_TEST

int main(void) {
    const TTest *tests[] = {test_permute_3d, test_permute_4d_and_small, test_copy_block,
                            test_copy_fill, test_binary_bias_large_scalar, test_binary_in_place,
                            test_unary, test_relu_nan, test_silu_edges, test_axpy, test_activation_backward_fd,
                            test_reduce_subsets, test_reduce_empty, test_reduce_max_nan,
                            test_reduce_sum_accuracy, test_sum_squares, test_cross_entropy_value,
                            test_cross_entropy_bad_labels, test_cross_entropy_backward_fd,
                            test_cross_entropy_large, test_sgd, test_adamw, test_zero_size_kernels,
                            test_names_and_backend, test_threads, NULL};
    Suite *s = suite_create("kernels");
    TCase *tc = mg_test_case(s, "kernels", tests);
    tcase_add_loop_test(tc, test_gemm, 0, 4);
    tcase_add_loop_test(tc, test_gemm_batched, 0, 4);
    tcase_add_loop_test(tc, test_gemm_small, 0, 3);
    tcase_add_test(tc, test_gemm_small_row_shards);
    tcase_add_test(tc, test_gemm_alpha_zero);
    tcase_add_test(tc, test_gemm_small_thread_exit);
    tcase_add_loop_test(tc, test_binary_broadcast_patterns, 0, MG_BINARY_COUNT);
    return mg_test_run(s);
}
