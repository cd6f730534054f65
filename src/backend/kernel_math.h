/* kernel_math.h: the arithmetic that the CPU kernels (cpu.c) and the CUDA kernels
 * (cuda_kernels.cu) share, compiled for the host and, under nvcc, for the device:
 * - the pointwise kernels, one line each in MG_UNARY_KERNELS and
 *   MG_BINARY_KERNELS: the enum of backend.h, the name of --trace, and the
 *   formula of one element, from which the CPU and CUDA loops are made;
 * - mg_kernel_gelu, mg_kernel_gelu_grad: GELU in the tanh approximation (as torch's
 *   gelu(approximate="tanh")) and its derivative, and their parts (_arg, _of,
 *   _grad_of) for a caller with a tanh of its own; SiLU's sigmoid and derivative;
 * - mg_unravel2: item i of a box of dims, as offsets in two arrays of their own
 *   strides (a copy's source and destination, a binary op's two inputs).
 * Exports MG_KERNEL (the functions' qualifiers), the two lists and the functions. */
#ifndef MG_BACKEND_KERNEL_MATH_H
#define MG_BACKEND_KERNEL_MATH_H

#include <math.h>
#include <stdint.h>

/* always inlined: the CPU's vectorized loops (cpu_kernels.h's clones) call
 * these, and out of line they would run the baseline code */
#ifdef __CUDACC__
#define MG_KERNEL static __host__ __device__ __forceinline__
#elif defined(__GNUC__)
#define MG_KERNEL static inline __attribute__((always_inline))
#else
#define MG_KERNEL static inline
#endif

#define MG_GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define MG_GELU_C 0.044715f

/* GELU as 0.5 x (1 + t), t = tanh(u), u = K (x + C x^3), and its derivative,
 * from t: the CPU computes t its own vectorizable way (cpu_nn.c) */
MG_KERNEL float mg_kernel_gelu_arg(float x) { return MG_GELU_K * (x + MG_GELU_C * x * x * x); }

MG_KERNEL float mg_kernel_gelu_of(float x, float t) { return 0.5f * x * (1.0f + t); }

MG_KERNEL float mg_kernel_gelu_grad_of(float x, float t) {
    return 0.5f * (1.0f + t) +
           0.5f * x * (1.0f - t * t) * MG_GELU_K * (1.0f + 3.0f * MG_GELU_C * (x * x));
}

MG_KERNEL float mg_kernel_gelu(float x) { return mg_kernel_gelu_of(x, tanhf(mg_kernel_gelu_arg(x))); }

MG_KERNEL float mg_kernel_gelu_grad(float x) {
    return mg_kernel_gelu_grad_of(x, tanhf(mg_kernel_gelu_arg(x)));
}

/* SiLU, x sigmoid(x), and its derivative s (1 + x (1 - s)), s = sigmoid(x)
 * (the CPU computes s its own vectorizable way, cpu_nn.c) */
MG_KERNEL float mg_kernel_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

MG_KERNEL float mg_kernel_silu_grad_of(float x, float s) { return s * (1.0f + x * (1.0f - s)); }

MG_KERNEL float mg_kernel_silu_grad(float x) { return mg_kernel_silu_grad_of(x, mg_kernel_sigmoid(x)); }

/* The pointwise kernels: K(ENUM, name, formula), the formula of one element
 * of out from x (and alpha, the factor of SCALE) or from x and y (a binary
 * op's two inputs: a gradient op's are dy and the forward's input). */
#define MG_UNARY_KERNELS(K)                                                         \
    K(RELU, relu, x > 0.0f || x != x ? x : 0.0f) /* NaN stays NaN */                \
    K(GELU, gelu, mg_kernel_gelu(x))                                                \
    K(SCALE, scale, alpha * x)                                                      \
    K(LOG, log, logf(x))                                                            \
    K(SILU, silu, x * mg_kernel_sigmoid(x))
#define MG_BINARY_KERNELS(K)                                                        \
    K(ADD, add, x + y)                                                              \
    K(SUB, sub, x - y)                                                              \
    K(MUL, mul, x * y)                                                              \
    K(RELU_BACKWARD, relu_backward, y > 0.0f ? x : 0.0f)                            \
    K(GELU_BACKWARD, gelu_backward, x * mg_kernel_gelu_grad(y))                     \
    K(SILU_BACKWARD, silu_backward, x * mg_kernel_silu_grad(y))

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
