/* backward.c: the backward engine and the gradient calls of meshgrad.h:
 * mg_backward, mg_backward_with, mg_grad, mg_zero_grad, mg_set_requires_grad,
 * mg_step_end; and zero-bubble's split backward (backward.h).
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
 *  3. every parameter copy is given back, the scratch arena (gathered
 *     weights, gradients on their way) reset, and the reducer polled.
 * What happens to a leaf's gradient after that is the reducer's business; it
 * has finished its sums when mg_backward returns.
 *
 * A recomputed segment (recompute.h: a block whose activations were given
 * back after its forward) is in the graph with its nodes as first recorded,
 * their data gone: they count every leaf's uses and take part in the ranks'
 * agreement as any others. When the walk meets them, the segment's function
 * runs again from its kept input (its data in the recompute arena), the new
 * nodes, checked to hash as the first ones, are walked in their place from
 * the output's gradient, and the input's gradient is copied out before the
 * arena is reset: the same VJPs, in the same order, on the same values.
 *
 * mg_backward_with(out, grad) is the same walk from a tensor of any shape,
 * seeded with a given gradient (a pipeline stage's output). The split backward
 * (mg_backward_input) makes step 2 wait, for every leaf but the ones it is
 * told to serve now: their contributions (node, output gradient, which input,
 * last or not) are kept in the order met, and mg_backward_weight hands them to
 * the reducer later, in that order, exactly as step 2 would have. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "autograd/agree.h"
#include "autograd/autograd_state.h"
#include "autograd/backward.h"
#include "autograd/recompute.h"
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

/* ---- the records' VJPs ------------------------------------------------------------- */

/* The gradients of the inputs whose bit is set in `mask` (and that want
 * one): grads_in[i], or NULL. */
static int vjp(mg_node *node, mg_dtensor *grad_out, unsigned mask, mg_dtensor **grads_in) {
    for (int i = 0; i < MG_NODE_MAX_INPUTS; i++) grads_in[i] = NULL;
    node->want_mask = mask;
    if (!node->def->vjp)
        return mg_error(MG_ESTATE, "backward: op %s has no VJP", node->def->name);
    return node->def->vjp(node, grad_out, grads_in);
}

/* The gradient of node's output as its VJP reads it, when that is the same
 * for every input (op_def.h's grad_at_output): summed here, once, rather
 * than once per input that wants a gradient; others get g back. */
static mg_dtensor *vjp_grad_in(const mg_node *node, mg_dtensor *g) {
    return node->def->grad_at_output ? mg_ops_grad_at(g, &node->output->spec) : g;
}

/* ---- the graph --------------------------------------------------------------------- */

/* One more contribution to come for `leaf` (nuses leaves listed so far). */
static int count_use(mg_dtensor *leaf, int *nuses) {
    mg_autograd_state *c = mg_autograd();
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
    mg_autograd_state *c = mg_autograd();
    for (int i = 0; i < nuses; i++)
        if (c->uses[i].leaf == leaf) return --c->uses[i].remaining;
    return 0;
}

static int by_seq_descending(const void *a, const void *b) {
    int64_t x = (*(mg_node *const *)a)->seq, y = (*(mg_node *const *)b)->seq;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The nodes reachable from `root` into *graph (sorted, *n of them). With
 * `nuses`, its leaves with their uses go into the context's `uses` (*nuses),
 * and a graph that reaches a node an earlier backward consumed is refused.
 * Without (a segment run again, recompute.h), the walk stops at nodes before
 * op `first`: only `input` may be such a node's output. */
static int collect_into(mg_node *root, mg_node ***graph, int *cap, int *n, int *nuses,
                        int64_t first, const mg_dtensor *input) {
    mg_autograd_state *c = mg_autograd();
    int64_t walk = ++c->walks;
    *n = 0;
    if (nuses) *nuses = 0;
    /* the graph array doubles as the stack: [0, done) are visited, the rest wait */
    int rc = mg_array_grow((void **)graph, cap, 1, sizeof **graph, "mg_backward");
    if (rc != MG_OK) return rc;
    int top = 0;
    (*graph)[top++] = root;
    root->walk = walk;
    while (*n < top) {
        mg_node *node = (*graph)[(*n)++];
        if (node->freed)
            return mg_error(MG_ESTATE,
                            "mg_backward: part of this graph (op %s) was already freed by an "
                            "earlier mg_backward: run the forward pass again (one backward per "
                            "forward)", node->def->name);
        for (int i = 0; i < node->n_inputs; i++) {
            mg_dtensor *in = node->inputs[i];
            if (!in || !mg_tape_wants_grad(in)) continue;
            mg_dtensor *leaf = leaf_of(in);
            if (leaf) {
                if (nuses && (rc = count_use(leaf, nuses)) != MG_OK) return rc;
            } else if (in->node->seq < first) {
                if (in != input)
                    return mg_error(MG_ESTATE, "mg_backward: a recomputed segment's op %s takes a "
                                    "tensor made before the segment (by op %s) other than its "
                                    "input: give it to the segment as its input, or make it "
                                    "inside", node->def->name, in->node->def->name);
            } else if (in->node->walk != walk) {
                if ((rc = mg_array_grow((void **)graph, cap, top + 1, sizeof **graph,
                                        "mg_backward")) != MG_OK)
                    return rc;
                in->node->walk = walk;
                (*graph)[top++] = in->node;
            }
        }
    }
    qsort(*graph, (size_t)*n, sizeof **graph, by_seq_descending);
    return MG_OK;
}

/* The loss's graph into the context's `graph`, its leaves into `uses`. */
static int collect(mg_node *root, int *n, int *nuses) {
    mg_autograd_state *c = mg_autograd();
    return collect_into(root, &c->graph, &c->cap_graph, n, nuses, INT64_MIN, NULL);
}

/* ---- one node -------------------------------------------------------------------- */

/* The deterministic mode's rule: a Partial gradient is summed over the ranks
 * (in the tree, dist/comm_tree.c) before it meets another, so each addend
 * series is summed on its own, in the order of one rank's. */
static mg_dtensor *summed_now(mg_dtensor *g) {
    mg_spec s = g->spec;
    bool partial = false;
    for (int m = 0; m < s.mesh->ndim; m++)
        if (s.p[m].kind == MG_PLACE_PARTIAL && s.mesh->shape[m] > 1) {
            s.p[m] = MG_REPLICATE;
            partial = true;
        }
    return partial ? mg_op_redistribute(g, &s) : g;
}

/* An intermediate's gradient: summed at the first contribution's spec. `own`:
 * g was made for t alone (op_def.h's vjp_fresh); a sum always is, and later
 * contributions are added into it in place. */
static int accumulate(mg_dtensor *t, mg_dtensor *g, bool own) {
    if (!mg_shape_equal(t->spec.ndim, t->spec.shape, g->spec.ndim, g->spec.shape)) {
        char a[96], b[96];
        return mg_error(MG_ESTATE, "backward: gradient of shape %s for a tensor of shape %s",
                        mg_shape_format(a, sizeof a, g->spec.ndim, g->spec.shape),
                        mg_shape_format(b, sizeof b, t->spec.ndim, t->spec.shape));
    }
    if (mg_get_deterministic() && !(g = summed_now(g))) return mg_last_code();
    if (!t->grad) {
        t->grad = g;
        t->flags = own ? t->flags | MG_DTENSOR_OWN_GRAD : t->flags & ~(unsigned)MG_DTENSOR_OWN_GRAD;
        return MG_OK;
    }
    mg_backend *be = mg_backend_of(t->grad->local);
    mg_dtensor *gg = mg_op_redistribute(g, &t->grad->spec);
    if (!gg) return mg_last_code();
    if (t->flags & MG_DTENSOR_OWN_GRAD) { /* no one else holds it: add in place */
        be->iface->binary(be->context, MG_BINARY_ADD, t->grad->local, gg->local, t->grad->local);
        return MG_OK;
    }
    mg_dtensor *sum = mg_ops_output(&t->grad->spec);
    if (!sum) return mg_last_code();
    be->iface->binary(be->context, MG_BINARY_ADD, t->grad->local, gg->local, sum->local);
    t->grad = sum;
    t->flags |= MG_DTENSOR_OWN_GRAD;
    return MG_OK;
}

/* An op whose VJP can add into its input's gradient in place (vjp_add: a
 * narrow's gradient goes into its slice) does so where that gradient is the
 * engine's own tensor; else the VJP's result is summed in. GPT's q, k and v
 * are narrows of one qkv: three zero (B, T, 3C) tensors and two whole adds
 * the other way, one and two adds of a third this way (the same sums, bit
 * for bit). Returns 1 where it cannot. */
static int add_in_place(mg_node *node, mg_dtensor *g) {
    const mg_dtensor *t = node->inputs[0];
    if (!node->def->vjp_add || !t->grad || !(t->flags & MG_DTENSOR_OWN_GRAD)) return 1;
    return node->def->vjp_add(node, g, t->grad);
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
    int rc = vjp(c->node, c->g, 1u << c->i, grads);
    mg_arena_hint_data(scratch, NULL, 0);
    mg_arena_redirect_data(step, was);
    if (rc != MG_OK) return NULL;
    if (!grads[c->i])
        return mg_error_null(MG_ESTATE, "backward: the VJP of %s gave input %d no gradient",
                             c->node->def->name, c->i);
    return grads[c->i];
}

/* A leaf contribution kept for mg_backward_weight. */
struct mg_backward_item {
    mg_node *node;
    mg_dtensor *g, *leaf; /* g NULL: the leaf's contributions ended without one */
    int i;
    bool last;
};

/* The seed of a leaf root: its gradient is the seed itself. */
static mg_dtensor *seed_value(mg_leaf_grad *lg, void *dest, size_t bytes) {
    (void)dest, (void)bytes;
    return ((contribution *)lg)->g;
}

/* Hands one contribution to the reducer: input i of `node`, whose output
 * gradient is g (node NULL: g is the seed of a leaf root; g NULL with `last`:
 * none came). */
static int hand_over(mg_dtensor *leaf, mg_node *node, mg_dtensor *g, int i, bool last) {
    if (!g) return mg_reducer_add(leaf, NULL, last);
    contribution c = {.base = {.value = node ? contribution_value : seed_value},
                      .node = node, .g = g, .i = i};
    /* the factors as they are now: not a parameter copy given back since the
     * forward (its data is gone until an op gathers it again; value() does) */
    if (!node || !node->def->rows || !node->def->rows(node, g, i, &c.base.rows_a, &c.base.rows_b) ||
        mg_ops_copy_released(c.base.rows_a) || mg_ops_copy_released(c.base.rows_b))
        c.base.rows_a = c.base.rows_b = NULL;
    return mg_reducer_add(leaf, &c.base, last);
}

/* A leaf served now: every leaf, unless a split backward names the ones. */
static bool serve_now(const mg_backward_weights *w, const mg_dtensor *leaf) {
    if (!w) return true;
    for (int k = 0; k < w->n_now; k++)
        if (w->now[k] == leaf) return true;
    return false;
}

static int keep_for_later(mg_backward_weights *w, mg_dtensor *leaf, mg_node *node, mg_dtensor *g,
                          int i, bool last) {
    if (w->n == w->cap)
        return mg_error(MG_ESTATE, "backward: more leaf contributions than the graph counted");
    w->items[w->n++] = (struct mg_backward_item){node, g, leaf, i, last};
    return MG_OK;
}

/* `leaf_data`: NULL, or where the step arena's data must go for a leaf's
 * gradient buffer (a recomputed segment's walk: to *leaf_data, the redirect
 * that held before the segment, NULL for the step arena itself; not to the
 * recompute arena). */
static int backward_node(mg_node *node, mg_dtensor *g, int nuses, mg_backward_weights *w,
                         mg_arena *const *leaf_data) {
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
    if (calls > 1 && !(g = vjp_grad_in(node, g))) return mg_last_code();
    int rc = others ? add_in_place(node, g) : MG_OK;
    if (rc == 1) {
        mg_dtensor *grads[MG_NODE_MAX_INPUTS];
        rc = vjp(node, g, others, grads);
        for (int i = 0; i < node->n_inputs && rc == MG_OK; i++)
            if (grads[i] && (others >> i & 1u))
                rc = accumulate(node->inputs[i], grads[i], node->def->vjp_fresh);
    }
    for (int i = 0; i < node->n_inputs && rc == MG_OK; i++) {
        if (!(leaves >> i & 1u)) continue;
        mg_dtensor *leaf = leaf_of(node->inputs[i]);
        bool last = take_use(leaf, nuses) == 0;
        mg_arena *step = mg_step_arena();
        mg_arena *was = leaf_data ? mg_arena_redirect_data(step, *leaf_data) : NULL;
        rc = serve_now(w, leaf) ? hand_over(leaf, node, g, i, last)
                                : keep_for_later(w, leaf, node, g, i, last);
        if (leaf_data) mg_arena_redirect_data(step, was);
    }
    return rc;
}

/* ---- a recomputed segment (recompute.h) ------------------------------------------ */

/* The run again recorded what the first run did: op for op (`dead`, n of
 * them, as the walk sorted them) the same op, arguments, shapes and
 * placements, and the same leaves and input. */
static int same_ops(const mg_recompute_seg *s, mg_node *const *dead, mg_node *const *live, int n,
                    int nlive) {
    for (int k = 0; k < n && k < nlive; k++) {
        bool same = mg_graph_node_hash(dead[k]) == mg_graph_node_hash(live[k]);
        for (int i = 0; same && i < dead[k]->n_inputs; i++) {
            mg_dtensor *a = dead[k]->inputs[i], *b = live[k]->inputs[i];
            same = !a == !b && (!a || (leaf_of(a) == leaf_of(b) && (a == s->x) == (b == s->x)));
        }
        if (!same)
            return mg_error(MG_ESTATE, "mg_backward: a recomputed segment, run again, recorded op "
                            "%s where it first recorded op %s (op %d of %d from its output): its "
                            "function must record the same ops on the same tensors each time (no "
                            "state of its own)", live[k]->def->name, dead[k]->def->name, k + 1, n);
    }
    if (n != nlive)
        return mg_error(MG_ESTATE, "mg_backward: a recomputed segment, run again, recorded %d ops "
                        "where it first recorded %d: its function must record the same ops each "
                        "time (no state of its own)", nlive, n);
    return MG_OK;
}

/* The walk of segment s, whose first recording's nodes are dead[0 .. n) (no
 * data): its function run again into the recompute arena, the new nodes
 * walked from its output's gradient, its input's gradient copied out. */
static int walk_segment(const mg_recompute_seg *s, mg_node *const *dead, int n, int nuses,
                        mg_backward_weights *w) {
    for (int k = 0; k < n; k++) /* nothing made inside is used after it but y */
        if (dead[k]->output != s->y && dead[k]->output->grad)
            return mg_error(MG_ESTATE, "mg_backward: the output of op %s inside a recomputed "
                            "segment is used after the segment: only its output may be (make the "
                            "use part of the segment, or its own output)", dead[k]->def->name);
    mg_dtensor *gy = s->y->grad;
    if (!gy) return MG_OK; /* no gradient reached it */
    if (w)
        return mg_error(MG_ESTATE, "mg_backward: a split backward (zero-bubble's Bi and W) "
                        "cannot walk a recomputed segment: W would need the activations the "
                        "segment gives back; use another schedule, or no recomputation");
    mg_autograd_state *c = mg_autograd();
    mg_arena *step = mg_step_arena(), *arena = mg_recompute_arena();
    if (!arena) return mg_last_code();
    mg_arena *was = mg_arena_redirect_data(step, arena);
    int64_t first = 0;
    int nlive = 0, rc = MG_OK;
    mg_trace_begin(MG_TRACE_PHASE, "recompute", 0);
    mg_dtensor *y = mg_recompute_again(s, &first);
    mg_trace_end();
    if (!y) rc = mg_last_code() ? mg_last_code() : MG_ESTATE;
    else if (!y->node || y->node->seq < first)
        rc = mg_error(MG_ESTATE, "mg_backward: a recomputed segment, run again, gave an output "
                      "it did not make");
    if (rc == MG_OK)
        rc = collect_into(y->node, &c->replay, &c->cap_replay, &nlive, NULL, first, s->x);
    if (rc == MG_OK) rc = same_ops(s, dead, c->replay, n, nlive);
    if (rc == MG_OK) {
        y->grad = gy;
        y->flags = (y->flags & ~(unsigned)MG_DTENSOR_OWN_GRAD) | (s->y->flags & MG_DTENSOR_OWN_GRAD);
    }
    for (int k = 0; k < nlive && rc == MG_OK; k++) {
        mg_node *node = c->replay[k];
        node->freed = true;
        mg_dtensor *g = node->output->grad;
        if (!g) continue;
        mg_trace_begin(MG_TRACE_BACKWARD, node->def->name, node->seq);
        rc = backward_node(node, g, nuses, NULL, &was);
        mg_trace_end();
        mg_ops_release_all();
        if (rc == MG_OK) rc = mg_reducer_poll();
    }
    mg_arena_redirect_data(step, was);
    /* the input's gradient (not a leaf's: that is the reducer's) out of the arena */
    mg_dtensor *gx = rc == MG_OK && s->x->node && s->x->grad ? mg_recompute_keep(s->x->grad) : NULL;
    if (gx) {
        s->x->grad = gx;
        s->x->flags |= MG_DTENSOR_OWN_GRAD;
    } else if (rc == MG_OK && s->x->node && s->x->grad) {
        rc = mg_last_code() ? mg_last_code() : MG_ENOMEM;
    }
    mg_arena_reset(arena);
    return rc;
}

/* ---- the calls ------------------------------------------------------------------- */

/* The walk from `root`, seeded with `seed` (root's spec). w: NULL, or a split
 * backward's list (backward.h). */
static int walk(mg_dtensor *root, mg_dtensor *seed, mg_backward_weights *w) {
    int n = 0, nuses = 0;
    int rc = root->node ? collect(root->node, &n, &nuses) : MG_OK;
    if (root->node) { /* the root's mesh recorded one graph (agree.h); a rank that refused joins */
        int agreed = mg_graph_agree(root->spec.mesh, mg_autograd()->graph, rc == MG_OK ? n : -1,
                                    "mg_backward");
        if (rc == MG_OK) rc = agreed;
    }
    if (rc != MG_OK) return rc; /* refused: nothing changed */
    mg_autograd_state *c = mg_autograd();
    if (w) { /* room for every contribution to be kept */
        int total = 0;
        for (int i = 0; i < nuses; i++) total += c->uses[i].remaining;
        w->n = 0;
        w->cap = total + nuses + 1;
        w->items = mg_arena_alloc(mg_step_arena(), (size_t)w->cap * sizeof *w->items);
        if (!w->items) return mg_last_code();
    }
    int was = mg_set_grad_enabled(0);
    if (!root->node) {
        rc = serve_now(w, root) ? hand_over(root, NULL, seed, 0, true)
                                : keep_for_later(w, root, NULL, seed, 0, true);
    } else {
        root->grad = seed;
        root->flags &= ~(unsigned)MG_DTENSOR_OWN_GRAD;
    }
    for (int k = 0; k < n; k++) {
        mg_node *node = c->graph[k];
        node->freed = true;
        const mg_recompute_seg *s = c->n_segments ? mg_recompute_find(node->seq) : NULL;
        if (s) { /* the segment's nodes, contiguous here: walked as it runs again */
            int end = k + 1;
            while (end < n && c->graph[end]->seq >= s->lo) c->graph[end++]->freed = true;
            if (rc == MG_OK) rc = walk_segment(s, c->graph + k, end - k, nuses, w);
            k = end - 1;
            continue;
        }
        mg_dtensor *g = node->output->grad;
        if (rc != MG_OK || !g) continue;
        mg_trace_begin(MG_TRACE_BACKWARD, node->def->name, node->seq); /* --trace */
        rc = backward_node(node, g, nuses, w, NULL);
        mg_trace_end();
        mg_ops_release_all();
        if (rc == MG_OK) rc = mg_reducer_poll();
    }
    /* leaves whose last use got no gradient: their contributions are complete */
    for (int i = 0; i < nuses && rc == MG_OK; i++) {
        if (c->uses[i].remaining <= 0) continue;
        mg_dtensor *leaf = c->uses[i].leaf;
        rc = serve_now(w, leaf) ? hand_over(leaf, NULL, NULL, 0, true)
                                : keep_for_later(w, leaf, NULL, NULL, 0, true);
    }
    int sums = mg_reducer_backward_end(); /* also after a failure: nothing left in flight */
    if (rc == MG_OK) rc = sums;
    mg_set_grad_enabled(was);
    return rc;
}

/* The seed: 1 for a 0-d root without `grad`, else grad at root's spec
 * (Partial made Replicate, as every gradient of a Partial value). */
static mg_dtensor *make_seed(mg_dtensor *root, const mg_dtensor *grad, const char *who) {
    if (!root) return mg_error_null(MG_EINVAL, "%s: the output is NULL", who);
    if (mg_dtensor_alive(root, who) != MG_OK || (grad && mg_dtensor_alive(grad, who) != MG_OK))
        return NULL;
    if (!root->node && !root->requires_grad)
        return mg_error_null(MG_ESTATE,
                             "%s: the output does not depend on any tensor that requires grad "
                             "(call mg_set_requires_grad on the parameters, and keep grad "
                             "enabled during the forward pass)", who);
    char a[96], b[96];
    if (!grad) {
        if (root->spec.ndim != 0)
            return mg_error_null(MG_ESHAPE, "%s: the output has shape %s; backward without a "
                                 "gradient needs a scalar (0-d): reduce it first with mg_sum or "
                                 "mg_mean, or give the gradient (mg_backward_with)", who,
                                 mg_shape_format(a, sizeof a, root->spec.ndim, root->spec.shape));
        int was = mg_set_grad_enabled(0);
        mg_dtensor *one = mg_op_scalar(root->spec.mesh, 1.0f);
        mg_set_grad_enabled(was);
        return one;
    }
    if (!mg_shape_equal(root->spec.ndim, root->spec.shape, grad->spec.ndim, grad->spec.shape))
        return mg_error_null(MG_ESHAPE, "%s: a gradient of shape %s for an output of shape %s: "
                             "give one of the output's shape", who,
                             mg_shape_format(a, sizeof a, grad->spec.ndim, grad->spec.shape),
                             mg_shape_format(b, sizeof b, root->spec.ndim, root->spec.shape));
    if (grad->spec.mesh != root->spec.mesh)
        return mg_error_null(MG_EINVAL, "%s: the gradient lives on another mesh than the output",
                             who);
    mg_spec at = root->spec; /* the gradient of a Partial value is Replicate */
    for (int m = 0; m < mg_mesh_ndim(at.mesh); m++)
        if (at.p[m].kind == MG_PLACE_PARTIAL) at.p[m] = MG_REPLICATE;
    int was = mg_set_grad_enabled(0);
    mg_dtensor *seed = mg_op_redistribute(grad, &at);
    mg_set_grad_enabled(was);
    /* a leaf's gradient buffer (mg_grad of a parameter) as the seed would take
     * that leaf's contributions while the walk still reads it: read a copy */
    if (seed && mg_reducer_holds(seed->local)) {
        mg_dtensor *copy = mg_ops_output(&seed->spec);
        if (!copy) return NULL;
        mg_backend *be = mg_backend_of(seed->local);
        be->iface->copy(be->context, seed->local, copy->local);
        seed = copy;
    }
    return seed;
}

int mg_backward(mg_dtensor *loss) {
    if (mg_check_not_finalized("mg_backward") != MG_OK) return MG_ESTATE; /* its graph is gone */
    if (loss && mg_dtensor_alive(loss, "mg_backward") != MG_OK) return mg_last_code();
    if (loss && loss->spec.ndim != 0) {
        char s[96];
        return mg_error(MG_ESHAPE,
                        "mg_backward: the loss has shape %s; backward needs a scalar (0-d): "
                        "reduce it first with mg_sum or mg_mean",
                        mg_shape_format(s, sizeof s, loss->spec.ndim, loss->spec.shape));
    }
    return mg_backward_with(loss, NULL);
}

int mg_backward_with(mg_dtensor *out, const mg_dtensor *grad) {
    if (mg_check_not_finalized("mg_backward") != MG_OK) return MG_ESTATE;
    mg_dtensor *seed = make_seed(out, grad, "mg_backward");
    return seed ? walk(out, seed, NULL) : mg_last_code();
}

int mg_backward_input(mg_dtensor *out, const mg_dtensor *grad, mg_backward_weights *w) {
    if (mg_check_not_finalized("mg_backward_input") != MG_OK) return MG_ESTATE;
    mg_dtensor *seed = make_seed(out, grad, "mg_backward_input");
    return seed ? walk(out, seed, w) : mg_last_code();
}

int mg_backward_weight(mg_backward_weights *w) {
    int was = mg_set_grad_enabled(0), rc = MG_OK;
    for (int k = 0; k < w->n && rc == MG_OK; k++) {
        struct mg_backward_item *it = &w->items[k];
        rc = hand_over(it->leaf, it->node, it->g, it->i, it->last);
        mg_ops_release_all();
        if (rc == MG_OK) rc = mg_reducer_poll();
    }
    w->n = 0;
    int sums = mg_reducer_backward_end();
    mg_set_grad_enabled(was);
    return rc == MG_OK ? sums : rc;
}

mg_dtensor *mg_grad(const mg_dtensor *t) {
    if (!t) return mg_error_null(MG_EINVAL, "mg_grad: the tensor is NULL");
    if (mg_dtensor_alive(t, "mg_grad") != MG_OK) return NULL;
    mg_clear_error();
    return mg_reducer_grad((mg_dtensor *)t);
}

int mg_zero_grad(mg_dtensor *t) {
    if (!t) return mg_error(MG_EINVAL, "mg_zero_grad: tensor is NULL");
    if (mg_dtensor_alive(t, "mg_zero_grad") != MG_OK) return mg_last_code();
    if (t->node) t->grad = NULL, t->flags &= ~(unsigned)MG_DTENSOR_OWN_GRAD;
    else mg_reducer_zero(t);
    return MG_OK;
}

int mg_set_requires_grad(mg_dtensor *t, int on) {
    if (!t) return mg_error(MG_EINVAL, "mg_set_requires_grad: tensor is NULL");
    if (mg_dtensor_alive(t, "mg_set_requires_grad") != MG_OK) return mg_last_code();
    if (t->node)
        return mg_error(MG_EINVAL,
                        "mg_set_requires_grad: only leaf tensors (made by mg_distribute or "
                        "mg_from_local) can be asked for gradients; this one is the output of %s",
                        t->node->def->name);
    t->requires_grad = on ? 1 : 0;
    return MG_OK;
}

void mg_step_end(void) {
    mg_ops_step_end();
    mg_recompute_step_end();
    mg_reducer_step_end();
    mg_arena *step = mg_step_arena();
    mg_arena_reset(step);
    /* the graphs are gone: their tensors may be freed (dtensor.h), and the
     * step's results are dead (mg_dtensor_alive) */
    ++mg_ctx()->steps; /* each step's headers at an offset of their own (dtensor.c) */
}
