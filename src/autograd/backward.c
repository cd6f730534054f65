/* backward.c: the backward engine and the gradient calls of meshgrad.h:
 * mg_backward, mg_grad, mg_zero_grad, mg_set_requires_grad, mg_step_end.
 *
 * mg_backward(loss) walks the loss's own graph: the nodes reachable from the
 * loss through their inputs (a parameter copy counts as its parameter, ops.h),
 * in descending recording order, so a node runs after every node that used its
 * output. A step may record any number of graphs (micro-batches, several
 * losses): each backward walks only its own, and refuses, changing nothing, a
 * graph an earlier backward consumed. At each node reached by a gradient:
 *  1. the gradients of its inputs that are not leaves are computed (their
 *     VJPs, in the step arena) and summed into those inputs' gradients, at the
 *     first contribution's spec;
 *  2. each leaf input (a tensor that requires grad, or a parameter copy) has
 *     its contribution handed to the gradient reducer (dist/reducer.h), which
 *     asks for it in the form it wants, computed in the scratch arena, and is
 *     told which contribution is the leaf's last in this graph;
 *  3. the scratch arena is reset and the reducer polled.
 * What happens to a leaf's gradient after that is the reducer's business; it
 * has finished its sums when mg_backward returns. */
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "autograd/vjp.h"
#include "backend/backend.h"
#include "context.h"
#include "dist/reducer.h"
#include "ops/ops.h"
#include "ops/tape.h"
#include "status.h"
#include "trace.h"

/* The leaf behind input t: t itself (a leaf that requires grad), or the
 * parameter of a parameter copy; NULL for anything else. */
static mg_dtensor *leaf_of(mg_dtensor *t) {
    if (!t->node) return t->requires_grad ? t : NULL;
    return mg_ops_param_of(t);
}

/* ---- the graph --------------------------------------------------------------------- */

/* One more contribution to come for `leaf` (nuses leaves listed so far). */
static int count_use(mg_dtensor *leaf, int *nuses) {
    mg_context *c = mg_ctx();
    for (int i = 0; i < *nuses; i++)
        if (c->uses[i].leaf == leaf) {
            c->uses[i].remaining++;
            return MG_OK;
        }
    int rc = mg_array_grow((void **)&c->uses, &c->cap_uses, *nuses + 1, sizeof *c->uses, "mg_backward");
    if (rc != MG_OK) return rc;
    c->uses[(*nuses)++] = (mg_leaf_uses){leaf, 1};
    return MG_OK;
}

/* The contributions still to come for `leaf`, after taking one. */
static int take_use(mg_dtensor *leaf, int nuses) {
    mg_context *c = mg_ctx();
    for (int i = 0; i < nuses; i++)
        if (c->uses[i].leaf == leaf) return --c->uses[i].remaining;
    return 0;
}

static int by_seq_descending(const void *a, const void *b) {
    int64_t x = (*(mg_node *const *)a)->seq, y = (*(mg_node *const *)b)->seq;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The nodes reachable from `root` into the context's `graph` (sorted, *n of
 * them), and its leaves with their uses into `uses` (*nuses). Refuses a graph
 * that reaches a node an earlier backward consumed. */
static int collect(mg_node *root, int *n, int *nuses) {
    mg_context *c = mg_ctx();
    int64_t walk = ++c->walks;
    *n = *nuses = 0;
    /* the graph array doubles as the stack: [0, done) are visited, the rest wait */
    int rc = mg_array_grow((void **)&c->graph, &c->cap_graph, 1, sizeof *c->graph, "mg_backward");
    if (rc != MG_OK) return rc;
    int top = 0;
    c->graph[top++] = root;
    root->walk = walk;
    while (*n < top) {
        mg_node *node = c->graph[(*n)++];
        if (node->freed)
            return mg_error(MG_ESTATE,
                            "mg_backward: part of this graph (op %s) was already freed by an "
                            "earlier mg_backward: run the forward pass again (one backward per "
                            "forward)", mg_op_names[node->op]);
        for (int i = 0; i < node->n_inputs; i++) {
            mg_dtensor *in = node->inputs[i];
            if (!in || !mg_tape_wants_grad(in)) continue;
            mg_dtensor *leaf = leaf_of(in);
            if (leaf) {
                if ((rc = count_use(leaf, nuses)) != MG_OK) return rc;
            } else if (in->node->walk != walk) {
                if ((rc = mg_array_grow((void **)&c->graph, &c->cap_graph, top + 1, sizeof *c->graph,
                                        "mg_backward")) != MG_OK)
                    return rc;
                in->node->walk = walk;
                c->graph[top++] = in->node;
            }
        }
    }
    qsort(c->graph, (size_t)*n, sizeof *c->graph, by_seq_descending);
    return MG_OK;
}

/* ---- one node -------------------------------------------------------------------- */

/* An intermediate's gradient: summed at the first contribution's spec. */
static int accumulate(mg_dtensor *t, mg_dtensor *g) {
    if (!mg_shape_equal(t->spec.ndim, t->spec.shape, g->spec.ndim, g->spec.shape)) {
        char a[96], b[96];
        return mg_error(MG_ESTATE, "backward: gradient of shape %s for a tensor of shape %s",
                        mg_shape_format(a, sizeof a, g->spec.ndim, g->spec.shape),
                        mg_shape_format(b, sizeof b, t->spec.ndim, t->spec.shape));
    }
    if (!t->grad) {
        t->grad = g;
        return MG_OK;
    }
    mg_backend *be = mg_backend_of(t->grad->local);
    mg_dtensor *gg = mg_op_redistribute(g, &t->grad->spec);
    if (!gg) return mg_last_code();
    mg_dtensor *sum = mg_ops_output(&t->grad->spec);
    if (!sum) return mg_last_code();
    be->iface->binary(be->context, MG_BINARY_ADD, t->grad->local, gg->local, sum->local);
    t->grad = sum;
    return MG_OK;
}

/* A leaf input's contribution, as the reducer asks for it. */
typedef struct {
    mg_leaf_grad base;
    mg_node *node;
    mg_dtensor *g; /* the node's output gradient */
    int i;         /* which input */
} contribution;

/* The VJP for input i alone, its data in the scratch arena (into `dest` when
 * the last kernel's output has that size). */
static mg_dtensor *contribution_value(mg_leaf_grad *lg, void *dest, size_t bytes) {
    contribution *c = (contribution *)lg;
    mg_arena *step = mg_step_arena(), *scratch = mg_scratch_arena();
    mg_arena *was = mg_arena_redirect_data(step, scratch);
    mg_arena_hint_data(scratch, dest, bytes);
    mg_dtensor *grads[MG_NODE_MAX_INPUTS];
    int rc = mg_vjp(c->node, c->g, 1u << c->i, grads);
    mg_arena_hint_data(scratch, NULL, 0);
    mg_arena_redirect_data(step, was);
    if (rc != MG_OK) return NULL;
    if (!grads[c->i])
        return mg_error_null(MG_ESTATE, "backward: the VJP of %s gave input %d no gradient",
                             mg_op_names[c->node->op], c->i);
    return grads[c->i];
}

static int backward_node(mg_node *node, mg_dtensor *g, int nuses) {
    unsigned leaves = 0, others = 0;
    int calls = 0; /* VJP calls: one for the others, one per leaf */
    for (int i = 0; i < node->n_inputs; i++) {
        mg_dtensor *in = node->inputs[i];
        if (!in || !mg_tape_wants_grad(in)) continue;
        if (leaf_of(in)) leaves |= 1u << i, calls++;
        else calls += !others, others |= 1u << i;
    }
    /* a gradient several calls sum the same way is summed once (a layer norm's
     * x, weight and bias: one all-reduce of a Partial gradient, not three) */
    if (calls > 1 && !(g = mg_vjp_grad_in(node, g))) return mg_last_code();
    int rc = MG_OK;
    if (others) {
        mg_dtensor *grads[MG_NODE_MAX_INPUTS];
        rc = mg_vjp(node, g, others, grads);
        for (int i = 0; i < node->n_inputs && rc == MG_OK; i++)
            if (grads[i] && (others >> i & 1u)) rc = accumulate(node->inputs[i], grads[i]);
    }
    for (int i = 0; i < node->n_inputs && rc == MG_OK; i++) {
        if (!(leaves >> i & 1u)) continue;
        mg_dtensor *leaf = leaf_of(node->inputs[i]);
        contribution c = {.base = {.value = contribution_value}, .node = node, .g = g, .i = i};
        if (!mg_vjp_rows(node, g, i, &c.base.rows_a, &c.base.rows_b))
            c.base.rows_a = c.base.rows_b = NULL;
        rc = mg_reducer_add(leaf, &c.base, take_use(leaf, nuses) == 0);
    }
    return rc;
}

/* ---- the calls ------------------------------------------------------------------- */

/* The seed of a leaf loss: d loss / d loss = 1. */
static mg_dtensor *seed_value(mg_leaf_grad *lg, void *dest, size_t bytes) {
    (void)dest, (void)bytes;
    return ((contribution *)lg)->g;
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
    int n = 0, nuses = 0;
    int rc = loss->node ? collect(loss->node, &n, &nuses) : MG_OK;
    if (rc != MG_OK) return rc; /* refused: nothing changed */
    int was = mg_set_grad_enabled(0);
    mg_dtensor *seed = mg_op_scalar(loss->spec.mesh, 1.0f);
    if (!seed) rc = mg_last_code();
    if (rc == MG_OK && !loss->node) {
        contribution c = {.base = {.value = seed_value}, .g = seed};
        rc = mg_reducer_add(loss, &c.base, true);
    }
    mg_context *c = mg_ctx();
    if (rc == MG_OK && loss->node) loss->grad = seed;
    for (int k = 0; k < n; k++) {
        mg_node *node = c->graph[k];
        node->freed = true;
        mg_dtensor *g = node->output->grad;
        if (rc != MG_OK || !g) continue;
        mg_trace_begin(MG_TRACE_BACKWARD, mg_op_names[node->op], node->seq); /* --trace */
        rc = backward_node(node, g, nuses);
        mg_trace_end();
        mg_arena_reset(mg_scratch_arena());
        if (rc == MG_OK) rc = mg_reducer_poll();
    }
    /* leaves whose last use got no gradient: their contributions are complete */
    for (int i = 0; i < nuses && rc == MG_OK; i++)
        if (c->uses[i].remaining > 0) rc = mg_reducer_add(c->uses[i].leaf, NULL, true);
    int sums = mg_reducer_backward_end(); /* also after a failure: nothing left in flight */
    if (rc == MG_OK) rc = sums;
    mg_set_grad_enabled(was);
    return rc;
}

mg_dtensor *mg_grad(const mg_dtensor *t) {
    if (!t) return mg_error_null(MG_EINVAL, "mg_grad: the tensor is NULL");
    mg_clear_error();
    return mg_reducer_grad((mg_dtensor *)t);
}

int mg_zero_grad(mg_dtensor *t) {
    if (!t) return mg_error(MG_EINVAL, "mg_zero_grad: tensor is NULL");
    if (t->node) t->grad = NULL;
    else mg_reducer_zero(t);
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
    mg_ops_step_end();
    mg_reducer_step_end();
    mg_arena_reset(mg_scratch_arena());
    mg_arena_reset(mg_step_arena());
}
