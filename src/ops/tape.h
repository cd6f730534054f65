/* tape.h: the autograd tape. Each recorded op is a node in the step arena,
 * numbered in the order of recording; mg_backward (autograd/backward.c) walks
 * a loss's graph in reverse. A node keeps its inputs (the tensors at the specs the op
 * used), its output, and the few arguments its VJP needs. The VJPs themselves
 * (autograd/vjp.c) are written with the sharded ops, so each gradient gets its
 * placement from the same rules as the forward values.
 *
 * The tape is plain data at the bottom of the ops layer: ops record into it;
 * the engine and the VJPs (src/autograd/, above ops) read it. A graph is the
 * nodes reachable from its output through the inputs' nodes; any number of
 * graphs may be recorded in one step, and each backward walks its own, in
 * descending `seq`. */
#ifndef MG_TAPE_H
#define MG_TAPE_H

#include <stdbool.h>
#include <stdint.h>

#include "dist/dtensor.h"

#define MG_NODE_MAX_INPUTS 3

typedef struct mg_node {
    int op; /* mg_op (ops.h) */
    int n_inputs;
    struct mg_dtensor *inputs[MG_NODE_MAX_INPUTS]; /* NULL for absent optional inputs */
    struct mg_dtensor *output;
    /* arguments for the VJP */
    int iargs[MG_MAX_DIMS]; /* permutation, reduced-dims mask, ... */
    int n_iargs;
    float farg;             /* scale of a sum/mean, of mg_scale */
    int ndim;               /* a global shape (the input's, for reshape/expand) */
    int64_t shape[MG_MAX_DIMS];
    mg_placement placements[MG_MAX_MESH_DIMS]; /* redistribute: the source placements */
    /* what the op keeps for its backward besides inputs and output (attention's
     * row log-sum-exp, layer norm's mean and rstd, ...); step arena */
    struct mg_tensor *saved;
    bool freed;             /* its graph was consumed by a backward */
    int64_t walk;           /* the backward that reached it last (autograd/backward.c) */
    unsigned want_mask;     /* the inputs mg_vjp is asked for (bit i: input i) */
    int64_t seq;
} mg_node;

/* A new node at the end of the tape (step arena); NULL when out of memory. */
mg_node *mg_tape_push(int op, int n_inputs, mg_dtensor *const *inputs, mg_dtensor *output);
/* A tensor wants a gradient: a leaf that requires it, or the output of a node. */
bool mg_tape_wants_grad(const mg_dtensor *t);

#endif
