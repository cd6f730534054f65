/* tensor.h: local dense float32 tensors, row-major, contiguous, rank 0..8.
 * A 0-d tensor is a scalar (numel 1); zero-size dims are allowed (numel 0).
 * The struct is visible inside the library; users see the opaque mg_tensor.
 * Tensors come from the heap (mg_tensor_new...: mg_tensor_free frees one once,
 * a second free does nothing) or from an arena
 * (mg_tensor_alloc with an arena: freed by mg_arena_reset, mg_tensor_free ignores them).
 * Also: shape helpers shared by every layer. */
#ifndef MG_TENSOR_H
#define MG_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "meshgrad.h"

/* MG_DEVICE_CPU, MG_DEVICE_CUDA: meshgrad.h; MG_DEVICE_META: context.h */
enum {
    MG_TENSOR_OWNS_DATA = 1, /* data is freed with the tensor */
    MG_TENSOR_IN_ARENA = 2,  /* struct and data live in an arena */
};

struct mg_tensor {
    int ndim;
    int64_t shape[MG_MAX_DIMS];
    int64_t numel;
    float *data; /* host or device memory, per `device` */
    int device;  /* MG_DEVICE_CPU, MG_DEVICE_CUDA, or MG_DEVICE_META (context.h) */
    unsigned flags;
};

/* The CPU's, or the meta device's (backend/meta.c), which takes every path the
 * CPU's takes so that a meta step allocates and moves what a CPU step does;
 * code that reads or writes data itself on such a path skips meta tensors
 * (mg_tensor_is_meta). */
bool mg_tensor_on_host(const mg_tensor *t);
bool mg_tensor_is_meta(const mg_tensor *t);

/* Uninitialized tensor; from `arena` when not NULL, else the heap. It lives on
 * the arena's device (mg_arena_device), or for the heap on the current device
 * (mg_get_device(): the CPU unless mg_set_device chose a GPU). */
mg_tensor *mg_tensor_alloc(mg_arena *arena, int ndim, const int64_t *shape);
/* The same on a given device. A device tensor from an arena needs an arena
 * with a device part (mg_arena_new_device); host tensors come from any arena. */
mg_tensor *mg_tensor_alloc_on(mg_arena *arena, int device, int ndim, const int64_t *shape);
mg_tensor *mg_tensor_zeros(mg_arena *arena, int ndim, const int64_t *shape);
/* Same data, another shape of the same numel (no copy). */
mg_tensor *mg_tensor_view(mg_arena *arena, mg_tensor *t, int ndim, const int64_t *shape);
mg_tensor *mg_tensor_clone(mg_arena *arena, const mg_tensor *t); /* on t's device */
/* Elements [offset, offset + n) of t as a 1-d tensor (no copy). */
mg_tensor *mg_tensor_slice(mg_arena *arena, mg_tensor *t, int64_t offset, int64_t n);

/* shape helpers */
int64_t mg_shape_numel(int ndim, const int64_t *shape);
bool mg_shape_equal(int ndim_a, const int64_t *a, int ndim_b, const int64_t *b);
/* "(2, 40, 10)"; "()" for 0-d. Returns buf. */
char *mg_shape_format(char *buf, size_t len, int ndim, const int64_t *shape);
/* Checks rank 0..8 and sizes >= 0; sets an error naming `who`. */
int mg_shape_check(int ndim, const int64_t *shape, const char *who);
/* Row-major strides in elements. */
void mg_shape_strides(int ndim, const int64_t *shape, int64_t *strides);

#endif
