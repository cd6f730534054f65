/* arena.c: the step allocator (see arena.h). A list of blocks; allocation bumps
 * an offset in the last block; reset rewinds to the first block, merging blocks
 * into one so the steady state is a single block and no malloc. An arena for a
 * device keeps a second arena whose blocks come from the backend's allocator,
 * for tensor data; an arena on host-addressable device memory (the meta
 * backend's) takes all its blocks from that allocator. */
#include "arena.h"

#include <stdint.h>
#include <stdlib.h>

#include "meshgrad.h"
#include "status.h"

#define ARENA_ALIGN 64

typedef struct block {
    struct block *next;
    size_t size, used;
    unsigned char *data;
} block;

struct mg_arena {
    block *first, *current;
    size_t used;     /* bytes handed out since reset (with alignment) */
    size_t peak;
    size_t capacity;
    int grow_count;
    int on_device;                /* blocks come from `allocator` */
    mg_device_memory allocator;
    struct mg_arena *data;        /* device blocks for tensor data, or NULL */
    struct mg_arena *redirect;    /* mg_arena_redirect_data */
    void *hint;                   /* mg_arena_hint_data */
    size_t hint_bytes;
    struct mg_arena *next_live;   /* the list of host arenas not freed (mg_arenas_hold) */
};

/* Every host arena not yet freed, newest first. */
static mg_arena *live_arenas;

static block *block_new(const mg_arena *a, size_t size) {
    block *b = malloc(sizeof *b);
    if (!b) return NULL;
    size_t rounded = (size + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    b->data = a->on_device ? a->allocator.alloc(a->allocator.ctx, rounded)
                           : aligned_alloc(ARENA_ALIGN, rounded);
    if (!b->data) {
        free(b);
        return NULL;
    }
    b->next = NULL;
    b->size = size;
    b->used = 0;
    return b;
}

/* A host-layout arena (headers and data together), its blocks from the heap
 * or, given one, from `memory`. */
static mg_arena *arena_make(size_t initial_bytes, const mg_device_memory *memory) {
    mg_arena *a = calloc(1, sizeof *a);
    if (!a) return mg_error_null(MG_ENOMEM, "arena: out of memory");
    if (memory) {
        a->on_device = 1;
        a->allocator = *memory;
    }
    if (initial_bytes < 4096) initial_bytes = 4096;
    a->first = a->current = block_new(a, initial_bytes);
    if (!a->first) {
        free(a);
        return mg_error_null(MG_ENOMEM, "arena: cannot allocate %zu bytes", initial_bytes);
    }
    a->capacity = initial_bytes;
    a->grow_count = 1;
    a->next_live = live_arenas;
    live_arenas = a;
    return a;
}

mg_arena *mg_arena_new(size_t initial_bytes) { return arena_make(initial_bytes, NULL); }

mg_arena *mg_arena_new_on(size_t initial_bytes, const mg_device_memory *memory) {
    if (!memory || !memory->alloc || !memory->free)
        return mg_error_null(MG_EINVAL, "arena: an arena on a device needs its memory");
    return arena_make(initial_bytes, memory);
}

static void free_blocks(const mg_arena *a, block *b) {
    while (b) {
        block *next = b->next;
        if (a->on_device) a->allocator.free(a->allocator.ctx, b->data);
        else free(b->data);
        free(b);
        b = next;
    }
}

void mg_arena_free(mg_arena *a) {
    if (!a) return;
    for (mg_arena **p = &live_arenas; *p; p = &(*p)->next_live)
        if (*p == a) {
            *p = a->next_live;
            break;
        }
    mg_arena_free(a->data);
    free_blocks(a, a->first);
    free(a);
}

mg_arena *mg_arena_new_device(size_t initial_bytes, const mg_device_memory *allocator) {
    if (!allocator || !allocator->alloc || !allocator->free)
        return mg_error_null(MG_EINVAL, "arena: a device arena needs an allocator");
    mg_arena *a = mg_arena_new(4096); /* headers only */
    mg_arena *d = a ? calloc(1, sizeof *d) : NULL;
    if (!d) {
        mg_arena_free(a);
        return mg_error_null(MG_ENOMEM, "arena: out of memory");
    }
    if (initial_bytes < 4096) initial_bytes = 4096;
    d->on_device = 1;
    d->allocator = *allocator;
    d->first = d->current = block_new(d, initial_bytes);
    if (!d->first) {
        free(d);
        mg_arena_free(a);
        return mg_error_null(MG_ENOMEM, "arena: cannot allocate %zu bytes on device %d",
                             initial_bytes, allocator->device);
    }
    d->capacity = initial_bytes;
    d->grow_count = 1;
    a->data = d;
    return a;
}

int mg_arena_device(const mg_arena *a) {
    if (!a) return MG_DEVICE_CPU;
    if (a->data) return a->data->allocator.device;
    return a->on_device ? a->allocator.device : MG_DEVICE_CPU;
}

void *mg_arena_alloc_data(mg_arena *a, size_t bytes) {
    if (a->redirect) return mg_arena_alloc_data(a->redirect, bytes);
    if (a->hint && bytes == a->hint_bytes) {
        void *p = a->hint;
        a->hint = NULL;
        return p;
    }
    return mg_arena_alloc(a->data ? a->data : a, bytes);
}

mg_arena *mg_arena_redirect_data(mg_arena *a, mg_arena *to) {
    mg_arena *was = a->redirect;
    a->redirect = to;
    return was;
}

void mg_arena_hint_data(mg_arena *a, void *ptr, size_t bytes) {
    a->hint = ptr;
    a->hint_bytes = bytes;
}

void *mg_arena_hint(const mg_arena *a, size_t *bytes) {
    *bytes = a->hint_bytes;
    return a->hint;
}

void *mg_arena_alloc(mg_arena *a, size_t bytes) {
    if (bytes > SIZE_MAX / 2)
        return mg_error_null(MG_ENOMEM, "arena: cannot allocate %zu bytes (more than half the "
                             "address space)", bytes);
    size_t need = (bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    if (need == 0) need = ARENA_ALIGN;
    block *b = a->current;
    if (b->used + need > b->size) {
        /* the next block (kept from an earlier step) or a new one */
        while (b->next && b->next->size < need) b = b->next;
        if (b->next) {
            b = b->next;
            b->used = 0;
        } else {
            size_t size = a->capacity > need ? a->capacity : need; /* at least double */
            block *n = block_new(a, size);
            if (!n) return mg_error_null(MG_ENOMEM, "arena: out of memory growing by %zu bytes", size);
            b->next = n;
            b = n;
            a->capacity += size;
            a->grow_count++;
        }
        a->current = b;
    }
    void *p = b->data + b->used;
    b->used += need;
    a->used += need;
    if (a->used > a->peak) a->peak = a->used;
    return p;
}

void mg_arena_reset(mg_arena *a) {
    if (a->data) mg_arena_reset(a->data);
    if (a->first->next) {
        /* this step needed several blocks: replace them by one that holds them all */
        block *merged = block_new(a, a->capacity);
        if (merged) {
            free_blocks(a, a->first);
            a->first = merged;
            a->grow_count++;
        }
    }
    for (block *b = a->first; b; b = b->next) b->used = 0;
    a->current = a->first;
    a->used = 0;
}

size_t mg_arena_used(const mg_arena *a) { return a->used; }
int mg_arenas_hold(const void *p) {
    const unsigned char *c = p;
    for (const mg_arena *a = live_arenas; a; a = a->next_live)
        for (const block *b = a->first; b; b = b->next)
            if (c >= b->data && c < b->data + b->size) return 1;
    return 0;
}
size_t mg_arena_capacity(const mg_arena *a) { return a->capacity; }
size_t mg_arena_peak(const mg_arena *a) { return a->peak; }
int mg_arena_grow_count(const mg_arena *a) { return a->grow_count; }
size_t mg_arena_data_used(const mg_arena *a) { return a->data ? a->data->used : a->used; }
