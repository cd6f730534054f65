/* ops_nn.c: softmax, log_softmax and layer norm on distributed tensors, their
 * gradients, and the helpers the transformer ops share (ops.h: the gradient
 * at an output's spec, step temporaries, local rows, and the pieces of a
 * norm's record that layer norm and RMS norm have in common).
 *
 * Both normalize over a dim that may be sharded (the rule, mg_rules_softmax /
 * mg_rules_layer_norm, lets every shard pass). Then each rank computes its
 * part of the per-row statistics and the ranks sum those (R floats per step,
 * one all-reduce per sharding mesh dim), never x:
 *   softmax     row max (all-reduce max), sum of exp(x - max) (all-reduce sum);
 *               backward: the row sum of dy y (or of dy) (all-reduce sum)
 *   layer norm  row sum (-> mean), sum of squared deviations (-> rstd);
 *               backward: the row sums of g and g xhat, in one all-reduce
 * Layer norm keeps (mean, rstd) for backward on its node (node->saved).
 * Softmax over another dim than the last is a permute to the end and back.
 * Records (op_def.h): softmax, log_softmax (args.flag: log), layer_norm
 * (args.f: eps); each VJP reads the gradient at the output's placements. */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "dist/mesh.h"
#include "ops/ops.h"
#include "status.h"

static mg_backend *backend(const mg_tensor *t) { return mg_backend_of(t); }

/* ---- shared helpers ------------------------------------------------------------- */

mg_dtensor *mg_ops_grad_at(const mg_dtensor *g, const mg_spec *spec) {
    mg_spec target = *spec;
    for (int m = 0; m < spec->mesh->ndim; m++)
        if (target.p[m].kind == MG_PLACE_PARTIAL) target.p[m] = MG_REPLICATE;
    return mg_op_redistribute(g, &target);
}

mg_tensor *mg_ops_temp(int ndim, const int64_t *shape) {
    return mg_tensor_alloc(mg_step_arena(), ndim, shape);
}

int64_t mg_ops_local_rows(const mg_tensor *x) {
    int64_t rows = 1;
    for (int d = 0; d + 1 < x->ndim; d++) rows *= x->shape[d];
    return rows;
}

/* ---- the norms' shared pieces (layer norm here, RMS norm in ops_rms_norm.c) ---- */

/* MG_OK when affine input p (weight or bias, named `name`) is absent or (N),
 * N being x's last dim. */
static int check_affine(const char *who, const mg_dtensor *x, const mg_dtensor *p,
                        const char *name) {
    int64_t c = x->spec.shape[x->spec.ndim - 1];
    if (!p || (p->spec.ndim == 1 && p->spec.shape[0] == c)) return MG_OK;
    char a[96], b[96];
    return mg_error(MG_ESHAPE, "%s: %s %s does not fit x %s: want (%lld), x's last dim", who, name,
                    mg_shape_format(a, sizeof a, p->spec.ndim, p->spec.shape),
                    mg_shape_format(b, sizeof b, x->spec.ndim, x->spec.shape), (long long)c);
}

int mg_ops_norm_shape(mg_op_call *c) {
    static const char *const names[] = {"weight", "bias"};
    const mg_dtensor *x = c->x[0];
    if (x->spec.ndim < 1)
        return mg_error(MG_ESHAPE, "%s: x is 0-d; it needs a dim to normalize over", c->who);
    for (int i = 1; i < c->n; i++) {
        int rc = check_affine(c->who, x, c->x[i], names[i - 1]);
        if (rc != MG_OK) return rc;
    }
    float eps = c->args.f;
    if (!(eps >= 0.0f) || isinf(eps))
        return mg_error(MG_EINVAL, "%s: eps is %g; it must be a finite number >= 0", c->who, eps);
    c->out_ndim = x->spec.ndim;
    memcpy(c->out_shape, x->spec.shape, sizeof c->out_shape);
    return MG_OK;
}

void mg_ops_norm_rule(const mg_op_call *c, mg_candidates *cands) {
    mg_rules_layer_norm(cands, c->x[0]->spec.ndim);
}

mg_dtensor *mg_ops_norm_run(const mg_op_def *def, const char *who, const mg_dtensor *x,
                            const mg_dtensor *weight, const mg_dtensor *bias, float eps) {
    mg_op_call c = {.who = who, .n = def->arity, .x = {x, weight, bias}, .args.f = eps};
    return mg_op_run(def, &c);
}

mg_spec mg_ops_norm_affine_grad_spec(const mg_dtensor *x, const mg_dtensor *p) {
    mg_spec s = p->spec;
    for (int m = 0; m < s.mesh->ndim; m++) {
        mg_placement xp = x->spec.p[m];
        if (xp.kind == MG_PLACE_SHARD && xp.dim != x->spec.ndim - 1) s.p[m] = MG_PARTIAL_SUM;
    }
    return s;
}

int mg_ops_norm_vjp_begin(mg_node *node, mg_dtensor *g, mg_dtensor **dy, mg_dtensor **grads) {
    const mg_dtensor *x = node->inputs[0];
    /* x and the weight may be parameter copies given back since the forward: both are read */
    const mg_dtensor *held[2] = {x, node->inputs[1]};
    int rc = mg_ops_hold(2, held);
    if (rc != MG_OK) return rc;
    NEED(*dy = mg_ops_grad_at(g, &node->output->spec));
    for (int i = 0; i < node->n_inputs; i++) {
        if (!mg_vjp_wants(node, i)) continue;
        mg_spec s = i == 0 ? x->spec : mg_ops_norm_affine_grad_spec(x, node->inputs[i]);
        NEED(grads[i] = mg_ops_output(&s));
    }
    return MG_OK;
}

/* ---- softmax -------------------------------------------------------------------- */

/* y = softmax(x) over the last dim, the rows' statistics summed over the mesh
 * dims that shard it */
static int softmax_local(const mg_dtensor *x, mg_dtensor *y, bool as_log) {
    mg_backend *be = backend(y->local);
    int nd = x->spec.ndim;
    unsigned mask = nd ? mg_ops_shard_mask(&x->spec, nd - 1) : 0;
    if (!mask) {
        be->iface->softmax(be->context, x->local, NULL, NULL, as_log, y->local);
        return MG_OK;
    }
    int64_t rows = mg_ops_local_rows(x->local), kept[MG_MAX_DIMS];
    memcpy(kept, x->local->shape, sizeof kept);
    kept[nd - 1] = 1;
    mg_tensor *max = mg_ops_temp(nd, kept), *sum = mg_ops_temp(1, &rows);
    if (!max || !sum) return mg_last_code();
    be->iface->reduce_max(be->context, x->local, max);
    int rc = mg_ops_reduce_over(x->spec.mesh, mask, max->data, rows, MG_REDUCE_MAX);
    if (rc != MG_OK) return rc;
    be->iface->softmax_sum(be->context, x->local, max, sum);
    if ((rc = mg_ops_reduce_over(x->spec.mesh, mask, sum->data, rows, MG_REDUCE_SUM)) != MG_OK)
        return rc;
    be->iface->softmax(be->context, x->local, max, sum, as_log, y->local);
    return MG_OK;
}

static int softmax_shape(mg_op_call *c) {
    c->out_ndim = c->x[0]->spec.ndim;
    memcpy(c->out_shape, c->x[0]->spec.shape, sizeof c->out_shape);
    return MG_OK;
}

static void softmax_rule(const mg_op_call *c, mg_candidates *cands) {
    mg_rules_softmax(cands, c->x[0]->spec.ndim);
}

static int softmax_kernel(mg_op_call *c, mg_dtensor *const *in, mg_dtensor *out) {
    return softmax_local(in[0], out, c->args.flag != 0);
}

static void softmax_cost(const mg_op_call *c, mg_dtensor *const *in, const mg_dtensor *out,
                         mg_op_cost *cost) {
    (void)c, (void)in;
    double n = (double)out->local->numel;
    cost->flops = 5 * n; /* max, exp, sum, divide */
    cost->bytes = 4.0 * 3 * n;
}

/* dx of y = softmax(x) or log_softmax(x) over the last dim */
static int softmax_vjp(mg_node *n, mg_dtensor *g, mg_dtensor **grads) {
    const mg_dtensor *out = n->output;
    bool as_log = n->args.flag != 0;
    mg_dtensor *dy = mg_ops_grad_at(g, &out->spec), *dx = mg_ops_output(&out->spec);
    NEED(dy && dx);
    mg_backend *be = backend(dx->local);
    int nd = out->spec.ndim;
    unsigned mask = nd ? mg_ops_shard_mask(&out->spec, nd - 1) : 0;
    mg_tensor *dot = NULL;
    if (mask) {
        int64_t rows = mg_ops_local_rows(out->local);
        NEED(dot = mg_ops_temp(1, &rows));
        be->iface->softmax_dot(be->context, out->local, dy->local, as_log, dot);
        int rc = mg_ops_reduce_over(out->spec.mesh, mask, dot->data, rows, MG_REDUCE_SUM);
        if (rc != MG_OK) return rc;
    }
    be->iface->softmax_backward(be->context, out->local, dy->local, dot, as_log, dx->local);
    grads[0] = dx;
    return MG_OK;
}

static const mg_op_def softmax_def = {
    .name = "softmax", .arity = 1, .required = 1, .required_names = "input",
    .shape = softmax_shape, .rule = softmax_rule, .kernel = softmax_kernel,
    .cost = softmax_cost, .vjp = softmax_vjp, .grad_at_output = true,
};
static const mg_op_def log_softmax_def = {
    .name = "log_softmax", .arity = 1, .required = 1, .required_names = "input",
    .shape = softmax_shape, .rule = softmax_rule, .kernel = softmax_kernel,
    .cost = softmax_cost, .vjp = softmax_vjp, .grad_at_output = true,
};

static mg_dtensor *softmax_op(const char *who, const mg_dtensor *x, int dim, bool as_log) {
    if (mg_ops_check_inputs(who, 1, &x) != MG_OK) return NULL;
    int nd = x->spec.ndim;
    if (nd == 0 && dim != 0 && dim != -1) /* a 0-d tensor is one row of one, as in torch */
        return mg_error_null(MG_EINVAL, "%s: dim %d is out of range for a 0-d tensor (use 0 or -1)",
                             who, dim);
    int d = nd ? mg_ops_dim(who, dim, nd) : 0;
    if (d < 0) return NULL;
    if (nd && d != nd - 1) { /* dim d to the end, and back after */
        int perm[MG_MAX_DIMS], back[MG_MAX_DIMS], k = 0;
        for (int i = 0; i < nd; i++)
            if (i != d) perm[k++] = i;
        perm[nd - 1] = d;
        for (int i = 0; i < nd; i++) back[perm[i]] = i;
        mg_dtensor *t = mg_permute(x, perm);
        if (t) t = softmax_op(who, t, -1, as_log);
        return t ? mg_permute(t, back) : NULL;
    }
    mg_op_call c = {.who = who, .n = 1, .x = {x}, .args.flag = as_log};
    return mg_op_run(as_log ? &log_softmax_def : &softmax_def, &c);
}

mg_dtensor *mg_softmax(const mg_dtensor *x, int dim) {
    return softmax_op("mg_softmax", x, dim, false);
}
mg_dtensor *mg_log_softmax(const mg_dtensor *x, int dim) {
    return softmax_op("mg_log_softmax", x, dim, true);
}

/* ---- layer norm ----------------------------------------------------------------- */

/* y and its (mean, rstd); the statistics of rows split over the mesh dims in
 * mask are the sums of the ranks' parts */
static int layer_norm_local(const mg_dtensor *x, const mg_dtensor *w, const mg_dtensor *b,
                            float eps, mg_dtensor *y, mg_tensor *stats) {
    mg_backend *be = backend(y->local);
    int nd = x->spec.ndim;
    int64_t n = x->spec.shape[nd - 1], rows = mg_ops_local_rows(x->local), two = 2 * rows;
    unsigned mask = mg_ops_shard_mask(&x->spec, nd - 1);
    const mg_tensor *wl = w ? w->local : NULL, *bl = b ? b->local : NULL;
    if (!mask) {
        be->iface->layer_norm(be->context, x->local, wl, bl, eps, NULL, n, stats, y->local);
        return MG_OK;
    }
    mg_arena *arena = mg_step_arena();
    mg_tensor *moments = mg_ops_temp(1, &two);
    mg_tensor *mean = moments ? mg_tensor_slice(arena, moments, 0, rows) : NULL;
    mg_tensor *squares = moments ? mg_tensor_slice(arena, moments, rows, rows) : NULL;
    if (!mean || !squares) return mg_last_code();
    be->iface->layer_norm_moments(be->context, x->local, NULL, mean);
    int rc = mg_ops_reduce_over(x->spec.mesh, mask, mean->data, rows, MG_REDUCE_SUM);
    if (rc != MG_OK) return rc;
    be->iface->unary(be->context, MG_UNARY_SCALE, mean, n ? 1.0f / (float)n : 0.0f, mean);
    be->iface->layer_norm_moments(be->context, x->local, mean, squares);
    if ((rc = mg_ops_reduce_over(x->spec.mesh, mask, squares->data, rows, MG_REDUCE_SUM)) != MG_OK)
        return rc;
    be->iface->layer_norm(be->context, x->local, wl, bl, eps, moments, n, stats, y->local);
    return MG_OK;
}

static int layer_norm_kernel(mg_op_call *c, mg_dtensor *const *in, mg_dtensor *out) {
    int64_t two = 2 * mg_ops_local_rows(out->local);
    mg_tensor *stats = mg_ops_temp(1, &two); /* (mean, rstd) of every row */
    if (!stats) return mg_last_code();
    c->saved = stats;
    return layer_norm_local(in[0], in[1], in[2], c->args.f, out, stats);
}

static void layer_norm_cost(const mg_op_call *c, mg_dtensor *const *in, const mg_dtensor *out,
                            mg_op_cost *cost) {
    (void)c, (void)in;
    double n = (double)out->local->numel;
    cost->flops = 8 * n; /* mean, deviations, squares, scale and shift */
    cost->bytes = 4.0 * 2 * n;
}

/* dx, dw, db of layer norm (those wanted) */
static int layer_norm_vjp(mg_node *node, mg_dtensor *g, mg_dtensor **grads) {
    mg_dtensor *dy;
    int rc = mg_ops_norm_vjp_begin(node, g, &dy, grads);
    if (rc != MG_OK) return rc;
    mg_dtensor *dx = grads[0], *dw = grads[1], *db = grads[2];
    const mg_dtensor *x = node->inputs[0], *w = node->inputs[1];
    mg_backend *be = backend(dy->local);
    int nd = x->spec.ndim;
    int64_t n = x->spec.shape[nd - 1], rows = mg_ops_local_rows(x->local), two = 2 * rows;
    unsigned mask = mg_ops_shard_mask(&x->spec, nd - 1);
    mg_tensor *sums = NULL;
    const mg_tensor *wl = w ? w->local : NULL;
    if (mask && dx) { /* the row sums of g and g xhat over the whole row */
        NEED(sums = mg_ops_temp(1, &two));
        be->iface->layer_norm_backward_sums(be->context, x->local, wl, dy->local, node->saved,
                                            sums);
        if ((rc = mg_ops_reduce_over(x->spec.mesh, mask, sums->data, two, MG_REDUCE_SUM)) != MG_OK)
            return rc;
    }
    be->iface->layer_norm_backward(be->context, x->local, wl, dy->local, node->saved, sums, n,
                                   dx ? dx->local : NULL, dw ? dw->local : NULL,
                                   db ? db->local : NULL);
    return MG_OK;
}

static const mg_op_def layer_norm_def = {
    .name = "layer_norm", .arity = 3, .kernel = layer_norm_kernel, .cost = layer_norm_cost,
    .vjp = layer_norm_vjp, MG_OPS_NORM_FIELDS,
};

mg_dtensor *mg_layer_norm(const mg_dtensor *x, const mg_dtensor *weight, const mg_dtensor *bias,
                          float eps) {
    return mg_ops_norm_run(&layer_norm_def, "mg_layer_norm", x, weight, bias, eps);
}
