/* backward.c: the backward engine and the gradient calls of meshgrad.h:
 * mg_backward, mg_grad, mg_zero_grad, mg_set_requires_grad, mg_step_end.
 *
 * mg_backward(loss) seeds d loss = 1 (Replicate) and walks the tape from the
 * loss's node back to the start. At each node reached by a gradient:
 *  1. parameters the op gathered for itself (ops.c released them after the
 *     forward op) are gathered again, into the scratch arena;
 *  2. the gradients of its other inputs are computed (step arena) and summed
 *     into those inputs' gradients, at the first one's spec;
 *  3. each parameter's gradient is computed on its own, in the scratch arena,
 *     and brought to the parameter's placement (a Partial placement becomes
 *     Replicate; a gathered parameter goes back through the mirror of its
 *     gather, e.g. a reduce-scatter) straight into the parameter's gradient
 *     buffer: when that buffer counts as zero (mg_zero_grad), the last kernel
 *     writes into it directly (an arena hint), else the result is added.
 *     A data-parallel all-reduce is not waited for: grad_sync.c starts it in
 *     buckets and it completes while later nodes run, before mg_backward
 *     returns. A parameter whose optimizer sums the gradient itself
 *     (MG_DTENSOR_GRAD_DEFER, nn/optim_shard.h) keeps this rank's part,
 *     marked MG_DTENSOR_GRAD_UNSUMMED, and mg_grad sums it when asked; if it
 *     is a linear's weight, each rank computes its rows of the sum instead
 *     (MG_DTENSOR_GRAD_ROWS, grad_rows.h), and mg_grad gathers them;
 *  4. the scratch arena is reset: it only ever holds one node's worth.
 * Visited nodes are marked freed: a second backward through them is refused. */
#include <stdlib.h>
#include <string.h>

#include "autograd/grad_rows.h"
#include "autograd/grad_sync.h"
#include "autograd/tape.h"
#include "autograd/vjp.h"
#include "backend/backend.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "ops.h"
#include "status.h"

/* The parameter behind t: t itself (a leaf that requires grad), or the
 * parameter of a parameter copy (ops.h); NULL for anything else. */
static mg_dtensor *param_of(mg_dtensor *t) {
    if (!t->node) return t->requires_grad ? t : NULL;
    if (t->flags & MG_DTENSOR_PARAM_COPY) return t->param_source;
    return NULL;
}

static int check_shape(const mg_dtensor *t, const mg_dtensor *g) {
    if (mg_shape_equal(t->spec.ndim, t->spec.shape, g->spec.ndim, g->spec.shape)) return MG_OK;
    char a[96], b[96];
    return mg_error(MG_ESTATE, "backward: gradient of shape %s for a tensor of shape %s",
                    mg_shape_format(a, sizeof a, g->spec.ndim, g->spec.shape),
                    mg_shape_format(b, sizeof b, t->spec.ndim, t->spec.shape));
}

/* A leaf's gradient lives at the leaf's placements, Partial made Replicate. */
static mg_spec grad_spec(const mg_dtensor *t) {
    mg_spec target = t->spec;
    for (int m = 0; m < target.mesh->ndim; m++)
        if (target.p[m].kind == MG_PLACE_PARTIAL) target.p[m] = MG_REPLICATE;
    return target;
}

/* The leaf's gradient buffer, made on first use (uninitialized, counting as zero). */
static int grad_buffer(mg_dtensor *t) {
    if (t->grad) return MG_OK;
    mg_spec target = grad_spec(t);
    mg_arena *arena = (t->flags & MG_DTENSOR_HEAP) ? NULL : mg_step_arena();
    int64_t local[MG_MAX_DIMS];
    mg_spec_local(&target, NULL, local, NULL);
    mg_tensor *buf = mg_tensor_alloc(arena, target.ndim, local);
    if (!buf) return mg_last_code();
    t->grad = mg_dtensor_make(&target, buf, arena);
    if (!t->grad) return mg_last_code();
    t->flags |= MG_DTENSOR_GRAD_ZERO;
    return MG_OK;
}

/* from equals to except for mesh dims that are Partial in `from` and Replicate
 * in `to`: the local blocks then have the same shape and an all-reduce over
 * those dims turns one into the other. */
static bool partial_only(const mg_spec *from, const mg_spec *to) {
    for (int m = 0; m < from->mesh->ndim; m++) {
        if (mg_placement_equal(from->p[m], to->p[m])) continue;
        if (from->p[m].kind != MG_PLACE_PARTIAL || to->p[m].kind != MG_PLACE_REPLICATE) return false;
    }
    return true;
}

/* A large CPU gradient summed over one comm lives in memory the comm can sum
 * without copies (a shared window when the ranks share a node, comm_shm.h).
 * It moves there the first time it is summed, so every step, the first one
 * included, sums it the same way (a resumed run continues bit for bit). The
 * move allocates collectively: every rank reaches it at the same node.
 * 1: the buffer is there; 0: it stays where it is (no shared memory here, or
 * not ours to move); negative: an error. */
static int share_grad(mg_tensor *buf, mg_comm *comm) {
    if (mg_comm_shared_peer(comm, buf->data, buf->numel, 0)) return 1;
    if (buf->device != MG_DEVICE_CPU || !(buf->flags & MG_TENSOR_OWNS_DATA) ||
        buf->numel < MG_GRAD_LARGE_FLOATS || !comm->iface->alloc_shared)
        return 0;
    return mg_comm_share_tensor(comm, buf, false);
}

/* The grad buffer holds t's gradient at `from` (partial_only to its spec): sum
 * it over the Partial dims. One dim: through grad_sync (bucketed, overlapped);
 * more: one blocking all-reduce per dim. */
static int reduce_in_place(mg_dtensor *t, const mg_spec *from) {
    const mg_mesh *mesh = from->mesh;
    mg_tensor *buf = t->grad->local;
    int dims[MG_MAX_MESH_DIMS], nd = 0;
    for (int m = 0; m < mesh->ndim; m++)
        if (from->p[m].kind == MG_PLACE_PARTIAL && mesh->shape[m] > 1) dims[nd++] = m;
    if (nd == 1) {
        mg_comm *comm = mesh->dim_comm[dims[0]];
        int shared = share_grad(buf, comm);
        if (shared < 0) return shared;
        if (shared && (t->flags & MG_DTENSOR_GRAD_DEFER)) {
            t->flags |= MG_DTENSOR_GRAD_UNSUMMED; /* the optimizer step sums it (nn/optim_shard.h) */
            t->grad_dim = dims[0];
            return MG_OK;
        }
        return mg_grad_sync_add(comm, buf->data, buf->numel, buf->device == MG_DEVICE_CPU);
    }
    for (int i = 0; i < nd; i++) {
        int rc = mg_comm_all_reduce(mesh->dim_comm[dims[i]], buf->data, buf->numel, MG_REDUCE_SUM);
        if (rc != MG_OK) return rc;
    }
    return MG_OK;
}

/* Collective over t's grad_dim: the parts of an unsummed gradient, summed. */
static int settle(mg_dtensor *t) {
    mg_comm *comm = t->spec.mesh->dim_comm[t->grad_dim];
    mg_comm_request req;
    int rc = mg_comm_iall_reduce(comm, t->grad->local->data, t->grad->local->numel, &req);
    if (rc == MG_OK) rc = mg_comm_wait(comm, &req);
    if (rc == MG_OK) t->flags &= ~(unsigned)MG_DTENSOR_GRAD_UNSUMMED;
    return rc;
}

/* g is t's gradient at `from`, Partial over t's grad_dim alone: it adds to
 * this rank's part of an unsummed gradient as it is. */
static bool partial_on_grad_dim(const mg_dtensor *t, const mg_spec *from, const mg_spec *to) {
    if (from->p[t->grad_dim].kind != MG_PLACE_PARTIAL) return false;
    for (int m = 0; m < from->mesh->ndim; m++)
        if (m != t->grad_dim && !mg_placement_equal(from->p[m], to->p[m]) && from->mesh->shape[m] > 1)
            return false;
    return partial_only(from, to);
}

/* A leaf's gradient g (any placement) into its gradient buffer. */
static int accumulate_leaf(mg_dtensor *t, mg_dtensor *g) {
    int rc = check_shape(t, g);
    if (rc == MG_OK) rc = grad_buffer(t);
    if (rc != MG_OK) return rc;
    mg_dtensor *grad = t->grad;
    mg_backend *be = mg_backend_of(grad->local);
    if (t->flags & MG_DTENSOR_GRAD_ZERO) {
        if (partial_only(&g->spec, &grad->spec) && g->local->device == grad->local->device) {
            if (g->local->data != grad->local->data) /* not computed in place */
                be->iface->copy(be->context, g->local, grad->local);
            t->flags &= ~(unsigned)MG_DTENSOR_GRAD_ZERO;
            return reduce_in_place(t, &g->spec);
        }
        mg_dtensor *gg = mg_op_redistribute(g, &grad->spec);
        if (!gg) return mg_last_code();
        if (gg->local->data != grad->local->data) be->iface->copy(be->context, gg->local, grad->local);
        t->flags &= ~(unsigned)MG_DTENSOR_GRAD_ZERO;
        return MG_OK;
    }
    /* a second contribution (a parameter used twice, or accumulation over
     * micro-batches): added to this rank's part when the sum is left to the
     * optimizer, else after the first one's reduction has landed */
    if ((t->flags & MG_DTENSOR_GRAD_ROWS) && (rc = mg_grad_rows_gather(t)) != MG_OK) return rc;
    if (t->flags & MG_DTENSOR_GRAD_UNSUMMED) {
        if (partial_on_grad_dim(t, &g->spec, &grad->spec) && g->local->device == grad->local->device) {
            be->iface->axpy(be->context, 1.0f, g->local, grad->local);
            return MG_OK;
        }
        if ((rc = settle(t)) != MG_OK) return rc;
    }
    if (mg_grad_sync_pending(grad->local->data) && (rc = mg_grad_sync_finish()) != MG_OK) return rc;
    mg_dtensor *gg = mg_op_redistribute(g, &grad->spec);
    if (!gg) return mg_last_code();
    be->iface->axpy(be->context, 1.0f, gg->local, grad->local);
    return MG_OK;
}

/* An intermediate's gradient: summed at the first contribution's spec. */
static int accumulate(mg_dtensor *t, mg_dtensor *g) {
    if (!t->node) return accumulate_leaf(t, g);
    int rc = check_shape(t, g);
    if (rc != MG_OK) return rc;
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

/* Step 3 for input i, a parameter (or the op's own gathered copy of one). */
static int param_grad(mg_node *node, mg_dtensor *g, int i) {
    mg_dtensor *in = node->inputs[i], *param = param_of(in);
    int rc = grad_buffer(param);
    if (rc != MG_OK) return rc;
    int d;
    if (mg_grad_rows_applies(node, g, i, &d)) { /* a split step's weight: this rank's rows */
        int shared = share_grad(param->grad->local, param->spec.mesh->dim_comm[d]);
        if (shared < 0) return shared;
        if (shared) {
            if ((param->flags & MG_DTENSOR_GRAD_UNSUMMED) && (rc = settle(param)) != MG_OK) return rc;
            return mg_grad_rows_compute(node, g, param, d);
        }
    }
    mg_arena *step = mg_step_arena();
    mg_arena_redirect_data(step, mg_scratch_arena());
    if (param->flags & MG_DTENSOR_GRAD_ZERO) {
        mg_tensor *buf = param->grad->local;
        mg_arena_hint_data(step, buf->data, (size_t)(buf->numel > 0 ? buf->numel : 1) * sizeof(float));
    }
    mg_dtensor *grads[MG_NODE_MAX_INPUTS];
    rc = mg_vjp(node, g, 1u << i, grads);
    if (rc == MG_OK && grads[i] && in != param && in->node) {
        /* the mirror of the op's own gather; its node is done with here */
        mg_dtensor *pg[MG_NODE_MAX_INPUTS];
        rc = mg_vjp(in->node, grads[i], 1u, pg);
        in->node->freed = true;
        grads[i] = pg[0];
    }
    if (rc == MG_OK && grads[i]) rc = accumulate_leaf(param, grads[i]);
    mg_arena_hint_data(step, NULL, 0);
    mg_arena_redirect_data(step, NULL);
    return rc;
}

static int backward_node(mg_node *node, mg_dtensor *g) {
    int rc = MG_OK;
    unsigned params = 0, others = 0;
    for (int i = 0; i < node->n_inputs; i++) {
        mg_dtensor *in = node->inputs[i];
        if (!in) continue;
        if (!mg_tape_wants_grad(in)) continue;
        if (param_of(in)) params |= 1u << i;
        else others |= 1u << i;
    }
    /* the values the VJPs read, gathered again where they were given back */
    unsigned reads = 0;
    for (int i = 0; i < node->n_inputs; i++)
        if ((params | others) >> i & 1u) reads |= mg_vjp_reads(node->op, i);
    for (int i = 0; i < node->n_inputs; i++) {
        mg_dtensor *in = node->inputs[i];
        if (in && (reads >> i & 1u) && (in->flags & MG_DTENSOR_RELEASED) &&
            (rc = mg_ops_regather(in)) != MG_OK)
            return rc;
    }
    if (others) {
        mg_dtensor *grads[MG_NODE_MAX_INPUTS];
        rc = mg_vjp(node, g, others, grads);
        for (int i = 0; i < node->n_inputs && rc == MG_OK; i++)
            if (grads[i] && (others >> i & 1u)) rc = accumulate(node->inputs[i], grads[i]);
    }
    /* parameter copies (gathered weights) no parameter gradient reads are given
     * back first: the scratch arena then holds one big tensor at a time */
    reads = 0;
    for (int i = 0; i < node->n_inputs; i++)
        if (params >> i & 1u) reads |= mg_vjp_reads(node->op, i);
    const mg_dtensor *keep[MG_NODE_MAX_INPUTS];
    int nkeep = 0;
    for (int i = 0; i < node->n_inputs; i++)
        if (reads >> i & 1u) keep[nkeep++] = node->inputs[i];
    if (params) mg_ops_release_except(keep, nkeep);
    for (int i = 0; i < node->n_inputs && rc == MG_OK; i++)
        if (params >> i & 1u) rc = param_grad(node, g, i);
    return rc;
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
    mg_ops_release_scratch(); /* the last forward op's gathered parameters */
    mg_ops_set_backward(true);
    int rc = MG_OK;
    mg_dtensor *seed = mg_op_scalar(loss->spec.mesh, 1.0f);
    if (!seed) rc = mg_last_code();
    if (rc == MG_OK && !loss->node) rc = accumulate_leaf(loss, seed);
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
        rc = backward_node(node, g);
        node->freed = true;
        mg_ops_release_scratch();
        if (rc == MG_OK) rc = mg_grad_sync_poll();
    }
    int sync = mg_grad_sync_finish(); /* also after a failure: nothing left in flight */
    if (rc == MG_OK) rc = sync;
    mg_ops_set_backward(false);
    mg_set_grad_enabled(was);
    return rc;
}

/* A leaf's buffer that counts as zero is filled when someone looks; one left
 * unsummed for the optimizer is summed (collectively). */
mg_dtensor *mg_grad(const mg_dtensor *t) {
    if (!t) return mg_error_null(MG_EINVAL, "mg_grad: the tensor is NULL");
    if (t->grad && (t->flags & MG_DTENSOR_GRAD_UNSUMMED) && settle((mg_dtensor *)t) != MG_OK)
        return NULL;
    if (t->grad && (t->flags & MG_DTENSOR_GRAD_ROWS) && mg_grad_rows_gather((mg_dtensor *)t) != MG_OK)
        return NULL;
    if (t->grad && (t->flags & MG_DTENSOR_GRAD_ZERO)) {
        mg_backend *be = mg_backend_of(t->grad->local);
        be->iface->fill(be->context, t->grad->local, 0.0f);
        ((mg_dtensor *)t)->flags &= ~(unsigned)MG_DTENSOR_GRAD_ZERO;
    }
    return t->grad;
}

/* A leaf's buffer is kept and marked zero: the next backward writes its
 * gradient over it instead of adding to zeros. */
int mg_zero_grad(mg_dtensor *t) {
    if (!t) return mg_error(MG_EINVAL, "mg_zero_grad: tensor is NULL");
    if (t->grad && !t->node) {
        t->flags |= MG_DTENSOR_GRAD_ZERO;
        t->flags &= ~(unsigned)MG_DTENSOR_GRAD_PARTS;
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
    mg_ops_release_scratch();
    mg_tape_clear();
    mg_arena_reset(mg_step_arena());
}
