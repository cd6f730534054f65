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

#endif
