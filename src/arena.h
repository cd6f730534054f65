/* arena.h: a step allocator. Everything made during one training step
 * (activations, temporaries, graph nodes) is carved from it; mg_arena_reset()
 * forgets it all in O(1). Memory is kept between steps: when a step needed more
 * than one block, the next reset merges them into one block of the total size,
 * so the arena grows only when a step needs more than any step before.
 * Allocations are 64-byte aligned. */
#ifndef MG_ARENA_H
#define MG_ARENA_H

#include <stddef.h>

typedef struct mg_arena mg_arena;

mg_arena *mg_arena_new(size_t initial_bytes);
void mg_arena_free(mg_arena *);
void *mg_arena_alloc(mg_arena *, size_t bytes); /* NULL (and mg_error) when out of memory */
void mg_arena_reset(mg_arena *);
size_t mg_arena_used(const mg_arena *);     /* bytes handed out since the last reset */
/* Does p lie in a host block of some arena not freed (memory that may be
 * read, whatever it holds now)? A block merged away at a reset is freed: a
 * pointer kept into it does not. (One list of the process's arenas.) */
int mg_arenas_hold(const void *p);
size_t mg_arena_capacity(const mg_arena *); /* bytes held in all blocks */
size_t mg_arena_peak(const mg_arena *);     /* most bytes used in one step */
int mg_arena_grow_count(const mg_arena *);  /* how many times a new block was malloc'd */
/* Bytes of tensor data handed out since the last reset: from the device
 * blocks of a device arena (mg_arena_new_device), else mg_arena_used. */
size_t mg_arena_data_used(const mg_arena *);

/* Memory of one device, as its backend provides it (the CPU's is the heap):
 * what an arena for device tensors and the tensor constructors need. copy and
 * zero work within the device and are ordered with its kernels. */
typedef struct {
    void *(*alloc)(void *ctx, size_t bytes);
    void (*free)(void *ctx, void *ptr);
    void (*copy)(void *ctx, void *dst, const void *src, size_t bytes);
    void (*zero)(void *ctx, void *dst, size_t bytes);
    void *ctx;
    int device; /* MG_DEVICE_* */
} mg_device_memory;

/* Arenas for device tensors: headers (tensor structs, graph nodes) stay in host
 * blocks as above, and tensor data comes from a second list of blocks made by
 * `memory` on its device. mg_arena_reset and mg_arena_free cover both;
 * used/capacity/peak/grow count the host blocks. */
mg_arena *mg_arena_new_device(size_t initial_bytes, const mg_device_memory *memory);
int mg_arena_device(const mg_arena *); /* where mg_arena_alloc_data's memory lives */
/* An arena laid out as a host arena (headers and data in the same blocks),
 * its blocks from `memory`, which the host can address: the meta backend's
 * (backend/meta.c), so its figures are a host arena's. */
mg_arena *mg_arena_new_on(size_t initial_bytes, const mg_device_memory *memory);
/* Memory for tensor data: from the device blocks when the arena has them, else
 * the same as mg_arena_alloc. */
void *mg_arena_alloc_data(mg_arena *, size_t bytes);

/* Two ways to steer where the next tensor data of an arena goes:
 * - redirect: while set, mg_arena_alloc_data(a) takes its memory from `to`
 *   (NULL stops). Headers stay in `a`. Returns the redirect it replaces, so a
 *   caller can put it back.
 * - hint: the next mg_arena_alloc_data(a) of exactly `bytes` that `a` serves
 *   itself (not redirected) returns `ptr` (once; NULL clears). The autograd
 *   engine uses it to let a parameter's gradient be computed straight into the
 *   parameter's gradient buffer. */
mg_arena *mg_arena_redirect_data(mg_arena *a, mg_arena *to);
void mg_arena_hint_data(mg_arena *a, void *ptr, size_t bytes);
/* The hint set now (NULL: none), to be put back with mg_arena_hint_data. */
void *mg_arena_hint(const mg_arena *a, size_t *bytes);

#endif
