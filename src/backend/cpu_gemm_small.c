/* cpu_gemm_small.c: the forward product of a Linear layer, y = x W^T, when x
 * is a micro-batch of a few rows, without packing the weight.
 *
 * sgemm packs the whole of B (here the weight) into a buffer for every call.
 * For a 256-row batch that copy is small beside the product; for the 32-row
 * micro-batches of a pipeline or of gradient accumulation it is not: eight
 * 32-row forwards cost clearly more than the one 256-row product
 * (`meshgrad bench ops` times both). This kernel reads the weight's rows
 * where they lie, once, and packs only x (transposed, K x M):
 *   C (M, N) = alpha A (M, K) B^T + beta C, B (N, K), M <= 64
 * (beta 0 overwrites C, as BLAS does). Every element of C is one sum over K in
 * order, in float with fused multiply-adds, so a row of C does not depend on
 * the other rows there are (row shards of a batch get the same bits).
 * The backward's products stay with sgemm: dx = dy W reads W across its rows,
 * and dW = dy^T x streams dW through memory whoever computes it; kernels of
 * ours for them ran no faster than sgemm in a pipeline step.
 *
 * The register tile is AVX2's (8 lanes, 16 registers) and runs where the CPU
 * has AVX2 and FMA; beside OpenBLAS's AVX2 (Haswell) kernels the small
 * products then run at about the rate of the large ones, no faster. Other
 * shapes, CPUs and compilers go to sgemm.
 * Exports mg_cpu_gemm_small (cpu_kernels.h). */
#include <stdlib.h>
#include <string.h>

#include "backend/blas_core.h"
#include "backend/cpu_kernels.h"
#include "context.h"
#include "parallel.h"

#ifdef _OPENMP
#include <omp.h>
static int max_threads(void) { return omp_get_max_threads(); }
#else
static int max_threads(void) { return 1; }
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SMALL_GEMM 1
#pragma GCC optimize("fp-contract=fast")
#define AVX2 __attribute__((target("arch=x86-64-v3")))
#else
#define SMALL_GEMM 0
#define AVX2
#endif

typedef float v8 __attribute__((vector_size(32)));

AVX2 static inline v8 splat(float s) { return (v8){s, s, s, s, s, s, s, s}; }
AVX2 static inline v8 load8(const float *p) {
    v8 v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* c = alpha * acc + beta * c for `n` floats (beta 0: c = alpha * acc) */
AVX2 static inline void put(float *c, const float *acc, int n, float alpha, float beta) {
    if (beta == 0.0f)
        for (int j = 0; j < n; j++) c[j] = alpha * acc[j];
    else
        for (int j = 0; j < n; j++) c[j] = alpha * acc[j] + beta * c[j];
}

/* ---- nt: C = A B^T, M small ----------------------------------------------------------- */

enum { NT_M = 16, NT_N = 6 }; /* 2 vectors of rows x 6 weight rows: 12 accumulators */

/* C[m0 .. m0+mr, n0 .. n0+nr] from at (K x mp: A transposed, rows padded to
 * a multiple of NT_M with zeros) and B's rows n0.. (K each, ldb apart). */
AVX2 static void nt_tile(const float *at, int64_t mp, int64_t m0, int mr, const float *b,
                         int64_t ldb, int nr, int64_t k, float alpha, float beta, float *c,
                         int64_t ldc) {
    v8 acc[NT_N][2];
    const float *bp[NT_N];
    for (int j = 0; j < NT_N; j++) {
        acc[j][0] = acc[j][1] = splat(0.0f);
        bp[j] = b + (j < nr ? j : 0) * ldb; /* a missing row repeats row 0; dropped below */
    }
    const float *a = at + m0;
    for (int64_t p = 0; p < k; p++, a += mp) {
        v8 a0 = load8(a), a1 = load8(a + 8);
#pragma GCC unroll 6
        for (int j = 0; j < NT_N; j++) {
            v8 x = splat(bp[j][p]);
            acc[j][0] += a0 * x;
            acc[j][1] += a1 * x;
        }
    }
    float t[NT_N][NT_M];
    memcpy(t, acc, sizeof t);
    for (int i = 0; i < mr; i++) {
        float row[NT_N];
        for (int j = 0; j < nr; j++) row[j] = t[j][i];
        put(c + (m0 + i) * ldc, row, nr, alpha, beta);
    }
}

AVX2 static void gemm_nt(int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                         int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                         int64_t ldc, float *at) {
    int64_t mp = (m + NT_M - 1) / NT_M * NT_M;
    for (int64_t p = 0; p < k; p++)
        for (int64_t i = 0; i < mp; i++) at[p * mp + i] = i < m ? a[i * lda + p] : 0.0f;
    int64_t tiles = (n + NT_N - 1) / NT_N;
    MG_PAR_FOR(tiles > 64 && m * n * k > (1 << 22), for (int64_t t = 0; t < tiles; t++) {
        int64_t n0 = t * NT_N;
        int nr = n - n0 < NT_N ? (int)(n - n0) : NT_N;
        for (int64_t m0 = 0; m0 < m; m0 += NT_M)
            nt_tile(at, mp, m0, m - m0 < NT_M ? (int)(m - m0) : NT_M, b + n0 * ldb, ldb, nr, k,
                    alpha, beta, c + n0, ldc);
    });
}

/* ---- dispatch ------------------------------------------------------------------------- */

/* Rows up to which the kernel beats sgemm on a large weight, one thread
 * (`meshgrad bench ops` times it at 32 rows). */
#define SMALL_ROWS 64
#define LARGE_WEIGHT (1 << 16) /* floats: below, packing it costs sgemm little */

#if SMALL_GEMM
/* The packed rows of x (mp x k floats): the thread's kept buffer (cpu_common.c). */
static float *packed_rows(size_t n) { return mg_cpu_thread_buffer(MG_CPU_BUFFER_SMALL_GEMM, n); }
#endif

int mg_cpu_gemm_small(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                      float *c, int64_t ldc) {
#if SMALL_GEMM
    /* our loops must have the threads sgemm would (a pthreads OpenBLAS keeps
     * them to itself: backend.c) */
    if (max_threads() < mg_ctx()->cpu_threads) return -1;
    if (mg_cpu_isa() < MG_ISA_AVX2) return -1;
    /* alpha 0: BLAS scales C by beta and reads neither A nor B (a NaN there
     * stays out); sgemm does that */
    if (!trans_a && trans_b && alpha != 0 && m <= SMALL_ROWS && n * k >= LARGE_WEIGHT) { /* nt */
        int64_t mp = (m + NT_M - 1) / NT_M * NT_M;
        float *at = packed_rows((size_t)(mp * k));
        if (!at) return -1;
        gemm_nt(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, at);
        return 0;
    }
#else
    (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda;
    (void)b, (void)ldb, (void)beta, (void)c, (void)ldc;
#endif
    return -1;
}
