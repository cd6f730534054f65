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
 * The record (op_def.h): rms_norm (args.f: eps), of the norms' family
 * (ops.h's MG_OPS_NORM_FIELDS: layer norm's shape and rule); its VJP reads
 * the gradient at the output's placements. */
#include "backend/backend.h"
#include "dist/mesh.h"
#include "ops/ops.h"
#include "status.h"

/* y and each row's rstd; the squares of rows split over the mesh dims that
 * shard the last dim are the sums of the ranks' parts */
static int rms_norm_local(const mg_dtensor *x, const mg_dtensor *w, float eps, mg_dtensor *y,
                          mg_tensor *rstd) {
    mg_backend *be = mg_backend_of(y->local);
    int nd = x->spec.ndim;
    int64_t n = x->spec.shape[nd - 1], rows = mg_ops_local_rows(x->local);
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

static int rms_norm_kernel(mg_op_call *c, mg_dtensor *const *in, mg_dtensor *out) {
    int64_t rows = mg_ops_local_rows(out->local);
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

/* dx and dw of RMS norm (those wanted) */
static int rms_norm_vjp(mg_node *node, mg_dtensor *g, mg_dtensor **grads) {
    mg_dtensor *dy;
    int rc = mg_ops_norm_vjp_begin(node, g, &dy, grads);
    if (rc != MG_OK) return rc;
    mg_dtensor *dx = grads[0], *dw = grads[1];
    const mg_dtensor *x = node->inputs[0], *w = node->inputs[1];
    mg_backend *be = mg_backend_of(dy->local);
    int nd = x->spec.ndim;
    int64_t n = x->spec.shape[nd - 1], rows = mg_ops_local_rows(x->local);
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
    return MG_OK;
}

static const mg_op_def rms_norm_def = {
    .name = "rms_norm", .arity = 2, .kernel = rms_norm_kernel, .cost = rms_norm_cost,
    .vjp = rms_norm_vjp, MG_OPS_NORM_FIELDS,
};

mg_dtensor *mg_rms_norm(const mg_dtensor *x, const mg_dtensor *weight, float eps) {
    return mg_ops_norm_run(&rms_norm_def, "mg_rms_norm", x, weight, NULL, eps);
}
