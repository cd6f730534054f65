/* ops.c: the dispatch path every op walks (validate -> rule -> redistribute ->
 * kernel -> record), the public mg_redistribute, and the op name table.
 * The ops themselves are in ops_shape.c (permute, expand, reshape, view),
 * ops_math.c (pointwise, reductions, losses) and ops_matmul.c (linear, matmul). */
#include "ops.h"

#include <assert.h>
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

/* x moved to `target`, recorded so that backward moves its gradient back. */
static mg_dtensor *redistribute_recorded(const mg_dtensor *x, const mg_spec *target) {
    mg_tensor *local = NULL;
    int rc = mg_redistribute_local(&x->spec, x->local, target, &local, mg_step_arena());
    if (rc != MG_OK) return NULL;
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
    return redistribute_recorded(x, target);
}

mg_dtensor *mg_redistribute(const mg_dtensor *x, const mg_placement *p, int n) {
    if (!x) return mg_error_null(MG_EINVAL, "mg_redistribute: input is NULL");
    mg_spec target;
    if (mg_spec_make(&target, x->spec.mesh, p, n, x->spec.ndim, x->spec.shape, "mg_redistribute") !=
        MG_OK)
        return NULL;
    return redistribute_recorded(x, &target);
}

int mg_ops_prepare(const char *who, const mg_candidates *cands, int n, const mg_dtensor *const *xs,
                   int out_ndim, const int64_t *out_shape, mg_dtensor **xs_out, mg_spec *out_spec) {
    const mg_spec *specs[MG_RULE_MAX_INPUTS] = {0};
    mg_spec targets[MG_RULE_MAX_INPUTS];
    for (int i = 0; i < n; i++) specs[i] = xs[i] ? &xs[i]->spec : NULL;
    int rc = mg_rules_choose(cands, n, specs, out_ndim, out_shape, targets, out_spec);
    if (rc != MG_OK) return mg_error(rc, "%s: %s", who, mg_last_error());
    for (int i = 0; i < n; i++) {
        xs_out[i] = NULL;
        if (!xs[i]) continue;
        xs_out[i] = mg_op_redistribute(xs[i], &targets[i]);
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
