/* cuda_blas.cu: the GEMMs of the CUDA backend, on cuBLAS loaded at run time.
 *
 * libmeshgrad does not link cuBLAS: loading libcublas pulls in libcublasLt,
 * whose start-up touches ~145 MB in every process, GPU or not. The first
 * mg_cuda_backend_init dlopens libcublas.so.<CUBLAS_VER_MAJOR> (the major
 * version of the cuBLAS headers this was built with) and looks up the few
 * functions used here; a missing library or symbol fails that init with a
 * message, it never crashes. The library stays loaded for the process.
 *
 * Row-major GEMMs go to cuBLAS (column-major) through C^T = op(B)^T op(A)^T: the
 * operands swap, the transpose flags stay, no transposed copies. TF32
 * tensor-core math only when asked (mg_backend_cuda_set_tf32). In bf16 mode
 * (mg_backend_set_gemm_bf16) A and B are rounded to bf16 (__float2bfloat16_rn:
 * to nearest, ties to even, as cpu_bf16.c) into two reused device buffers and
 * multiplied by cublasGemmStridedBatchedEx with fp32 compute into fp32 C. The
 * handle is bound to the backend's stream.
 *
 * Exports: mg_backend_cuda_set_tf32, mg_backend_cuda_tf32 (device.h);
 * mg_cu_blas_open, mg_cu_blas_iface (cuda_internal.h). */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <dlfcn.h>
#include <stddef.h>

extern "C" {
#include "backend/device.h"
}
#include "backend/cuda_internal.h"

/* ---- loading cuBLAS ------------------------------------------------------------- */

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x) /* expands x first: cublasCreate -> "cublasCreate_v2" */

#ifdef CUBLAS_VER_MAJOR
#define CUBLAS_SONAME "libcublas.so." STRINGIFY(CUBLAS_VER_MAJOR)
#else
#define CUBLAS_SONAME "libcublas.so"
#endif

/* Every cuBLAS function used: X(member of `blas`, cuBLAS name). cublas_v2.h maps
 * several names by macro (cublasCreate -> cublasCreate_v2, cublasSgemm_64 ->
 * cublasSgemm_v2_64); STRINGIFY gives dlsym the real symbol. */
#define BLAS_FUNCTIONS(X)                                                                \
    X(create, cublasCreate)                                                              \
    X(destroy, cublasDestroy)                                                            \
    X(set_stream, cublasSetStream)                                                       \
    X(set_math_mode, cublasSetMathMode)                                                  \
    X(status_string, cublasGetStatusString)                                              \
    X(sgemm, cublasSgemm_64)                                                             \
    X(sgemm_strided_batched, cublasSgemmStridedBatched_64)                               \
    X(gemm_strided_batched_ex, cublasGemmStridedBatchedEx_64)

/* cuBLAS's entry points, looked up once: like the library they come from, they
 * belong to the process. */
static struct {
    void *lib; /* dlopen handle; NULL until loaded */
#define MEMBER(name, fn) decltype(&fn) name;
    BLAS_FUNCTIONS(MEMBER)
#undef MEMBER
} blas;

static cublasHandle_t handle(void) { return (cublasHandle_t)mg_cu.blas; }

/* dlopens cuBLAS and fills `blas`; MG_OK, or MG_EDEVICE (nothing kept) */
static int load_cublas(void) {
    if (blas.lib) return MG_OK;
    void *lib = dlopen(CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        return mg_error(MG_EDEVICE,
                        "CUDA backend: cannot load cuBLAS: %s; install cuBLAS (the CUDA "
                        "toolkit's libcublas) or add the folder holding " CUBLAS_SONAME
                        " to LD_LIBRARY_PATH",
                        why ? why : "dlopen(" CUBLAS_SONAME ") failed");
    }
#define LOOK_UP(name, fn)                                                                \
    blas.name = (decltype(&fn))dlsym(lib, STRINGIFY(fn));                                \
    if (!blas.name) {                                                                    \
        dlclose(lib);                                                                    \
        blas = {};                                                                       \
        return mg_error(MG_EDEVICE,                                                      \
                        "CUDA backend: " CUBLAS_SONAME " has no " STRINGIFY(fn)          \
                        " (another cuBLAS than this was built with?); install that "     \
                        "cuBLAS or set LD_LIBRARY_PATH to its folder");                  \
    }
    BLAS_FUNCTIONS(LOOK_UP)
#undef LOOK_UP
    blas.lib = lib;
    return MG_OK;
}

static bool blas_ok(const char *what, cublasStatus_t s) {
    if (s == CUBLAS_STATUS_SUCCESS) return true;
    mg_cu_keep_error(what, blas.status_string(s));
    return false;
}

static cublasMath_t math_mode(void) {
    return mg_cu.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
}

int mg_cu_blas_open(int device, cudaStream_t stream) {
    int rc = load_cublas();
    if (rc != MG_OK) return rc;
    const char *what = "cublasCreate";
    cublasHandle_t h;
    cublasStatus_t s = blas.create(&h);
    if (s == CUBLAS_STATUS_SUCCESS) {
        what = "cublasSetStream";
        s = blas.set_stream(h, stream);
        if (s == CUBLAS_STATUS_SUCCESS) {
            what = "cublasSetMathMode";
            s = blas.set_math_mode(h, math_mode());
        }
        if (s != CUBLAS_STATUS_SUCCESS) blas.destroy(h);
    }
    if (s != CUBLAS_STATUS_SUCCESS)
        return mg_error(MG_EDEVICE, "CUDA backend on device %d: %s failed: %s", device, what,
                        blas.status_string(s));
    mg_cu.blas = h;
    return MG_OK;
}

extern "C" void mg_backend_cuda_set_tf32(int on) {
    mg_cu.tf32 = on ? 1 : 0;
    if (mg_cu.blas) blas_ok("cublasSetMathMode", blas.set_math_mode(handle(), math_mode()));
}

extern "C" int mg_backend_cuda_tf32(void) { return mg_cu.tf32; }

/* ---- GEMMs ---------------------------------------------------------------------- */

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
    k_scale_matrices<<<grid_for(total), THREADS, 0, mg_cu.stream>>>(c, m, n, ldc, stride, batch,
                                                                     beta);
    LAUNCHED("scale kernel");
}

/* ---- bf16 inputs ---------------------------------------------------------------- */

__global__ void k_to_bf16(const float *x, __nv_bfloat16 *y, int64_t n) {
    FOR_EACH(i, n) y[i] = __float2bfloat16_rn(x[i]);
}

/* x[0, n) rounded into scratch buffer `which`; NULL after an error (kept) */
static const __nv_bfloat16 *to_bf16(int which, const float *x, int64_t n) {
    if (n > mg_cu.bf16_cap[which]) {
        int64_t cap = n + n / 4; /* room, so a slightly larger GEMM does not grow it again */
        void *p = NULL;
        if (!cuda_ok("cudaMalloc (bf16 GEMM inputs)", cudaMalloc(&p, (size_t)cap * 2))) {
            cudaGetLastError(); /* out of memory is not sticky */
            return NULL;
        }
        if (mg_cu.bf16[which]) cuda_ok("cudaFree", cudaFree(mg_cu.bf16[which]));
        mg_cu.bf16[which] = p;
        mg_cu.bf16_cap[which] = cap;
    }
    k_to_bf16<<<grid_for(n), THREADS, 0, mg_cu.stream>>>(x, (__nv_bfloat16 *)mg_cu.bf16[which], n);
    return LAUNCHED("bf16 rounding kernel") ? (__nv_bfloat16 *)mg_cu.bf16[which] : NULL;
}

/* The GEMMs below in bf16 mode (m, n, k, batch > 0): cuBLAS takes the swapped
 * operands as for sgemm. */
static void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *a, int64_t lda, int64_t stride_a, const float *b, int64_t ldb,
                      int64_t stride_b, float beta, float *c, int64_t ldc, int64_t stride_c,
                      int64_t batch) {
    // A is stored (M, K), or (K, M) when transposed; B (K, N), or (N, K)
    const __nv_bfloat16 *a16 =
        to_bf16(0, a, mg_gemm_span(trans_a ? k : m, trans_a ? m : k, lda, stride_a, batch));
    const __nv_bfloat16 *b16 =
        to_bf16(1, b, mg_gemm_span(trans_b ? n : k, trans_b ? k : n, ldb, stride_b, batch));
    if (!a16 || !b16) return;
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    blas_ok("cublasGemmStridedBatchedEx (bf16)",
            blas.gemm_strided_batched_ex(handle(), op_b, op_a, n, m, k, &alpha, b16, CUDA_R_16BF,
                                         ldb, stride_b, a16, CUDA_R_16BF, lda, stride_a, &beta, c,
                                         CUDA_R_32F, ldc, stride_c, batch, CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT));
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
    if (mg_backend_gemm_bf16()) {
        gemm_bf16(trans_a, trans_b, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
        return;
    }
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    blas_ok("cublasSgemm", blas.sgemm(handle(), op_b, op_a, n, m, k, &alpha, b, ldb, a, lda,
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
    if (mg_backend_gemm_bf16()) {
        gemm_bf16(trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c,
                  ldc, stride_c, batch);
        return;
    }
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    blas_ok("cublasSgemmStridedBatched",
            blas.sgemm_strided_batched(handle(), op_b, op_a, n, m, k, &alpha, b, ldb, stride_b,
                                       a, lda, stride_a, &beta, c, ldc, stride_c, batch));
}

void mg_cu_blas_iface(struct mg_backend_iface *f) {
    f->gemm = cuda_gemm;
    f->gemm_batched = cuda_gemm_batched;
}
