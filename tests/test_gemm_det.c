/* test_gemm_det.c: the deterministic GEMM (src/backend/cpu_gemm_det.c) bit for
 * bit against a scalar reference written from its contract: the halving tree
 * over K (a range longer than 64 and even is the sum of its halves; a leaf is
 * a chain of fmaf from +0 in ascending k; here by recursion, not by the
 * kernel's binary counter), then alpha and beta. On every path (AVX-512,
 * AVX2, scalar; those this CPU lacks are skipped, saying so), 1 and 2 threads,
 * the four transpose combinations, strides, edge tiles; and the properties the
 * contract is for: a row's bits do not depend on the rows around it, and a K
 * split into 2^j equal ranges sums to the whole in the same tree. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#include "backend/blas_core.h"
#include "backend/cpu_kernels.h"
#include "testutil.h"

static void set_threads(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

/* ---- the reference ------------------------------------------------------------- */

typedef struct {
    bool ta, tb;
    const float *a, *b;
    int64_t lda, ldb, k;
} operands;

static float opa(const operands *o, int64_t i, int64_t p) {
    return o->ta ? o->a[p * o->lda + i] : o->a[i * o->lda + p];
}
static float opb(const operands *o, int64_t p, int64_t j) {
    return o->tb ? o->b[j * o->ldb + p] : o->b[p * o->ldb + j];
}

/* the sum over k in [k0, k1) of element (i, j): the halving tree */
static float tree(const operands *o, int64_t i, int64_t j, int64_t k0, int64_t k1) {
    int64_t len = k1 - k0;
    if (len > 64 && len % 2 == 0) {
        float left = tree(o, i, j, k0, k0 + len / 2);
        float right = tree(o, i, j, k0 + len / 2, k1);
        return left + right;
    }
    float p = 0.0f;
    for (int64_t q = k0; q < k1; q++) p = fmaf(opa(o, i, q), opb(o, q, j), p);
    return p;
}

static void ref_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                     const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                     float *c, int64_t ldc) {
    operands o = {ta, tb, a, b, lda, ldb, k};
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float *cp = c + i * ldc + j;
            if (k <= 0) {
                *cp = beta == 0.0f ? 0.0f : beta * *cp;
                continue;
            }
            float s = tree(&o, i, j, 0, k);
            float t = alpha == 1.0f ? s : alpha * s;
            if (beta == 0.0f) *cp = t;
            else {
                float u = beta == 1.0f ? *cp : beta * *cp;
                *cp = t + u;
            }
        }
}

/* ---- paths ------------------------------------------------------------------------ */

static const int paths[] = {MG_ISA_AVX512, MG_ISA_AVX2, MG_ISA_GENERIC};
enum { N_PATHS = 3 };

/* forces path `p` (an index of paths): 0, or 1 when this CPU lacks it (said once) */
static int force(int p) {
    static int said[N_PATHS];
    if (mg_cpu_gemm_det_force(paths[p]) == 0) return 0;
    if (!said[p]) {
        printf("test_gemm_det: the %s path is skipped: this CPU or build lacks it\n",
               mg_isa_name((mg_isa)paths[p]));
        fflush(stdout);
        said[p] = 1;
    }
    return 1;
}

/* the diff's first element, for the message */
static int64_t first_diff(const float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(x + i, y + i, sizeof(float))) return i;
    return -1;
}

/* ---- every shape against the reference -------------------------------------------- */

static const int64_t Ms[] = {1, 3, 8, 17, 70}, Ns[] = {1, 5, 32, 33, 100};
static const int64_t Ks[] = {1, 7, 63, 64, 65, 128, 200, 1000};
static const float ab[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.5f, 0.25f}};

START_TEST(test_det_shapes) {
    bool ta = _i & 1, tb = _i & 2;
    int checked = 0;
    for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
        for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
            for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++) {
                int64_t m = Ms[mi], n = Ns[ni], k = Ks[ki];
                /* strides past the rows' ends: lda, ldb, ldc are not the widths */
                int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
                int64_t na = (ta ? k : m) * lda, nb = (tb ? n : k) * ldb, nc = m * ldc;
                float *a = malloc(sizeof(float) * na), *b = malloc(sizeof(float) * nb);
                float *c0 = malloc(sizeof(float) * nc), *want = malloc(sizeof(float) * nc);
                float *got = malloc(sizeof(float) * nc);
                mg_test_fill(a, na, 10 + mi);
                mg_test_fill(b, nb, 20 + ni);
                mg_test_fill(c0, nc, 30 + ki);
                for (int s = 0; s < 3; s++) {
                    float alpha = ab[s][0], beta = ab[s][1];
                    if (beta == 0.0f) /* beta 0 overwrites: NaN in C must not stay */
                        for (int64_t i = 0; i < nc; i++) c0[i] = NAN;
                    memcpy(want, c0, sizeof(float) * nc);
                    ref_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, want, ldc);
                    for (int p = 0; p < N_PATHS; p++) {
                        if (force(p)) continue;
                        for (int threads = 1; threads <= 2; threads++) {
                            set_threads(threads);
                            memcpy(got, c0, sizeof(float) * nc);
                            mg_cpu_gemm_det(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, got, ldc);
                            int64_t d = first_diff(got, want, nc);
                            ck_assert_msg(d < 0,
                                          "ta=%d tb=%d m=%lld n=%lld k=%lld alpha=%g beta=%g path=%s "
                                          "threads=%d: C[%lld][%lld] is %a, the contract's %a",
                                          ta, tb, (long long)m, (long long)n, (long long)k,
                                          (double)alpha, (double)beta, mg_isa_name((mg_isa)paths[p]),
                                          threads, (long long)(d / ldc), (long long)(d % ldc),
                                          (double)got[d], (double)want[d]);
                            checked++;
                        }
                    }
                    if (beta == 0.0f) mg_test_fill(c0, nc, 30 + ki);
                }
                free(a), free(b), free(c0), free(want), free(got);
            }
    mg_cpu_gemm_det_force(-1);
    set_threads(1);
    ck_assert_int_gt(checked, 0);
}
END_TEST

/* The reference is not a plain sum: a kernel summing K in one chain fails. */
START_TEST(test_det_not_sequential) {
    enum { M = 8, N = 32, K = 1000 };
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
    float *c = malloc(sizeof(float) * M * N);
    mg_test_fill(a, M * K, 1);
    mg_test_fill(b, K * N, 2);
    mg_cpu_gemm_det(false, false, M, N, K, 1.0f, a, K, b, N, 0.0f, c, N);
    int differ = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = 0.0f;
            for (int p = 0; p < K; p++) s = fmaf(a[i * K + p], b[p * N + j], s);
            differ += memcmp(&s, &c[i * N + j], sizeof s) != 0;
        }
    ck_assert_msg(differ > 0, "the blocked sums equal one chain over K everywhere: the "
                              "test data cannot tell the orders apart");
    free(a), free(b), free(c);
}
END_TEST

/* ---- a row's bits do not depend on the other rows ------------------------------------- */

START_TEST(test_det_rows_alone) {
    bool ta = _i & 1, tb = _i & 2;
    enum { M = 70, N = 100, K = 333 };
    int64_t lda = ta ? M : K, ldb = tb ? K : N;
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
    float *whole = malloc(sizeof(float) * M * N), *row = malloc(sizeof(float) * N);
    mg_test_fill(a, M * K, 3);
    mg_test_fill(b, K * N, 4);
    for (int p = 0; p < N_PATHS; p++) {
        if (force(p)) continue;
        set_threads(2);
        mg_cpu_gemm_det(ta, tb, M, N, K, 1.0f, a, lda, b, ldb, 0.0f, whole, N);
        set_threads(1);
        for (int64_t i = 0; i < M; i++) {
            /* op(A)'s row i alone: a row of A, or a column of A^T (lda apart) */
            mg_cpu_gemm_det(ta, tb, 1, N, K, 1.0f, ta ? a + i : a + i * K, lda, b, ldb, 0.0f, row, N);
            ck_assert_msg(memcmp(row, whole + i * N, sizeof(float) * N) == 0,
                          "ta=%d tb=%d path=%s: row %lld alone differs from it among %d rows", ta,
                          tb, mg_isa_name((mg_isa)paths[p]), (long long)i, M);
        }
    }
    mg_cpu_gemm_det_force(-1);
    free(a), free(b), free(whole), free(row);
}
END_TEST

/* ---- K split in aligned power-of-two ranges sums to the whole ------------------------ */

/* C (M x N) = op(A) op(B) over k in [k0, k0 + kn) */
static void k_range(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                    const float *b, int64_t k0, int64_t kn, float *c) {
    int64_t lda = ta ? m : k, ldb = tb ? k : n;
    mg_cpu_gemm_det(ta, tb, m, n, kn, 1.0f, ta ? a + k0 * lda : a + k0, lda,
                    tb ? b + k0 : b + k0 * ldb, ldb, 0.0f, c, n);
}

START_TEST(test_det_k_split) {
    bool ta = _i & 1, tb = _i & 2;
    enum { M = 17, N = 33, KMAX = 512 };
    float *a = malloc(sizeof(float) * M * KMAX), *b = malloc(sizeof(float) * KMAX * N);
    float *whole = malloc(sizeof(float) * M * N), *sum = malloc(sizeof(float) * M * N);
    float *q[4];
    for (int i = 0; i < 4; i++) q[i] = malloc(sizeof(float) * M * N);
    mg_test_fill(a, M * KMAX, 5);
    mg_test_fill(b, KMAX * N, 6);
    for (int p = 0; p < N_PATHS; p++) {
        if (force(p)) continue;
        /* K = 256 (and 200: leaves of 50) as its two halves */
        for (int64_t k = 200; k <= 256; k += 56) {
            k_range(ta, tb, M, N, k, a, b, 0, k, whole);
            k_range(ta, tb, M, N, k, a, b, 0, k / 2, q[0]);
            k_range(ta, tb, M, N, k, a, b, k / 2, k / 2, q[1]);
            for (int i = 0; i < M * N; i++) sum[i] = q[0][i] + q[1][i];
            ck_assert_msg(memcmp(sum, whole, sizeof(float) * M * N) == 0,
                          "ta=%d tb=%d path=%s K=%lld: the halves' sum differs from the whole", ta,
                          tb, mg_isa_name((mg_isa)paths[p]), (long long)k);
        }
        /* K = 512 as ((q0 + q1) + (q2 + q3)), quarters of 128 */
        k_range(ta, tb, M, N, KMAX, a, b, 0, KMAX, whole);
        for (int s = 0; s < 4; s++) k_range(ta, tb, M, N, KMAX, a, b, 128 * s, 128, q[s]);
        for (int i = 0; i < M * N; i++) sum[i] = (q[0][i] + q[1][i]) + (q[2][i] + q[3][i]);
        ck_assert_msg(memcmp(sum, whole, sizeof(float) * M * N) == 0,
                      "ta=%d tb=%d path=%s K=512: the quarters' tree differs from the whole", ta,
                      tb, mg_isa_name((mg_isa)paths[p]));
        /* and not as a chain of the quarters: the tree is what makes the split hold */
        for (int i = 0; i < M * N; i++) sum[i] = ((q[0][i] + q[1][i]) + q[2][i]) + q[3][i];
        ck_assert_msg(memcmp(sum, whole, sizeof(float) * M * N) != 0,
                      "K=512: a chain of the quarters equals the tree: the data cannot tell");
    }
    mg_cpu_gemm_det_force(-1);
    for (int i = 0; i < 4; i++) free(q[i]);
    free(a), free(b), free(whole), free(sum);
}
END_TEST

/* ---- empty sizes -------------------------------------------------------------------- */

START_TEST(test_det_empty) {
    float c[6] = {1, 2, 3, 4, 5, NAN}, a[1] = {NAN}, b[1] = {NAN};
    float keep[6];
    memcpy(keep, c, sizeof c);
    mg_cpu_gemm_det(false, false, 0, 3, 4, 1.0f, a, 4, b, 3, 0.0f, c, 3);
    mg_cpu_gemm_det(false, false, 2, 0, 4, 1.0f, a, 4, b, 0, 0.0f, c, 3);
    ck_assert_msg(memcmp(c, keep, sizeof c) == 0, "M or N 0: C changed");
    mg_cpu_gemm_det(false, false, 2, 3, 0, 1.0f, a, 1, b, 3, 0.5f, c, 3); /* K 0: C = beta C */
    for (int i = 0; i < 5; i++) ck_assert_float_eq(c[i], 0.5f * keep[i]);
    ck_assert(isnan(c[5]));
    mg_cpu_gemm_det(false, false, 2, 3, 0, 1.0f, a, 1, b, 3, 0.0f, c, 3); /* beta 0: zeros */
    for (int i = 0; i < 6; i++) ck_assert_msg(c[i] == 0.0f, "K 0, beta 0: C[%d] is %g", i, c[i]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("gemm_det");
    TCase *tc = mg_test_case(s, "gemm_det", (const TTest *[]){test_det_not_sequential,
                                                                test_det_empty, NULL});
    tcase_add_loop_test(tc, test_det_shapes, 0, 4);
    tcase_add_loop_test(tc, test_det_rows_alone, 0, 4);
    tcase_add_loop_test(tc, test_det_k_split, 0, 4);
    return mg_test_run(s);
}
