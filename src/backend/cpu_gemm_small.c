/* cpu_gemm_small.c: the forward product of a Linear layer, y = x W^T, when x
 * is a micro-batch of a few rows or one row (a generated token), without
 * packing the weight; and one row against an untransposed B (a generated
 * token's weighted sum of values).
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

#include "backend/backend_state.h"
#include "backend/blas_core.h"
#include "backend/cpu_kernels.h"
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
#define AVX512 __attribute__((target("arch=x86-64-v4")))
#else
#define SMALL_GEMM 0
#define AVX2
#define AVX512
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

/* ---- one row: c = B a, B (N, K) -------------------------------------------------------- */

/* A generated token's product: each weight row read once, in order, against
 * the one row of A, four rows of B at a time (four sums in flight, 16 lanes
 * of a loaded once for them), each sum's lanes added as a tree. OpenBLAS's
 * sgemv is slower on a Llama's shapes (docs/PERFORMANCE.md, "The Llama"). */
typedef float v16 __attribute__((vector_size(64)));

AVX512 static inline v16 load16(const float *p) {
    v16 v;
    memcpy(&v, p, sizeof v);
    return v;
}

typedef float v4 __attribute__((vector_size(16)));

/* The 16 lanes' sum as a tree (halves added, then their halves): four
 * dependent adds, not fifteen, which a short row (an attention head's 48
 * dims) would wait on. */
AVX512 static inline float lanes_sum(v16 v) {
    v8 h[2];
    memcpy(h, &v, sizeof h);
    v8 s8 = h[0] + h[1];
    v4 q[2];
    memcpy(q, &s8, sizeof q);
    v4 s4 = q[0] + q[1];
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

/* acc[r] = B[r, :] . a for the four rows r of B from b. */
AVX512 static void gemv_rows4(const float *b, int64_t ldb, const float *a, int64_t k, float *acc) {
    const float *b0 = b, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;
    v16 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    int64_t p = 0;
    for (; p + 16 <= k; p += 16) {
        v16 x = load16(a + p);
        s0 += load16(b0 + p) * x;
        s1 += load16(b1 + p) * x;
        s2 += load16(b2 + p) * x;
        s3 += load16(b3 + p) * x;
    }
    acc[0] = lanes_sum(s0), acc[1] = lanes_sum(s1), acc[2] = lanes_sum(s2), acc[3] = lanes_sum(s3);
    for (; p < k; p++) {
        acc[0] += b0[p] * a[p], acc[1] += b1[p] * a[p];
        acc[2] += b2[p] * a[p], acc[3] += b3[p] * a[p];
    }
}

AVX512 static float gemv_row(const float *b, const float *a, int64_t k) {
    v16 s = {0};
    int64_t p = 0;
    for (; p + 16 <= k; p += 16) s += load16(b + p) * load16(a + p);
    float acc = lanes_sum(s);
    for (; p < k; p++) acc += b[p] * a[p];
    return acc;
}

AVX512 static void gemv_nt(int64_t n, int64_t k, float alpha, const float *a, const float *b,
                           int64_t ldb, float beta, float *c) {
    int64_t blocks = n / 4;
    MG_PAR_FOR(blocks > 16 && n * k > (1 << 20), for (int64_t t = 0; t < blocks; t++) {
        float acc[4];
        gemv_rows4(b + 4 * t * ldb, ldb, a, k, acc);
        put(c + 4 * t, acc, 4, alpha, beta);
    });
    for (int64_t i = 4 * blocks; i < n; i++) {
        float acc = gemv_row(b + i * ldb, a, k);
        put(c + i, &acc, 1, alpha, beta);
    }
}

/* c = B^T a, B (K, N): the rows of B scaled by a's elements and summed, 64
 * columns of c at a time in registers (attention's weighted sum of values
 * for one query). Each element of c is one sum over K in order. */
AVX512 static void gemv_tn_cols(const float *b, int64_t ldb, const float *a, int64_t k, float *acc,
                                int64_t cols) {
    v16 s[4] = {{0}, {0}, {0}, {0}};
    int nv = (int)(cols / 16);
    for (int64_t p = 0; p < k; p++) {
        v16 x = {0};
        x += a[p];
        for (int j = 0; j < nv; j++) s[j] += load16(b + p * ldb + 16 * j) * x;
    }
    memcpy(acc, s, sizeof(float) * 16 * (size_t)nv);
    for (int64_t j = 16 * nv; j < cols; j++) { /* the columns past the last whole vector */
        float t = 0.0f;
        for (int64_t p = 0; p < k; p++) t += a[p] * b[p * ldb + j];
        acc[j] = t;
    }
}

AVX512 static void gemv_nn(int64_t n, int64_t k, float alpha, const float *a, const float *b,
                           int64_t ldb, float beta, float *c) {
    int64_t blocks = (n + 63) / 64;
    MG_PAR_FOR(blocks > 16 && n * k > (1 << 20), for (int64_t t = 0; t < blocks; t++) {
        float acc[64];
        int64_t cols = n - 64 * t < 64 ? n - 64 * t : 64;
        gemv_tn_cols(b + 64 * t, ldb, a, k, acc, cols);
        put(c + 64 * t, acc, (int)cols, alpha, beta);
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
    if (max_threads() < mg_backend_ctx()->cpu_threads) return -1;
    if (mg_cpu_isa() < MG_ISA_AVX2) return -1;
    /* alpha 0: BLAS scales C by beta and reads neither A nor B (a NaN there
     * stays out); sgemm does that */
    if (!trans_a && alpha != 0 && m == 1 && mg_cpu_isa() >= MG_ISA_AVX512) {
        if (trans_b) gemv_nt(n, k, alpha, a, b, ldb, beta, c);
        else gemv_nn(n, k, alpha, a, b, ldb, beta, c);
        return 0;
    }
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
