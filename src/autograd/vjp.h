/* vjp.h: the vector-Jacobian product of a recorded node (see vjp.c). */
#ifndef MG_VJP_H
#define MG_VJP_H

#include "autograd/tape.h"

/* Only the inputs whose bit is set in `mask` (and that want a gradient) get one. */
int mg_vjp(mg_node *node, mg_dtensor *grad_out, unsigned mask, mg_dtensor **grads_in);

/* The inputs (bit j: input j) whose values the VJP of `op` reads to make the
 * gradient of input i; the engine gives back parameter copies nobody reads. */
unsigned mg_vjp_reads(int op, int i);

#endif
