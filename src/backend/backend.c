/* backend.c: what every backend shares: the op name tables (kept in step with
 * the enums by static_assert), mg_backend_of(tensor), and the CPU thread setting.
 * Exports: mg_binary_names, mg_unary_names, mg_backend_of, mg_backend_cuda (a
 * stub returning NULL when built without CUDA), mg_backend_cpu_set_threads,
 * mg_backend_cpu_threads. The CPU kernels live in cpu.c, the CUDA ones in cuda.cu. */
#include "config.h"

#include "backend/backend.h"

#include <assert.h>
#include <stdlib.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* OpenBLAS's own call (declared again here in case cblas.h is not OpenBLAS's). */
void openblas_set_num_threads(int num_threads);

const char *const mg_binary_names[MG_BINARY_COUNT] = {
    "add", "sub", "mul", "div", "relu_backward", "gelu_backward",
};
static_assert(MG_BINARY_COUNT == 6, "mg_binary_op changed: update mg_binary_names");

const char *const mg_unary_names[MG_UNARY_COUNT] = {
    "relu", "gelu", "scale", "exp", "log", "square",
};
static_assert(MG_UNARY_COUNT == 6, "mg_unary_op changed: update mg_unary_names");

#ifndef MG_HAVE_CUDA
mg_backend *mg_backend_cuda(void) { return NULL; }
#endif

mg_backend *mg_backend_of(const mg_tensor *t) {
    if (!t) return NULL;
    if (t->device == MG_DEVICE_CUDA) return mg_backend_cuda();
    if (t->device == MG_DEVICE_CPU) return mg_backend_cpu();
    return NULL;
}

/* ---- CPU threads --------------------------------------------------------------- */

static int cpu_threads; /* 0 until first set */

/* online cores / ranks on this node (Open MPI tells us the latter), at least 1 */
static int default_threads(void) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    long local_ranks = 1;
    const char *s = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (s) {
        long v = strtol(s, NULL, 10);
        if (v > 0) local_ranks = v;
    }
    long n = cores / local_ranks;
    return n >= 1 ? (int)n : 1;
}

void mg_backend_cpu_set_threads(int threads) {
    cpu_threads = threads > 0 ? threads : default_threads();
    openblas_set_num_threads(cpu_threads);
#ifdef _OPENMP
    omp_set_num_threads(cpu_threads);
#endif
}

int mg_backend_cpu_threads(void) {
    if (cpu_threads == 0) mg_backend_cpu_set_threads(0);
    return cpu_threads;
}
