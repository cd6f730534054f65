/* backend.h: the local-kernel vtable (ggml style: an iface of function pointers
 * plus a context). Every kernel works on local dense tensors of one device; the
 * layers above never touch tensor memory except through these.
 *
 * Exports: struct mg_backend_iface, mg_backend, mg_backend_cpu(),
 * mg_backend_cuda() (NULL without CUDA), mg_backend_of(tensor), the pointwise
 * kernels' enums (one line each in kernel_math.h) and their names, the bf16 GEMM
 * switch, mg_gemm_in, the weights' bf16 copies, mg_binary_dims (the broadcast
 * layout that the CPU and CUDA binary kernels share).
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
 *   only in the order of the sums, and in values under 2^-126, which the
 *   CPU's bf16 instructions take as zero. gemm_bf16 is the same GEMM with
 *   inputs that may be bf16 already (cast_bf16's, the weights' copies of
 *   mg_backend_bf16_weight) and a bias; a backend without it (NULL) has its
 *   gemm round the inputs. */
#ifndef MG_BACKEND_H
#define MG_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/kernel_math.h"
#include "tensor.h"

/* An input of gemm_bf16: a row-major matrix, rows `ld` elements apart, batch
 * entries `stride` apart, of floats, or with `bf16` of bfloat16 values (each a
 * uint16_t: the upper half of a float, as cast_bf16 writes them). */
typedef struct {
    const void *data;
    int64_t ld, stride;
    bool bf16;
} mg_gemm_in;

/* The pointwise kernels (their formulas: kernel_math.h). */
#define MG_KERNEL_ENUM_UNARY(E, name, f) MG_UNARY_##E,
#define MG_KERNEL_ENUM_BINARY(E, name, f) MG_BINARY_##E,
typedef enum { MG_UNARY_KERNELS(MG_KERNEL_ENUM_UNARY) MG_UNARY_COUNT } mg_unary_op;
typedef enum { MG_BINARY_KERNELS(MG_KERNEL_ENUM_BINARY) MG_BINARY_COUNT } mg_binary_op;

extern const char *const mg_binary_names[MG_BINARY_COUNT];
extern const char *const mg_unary_names[MG_UNARY_COUNT];

/* The deterministic mode's sum of n terms is the halving tree: n even and above
 * MG_DET_LEAF is the sum of its two halves, each summed so; a leaf is added in
 * order from +0. mg_det_leaf(n): the length of every leaf of n terms.
 * mg_det_split_ok(n, parts): 1 when n terms cut into `parts` equal consecutive
 * parts give one subtree each (parts a power of two, every length on the way
 * down even and above MG_DET_LEAF), so the parts' sums added in a tree over
 * them (dist/comm_tree.c) are the whole sum's bits. */
#define MG_DET_LEAF 64
int64_t mg_det_leaf(int64_t n);
int mg_det_split_ok(int64_t n, int64_t parts);

/* The fixed point of cross_entropy_fixed: exp(x - max) <= 1 taken in units of
 * 2^-40, so 2^23 classes sum below 2^63. */
#define MG_CE_FIXED_BITS 40

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
    /* bf16 (the switch on): y[i] = x[i] rounded to bf16 for i < n. NULL where the
     * backend has no bf16 GEMM of its own (gemm_bf16 NULL too). */
    void (*cast_bf16)(void *ctx, const float *x, uint16_t *y, int64_t n);
    /* A batch of bf16 GEMMs: C = alpha op(A) op(B) + beta C + bias, the products
     * of the bf16 values summed in fp32, bias (N) added to every row of C (NULL:
     * none); a and b fp32 (rounded to bf16 as read) or bf16; stride 0 reuses a
     * matrix for every entry. beta 0 overwrites C. */
    void (*gemm_bf16)(void *ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      float alpha, const mg_gemm_in *a, const mg_gemm_in *b, float beta, float *c,
                      int64_t ldc, int64_t stride_c, int64_t batch, const float *bias);

    /* layout */
    void (*permute)(void *ctx, const mg_tensor *x, const int *perm, mg_tensor *out);
    /* out[dst_offset + i] = src[src_offset + i] for i in the box `extent` (n-D
     * block copy; src and dst have the same ndim). Used by redistribute. */
    void (*copy_block)(void *ctx, const mg_tensor *src, const int64_t *src_offset,
                       mg_tensor *dst, const int64_t *dst_offset, const int64_t *extent);
    /* copy_block adding into dst: out[dst_offset + i] += src[src_offset + i]
     * (a narrow's gradient into its input's, autograd/backward.c) */
    void (*add_block)(void *ctx, const mg_tensor *src, const int64_t *src_offset,
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

    /* ---- rows: x (R, C) seen as rows over its last dim; a per-row value is an (R)
     * tensor. Where a row is split across ranks (the op's dim is sharded) x holds C
     * of its n columns and the per-row sums come in summed over the ranks. ---- */

    /* out = softmax(x), or log_softmax(x) with `log`, over the last dim. max and sum
     * NULL: each row's own statistics; else max[r] is the row's max and sum[r] the
     * sum of exp(x - max[r]) over the whole row. */
    void (*softmax)(void *ctx, const mg_tensor *x, const mg_tensor *max, const mg_tensor *sum,
                    bool log, mg_tensor *out);
    /* sum[r] = sum_j exp(x[r, j] - max[r]) */
    void (*softmax_sum)(void *ctx, const mg_tensor *x, const mg_tensor *max, mg_tensor *sum);
    /* From y = softmax(x) (log: log_softmax(x)) and dy, dx:
     *   softmax      dx = y (dy - dot[r]),       dot[r] = sum_j dy y
     *   log_softmax  dx = dy - exp(y) dot[r],    dot[r] = sum_j dy
     * dot NULL: each row's own; else given (summed over the whole row). */
    void (*softmax_backward)(void *ctx, const mg_tensor *y, const mg_tensor *dy,
                             const mg_tensor *dot, bool log, mg_tensor *dx);
    void (*softmax_dot)(void *ctx, const mg_tensor *y, const mg_tensor *dy, bool log,
                        mg_tensor *dot);

    /* Layer norm over the last dim: y = (x - mean) rstd w + b, rstd = 1 / sqrt(var + eps),
     * w and b (C) or NULL. stats (2, R) receives the mean (first R) and rstd (next R).
     * moments NULL: each row's own; else moments (2, R) holds each row's mean and sum
     * of squared deviations over its n columns (layer_norm_moments, summed). */
    void (*layer_norm)(void *ctx, const mg_tensor *x, const mg_tensor *w, const mg_tensor *b,
                       float eps, const mg_tensor *moments, int64_t n, mg_tensor *stats,
                       mg_tensor *y);
    /* mean NULL: out[r] = sum_j x[r, j]; else out[r] = sum_j (x[r, j] - mean[r])^2 */
    void (*layer_norm_moments)(void *ctx, const mg_tensor *x, const mg_tensor *mean,
                               mg_tensor *out);
    /* Backward from the forward's stats. With g = dy w (dy where w is NULL) and
     * xhat = (x - mean) rstd: dx = rstd (g - sums[r] / n - xhat sums[R + r] / n),
     * sums (2, R) = (sum_j g, sum_j g xhat) over the whole row: each row's own
     * (sums NULL) or given. dw = sum over rows of dy xhat, db = sum over rows of dy.
     * dx, dw, db are written, each only when not NULL. */
    void (*layer_norm_backward)(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                const mg_tensor *dy, const mg_tensor *stats, const mg_tensor *sums,
                                int64_t n, mg_tensor *dx, mg_tensor *dw, mg_tensor *db);
    /* sums (2, R) = (sum_j g, sum_j g xhat) over this rank's columns */
    void (*layer_norm_backward_sums)(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                     const mg_tensor *dy, const mg_tensor *stats, mg_tensor *sums);

    /* RMS norm over the last dim (llama's RMSNorm): y = x rstd w, rstd = 1 / sqrt(sum_j
     * x^2 / n + eps), w (C) or NULL; rstd (R) receives each row's. squares NULL: each
     * row's own (n = C); else squares (R) holds each row's sum of x^2 over its n
     * columns (rms_norm_squares, summed). */
    void (*rms_norm)(void *ctx, const mg_tensor *x, const mg_tensor *w, float eps,
                     const mg_tensor *squares, int64_t n, mg_tensor *rstd, mg_tensor *y);
    /* out[r] = sum_j x[r, j]^2 */
    void (*rms_norm_squares)(void *ctx, const mg_tensor *x, mg_tensor *out);
    /* Backward from the forward's rstd. With g = dy w (dy where w is NULL) and
     * xhat = x rstd: dx = rstd (g - xhat sums[r] / n), sums (R) = sum_j g xhat over
     * the whole row: each row's own (sums NULL) or given. dw = sum over rows of
     * dy xhat. dx and dw are written, each only when not NULL. */
    void (*rms_norm_backward)(void *ctx, const mg_tensor *x, const mg_tensor *w,
                              const mg_tensor *dy, const mg_tensor *rstd, const mg_tensor *sums,
                              int64_t n, mg_tensor *dx, mg_tensor *dw);
    /* sums (R) = sum_j g xhat over this rank's columns */
    void (*rms_norm_backward_sums)(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                   const mg_tensor *dy, const mg_tensor *rstd, mg_tensor *sums);

    /* Rotary embedding (llama's): x (B, T, H, D), D even; the pair (2i, 2i + 1) of
     * row (b, t, h) rotated by the angle (pos0 + t) theta^(-2i / D), or by its
     * negative with `inverse` (the backward). The angles and their cosines and
     * sines are taken in double. out may be x. */
    void (*rope)(void *ctx, const mg_tensor *x, int64_t pos0, float theta, bool inverse,
                 mg_tensor *out);

    /* Rows of a table shard: table (Vl, C) holds rows [v0, v0 + Vl) of V; ids (N) are
     * row indices stored as floats. out (N, C): each id's row when it is in the shard,
     * zeros otherwise. Returns the number of ids that are not integers in [0, V). */
    int64_t (*embedding)(void *ctx, const mg_tensor *ids, const mg_tensor *table, int64_t v0,
                         int64_t v, mg_tensor *out);
    /* dtable (Vl, C) = sum of the rows of dout (N, C) whose id is in the shard (written) */
    void (*embedding_backward)(void *ctx, const mg_tensor *ids, const mg_tensor *dout, int64_t v0,
                               mg_tensor *dtable);

    /* Cross-entropy. logits (N, Vl) hold classes [v0, v0 + Vl) of V (all of them: v0 = 0,
     * Vl = V), labels (N) class indices stored as floats; a label that is not an
     * integer in [0, V) is bad: its row adds nothing and gets a zero gradient.
     * cross_entropy (all classes): out (0-d) = scale * sum_i -log_softmax(logits)[i, label_i];
     *   returns the number of bad labels.
     * cross_entropy_sums (a shard of the classes; max (N) the rows' max over all V):
     *   sums (2, N) = (sum_j exp(x - max), the label's logit or 0 when it is in another
     *   shard); returns the number of bad labels.
     * cross_entropy_backward: dlogits = scale * (softmax(logits) - onehot(labels)), the
     *   softmax from each row's own log-sum-exp (lse NULL) or from lse (N) over all V. */
    int64_t (*cross_entropy)(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                             float scale, mg_tensor *out);
    int64_t (*cross_entropy_sums)(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                  const mg_tensor *max, int64_t v0, int64_t v, mg_tensor *sums);
    void (*cross_entropy_backward)(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                   const mg_tensor *lse, int64_t v0, int64_t v, float scale,
                                   mg_tensor *dlogits);
    /* The deterministic mode's cross_entropy_sums (CPU only, NULL elsewhere):
     * fixed (N) = sum_j floor(exp(x - max) 2^40), integers whose sum over the
     * class shards is exact; target (N) the label's logit or 0. The 2^40 is
     * MG_CE_FIXED_BITS (below). */
    int64_t (*cross_entropy_fixed)(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                   const mg_tensor *max, int64_t v0, int64_t v, int64_t *fixed,
                                   float *target);

    /* Attention, fused: q (B, H, Tq, D), k (B, KV, Tk, D), v (B, KV, Tk, Dv) ->
     * o (B, H, Tq, Dv) = softmax(scale q k^T) v over the keys, and lse (B, H, Tq) the
     * log-sum-exp of each row of scores (no (Tq, Tk) matrix is ever whole). KV
     * divides H (grouped-query): query head h reads k, v head h / (H / KV), and
     * dk, dv sum over the H / KV query heads of each k, v head. causal:
     * key j is hidden from query i when k0 + j > q0 + i, q0 and k0 the global
     * positions of the first query row and the first key. A query with no key gets
     * o = 0, lse = -inf. attention_backward recomputes the scores from q, k, lse and
     * writes dq, dk, dv from dout (B, H, Tq, Dv) and o. In bf16 mode the CPU's
     * products round their inputs to bf16 (the softmax stays fp32). */
    void (*attention)(void *ctx, const mg_tensor *q, const mg_tensor *k, const mg_tensor *v,
                      float scale, bool causal, int64_t q0, int64_t k0, mg_tensor *o,
                      mg_tensor *lse);
    void (*attention_backward)(void *ctx, const mg_tensor *q, const mg_tensor *k,
                               const mg_tensor *v, const mg_tensor *o, const mg_tensor *lse,
                               const mg_tensor *dout, float scale, bool causal, int64_t q0,
                               int64_t k0, mg_tensor *dq, mg_tensor *dk, mg_tensor *dv);

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
/* The meta backend (meta.c): no data, no kernel run; mg_meta_start registers
 * its memory, after which mg_device_use(MG_DEVICE_META) puts new tensors there. */
mg_backend *mg_backend_meta(void);
void mg_meta_start(void);
mg_backend *mg_backend_of(const mg_tensor *t);

/* bf16 GEMM inputs for the whole process (off by default: plain fp32); applies
 * from the next GEMM, on every device (backend.c). Each call drops the weights'
 * bf16 copies (mg_backend_bf16_weights_changed). */
void mg_backend_set_gemm_bf16(int on);
int mg_backend_gemm_bf16(void);
/* Which bf16 GEMM the CPU runs: "avx512-bf16" (vdpbf16ps), or the emulation
 * (inputs rounded to bf16, fp32 sgemm), with why: the CPU lacks the
 * instructions, or MG_CPU_BF16=emulate asked for it (cpu_gemm_bf16.c). */
const char *mg_backend_cpu_bf16_gemm(void);

/* The weights' bf16 copies (bf16_weights.c). A weight's copy for this step's
 * bf16 GEMMs: cast by its backend's cast_bf16 into memory of its device (the
 * backend's alloc) the first time a step asks for it, then the same copy until
 * the step ends (mg_step_end) or mg_backend_bf16_weights_changed; a copy's
 * memory is kept and used again for the same weight. NULL where w's backend
 * has no cast_bf16 or its memory ran out (the GEMM then rounds w as it reads
 * it). Only for tensors nothing writes in the step but the optimizer. */
const uint16_t *mg_backend_bf16_weight(const mg_tensor *w);
/* The weights changed (an optimizer step, a load): the next use casts again
 * (backend.c: the context's bf16 version moves on). */
void mg_backend_bf16_weights_changed(void);
/* Bytes the copies hold on `device` (the memory report's "casts"). */
size_t mg_backend_bf16_weights_bytes(int device);
/* Frees every copy (a trainer's end, one estimate run after another). */
void mg_backend_bf16_weights_free(void);
/* Elements from the first to the last that a GEMM reads of `batch` stored
 * (rows, cols) matrices, rows `ld` apart, matrices `stride` apart (all > 0). */
static inline int64_t mg_gemm_span(int64_t rows, int64_t cols, int64_t ld, int64_t stride,
                                   int64_t batch) {
    return (batch - 1) * stride + (rows - 1) * ld + cols;
}

/* The layout of out = op(a, b) with broadcasting, for the backends' binary kernels:
 * out's dims merged where a and b step through them alike (equal shapes become one
 * flat run; a bias over (B, T, C) becomes rows of C), size-1 dims dropped. Fills
 * the merged sizes n[k] and the element strides sa[k], sb[k] of a and b (a
 * broadcast dim has stride 0), outermost first, and returns k (0: one element). */
int mg_binary_dims(const mg_tensor *a, const mg_tensor *b, const mg_tensor *out, int64_t *n,
                   int64_t *sa, int64_t *sb);

/* CPU threading: 0 = default (cores / local ranks). */
void mg_backend_cpu_set_threads(int threads);
int mg_backend_cpu_threads(void);
/* The CPUs this process may run on (its affinity: mpirun may bind it to fewer
 * than the machine has), at least 1. */
long mg_backend_cpu_usable(void);

/* The name of the OpenBLAS kernels this process runs ("Haswell", "SkylakeX"). */
const char *mg_blas_core(void);

#endif
