/* device.h: where tensors live. The device choice (public mg_get_device /
 * mg_device_synchronize in meshgrad.h; mg_set_device is in dist/world.c), moving
 * local tensors between host and device, and the CUDA runtime hooks the C side
 * needs (device selection, the compute stream, TF32, pointer kinds).
 *
 * Everything here is declared in every build. Without CUDA (MG_HAVE_CUDA off)
 * the CUDA calls are stubs: mg_cuda_backend_init returns MG_EDEVICE, the
 * queries return 0 / NULL / -1.
 *
 * Exports: mg_tensor_copy_any, mg_tensor_to_device, mg_device_use (device.c);
 * mg_cuda_backend_init, mg_cuda_device_count, mg_cuda_describe, mg_cuda_device,
 * mg_backend_cuda_set_tf32, mg_backend_cuda_tf32, mg_cuda_synchronize,
 * mg_cuda_stream, mg_cuda_is_device_pointer (cuda.cu). */
#ifndef MG_BACKEND_DEVICE_H
#define MG_BACKEND_DEVICE_H

#include <stddef.h>

#include "arena.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst = src (same numel), whatever device each lives on. */
int mg_tensor_copy_any(const mg_tensor *src, mg_tensor *dst);
/* t moved to `device`: t itself when it is there already, else a new tensor
 * (from `arena`, or the heap when NULL) holding a copy. Takes t: a heap t is
 * freed once copied, also on failure (then NULL with a message). */
mg_tensor *mg_tensor_to_device(mg_arena *arena, mg_tensor *t, int device);

/* New tensors live on `device` from now on (mg_get_device), whose backend must
 * be running; the collective choice is mg_set_device (dist/world.c). */
int mg_device_use(int device);
/* Makes the CUDA backend on `device`: its stream and cuBLAS handle. Once per
 * process (again on the same device: MG_OK; on another: MG_EDEVICE). */
int mg_cuda_backend_init(int device);
int mg_cuda_device_count(void); /* GPUs this process sees; 0 without driver or GPU */
/* CUDA builds only (no stub; needs no MPI): the GPUs this process sees, as
 * "1 device visible: 0: NAME (sm_90, 140 GiB)", or when none, why ("no device
 * visible (cudaGetDeviceCount: ...)"), in out[len]. Returns their number. */
int mg_cuda_describe(char *out, size_t len);
int mg_cuda_device(void);       /* the backend's device; -1 before mg_cuda_backend_init */
/* TF32 tensor-core math for the GEMMs (off by default: plain fp32). May be
 * called before the backend exists; applies from the next GEMM. */
void mg_backend_cuda_set_tf32(int on);
int mg_backend_cuda_tf32(void);
/* Waits for the compute stream. Returns MG_OK, or MG_EDEVICE with the first
 * CUDA/cuBLAS error any kernel met (kernels return void: errors are kept). */
int mg_cuda_synchronize(void);
void *mg_cuda_stream(void);                  /* the compute stream (cudaStream_t); NULL before init */
int mg_cuda_is_device_pointer(const void *p); /* 1 for device or managed memory */

#ifdef __cplusplus
}
#endif
#endif
