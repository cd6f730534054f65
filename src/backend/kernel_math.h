/* kernel_math.h: the arithmetic that the CPU kernels (cpu.c) and the CUDA kernels
 * (cuda_kernels.cu) share, compiled for the host and, under nvcc, for the device:
 * - mg_kernel_gelu, mg_kernel_gelu_grad: GELU in the tanh approximation (as torch's
 *   gelu(approximate="tanh")) and its derivative;
 * - mg_unravel2: item i of a box of dims, as offsets in two arrays of their own
 *   strides (a copy's source and destination, a binary op's two inputs).
 * Exports MG_KERNEL (the functions' qualifiers) and the three functions. */
#ifndef MG_BACKEND_KERNEL_MATH_H
#define MG_BACKEND_KERNEL_MATH_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define MG_KERNEL static __host__ __device__ __forceinline__
#else
#define MG_KERNEL static inline
#endif

#define MG_GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define MG_GELU_C 0.044715f

MG_KERNEL float mg_kernel_gelu(float x) {
    return 0.5f * x * (1.0f + tanhf(MG_GELU_K * (x + MG_GELU_C * x * x * x)));
}

MG_KERNEL float mg_kernel_gelu_grad(float x) {
    float x2 = x * x;
    float t = tanhf(MG_GELU_K * (x + MG_GELU_C * x2 * x));
    return 0.5f * (1.0f + t) +
           0.5f * x * (1.0f - t * t) * MG_GELU_K * (1.0f + 3.0f * MG_GELU_C * x2);
}

/* Item i (row-major, the last dim fastest) of the box of nd dims of sizes n: its
 * offsets *o1 by the strides s1 and *o2 by the strides s2. */
MG_KERNEL void mg_unravel2(int64_t i, int nd, const int64_t *n, const int64_t *s1,
                           const int64_t *s2, int64_t *o1, int64_t *o2) {
    int64_t a = 0, b = 0;
    for (int d = nd - 1; d >= 0; d--) {
        int64_t c = i % n[d];
        i /= n[d];
        a += c * s1[d];
        b += c * s2[d];
    }
    *o1 = a;
    *o2 = b;
}

#endif
