/* cpu_bf16.h: the CPU side of the bf16 GEMMs (see backend.h): the rounding and
 * the rounded copies of a GEMM's inputs that cpu.c multiplies in fp32.
 * Exports: mg_bf16_round, mg_cpu_bf16_round_inputs, mg_cpu_bf16_gemm_loop. */
#ifndef MG_BACKEND_CPU_BF16_H
#define MG_BACKEND_CPU_BF16_H

#include <stdbool.h>
#include <stdint.h>

/* x rounded to the nearest bfloat16, ties to even, as a float: NaN stays NaN,
 * a value past the largest bf16 goes to inf (as CUDA's __float2bfloat16_rn). */
float mg_bf16_round(float x);

/* The spans of A and B that a (batched) row-major GEMM reads, rounded to bf16
 * into two scratch buffers that grow and are reused; *a and *b then point
 * there. Returns 0, or -1 when a buffer could not grow (*a, *b unchanged). */
int mg_cpu_bf16_round_inputs(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                             const float **a, int64_t lda, int64_t stride_a, const float **b,
                             int64_t ldb, int64_t stride_b, int64_t batch);

/* One row-major GEMM with each input rounded as it is read and the products
 * summed in k order (C = alpha op(A) op(B) + beta C): what cpu.c falls back to
 * when the rounded copies cannot be made. Slow; no allocation. */
void mg_cpu_bf16_gemm_loop(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                           float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                           float beta, float *c, int64_t ldc);

#endif
