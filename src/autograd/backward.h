/* backward.h: zero-bubble's split backward (Qi et al. 2023), for pipeline
 * stages (nn/pipeline_exec.h). A stage's backward is cut in two:
 *
 *   Bi  mg_backward_input(out, grad, w): the whole walk of mg_backward_with
 *       (every VJP of an intermediate: the input gradient), but of the leaf
 *       contributions only those to the leaves listed in w->now (the stage's
 *       received input) reach the reducer; the others (the weights and
 *       biases) are kept in *w, in the order the walk met them.
 *   W   mg_backward_weight(w): hands the kept contributions to the reducer in
 *       that order, each computed then (dW = dy^T x from the node's output
 *       gradient and saved input), exactly as the walk would have: the
 *       gradients have the same bits as one mg_backward_with.
 *
 * Between the two, the graph's tensors (the output gradients and the saved
 * activations) must stay alive: the list and its tensors live in the step
 * arena, so W runs before mg_step_end.
 *
 * Exports: mg_backward_weights, mg_backward_input, mg_backward_weight (and
 * mg_backward_with is in meshgrad.h). */
#ifndef MG_AUTOGRAD_BACKWARD_H
#define MG_AUTOGRAD_BACKWARD_H

#include "meshgrad.h"

struct mg_backward_item; /* backward.c */

typedef struct {
    mg_dtensor *const *now; /* the leaves served by Bi */
    int n_now;
    struct mg_backward_item *items; /* kept by Bi (step arena) */
    int n, cap;
} mg_backward_weights;

/* Bi: out's graph from grad (out's shape; NULL for a 0-d out: 1); w->now and
 * w->n_now set by the caller. */
int mg_backward_input(mg_dtensor *out, const mg_dtensor *grad, mg_backward_weights *w);
/* W: the contributions Bi kept (then none are left). */
int mg_backward_weight(mg_backward_weights *w);

#endif
