/* cpu_bf16.c: the CPU side of the bf16 GEMMs (see cpu_bf16.h and backend.h).
 * cpu.c's gemm, while bf16 is on, multiplies copies of A and B rounded to bf16
 * (kept as floats) with cblas_sgemm: the products of two bf16 values are exact
 * in fp32, so that is "bf16 inputs, fp32 accumulation", the numerics of a
 * cuBLAS bf16 GEMM with fp32 compute, up to the order of the sums.
 * Exports: mg_bf16_round, mg_cpu_bf16_round_inputs, mg_cpu_bf16_gemm_loop. */
#include "backend/cpu_bf16.h"

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "context.h"

float mg_bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        u |= 0x00400000u; /* NaN: set the quiet bit, so it stays a NaN after the cut */
    else
        u += 0x7fffu + ((u >> 16) & 1u); /* to nearest, ties to even; inf stays inf */
    u &= 0xffff0000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* x[0, n) rounded to bf16 into the context's buffer `which` (A: 0, B: 1),
 * grown when a GEMM needs more, never shrunk (the step reuses it: no
 * allocation once warm); only the thread that runs the kernels uses it. */
static const float *rounded(int which, const float *x, int64_t n) {
    mg_staging *scratch = &mg_ctx()->bf16_rounded[which];
    if ((size_t)n * sizeof(float) > scratch->bytes) {
        int64_t cap = n + n / 4; /* some room, so a slightly larger GEMM does not grow it again */
        float *p = aligned_alloc(64, ((size_t)cap * sizeof(float) + 63) / 64 * 64);
        if (!p) return NULL;
        free(scratch->p);
        scratch->p = p;
        scratch->bytes = (size_t)cap * sizeof(float);
    }
    float *out = scratch->p;
    for (int64_t i = 0; i < n; i++) out[i] = mg_bf16_round(x[i]);
    return out;
}

int mg_cpu_bf16_round_inputs(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                             const float **a, int64_t lda, int64_t stride_a, const float **b,
                             int64_t ldb, int64_t stride_b, int64_t batch) {
    // A is stored (M, K), or (K, M) when transposed; B (K, N), or (N, K)
    int64_t na = mg_gemm_span(trans_a ? k : m, trans_a ? m : k, lda, stride_a, batch);
    int64_t nb = mg_gemm_span(trans_b ? n : k, trans_b ? k : n, ldb, stride_b, batch);
    const float *ra = rounded(0, *a, na);
    const float *rb = ra ? rounded(1, *b, nb) : NULL;
    if (!ra || !rb) return -1;
    *a = ra;
    *b = rb;
    return 0;
}

void mg_cpu_bf16_gemm_loop(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                           float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                           float beta, float *c, int64_t ldc) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = 0.0f;
            for (int64_t p = 0; p < k; p++)
                s += mg_bf16_round(trans_a ? a[p * lda + i] : a[i * lda + p]) *
                     mg_bf16_round(trans_b ? b[j * ldb + p] : b[p * ldb + j]);
            float *out = &c[i * ldc + j];
            *out = alpha * s + (beta == 0.0f ? 0.0f : beta * *out);
        }
}
