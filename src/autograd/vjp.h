/* vjp.h: the vector-Jacobian product of a recorded node (see vjp.c). */
#ifndef MG_VJP_H
#define MG_VJP_H

#include "ops/tape.h"

/* Only the inputs whose bit is set in `mask` (and that want a gradient) get one. */
int mg_vjp(mg_node *node, mg_dtensor *grad_out, unsigned mask, mg_dtensor **grads_in);

/* When the gradient of input i is, by the op's VJP, a sum over rows of a^T b
 * (a linear's weight: dW = dy^T x, a = grad_out, b = x), sets a and b and
 * returns true: the gradient reducer may compute it in pieces (dist/reducer.h). */
bool mg_vjp_rows(const mg_node *node, mg_dtensor *grad_out, int i, const mg_dtensor **a,
                 const mg_dtensor **b);

/* The gradient of node's output as its VJP reads it when that is the same for
 * every input: the ops whose VJP takes the gradient at the output's placements
 * with Partial made Replicate (layer norm, softmax, embedding, attention,
 * cross-entropy) get it summed here, once, rather than once per input that
 * wants a gradient; others get g back. NULL with a message on failure. */
mg_dtensor *mg_vjp_grad_in(const mg_node *node, mg_dtensor *g);

#endif
