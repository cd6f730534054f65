/* trace_kernels.c: the decorated backend iface of --trace (see
 * trace_kernels.h). Each wrapper calls the backend's own kernel (the
 * context's `kernels_untraced`) and records a span named after the kernel,
 * with its sizes. Exports: mg_backend_trace_kernels. */
#include "backend/trace_kernels.h"

#include <assert.h>
#include <stddef.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "backend/backend_state.h"
#include "context.h"
#include "status.h"
#include "trace.h"

/* 4 memory entries (not traced) and 38 kernels, each wrapped below */
static_assert(sizeof(struct mg_backend_iface) ==
                  offsetof(struct mg_backend_iface, alloc) + 42 * sizeof(void (*)(void)),
              "mg_backend_iface changed: wrap the new kernel here, and count it");

static const struct mg_backend_iface *real(void) { return mg_backend_ctx()->kernels_untraced; }

static void gemm(void *ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                 const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                 int64_t ldc) {
    int64_t t0 = mg_trace_now();
    real()->gemm(ctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    mg_trace_kernel("gemm", t0, m, n, k);
}

static void gemm_batched(void *ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                         const float *a, int64_t lda, int64_t sa, const float *b, int64_t ldb,
                         int64_t sb, float beta, float *c, int64_t ldc, int64_t sc, int64_t batch) {
    int64_t t0 = mg_trace_now();
    real()->gemm_batched(ctx, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc,
                         batch);
    mg_trace_kernel("gemm_batched", t0, m, n, k);
}

static void cast_bf16(void *ctx, const float *x, uint16_t *y, int64_t n) {
    int64_t t0 = mg_trace_now();
    real()->cast_bf16(ctx, x, y, n);
    mg_trace_kernel("cast_bf16", t0, n, 0, 0);
}

static void gemm_bf16(void *ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const mg_gemm_in *a, const mg_gemm_in *b, float beta, float *c, int64_t ldc,
                      int64_t sc, int64_t batch, const float *bias) {
    int64_t t0 = mg_trace_now();
    real()->gemm_bf16(ctx, ta, tb, m, n, k, alpha, a, b, beta, c, ldc, sc, batch, bias);
    mg_trace_kernel("gemm_bf16", t0, m, n, k);
}

static void permute(void *ctx, const mg_tensor *x, const int *perm, mg_tensor *out) {
    int64_t t0 = mg_trace_now();
    real()->permute(ctx, x, perm, out);
    mg_trace_kernel("permute", t0, out->numel, 0, 0);
}

static void copy_block(void *ctx, const mg_tensor *src, const int64_t *so, mg_tensor *dst,
                       const int64_t *d_o, const int64_t *extent) {
    int64_t t0 = mg_trace_now();
    real()->copy_block(ctx, src, so, dst, d_o, extent);
    mg_trace_kernel("copy_block", t0, dst->numel, 0, 0);
}

static void add_block(void *ctx, const mg_tensor *src, const int64_t *so, mg_tensor *dst,
                      const int64_t *d_o, const int64_t *extent) {
    int64_t t0 = mg_trace_now();
    real()->add_block(ctx, src, so, dst, d_o, extent);
    mg_trace_kernel("add_block", t0, src->numel, 0, 0);
}

static void copy(void *ctx, const mg_tensor *src, mg_tensor *dst) {
    int64_t t0 = mg_trace_now();
    real()->copy(ctx, src, dst);
    mg_trace_kernel("copy", t0, dst->numel, 0, 0);
}

static void fill(void *ctx, mg_tensor *t, float value) {
    int64_t t0 = mg_trace_now();
    real()->fill(ctx, t, value);
    mg_trace_kernel("fill", t0, t->numel, 0, 0);
}

static void unary(void *ctx, mg_unary_op op, const mg_tensor *x, float alpha, mg_tensor *out) {
    int64_t t0 = mg_trace_now();
    real()->unary(ctx, op, x, alpha, out);
    mg_trace_kernel(op >= 0 && op < MG_UNARY_COUNT ? mg_unary_names[op] : "unary", t0, out->numel,
                    0, 0);
}

static void binary(void *ctx, mg_binary_op op, const mg_tensor *a, const mg_tensor *b,
                   mg_tensor *out) {
    int64_t t0 = mg_trace_now();
    real()->binary(ctx, op, a, b, out);
    mg_trace_kernel(op >= 0 && op < MG_BINARY_COUNT ? mg_binary_names[op] : "binary", t0,
                    out->numel, 0, 0);
}

static void axpy(void *ctx, float alpha, const mg_tensor *x, mg_tensor *y) {
    int64_t t0 = mg_trace_now();
    real()->axpy(ctx, alpha, x, y);
    mg_trace_kernel("axpy", t0, y->numel, 0, 0);
}

static void reduce_sum(void *ctx, const mg_tensor *x, mg_tensor *out) {
    int64_t t0 = mg_trace_now();
    real()->reduce_sum(ctx, x, out);
    mg_trace_kernel("reduce_sum", t0, x->numel, 0, 0);
}

static void reduce_max(void *ctx, const mg_tensor *x, mg_tensor *out) {
    int64_t t0 = mg_trace_now();
    real()->reduce_max(ctx, x, out);
    mg_trace_kernel("reduce_max", t0, x->numel, 0, 0);
}

static double sum_squares(void *ctx, const mg_tensor *x) {
    int64_t t0 = mg_trace_now();
    double v = real()->sum_squares(ctx, x);
    mg_trace_kernel("sum_squares", t0, x->numel, 0, 0);
    return v;
}

static void softmax(void *ctx, const mg_tensor *x, const mg_tensor *max, const mg_tensor *sum,
                    bool log, mg_tensor *out) {
    int64_t t0 = mg_trace_now();
    real()->softmax(ctx, x, max, sum, log, out);
    mg_trace_kernel(log ? "log_softmax" : "softmax", t0, x->numel, 0, 0);
}

static void softmax_sum(void *ctx, const mg_tensor *x, const mg_tensor *max, mg_tensor *sum) {
    int64_t t0 = mg_trace_now();
    real()->softmax_sum(ctx, x, max, sum);
    mg_trace_kernel("softmax_sum", t0, x->numel, 0, 0);
}

static void softmax_backward(void *ctx, const mg_tensor *y, const mg_tensor *dy,
                             const mg_tensor *dot, bool log, mg_tensor *dx) {
    int64_t t0 = mg_trace_now();
    real()->softmax_backward(ctx, y, dy, dot, log, dx);
    mg_trace_kernel(log ? "log_softmax_backward" : "softmax_backward", t0, y->numel, 0, 0);
}

static void softmax_dot(void *ctx, const mg_tensor *y, const mg_tensor *dy, bool log,
                        mg_tensor *dot) {
    int64_t t0 = mg_trace_now();
    real()->softmax_dot(ctx, y, dy, log, dot);
    mg_trace_kernel("softmax_dot", t0, y->numel, 0, 0);
}

static void layer_norm(void *ctx, const mg_tensor *x, const mg_tensor *w, const mg_tensor *b,
                       float eps, const mg_tensor *moments, int64_t n, mg_tensor *stats,
                       mg_tensor *y) {
    int64_t t0 = mg_trace_now();
    real()->layer_norm(ctx, x, w, b, eps, moments, n, stats, y);
    mg_trace_kernel("layer_norm", t0, x->numel, 0, 0);
}

static void layer_norm_moments(void *ctx, const mg_tensor *x, const mg_tensor *mean,
                               mg_tensor *out) {
    int64_t t0 = mg_trace_now();
    real()->layer_norm_moments(ctx, x, mean, out);
    mg_trace_kernel("layer_norm_moments", t0, x->numel, 0, 0);
}

static void layer_norm_backward(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                const mg_tensor *dy, const mg_tensor *stats, const mg_tensor *sums,
                                int64_t n, mg_tensor *dx, mg_tensor *dw, mg_tensor *db) {
    int64_t t0 = mg_trace_now();
    real()->layer_norm_backward(ctx, x, w, dy, stats, sums, n, dx, dw, db);
    mg_trace_kernel("layer_norm_backward", t0, x->numel, 0, 0);
}

static void layer_norm_backward_sums(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                     const mg_tensor *dy, const mg_tensor *stats, mg_tensor *sums) {
    int64_t t0 = mg_trace_now();
    real()->layer_norm_backward_sums(ctx, x, w, dy, stats, sums);
    mg_trace_kernel("layer_norm_backward_sums", t0, x->numel, 0, 0);
}

static void rms_norm(void *ctx, const mg_tensor *x, const mg_tensor *w, float eps,
                     const mg_tensor *squares, int64_t n, mg_tensor *rstd, mg_tensor *y) {
    int64_t t0 = mg_trace_now();
    real()->rms_norm(ctx, x, w, eps, squares, n, rstd, y);
    mg_trace_kernel("rms_norm", t0, x->numel, 0, 0);
}

static void rms_norm_squares(void *ctx, const mg_tensor *x, mg_tensor *out) {
    int64_t t0 = mg_trace_now();
    real()->rms_norm_squares(ctx, x, out);
    mg_trace_kernel("rms_norm_squares", t0, x->numel, 0, 0);
}

static void rms_norm_backward(void *ctx, const mg_tensor *x, const mg_tensor *w,
                              const mg_tensor *dy, const mg_tensor *rstd, const mg_tensor *sums,
                              int64_t n, mg_tensor *dx, mg_tensor *dw) {
    int64_t t0 = mg_trace_now();
    real()->rms_norm_backward(ctx, x, w, dy, rstd, sums, n, dx, dw);
    mg_trace_kernel("rms_norm_backward", t0, x->numel, 0, 0);
}

static void rms_norm_backward_sums(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                   const mg_tensor *dy, const mg_tensor *rstd, mg_tensor *sums) {
    int64_t t0 = mg_trace_now();
    real()->rms_norm_backward_sums(ctx, x, w, dy, rstd, sums);
    mg_trace_kernel("rms_norm_backward_sums", t0, x->numel, 0, 0);
}

static void rope(void *ctx, const mg_tensor *x, int64_t pos0, float theta, bool inverse,
                 mg_tensor *out) {
    int64_t t0 = mg_trace_now();
    real()->rope(ctx, x, pos0, theta, inverse, out);
    mg_trace_kernel(inverse ? "rope_backward" : "rope", t0, x->numel, 0, 0);
}

static int64_t embedding(void *ctx, const mg_tensor *ids, const mg_tensor *table, int64_t v0,
                         int64_t v, mg_tensor *out) {
    int64_t t0 = mg_trace_now();
    int64_t bad = real()->embedding(ctx, ids, table, v0, v, out);
    mg_trace_kernel("embedding", t0, out->numel, 0, 0);
    return bad;
}

static void embedding_backward(void *ctx, const mg_tensor *ids, const mg_tensor *dout, int64_t v0,
                               mg_tensor *dtable) {
    int64_t t0 = mg_trace_now();
    real()->embedding_backward(ctx, ids, dout, v0, dtable);
    mg_trace_kernel("embedding_backward", t0, dout->numel, 0, 0);
}

static int64_t cross_entropy(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                             float scale, mg_tensor *out) {
    int64_t t0 = mg_trace_now();
    int64_t bad = real()->cross_entropy(ctx, logits, labels, scale, out);
    mg_trace_kernel("cross_entropy", t0, logits->numel, 0, 0);
    return bad;
}

static int64_t cross_entropy_sums(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                  const mg_tensor *max, int64_t v0, int64_t v, mg_tensor *sums) {
    int64_t t0 = mg_trace_now();
    int64_t bad = real()->cross_entropy_sums(ctx, logits, labels, max, v0, v, sums);
    mg_trace_kernel("cross_entropy_sums", t0, logits->numel, 0, 0);
    return bad;
}

static void cross_entropy_backward(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                   const mg_tensor *lse, int64_t v0, int64_t v, float scale,
                                   mg_tensor *dlogits) {
    int64_t t0 = mg_trace_now();
    real()->cross_entropy_backward(ctx, logits, labels, lse, v0, v, scale, dlogits);
    mg_trace_kernel("cross_entropy_backward", t0, logits->numel, 0, 0);
}

static int64_t cross_entropy_fixed(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                   const mg_tensor *max, int64_t v0, int64_t v, int64_t *fixed,
                                   float *target) {
    int64_t t0 = mg_trace_now();
    int64_t bad = real()->cross_entropy_fixed(ctx, logits, labels, max, v0, v, fixed, target);
    mg_trace_kernel("cross_entropy_fixed", t0, logits->numel, 0, 0);
    return bad;
}

/* sizes of a span: batch x heads, queries, keys */
static void attention(void *ctx, const mg_tensor *q, const mg_tensor *k, const mg_tensor *v,
                      float scale, bool causal, int64_t q0, int64_t k0, mg_tensor *o,
                      mg_tensor *lse) {
    int64_t t0 = mg_trace_now();
    real()->attention(ctx, q, k, v, scale, causal, q0, k0, o, lse);
    mg_trace_kernel("attention", t0, q->shape[0] * q->shape[1], q->shape[2], k->shape[2]);
}

static void attention_backward(void *ctx, const mg_tensor *q, const mg_tensor *k,
                               const mg_tensor *v, const mg_tensor *o, const mg_tensor *lse,
                               const mg_tensor *dout, float scale, bool causal, int64_t q0,
                               int64_t k0, mg_tensor *dq, mg_tensor *dk, mg_tensor *dv) {
    int64_t t0 = mg_trace_now();
    real()->attention_backward(ctx, q, k, v, o, lse, dout, scale, causal, q0, k0, dq, dk, dv);
    mg_trace_kernel("attention_backward", t0, q->shape[0] * q->shape[1], q->shape[2],
                    k->shape[2]);
}

static void sgd_step(void *ctx, mg_tensor *param, const mg_tensor *grad, mg_tensor *buf, float lr,
                     float momentum, float wd, bool first) {
    int64_t t0 = mg_trace_now();
    real()->sgd_step(ctx, param, grad, buf, lr, momentum, wd, first);
    mg_trace_kernel("sgd_step", t0, param->numel, 0, 0);
}

static void adamw_step(void *ctx, mg_tensor *param, const mg_tensor *grad, mg_tensor *m,
                       mg_tensor *v, float lr, float b1, float b2, float eps, float wd,
                       int64_t step) {
    int64_t t0 = mg_trace_now();
    real()->adamw_step(ctx, param, grad, m, v, lr, b1, b2, eps, wd, step);
    mg_trace_kernel("adamw_step", t0, param->numel, 0, 0);
}

/* The backend of the device that new tensors live on. */
static mg_backend *current(void) {
    return mg_ctx()->device == MG_DEVICE_CUDA ? mg_backend_cuda() : mg_backend_cpu();
}

int mg_backend_trace_kernels(bool on) {
    mg_backend_state *c = mg_backend_ctx();
    mg_backend *be = current();
    if (!be) return MG_OK;
    if (!on) {
        if (c->kernels_untraced && be->iface == c->kernels_traced) be->iface = c->kernels_untraced;
        free(c->kernels_traced);
        c->kernels_traced = NULL;
        c->kernels_untraced = NULL;
        return MG_OK;
    }
    if (c->kernels_traced) return MG_OK;
    struct mg_backend_iface *t = malloc(sizeof *t);
    if (!t) return mg_error(MG_ENOMEM, "trace: out of memory");
    *t = *be->iface; /* every entry the backend's own, then the wrapped ones */
    const struct mg_backend_iface *f = be->iface;
#define WRAP(k) if (f->k) t->k = k
    WRAP(gemm);
    WRAP(gemm_batched);
    WRAP(cast_bf16);
    WRAP(gemm_bf16);
    WRAP(permute);
    WRAP(copy_block);
    WRAP(add_block);
    WRAP(copy);
    WRAP(fill);
    WRAP(unary);
    WRAP(binary);
    WRAP(axpy);
    WRAP(reduce_sum);
    WRAP(reduce_max);
    WRAP(sum_squares);
    WRAP(softmax);
    WRAP(softmax_sum);
    WRAP(softmax_backward);
    WRAP(softmax_dot);
    WRAP(layer_norm);
    WRAP(layer_norm_moments);
    WRAP(layer_norm_backward);
    WRAP(layer_norm_backward_sums);
    WRAP(rms_norm);
    WRAP(rms_norm_squares);
    WRAP(rms_norm_backward);
    WRAP(rms_norm_backward_sums);
    WRAP(rope);
    WRAP(embedding);
    WRAP(embedding_backward);
    WRAP(cross_entropy);
    WRAP(cross_entropy_sums);
    WRAP(cross_entropy_backward);
    WRAP(cross_entropy_fixed);
    WRAP(attention);
    WRAP(attention_backward);
    WRAP(sgd_step);
    WRAP(adamw_step);
#undef WRAP
    c->kernels_untraced = be->iface;
    c->kernels_traced = t;
    be->iface = t;
    return MG_OK;
}
