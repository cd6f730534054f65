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
size_t mg_arena_capacity(const mg_arena *); /* bytes held in all blocks */
size_t mg_arena_peak(const mg_arena *);     /* most bytes used in one step */
int mg_arena_grow_count(const mg_arena *);  /* how many times a new block was malloc'd */

/* The process-wide step arena used by ops and the autograd tape. */
mg_arena *mg_step_arena(void);

#endif
