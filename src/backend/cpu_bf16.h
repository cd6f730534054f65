/* cpu_bf16.h: the rounding to bf16, and the emulated bf16 GEMM (see
 * backend.h): rounded copies of a GEMM's inputs multiplied in fp32.
 * Exports: mg_bf16_round, mg_cpu_bf16_emulate, mg_cpu_bf16_gemm_loop. */
#ifndef MG_BACKEND_CPU_BF16_H
#define MG_BACKEND_CPU_BF16_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"

/* x rounded to the nearest bfloat16, ties to even, as a float: NaN stays NaN,
 * a value past the largest bf16 goes to inf (as CUDA's __float2bfloat16_rn). */
float mg_bf16_round(float x);

/* gemm_bf16 (backend.h) emulated: the spans of A and B that the GEMMs read
 * rounded to bf16 (a bf16 input widened) into two buffers of the context that
 * grow and are reused, then multiplied by mg_cpu_gemm (OpenBLAS) entry by
 * entry; a bias is put in C first. Where the buffers cannot grow, a loop that
 * rounds as it reads (slow, no allocation). */
void mg_cpu_bf16_emulate(void *ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                         float alpha, const mg_gemm_in *a, const mg_gemm_in *b, float beta,
                         float *c, int64_t ldc, int64_t stride_c, int64_t batch,
                         const float *bias);

/* One row-major GEMM with each input rounded as it is read and the products
 * summed in k order (C = alpha op(A) op(B) + beta C): what the emulation falls
 * back to when the rounded copies cannot be made. Slow; no allocation. */
void mg_cpu_bf16_gemm_loop(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                           float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                           float beta, float *c, int64_t ldc);

#endif
