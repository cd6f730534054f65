/* device.c: where tensors live (see device.h): a tensor's backend, the
 * device choice of this process (kept in the context; mg_set_device, which
 * agrees on it across the ranks, is in dist/world.c), copies of local tensors
 * across devices, and without CUDA the CUDA hooks of device.h as stubs
 * (cuda.cu defines them otherwise).
 * Exports: mg_backend_of, mg_backend_cuda (NULL when built without CUDA),
 * mg_get_device, mg_device_use, mg_device_synchronize, mg_tensor_copy_any,
 * mg_tensor_to_device (and the stubs). */
#include "config.h"

#include "backend/device.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "context.h"
#include "status.h"

/* ---- a tensor's backend ----------------------------------------------------------- */

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

int mg_get_device(void) { return mg_ctx()->device; }

int mg_device_use(int device) {
    bool meta = device == MG_DEVICE_META && mg_ctx()->memory[MG_DEVICE_META].alloc;
    if (device != MG_DEVICE_CPU && !meta && !(device == MG_DEVICE_CUDA && mg_backend_cuda()))
        return mg_error(MG_EDEVICE, "device %d has no running backend (mg_set_device starts it)",
                        device);
    mg_ctx()->device = device;
    return MG_OK;
}

int mg_device_synchronize(void) {
    if (mg_ctx()->device == MG_DEVICE_CUDA) return mg_cuda_synchronize();
    return MG_OK;
}

#ifndef MG_HAVE_CUDA /* the hooks of device.h as stubs */

static int no_cuda(const char *who) {
    return mg_error(MG_EDEVICE, "%s: this meshgrad was built without CUDA", who);
}
int mg_cuda_backend_init(int device) {
    (void)device;
    return no_cuda("mg_cuda_backend_init");
}
int mg_cuda_device_count(void) { return 0; }
int mg_cuda_describe(char *out, size_t len) {
    snprintf(out, len, "none: this meshgrad was built without CUDA");
    return 0;
}
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
