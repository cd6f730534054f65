/* ops.c: the dispatch path every op walks (validate -> rule -> redistribute ->
 * kernel -> record), the public mg_redistribute, and the op name table.
 * The ops themselves are in ops_shape.c (permute, expand, reshape, view),
 * ops_math.c (pointwise, reductions, losses) and ops_matmul.c (linear, matmul). */
#include "ops.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/tape.h"
#include "backend/backend.h"
#include "dist/mesh.h"
#include "dist/redistribute.h"
#include "status.h"

const char *const mg_op_names[MG_OP_COUNT] = {
    [MG_OP_REDISTRIBUTE] = "redistribute",
    [MG_OP_PERMUTE] = "permute",
    [MG_OP_EXPAND] = "expand",
    [MG_OP_RESHAPE] = "reshape",
    [MG_OP_LINEAR] = "linear",
    [MG_OP_MATMUL] = "matmul",
    [MG_OP_SUM] = "sum",
    [MG_OP_ADD] = "add",
    [MG_OP_SUB] = "sub",
    [MG_OP_MUL] = "mul",
    [MG_OP_SCALE] = "scale",
    [MG_OP_RELU] = "relu",
    [MG_OP_GELU] = "gelu",
    [MG_OP_CROSS_ENTROPY] = "cross_entropy",
    [MG_OP_MSE] = "mse_loss",
    [MG_OP_SOFTMAX] = "softmax",
    [MG_OP_LOG_SOFTMAX] = "log_softmax",
    [MG_OP_LAYER_NORM] = "layer_norm",
    [MG_OP_EMBEDDING] = "embedding",
    [MG_OP_ATTENTION] = "attention",
    [MG_OP_NARROW] = "narrow",
    [MG_OP_CAT] = "cat",
};
static_assert(sizeof mg_op_names / sizeof mg_op_names[0] == MG_OP_COUNT,
              "mg_op_names must name every op");

int mg_ops_dim(const char *who, int dim, int ndim) {
    int d = dim < 0 ? dim + ndim : dim;
    if (d < 0 || d >= ndim) {
        mg_error(MG_EINVAL, "%s: dim %d is out of range for a %d-d tensor (use 0..%d or -%d..-1)",
                 who, dim, ndim, ndim - 1, ndim);
        return -1;
    }
    return d;
}

int mg_ops_check_inputs(const char *who, int n, const mg_dtensor *const *xs) {
    const mg_dtensor *first = NULL;
    for (int i = 0; i < n; i++) {
        if (!xs[i]) continue;
        if (!first) {
            first = xs[i];
            continue;
        }
        int rc = mg_dtensor_same_mesh(first, xs[i], who);
        if (rc != MG_OK) return rc;
    }
    if (!first) return mg_error(MG_EINVAL, "%s: input is NULL", who);
    return MG_OK;
}

mg_dtensor *mg_ops_output(const mg_spec *spec) {
    mg_arena *arena = mg_step_arena();
    int64_t local[MG_MAX_DIMS];
    mg_spec_local(spec, NULL, local, NULL);
    mg_tensor *t = mg_tensor_alloc(arena, spec->ndim, local);
    if (!t) return NULL;
    return mg_dtensor_make(spec, t, arena);
}

mg_node *mg_ops_record(mg_op op, int n, mg_dtensor *const *inputs, mg_dtensor *out) {
    if (!mg_grad_enabled()) return NULL;
    bool want = false;
    for (int i = 0; i < n; i++) want |= mg_tape_wants_grad(inputs[i]);
    if (!want) return NULL;
    return mg_tape_push(op, n, inputs, out);
}

/* x moved to `target`, recorded so that backward moves its gradient back.
 * `share`: when no data moves (the specs differ only on mesh dims of size 1),
 * the result is a view of x's shard rather than a copy. */
static mg_dtensor *redistribute_recorded(const mg_dtensor *x, const mg_spec *target, bool share) {
    mg_tensor *local = NULL;
    if (share && mg_redistribute_is_noop(&x->spec, target)) {
        local = mg_tensor_view(mg_step_arena(), x->local, x->local->ndim, x->local->shape);
        if (!local) return NULL;
    } else if (mg_redistribute_local(&x->spec, x->local, target, &local, mg_step_arena()) != MG_OK) {
        return NULL;
    }
    mg_dtensor *y = mg_dtensor_make(target, local, mg_step_arena());
    if (!y) return NULL;
    mg_dtensor *in = (mg_dtensor *)x;
    mg_node *node = mg_ops_record(MG_OP_REDISTRIBUTE, 1, &in, y);
    if (node)
        for (int m = 0; m < x->spec.mesh->ndim; m++) node->placements[m] = x->spec.p[m];
    return y;
}

mg_dtensor *mg_op_redistribute(const mg_dtensor *x, const mg_spec *target) {
    if (mg_spec_equal(&x->spec, target)) return (mg_dtensor *)x;
    return redistribute_recorded(x, target, true);
}

mg_dtensor *mg_redistribute(const mg_dtensor *x, const mg_placement *p, int n) {
    if (!x) return mg_error_null(MG_EINVAL, "mg_redistribute: input is NULL");
    mg_spec target;
    if (mg_spec_make(&target, x->spec.mesh, p, n, x->spec.ndim, x->spec.shape, "mg_redistribute") !=
        MG_OK)
        return NULL;
    return redistribute_recorded(x, &target, false);
}

/* ---- parameter copies ---------------------------------------------------------
 * A parameter brought to other placements for use (fsdp: a Shard(0) weight
 * gathered to Replicate, by mg_op_param_copy or by an op that takes the
 * parameter itself) is a "parameter copy": its data lives in the scratch arena
 * and is given back as soon as an op starts that does not take it, so a step
 * holds about one op's gathered weights instead of all of them until backward.
 * A released copy is gathered again when something needs it: an op in the
 * forward pass (mg_ops_prepare) or its node in backward (the engine). */
static mg_dtensor **held; /* grows to the most held at once; kept between steps */
static int n_held, cap_held;
static bool in_backward;

void mg_ops_set_backward(bool on) { in_backward = on; }

int mg_ops_hold(mg_dtensor *t) {
    if (n_held == cap_held) {
        int cap = cap_held ? 2 * cap_held : 16;
        mg_dtensor **h = realloc(held, (size_t)cap * sizeof *h);
        if (!h) return mg_error(MG_ENOMEM, "ops: out of memory holding %d parameter copies", cap);
        held = h;
        cap_held = cap;
    }
    t->flags &= ~(unsigned)MG_DTENSOR_RELEASED;
    held[n_held++] = t;
    return MG_OK;
}

/* Releases the held copies that are not among xs; resets the scratch arena
 * when none is left. */
void mg_ops_release_except(const mg_dtensor *const *xs, int n) {
    int kept = 0;
    for (int i = 0; i < n_held; i++) {
        bool used = false;
        for (int j = 0; j < n; j++) used |= xs[j] == held[i];
        if (used) held[kept++] = held[i];
        else held[i]->flags |= MG_DTENSOR_RELEASED;
    }
    n_held = kept;
    if (!n_held) mg_arena_reset(mg_scratch_arena());
}

void mg_ops_release_scratch(void) { mg_ops_release_except(NULL, 0); }

int mg_ops_regather(mg_dtensor *t) {
    const mg_dtensor *param = t->param_source;
    mg_arena *step = mg_step_arena();
    mg_tensor *local = NULL;
    mg_arena_redirect_data(step, mg_scratch_arena());
    int rc = mg_redistribute_local(&param->spec, param->local, &t->spec, &local, step);
    mg_arena_redirect_data(step, NULL);
    if (rc != MG_OK) return rc;
    t->local = local;
    return mg_ops_hold(t);
}

static bool is_param(const mg_dtensor *t) { return !t->node && t->requires_grad; }

mg_dtensor *mg_op_param_copy(const mg_dtensor *param, const mg_spec *target) {
    if (mg_spec_equal(&param->spec, target)) return (mg_dtensor *)param;
    if (in_backward) return redistribute_recorded(param, target, true); /* step arena */
    /* where no data moves (mesh dims of size 1) the copy is a view of the
     * parameter: nothing to give back, but backward still sends its gradient
     * straight to the parameter */
    bool view = mg_redistribute_is_noop(&param->spec, target);
    mg_arena *step = mg_step_arena();
    if (!view) mg_arena_redirect_data(step, mg_scratch_arena());
    mg_dtensor *y = redistribute_recorded(param, target, view);
    mg_arena_redirect_data(step, NULL);
    if (!y) return NULL;
    y->flags |= MG_DTENSOR_PARAM_COPY;
    y->param_source = (mg_dtensor *)param;
    return view || mg_ops_hold(y) == MG_OK ? y : NULL;
}

int mg_ops_prepare(const char *who, const mg_candidates *cands, int n, const mg_dtensor *const *xs,
                   int out_ndim, const int64_t *out_shape, mg_dtensor **xs_out, mg_spec *out_spec) {
    const mg_spec *specs[MG_RULE_MAX_INPUTS] = {0};
    mg_spec targets[MG_RULE_MAX_INPUTS];
    for (int i = 0; i < n; i++) specs[i] = xs[i] ? &xs[i]->spec : NULL;
    int rc = mg_rules_choose(cands, n, specs, out_ndim, out_shape, targets, out_spec);
    if (rc != MG_OK) return mg_error(rc, "%s: %s", who, mg_last_error());
    if (!in_backward) {
        mg_ops_release_except(xs, n); /* copies the earlier ops used, not this one */
        for (int i = 0; i < n; i++)
            if (xs[i] && (xs[i]->flags & MG_DTENSOR_RELEASED) &&
                (rc = mg_ops_regather((mg_dtensor *)xs[i])) != MG_OK)
                return rc;
    }
    for (int i = 0; i < n; i++) {
        xs_out[i] = NULL;
        if (!xs[i]) continue;
        xs_out[i] = is_param(xs[i]) ? mg_op_param_copy(xs[i], &targets[i])
                                    : mg_op_redistribute(xs[i], &targets[i]);
        if (!xs_out[i]) return mg_last_code() ? mg_last_code() : MG_ECOMM;
    }
    return MG_OK;
}

mg_dtensor *mg_op_scalar(const mg_mesh *mesh, float v) {
    mg_placement p[MG_MAX_MESH_DIMS];
    for (int m = 0; m < mesh->ndim; m++) p[m] = MG_REPLICATE;
    mg_spec spec;
    if (mg_spec_make(&spec, mesh, p, mesh->ndim, 0, NULL, "scalar") != MG_OK) return NULL;
    mg_dtensor *t = mg_ops_output(&spec);
    if (!t) return NULL;
    mg_backend_of(t->local)->iface->fill(mg_backend_of(t->local)->context, t->local, v);
    return t;
}
