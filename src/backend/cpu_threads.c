/* cpu_threads.c: how many threads the CPU kernels run on (kept in the
 * context), OpenBLAS's and OpenMP's set to match.
 * Exports: mg_backend_cpu_usable, mg_backend_cpu_set_threads,
 * mg_backend_cpu_threads (backend.h). */
#include "config.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/backend_state.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* OpenBLAS's own calls (declared again here in case cblas.h is not OpenBLAS's). */
void openblas_set_num_threads(int num_threads);
int openblas_get_parallel(void); /* 0 sequential, 1 pthreads, 2 OpenMP */

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
    mg_backend_ctx()->cpu_threads = n;
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
    if (mg_backend_ctx()->cpu_threads == 0) mg_backend_cpu_set_threads(0);
    return mg_backend_ctx()->cpu_threads;
}
