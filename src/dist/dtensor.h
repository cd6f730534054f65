/* dtensor.h: the distributed tensor: a spec (mesh, global shape, placements),
 * this rank's local shard, and its gradient and the node that made it. The public
 * constructors and accessors of meshgrad.h are in dtensor.c; ops.c makes op
 * outputs with mg_dtensor_make(). */
#ifndef MG_DTENSOR_H
#define MG_DTENSOR_H

#include "arena.h"
#include "dist/placement.h"
#include "tensor.h"

struct mg_node; /* ops/tape.h */

enum {
    MG_DTENSOR_HEAP = 1, /* made by a constructor: freed by mg_dtensor_free */
    /* an op output's grad is a tensor the backward made for it alone, which it
     * may add into in place (autograd/backward.c) */
    MG_DTENSOR_OWN_GRAD = 2,
    /* a heap leaf's gradient buffer (dist/reducer.c): freed with its leaf only */
    MG_DTENSOR_GRAD = 4,
};

/* The first word of a tensor that lives (anything else there: freed, or
 * memory an arena has handed out again). */
#define MG_DTENSOR_ALIVE 0x6d672d6474656e73ull

struct mg_dtensor {
    uint64_t magic; /* MG_DTENSOR_ALIVE */
    mg_spec spec;
    mg_tensor *local;
    unsigned flags;
    /* autograd */
    int requires_grad;
    struct mg_dtensor *grad; /* leaves: the gradient reducer's buffer (dist/reducer.h) */
    struct mg_node *node;    /* the op that made it (NULL for leaves) */
    /* the optimizers and checkpoints of meshgrad_train.h that hold it: while
     * any does, mg_dtensor_free refuses */
    int holders;
    /* the context's steps + 1 when an op of that step took it (ops/tape.c): its
     * graph needs it until mg_step_end, so mg_dtensor_free refuses; 0: never */
    int64_t graph_step;
    /* made in the step arena: the context's steps then (the next mg_step_end
     * releases it); -1: the heap's or another arena's */
    int64_t made_step;
};

/* A result kept from one of the MG_DTENSOR_STEPS - 1 steps before is refused
 * (mg_dtensor_alive); a header in the step arena takes MG_DTENSOR_STEP_BYTES. */
#define MG_DTENSOR_STEPS 16 /* a power of two */
#define MG_DTENSOR_STEP_BYTES ((sizeof(mg_dtensor) + 8 * MG_DTENSOR_STEPS - 1 + 63) / 64 * 64)

/* Wraps `local` (taken over, also on failure: it is freed then unless it lives
 * in an arena) with `spec`. From `arena`, or the heap when NULL.
 * Checks local's shape against the spec for this rank. */
mg_dtensor *mg_dtensor_make(const mg_spec *spec, mg_tensor *local, mg_arena *arena);
/* A new tensor of spec with zero local data. */
mg_dtensor *mg_dtensor_zeros(const mg_spec *spec, mg_arena *arena);
/* Fills the local shard with values drawn for the GLOBAL element indices it
 * holds: uniform in [lo, hi) from Philox(seed, stream). Same global tensor on
 * every mesh. Partial placements hold the value on coordinate 0, zeros elsewhere. */
int mg_dtensor_fill_uniform(mg_dtensor *t, uint64_t seed, uint64_t stream, float lo, float hi);
/* The same with mean + std * N(0, 1) (Box-Muller on Philox, rng.h). */
int mg_dtensor_fill_normal(mg_dtensor *t, uint64_t seed, uint64_t stream, float mean, float std);

/* Collective over the world. rc: this rank's own verdict on its arguments (its
 * message already set when not MG_OK). MG_OK when every rank passed the same
 * spec s (one all-reduce of a hash); else an error naming the ranks. */
int mg_dtensor_agree(int rc, const mg_spec *s, const char *who);
/* MG_OK for a tensor that lives (t not NULL); else MG_ESTATE with a message
 * naming `who`: t was freed, or is an op's result from a step mg_step_end has
 * ended, whose memory the step arena hands out again (a step's headers sit at
 * an offset of their own, 8 (steps % MG_DTENSOR_STEPS) bytes past a multiple
 * of 8 MG_DTENSOR_STEPS, so such a pointer lands on no tensor of the next 15
 * steps; on the 16th a tensor may sit where it points again, and that one
 * passes). A freed heap tensor's memory is held back from malloc for the next
 * 1024 frees, so no new tensor is put where it points until then. t is read
 * only where it may be: in a block some arena holds now, or on the list of heap
 * tensors not freed (a block merged away at a reset is freed). Every public
 * call that takes a tensor asks. */
int mg_dtensor_alive(const mg_dtensor *t, const char *who);
/* 1 when t is a heap tensor (mg_distribute, mg_from_local...) not yet freed;
 * looked up, t not read, so a freed one is safe to ask about. */
int mg_dtensor_kept(const mg_dtensor *t);
/* How many heap tensors not yet freed live on `mesh` (the mesh's count, which
 * this file keeps; mg_mesh_free refuses while there are any). */
int mg_dtensor_live_on(const mg_mesh *mesh);
/* fn runs for each heap tensor as mg_dtensor_free frees it, before its memory
 * goes (the gradient reducer registers mg_reducer_forget when it starts,
 * reducer.h); NULL: nothing. */
void mg_dtensor_on_free(void (*fn)(const mg_dtensor *t));
/* Same global tensor, all mesh dims checked for one mesh: error naming `who`. */
int mg_dtensor_same_mesh(const mg_dtensor *a, const mg_dtensor *b, const char *who);

#endif
