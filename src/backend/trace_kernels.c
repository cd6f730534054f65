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

/* A kernel call, recorded as the span `name` with its sizes (m, n, k). */
#define SPAN(name, m, n, k, call)                                                                  \
    do {                                                                                           \
        int64_t t0_ = mg_trace_now();                                                              \
        call;                                                                                      \
        mg_trace_kernel((name), t0_, (m), (n), (k));                                               \
    } while (0)

static void gemm(void *ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                 const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                 int64_t ldc) {
    SPAN("gemm", m, n, k, real()->gemm(ctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc));
}

static void gemm_batched(void *ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                         const float *a, int64_t lda, int64_t sa, const float *b, int64_t ldb,
                         int64_t sb, float beta, float *c, int64_t ldc, int64_t sc, int64_t batch) {
    SPAN("gemm_batched", m, n, k,
         real()->gemm_batched(ctx, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc,
                              batch));
}

static void cast_bf16(void *ctx, const float *x, uint16_t *y, int64_t n) {
    SPAN("cast_bf16", n, 0, 0, real()->cast_bf16(ctx, x, y, n));
}

static void gemm_bf16(void *ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const mg_gemm_in *a, const mg_gemm_in *b, float beta, float *c, int64_t ldc,
                      int64_t sc, int64_t batch, const float *bias) {
    SPAN("gemm_bf16", m, n, k,
         real()->gemm_bf16(ctx, ta, tb, m, n, k, alpha, a, b, beta, c, ldc, sc, batch, bias));
}

static void permute(void *ctx, const mg_tensor *x, const int *perm, mg_tensor *out) {
    SPAN("permute", out->numel, 0, 0, real()->permute(ctx, x, perm, out));
}

static void copy_block(void *ctx, const mg_tensor *src, const int64_t *so, mg_tensor *dst,
                       const int64_t *d_o, const int64_t *extent) {
    SPAN("copy_block", dst->numel, 0, 0, real()->copy_block(ctx, src, so, dst, d_o, extent));
}

static void add_block(void *ctx, const mg_tensor *src, const int64_t *so, mg_tensor *dst,
                      const int64_t *d_o, const int64_t *extent) {
    SPAN("add_block", src->numel, 0, 0, real()->add_block(ctx, src, so, dst, d_o, extent));
}

static void copy(void *ctx, const mg_tensor *src, mg_tensor *dst) {
    SPAN("copy", dst->numel, 0, 0, real()->copy(ctx, src, dst));
}

static void fill(void *ctx, mg_tensor *t, float value) {
    SPAN("fill", t->numel, 0, 0, real()->fill(ctx, t, value));
}

static void unary(void *ctx, mg_unary_op op, const mg_tensor *x, float alpha, mg_tensor *out) {
    SPAN(op >= 0 && op < MG_UNARY_COUNT ? mg_unary_names[op] : "unary", out->numel, 0, 0,
         real()->unary(ctx, op, x, alpha, out));
}

static void binary(void *ctx, mg_binary_op op, const mg_tensor *a, const mg_tensor *b,
                   mg_tensor *out) {
    SPAN(op >= 0 && op < MG_BINARY_COUNT ? mg_binary_names[op] : "binary", out->numel, 0, 0,
         real()->binary(ctx, op, a, b, out));
}

static void axpy(void *ctx, float alpha, const mg_tensor *x, mg_tensor *y) {
    SPAN("axpy", y->numel, 0, 0, real()->axpy(ctx, alpha, x, y));
}

static void reduce_sum(void *ctx, const mg_tensor *x, mg_tensor *out) {
    SPAN("reduce_sum", x->numel, 0, 0, real()->reduce_sum(ctx, x, out));
}

static void reduce_max(void *ctx, const mg_tensor *x, mg_tensor *out) {
    SPAN("reduce_max", x->numel, 0, 0, real()->reduce_max(ctx, x, out));
}

static double sum_squares(void *ctx, const mg_tensor *x) {
    double v;
    SPAN("sum_squares", x->numel, 0, 0, v = real()->sum_squares(ctx, x));
    return v;
}

static void softmax(void *ctx, const mg_tensor *x, const mg_tensor *max, const mg_tensor *sum,
                    bool log, mg_tensor *out) {
    SPAN(log ? "log_softmax" : "softmax", x->numel, 0, 0,
         real()->softmax(ctx, x, max, sum, log, out));
}

static void softmax_sum(void *ctx, const mg_tensor *x, const mg_tensor *max, mg_tensor *sum) {
    SPAN("softmax_sum", x->numel, 0, 0, real()->softmax_sum(ctx, x, max, sum));
}

static void softmax_backward(void *ctx, const mg_tensor *y, const mg_tensor *dy,
                             const mg_tensor *dot, bool log, mg_tensor *dx) {
    SPAN(log ? "log_softmax_backward" : "softmax_backward", y->numel, 0, 0,
         real()->softmax_backward(ctx, y, dy, dot, log, dx));
}

static void softmax_dot(void *ctx, const mg_tensor *y, const mg_tensor *dy, bool log,
                        mg_tensor *dot) {
    SPAN("softmax_dot", y->numel, 0, 0, real()->softmax_dot(ctx, y, dy, log, dot));
}

static void layer_norm(void *ctx, const mg_tensor *x, const mg_tensor *w, const mg_tensor *b,
                       float eps, const mg_tensor *moments, int64_t n, mg_tensor *stats,
                       mg_tensor *y) {
    SPAN("layer_norm", x->numel, 0, 0, real()->layer_norm(ctx, x, w, b, eps, moments, n, stats, y));
}

static void layer_norm_moments(void *ctx, const mg_tensor *x, const mg_tensor *mean,
                               mg_tensor *out) {
    SPAN("layer_norm_moments", x->numel, 0, 0, real()->layer_norm_moments(ctx, x, mean, out));
}

static void layer_norm_backward(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                const mg_tensor *dy, const mg_tensor *stats, const mg_tensor *sums,
                                int64_t n, mg_tensor *dx, mg_tensor *dw, mg_tensor *db) {
    SPAN("layer_norm_backward", x->numel, 0, 0,
         real()->layer_norm_backward(ctx, x, w, dy, stats, sums, n, dx, dw, db));
}

static void layer_norm_backward_sums(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                     const mg_tensor *dy, const mg_tensor *stats, mg_tensor *sums) {
    SPAN("layer_norm_backward_sums", x->numel, 0, 0,
         real()->layer_norm_backward_sums(ctx, x, w, dy, stats, sums));
}

static void rms_norm(void *ctx, const mg_tensor *x, const mg_tensor *w, float eps,
                     const mg_tensor *squares, int64_t n, mg_tensor *rstd, mg_tensor *y) {
    SPAN("rms_norm", x->numel, 0, 0, real()->rms_norm(ctx, x, w, eps, squares, n, rstd, y));
}

static void rms_norm_squares(void *ctx, const mg_tensor *x, mg_tensor *out) {
    SPAN("rms_norm_squares", x->numel, 0, 0, real()->rms_norm_squares(ctx, x, out));
}

static void rms_norm_backward(void *ctx, const mg_tensor *x, const mg_tensor *w,
                              const mg_tensor *dy, const mg_tensor *rstd, const mg_tensor *sums,
                              int64_t n, mg_tensor *dx, mg_tensor *dw) {
    SPAN("rms_norm_backward", x->numel, 0, 0,
         real()->rms_norm_backward(ctx, x, w, dy, rstd, sums, n, dx, dw));
}

static void rms_norm_backward_sums(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                   const mg_tensor *dy, const mg_tensor *rstd, mg_tensor *sums) {
    SPAN("rms_norm_backward_sums", x->numel, 0, 0,
         real()->rms_norm_backward_sums(ctx, x, w, dy, rstd, sums));
}

static void rope(void *ctx, const mg_tensor *x, int64_t pos0, float theta, bool inverse,
                 mg_tensor *out) {
    SPAN(inverse ? "rope_backward" : "rope", x->numel, 0, 0,
         real()->rope(ctx, x, pos0, theta, inverse, out));
}

static int64_t embedding(void *ctx, const mg_tensor *ids, const mg_tensor *table, int64_t v0,
                         int64_t v, mg_tensor *out) {
    int64_t bad;
    SPAN("embedding", out->numel, 0, 0, bad = real()->embedding(ctx, ids, table, v0, v, out));
    return bad;
}

static void embedding_backward(void *ctx, const mg_tensor *ids, const mg_tensor *dout, int64_t v0,
                               mg_tensor *dtable) {
    SPAN("embedding_backward", dout->numel, 0, 0,
         real()->embedding_backward(ctx, ids, dout, v0, dtable));
}

static int64_t cross_entropy(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                             float scale, mg_tensor *out) {
    int64_t bad;
    SPAN("cross_entropy", logits->numel, 0, 0,
         bad = real()->cross_entropy(ctx, logits, labels, scale, out));
    return bad;
}

static int64_t cross_entropy_sums(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                  const mg_tensor *max, int64_t v0, int64_t v, mg_tensor *sums) {
    int64_t bad;
    SPAN("cross_entropy_sums", logits->numel, 0, 0,
         bad = real()->cross_entropy_sums(ctx, logits, labels, max, v0, v, sums));
    return bad;
}

static void cross_entropy_backward(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                   const mg_tensor *lse, int64_t v0, int64_t v, float scale,
                                   mg_tensor *dlogits) {
    SPAN("cross_entropy_backward", logits->numel, 0, 0,
         real()->cross_entropy_backward(ctx, logits, labels, lse, v0, v, scale, dlogits));
}

static int64_t cross_entropy_fixed(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                   const mg_tensor *max, int64_t v0, int64_t v, int64_t *fixed,
                                   float *target) {
    int64_t bad;
    SPAN("cross_entropy_fixed", logits->numel, 0, 0,
         bad = real()->cross_entropy_fixed(ctx, logits, labels, max, v0, v, fixed, target));
    return bad;
}

/* sizes of a span: batch x heads, queries, keys */
static void attention(void *ctx, const mg_tensor *q, const mg_tensor *k, const mg_tensor *v,
                      float scale, bool causal, int64_t q0, int64_t k0, mg_tensor *o,
                      mg_tensor *lse) {
    SPAN("attention", q->shape[0] * q->shape[1], q->shape[2], k->shape[2],
         real()->attention(ctx, q, k, v, scale, causal, q0, k0, o, lse));
}

static void attention_backward(void *ctx, const mg_tensor *q, const mg_tensor *k,
                               const mg_tensor *v, const mg_tensor *o, const mg_tensor *lse,
                               const mg_tensor *dout, float scale, bool causal, int64_t q0,
                               int64_t k0, mg_tensor *dq, mg_tensor *dk, mg_tensor *dv) {
    SPAN("attention_backward", q->shape[0] * q->shape[1], q->shape[2], k->shape[2],
         real()->attention_backward(ctx, q, k, v, o, lse, dout, scale, causal, q0, k0, dq, dk, dv));
}

static void sgd_step(void *ctx, mg_tensor *param, const mg_tensor *grad, mg_tensor *buf, float lr,
                     float momentum, float wd, bool first) {
    SPAN("sgd_step", param->numel, 0, 0,
         real()->sgd_step(ctx, param, grad, buf, lr, momentum, wd, first));
}

static void adamw_step(void *ctx, mg_tensor *param, const mg_tensor *grad, mg_tensor *m,
                       mg_tensor *v, float lr, float b1, float b2, float eps, float wd,
                       int64_t step) {
    SPAN("adamw_step", param->numel, 0, 0,
         real()->adamw_step(ctx, param, grad, m, v, lr, b1, b2, eps, wd, step));
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
