/* cuda.cu: the CUDA backend: every kernel of backend.h on device memory, with
 * the semantics of cpu.c (zero-size tensors, broadcasting, reductions over any
 * set of dims, NaN-winning max, sums accumulated in double, bad labels counted).
 *
 * One compute stream per process (cudaStreamNonBlocking); cuBLAS is bound to it.
 * Row-major GEMMs go to cuBLAS (column-major) through C^T = op(B)^T op(A)^T: the
 * operands swap, the transpose flags stay, no transposed copies. TF32 tensor-core
 * math only when asked (mg_backend_cuda_set_tf32). Everything else is a
 * grid-stride kernel. Reductions are deterministic: the split of the work
 * depends only on the shapes and the device, partials are combined in a fixed
 * order, no atomics, so a run repeats bitwise.
 *
 * Kernels only enqueue; calls that hand a value to the host (to_host, from_host,
 * sum_squares, cross_entropy) wait for the stream. The iface returns void, so
 * the first CUDA/cuBLAS error is kept with its message (and set as the thread's
 * mg_error) and reported by mg_cuda_synchronize(); alloc returns NULL on failure.
 *
 * Exports: mg_backend_cuda, mg_cuda_backend_init, mg_cuda_device_count,
 * mg_cuda_device, mg_backend_cuda_set_tf32, mg_backend_cuda_tf32,
 * mg_cuda_synchronize, mg_cuda_stream, mg_cuda_is_device_pointer (device.h). */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "backend/backend.h"
#include "backend/device.h"
#include "status.h"
}

#define THREADS 256

/* ---- context and errors --------------------------------------------------------- */

typedef struct {
    int ready, device, sm_count, tf32;
    cudaStream_t stream;
    cublasHandle_t blas;
    double *partial; /* device scratch for reduction partials */
    size_t partial_cap;
    double *pinned; /* 8 doubles of pinned host memory for results */
    int status;     /* first error met (sticky), MG_OK before */
    char message[512];
} cuda_ctx;

static cuda_ctx ctx_;

static void keep_error(const char *what, const char *detail) {
    if (ctx_.status == MG_OK) {
        ctx_.status = MG_EDEVICE;
        snprintf(ctx_.message, sizeof ctx_.message, "CUDA backend: %s failed: %s", what, detail);
    }
    mg_error(MG_EDEVICE, "CUDA backend: %s failed: %s", what, detail);
}

static bool cuda_ok(const char *what, cudaError_t e) {
    if (e == cudaSuccess) return true;
    keep_error(what, cudaGetErrorString(e));
    return false;
}

static bool blas_ok(const char *what, cublasStatus_t s) {
    if (s == CUBLAS_STATUS_SUCCESS) return true;
    keep_error(what, cublasGetStatusString(s));
    return false;
}

/* blocks for a grid-stride loop over n items */
static unsigned grid_for(int64_t n, int threads = THREADS) {
    int64_t blocks = (n + threads - 1) / threads;
    int64_t cap = (int64_t)(ctx_.sm_count > 0 ? ctx_.sm_count : 16) * 32;
    if (blocks > cap) blocks = cap;
    return (unsigned)(blocks > 0 ? blocks : 1);
}

#define LAUNCHED(what) cuda_ok(what, cudaGetLastError())

#define FOR_EACH(i, n)                                                                   \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);            \
         i += (int64_t)blockDim.x * gridDim.x)

/* Up to MG_MAX_DIMS sizes or strides, passed to kernels by value. */
typedef struct {
    int64_t v[MG_MAX_DIMS];
} dims8;

/* double scratch of at least n entries (grows rarely: a new size syncs the device) */
static double *partial_scratch(int64_t n) {
    size_t want = (size_t)(n > 0 ? n : 1);
    if (ctx_.partial_cap < want) {
        if (ctx_.partial) cudaFree(ctx_.partial);
        ctx_.partial = NULL;
        ctx_.partial_cap = 0;
        if (!cuda_ok("cudaMalloc (reduction scratch)",
                     cudaMalloc((void **)&ctx_.partial, want * sizeof(double))))
            return NULL;
        ctx_.partial_cap = want;
    }
    return ctx_.partial;
}

/* copy n doubles of device memory to the pinned buffer and wait */
static bool read_back(const double *dev, int n) {
    if (!cuda_ok("cudaMemcpyAsync (result)",
                 cudaMemcpyAsync(ctx_.pinned, dev, (size_t)n * sizeof(double),
                                 cudaMemcpyDeviceToHost, ctx_.stream)))
        return false;
    return cuda_ok("cudaStreamSynchronize", cudaStreamSynchronize(ctx_.stream));
}

/* ---- memory --------------------------------------------------------------------- */

static void *cuda_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    void *p = NULL;
    size_t rounded = (bytes + 255) / 256 * 256;
    cudaError_t e = cudaMalloc(&p, rounded ? rounded : 256);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* out of memory is not sticky: clear it */
        mg_error(MG_ENOMEM, "CUDA backend: cudaMalloc of %zu bytes failed: %s", bytes,
                 cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

static void cuda_free(void *ctx, void *ptr) {
    (void)ctx;
    if (ptr) cuda_ok("cudaFree", cudaFree(ptr));
}

static void cuda_to_host(void *ctx, float *dst_host, const float *src, int64_t n) {
    (void)ctx;
    if (n <= 0) return;
    if (cuda_ok("cudaMemcpyAsync (to host)",
                cudaMemcpyAsync(dst_host, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost,
                                ctx_.stream)))
        cuda_ok("cudaStreamSynchronize", cudaStreamSynchronize(ctx_.stream));
}

static void cuda_from_host(void *ctx, float *dst, const float *src_host, int64_t n) {
    (void)ctx;
    if (n <= 0) return;
    if (cuda_ok("cudaMemcpyAsync (from host)",
                cudaMemcpyAsync(dst, src_host, (size_t)n * sizeof(float), cudaMemcpyHostToDevice,
                                ctx_.stream)))
        cuda_ok("cudaStreamSynchronize", cudaStreamSynchronize(ctx_.stream));
}

static void copy_d2d(float *dst, const float *src, int64_t n) {
    if (n <= 0 || dst == src) return;
    cuda_ok("cudaMemcpyAsync (device)",
            cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice,
                            ctx_.stream));
}

/* ---- matrix work ---------------------------------------------------------------- */

/* C = beta C over a batch of (M, N) matrices (beta 0 overwrites, as BLAS does) */
__global__ void k_scale_matrices(float *c, int64_t m, int64_t n, int64_t ldc, int64_t stride,
                                 int64_t batch, float beta) {
    FOR_EACH(i, batch * m * n) {
        int64_t b = i / (m * n), r = i / n % m, col = i % n;
        float *p = c + b * stride + r * ldc + col;
        *p = beta == 0.0f ? 0.0f : beta * *p;
    }
}

static void scale_matrices(float *c, int64_t m, int64_t n, int64_t ldc, int64_t stride,
                           int64_t batch, float beta) {
    int64_t total = batch * m * n;
    if (total <= 0) return;
    k_scale_matrices<<<grid_for(total), THREADS, 0, ctx_.stream>>>(c, m, n, ldc, stride, batch,
                                                                    beta);
    LAUNCHED("scale kernel");
}

/* Row-major C(M,N) = alpha op(A) op(B) + beta C is column-major
 * C^T(N,M) = alpha op(B)^T op(A)^T + beta C^T: B first, same flags. */
static void cuda_gemm(void *ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                      float beta, float *c, int64_t ldc) {
    (void)ctx;
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        scale_matrices(c, m, n, ldc, 0, 1, beta);
        return;
    }
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    blas_ok("cublasSgemm", cublasSgemm_64(ctx_.blas, op_b, op_a, n, m, k, &alpha, b, ldb, a, lda,
                                          &beta, c, ldc));
}

static void cuda_gemm_batched(void *ctx, bool trans_a, bool trans_b, int64_t m, int64_t n,
                              int64_t k, float alpha, const float *a, int64_t lda,
                              int64_t stride_a, const float *b, int64_t ldb, int64_t stride_b,
                              float beta, float *c, int64_t ldc, int64_t stride_c,
                              int64_t batch) {
    (void)ctx;
    if (m <= 0 || n <= 0 || batch <= 0) return;
    if (k <= 0) {
        scale_matrices(c, m, n, ldc, stride_c, batch, beta);
        return;
    }
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    blas_ok("cublasSgemmStridedBatched",
            cublasSgemmStridedBatched_64(ctx_.blas, op_b, op_a, n, m, k, &alpha, b, ldb, stride_b,
                                         a, lda, stride_a, &beta, c, ldc, stride_c, batch));
}

/* ---- layout --------------------------------------------------------------------- */

static void cuda_copy(void *ctx, const mg_tensor *src, mg_tensor *dst) {
    (void)ctx;
    copy_d2d(dst->data, src->data, src->numel);
}

__global__ void k_fill(float *p, int64_t n, float v) {
    FOR_EACH(i, n) p[i] = v;
}

static void cuda_fill(void *ctx, mg_tensor *t, float value) {
    (void)ctx;
    int64_t n = t->numel;
    if (n <= 0) return;
    if (value == 0.0f && !signbit(value)) {
        cuda_ok("cudaMemsetAsync",
                cudaMemsetAsync(t->data, 0, (size_t)n * sizeof(float), ctx_.stream));
        return;
    }
    k_fill<<<grid_for(n), THREADS, 0, ctx_.stream>>>(t->data, n, value);
    LAUNCHED("fill kernel");
}

/* item i of the box `ext` (nd dims) at offsets by the strides ss (src), ds (dst) */
__global__ void k_copy_block(const float *src, float *dst, int nd, dims8 ext, dims8 ss, dims8 ds,
                             int64_t n) {
    FOR_EACH(i, n) {
        int64_t rem = i, so = 0, dof = 0;
        for (int d = nd - 1; d >= 0; d--) {
            int64_t c = rem % ext.v[d];
            rem /= ext.v[d];
            so += c * ss.v[d];
            dof += c * ds.v[d];
        }
        dst[dof] = src[so];
    }
}

/* dst[dst_offset + i] = src[src_offset + i] for i in the box `extent`. Trailing
 * dims the box covers whole in both tensors merge into one. */
static void cuda_copy_block(void *ctx, const mg_tensor *src, const int64_t *src_offset,
                            mg_tensor *dst, const int64_t *dst_offset, const int64_t *extent) {
    (void)ctx;
    int nd = src->ndim;
    if (nd == 0) {
        copy_d2d(dst->data, src->data, 1);
        return;
    }
    for (int d = 0; d < nd; d++)
        if (extent[d] <= 0) return;
    int64_t ss[MG_MAX_DIMS], ds[MG_MAX_DIMS], src_base = 0, dst_base = 0;
    mg_shape_strides(nd, src->shape, ss);
    mg_shape_strides(nd, dst->shape, ds);
    for (int d = 0; d < nd; d++) {
        src_base += src_offset[d] * ss[d];
        dst_base += dst_offset[d] * ds[d];
    }
    int k = nd - 1; /* dims k.. form one run of `run` elements, strides 1 */
    int64_t run = extent[k];
    while (k > 0 && extent[k] == src->shape[k] && extent[k] == dst->shape[k]) {
        k--;
        run *= extent[k];
    }
    dims8 e, s, o;
    int m = 0;
    for (int d = 0; d < k; d++, m++) {
        e.v[m] = extent[d];
        s.v[m] = ss[d];
        o.v[m] = ds[d];
    }
    e.v[m] = run;
    s.v[m] = 1;
    o.v[m] = 1;
    m++;
    int64_t n = mg_shape_numel(nd, extent);
    if (m == 1) {
        copy_d2d(dst->data + dst_base, src->data + src_base, n);
        return;
    }
    k_copy_block<<<grid_for(n), THREADS, 0, ctx_.stream>>>(src->data + src_base,
                                                           dst->data + dst_base, m, e, s, o, n);
    LAUNCHED("copy_block kernel");
}

/* out[i] = x[offset of out index i through the permuted strides] */
__global__ void k_permute(const float *x, float *out, int nd, dims8 shape, dims8 stride,
                          int64_t n) {
    FOR_EACH(i, n) {
        int64_t rem = i, off = 0;
        for (int d = nd - 1; d >= 0; d--) {
            off += rem % shape.v[d] * stride.v[d];
            rem /= shape.v[d];
        }
        out[i] = x[off];
    }
}

static void cuda_permute(void *ctx, const mg_tensor *x, const int *perm, mg_tensor *out) {
    (void)ctx;
    int nd = x->ndim;
    if (out->numel <= 0) return;
    if (nd < 2) {
        copy_d2d(out->data, x->data, x->numel);
        return;
    }
    int64_t xs[MG_MAX_DIMS];
    mg_shape_strides(nd, x->shape, xs);
    dims8 shape, stride;
    for (int i = 0; i < nd; i++) {
        shape.v[i] = out->shape[i];
        stride.v[i] = xs[perm[i]];
    }
    k_permute<<<grid_for(out->numel), THREADS, 0, ctx_.stream>>>(x->data, out->data, nd, shape,
                                                                 stride, out->numel);
    LAUNCHED("permute kernel");
}

/* ---- elementwise ---------------------------------------------------------------- */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

__device__ __forceinline__ float gelu_grad(float x) {
    float x2 = x * x;
    float t = tanhf(GELU_K * (x + GELU_C * x2 * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_C * x2);
}

__device__ __forceinline__ float binary_apply(int op, float x, float y) {
    switch (op) {
    case MG_BINARY_ADD: return x + y;
    case MG_BINARY_SUB: return x - y;
    case MG_BINARY_MUL: return x * y;
    case MG_BINARY_DIV: return x / y;
    case MG_BINARY_RELU_BACKWARD: return y > 0.0f ? x : 0.0f;
    case MG_BINARY_GELU_BACKWARD: return x * gelu_grad(y);
    default: return 0.0f;
    }
}

/* out[i] = op(a, b) where i unravels over the k merged dims n, strides sa, sb */
__global__ void k_binary(int op, const float *a, const float *b, float *out, int k, dims8 n,
                         dims8 sa, dims8 sb, int64_t total) {
    FOR_EACH(i, total) {
        int64_t rem = i, oa = 0, ob = 0;
        for (int d = k - 1; d >= 0; d--) {
            int64_t c = rem % n.v[d];
            rem /= n.v[d];
            oa += c * sa.v[d];
            ob += c * sb.v[d];
        }
        out[i] = binary_apply(op, a[oa], b[ob]);
    }
}

/* the common flat cases without index arithmetic: strides (1, 1) or (1, 0) */
__global__ void k_binary_flat(int op, const float *a, const float *b, int64_t sb, float *out,
                              int64_t total) {
    FOR_EACH(i, total) out[i] = binary_apply(op, a[i], b[i * sb]);
}

/* Broadcast strides of t against out (dims right-aligned; size 1 -> stride 0). */
static void broadcast_strides(const mg_tensor *t, const mg_tensor *out, int64_t *st) {
    int64_t s = 1;
    for (int i = out->ndim - 1; i >= 0; i--) {
        int j = i - (out->ndim - t->ndim);
        int64_t size = j >= 0 ? t->shape[j] : 1;
        st[i] = size == 1 ? 0 : s;
        s *= size;
    }
}

static void cuda_binary(void *ctx, mg_binary_op op, const mg_tensor *a, const mg_tensor *b,
                        mg_tensor *out) {
    (void)ctx;
    if (out->numel <= 0) return;
    int64_t sa_full[MG_MAX_DIMS], sb_full[MG_MAX_DIMS];
    broadcast_strides(a, out, sa_full);
    broadcast_strides(b, out, sb_full);
    /* merge dims that both inputs step through alike; drop size-1 dims */
    dims8 n, sa, sb;
    int k = 0;
    for (int i = 0; i < out->ndim; i++) {
        if (out->shape[i] == 1) continue;
        if (k > 0 && sa.v[k - 1] == sa_full[i] * out->shape[i] &&
            sb.v[k - 1] == sb_full[i] * out->shape[i]) {
            n.v[k - 1] *= out->shape[i];
            sa.v[k - 1] = sa_full[i];
            sb.v[k - 1] = sb_full[i];
            continue;
        }
        n.v[k] = out->shape[i];
        sa.v[k] = sa_full[i];
        sb.v[k] = sb_full[i];
        k++;
    }
    int64_t total = out->numel;
    if (k == 0) { /* one element */
        n.v[0] = 1;
        sa.v[0] = sb.v[0] = 0;
        k = 1;
    }
    if (k == 1 && sa.v[0] == 1 && (sb.v[0] == 1 || sb.v[0] == 0)) {
        k_binary_flat<<<grid_for(total), THREADS, 0, ctx_.stream>>>(op, a->data, b->data, sb.v[0],
                                                                    out->data, total);
        LAUNCHED("binary kernel");
        return;
    }
    k_binary<<<grid_for(total), THREADS, 0, ctx_.stream>>>(op, a->data, b->data, out->data, k, n,
                                                           sa, sb, total);
    LAUNCHED("binary kernel");
}

__global__ void k_unary(int op, const float *xd, float alpha, float *od, int64_t n) {
    FOR_EACH(i, n) {
        float x = xd[i], y;
        switch (op) {
        case MG_UNARY_RELU: y = x > 0.0f ? x : 0.0f; break;
        case MG_UNARY_GELU: y = 0.5f * x * (1.0f + tanhf(GELU_K * (x + GELU_C * x * x * x))); break;
        case MG_UNARY_SCALE: y = alpha * x; break;
        case MG_UNARY_EXP: y = expf(x); break;
        case MG_UNARY_LOG: y = logf(x); break;
        case MG_UNARY_SQUARE: y = x * x; break;
        default: y = 0.0f; break;
        }
        od[i] = y;
    }
}

static void cuda_unary(void *ctx, mg_unary_op op, const mg_tensor *x, float alpha, mg_tensor *out) {
    (void)ctx;
    int64_t n = out->numel;
    if (n <= 0) return;
    k_unary<<<grid_for(n), THREADS, 0, ctx_.stream>>>(op, x->data, alpha, out->data, n);
    LAUNCHED("unary kernel");
}

__global__ void k_axpy(float alpha, const float *x, float *y, int64_t n) {
    FOR_EACH(i, n) y[i] += alpha * x[i];
}

static void cuda_axpy(void *ctx, float alpha, const mg_tensor *x, mg_tensor *y) {
    (void)ctx;
    int64_t n = y->numel;
    if (n <= 0) return;
    k_axpy<<<grid_for(n), THREADS, 0, ctx_.stream>>>(alpha, x->data, y->data, n);
    LAUNCHED("axpy kernel");
}

/* ---- reductions ----------------------------------------------------------------- */

/* sum, or max where NaN wins (as in torch and cpu.c) */
__device__ __forceinline__ double combine(bool max, double acc, double v) {
    if (!max) return acc + v;
    return (v > acc || v != v) ? v : acc;
}

/* Reduces `acc` over the block (THREADS threads) in a fixed tree; the result is
 * valid in thread 0. */
__device__ double block_combine(bool max, double acc) {
    __shared__ double sh[THREADS];
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] = combine(max, sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads(); /* sh is reused by the next call */
    return r;
}

__device__ __forceinline__ int64_t unravel_offset(int64_t idx, int nd, const dims8 &size,
                                                  const dims8 &stride) {
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        off += idx % size.v[d] * stride.v[d];
        idx /= size.v[d];
    }
    return off;
}

/* x seen as kept dims (ks sizes, kx strides) and reduced dims (rs, rx). */
typedef struct {
    int nk, nr;
    dims8 ks, kx, rs, rx;
    int64_t kept, red;
} reduce_shape;

/* Inner dims reduced: one block per (out element o, split s), threads stride the
 * reduced elements (consecutive threads, consecutive addresses). Writes out[o]
 * when there is one split, else partial[o * splits + s]. */
__global__ void k_reduce_blocks(const float *x, reduce_shape p, bool max, int64_t splits,
                                int64_t chunk, float *out, double *partial) {
    for (int64_t task = blockIdx.x; task < p.kept * splits; task += gridDim.x) {
        int64_t o = task / splits, s = task % splits;
        int64_t base = unravel_offset(o, p.nk, p.ks, p.kx);
        int64_t r0 = s * chunk, r1 = r0 + chunk < p.red ? r0 + chunk : p.red;
        double acc = max ? -INFINITY : 0.0;
        for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x)
            acc = combine(max, acc, (double)x[base + unravel_offset(r, p.nr, p.rs, p.rx)]);
        acc = block_combine(max, acc);
        if (threadIdx.x == 0) {
            if (splits == 1) out[o] = (float)acc;
            else partial[o * splits + s] = acc;
        }
    }
}

/* Inner dim kept: one thread per (split s, out element o); neighbouring threads
 * read neighbouring elements. Writes out[o] or partial[s * kept + o]. */
__global__ void k_reduce_threads(const float *x, reduce_shape p, bool max, int64_t splits,
                                 int64_t chunk, float *out, double *partial) {
    FOR_EACH(t, p.kept * splits) {
        int64_t s = t / p.kept, o = t % p.kept;
        int64_t base = unravel_offset(o, p.nk, p.ks, p.kx);
        int64_t r0 = s * chunk, r1 = r0 + chunk < p.red ? r0 + chunk : p.red;
        double acc = max ? -INFINITY : 0.0;
        for (int64_t r = r0; r < r1; r++)
            acc = combine(max, acc, (double)x[base + unravel_offset(r, p.nr, p.rs, p.rx)]);
        if (splits == 1) out[o] = (float)acc;
        else partial[s * p.kept + o] = acc;
    }
}

/* out[o] = the partials of o combined in split order */
__global__ void k_reduce_finish(const double *partial, int64_t kept, int64_t splits,
                                bool split_major, bool max, float *out) {
    FOR_EACH(o, kept) {
        double acc = max ? -INFINITY : 0.0;
        for (int64_t s = 0; s < splits; s++)
            acc = combine(max, acc, partial[split_major ? s * kept + o : o * splits + s]);
        out[o] = (float)acc;
    }
}

__global__ void k_fill_value(float *p, int64_t n, float v) {
    FOR_EACH(i, n) p[i] = v;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* out has x's ndim, each dim equal to x's (kept) or 1 (reduced) */
static void reduce(const mg_tensor *x, mg_tensor *out, bool max) {
    if (out->numel <= 0) return;
    if (x->numel == 0) { /* empty reduction: 0 or -inf */
        k_fill_value<<<grid_for(out->numel), THREADS, 0, ctx_.stream>>>(
            out->data, out->numel, max ? -INFINITY : 0.0f);
        LAUNCHED("reduce kernel");
        return;
    }
    /* merge x's dims into runs all kept or all reduced (size-1 dims dropped) */
    int64_t xs[MG_MAX_DIMS];
    mg_shape_strides(x->ndim, x->shape, xs);
    int64_t n[MG_MAX_DIMS], st[MG_MAX_DIMS];
    bool red[MG_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (x->shape[i] == 1) continue;
        bool r = out->shape[i] == 1;
        if (k > 0 && red[k - 1] == r) {
            n[k - 1] *= x->shape[i];
            st[k - 1] = xs[i];
            continue;
        }
        n[k] = x->shape[i];
        st[k] = xs[i];
        red[k] = r;
        k++;
    }
    reduce_shape p;
    memset(&p, 0, sizeof p);
    p.kept = out->numel;
    p.red = x->numel / out->numel;
    for (int i = 0; i < k; i++) {
        if (red[i]) {
            p.rs.v[p.nr] = n[i];
            p.rx.v[p.nr++] = st[i];
        } else {
            p.ks.v[p.nk] = n[i];
            p.kx.v[p.nk++] = st[i];
        }
    }
    bool inner_reduced = k == 0 || red[k - 1];
    int64_t sm = ctx_.sm_count > 0 ? ctx_.sm_count : 16, splits = 1;
    if (inner_reduced) {
        int64_t want_blocks = sm * 8;
        if (p.kept < want_blocks) splits = ceil_div(want_blocks, p.kept);
        int64_t most = ceil_div(p.red, 4 * THREADS); /* at least 4 elements a thread */
        if (splits > most) splits = most;
    } else {
        int64_t want_threads = sm * 2048;
        if (p.kept < want_threads) splits = ceil_div(want_threads, p.kept);
        int64_t most = ceil_div(p.red, 32); /* at least 32 elements a thread */
        if (splits > most) splits = most;
    }
    if (splits < 1) splits = 1;
    int64_t chunk = ceil_div(p.red, splits);
    double *partial = NULL;
    if (splits > 1 && !(partial = partial_scratch(p.kept * splits))) return;
    if (inner_reduced) {
        int64_t tasks = p.kept * splits;
        unsigned blocks = (unsigned)(tasks < 65535 * 16 ? tasks : 65535 * 16);
        k_reduce_blocks<<<blocks, THREADS, 0, ctx_.stream>>>(x->data, p, max, splits, chunk,
                                                            out->data, partial);
    } else {
        k_reduce_threads<<<grid_for(p.kept * splits), THREADS, 0, ctx_.stream>>>(
            x->data, p, max, splits, chunk, out->data, partial);
    }
    if (!LAUNCHED("reduce kernel") || splits == 1) return;
    k_reduce_finish<<<grid_for(p.kept), THREADS, 0, ctx_.stream>>>(partial, p.kept, splits,
                                                                   !inner_reduced, max, out->data);
    LAUNCHED("reduce kernel");
}

static void cuda_reduce_sum(void *ctx, const mg_tensor *x, mg_tensor *out) {
    (void)ctx;
    reduce(x, out, false);
}

static void cuda_reduce_max(void *ctx, const mg_tensor *x, mg_tensor *out) {
    (void)ctx;
    reduce(x, out, true);
}

/* partial[block] = sum of x^2 over the block's grid-stride share */
__global__ void k_sum_squares(const float *x, int64_t n, double *partial) {
    double acc = 0;
    FOR_EACH(i, n) acc += (double)x[i] * x[i];
    acc = block_combine(false, acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

/* result[0] = sum of the n partials, one block, fixed order */
__global__ void k_sum_partials(const double *partial, int64_t n, double *result) {
    double acc = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
    acc = block_combine(false, acc);
    if (threadIdx.x == 0) result[0] = acc;
}

static double cuda_sum_squares(void *ctx, const mg_tensor *x) {
    (void)ctx;
    int64_t n = x->numel;
    if (n <= 0) return 0.0;
    unsigned blocks = grid_for(ceil_div(n, 4)); /* a few elements a thread */
    double *partial = partial_scratch((int64_t)blocks + 1);
    if (!partial) return 0.0;
    k_sum_squares<<<blocks, THREADS, 0, ctx_.stream>>>(x->data, n, partial + 1);
    if (!LAUNCHED("sum_squares kernel")) return 0.0;
    k_sum_partials<<<1, THREADS, 0, ctx_.stream>>>(partial + 1, blocks, partial);
    if (!LAUNCHED("sum_squares kernel") || !read_back(partial, 1)) return 0.0;
    return ctx_.pinned[0];
}

/* ---- softmax and cross-entropy -------------------------------------------------- */

__device__ __forceinline__ float max_nan(float a, float b) { return (b > a || b != b) ? b : a; }

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* max and log(sum(exp(x - max))) of one row of c, by one warp (every lane gets them) */
__device__ void row_logsumexp(const float *x, int64_t c, int lane, float *m_out, float *lse_out) {
    float m = -INFINITY;
    for (int64_t j = lane; j < c; j += 32) m = max_nan(m, x[j]);
    m = warp_max(m);
    double s = 0;
    for (int64_t j = lane; j < c; j += 32) s += expf(x[j] - m);
    s = warp_sum(s);
    *m_out = m;
    *lse_out = (float)log(s);
}

/* class index of a label, or -1 when it is not an integer in [0, c) */
__device__ __forceinline__ int64_t label_class(float label, int64_t c) {
    if (!(label >= 0.0f) || label >= (float)c || label != floorf(label)) return -1;
    return (int64_t)label;
}

#define WARP_ID ((int64_t)(blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5)
#define WARPS ((int64_t)gridDim.x * blockDim.x >> 5)

__global__ void k_log_softmax(const float *x, float *out, int64_t rows, int64_t c) {
    int lane = threadIdx.x & 31;
    for (int64_t r = WARP_ID; r < rows; r += WARPS) {
        const float *xr = x + r * c;
        float m, lse;
        row_logsumexp(xr, c, lane, &m, &lse);
        for (int64_t j = lane; j < c; j += 32) out[r * c + j] = xr[j] - m - lse;
    }
}

static unsigned row_blocks(int64_t rows) { return grid_for(rows * 32); } /* a warp a row */

static void cuda_log_softmax(void *ctx, const mg_tensor *x, mg_tensor *out) {
    (void)ctx;
    int64_t c = x->ndim ? x->shape[x->ndim - 1] : 1;
    if (c == 0 || x->numel == 0) return;
    int64_t rows = x->numel / c;
    k_log_softmax<<<row_blocks(rows), THREADS, 0, ctx_.stream>>>(x->data, out->data, rows, c);
    LAUNCHED("log_softmax kernel");
}

/* Each warp sums -log_softmax[label] over its rows and counts the bad labels:
 * partial[2w] = loss, partial[2w + 1] = bad rows (lane 0 writes). */
__global__ void k_cross_entropy(const float *x, const float *labels, int64_t rows, int64_t c,
                                double *partial) {
    int lane = threadIdx.x & 31;
    double loss = 0, bad = 0;
    for (int64_t r = WARP_ID; r < rows; r += WARPS) {
        int64_t y = label_class(labels[r], c);
        if (y < 0) {
            bad += 1;
            continue;
        }
        const float *xr = x + r * c;
        float m, lse;
        row_logsumexp(xr, c, lane, &m, &lse);
        loss -= (double)(xr[y] - m - lse);
    }
    if (lane == 0) {
        partial[2 * WARP_ID] = loss;
        partial[2 * WARP_ID + 1] = bad;
    }
}

/* result = (loss, bad) summed over the warps in a fixed order; out = scale * loss */
__global__ void k_cross_entropy_finish(const double *partial, int64_t warps, float scale,
                                       float *out, double *result) {
    double loss = 0, bad = 0;
    for (int64_t i = threadIdx.x; i < warps; i += blockDim.x) {
        loss += partial[2 * i];
        bad += partial[2 * i + 1];
    }
    loss = block_combine(false, loss);
    bad = block_combine(false, bad);
    if (threadIdx.x == 0) {
        out[0] = (float)(scale * loss);
        result[0] = bad;
    }
}

static int64_t cuda_cross_entropy(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                  float scale, mg_tensor *out) {
    (void)ctx;
    int64_t c = logits->ndim ? logits->shape[logits->ndim - 1] : 1;
    int64_t rows = c ? logits->numel / c : labels->numel;
    unsigned blocks = row_blocks(rows > 0 ? rows : 1);
    int64_t warps = (int64_t)blocks * THREADS / 32;
    double *partial = partial_scratch(2 * warps + 1);
    if (!partial) return 0;
    k_cross_entropy<<<blocks, THREADS, 0, ctx_.stream>>>(logits->data, labels->data, rows, c,
                                                         partial + 1);
    if (!LAUNCHED("cross_entropy kernel")) return 0;
    k_cross_entropy_finish<<<1, THREADS, 0, ctx_.stream>>>(partial + 1, warps, scale, out->data,
                                                          partial);
    if (!LAUNCHED("cross_entropy kernel") || !read_back(partial, 1)) return 0;
    return (int64_t)ctx_.pinned[0];
}

/* dlogits = scale * (softmax(logits) - onehot(labels)); rows with a bad label get 0 */
__global__ void k_cross_entropy_backward(const float *x, const float *labels, int64_t rows,
                                         int64_t c, float scale, float *g) {
    int lane = threadIdx.x & 31;
    for (int64_t r = WARP_ID; r < rows; r += WARPS) {
        const float *xr = x + r * c;
        float *gr = g + r * c;
        int64_t y = label_class(labels[r], c);
        if (y < 0) {
            for (int64_t j = lane; j < c; j += 32) gr[j] = 0.0f;
            continue;
        }
        float m, lse;
        row_logsumexp(xr, c, lane, &m, &lse);
        for (int64_t j = lane; j < c; j += 32) {
            float v = scale * expf(xr[j] - m - lse);
            if (j == y) v -= scale;
            gr[j] = v;
        }
    }
}

static void cuda_cross_entropy_backward(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                        float scale, mg_tensor *dlogits) {
    (void)ctx;
    int64_t c = logits->ndim ? logits->shape[logits->ndim - 1] : 1;
    if (c == 0 || logits->numel == 0) return;
    int64_t rows = logits->numel / c;
    k_cross_entropy_backward<<<row_blocks(rows), THREADS, 0, ctx_.stream>>>(
        logits->data, labels->data, rows, c, scale, dlogits->data);
    LAUNCHED("cross_entropy_backward kernel");
}

/* ---- optimizers ----------------------------------------------------------------- */

/* PyTorch SGD, as cpu.c: g = grad + wd p; buf = g (first step) or momentum buf + g. */
__global__ void k_sgd(float *p, const float *gd, float *buf, int64_t n, float lr, float momentum,
                      float weight_decay, bool first_step) {
    FOR_EACH(i, n) {
        float g = gd[i] + weight_decay * p[i];
        if (buf) {
            buf[i] = first_step ? g : momentum * buf[i] + g;
            g = buf[i];
        }
        p[i] -= lr * g;
    }
}

static void cuda_sgd_step(void *ctx, mg_tensor *param, const mg_tensor *grad,
                          mg_tensor *momentum_buf, float lr, float momentum, float weight_decay,
                          bool first_step) {
    (void)ctx;
    int64_t n = param->numel;
    if (n <= 0) return;
    float *buf = momentum != 0.0f && momentum_buf ? momentum_buf->data : NULL;
    k_sgd<<<grid_for(n), THREADS, 0, ctx_.stream>>>(param->data, grad->data, buf, n, lr, momentum,
                                                    weight_decay, first_step);
    LAUNCHED("sgd kernel");
}

/* PyTorch AdamW, as cpu.c: p *= 1 - lr wd; p -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps). */
__global__ void k_adamw(float *p, const float *gd, float *md, float *vd, int64_t n, float beta1,
                        float beta2, float eps, float step_size, float bc2_sqrt, float decay) {
    FOR_EACH(i, n) {
        float g = gd[i];
        p[i] *= decay;
        md[i] = beta1 * md[i] + (1.0f - beta1) * g;
        vd[i] = beta2 * vd[i] + (1.0f - beta2) * g * g;
        p[i] -= step_size * md[i] / (sqrtf(vd[i]) / bc2_sqrt + eps);
    }
}

static void cuda_adamw_step(void *ctx, mg_tensor *param, const mg_tensor *grad, mg_tensor *m,
                            mg_tensor *v, float lr, float beta1, float beta2, float eps,
                            float weight_decay, int64_t step) {
    (void)ctx;
    int64_t n = param->numel;
    if (n <= 0) return;
    double bc1 = 1.0 - pow(beta1, (double)step), bc2 = 1.0 - pow(beta2, (double)step);
    float step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2);
    float decay = 1.0f - lr * weight_decay;
    k_adamw<<<grid_for(n), THREADS, 0, ctx_.stream>>>(param->data, grad->data, m->data, v->data, n,
                                                      beta1, beta2, eps, step_size, bc2_sqrt,
                                                      decay);
    LAUNCHED("adamw kernel");
}

/* ---- the vtable and the runtime hooks ------------------------------------------- */

static struct mg_backend_iface make_iface(void) {
    struct mg_backend_iface f;
    memset(&f, 0, sizeof f);
    f.name = "cuda";
    f.device = MG_DEVICE_CUDA;
    f.alloc = cuda_alloc;
    f.free = cuda_free;
    f.to_host = cuda_to_host;
    f.from_host = cuda_from_host;
    f.gemm = cuda_gemm;
    f.gemm_batched = cuda_gemm_batched;
    f.permute = cuda_permute;
    f.copy_block = cuda_copy_block;
    f.copy = cuda_copy;
    f.fill = cuda_fill;
    f.unary = cuda_unary;
    f.binary = cuda_binary;
    f.axpy = cuda_axpy;
    f.reduce_sum = cuda_reduce_sum;
    f.reduce_max = cuda_reduce_max;
    f.sum_squares = cuda_sum_squares;
    f.log_softmax = cuda_log_softmax;
    f.cross_entropy = cuda_cross_entropy;
    f.cross_entropy_backward = cuda_cross_entropy_backward;
    f.sgd_step = cuda_sgd_step;
    f.adamw_step = cuda_adamw_step;
    return f;
}

static const struct mg_backend_iface cuda_iface = make_iface();
static mg_backend cuda_backend = {&cuda_iface, &ctx_};

extern "C" mg_backend *mg_backend_cuda(void) { return ctx_.ready ? &cuda_backend : NULL; }

extern "C" int mg_cuda_device_count(void) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError(); /* no driver or no device: not an error of ours */
        return 0;
    }
    return count;
}

extern "C" int mg_cuda_device(void) { return ctx_.ready ? ctx_.device : -1; }

static void apply_math_mode(void) {
    if (ctx_.ready)
        blas_ok("cublasSetMathMode", cublasSetMathMode(ctx_.blas, ctx_.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                            : CUBLAS_DEFAULT_MATH));
}

extern "C" void mg_backend_cuda_set_tf32(int on) {
    ctx_.tf32 = on ? 1 : 0;
    apply_math_mode();
}

extern "C" int mg_backend_cuda_tf32(void) { return ctx_.tf32; }

static int init_failed(const char *what, const char *detail, int device) {
    return mg_error(MG_EDEVICE, "CUDA backend on device %d: %s failed: %s", device, what, detail);
}

extern "C" int mg_cuda_backend_init(int device) {
    if (ctx_.ready) {
        if (device == ctx_.device) return MG_OK;
        return mg_error(MG_EDEVICE, "CUDA backend: already running on device %d, cannot move to %d",
                        ctx_.device, device);
    }
    int count = mg_cuda_device_count();
    if (device < 0 || device >= count)
        return mg_error(MG_EDEVICE, "CUDA backend: device %d does not exist (this process sees %d "
                                    "GPU%s)", device, count, count == 1 ? "" : "s");
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) return init_failed("cudaSetDevice", cudaGetErrorString(e), device);
    int sm = 0;
    e = cudaDeviceGetAttribute(&sm, cudaDevAttrMultiProcessorCount, device);
    if (e != cudaSuccess) return init_failed("cudaDeviceGetAttribute", cudaGetErrorString(e), device);
    cudaStream_t stream;
    e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) return init_failed("cudaStreamCreateWithFlags", cudaGetErrorString(e), device);
    cublasHandle_t blas;
    cublasStatus_t s = cublasCreate(&blas);
    if (s != CUBLAS_STATUS_SUCCESS) {
        cudaStreamDestroy(stream);
        return init_failed("cublasCreate", cublasGetStatusString(s), device);
    }
    s = cublasSetStream(blas, stream);
    if (s != CUBLAS_STATUS_SUCCESS) {
        cublasDestroy(blas);
        cudaStreamDestroy(stream);
        return init_failed("cublasSetStream", cublasGetStatusString(s), device);
    }
    double *pinned = NULL;
    e = cudaMallocHost((void **)&pinned, 8 * sizeof(double));
    if (e != cudaSuccess) {
        cublasDestroy(blas);
        cudaStreamDestroy(stream);
        return init_failed("cudaMallocHost", cudaGetErrorString(e), device);
    }
    ctx_.device = device;
    ctx_.sm_count = sm;
    ctx_.stream = stream;
    ctx_.blas = blas;
    ctx_.pinned = pinned;
    ctx_.status = MG_OK;
    ctx_.ready = 1;
    apply_math_mode();
    return ctx_.status;
}

extern "C" int mg_cuda_synchronize(void) {
    if (!ctx_.ready) return MG_OK;
    cuda_ok("cudaStreamSynchronize", cudaStreamSynchronize(ctx_.stream));
    if (ctx_.status != MG_OK) return mg_error(ctx_.status, "%s", ctx_.message);
    return MG_OK;
}

extern "C" void *mg_cuda_stream(void) { return ctx_.ready ? (void *)ctx_.stream : NULL; }

extern "C" int mg_cuda_is_device_pointer(const void *p) {
    if (!p) return 0;
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* older runtimes refuse plain host pointers */
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}
