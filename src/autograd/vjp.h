/* vjp.h: the vector-Jacobian product of a recorded node (see vjp.c). */
#ifndef MG_VJP_H
#define MG_VJP_H

#include "autograd/tape.h"

int mg_vjp(mg_node *node, mg_dtensor *grad_out, mg_dtensor **grads_in);

#endif
