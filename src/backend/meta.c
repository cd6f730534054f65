/* meta.c: the meta backend. Its tensors have shapes and addresses but no data
 * anyone reads, and its kernels do nothing: a training step run on it (the
 * real ops, rules, autograd, reducer and optimizer) costs no arithmetic, and
 * what it allocates and moves is what the same step allocates and moves on
 * the CPU. `meshgrad plan --estimate` runs one so (src/train/estimate.c).
 *
 * Memory is address space reserved with MAP_NORESERVE: pages no one touches
 * cost nothing, so a model larger than this machine can be planned. Its
 * arenas lay out tensor headers and data together as the CPU's do (the
 * headers are written, the data never), so their high-water marks are a CPU
 * run's to the byte.
 *
 * Exports mg_backend_meta, mg_meta_start (backend.h). */
#include "backend/backend.h"

#include <string.h>
#include <sys/mman.h>

#include "context.h"
#include "status.h"

/* ---- memory -------------------------------------------------------------------- */

/* The bytes of each mapping sit just before it, for munmap. */
#define HEAD 64

static void *meta_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    size_t len = HEAD + (bytes + 63) / 64 * 64;
    unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return NULL;
    memcpy(p, &len, sizeof len);
    return p + HEAD;
}

static void meta_free(void *ctx, void *ptr) {
    (void)ctx;
    if (!ptr) return;
    unsigned char *p = (unsigned char *)ptr - HEAD;
    size_t len;
    memcpy(&len, p, sizeof len);
    munmap(p, len);
}

static void meta_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx, (void)dst, (void)src, (void)bytes;
}

static void meta_zero(void *ctx, void *dst, size_t bytes) { (void)ctx, (void)dst, (void)bytes; }

/* ---- kernels: none run ----------------------------------------------------------- */

/* What the host asks of a meta tensor reads as zeros. */
static void to_host(void *ctx, float *dst, const float *src, int64_t n) {
    (void)ctx, (void)src;
    if (n > 0) memset(dst, 0, (size_t)n * sizeof *dst);
}
static void from_host(void *ctx, float *dst, const float *src, int64_t n) {
    (void)ctx, (void)dst, (void)src, (void)n;
}
static void gemm(void *ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                 const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                 int64_t ldc) {
    (void)ctx, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda;
    (void)b, (void)ldb, (void)beta, (void)c, (void)ldc;
}
static void gemm_batched(void *ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                         float alpha, const float *a, int64_t lda, int64_t sa, const float *b,
                         int64_t ldb, int64_t sb, float beta, float *c, int64_t ldc, int64_t sc,
                         int64_t batch) {
    (void)ctx, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda;
    (void)sa, (void)b, (void)ldb, (void)sb, (void)beta, (void)c, (void)ldc, (void)sc, (void)batch;
}
static void cast_bf16(void *ctx, const float *x, uint16_t *y, int64_t n) {
    (void)ctx, (void)x, (void)y, (void)n;
}
static void gemm_bf16(void *ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const mg_gemm_in *a, const mg_gemm_in *b, float beta, float *c, int64_t ldc,
                      int64_t sc, int64_t batch, const float *bias) {
    (void)ctx, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)b;
    (void)beta, (void)c, (void)ldc, (void)sc, (void)batch, (void)bias;
}
static void permute(void *ctx, const mg_tensor *x, const int *perm, mg_tensor *out) {
    (void)ctx, (void)x, (void)perm, (void)out;
}
static void copy_block(void *ctx, const mg_tensor *src, const int64_t *so, mg_tensor *dst,
                       const int64_t *d_o, const int64_t *extent) {
    (void)ctx, (void)src, (void)so, (void)dst, (void)d_o, (void)extent;
}
static void copy(void *ctx, const mg_tensor *src, mg_tensor *dst) { (void)ctx, (void)src, (void)dst; }
static void fill(void *ctx, mg_tensor *t, float v) { (void)ctx, (void)t, (void)v; }
static void unary(void *ctx, mg_unary_op op, const mg_tensor *x, float alpha, mg_tensor *out) {
    (void)ctx, (void)op, (void)x, (void)alpha, (void)out;
}
static void binary(void *ctx, mg_binary_op op, const mg_tensor *a, const mg_tensor *b,
                   mg_tensor *out) {
    (void)ctx, (void)op, (void)a, (void)b, (void)out;
}
static void axpy(void *ctx, float alpha, const mg_tensor *x, mg_tensor *y) {
    (void)ctx, (void)alpha, (void)x, (void)y;
}
static void reduce(void *ctx, const mg_tensor *x, mg_tensor *out) { (void)ctx, (void)x, (void)out; }
static double sum_squares(void *ctx, const mg_tensor *x) {
    (void)ctx, (void)x;
    return 0;
}
static void softmax(void *ctx, const mg_tensor *x, const mg_tensor *max, const mg_tensor *sum,
                    bool log, mg_tensor *out) {
    (void)ctx, (void)x, (void)max, (void)sum, (void)log, (void)out;
}
static void softmax_sum(void *ctx, const mg_tensor *x, const mg_tensor *max, mg_tensor *sum) {
    (void)ctx, (void)x, (void)max, (void)sum;
}
static void softmax_backward(void *ctx, const mg_tensor *y, const mg_tensor *dy,
                             const mg_tensor *dot, bool log, mg_tensor *dx) {
    (void)ctx, (void)y, (void)dy, (void)dot, (void)log, (void)dx;
}
static void softmax_dot(void *ctx, const mg_tensor *y, const mg_tensor *dy, bool log,
                        mg_tensor *dot) {
    (void)ctx, (void)y, (void)dy, (void)log, (void)dot;
}
static void layer_norm(void *ctx, const mg_tensor *x, const mg_tensor *w, const mg_tensor *b,
                       float eps, const mg_tensor *moments, int64_t n, mg_tensor *stats,
                       mg_tensor *y) {
    (void)ctx, (void)x, (void)w, (void)b, (void)eps, (void)moments, (void)n, (void)stats, (void)y;
}
static void layer_norm_moments(void *ctx, const mg_tensor *x, const mg_tensor *mean,
                               mg_tensor *out) {
    (void)ctx, (void)x, (void)mean, (void)out;
}
static void layer_norm_backward(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                const mg_tensor *dy, const mg_tensor *stats, const mg_tensor *sums,
                                int64_t n, mg_tensor *dx, mg_tensor *dw, mg_tensor *db) {
    (void)ctx, (void)x, (void)w, (void)dy, (void)stats, (void)sums, (void)n, (void)dx, (void)dw;
    (void)db;
}
static void layer_norm_backward_sums(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                     const mg_tensor *dy, const mg_tensor *stats, mg_tensor *sums) {
    (void)ctx, (void)x, (void)w, (void)dy, (void)stats, (void)sums;
}
static void rms_norm(void *ctx, const mg_tensor *x, const mg_tensor *w, float eps,
                     const mg_tensor *squares, int64_t n, mg_tensor *rstd, mg_tensor *y) {
    (void)ctx, (void)x, (void)w, (void)eps, (void)squares, (void)n, (void)rstd, (void)y;
}
static void rms_norm_squares(void *ctx, const mg_tensor *x, mg_tensor *out) {
    (void)ctx, (void)x, (void)out;
}
static void rms_norm_backward(void *ctx, const mg_tensor *x, const mg_tensor *w,
                              const mg_tensor *dy, const mg_tensor *rstd, const mg_tensor *sums,
                              int64_t n, mg_tensor *dx, mg_tensor *dw) {
    (void)ctx, (void)x, (void)w, (void)dy, (void)rstd, (void)sums, (void)n, (void)dx, (void)dw;
}
static void rms_norm_backward_sums(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                   const mg_tensor *dy, const mg_tensor *rstd, mg_tensor *sums) {
    (void)ctx, (void)x, (void)w, (void)dy, (void)rstd, (void)sums;
}
static void rope(void *ctx, const mg_tensor *x, int64_t pos0, float theta, bool inverse,
                 mg_tensor *out) {
    (void)ctx, (void)x, (void)pos0, (void)theta, (void)inverse, (void)out;
}
static int64_t embedding(void *ctx, const mg_tensor *ids, const mg_tensor *table, int64_t v0,
                         int64_t v, mg_tensor *out) {
    (void)ctx, (void)ids, (void)table, (void)v0, (void)v, (void)out;
    return 0;
}
static void embedding_backward(void *ctx, const mg_tensor *ids, const mg_tensor *dout, int64_t v0,
                               mg_tensor *dtable) {
    (void)ctx, (void)ids, (void)dout, (void)v0, (void)dtable;
}
static int64_t cross_entropy(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                             float scale, mg_tensor *out) {
    (void)ctx, (void)logits, (void)labels, (void)scale, (void)out;
    return 0;
}
static int64_t cross_entropy_sums(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                  const mg_tensor *max, int64_t v0, int64_t v, mg_tensor *sums) {
    (void)ctx, (void)logits, (void)labels, (void)max, (void)v0, (void)v, (void)sums;
    return 0;
}
static int64_t cross_entropy_fixed(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                   const mg_tensor *max, int64_t v0, int64_t v, int64_t *fixed,
                                   float *target) {
    (void)ctx, (void)logits, (void)labels, (void)max, (void)v0, (void)v, (void)fixed, (void)target;
    return 0;
}
static void cross_entropy_backward(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                   const mg_tensor *lse, int64_t v0, int64_t v, float scale,
                                   mg_tensor *dlogits) {
    (void)ctx, (void)logits, (void)labels, (void)lse, (void)v0, (void)v, (void)scale;
    (void)dlogits;
}
static void attention(void *ctx, const mg_tensor *q, const mg_tensor *k, const mg_tensor *v,
                      float scale, bool causal, int64_t q0, int64_t k0, mg_tensor *o,
                      mg_tensor *lse) {
    (void)ctx, (void)q, (void)k, (void)v, (void)scale, (void)causal, (void)q0, (void)k0, (void)o;
    (void)lse;
}
static void attention_backward(void *ctx, const mg_tensor *q, const mg_tensor *k,
                               const mg_tensor *v, const mg_tensor *o, const mg_tensor *lse,
                               const mg_tensor *dout, float scale, bool causal, int64_t q0,
                               int64_t k0, mg_tensor *dq, mg_tensor *dk, mg_tensor *dv) {
    (void)ctx, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)dout, (void)scale;
    (void)causal, (void)q0, (void)k0, (void)dq, (void)dk, (void)dv;
}
static void sgd_step(void *ctx, mg_tensor *param, const mg_tensor *grad, mg_tensor *buf, float lr,
                     float momentum, float weight_decay, bool first_step) {
    (void)ctx, (void)param, (void)grad, (void)buf, (void)lr, (void)momentum, (void)weight_decay;
    (void)first_step;
}
static void adamw_step(void *ctx, mg_tensor *param, const mg_tensor *grad, mg_tensor *m,
                       mg_tensor *v, float lr, float beta1, float beta2, float eps,
                       float weight_decay, int64_t step) {
    (void)ctx, (void)param, (void)grad, (void)m, (void)v, (void)lr, (void)beta1, (void)beta2;
    (void)eps, (void)weight_decay, (void)step;
}

static const struct mg_backend_iface meta_iface = {
    .name = "meta",
    .device = MG_DEVICE_META,
    .alloc = meta_alloc,
    .free = meta_free,
    .to_host = to_host,
    .from_host = from_host,
    .gemm = gemm,
    .gemm_batched = gemm_batched,
    .cast_bf16 = cast_bf16,
    .gemm_bf16 = gemm_bf16,
    .permute = permute,
    .copy_block = copy_block,
    .add_block = copy_block,
    .copy = copy,
    .fill = fill,
    .unary = unary,
    .binary = binary,
    .axpy = axpy,
    .reduce_sum = reduce,
    .reduce_max = reduce,
    .sum_squares = sum_squares,
    .softmax = softmax,
    .softmax_sum = softmax_sum,
    .softmax_backward = softmax_backward,
    .softmax_dot = softmax_dot,
    .layer_norm = layer_norm,
    .layer_norm_moments = layer_norm_moments,
    .layer_norm_backward = layer_norm_backward,
    .layer_norm_backward_sums = layer_norm_backward_sums,
    .rms_norm = rms_norm,
    .rms_norm_squares = rms_norm_squares,
    .rms_norm_backward = rms_norm_backward,
    .rms_norm_backward_sums = rms_norm_backward_sums,
    .rope = rope,
    .embedding = embedding,
    .embedding_backward = embedding_backward,
    .cross_entropy = cross_entropy,
    .cross_entropy_sums = cross_entropy_sums,
    .cross_entropy_backward = cross_entropy_backward,
    .cross_entropy_fixed = cross_entropy_fixed,
    .attention = attention,
    .attention_backward = attention_backward,
    .sgd_step = sgd_step,
    .adamw_step = adamw_step,
};

/* The vtable with its (empty) context: set here once, never written. */
static mg_backend meta_backend = {&meta_iface, NULL};

mg_backend *mg_backend_meta(void) { return &meta_backend; }

void mg_meta_start(void) {
    mg_ctx()->memory[MG_DEVICE_META] = (mg_device_memory){
        .alloc = meta_alloc, .free = meta_free, .copy = meta_copy, .zero = meta_zero,
        .ctx = NULL, .device = MG_DEVICE_META,
    };
}
