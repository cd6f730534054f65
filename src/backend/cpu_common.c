/* cpu_common.c: what the CPU kernel files share and define once: the fp32
 * GEMM on OpenBLAS that the vtable and the kernels call, and the bounds of
 * mg_cpu_exp (cpu_internal.h says why they live in a .c file). In the
 * deterministic mode the GEMM is cpu_gemm_det.c's. It calls no
 * other kernel file but cpu_gemm_small.c and cpu_gemm_det.c, so the kernel files depend on it
 * and not on each other.
 * Also the threads' kept buffers of the GEMM kernels.
 * Exports: mg_cpu_gemm, mg_cpu_exp_lo, mg_cpu_exp_hi, mg_cpu_thread_buffer
 * (cpu_internal.h). */
#include "backend/backend.h"

#include <cblas.h>
#include <pthread.h>
#include <stdlib.h>

#include "backend/cpu_internal.h"
#include "context.h"

const float mg_cpu_exp_lo = -88.0f, mg_cpu_exp_hi = 88.0f; /* see mg_cpu_exp */

/* C(M,N) = alpha op(A) op(B) + beta C, row-major; op(A) is (M,K), op(B) is (K,N). */
void mg_cpu_gemm(void *ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                 float *c, int64_t ldc) {
    (void)ctx;
    if (mg_ctx()->deterministic) { /* one order of additions, whatever the shapes */
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

/* ---- a thread's kept buffers ------------------------------------------------------
 * One buffer per slot and thread, grown as needed and kept, so a steady-state
 * step allocates nothing (docs/DESIGN.md "Memory"); a thread's own, as gemm may
 * be called from several threads at once. Each is also the thread's value of
 * its slot's key, whose destructor frees it when the thread ends (a
 * _Thread_local pointer alone would lose it then). 64-byte aligned. */
static _Thread_local float *thread_buf[MG_CPU_THREAD_BUFFERS];
static _Thread_local size_t thread_cap[MG_CPU_THREAD_BUFFERS];
static pthread_key_t thread_key[MG_CPU_THREAD_BUFFERS];
static pthread_once_t keys_once = PTHREAD_ONCE_INIT;
static int keys_made;

static void make_keys(void) {
    keys_made = 1;
    for (int i = 0; i < MG_CPU_THREAD_BUFFERS; i++)
        keys_made &= pthread_key_create(&thread_key[i], free) == 0;
}

float *mg_cpu_thread_buffer(int slot, size_t n) {
    if (n > thread_cap[slot]) {
        pthread_once(&keys_once, make_keys);
        if (!keys_made) return NULL;
        free(thread_buf[slot]);
        thread_cap[slot] = 0;
        void *p = NULL;
        if (posix_memalign(&p, 64, n * sizeof(float))) p = NULL;
        thread_buf[slot] = p;
        pthread_setspecific(thread_key[slot], p);
        if (!p) return NULL;
        thread_cap[slot] = n;
    }
    return thread_buf[slot];
}
