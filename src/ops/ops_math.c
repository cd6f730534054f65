/* ops_math.c: pointwise ops with broadcasting (mg_add, mg_sub, mg_mul,
 * mg_scale, mg_relu, mg_gelu and the relu/gelu backward), reductions (mg_sum,
 * mg_sum_dims, mg_mean, mg_mean_dims, sum_to) and mg_mse_loss. (Cross-entropy
 * is in ops_vocab.c.) */
#include <math.h>
#include <string.h>

#include "ops/tape.h"
#include "backend/backend.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "ops/ops.h"
#include "status.h"

static mg_backend *backend(const mg_dtensor *t) { return mg_backend_of(t->local); }

/* local tensor seen with `ndim` dims (leading 1s) */
static mg_tensor *aligned_view(mg_tensor *t, int ndim) {
    int64_t shape[MG_MAX_DIMS];
    int lead = ndim - t->ndim;
    for (int i = 0; i < ndim; i++) shape[i] = i < lead ? 1 : t->shape[i - lead];
    return mg_tensor_view(mg_step_arena(), t, ndim, shape);
}

/* ---- binary pointwise -------------------------------------------------------- */

static int broadcast_shape(const char *who, const mg_spec *a, const mg_spec *b, int *ndim,
                           int64_t *shape) {
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        int64_t sa = ia >= 0 ? a->shape[ia] : 1, sb = ib >= 0 ? b->shape[ib] : 1;
        if (sa != sb && sa != 1 && sb != 1) {
            char x[96], y[96];
            return mg_error(MG_ESHAPE,
                            "%s: shapes %s and %s do not broadcast: dim %d has sizes %lld and "
                            "%lld (dims must be equal or 1, aligned from the right)",
                            who, mg_shape_format(x, sizeof x, a->ndim, a->shape),
                            mg_shape_format(y, sizeof y, b->ndim, b->shape), i, (long long)sa,
                            (long long)sb);
        }
        shape[i] = sa == 1 ? sb : sa;
    }
    *ndim = nd;
    return MG_OK;
}

static mg_dtensor *binary(const char *who, mg_op op, mg_binary_op kernel, mg_linearity lin,
                          const mg_dtensor *a, const mg_dtensor *b) {
    const mg_dtensor *xs[2] = {a, b};
    if (mg_ops_check_given(who, 2, xs, 2, "input") != MG_OK) return NULL;
    int nd = 0;
    int64_t out_shape[MG_MAX_DIMS];
    if (broadcast_shape(who, &a->spec, &b->spec, &nd, out_shape) != MG_OK) return NULL;
    int ndims[2] = {a->spec.ndim, b->spec.ndim};
    const int64_t *shapes[2] = {a->spec.shape, b->spec.shape};
    mg_candidates c;
    mg_rules_pointwise(&c, 2, ndims, shapes, nd, out_shape, lin);
    mg_dtensor *in[2];
    mg_dtensor *y = mg_ops_begin(who, &c, 2, xs, nd, out_shape, in);
    if (!y) return NULL;
    mg_tensor *la = aligned_view(in[0]->local, nd), *lb = aligned_view(in[1]->local, nd);
    if (!la || !lb) return NULL;
    backend(y)->iface->binary(backend(y)->context, kernel, la, lb, y->local);
    if (op != MG_OP_COUNT) mg_ops_record(op, 2, in, y);
    return y;
}

mg_dtensor *mg_add(const mg_dtensor *a, const mg_dtensor *b) {
    return binary("mg_add", MG_OP_ADD, MG_BINARY_ADD, MG_LINEARITY_SUM, a, b);
}
mg_dtensor *mg_sub(const mg_dtensor *a, const mg_dtensor *b) {
    return binary("mg_sub", MG_OP_SUB, MG_BINARY_SUB, MG_LINEARITY_SUM, a, b);
}
mg_dtensor *mg_mul(const mg_dtensor *a, const mg_dtensor *b) {
    return binary("mg_mul", MG_OP_MUL, MG_BINARY_MUL, MG_LINEARITY_ANY, a, b);
}
/* internal: no node (their VJPs are never needed: backward runs without grad) */
mg_dtensor *mg_op_relu_backward(const mg_dtensor *dy, const mg_dtensor *x) {
    return binary("relu_backward", MG_OP_COUNT, MG_BINARY_RELU_BACKWARD, MG_LINEARITY_FIRST, dy, x);
}
mg_dtensor *mg_op_gelu_backward(const mg_dtensor *dy, const mg_dtensor *x) {
    return binary("gelu_backward", MG_OP_COUNT, MG_BINARY_GELU_BACKWARD, MG_LINEARITY_FIRST, dy, x);
}

/* ---- unary pointwise ---------------------------------------------------------- */

static mg_dtensor *unary(const char *who, mg_op op, mg_unary_op kernel, mg_linearity lin,
                         float alpha, const mg_dtensor *x) {
    if (mg_ops_check_inputs(who, 1, &x) != MG_OK) return NULL;
    int nd = x->spec.ndim;
    const int64_t *shape = x->spec.shape;
    mg_candidates c;
    mg_rules_pointwise(&c, 1, &nd, &shape, nd, shape, lin);
    mg_dtensor *in;
    mg_dtensor *y = mg_ops_begin(who, &c, 1, &x, nd, shape, &in);
    if (!y) return NULL;
    backend(y)->iface->unary(backend(y)->context, kernel, in->local, alpha, y->local);
    mg_node *node = mg_ops_record(op, 1, &in, y);
    if (node) node->farg = alpha;
    return y;
}

mg_dtensor *mg_relu(const mg_dtensor *x) {
    return unary("mg_relu", MG_OP_RELU, MG_UNARY_RELU, MG_LINEARITY_NONE, 0, x);
}
mg_dtensor *mg_gelu(const mg_dtensor *x) {
    return unary("mg_gelu", MG_OP_GELU, MG_UNARY_GELU, MG_LINEARITY_NONE, 0, x);
}
mg_dtensor *mg_scale(const mg_dtensor *x, float s) {
    return unary("mg_scale", MG_OP_SCALE, MG_UNARY_SCALE, MG_LINEARITY_FIRST, s, x);
}

/* ---- reductions ------------------------------------------------------------------ */

mg_dtensor *mg_op_sum_scaled(const mg_dtensor *x, int n, const int *dims, int keepdim, float scale,
                             const char *who) {
    if (mg_ops_check_inputs(who, 1, &x) != MG_OK) return NULL;
    int nd = x->spec.ndim;
    if (n < 0 || (n > 0 && !dims)) return mg_error_null(MG_EINVAL, "%s: bad dims list", who);
    bool reduced[MG_MAX_DIMS] = {false};
    for (int i = 0; i < n; i++) {
        int d = mg_ops_dim(who, dims[i], nd);
        if (d < 0) return NULL;
        if (reduced[d]) return mg_error_null(MG_EINVAL, "%s: dim %d is listed twice", who, d);
        reduced[d] = true;
    }
    int64_t kept_shape[MG_MAX_DIMS], out_shape[MG_MAX_DIMS];
    int out_nd = 0;
    for (int d = 0; d < nd; d++) {
        kept_shape[d] = reduced[d] ? 1 : x->spec.shape[d];
        if (!reduced[d] || keepdim) out_shape[out_nd++] = kept_shape[d];
    }
    mg_candidates c;
    mg_rules_reduce(&c, nd, reduced, keepdim);
    mg_dtensor *in;
    mg_dtensor *y = mg_ops_begin(who, &c, 1, &x, out_nd, out_shape, &in);
    if (!y) return NULL;
    int64_t local_kept[MG_MAX_DIMS];
    for (int d = 0; d < nd; d++) local_kept[d] = reduced[d] ? 1 : in->local->shape[d];
    mg_tensor *yv = mg_tensor_view(mg_step_arena(), y->local, nd, local_kept);
    if (!yv) return NULL;
    mg_backend *be = backend(y);
    be->iface->reduce_sum(be->context, in->local, yv);
    if (scale != 1.0f) be->iface->unary(be->context, MG_UNARY_SCALE, y->local, scale, y->local);
    mg_node *node = mg_ops_record(MG_OP_SUM, 1, &in, y);
    if (node) {
        node->farg = scale;
        node->n_iargs = nd;
        for (int d = 0; d < nd; d++) node->iargs[d] = reduced[d];
        node->ndim = nd;
        memcpy(node->shape, x->spec.shape, sizeof node->shape);
    }
    return y;
}

static float inverse_count(const mg_dtensor *x, int n, const int *dims, bool all) {
    int64_t count = 1;
    if (all) return 1.0f / (float)mg_shape_numel(x->spec.ndim, x->spec.shape);
    for (int i = 0; i < n; i++) {
        int d = dims[i] < 0 ? dims[i] + x->spec.ndim : dims[i];
        if (d >= 0 && d < x->spec.ndim) count *= x->spec.shape[d];
    }
    return 1.0f / (float)count;
}

static int all_dims(const mg_dtensor *x, int *dims) {
    for (int d = 0; d < x->spec.ndim; d++) dims[d] = d;
    return x->spec.ndim;
}

mg_dtensor *mg_sum(const mg_dtensor *x) {
    if (!x) return mg_error_null(MG_EINVAL, "mg_sum: input is NULL");
    int dims[MG_MAX_DIMS];
    int n = all_dims(x, dims);
    return mg_op_sum_scaled(x, n, dims, 0, 1.0f, "mg_sum");
}

mg_dtensor *mg_sum_dims(const mg_dtensor *x, int n, const int *dims, int keepdim) {
    return mg_op_sum_scaled(x, n, dims, keepdim, 1.0f, "mg_sum_dims");
}

mg_dtensor *mg_mean(const mg_dtensor *x) {
    if (!x) return mg_error_null(MG_EINVAL, "mg_mean: input is NULL");
    int dims[MG_MAX_DIMS];
    int n = all_dims(x, dims);
    return mg_op_sum_scaled(x, n, dims, 0, inverse_count(x, n, dims, true), "mg_mean");
}

mg_dtensor *mg_mean_dims(const mg_dtensor *x, int n, const int *dims, int keepdim) {
    if (!x) return mg_error_null(MG_EINVAL, "mg_mean_dims: input is NULL");
    if (n < 0 || (n > 0 && !dims)) /* before inverse_count reads dims */
        return mg_error_null(MG_EINVAL, "mg_mean_dims: bad dims list (%d dims, list %s)", n,
                             dims ? "given" : "NULL");
    return mg_op_sum_scaled(x, n, dims, keepdim, inverse_count(x, n, dims, false), "mg_mean_dims");
}

mg_dtensor *mg_op_sum_to(const mg_dtensor *g, int ndim, const int64_t *shape) {
    const mg_spec *gs = &g->spec;
    int lead = gs->ndim - ndim;
    int dims[MG_MAX_DIMS], n = 0;
    for (int d = 0; d < gs->ndim; d++)
        if (d < lead || (shape[d - lead] == 1 && gs->shape[d] != 1)) dims[n++] = d;
    if (n == 0 && lead == 0) return (mg_dtensor *)g;
    mg_dtensor *s = mg_op_sum_scaled(g, n, dims, 1, 1.0f, "sum_to");
    if (!s) return NULL;
    return mg_reshape(s, ndim, shape);
}

/* ---- losses ---------------------------------------------------------------------- */

mg_dtensor *mg_mse_loss(const mg_dtensor *pred, const mg_dtensor *target) {
    const char *who = "mg_mse_loss";
    const mg_dtensor *xs[2] = {pred, target};
    if (mg_ops_check_given(who, 2, xs, 2, "input") != MG_OK) return NULL;
    char a[96], b[96];
    if (!mg_shape_equal(pred->spec.ndim, pred->spec.shape, target->spec.ndim, target->spec.shape))
        return mg_error_null(MG_ESHAPE, "%s: pred %s and target %s must have the same shape", who,
                             mg_shape_format(a, sizeof a, pred->spec.ndim, pred->spec.shape),
                             mg_shape_format(b, sizeof b, target->spec.ndim, target->spec.shape));
    mg_candidates c;
    mg_rules_elementwise_loss(&c, pred->spec.ndim);
    mg_dtensor *in[2];
    mg_dtensor *y = mg_ops_begin(who, &c, 2, xs, 0, NULL, in);
    mg_tensor *diff = mg_tensor_alloc(mg_step_arena(), in[0]->local->ndim, in[0]->local->shape);
    if (!y || !diff) return NULL;
    mg_backend *be = backend(y);
    be->iface->binary(be->context, MG_BINARY_SUB, in[0]->local, in[1]->local, diff);
    int64_t n = mg_shape_numel(pred->spec.ndim, pred->spec.shape);
    float v = n > 0 ? (float)(be->iface->sum_squares(be->context, diff) / (double)n) : 0.0f;
    be->iface->from_host(be->context, y->local->data, &v, 1);
    mg_ops_record(MG_OP_MSE, 2, in, y);
    return y;
}
