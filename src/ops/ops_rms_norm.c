/* ops_rms_norm.c: RMS norm (llama's RMSNorm) on distributed tensors and its
 * gradient: y = x / sqrt(mean(x^2) + eps) * weight over the last dim, in fp32
 * with the rows' sums taken in double.
 *
 * Sharded as layer norm (mg_rules_layer_norm): a shard of a row dim passes
 * with the weight Replicate; x sharded on its last dim takes the weight
 * sharded alike, and then each rank computes its part of the per-row
 * statistics and the ranks sum those (R floats, one all-reduce per sharding
 * mesh dim), never x:
 *   forward   the row's sum of squares (-> rstd)
 *   backward  the row's sum of g xhat (g = dy weight, xhat = x rstd)
 * The node keeps rstd for backward (node->saved). The weight's gradient is
 * Partial over the mesh dims that shard x's rows (each rank summed its own).
 * The record (op_def.h): rms_norm (args.f: eps); its VJP reads the gradient
 * at the output's placements. */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "dist/mesh.h"
#include "ops/ops.h"
#include "status.h"

/* local rows of x: the product of every dim but the last */
static int64_t local_rows(const mg_tensor *x) {
    int64_t rows = 1;
    for (int d = 0; d + 1 < x->ndim; d++) rows *= x->shape[d];
    return rows;
}

/* y and each row's rstd; the squares of rows split over the mesh dims that
 * shard the last dim are the sums of the ranks' parts */
static int rms_norm_local(const mg_dtensor *x, const mg_dtensor *w, float eps, mg_dtensor *y,
                          mg_tensor *rstd) {
    mg_backend *be = mg_backend_of(y->local);
    int nd = x->spec.ndim;
    int64_t n = x->spec.shape[nd - 1], rows = local_rows(x->local);
    unsigned mask = mg_ops_shard_mask(&x->spec, nd - 1);
    const mg_tensor *wl = w ? w->local : NULL;
    if (!mask) {
        be->iface->rms_norm(be->context, x->local, wl, eps, NULL, n, rstd, y->local);
        return MG_OK;
    }
    mg_tensor *squares = mg_ops_temp(1, &rows);
    if (!squares) return mg_last_code();
    be->iface->rms_norm_squares(be->context, x->local, squares);
    int rc = mg_ops_reduce_over(x->spec.mesh, mask, squares->data, rows, MG_REDUCE_SUM);
    if (rc != MG_OK) return rc;
    be->iface->rms_norm(be->context, x->local, wl, eps, squares, n, rstd, y->local);
    return MG_OK;
}

static int rms_norm_shape(mg_op_call *c) {
    const mg_dtensor *x = c->x[0], *w = c->x[1];
    if (x->spec.ndim < 1)
        return mg_error(MG_ESHAPE, "%s: x is 0-d; it needs a dim to normalize over", c->who);
    int64_t n = x->spec.shape[x->spec.ndim - 1];
    if (w && !(w->spec.ndim == 1 && w->spec.shape[0] == n)) {
        char a[96], b[96];
        return mg_error(MG_ESHAPE, "%s: weight %s does not fit x %s: want (%lld), x's last dim",
                        c->who, mg_shape_format(a, sizeof a, w->spec.ndim, w->spec.shape),
                        mg_shape_format(b, sizeof b, x->spec.ndim, x->spec.shape), (long long)n);
    }
    float eps = c->args.f;
    if (!(eps >= 0.0f) || isinf(eps))
        return mg_error(MG_EINVAL, "%s: eps is %g; it must be a finite number >= 0", c->who, eps);
    c->out_ndim = x->spec.ndim;
    memcpy(c->out_shape, x->spec.shape, sizeof c->out_shape);
    return MG_OK;
}

static void rms_norm_rule(const mg_op_call *c, mg_candidates *cands) {
    mg_rules_layer_norm(cands, c->x[0]->spec.ndim);
}

static int rms_norm_kernel(mg_op_call *c, mg_dtensor *const *in, mg_dtensor *out) {
    int64_t rows = local_rows(out->local);
    mg_tensor *rstd = mg_ops_temp(1, &rows);
    if (!rstd) return mg_last_code();
    c->saved = rstd;
    return rms_norm_local(in[0], in[1], c->args.f, out, rstd);
}

static void rms_norm_cost(const mg_op_call *c, mg_dtensor *const *in, const mg_dtensor *out,
                          mg_op_cost *cost) {
    (void)c;
    double n = (double)out->local->numel, w = in[1] ? (double)in[1]->local->numel : 0.0;
    cost->flops = 4 * n; /* square, sum, scale, weight */
    cost->bytes = 4.0 * (2 * n + w);
}

/* The spec of the weight's gradient: the weight's own, Partial on the mesh
 * dims where x's rows are sharded (each rank summed its rows). */
static mg_spec weight_grad_spec(const mg_dtensor *x, const mg_dtensor *w) {
    mg_spec s = w->spec;
    for (int m = 0; m < s.mesh->ndim; m++) {
        mg_placement xp = x->spec.p[m];
        if (xp.kind == MG_PLACE_SHARD && xp.dim != x->spec.ndim - 1) s.p[m] = MG_PARTIAL_SUM;
    }
    return s;
}

/* dx and dw of RMS norm (those wanted) */
static int rms_norm_vjp(mg_node *node, mg_dtensor *g, mg_dtensor **grads) {
    const mg_dtensor *x = node->inputs[0], *w = node->inputs[1], *out = node->output;
    bool want_x = mg_vjp_wants(node, 0), want_w = mg_vjp_wants(node, 1);
    /* x and w may be parameter copies given back since the forward: both are read */
    const mg_dtensor *held[2] = {x, w};
    int rc = mg_ops_hold(2, held);
    if (rc != MG_OK) return rc;
    mg_dtensor *dy = mg_ops_grad_at(g, &out->spec);
    NEED(dy);
    mg_spec ws;
    if (want_w) ws = weight_grad_spec(x, w);
    mg_dtensor *dx = want_x ? mg_ops_output(&x->spec) : NULL;
    mg_dtensor *dw = want_w ? mg_ops_output(&ws) : NULL;
    if ((want_x && !dx) || (want_w && !dw)) return mg_last_code();
    mg_backend *be = mg_backend_of(dy->local);
    int nd = x->spec.ndim;
    int64_t n = x->spec.shape[nd - 1], rows = local_rows(x->local);
    unsigned mask = mg_ops_shard_mask(&x->spec, nd - 1);
    mg_tensor *sums = NULL;
    const mg_tensor *wl = w ? w->local : NULL;
    if (mask && dx) { /* the row sums of g xhat over the whole row */
        NEED(sums = mg_ops_temp(1, &rows));
        be->iface->rms_norm_backward_sums(be->context, x->local, wl, dy->local, node->saved, sums);
        if ((rc = mg_ops_reduce_over(x->spec.mesh, mask, sums->data, rows, MG_REDUCE_SUM)) != MG_OK)
            return rc;
    }
    be->iface->rms_norm_backward(be->context, x->local, wl, dy->local, node->saved, sums, n,
                                 dx ? dx->local : NULL, dw ? dw->local : NULL);
    grads[0] = dx;
    grads[1] = dw;
    return MG_OK;
}

static const mg_op_def rms_norm_def = {
    .name = "rms_norm", .arity = 2, .required = 1, .required_names = "x",
    .shape = rms_norm_shape, .rule = rms_norm_rule, .kernel = rms_norm_kernel,
    .cost = rms_norm_cost, .vjp = rms_norm_vjp, .grad_at_output = true,
};

mg_dtensor *mg_rms_norm(const mg_dtensor *x, const mg_dtensor *weight, float eps) {
    mg_op_call c = {.who = "mg_rms_norm", .n = 2, .x = {x, weight}, .args.f = eps};
    return mg_op_run(&rms_norm_def, &c);
}
