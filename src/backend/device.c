/* device.c: where tensors live (see device.h). The process-wide device choice
 * (public mg_set_device / mg_get_device / mg_device_synchronize), copies of
 * local tensors across devices, and mg_cuda_init, which gives each rank of a
 * node its own GPU: the rank on the node (MPI_Comm_split_type SHARED) modulo
 * the GPUs the process sees. Without CUDA, the CUDA hooks of device.h are stubs
 * here (cuda.cu defines them otherwise).
 * Exports: mg_set_device, mg_get_device, mg_device_synchronize, mg_tensor_copy_any,
 * mg_tensor_to_device, mg_cuda_init (and the stubs). */
#include "config.h"

#include "backend/device.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "dist/comm.h"
#include "status.h"

static int current_device = MG_DEVICE_CPU;

int mg_get_device(void) { return current_device; }

/* ---- copies across devices ------------------------------------------------------ */

int mg_tensor_copy_any(const mg_tensor *src, mg_tensor *dst) {
    if (!src || !dst) return mg_error(MG_EINVAL, "tensor copy: NULL tensor");
    if (src->numel != dst->numel)
        return mg_error(MG_ESHAPE, "tensor copy: %lld elements into %lld", (long long)src->numel,
                        (long long)dst->numel);
    if (src->numel == 0) return MG_OK;
    mg_backend *sb = mg_backend_of(src), *db = mg_backend_of(dst);
    if (!sb || !db)
        return mg_error(MG_EDEVICE, "tensor copy: no backend for device %d: call "
                                    "mg_set_device(MG_DEVICE_CUDA) first",
                        sb ? dst->device : src->device);
    if (src->device == dst->device) sb->iface->copy(sb->context, src, dst);
    else if (dst->device == MG_DEVICE_CPU) sb->iface->to_host(sb->context, dst->data, src->data, src->numel);
    else if (src->device == MG_DEVICE_CPU) db->iface->from_host(db->context, dst->data, src->data, src->numel);
    else return mg_error(MG_EDEVICE, "tensor copy: device %d to device %d goes through the host",
                         src->device, dst->device);
    return MG_OK;
}

mg_tensor *mg_tensor_to_device(mg_arena *arena, mg_tensor *t, int device) {
    if (!t) return NULL;
    if (t->device == device) return t;
    mg_tensor *d = mg_tensor_alloc_on(arena, device, t->ndim, t->shape);
    if (d && mg_tensor_copy_any(t, d) != MG_OK) {
        mg_tensor_free(d);
        d = NULL;
    }
    mg_tensor_free(t); /* heap tensors only; arena ones go with the arena */
    return d;
}

/* ---- the device choice ---------------------------------------------------------- */

int mg_device_synchronize(void) {
    if (current_device == MG_DEVICE_CUDA) return mg_cuda_synchronize();
    return MG_OK;
}

int mg_set_device(int device) {
    if (device == MG_DEVICE_CPU) {
        current_device = MG_DEVICE_CPU;
        return MG_OK;
    }
    if (device != MG_DEVICE_CUDA)
        return mg_error(MG_EINVAL, "mg_set_device: unknown device %d (use MG_DEVICE_CPU or "
                                   "MG_DEVICE_CUDA)", device);
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) return mg_error(MG_ESTATE, "mg_set_device: call mg_init first");
#ifndef MG_HAVE_CUDA
    return mg_error(MG_EDEVICE, "mg_set_device: this meshgrad was built without CUDA (configure "
                                "found no nvcc, cuBLAS or NCCL): rebuild with --with-cuda, or run "
                                "on the CPU");
#else
    int mine = mg_cuda_init();
    /* every rank must be on the same device kind, or the meshes would differ */
    int where = -1;
    int rc = mg_status_agree_rank(mine, &where);
    if (rc != MG_OK) {
        if (mine == MG_OK)
            mg_error(rc, "mg_set_device: rank %d could not use a GPU (see its error); every rank "
                         "stays on the CPU", where);
        return rc;
    }
    current_device = MG_DEVICE_CUDA;
    return MG_OK;
#endif
}

#ifdef MG_HAVE_CUDA

/* This rank's rank and the number of ranks on its node. */
static int node_rank(int *rank, int *size) {
    MPI_Comm node;
    int err = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    if (err != MPI_SUCCESS) {
        char s[MPI_MAX_ERROR_STRING];
        int len = 0;
        s[0] = '\0';
        MPI_Error_string(err, s, &len);
        return mg_error(MG_ECOMM, "CUDA: finding the ranks of this node failed: %s", s);
    }
    MPI_Comm_rank(node, rank);
    MPI_Comm_size(node, size);
    MPI_Comm_free(&node);
    return MG_OK;
}

int mg_cuda_init(void) {
    int rank = 0, size = 1;
    int rc = node_rank(&rank, &size); /* collective: every rank calls it, every time */
    if (rc != MG_OK) return rc;
    int count = mg_cuda_device_count();
    if (count == 0)
        return mg_error(MG_EDEVICE, "no CUDA device found on rank %d (no GPU, no driver, or "
                                    "CUDA_VISIBLE_DEVICES hides them): run on the CPU "
                                    "(--device cpu)", mg_rank());
    if (size > count)
        return mg_error(MG_EDEVICE, "%d ranks run on this node but it has %d GPU%s: NCCL needs one "
                                    "GPU per rank; start at most %d rank%s per node",
                        size, count, count == 1 ? "" : "s", count, count == 1 ? "" : "s");
    return mg_cuda_backend_init(rank % count); /* MG_OK again when already there */
}

#else /* no CUDA: the hooks of device.h as stubs */

static int no_cuda(const char *who) {
    return mg_error(MG_EDEVICE, "%s: this meshgrad was built without CUDA", who);
}
int mg_cuda_init(void) { return no_cuda("mg_cuda_init"); }
int mg_cuda_backend_init(int device) {
    (void)device;
    return no_cuda("mg_cuda_backend_init");
}
int mg_cuda_device_count(void) { return 0; }
int mg_cuda_device(void) { return -1; }
void mg_backend_cuda_set_tf32(int on) { (void)on; }
int mg_backend_cuda_tf32(void) { return 0; }
int mg_cuda_synchronize(void) { return MG_OK; }
void *mg_cuda_stream(void) { return NULL; }
int mg_cuda_is_device_pointer(const void *p) {
    (void)p;
    return 0;
}

#endif
