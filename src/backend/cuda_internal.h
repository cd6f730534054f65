/* cuda_internal.h: what the files of the CUDA backend share (nvcc only, C++):
 * the process-wide context (device, stream, sticky first error), the error
 * helpers, grid sizing, the kernel-loop macros, and the hooks by which each
 * file fills its part of the backend vtable.
 *
 * cuda.cu        device, stream, memory, the vtable, the device.h hooks
 * cuda_blas.cu   cuBLAS, loaded with dlopen on first use; gemm, gemm_batched
 * cuda_kernels.cu layout, elementwise and optimizer kernels
 * cuda_reduce.cu reductions, sum of squares; the device scratch for partial sums
 * cuda_nn.cu     softmax, layer norm, embedding, cross-entropy (row kernels)
 * cuda_rms_norm.cu RMS norm (row kernels)
 * cuda_rope.cu   the rotary embedding
 * cuda_attention.cu fused attention (grouped-query too)
 *
 * Exports (hidden from the library's symbol table): mg_cu, mg_cu_keep_error,
 * mg_cu_blas_open, mg_cu_scratch, mg_cu_sum_to_host, the *_iface hooks, and the
 * inline helpers cuda_ok, grid_for, ceil_div, combine, block_combine, warp_max,
 * warp_sum. */
#ifndef MG_BACKEND_CUDA_INTERNAL_H
#define MG_BACKEND_CUDA_INTERNAL_H

#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "backend/backend.h"
#include "status.h"
}

#define MG_CU_HIDDEN __attribute__((visibility("hidden")))

#define THREADS 256

/* The backend's state, set up by mg_cuda_backend_init: the backend vtable's
 * context. One per process, because a process drives one GPU on one stream
 * (NCCL allows one rank per GPU), so it is a process-wide variable (cuda.cu). */
typedef struct {
    int ready, device, sm_count;
    cudaStream_t stream;
    double *pinned; /* 8 doubles of pinned host memory for results */
    int status;     /* first error met (sticky), MG_OK before */
    char message[512];
    void *blas;     /* cuda_blas.cu: the cuBLAS handle (cublasHandle_t) */
    int tf32;       /* cuda_blas.cu: TF32 tensor-core math for the GEMMs */
    double *partial; /* cuda_reduce.cu: device scratch for reduction partials */
    size_t partial_cap;
    /* cuda_blas.cu: the bf16 copies of a GEMM's A and B, grown when a GEMM needs
     * more, never shrunk (no allocation once the step is warm); every use is on
     * the one stream, so reuse is ordered */
    void *bf16[2];
    int64_t bf16_cap[2];
} mg_cu_state;

MG_CU_HIDDEN extern mg_cu_state mg_cu;

/* Keeps the first error ("CUDA backend: <what> failed: <detail>") for
 * mg_cuda_synchronize and sets it as this thread's mg_error. */
MG_CU_HIDDEN void mg_cu_keep_error(const char *what, const char *detail);

static inline bool cuda_ok(const char *what, cudaError_t e) {
    if (e == cudaSuccess) return true;
    mg_cu_keep_error(what, cudaGetErrorString(e));
    return false;
}

#define LAUNCHED(what) cuda_ok(what, cudaGetLastError())

/* blocks for a grid-stride loop over n items */
static inline unsigned grid_for(int64_t n, int threads = THREADS) {
    int64_t blocks = (n + threads - 1) / threads;
    int64_t cap = (int64_t)(mg_cu.sm_count > 0 ? mg_cu.sm_count : 16) * 32;
    if (blocks > cap) blocks = cap;
    return (unsigned)(blocks > 0 ? blocks : 1);
}

static __host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

#define FOR_EACH(i, n)                                                                   \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);            \
         i += (int64_t)blockDim.x * gridDim.x)

/* Up to MG_MAX_DIMS sizes or strides, passed to kernels by value. */
typedef struct {
    int64_t v[MG_MAX_DIMS];
} dims8;

/* sum, or max where NaN wins (as in torch and cpu.c) */
static __device__ __forceinline__ double combine(bool max, double acc, double v) {
    if (!max) return acc + v;
    return (v > acc || v != v) ? v : acc;
}

/* Reduces `acc` over the block (THREADS threads) in a fixed tree; the result is
 * valid in thread 0. */
static __device__ __forceinline__ double block_combine(bool max, double acc) {
    __shared__ double sh[THREADS];
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            sh[threadIdx.x] = combine(max, sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads(); /* sh is reused by the next call */
    return r;
}

static __device__ __forceinline__ float max_nan(float a, float b) {
    return (b > a || b != b) ? b : a;
}

/* over the 32 lanes of a warp; every lane gets the result */
static __device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static __device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* kernels that give each row a warp: this warp's index and the number of warps */
#define WARP_ID ((int64_t)(blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5)
#define WARPS ((int64_t)gridDim.x * blockDim.x >> 5)

/* blocks for a kernel with one warp a row */
static inline unsigned row_blocks(int64_t rows) { return grid_for(rows * 32); }

/* cuda_reduce.cu: device scratch of at least n doubles for partial sums (grows
 * rarely; a new size syncs the device), NULL after an error. Index 0 is where
 * mg_cu_sum_to_host puts its result: partials go from index 1. */
MG_CU_HIDDEN double *mg_cu_scratch(int64_t n);
/* The sum (in a fixed order) of the n doubles at scratch + 1, on the host;
 * waits for the stream. 0 after an error. */
MG_CU_HIDDEN double mg_cu_sum_to_host(int64_t n);

/* cuda_blas.cu: loads cuBLAS (once), makes the handle on `stream` with the TF32
 * setting applied. MG_OK, or MG_EDEVICE with a message naming what is missing. */
MG_CU_HIDDEN int mg_cu_blas_open(int device, cudaStream_t stream);

/* Each file sets the vtable entries it implements. */
MG_CU_HIDDEN void mg_cu_blas_iface(struct mg_backend_iface *f);    /* gemm, gemm_batched */
MG_CU_HIDDEN void mg_cu_kernels_iface(struct mg_backend_iface *f); /* layout, elementwise, optim */
MG_CU_HIDDEN void mg_cu_reduce_iface(struct mg_backend_iface *f);  /* reductions */
MG_CU_HIDDEN void mg_cu_nn_iface(struct mg_backend_iface *f);      /* softmax ... cross-entropy */
MG_CU_HIDDEN void mg_cu_rms_norm_iface(struct mg_backend_iface *f);  /* RMS norm */
MG_CU_HIDDEN void mg_cu_rope_iface(struct mg_backend_iface *f);      /* rotary embedding */
MG_CU_HIDDEN void mg_cu_attention_iface(struct mg_backend_iface *f); /* attention */

#endif
