/* tensor.c: local dense float32 tensors and shape helpers (see tensor.h);
 * the heap tensors not yet freed (the context's `tensors`), so that freeing
 * one twice does nothing. State: the context's tensors and freed_tensors.
 * Public: mg_tensor_new, mg_tensor_from_data, mg_tensor_data/ndim/shape/numel/free. */
#include "tensor.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "status.h"

int64_t mg_shape_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

bool mg_shape_equal(int ndim_a, const int64_t *a, int ndim_b, const int64_t *b) {
    if (ndim_a != ndim_b) return false;
    for (int i = 0; i < ndim_a; i++)
        if (a[i] != b[i]) return false;
    return true;
}

char *mg_shape_format(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t used = 0;
    used += snprintf(buf + used, len > used ? len - used : 0, "(");
    for (int i = 0; i < ndim; i++)
        used += snprintf(buf + used, len > used ? len - used : 0, "%s%lld", i ? ", " : "",
                         (long long)shape[i]);
    snprintf(buf + used, len > used ? len - used : 0, ")");
    return buf;
}

int mg_shape_check(int ndim, const int64_t *shape, const char *who) {
    if (ndim < 0 || ndim > MG_MAX_DIMS)
        return mg_error(MG_ESHAPE, "%s: a tensor has %d dims; meshgrad supports 0 to %d", who, ndim,
                        MG_MAX_DIMS);
    if (ndim > 0 && !shape)
        return mg_error(MG_EINVAL, "%s: shape is NULL for a %d-d tensor", who, ndim);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            return mg_error(MG_ESHAPE, "%s: dim %d has size %lld; sizes must be >= 0", who, i,
                            (long long)shape[i]);
    /* the element count (and its bytes) must fit in int64, zero-size dims aside */
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0) continue;
        if (n > INT64_MAX / (int64_t)sizeof(float) / shape[i]) {
            char s[160];
            return mg_error(MG_ESHAPE, "%s: shape %s has too many elements to address", who,
                            mg_shape_format(s, sizeof s, ndim, shape));
        }
        n *= shape[i];
    }
    return MG_OK;
}

void mg_shape_strides(int ndim, const int64_t *shape, int64_t *strides) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i];
    }
}

/* ---- the heap tensors not yet freed (the context's `tensors`) ---------------- */

/* Freed headers held back from malloc (mg_context's freed_tensors). */
#define HELD_BACK 1024

static size_t slot_of(const mg_tensor *t, size_t cap) {
    return (size_t)(((uintptr_t)t >> 4) * 0x9E3779B97F4A7C15ull >> 20) & (cap - 1);
}

/* t's slot in the set, or -1; t is only compared, never read. */
static long live_slot(const mg_tensor *t) {
    mg_context *c = mg_ctx();
    if (!c->cap_tensors) return -1;
    for (size_t i = slot_of(t, c->cap_tensors);; i = (i + 1) & (c->cap_tensors - 1)) {
        if (c->tensors[i] == t) return (long)i;
        if (!c->tensors[i]) return -1;
    }
}

/* Adds a new heap tensor to the set; MG_ENOMEM when it cannot grow. */
static int live_add(mg_tensor *t) {
    mg_context *c = mg_ctx();
    if (2 * (c->n_tensors + 1) > c->cap_tensors) { /* at most half full */
        size_t cap = c->cap_tensors ? 2 * c->cap_tensors : 256;
        mg_tensor **set = calloc(cap, sizeof *set);
        if (!set) return mg_error(MG_ENOMEM, "tensor: out of memory for the list of tensors");
        for (size_t i = 0; i < c->cap_tensors; i++) {
            if (!c->tensors[i]) continue;
            size_t j = slot_of(c->tensors[i], cap);
            while (set[j]) j = (j + 1) & (cap - 1);
            set[j] = c->tensors[i];
        }
        free(c->tensors);
        c->tensors = set;
        c->cap_tensors = cap;
    }
    size_t j = slot_of(t, c->cap_tensors);
    while (c->tensors[j]) j = (j + 1) & (c->cap_tensors - 1);
    c->tensors[j] = t;
    c->n_tensors++;
    return MG_OK;
}

/* Takes slot i out of the set, moving back the entries after it that
 * probed past it (linear probing without tombstones). */
static void live_remove(size_t i) {
    mg_context *c = mg_ctx();
    size_t mask = c->cap_tensors - 1;
    for (size_t j = (i + 1) & mask; c->tensors[j]; j = (j + 1) & mask) {
        size_t k = slot_of(c->tensors[j], c->cap_tensors);
        if (i <= j ? (i < k && k <= j) : (i < k || k <= j)) continue; /* stays reachable */
        c->tensors[i] = c->tensors[j];
        i = j;
    }
    c->tensors[i] = NULL;
    c->n_tensors--;
}

/* A freed header goes back to malloc only HELD_BACK frees later. */
static void hold_back(mg_tensor *t) {
    mg_context *c = mg_ctx();
    if (!c->freed_tensors && !(c->freed_tensors = calloc(HELD_BACK, sizeof *c->freed_tensors))) {
        free(t);
        return;
    }
    free(c->freed_tensors[c->next_freed]);
    c->freed_tensors[c->next_freed] = t;
    c->next_freed = (c->next_freed + 1) % HELD_BACK;
}

static mg_tensor *tensor_header(mg_arena *arena, int ndim, const int64_t *shape) {
    if (mg_shape_check(ndim, shape, "tensor") != MG_OK) return NULL;
    mg_tensor *t = arena ? mg_arena_alloc(arena, sizeof *t) : calloc(1, sizeof *t);
    if (!t) return mg_error_null(MG_ENOMEM, "tensor: out of memory for a tensor header");
    memset(t, 0, sizeof *t);
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->numel = mg_shape_numel(ndim, shape);
    t->device = MG_DEVICE_CPU;
    t->flags = arena ? MG_TENSOR_IN_ARENA : 0;
    return t;
}

mg_tensor *mg_tensor_alloc(mg_arena *arena, int ndim, const int64_t *shape) {
    return mg_tensor_alloc_on(arena, arena ? mg_arena_device(arena) : mg_ctx()->device, ndim, shape);
}

/* The memory of a device other than the CPU, or NULL (with a message) when its
 * backend has not started. */
static const mg_device_memory *device_memory(int device) {
    if (device > 0 && device < MG_DEVICE_KINDS && mg_ctx()->memory[device].alloc)
        return &mg_ctx()->memory[device];
    return mg_error_null(MG_EDEVICE, "tensor: no backend for device %d: call "
                                     "mg_set_device(MG_DEVICE_CUDA) first", device);
}

mg_tensor *mg_tensor_alloc_on(mg_arena *arena, int device, int ndim, const int64_t *shape) {
    const mg_device_memory *mem = NULL;
    if (device != MG_DEVICE_CPU && !(mem = device_memory(device))) return NULL;
    if (mem && arena && mg_arena_device(arena) != device)
        return mg_error_null(MG_EDEVICE, "tensor: a device tensor from an arena without device "
                                         "memory (use mg_step_arena() after mg_set_device)");
    mg_tensor *t = tensor_header(arena, ndim, shape);
    if (!t) return NULL;
    size_t bytes = (size_t)(t->numel > 0 ? t->numel : 1) * sizeof(float);
    t->device = device;
    if (arena) {
        t->data = mg_arena_alloc_data(arena, bytes);
    } else {
        t->data = mem ? mem->alloc(mem->ctx, bytes) : aligned_alloc(64, (bytes + 63) / 64 * 64);
        t->flags |= MG_TENSOR_OWNS_DATA;
    }
    if (!t->data) {
        char s[128];
        if (!arena) free(t);
        return mg_error_null(MG_ENOMEM, "tensor: out of memory for %s floats",
                             mg_shape_format(s, sizeof s, ndim, shape));
    }
    if (!arena && live_add(t) != MG_OK) {
        if (mem) mem->free(mem->ctx, t->data);
        else free(t->data);
        free(t);
        return NULL;
    }
    return t;
}

mg_tensor *mg_tensor_zeros(mg_arena *arena, int ndim, const int64_t *shape) {
    mg_tensor *t = mg_tensor_alloc(arena, ndim, shape);
    if (!t || !t->numel) return t;
    size_t bytes = (size_t)t->numel * sizeof(float);
    if (t->device == MG_DEVICE_CPU) memset(t->data, 0, bytes);
    else mg_ctx()->memory[t->device].zero(mg_ctx()->memory[t->device].ctx, t->data, bytes);
    return t;
}

mg_tensor *mg_tensor_view(mg_arena *arena, mg_tensor *t, int ndim, const int64_t *shape) {
    mg_tensor *v = tensor_header(arena, ndim, shape);
    if (!v) return NULL;
    if (v->numel != t->numel) {
        char a[128], b[128];
        if (!arena) free(v);
        return mg_error_null(MG_ESHAPE, "view: cannot view %s as %s (different number of elements)",
                             mg_shape_format(a, sizeof a, t->ndim, t->shape),
                             mg_shape_format(b, sizeof b, ndim, shape));
    }
    v->data = t->data;
    v->device = t->device;
    if (!arena && live_add(v) != MG_OK) {
        free(v);
        return NULL;
    }
    return v;
}

mg_tensor *mg_tensor_slice(mg_arena *arena, mg_tensor *t, int64_t offset, int64_t n) {
    if (offset < 0 || n < 0 || offset + n > t->numel)
        return mg_error_null(MG_EINVAL, "slice: [%lld, %lld) is outside a tensor of %lld elements",
                             (long long)offset, (long long)(offset + n), (long long)t->numel);
    mg_tensor *v = tensor_header(arena, 1, &n);
    if (!v) return NULL;
    v->data = t->data + offset;
    v->device = t->device;
    if (!arena && live_add(v) != MG_OK) {
        free(v);
        return NULL;
    }
    return v;
}

mg_tensor *mg_tensor_clone(mg_arena *arena, const mg_tensor *t) {
    mg_tensor *c = mg_tensor_alloc_on(arena, t->device, t->ndim, t->shape);
    if (!c || !t->numel) return c;
    size_t bytes = (size_t)t->numel * sizeof(float);
    if (t->device == MG_DEVICE_CPU) memcpy(c->data, t->data, bytes);
    else mg_ctx()->memory[t->device].copy(mg_ctx()->memory[t->device].ctx, c->data, t->data, bytes);
    return c;
}

/* ---- public ---------------------------------------------------------------- */

/* the public constructors make host tensors, whatever the current device */
mg_tensor *mg_tensor_new(int ndim, const int64_t *shape) {
    mg_tensor *t = mg_tensor_alloc_on(NULL, MG_DEVICE_CPU, ndim, shape);
    if (t && t->numel) memset(t->data, 0, (size_t)t->numel * sizeof(float));
    return t;
}

mg_tensor *mg_tensor_from_data(int ndim, const int64_t *shape, const float *data) {
    mg_tensor *t = mg_tensor_alloc_on(NULL, MG_DEVICE_CPU, ndim, shape);
    if (!t) return NULL;
    if (t->numel && !data) {
        mg_tensor_free(t);
        return mg_error_null(MG_EINVAL, "mg_tensor_from_data: data is NULL");
    }
    if (t->numel) memcpy(t->data, data, (size_t)t->numel * sizeof(float));
    return t;
}

/* the getters: NULL (or -1, 0) and a message for a NULL tensor */
#define GIVEN(t, who) mg_arg_given(t, who, "the tensor")
float *mg_tensor_data(mg_tensor *t) { return GIVEN(t, "mg_tensor_data") ? t->data : NULL; }
int mg_tensor_ndim(const mg_tensor *t) { return GIVEN(t, "mg_tensor_ndim") ? t->ndim : -1; }
const int64_t *mg_tensor_shape(const mg_tensor *t) {
    return GIVEN(t, "mg_tensor_shape") ? t->shape : NULL;
}
int64_t mg_tensor_numel(const mg_tensor *t) { return GIVEN(t, "mg_tensor_numel") ? t->numel : 0; }

bool mg_tensor_on_host(const mg_tensor *t) {
    return t->device == MG_DEVICE_CPU || t->device == MG_DEVICE_META;
}

bool mg_tensor_is_meta(const mg_tensor *t) { return t->device == MG_DEVICE_META; }

/* Only a heap tensor not yet freed is freed: another pointer (freed already,
 * or a tensor of an arena, which its arena frees) is not read at all, and
 * nothing is said (failure paths free what they made). */
void mg_tensor_free(mg_tensor *t) {
    long i = t ? live_slot(t) : -1;
    if (i < 0) return;
    live_remove((size_t)i);
    if (t->flags & MG_TENSOR_OWNS_DATA) {
        if (t->device == MG_DEVICE_CPU) free(t->data);
        else if (device_memory(t->device))
            mg_ctx()->memory[t->device].free(mg_ctx()->memory[t->device].ctx, t->data);
    }
    hold_back(t);
}
