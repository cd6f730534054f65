/* cuda_internal.h: what the files of the CUDA backend share (nvcc only, C++):
 * the process-wide context (device, stream, sticky first error), the error
 * helpers, grid sizing, the kernel-loop macros, and the hooks by which each
 * file fills its part of the backend vtable.
 *
 * cuda.cu        device, stream, memory, the vtable, the device.h hooks
 * cuda_blas.cu   cuBLAS, loaded with dlopen on first use; gemm, gemm_batched
 * cuda_kernels.cu layout, elementwise and optimizer kernels
 * cuda_reduce.cu reductions, sum of squares, softmax and cross-entropy
 *
 * Exports (hidden from the library's symbol table): mg_cu, mg_cu_keep_error,
 * mg_cu_blas_open, mg_cu_blas_iface, mg_cu_kernels_iface, mg_cu_reduce_iface,
 * and the inline helpers cuda_ok, grid_for, ceil_div. */
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

static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

#define FOR_EACH(i, n)                                                                   \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);            \
         i += (int64_t)blockDim.x * gridDim.x)

/* Up to MG_MAX_DIMS sizes or strides, passed to kernels by value. */
typedef struct {
    int64_t v[MG_MAX_DIMS];
} dims8;

/* cuda_blas.cu: loads cuBLAS (once), makes the handle on `stream` with the TF32
 * setting applied. MG_OK, or MG_EDEVICE with a message naming what is missing. */
MG_CU_HIDDEN int mg_cu_blas_open(int device, cudaStream_t stream);

/* Each file sets the vtable entries it implements. */
MG_CU_HIDDEN void mg_cu_blas_iface(struct mg_backend_iface *f);    /* gemm, gemm_batched */
MG_CU_HIDDEN void mg_cu_kernels_iface(struct mg_backend_iface *f); /* layout, elementwise, optim */
MG_CU_HIDDEN void mg_cu_reduce_iface(struct mg_backend_iface *f);  /* reductions, losses */

#endif
