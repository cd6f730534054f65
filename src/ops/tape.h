/* tape.h: the autograd tape. Each recorded op is a node in the step arena,
 * numbered in the order of recording; mg_backward (autograd/backward.c) walks
 * a loss's graph in reverse. A node keeps its inputs (the tensors at the specs the op
 * used), its output, its op's record (op_def.h: the VJP among the rest) and
 * the few arguments that VJP needs.
 *
 * The tape is plain data at the bottom of the ops layer: ops record into it;
 * the engine (src/autograd/, above ops) walks it and calls the records' VJPs. A graph is the
 * nodes reachable from its output through the inputs' nodes; any number of
 * graphs may be recorded in one step, and each backward walks its own, in
 * descending `seq`. */
#ifndef MG_TAPE_H
#define MG_TAPE_H

#include <stdbool.h>
#include <stdint.h>

#include "dist/dtensor.h"
#include "ops/op_def.h"

#define MG_NODE_MAX_INPUTS MG_OP_MAX_INPUTS

typedef struct mg_node {
    const mg_op_def *def; /* the op (op_def.h) */
    int n_inputs;
    struct mg_dtensor *inputs[MG_NODE_MAX_INPUTS]; /* NULL for absent optional inputs */
    struct mg_dtensor *output;
    mg_op_args args; /* what the op keeps for its VJP (op_def.h) */
    mg_placement placements[MG_MAX_MESH_DIMS]; /* redistribute: the source placements */
    /* what the op keeps for its backward besides inputs and output (attention's
     * row log-sum-exp, layer norm's mean and rstd, ...); step arena */
    struct mg_tensor *saved;
    bool freed;             /* its graph was consumed by a backward */
    int64_t walk;           /* the backward that reached it last (autograd/backward.c) */
    unsigned want_mask;     /* the inputs the VJP is asked for (bit i: input i) */
    int64_t seq;
} mg_node;

/* A new node at the end of the tape (step arena); NULL when out of memory. */
mg_node *mg_tape_push(const mg_op_def *def, int n_inputs, mg_dtensor *const *inputs, mg_dtensor *output);
/* A tensor wants a gradient: a leaf that requires it, or the output of a node. */
bool mg_tape_wants_grad(const mg_dtensor *t);

#endif
