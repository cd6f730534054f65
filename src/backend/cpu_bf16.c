/* cpu_bf16.c: the bf16 rounding, and the emulated bf16 GEMM (see cpu_bf16.h
 * and backend.h) that runs where the CPU has no bf16 instructions
 * (cpu_gemm_bf16.c picks): copies of A and B rounded to bf16 (kept as floats)
 * multiplied by OpenBLAS's sgemm. The products of two bf16 values are exact in
 * fp32, so that is "bf16 inputs, fp32 accumulation", the numerics of a bf16
 * GEMM with fp32 compute, up to the order of the sums.
 * Exports: mg_bf16_round, mg_cpu_bf16_emulate, mg_cpu_bf16_gemm_loop. */
#include "backend/cpu_bf16.h"

#include <stdlib.h>
#include <string.h>

#include "backend/backend_state.h"
#include "backend/cpu_kernels.h"
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

/* The `rows` x `cols` matrices of x (fp32 rounded to bf16, or bf16 widened to
 * fp32: exact) for `batch` entries, into the context's buffer `which` (A: 0,
 * B: 1), grown when a GEMM needs more, never shrunk (the step reuses it: no
 * allocation once warm); only the thread that runs the kernels uses it. NULL
 * when it cannot grow. */
static const float *staged(int which, const mg_gemm_in *x, int64_t rows, int64_t cols,
                           int64_t batch) {
    int64_t n = mg_gemm_span(rows, cols, x->ld, x->stride, batch);
    mg_staging *scratch = &mg_backend_ctx()->bf16_rounded[which];
    if ((size_t)n * sizeof(float) > scratch->bytes) {
        int64_t cap = n + n / 4; /* some room, so a slightly larger GEMM does not grow it again */
        float *p = aligned_alloc(64, ((size_t)cap * sizeof(float) + 63) / 64 * 64);
        if (!p) return NULL;
        free(scratch->p);
        scratch->p = p;
        scratch->bytes = (size_t)cap * sizeof(float);
    }
    float *out = scratch->p;
    if (x->bf16) {
        const uint16_t *in = x->data;
        for (int64_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)in[i] << 16;
            memcpy(&out[i], &u, sizeof u);
        }
    } else {
        const float *in = x->data;
        for (int64_t i = 0; i < n; i++) out[i] = mg_bf16_round(in[i]);
    }
    return out;
}

/* element (r, c) of a stored matrix, as bf16 */
static float value(const mg_gemm_in *x, int64_t r, int64_t c) {
    if (!x->bf16) return mg_bf16_round(((const float *)x->data)[r * x->ld + c]);
    uint32_t u = (uint32_t)((const uint16_t *)x->data)[r * x->ld + c] << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* one GEMM, each input rounded as it is read, the products summed in k order */
static void gemm_loop(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const mg_gemm_in *a, const mg_gemm_in *b, float beta, float *c,
                      int64_t ldc) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = 0.0f;
            for (int64_t p = 0; p < k; p++)
                s += (trans_a ? value(a, p, i) : value(a, i, p)) *
                     (trans_b ? value(b, j, p) : value(b, p, j));
            float *out = &c[i * ldc + j];
            *out = alpha * s + (beta == 0.0f ? 0.0f : beta * *out);
        }
}

void mg_cpu_bf16_gemm_loop(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                           float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                           float beta, float *c, int64_t ldc) {
    mg_gemm_in ai = {a, lda, 0, false}, bi = {b, ldb, 0, false};
    gemm_loop(trans_a, trans_b, m, n, k, alpha, &ai, &bi, beta, c, ldc);
}

void mg_cpu_bf16_emulate(void *ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                         float alpha, const mg_gemm_in *a, const mg_gemm_in *b, float beta,
                         float *c, int64_t ldc, int64_t stride_c, int64_t batch,
                         const float *bias) {
    // A is stored (M, K), or (K, M) when transposed; B (K, N), or (N, K)
    const float *ra = staged(0, a, trans_a ? k : m, trans_a ? m : k, batch);
    const float *rb = ra ? staged(1, b, trans_b ? n : k, trans_b ? k : n, batch) : NULL;
    for (int64_t e = 0; e < batch; e++) {
        float *ce = c + e * stride_c;
        float be = beta;
        if (bias) { /* C = beta C + bias, then the GEMM adds onto it */
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++)
                    ce[i * ldc + j] = (beta == 0.0f ? 0.0f : beta * ce[i * ldc + j]) + bias[j];
            be = 1.0f;
        }
        if (rb) {
            mg_cpu_gemm(ctx, trans_a, trans_b, m, n, k, alpha, ra + e * a->stride, a->ld,
                        rb + e * b->stride, b->ld, be, ce, ldc);
        } else { /* no memory for the copies: slow */
            size_t sa = a->bf16 ? sizeof(uint16_t) : sizeof(float);
            size_t sb = b->bf16 ? sizeof(uint16_t) : sizeof(float);
            mg_gemm_in ae = *a, bb = *b;
            ae.data = (const char *)a->data + (size_t)(e * a->stride) * sa;
            bb.data = (const char *)b->data + (size_t)(e * b->stride) * sb;
            gemm_loop(trans_a, trans_b, m, n, k, alpha, &ae, &bb, be, ce, ldc);
        }
    }
}
