/* backward.c: the backward engine and the gradient calls of meshgrad.h:
 * mg_backward, mg_grad, mg_zero_grad, mg_set_requires_grad, mg_step_end.
 *
 * mg_backward(loss) seeds d loss = 1 (Replicate) and walks the tape from the
 * loss's node back to the start. Each node reached by a gradient runs its VJP;
 * each input's gradient is accumulated: a leaf's gradient is brought to the
 * leaf's own placement (a Partial placement becomes Replicate) and added into
 * a long-lived tensor; an intermediate's gradients are summed at the first
 * one's spec. Visited nodes are marked freed: a second backward through them is
 * refused. */
#include <string.h>

#include "autograd/tape.h"
#include "autograd/vjp.h"
#include "backend/backend.h"
#include "dist/mesh.h"
#include "ops.h"
#include "status.h"

static int accumulate(mg_dtensor *t, mg_dtensor *g) {
    if (!mg_shape_equal(t->spec.ndim, t->spec.shape, g->spec.ndim, g->spec.shape)) {
        char a[96], b[96];
        return mg_error(MG_ESTATE, "backward: gradient of shape %s for a tensor of shape %s",
                        mg_shape_format(a, sizeof a, g->spec.ndim, g->spec.shape),
                        mg_shape_format(b, sizeof b, t->spec.ndim, t->spec.shape));
    }
    mg_backend *be = mg_backend_of(t->local);
    if (!t->node) { /* a leaf: its gradient lives in its own placement */
        mg_spec target = t->spec;
        for (int m = 0; m < target.mesh->ndim; m++)
            if (target.p[m].kind == MG_PLACE_PARTIAL) target.p[m] = MG_REPLICATE;
        mg_dtensor *gg = mg_op_redistribute(g, &target);
        if (!gg) return mg_last_code();
        if (!t->grad) {
            t->grad = mg_dtensor_zeros(&target, (t->flags & MG_DTENSOR_HEAP) ? NULL : mg_step_arena());
            if (!t->grad) return mg_last_code();
        }
        be->iface->axpy(be->context, 1.0f, gg->local, t->grad->local);
        return MG_OK;
    }
    if (!t->grad) {
        t->grad = g;
        return MG_OK;
    }
    mg_dtensor *gg = mg_op_redistribute(g, &t->grad->spec);
    if (!gg) return mg_last_code();
    mg_dtensor *sum = mg_ops_output(&t->grad->spec);
    if (!sum) return mg_last_code();
    be->iface->binary(be->context, MG_BINARY_ADD, t->grad->local, gg->local, sum->local);
    t->grad = sum;
    return MG_OK;
}

int mg_backward(mg_dtensor *loss) {
    if (!loss) return mg_error(MG_EINVAL, "mg_backward: loss is NULL");
    if (loss->spec.ndim != 0) {
        char s[96];
        return mg_error(MG_ESHAPE,
                        "mg_backward: the loss has shape %s; backward needs a scalar (0-d): "
                        "reduce it first with mg_sum or mg_mean",
                        mg_shape_format(s, sizeof s, loss->spec.ndim, loss->spec.shape));
    }
    if (!loss->node && !loss->requires_grad)
        return mg_error(MG_ESTATE,
                        "mg_backward: the loss does not depend on any tensor that requires grad "
                        "(call mg_set_requires_grad on the parameters, and keep grad enabled "
                        "during the forward pass)");
    if (loss->node && loss->node->freed)
        return mg_error(MG_ESTATE,
                        "mg_backward: the graph of this loss was already freed by an earlier "
                        "mg_backward: run the forward pass again (one backward per forward)");
    int was = mg_set_grad_enabled(0);
    int rc = MG_OK;
    mg_dtensor *seed = mg_op_scalar(loss->spec.mesh, 1.0f);
    if (!seed) rc = mg_last_code();
    if (rc == MG_OK && !loss->node) rc = accumulate(loss, seed);
    if (rc == MG_OK && loss->node) loss->grad = seed;
    for (mg_node *node = loss->node; rc == MG_OK && node; node = node->prev) {
        mg_dtensor *g = node->output->grad;
        if (!g) continue;
        if (node->freed) {
            rc = mg_error(MG_ESTATE,
                          "mg_backward: part of this graph (op %s) was already freed by an earlier "
                          "mg_backward: run the forward pass again",
                          mg_op_names[node->op]);
            break;
        }
        mg_dtensor *grads[MG_NODE_MAX_INPUTS];
        rc = mg_vjp(node, g, grads);
        if (rc != MG_OK) break;
        for (int i = 0; i < node->n_inputs && rc == MG_OK; i++)
            if (grads[i] && mg_tape_wants_grad(node->inputs[i])) rc = accumulate(node->inputs[i], grads[i]);
        node->freed = true;
    }
    mg_set_grad_enabled(was);
    return rc;
}

mg_dtensor *mg_grad(const mg_dtensor *t) { return t ? t->grad : NULL; }

int mg_zero_grad(mg_dtensor *t) {
    if (!t) return mg_error(MG_EINVAL, "mg_zero_grad: tensor is NULL");
    if (t->grad && !t->node) {
        mg_backend *be = mg_backend_of(t->grad->local);
        be->iface->fill(be->context, t->grad->local, 0.0f);
    } else if (t->node) {
        t->grad = NULL;
    }
    return MG_OK;
}

int mg_set_requires_grad(mg_dtensor *t, int on) {
    if (!t) return mg_error(MG_EINVAL, "mg_set_requires_grad: tensor is NULL");
    if (t->node)
        return mg_error(MG_EINVAL,
                        "mg_set_requires_grad: only leaf tensors (made by mg_distribute or "
                        "mg_from_local) can be asked for gradients; this one is the output of %s",
                        mg_op_names[t->node->op]);
    t->requires_grad = on ? 1 : 0;
    return MG_OK;
}

void mg_step_end(void) {
    mg_tape_clear();
    mg_arena_reset(mg_step_arena());
}
