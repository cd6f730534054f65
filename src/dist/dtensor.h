/* dtensor.h: the distributed tensor: a spec (mesh, global shape, placements) and
 * this rank's local shard, plus the fields autograd needs. The public
 * constructors and accessors of meshgrad.h are in dtensor.c; ops.c makes op
 * outputs with mg_dtensor_make(). */
#ifndef MG_DTENSOR_H
#define MG_DTENSOR_H

#include "arena.h"
#include "dist/placement.h"
#include "tensor.h"

struct mg_node; /* autograd/tape.h */

enum {
    MG_DTENSOR_HEAP = 1, /* made by a constructor: freed by mg_dtensor_free */
    /* a parameter brought to other placements for use, its data in the
     * scratch arena (mg_op_param_copy in ops.h) */
    MG_DTENSOR_PARAM_COPY = 2,
    MG_DTENSOR_RELEASED = 4,  /* its local data was given back: gather it again */
    MG_DTENSOR_GRAD_ZERO = 8, /* a leaf whose grad buffer counts as zero (not yet filled) */
    /* a parameter whose optimizer can sum its data-parallel gradient itself, in
     * shared memory (nn/optim_shard.h): backward leaves the sum to it */
    MG_DTENSOR_GRAD_DEFER = 16,
    /* the grad buffer holds only this rank's part: the gradient is its sum over
     * mesh dim `grad_dim` (mg_grad takes it) */
    MG_DTENSOR_GRAD_UNSUMMED = 32,
    /* the grad buffer holds the summed gradient only on this rank's rows of
     * it, split over mesh dim `grad_dim` (autograd/grad_rows.h; mg_grad gathers) */
    MG_DTENSOR_GRAD_ROWS = 64,
    MG_DTENSOR_GRAD_PARTS = MG_DTENSOR_GRAD_UNSUMMED | MG_DTENSOR_GRAD_ROWS,
    /* its value (and optimizer state) is one copy per node, that only the
     * split optimizer step may update (nn/optim_shard.h) */
    MG_DTENSOR_ONE_COPY = 128,
};

struct mg_dtensor {
    mg_spec spec;
    mg_tensor *local;
    unsigned flags;
    /* autograd */
    int requires_grad;
    struct mg_dtensor *grad;  /* leaves: heap, in the leaf's own spec */
    int grad_dim;             /* GRAD_DEFER/UNSUMMED/ROWS: the mesh dim of the split */
    struct mg_node *node;     /* the op that made it (NULL for leaves) */
    struct mg_dtensor *param_source; /* MG_DTENSOR_PARAM_COPY: the parameter */
    /* what the op that made it keeps for its backward besides inputs and output
     * (attention's row log-sum-exp, layer norm's mean and rstd, ...); step arena */
    struct mg_tensor *saved;
    int64_t node_generation;  /* the tape generation `node` belongs to */
};

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

/* Same global tensor, all mesh dims checked for one mesh: error naming `who`. */
int mg_dtensor_same_mesh(const mg_dtensor *a, const mg_dtensor *b, const char *who);

#endif
