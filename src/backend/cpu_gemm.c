/* cpu_gemm.c: the fp32 GEMM on the CPU that the vtable and the kernels call
 * (mg_cpu_gemm, cpu_kernels.h): in the deterministic mode cpu_gemm_det.c's,
 * else cpu_gemm_small.c's kernels for one row or a few rows against a large
 * B (OpenBLAS's sgemv for the single rows they do not take: a transposed A,
 * a CPU without AVX-512), and sgemm for the rest. It sits above those two
 * files, and every kernel file that multiplies sits above it.
 * Exports: mg_cpu_gemm. */
#include <cblas.h>

#include "backend/backend_state.h"
#include "backend/cpu_kernels.h"

/* C(M,N) = alpha op(A) op(B) + beta C, row-major; op(A) is (M,K), op(B) is (K,N). */
void mg_cpu_gemm(void *ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                 float *c, int64_t ldc) {
    (void)ctx;
    if (mg_backend_ctx()->deterministic) { /* one order of additions, whatever the shapes */
        mg_cpu_gemm_det(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    if (m <= 0 || n <= 0) return;
    if (k <= 0) { /* empty contraction: C = beta C (beta 0 overwrites, as BLAS does) */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
        return;
    }
    if (m == 1) { /* one row (a token of generation): sgemm would pack all of B for it */
        if (mg_cpu_gemm_small(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) == 0)
            return; /* our kernels where the CPU has AVX-512 */
        int inc_a = trans_a ? (int)lda : 1;
        if (trans_b) /* c (N) = B (N, K) a */
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)n, (int)k, alpha, b, (int)ldb, a, inc_a,
                        beta, c, 1);
        else /* c (N) = B^T a, B (K, N) */
            cblas_sgemv(CblasRowMajor, CblasTrans, (int)k, (int)n, alpha, b, (int)ldb, a, inc_a,
                        beta, c, 1);
        return;
    }
    if (mg_cpu_gemm_small(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) == 0)
        return; /* a micro-batch against a large weight: sgemm would pack the weight */
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a, (int)lda, b,
                (int)ldb, beta, c, (int)ldc);
}
