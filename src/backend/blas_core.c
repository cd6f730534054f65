/* blas_core.c: which of OpenBLAS's kernels this process runs.
 *
 * A DYNAMIC_ARCH OpenBLAS picks its kernels once, when it loads, from the CPU or
 * from OPENBLAS_CORETYPE. The pick sets the GEMM rate (on this project's AMD
 * machines, pinned to Haswell's AVX2 kernels, sgemm runs at half what the same
 * release's AVX-512 kernels reach: docs/PERFORMANCE.md), so `meshgrad --version`
 * and the benchmarks name it beside their figures.
 * Exports mg_blas_core (backend.h). */
#include "backend/backend.h"

/* OpenBLAS's own call (declared again here in case cblas.h is not OpenBLAS's). */
char *openblas_get_corename(void);

const char *mg_blas_core(void) {
    const char *name = openblas_get_corename();
    return name && *name ? name : "unknown";
}
