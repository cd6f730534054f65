/* world.c: the processes of a job. mg_init starts MPI unless the program
 * already did (then mg_finalize leaves it running) and sets MPI_ERRORS_RETURN
 * on MPI_COMM_WORLD so that MPI failures come back as MG_ECOMM instead of
 * aborting; mg_finalize prints the collective counters on rank 0 when
 * MG_COMM_DEBUG=1, frees the library's state (context.h: first what the files
 * above this one registered with mg_world_on_finalize, world.h, then the comm
 * files' below it) and stops MPI if it started it. mg_set_device gives every
 * rank the same device kind, a GPU each (its rank on its node modulo the
 * node's GPUs), or refuses on every rank. mg_init also warns once (rank 0)
 * when OpenBLAS runs poorer kernels than the CPU has (backend/blas_core.h).
 * Exports: mg_world_on_finalize, mg_check_not_finalized (context.h), and the
 * public mg_init, mg_finalize, mg_rank, mg_world_size, mg_version,
 * mg_set_device. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/blas_core.h"
#include "backend/device.h"
#include "backend/trace_kernels.h"
#include "context.h"
#include "dist/comm.h"
#include "dist/comm_info.h"
#include "dist/dist_state.h"
#include "dist/flight.h"
#include "dist/watchdog.h"
#include "dist/world.h"
#include "meshgrad.h"
#include "status.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "0.1.0"
#endif

/* Collective over `node`: the CPUs its ranks may run on together, the union
 * of their affinity masks (a container's cpuset, mpirun's binding), or the
 * machine's online CPUs where a mask cannot be read. */
static int node_cpus(MPI_Comm node) {
    cpu_set_t set;
    CPU_ZERO(&set);
    int ok = sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0;
    if (node != MPI_COMM_NULL) {
        MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND, node);
        if (ok) MPI_Allreduce(MPI_IN_PLACE, &set, (int)sizeof set, MPI_BYTE, MPI_BOR, node);
    }
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return ok ? CPU_COUNT(&set) : online > 0 ? (int)online : 1;
}

/* Collective: how many ranks run on this machine and which of them this one
 * is, whether they are all of them, the CPUs they may run on (node_cpus), and
 * whether they outnumber them. When they do, a rank that waits
 * for a message naps (comm_p2p.c) instead of spinning: a spinning rank stays
 * runnable, and the scheduler, balancing runnable ranks, may leave two
 * computing ranks on one core and the waiters on the other. */
static void count_node(mg_dist_state *c) {
    MPI_Comm node = MPI_COMM_NULL;
    int on_node = 1, world = 1, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) !=
        MPI_SUCCESS)
        node = MPI_COMM_NULL;
    if (node != MPI_COMM_NULL) {
        MPI_Comm_size(node, &on_node);
        MPI_Comm_rank(node, &rank);
    }
    c->node_cpus = node_cpus(node);
    if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
    mg_ctx()->node_ranks = on_node;
    c->node_rank = rank;
    c->node_is_world = on_node == world;
    c->oversubscribed = on_node > c->node_cpus;
}

/* Set by mg_finalize, cleared by mg_init (a program that runs MPI itself may
 * start the library again): outside the context, which mg_finalize zeroes. */
static int library_finalized;

int mg_init(int *argc, char ***argv) {
    int initialized = 0, finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized)
        return mg_error(MG_ESTATE, "mg_init: MPI was already finalized; call mg_init once, "
                                   "before mg_finalize");
    mg_dist_state *c = mg_dist();
    if (c->started) return MG_OK;
    library_finalized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
        int provided = 0;
        int err = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        if (err != MPI_SUCCESS)
            return mg_error(MG_ECOMM, "mg_init: MPI_Init failed (error %d)", err);
        c->started_mpi = 1;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    count_node(c);
    c->started = 1;
    /* OpenBLAS's kernels are chosen as it loads; the library cannot undo a poor
     * pick (the meshgrad program runs itself again before this), only say it */
    if (mg_rank() == 0) mg_blas_core_warn_once(stderr);
    return MG_OK;
}

int mg_check_not_finalized(const char *who) { /* every op asks: a flag, no call into MPI */
    if (!library_finalized) return MG_OK;
    return mg_error(MG_ESTATE, "%s: called after mg_finalize, whose meshes and tensors are gone: "
                    "call mg_finalize last, after every use of them", who);
}

int mg_world_on_finalize(void (*fn)(void)) {
    mg_dist_state *c = mg_dist();
    for (int i = 0; i < c->n_finalizers; i++)
        if (c->finalizers[i] == fn) return MG_OK;
    if (c->n_finalizers == MG_FINALIZERS)
        return mg_error(MG_ESTATE, "mg_world_on_finalize: %d finalizers registered already",
                        MG_FINALIZERS);
    c->finalizers[c->n_finalizers++] = fn;
    return MG_OK;
}

void mg_finalize(void) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized) return;
    library_finalized = 1;
    const char *debug = getenv("MG_COMM_DEBUG");
    if (debug && strcmp(debug, "1") == 0 && mg_rank() == 0) mg_comm_stats_print(stderr);
    mg_dist_state *c = mg_dist();
    int we_started_mpi = c->started_mpi;
    for (int i = c->n_finalizers - 1; i >= 0; i--) c->finalizers[i]();
    mg_comm_free(c->world);
    mg_backend_trace_kernels(false); /* a trace the program left recording */
    mg_watchdog_free();
    mg_flight_free();
    mg_comm_info_free();
    mg_context_reset();
    if (we_started_mpi) MPI_Finalize();
}

static int mpi_running(void) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    return initialized && !finalized;
}

int mg_rank(void) {
    int rank = 0;
    if (mpi_running()) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

int mg_world_size(void) {
    int size = 1;
    if (mpi_running()) MPI_Comm_size(MPI_COMM_WORLD, &size);
    return size;
}

const char *mg_version(void) { return PACKAGE_VERSION; }

/* ---- the device of every rank ---------------------------------------------------- */

#ifdef MG_HAVE_CUDA
/* Collective: this rank's GPU is its rank on its node modulo the GPUs it sees;
 * the backend is made on it (again on the same one: MG_OK). */
static int cuda_start(void) {
    mg_dist_state *c = mg_dist();
    if (!mg_ctx()->node_ranks) count_node(c); /* MPI was started without mg_init */
    int rank = c->node_rank, size = mg_ctx()->node_ranks;
    int count = mg_cuda_device_count();
    if (count == 0)
        return mg_error(MG_EDEVICE, "no CUDA device found on rank %d (no GPU, no driver, or "
                                    "CUDA_VISIBLE_DEVICES hides them): run on the CPU "
                                    "(--device cpu)", mg_rank());
    if (size > count)
        return mg_error(MG_EDEVICE, "%d ranks run on this node but it has %d GPU%s: NCCL needs one "
                                    "GPU per rank; start at most %d rank%s per node",
                        size, count, count == 1 ? "" : "s", count, count == 1 ? "" : "s");
    return mg_cuda_backend_init(rank % count);
}
#endif

int mg_set_device(int device) {
    if (device == MG_DEVICE_CPU) return mg_device_use(MG_DEVICE_CPU);
    if (device != MG_DEVICE_CUDA)
        return mg_error(MG_EINVAL, "mg_set_device: unknown device %d (use MG_DEVICE_CPU or "
                                   "MG_DEVICE_CUDA)", device);
    if (!mpi_running()) return mg_error(MG_ESTATE, "mg_set_device: call mg_init first");
    if (mg_get_deterministic())
        return mg_error(MG_EINVAL, "mg_set_device: the deterministic mode runs on the CPU only "
                                   "(CUDA would need GEMMs of a fixed order and NCCL sums of a "
                                   "fixed tree): turn it off first, or stay on the CPU");
#ifndef MG_HAVE_CUDA
    return mg_error(MG_EDEVICE, "mg_set_device: this meshgrad was built without CUDA (configure "
                                "found no nvcc, cuBLAS or NCCL): rebuild with --with-cuda, or run "
                                "on the CPU");
#else
    int mine = cuda_start();
    /* every rank must be on the same device kind, or the meshes would differ */
    int where = -1;
    int rc = mg_status_agree_rank(mine, &where);
    if (rc != MG_OK) {
        if (mine == MG_OK)
            mg_error(rc, "mg_set_device: rank %d could not use a GPU (see its error); every rank "
                         "stays on the CPU", where);
        return rc;
    }
    return mg_device_use(MG_DEVICE_CUDA);
#endif
}
