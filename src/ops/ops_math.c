/* ops_math.c: the pointwise family and its ops (mg_add, mg_sub, mg_mul,
 * mg_scale, mg_relu, mg_gelu, mg_silu and the gradient ops of the
 * activations), reductions (mg_sum, mg_sum_dims, mg_mean, mg_mean_dims,
 * sum_to), their partner mg_expand (each is the other's VJP) and
 * mg_mse_loss, each a record (op_def.h). Cross-entropy is in
 * ops_vocab.c.
 *
 * A pointwise record names its backend kernel (MG_UNARY_* or MG_BINARY_*,
 * whose formulas live in backend/kernel_math.h for the CPU and CUDA alike),
 * how a Partial input passes (mg_linearity) and its FLOPs per element (and
 * its VJP); the shape (broadcasting), rule, kernel call and cost are the
 * family's (UNARY_RECORD, BINARY_RECORD). */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "ops/ops.h"
#include "status.h"

static mg_backend *backend(const mg_dtensor *t) { return mg_backend_of(t->local); }

/* ---- the pointwise family ------------------------------------------------------ */

/* local tensor seen with `ndim` dims (leading 1s) */
static mg_tensor *aligned_view(mg_tensor *t, int ndim) {
    int64_t shape[MG_MAX_DIMS];
    int lead = ndim - t->ndim;
    for (int i = 0; i < ndim; i++) shape[i] = i < lead ? 1 : t->shape[i - lead];
    return mg_tensor_view(mg_step_arena(), t, ndim, shape);
}

int mg_op_pointwise_shape(mg_op_call *c) {
    const mg_spec *a = &c->x[0]->spec;
    if (c->n == 1) {
        c->out_ndim = a->ndim;
        memcpy(c->out_shape, a->shape, sizeof c->out_shape);
        return MG_OK;
    }
    const mg_spec *b = &c->x[1]->spec;
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        int64_t sa = ia >= 0 ? a->shape[ia] : 1, sb = ib >= 0 ? b->shape[ib] : 1;
        if (sa != sb && sa != 1 && sb != 1) {
            char x[96], y[96];
            return mg_error(MG_ESHAPE,
                            "%s: shapes %s and %s do not broadcast: dim %d has sizes %lld and "
                            "%lld (dims must be equal or 1, aligned from the right)",
                            c->who, mg_shape_format(x, sizeof x, a->ndim, a->shape),
                            mg_shape_format(y, sizeof y, b->ndim, b->shape), i, (long long)sa,
                            (long long)sb);
        }
        c->out_shape[i] = sa == 1 ? sb : sa;
    }
    c->out_ndim = nd;
    return MG_OK;
}

void mg_op_pointwise_rule(const mg_op_call *c, mg_candidates *cands) {
    int ndims[2];
    const int64_t *shapes[2];
    for (int i = 0; i < c->n; i++) {
        ndims[i] = c->x[i]->spec.ndim;
        shapes[i] = c->x[i]->spec.shape;
    }
    mg_rules_pointwise(cands, c->n, ndims, shapes, c->out_ndim, c->out_shape, c->def->linearity);
}

int mg_op_unary_kernel(mg_op_call *c, mg_dtensor *const *in, mg_dtensor *out) {
    mg_backend *be = backend(out);
    be->iface->unary(be->context, (mg_unary_op)c->def->kind, in[0]->local, c->args.f,
                     out->local);
    return MG_OK;
}

int mg_op_binary_kernel(mg_op_call *c, mg_dtensor *const *in, mg_dtensor *out) {
    int nd = c->out_ndim;
    mg_tensor *la = aligned_view(in[0]->local, nd), *lb = aligned_view(in[1]->local, nd);
    if (!la || !lb) return mg_last_code();
    mg_backend *be = backend(out);
    be->iface->binary(be->context, (mg_binary_op)c->def->kind, la, lb, out->local);
    return MG_OK;
}

void mg_op_pointwise_cost(const mg_op_call *c, mg_dtensor *const *in, const mg_dtensor *out,
                          mg_op_cost *cost) {
    double n = (double)out->local->numel, read = 0;
    for (int i = 0; i < c->n; i++) read += (double)in[i]->local->numel;
    cost->flops = c->def->flops_per_element * n;
    cost->bytes = 4.0 * (read + n);
}

/* The family's fields of a record: its kernel call (unary or binary), how a
 * Partial input passes, its FLOPs per element. */
#define POINTWISE(call, lin, fpe)                                                         \
    .shape = mg_op_pointwise_shape, .rule = mg_op_pointwise_rule, .kernel = (call),       \
    .cost = mg_op_pointwise_cost, .linearity = (lin), .flops_per_element = (fpe)

/* A whole record of the family, of one input or two (every input required):
 * its name, backend kernel, linearity, FLOPs per element and VJP (NULL: a
 * gradient op). */
#define UNARY_RECORD(nm, k, lin, fpe, vjp_)                                               \
    {.name = (nm), .arity = 1, .required = 1, .required_names = "input", .vjp = (vjp_),   \
     .kind = (k), POINTWISE(mg_op_unary_kernel, lin, fpe)}
#define BINARY_RECORD(nm, k, lin, fpe, vjp_)                                              \
    {.name = (nm), .arity = 2, .required = 2, .required_names = "input", .vjp = (vjp_),   \
     .kind = (k), POINTWISE(mg_op_binary_kernel, lin, fpe)}

/* ---- add, sub, mul ------------------------------------------------------------------- */

static int add_sub_vjp(mg_node *n, mg_dtensor *g, mg_dtensor **out, float sign_b) {
    const mg_spec *a = &n->inputs[0]->spec, *b = &n->inputs[1]->spec;
    if (mg_vjp_wants(n, 0)) NEED(out[0] = mg_op_sum_to(g, a->ndim, a->shape));
    if (mg_vjp_wants(n, 1)) {
        mg_dtensor *gb = mg_op_sum_to(g, b->ndim, b->shape);
        NEED(gb);
        if (sign_b != 1.0f) NEED(gb = mg_scale(gb, sign_b));
        out[1] = gb;
    }
    return MG_OK;
}
static int add_vjp(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    return add_sub_vjp(n, g, out, 1.0f);
}
static int sub_vjp(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    return add_sub_vjp(n, g, out, -1.0f);
}

static int mul_vjp(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    mg_dtensor *a = n->inputs[0], *b = n->inputs[1];
    if (mg_vjp_wants(n, 0)) {
        mg_dtensor *t = mg_mul(g, b);
        NEED(t);
        NEED(out[0] = mg_op_sum_to(t, a->spec.ndim, a->spec.shape));
    }
    if (mg_vjp_wants(n, 1)) {
        mg_dtensor *t = mg_mul(g, a);
        NEED(t);
        NEED(out[1] = mg_op_sum_to(t, b->spec.ndim, b->spec.shape));
    }
    return MG_OK;
}

static const mg_op_def add_def = BINARY_RECORD("add", MG_BINARY_ADD, MG_LINEARITY_SUM, 1, add_vjp);
static const mg_op_def sub_def = BINARY_RECORD("sub", MG_BINARY_SUB, MG_LINEARITY_SUM, 1, sub_vjp);
static const mg_op_def mul_def = BINARY_RECORD("mul", MG_BINARY_MUL, MG_LINEARITY_ANY, 1, mul_vjp);

mg_dtensor *mg_add(const mg_dtensor *a, const mg_dtensor *b) {
    return mg_op_run2(&add_def, "mg_add", a, b);
}
mg_dtensor *mg_sub(const mg_dtensor *a, const mg_dtensor *b) {
    return mg_op_run2(&sub_def, "mg_sub", a, b);
}
mg_dtensor *mg_mul(const mg_dtensor *a, const mg_dtensor *b) {
    return mg_op_run2(&mul_def, "mg_mul", a, b);
}

/* ---- scale ------------------------------------------------------------------------- */

static int scale_shape(mg_op_call *c) {
    if (!isfinite(c->args.f))
        return mg_error(MG_EINVAL, "%s: the factor is %g; give a finite number", c->who,
                        c->args.f);
    return mg_op_pointwise_shape(c);
}

static int scale_vjp(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    NEED(out[0] = mg_scale(g, n->args.f));
    return MG_OK;
}

static const mg_op_def scale_def = {
    .name = "scale", .arity = 1, .required = 1, .required_names = "input", .vjp = scale_vjp,
    .shape = scale_shape, .rule = mg_op_pointwise_rule, .kernel = mg_op_unary_kernel,
    .cost = mg_op_pointwise_cost, .kind = MG_UNARY_SCALE, .linearity = MG_LINEARITY_FIRST,
    .flops_per_element = 1,
};

mg_dtensor *mg_scale(const mg_dtensor *x, float s) {
    return mg_op_run1(&scale_def, "mg_scale", x, s);
}

/* ---- activations: y = f(x), dx = dy f'(x) -------------------------------------------- */

enum { RELU, GELU, SILU };

/* The gradient op of each activation, dy (a) and x (b): dy * f'(x). */
static const mg_op_def activation_grad_def[] = {
    [RELU] = BINARY_RECORD("relu_backward", MG_BINARY_RELU_BACKWARD, MG_LINEARITY_FIRST, 1, NULL),
    [GELU] = BINARY_RECORD("gelu_backward", MG_BINARY_GELU_BACKWARD, MG_LINEARITY_FIRST, 20, NULL),
    [SILU] = BINARY_RECORD("silu_backward", MG_BINARY_SILU_BACKWARD, MG_LINEARITY_FIRST, 8, NULL),
};

static int activation_vjp(mg_node *n, mg_dtensor *g, mg_dtensor **out);

/* The activations, in the order of their gradient ops above. */
static const mg_op_def activation_def[] = {
    [RELU] = UNARY_RECORD("relu", MG_UNARY_RELU, MG_LINEARITY_NONE, 1, activation_vjp),
    [GELU] = UNARY_RECORD("gelu", MG_UNARY_GELU, MG_LINEARITY_NONE, 15, activation_vjp),
    [SILU] = UNARY_RECORD("silu", MG_UNARY_SILU, MG_LINEARITY_NONE, 5, activation_vjp),
};

/* dx = dy f'(x): the gradient op in the row of the node's own activation */
static int activation_vjp(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    const mg_op_def *grad = &activation_grad_def[n->def - activation_def];
    NEED(out[0] = mg_op_run2(grad, NULL, g, n->inputs[0]));
    return MG_OK;
}

static mg_dtensor *activation(int which, const char *who, const mg_dtensor *x) {
    return mg_op_run1(&activation_def[which], who, x, 0);
}

mg_dtensor *mg_relu(const mg_dtensor *x) { return activation(RELU, "mg_relu", x); }
mg_dtensor *mg_gelu(const mg_dtensor *x) { return activation(GELU, "mg_gelu", x); }
mg_dtensor *mg_silu(const mg_dtensor *x) { return activation(SILU, "mg_silu", x); }

/* ---- reductions ------------------------------------------------------------------
 * args: i[d] = 1 where dim d is reduced (ni = x's ndim), flag = keepdim, f = the
 * scale, (ndim, shape) = x's global shape. */

static int sum_shape(mg_op_call *c) {
    const mg_spec *x = &c->x[0]->spec;
    int nd = x->ndim;
    c->out_ndim = 0;
    for (int d = 0; d < nd; d++)
        if (!c->args.i[d] || c->args.flag)
            c->out_shape[c->out_ndim++] = c->args.i[d] ? 1 : x->shape[d];
    return MG_OK;
}

static void sum_rule(const mg_op_call *c, mg_candidates *cands) {
    bool reduced[MG_MAX_DIMS];
    for (int d = 0; d < c->args.ni; d++) reduced[d] = c->args.i[d] != 0;
    mg_rules_reduce(cands, c->args.ni, reduced, c->args.flag);
}

static int sum_kernel(mg_op_call *c, mg_dtensor *const *in, mg_dtensor *out) {
    int nd = c->args.ni;
    int64_t local_kept[MG_MAX_DIMS];
    for (int d = 0; d < nd; d++) local_kept[d] = c->args.i[d] ? 1 : in[0]->local->shape[d];
    mg_tensor *yv = mg_tensor_view(mg_step_arena(), out->local, nd, local_kept);
    if (!yv) return mg_last_code();
    mg_backend *be = backend(out);
    be->iface->reduce_sum(be->context, in[0]->local, yv);
    float scale = c->args.f;
    if (scale != 1.0f) be->iface->unary(be->context, MG_UNARY_SCALE, out->local, scale, out->local);
    return MG_OK;
}

static int sum_vjp(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    int64_t kept[MG_MAX_DIMS];
    for (int d = 0; d < n->args.ndim; d++) kept[d] = n->args.i[d] ? 1 : n->args.shape[d];
    mg_dtensor *k = mg_reshape(g, n->args.ndim, kept);
    NEED(k);
    mg_dtensor *e = mg_expand(k, n->args.ndim, n->args.shape);
    NEED(e);
    if (n->args.f != 1.0f) NEED(e = mg_scale(e, n->args.f));
    out[0] = e;
    return MG_OK;
}

static void sum_cost(const mg_op_call *c, mg_dtensor *const *in, const mg_dtensor *out,
                     mg_op_cost *cost) {
    (void)c;
    cost->flops = (double)in[0]->local->numel;
    cost->bytes = 4.0 * (double)(in[0]->local->numel + out->local->numel);
}

static const mg_op_def sum_def = {
    .name = "sum", .arity = 1, .required = 1, .required_names = "input", .shape = sum_shape,
    .rule = sum_rule, .kernel = sum_kernel, .cost = sum_cost, .vjp = sum_vjp,
};

mg_dtensor *mg_op_sum_scaled(const mg_dtensor *x, int n, const int *dims, int keepdim, float scale,
                             const char *who) {
    if (mg_ops_check_inputs(who, 1, &x) != MG_OK) return NULL;
    int nd = x->spec.ndim;
    if (n < 0 || (n > 0 && !dims)) return mg_error_null(MG_EINVAL, "%s: bad dims list", who);
    mg_op_call c = {.who = who, .n = 1, .x = {x}};
    for (int i = 0; i < n; i++) {
        int d = mg_ops_dim(who, dims[i], nd);
        if (d < 0) return NULL;
        if (c.args.i[d]) return mg_error_null(MG_EINVAL, "%s: dim %d is listed twice", who, d);
        c.args.i[d] = 1;
    }
    c.args.ni = c.args.ndim = nd;
    c.args.flag = keepdim != 0;
    c.args.f = scale;
    memcpy(c.args.shape, x->spec.shape, sizeof c.args.shape);
    return mg_op_run(&sum_def, &c);
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

/* ---- expand: c->out_shape holds the target as given (-1: keep the dim);
 * args (ndim, shape) = x's global shape, where the gradient is summed back to */

static int expand_shape(mg_op_call *c) {
    const mg_spec *xs = &c->x[0]->spec;
    int ndim = c->out_ndim;
    int64_t *shape = c->out_shape;
    char a[96], b[96];
    if (ndim < xs->ndim)
        return mg_error(MG_ESHAPE,
                        "%s: cannot expand %s to %s: the target has fewer dims than the tensor",
                        c->who, mg_shape_format(a, sizeof a, xs->ndim, xs->shape),
                        mg_shape_format(b, sizeof b, ndim, shape));
    int lead = ndim - xs->ndim;
    for (int i = 0; i < ndim; i++) {
        int64_t want = shape[i];
        if (i < lead) {
            if (want < 0)
                return mg_error(MG_ESHAPE, "%s: -1 is not allowed for the new leading dim %d",
                                c->who, i);
            continue;
        }
        int64_t have = xs->shape[i - lead];
        if (want == -1) want = have;
        if (have != want && have != 1)
            return mg_error(MG_ESHAPE,
                            "%s: cannot expand global shape %s to %s: dim %d has size %lld, which "
                            "is neither %lld nor 1 (sizes are global, not per-rank)",
                            c->who, mg_shape_format(a, sizeof a, xs->ndim, xs->shape),
                            mg_shape_format(b, sizeof b, ndim, shape), i, (long long)have,
                            (long long)want);
    }
    for (int i = lead; i < ndim; i++)
        if (shape[i] == -1) shape[i] = xs->shape[i - lead];
    c->args.ndim = xs->ndim;
    memcpy(c->args.shape, xs->shape, sizeof c->args.shape);
    return MG_OK;
}

static void expand_rule(const mg_op_call *c, mg_candidates *cands) {
    const mg_spec *xs = &c->x[0]->spec;
    mg_rules_expand(cands, xs->ndim, xs->shape, c->out_ndim, c->out_shape);
}

/* the local input (aligned right, leading 1s) broadcast into the local
 * output, whose sizes come from the output spec */
static int expand_kernel(mg_op_call *c, mg_dtensor *const *in, mg_dtensor *out) {
    int ndim = c->out_ndim, lead = ndim - in[0]->local->ndim;
    int64_t aligned[MG_MAX_DIMS], ones[MG_MAX_DIMS];
    for (int i = 0; i < ndim; i++) {
        aligned[i] = i < lead ? 1 : in[0]->local->shape[i - lead];
        ones[i] = 1;
    }
    mg_tensor *xv = mg_tensor_view(mg_step_arena(), in[0]->local, ndim, aligned);
    mg_tensor *zero = mg_tensor_zeros(mg_step_arena(), ndim, ones);
    if (!xv || !zero) return mg_last_code();
    mg_backend *be = mg_backend_of(out->local);
    be->iface->binary(be->context, MG_BINARY_ADD, xv, zero, out->local);
    return MG_OK;
}

static int expand_vjp(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    NEED(out[0] = mg_op_sum_to(g, n->args.ndim, n->args.shape));
    return MG_OK;
}

static const mg_op_def expand_def = {
    .name = "expand", .arity = 1, .required = 1, .required_names = "input",
    .shape = expand_shape, .rule = expand_rule, .kernel = expand_kernel,
    .cost = mg_ops_copy_cost, .vjp = expand_vjp,
};

mg_dtensor *mg_expand(const mg_dtensor *x, int ndim, const int64_t *global_shape) {
    const char *who = "mg_expand";
    if (mg_ops_check_inputs(who, 1, &x) != MG_OK) return NULL;
    if (mg_shape_check(ndim, global_shape, who) != MG_OK) {
        /* -1 means "keep this dim": allowed, checked by expand_shape */
        bool only_minus_one = ndim >= 0 && ndim <= MG_MAX_DIMS && global_shape;
        for (int i = 0; only_minus_one && i < ndim; i++)
            if (global_shape[i] < -1) only_minus_one = false;
        if (!only_minus_one) return NULL;
    }
    mg_op_call c = {.who = who, .n = 1, .x = {x}, .out_ndim = ndim};
    if (ndim > 0) memcpy(c.out_shape, global_shape, (size_t)ndim * sizeof *global_shape);
    return mg_op_run(&expand_def, &c);
}

/* ---- mse loss ------------------------------------------------------------------------ */

static int mse_shape(mg_op_call *c) {
    const mg_spec *p = &c->x[0]->spec, *t = &c->x[1]->spec;
    char a[96], b[96];
    if (!mg_shape_equal(p->ndim, p->shape, t->ndim, t->shape))
        return mg_error(MG_ESHAPE, "%s: pred %s and target %s must have the same shape", c->who,
                        mg_shape_format(a, sizeof a, p->ndim, p->shape),
                        mg_shape_format(b, sizeof b, t->ndim, t->shape));
    c->out_ndim = 0;
    return MG_OK;
}

static void mse_rule(const mg_op_call *c, mg_candidates *cands) {
    mg_rules_elementwise_loss(cands, c->x[0]->spec.ndim);
}

static int mse_kernel(mg_op_call *c, mg_dtensor *const *in, mg_dtensor *out) {
    mg_tensor *diff = mg_tensor_alloc(mg_step_arena(), in[0]->local->ndim, in[0]->local->shape);
    if (!diff) return mg_last_code();
    mg_backend *be = backend(out);
    be->iface->binary(be->context, MG_BINARY_SUB, in[0]->local, in[1]->local, diff);
    const mg_spec *p = &c->x[0]->spec;
    int64_t n = mg_shape_numel(p->ndim, p->shape);
    float v = n > 0 ? (float)(be->iface->sum_squares(be->context, diff) / (double)n) : 0.0f;
    be->iface->from_host(be->context, out->local->data, &v, 1);
    return MG_OK;
}

static int mse_vjp(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    const mg_spec *p = &n->inputs[0]->spec;
    int64_t count = mg_shape_numel(p->ndim, p->shape);
    mg_dtensor *d = mg_sub(n->inputs[0], n->inputs[1]);
    NEED(d);
    NEED(d = mg_scale(d, count ? 2.0f / (float)count : 0.0f));
    NEED(d = mg_mul(d, g));
    if (mg_vjp_wants(n, 0)) out[0] = d;
    if (mg_vjp_wants(n, 1)) NEED(out[1] = mg_scale(d, -1.0f));
    return MG_OK;
}

static void mse_cost(const mg_op_call *c, mg_dtensor *const *in, const mg_dtensor *out,
                     mg_op_cost *cost) {
    (void)c, (void)out;
    double n = (double)in[0]->local->numel;
    cost->flops = 3 * n;
    cost->bytes = 4.0 * 4 * n; /* both inputs read, the difference written and read */
}

static const mg_op_def mse_def = {
    .name = "mse_loss", .arity = 2, .required = 2, .required_names = "input", .shape = mse_shape,
    .rule = mse_rule, .kernel = mse_kernel, .cost = mse_cost, .vjp = mse_vjp,
};

mg_dtensor *mg_mse_loss(const mg_dtensor *pred, const mg_dtensor *target) {
    return mg_op_run2(&mse_def, "mg_mse_loss", pred, target);
}
