/* backend.h: the local-kernel vtable (ggml style: an iface of function pointers
 * plus a context). Every kernel works on local dense tensors of one device; the
 * layers above never touch tensor memory except through these.
 *
 * Exports: struct mg_backend_iface, mg_backend, mg_backend_cpu(),
 * mg_backend_cuda() (NULL without CUDA), mg_backend_of(tensor), op enums and
 * their name tables, the bf16 GEMM switch.
 *
 * Conventions:
 * - binary ops broadcast: a and b have out's ndim, each dim equal to out's or 1.
 * - reduce ops: out has x's ndim, each dim equal to x's (kept) or 1 (reduced).
 * - gemm is row-major: C(M,N) = alpha * op(A) op(B) + beta * C, op = transpose
 *   when the flag is set; lda/ldb/ldc are row strides of the stored matrices.
 * - bf16 GEMMs (mg_backend_set_gemm_bf16): while on, gemm and gemm_batched of
 *   every backend round A and B to bfloat16 (round to nearest even) and sum the
 *   products in fp32; C, alpha and beta stay fp32 (as do weights and optimizer
 *   state). A product of two bf16 values is exact in fp32, so backends differ
 *   only in the order of the sums. */
#ifndef MG_BACKEND_H
#define MG_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "tensor.h"

typedef enum {
    MG_BINARY_ADD = 0,
    MG_BINARY_SUB,
    MG_BINARY_MUL,
    MG_BINARY_DIV,
    MG_BINARY_RELU_BACKWARD, /* a = dy, b = x: dy * (x > 0) */
    MG_BINARY_GELU_BACKWARD, /* a = dy, b = x: dy * gelu'(x) (tanh approximation) */
    MG_BINARY_COUNT
} mg_binary_op;

typedef enum {
    MG_UNARY_RELU = 0,
    MG_UNARY_GELU, /* tanh approximation, as torch's gelu(approximate="tanh") */
    MG_UNARY_SCALE, /* alpha * x */
    MG_UNARY_EXP,
    MG_UNARY_LOG,
    MG_UNARY_SQUARE,
    MG_UNARY_COUNT
} mg_unary_op;

extern const char *const mg_binary_names[MG_BINARY_COUNT];
extern const char *const mg_unary_names[MG_UNARY_COUNT];

struct mg_backend_iface {
    const char *name;
    int device; /* MG_DEVICE_* of the tensors it takes */

    /* memory (device tensors; the CPU backend uses malloc) */
    void *(*alloc)(void *ctx, size_t bytes);
    void (*free)(void *ctx, void *ptr);
    void (*to_host)(void *ctx, float *dst_host, const float *src, int64_t n);
    void (*from_host)(void *ctx, float *dst, const float *src_host, int64_t n);

    /* matrix work */
    void (*gemm)(void *ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                 float beta, float *c, int64_t ldc);
    /* batch of gemms; a stride of 0 reuses the same matrix for every batch entry */
    void (*gemm_batched)(void *ctx, bool trans_a, bool trans_b, int64_t m, int64_t n,
                         int64_t k, float alpha, const float *a, int64_t lda, int64_t stride_a,
                         const float *b, int64_t ldb, int64_t stride_b, float beta, float *c,
                         int64_t ldc, int64_t stride_c, int64_t batch);

    /* layout */
    void (*permute)(void *ctx, const mg_tensor *x, const int *perm, mg_tensor *out);
    /* out[dst_offset + i] = src[src_offset + i] for i in the box `extent` (n-D
     * block copy; src and dst have the same ndim). Used by redistribute. */
    void (*copy_block)(void *ctx, const mg_tensor *src, const int64_t *src_offset,
                       mg_tensor *dst, const int64_t *dst_offset, const int64_t *extent);
    void (*copy)(void *ctx, const mg_tensor *src, mg_tensor *dst); /* same numel */
    void (*fill)(void *ctx, mg_tensor *t, float value);

    /* elementwise */
    void (*unary)(void *ctx, mg_unary_op op, const mg_tensor *x, float alpha, mg_tensor *out);
    void (*binary)(void *ctx, mg_binary_op op, const mg_tensor *a, const mg_tensor *b,
                   mg_tensor *out);
    void (*axpy)(void *ctx, float alpha, const mg_tensor *x, mg_tensor *y); /* y += alpha x */

    /* reductions */
    void (*reduce_sum)(void *ctx, const mg_tensor *x, mg_tensor *out);
    void (*reduce_max)(void *ctx, const mg_tensor *x, mg_tensor *out);
    double (*sum_squares)(void *ctx, const mg_tensor *x);

    /* x (..., C) -> log_softmax over the last dim */
    void (*log_softmax)(void *ctx, const mg_tensor *x, mg_tensor *out);
    /* logits (N, C), labels (N) class indices stored as floats.
     * cross_entropy: out (0-d) = scale * sum_i -log_softmax(logits)[i, label_i].
     * cross_entropy_backward: dlogits = scale * (softmax(logits) - onehot(labels)).
     * Rows whose label is outside [0, C) count as errors: returns their number. */
    int64_t (*cross_entropy)(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                             float scale, mg_tensor *out);
    void (*cross_entropy_backward)(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                   float scale, mg_tensor *dlogits);

    /* optimizers, on local shards (all tensors of the same numel) */
    void (*sgd_step)(void *ctx, mg_tensor *param, const mg_tensor *grad, mg_tensor *momentum_buf,
                     float lr, float momentum, float weight_decay, bool first_step);
    void (*adamw_step)(void *ctx, mg_tensor *param, const mg_tensor *grad, mg_tensor *m,
                       mg_tensor *v, float lr, float beta1, float beta2, float eps,
                       float weight_decay, int64_t step /* 1-based, for bias correction */);
};

typedef struct mg_backend {
    const struct mg_backend_iface *iface;
    void *context;
} mg_backend;

mg_backend *mg_backend_cpu(void);
mg_backend *mg_backend_cuda(void); /* NULL when built without CUDA or no GPU */
mg_backend *mg_backend_of(const mg_tensor *t);

/* bf16 GEMM inputs for the whole process (off by default: plain fp32); applies
 * from the next GEMM, on every device (backend.c). */
void mg_backend_set_gemm_bf16(int on);
int mg_backend_gemm_bf16(void);
/* Elements from the first to the last that a GEMM reads of `batch` stored
 * (rows, cols) matrices, rows `ld` apart, matrices `stride` apart (all > 0). */
static inline int64_t mg_gemm_span(int64_t rows, int64_t cols, int64_t ld, int64_t stride,
                                   int64_t batch) {
    return (batch - 1) * stride + (rows - 1) * ld + cols;
}

/* CPU threading: 0 = default (cores / local ranks). */
void mg_backend_cpu_set_threads(int threads);
int mg_backend_cpu_threads(void);

#endif
