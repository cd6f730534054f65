/* backend.c: what every backend shares: the pointwise kernels' names (from
 * kernel_math.h's lists), mg_backend_of(tensor), the bf16 GEMM switch and
 * the CPU thread setting.
 * Exports: mg_binary_names, mg_unary_names, mg_backend_of, mg_backend_cuda (a
 * stub returning NULL when built without CUDA), mg_backend_set_gemm_bf16,
 * mg_backend_gemm_bf16, mg_set_compute_dtype, mg_get_compute_dtype (meshgrad.h),
 * mg_backend_cpu_set_threads, mg_backend_cpu_threads,
 * mg_backend_cpu_usable,
 * mg_binary_dims (the broadcast layout of the binary kernels).
 * The CPU kernels live in cpu*.c, the CUDA ones in cuda*.cu. */
#include "config.h"

#include "backend/backend.h"

#include <assert.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "context.h"
#include "status.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* OpenBLAS's own calls (declared again here in case cblas.h is not OpenBLAS's). */
void openblas_set_num_threads(int num_threads);
int openblas_get_parallel(void); /* 0 sequential, 1 pthreads, 2 OpenMP */

#define KERNEL_NAME(E, name, f) #name,
const char *const mg_binary_names[MG_BINARY_COUNT] = {MG_BINARY_KERNELS(KERNEL_NAME)};
const char *const mg_unary_names[MG_UNARY_COUNT] = {MG_UNARY_KERNELS(KERNEL_NAME)};

#ifndef MG_HAVE_CUDA
mg_backend *mg_backend_cuda(void) { return NULL; }
#endif

mg_backend *mg_backend_of(const mg_tensor *t) {
    if (!t) return NULL;
    if (t->device == MG_DEVICE_CUDA) return mg_backend_cuda();
    if (t->device == MG_DEVICE_CPU) return mg_backend_cpu();
    if (t->device == MG_DEVICE_META) return mg_backend_meta();
    return NULL;
}

/* ---- broadcasting ------------------------------------------------------------- */

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

int mg_binary_dims(const mg_tensor *a, const mg_tensor *b, const mg_tensor *out, int64_t *n,
                   int64_t *sa, int64_t *sb) {
    int64_t sa_full[MG_MAX_DIMS], sb_full[MG_MAX_DIMS];
    broadcast_strides(a, out, sa_full);
    broadcast_strides(b, out, sb_full);
    int k = 0;
    for (int i = 0; i < out->ndim; i++) {
        if (out->shape[i] == 1) continue;
        if (k > 0 && sa[k - 1] == sa_full[i] * out->shape[i] &&
            sb[k - 1] == sb_full[i] * out->shape[i]) {
            n[k - 1] *= out->shape[i];
            sa[k - 1] = sa_full[i];
            sb[k - 1] = sb_full[i];
            continue;
        }
        n[k] = out->shape[i];
        sa[k] = sa_full[i];
        sb[k] = sb_full[i];
        k++;
    }
    return k;
}

/* ---- bf16 GEMMs ---------------------------------------------------------------- */

void mg_backend_set_gemm_bf16(int on) {
    mg_ctx()->gemm_bf16 = on ? 1 : 0;
    mg_backend_bf16_weights_changed();
}

int mg_backend_gemm_bf16(void) { return mg_ctx()->gemm_bf16; }

int mg_set_compute_dtype(mg_dtype dtype) {
    if (dtype != MG_DTYPE_FP32 && dtype != MG_DTYPE_BF16)
        return mg_error(MG_EINVAL, "mg_set_compute_dtype: %d is not MG_DTYPE_FP32 (0) or "
                                   "MG_DTYPE_BF16 (1)", (int)dtype);
    mg_backend_set_gemm_bf16(dtype == MG_DTYPE_BF16);
    return MG_OK;
}

mg_dtype mg_get_compute_dtype(void) { return mg_ctx()->gemm_bf16 ? MG_DTYPE_BF16 : MG_DTYPE_FP32; }

/* ---- CPU threads --------------------------------------------------------------- */

/* The CPUs this process may run on: mpirun binds each rank to one core by
 * default (for up to 2 ranks), and then more threads only take turns. */
long mg_backend_cpu_usable(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return cores >= 1 ? cores : 1;
}

/* online cores / ranks on this node (Open MPI tells us the latter), no more
 * than the CPUs this rank is bound to, at least 1 */
static int default_threads(void) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    long local_ranks = 1;
    const char *s = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (s) {
        long v = strtol(s, NULL, 10);
        if (v > 0) local_ranks = v;
    }
    long n = cores / local_ranks, usable = mg_backend_cpu_usable();
    if (n > usable) n = usable;
    return n >= 1 ? (int)n : 1;
}

void mg_backend_cpu_set_threads(int threads) {
    long usable = mg_backend_cpu_usable();
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (threads > usable && (!rank || strcmp(rank, "0") == 0))
        fprintf(stderr,
                "meshgrad: warning: %d threads per rank, but this rank may only run on %ld CPU%s "
                "(mpirun binds ranks to cores): the threads will take turns; give each rank "
                "its CPUs with mpirun --map-by slot:PE=%d (or --bind-to none)\n",
                threads, usable, usable == 1 ? "" : "s", threads);
    int n = threads > 0 ? threads : default_threads();
    mg_ctx()->cpu_threads = n;
    openblas_set_num_threads(n);
#ifdef _OPENMP
    /* The threads go to GEMM. With a pthreads OpenBLAS (Debian's default) our
     * OpenMP loops would keep a second pool whose idle threads spin on the
     * same cores as OpenBLAS's, and a 2-thread step ran far slower.
     * Those loops are memory-bound anyway, so they share threads only with an
     * OpenMP OpenBLAS (one pool) and stay on one thread otherwise. */
    omp_set_num_threads(openblas_get_parallel() == 2 ? n : 1);
#endif
}

int mg_backend_cpu_threads(void) {
    if (mg_ctx()->cpu_threads == 0) mg_backend_cpu_set_threads(0);
    return mg_ctx()->cpu_threads;
}
