/* cuda.cu: the CUDA backend's core: the device, its compute stream, device
 * memory, error keeping, the vtable and the runtime hooks of device.h. The
 * kernels live in cuda_kernels.cu, cuda_reduce.cu, cuda_nn.cu and
 * cuda_attention.cu, the GEMMs in cuda_blas.cu (cuda_internal.h says what they
 * share).
 *
 * The backend has the semantics of cpu.c (zero-size tensors, broadcasting,
 * reductions over any set of dims, NaN-winning max, sums accumulated in double,
 * bad labels counted). One compute stream per process (cudaStreamNonBlocking);
 * every kernel and cuBLAS call runs on it. Reductions are deterministic: a run
 * repeats bitwise.
 *
 * Kernels only enqueue; calls that hand a value to the host (to_host, from_host,
 * sum_squares, cross_entropy) wait for the stream. The iface returns void, so
 * the first CUDA/cuBLAS error is kept with its message (and set as the thread's
 * mg_error) and reported by mg_cuda_synchronize(); alloc returns NULL on failure.
 *
 * cuBLAS is not linked: cuda_blas.cu loads it with dlopen when the backend is
 * made, so processes that never use a GPU do not pay for it (libcublasLt alone
 * touches ~145 MB when loaded).
 *
 * Exports: mg_backend_cuda, mg_cuda_backend_init, mg_cuda_device_count,
 * mg_cuda_describe, mg_cuda_device, mg_cuda_synchronize, mg_cuda_stream, mg_cuda_is_device_pointer
 * (device.h); mg_cu, mg_cu_keep_error (cuda_internal.h). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "backend/device.h"
#include "context.h"
}
#include "backend/cuda_internal.h"

/* the backend's state (cuda_internal.h says why it is process-wide) */
mg_cu_state mg_cu;

/* ---- errors --------------------------------------------------------------------- */

void mg_cu_keep_error(const char *what, const char *detail) {
    if (mg_cu.status == MG_OK) {
        mg_cu.status = MG_EDEVICE;
        snprintf(mg_cu.message, sizeof mg_cu.message, "CUDA backend: %s failed: %s", what, detail);
    }
    mg_error(MG_EDEVICE, "CUDA backend: %s failed: %s", what, detail);
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

/* n floats between host and device memory, on the stream, waited for */
static void copy_sync(const char *what, float *dst, const float *src, int64_t n,
                      cudaMemcpyKind kind) {
    if (n <= 0) return;
    if (cuda_ok(what, cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float), kind, mg_cu.stream)))
        cuda_ok("cudaStreamSynchronize", cudaStreamSynchronize(mg_cu.stream));
}

static void cuda_to_host(void *ctx, float *dst_host, const float *src, int64_t n) {
    (void)ctx;
    copy_sync("cudaMemcpyAsync (to host)", dst_host, src, n, cudaMemcpyDeviceToHost);
}

static void cuda_from_host(void *ctx, float *dst, const float *src_host, int64_t n) {
    (void)ctx;
    copy_sync("cudaMemcpyAsync (from host)", dst, src_host, n, cudaMemcpyHostToDevice);
}

static void cuda_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    if (bytes)
        cuda_ok("cudaMemcpyAsync (device)",
                cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, mg_cu.stream));
}

static void cuda_zero(void *ctx, void *dst, size_t bytes) {
    (void)ctx;
    if (bytes) cuda_ok("cudaMemsetAsync", cudaMemsetAsync(dst, 0, bytes, mg_cu.stream));
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
    mg_cu_blas_iface(&f);
    mg_cu_kernels_iface(&f);
    mg_cu_reduce_iface(&f);
    mg_cu_nn_iface(&f);
    mg_cu_rms_norm_iface(&f);
    mg_cu_rope_iface(&f);
    mg_cu_attention_iface(&f);
    return f;
}

static const struct mg_backend_iface cuda_iface = make_iface();
/* The vtable with its context: set here once, never written. */
static mg_backend cuda_backend = {&cuda_iface, &mg_cu};

extern "C" mg_backend *mg_backend_cuda(void) { return mg_cu.ready ? &cuda_backend : NULL; }

extern "C" int mg_cuda_device_count(void) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError(); /* no driver or no device: not an error of ours */
        return 0;
    }
    return count;
}

extern "C" int mg_cuda_describe(char *out, size_t len) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        cudaGetLastError();
        snprintf(out, len, "no device visible (cudaGetDeviceCount: %s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 0;
    }
    int n = snprintf(out, len, "%d device%s visible", count, count == 1 ? "" : "s");
    for (int d = 0; d < count && n > 0 && (size_t)n < len; d++) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, d) != cudaSuccess) {
            cudaGetLastError();
            continue;
        }
        n += snprintf(out + n, len - (size_t)n, "%s %d: %s (sm_%d%d, %.0f GiB)", d ? ";" : ":", d,
                      p.name, p.major, p.minor, (double)p.totalGlobalMem / (1 << 30));
    }
    return count;
}

extern "C" int mg_cuda_device(void) { return mg_cu.ready ? mg_cu.device : -1; }

static int init_failed(const char *what, const char *detail, int device) {
    return mg_error(MG_EDEVICE, "CUDA backend on device %d: %s failed: %s", device, what, detail);
}

/* Tensors and arenas on this device take their memory from here (context.h). */
static void register_memory(void) {
    mg_device_memory m = {cuda_alloc, cuda_free, cuda_copy, cuda_zero, &mg_cu, MG_DEVICE_CUDA};
    mg_ctx()->memory[MG_DEVICE_CUDA] = m;
}

extern "C" int mg_cuda_backend_init(int device) {
    if (mg_cu.ready) {
        if (device != mg_cu.device)
            return mg_error(MG_EDEVICE, "CUDA backend: already running on device %d, cannot "
                                        "move to %d", mg_cu.device, device);
        register_memory();
        return MG_OK;
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
    double *pinned = NULL;
    e = cudaMallocHost((void **)&pinned, 8 * sizeof(double));
    if (e != cudaSuccess) {
        cudaStreamDestroy(stream);
        return init_failed("cudaMallocHost", cudaGetErrorString(e), device);
    }
    int rc = mg_cu_blas_open(device, stream); /* loads cuBLAS the first time */
    if (rc != MG_OK) {
        cudaFreeHost(pinned);
        cudaStreamDestroy(stream);
        return rc;
    }
    mg_cu.device = device;
    mg_cu.sm_count = sm;
    mg_cu.stream = stream;
    mg_cu.pinned = pinned;
    mg_cu.status = MG_OK;
    mg_cu.ready = 1;
    register_memory();
    return MG_OK;
}

extern "C" int mg_cuda_synchronize(void) {
    if (!mg_cu.ready) return MG_OK;
    cuda_ok("cudaStreamSynchronize", cudaStreamSynchronize(mg_cu.stream));
    if (mg_cu.status != MG_OK) return mg_error(mg_cu.status, "%s", mg_cu.message);
    return MG_OK;
}

extern "C" void *mg_cuda_stream(void) { return mg_cu.ready ? (void *)mg_cu.stream : NULL; }

extern "C" int mg_cuda_is_device_pointer(const void *p) {
    if (!p) return 0;
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* older runtimes refuse plain host pointers */
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}
