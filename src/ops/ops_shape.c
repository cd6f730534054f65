/* ops_shape.c: layout ops on distributed tensors: mg_permute, mg_transpose,
 * mg_reshape, mg_view, mg_narrow, mg_cat, each a record (op_def.h), and the
 * gradient of a narrow (mg_expand lives with the sums in ops_math.c: each is
 * the other's VJP), and the cost of an op that copies (ops.h's
 * mg_ops_copy_cost, expand's too). Every size argument is GLOBAL;
 * the local sizes the kernel gets come from the output spec
 * (mg_spec_local), never from an input's local shape. */
#include <string.h>

#include "backend/backend.h"
#include "dist/mesh.h"
#include "ops/ops.h"
#include "status.h"

/* ---- permute: args.i = the permutation (ni = its length) ------------------------ */

static int permute_shape(mg_op_call *c) {
    int nd = c->x[0]->spec.ndim;
    bool seen[MG_MAX_DIMS] = {false};
    for (int i = 0; i < nd; i++) {
        int d = mg_ops_dim(c->who, c->args.i[i], nd);
        if (d < 0) return mg_last_code();
        if (seen[d])
            return mg_error(MG_EINVAL, "%s: dim %d appears twice in the permutation", c->who, d);
        seen[d] = true;
        c->args.i[i] = d;
        c->out_shape[i] = c->x[0]->spec.shape[d];
    }
    c->args.ni = c->out_ndim = nd;
    return MG_OK;
}

static void permute_rule(const mg_op_call *c, mg_candidates *cands) {
    mg_rules_permute(cands, c->args.ni, c->args.i);
}

static int permute_kernel(mg_op_call *c, mg_dtensor *const *in, mg_dtensor *out) {
    mg_backend *be = mg_backend_of(in[0]->local);
    be->iface->permute(be->context, in[0]->local, c->args.i, out->local);
    return MG_OK;
}

static int permute_vjp(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    int inv[MG_MAX_DIMS];
    for (int i = 0; i < n->args.ni; i++) inv[n->args.i[i]] = i;
    NEED(out[0] = mg_permute(g, inv));
    return MG_OK;
}

void mg_ops_copy_cost(const mg_op_call *c, mg_dtensor *const *in, const mg_dtensor *out,
                      mg_op_cost *cost) {
    (void)c, (void)in;
    cost->flops = 0;
    cost->bytes = 8.0 * (double)out->local->numel; /* read and written */
}

static const mg_op_def permute_def = {
    .name = "permute", .arity = 1, .required = 1, .required_names = "input",
    .shape = permute_shape, .rule = permute_rule, .kernel = permute_kernel,
    .cost = mg_ops_copy_cost, .vjp = permute_vjp,
};

mg_dtensor *mg_permute(const mg_dtensor *x, const int *perm) {
    const char *who = "mg_permute";
    if (mg_ops_check_inputs(who, 1, &x) != MG_OK) return NULL;
    int nd = x->spec.ndim;
    if (nd > 0 && !perm) return mg_error_null(MG_EINVAL, "%s: perm is NULL", who);
    mg_op_call c = {.who = who, .n = 1, .x = {x}};
    if (nd > 0) memcpy(c.args.i, perm, (size_t)nd * sizeof *perm);
    return mg_op_run(&permute_def, &c);
}

mg_dtensor *mg_transpose(const mg_dtensor *x, int dim0, int dim1) {
    const char *who = "mg_transpose";
    if (mg_ops_check_inputs(who, 1, &x) != MG_OK) return NULL;
    int nd = x->spec.ndim;
    int a = mg_ops_dim(who, dim0, nd), b = mg_ops_dim(who, dim1, nd);
    if (a < 0 || b < 0) return NULL;
    int perm[MG_MAX_DIMS];
    for (int i = 0; i < nd; i++) perm[i] = i;
    perm[a] = b;
    perm[b] = a;
    return mg_permute(x, perm);
}

/* ---- reshape and view: no kernel (a rank's block keeps its order), so they
 * take a path of their own: mg_rules_reshape says, for the actual spec, which
 * placements stay; the others are made Replicate first (reshape) or refused
 * (view). args (ndim, shape) = x's global shape, for the VJP. */

static int reshape_vjp(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    NEED(out[0] = mg_reshape(g, n->args.ndim, n->args.shape));
    return MG_OK;
}

static const mg_op_def reshape_def = {
    .name = "reshape", .arity = 1, .required = 1, .vjp = reshape_vjp,
};

/* reshape (copy allowed: redistributes what cannot stay sharded) or view */
static mg_dtensor *reshape_impl(const char *who, const mg_dtensor *x, int ndim,
                                const int64_t *global_shape, bool is_view) {
    if (mg_ops_check_inputs(who, 1, &x) != MG_OK) return NULL;
    const mg_spec *xs = &x->spec;
    if (ndim < 0 || ndim > MG_MAX_DIMS || (ndim > 0 && !global_shape))
        return mg_error_null(MG_EINVAL, "%s: bad target rank %d", who, ndim);
    int64_t out_shape[MG_MAX_DIMS];
    int infer = -1;
    int64_t known = 1, numel = mg_shape_numel(xs->ndim, xs->shape);
    for (int i = 0; i < ndim; i++) {
        out_shape[i] = global_shape[i];
        if (global_shape[i] == -1) {
            if (infer >= 0) return mg_error_null(MG_EINVAL, "%s: only one dim may be -1", who);
            infer = i;
        } else if (global_shape[i] < 0) {
            return mg_error_null(MG_ESHAPE, "%s: dim %d has size %lld", who, i,
                                 (long long)global_shape[i]);
        } else {
            known *= global_shape[i];
        }
    }
    if (infer >= 0) out_shape[infer] = known ? numel / known : 0;
    char a[96], b[96];
    if (mg_shape_numel(ndim, out_shape) != numel)
        return mg_error_null(MG_ESHAPE,
                             "%s: cannot reshape global shape %s (%lld elements) to %s (%lld)", who,
                             mg_shape_format(a, sizeof a, xs->ndim, xs->shape), (long long)numel,
                             mg_shape_format(b, sizeof b, ndim, out_shape),
                             (long long)mg_shape_numel(ndim, out_shape));

    mg_placement keep[MG_MAX_MESH_DIMS];
    bool ok[MG_MAX_MESH_DIMS];
    mg_rules_reshape(xs, ndim, out_shape, keep, ok);
    mg_spec src = *xs;
    bool all_ok = true;
    for (int m = 0; m < xs->mesh->ndim; m++)
        if (!ok[m]) {
            src.p[m] = MG_REPLICATE;
            all_ok = false;
        }
    if (!all_ok && is_view) {
        char have[64], need[64];
        mg_placements_format(have, sizeof have, xs->p, xs->mesh->ndim);
        mg_placements_format(need, sizeof need, src.p, xs->mesh->ndim);
        return mg_error_null(MG_EPLACEMENT,
                             "%s: cannot view %s %s as %s: a shard would not stay one block on "
                             "every rank; call mg_redistribute(x, %s) first, or use mg_reshape",
                             who, mg_shape_format(a, sizeof a, xs->ndim, xs->shape), have,
                             mg_shape_format(b, sizeof b, ndim, out_shape), need);
    }
    mg_dtensor *xin = mg_op_redistribute(x, &src);
    if (!xin) return NULL;
    mg_spec out_spec = *xs;
    out_spec.ndim = ndim;
    memset(out_spec.shape, 0, sizeof out_spec.shape);
    for (int i = 0; i < ndim; i++) out_spec.shape[i] = out_shape[i];
    for (int m = 0; m < xs->mesh->ndim; m++) out_spec.p[m] = ok[m] ? keep[m] : MG_REPLICATE;
    int64_t local[MG_MAX_DIMS];
    mg_spec_local(&out_spec, NULL, local, NULL);
    /* local data is contiguous and each rank's block keeps its order: share it */
    mg_tensor *lv = mg_tensor_view(mg_step_arena(), xin->local, ndim, local);
    if (!lv) return NULL;
    mg_dtensor *y = mg_dtensor_make(&out_spec, lv, mg_step_arena());
    if (!y) return NULL;
    mg_node *node = mg_ops_record(&reshape_def, 1, &xin, y);
    if (node) {
        node->args.ndim = xs->ndim;
        memcpy(node->args.shape, xs->shape, sizeof node->args.shape);
    }
    return y;
}

mg_dtensor *mg_reshape(const mg_dtensor *x, int ndim, const int64_t *global_shape) {
    return reshape_impl("mg_reshape", x, ndim, global_shape, false);
}

mg_dtensor *mg_view(const mg_dtensor *x, int ndim, const int64_t *global_shape) {
    return reshape_impl("mg_view", x, ndim, global_shape, true);
}

/* ---- narrow and cat --------------------------------------------------------------
 * Along a dim that is not sharded both are local block copies; a shard of that
 * dim is undone first (mg_rules_narrow), the inputs of cat brought to one
 * placement. A tape node holds at most MG_OP_MAX_INPUTS inputs, so a cat of
 * more is a tree of cats of that many.
 * args: i[0] = the dim; a narrow's shape[0] = its start. */

/* dst[dst_off + i] = src[src_off + i] for i in src's (narrow: dst's) local box */
static void copy_along(const mg_tensor *src, int64_t src_start, mg_tensor *dst, int64_t dst_start,
                       int dim, const int64_t *extent) {
    int64_t so[MG_MAX_DIMS] = {0}, dof[MG_MAX_DIMS] = {0};
    so[dim] = src_start;
    dof[dim] = dst_start;
    if (mg_shape_numel(src->ndim, extent) == 0) return;
    mg_backend *be = mg_backend_of(dst);
    be->iface->copy_block(be->context, src, so, dst, dof, extent);
}

static mg_dtensor *narrow_dim(const char *who, const mg_dtensor *x, int *dim) {
    if (mg_ops_check_inputs(who, 1, &x) != MG_OK) return NULL;
    if (x->spec.ndim == 0) return mg_error_null(MG_ESHAPE, "%s: x is 0-d; it has no dim", who);
    *dim = mg_ops_dim(who, *dim, x->spec.ndim);
    return *dim < 0 ? NULL : (mg_dtensor *)x;
}

static void narrow_rule(const mg_op_call *c, mg_candidates *cands) {
    mg_rules_narrow(cands, c->n, c->out_ndim, c->args.i[0]);
}

/* The shape is set by the caller (mg_narrow, narrow_vjp): these take it. */
static int preset_shape(mg_op_call *c) {
    (void)c;
    return MG_OK;
}

static int narrow_kernel(mg_op_call *c, mg_dtensor *const *in, mg_dtensor *out) {
    copy_along(in[0]->local, c->args.shape[0], out->local, 0, c->args.i[0], out->local->shape);
    return MG_OK;
}

/* g placed at [start, start + g's size) of the dim, in zeros of x's shape */
static int narrow_backward_kernel(mg_op_call *c, mg_dtensor *const *in, mg_dtensor *out) {
    mg_backend *be = mg_backend_of(out->local);
    be->iface->fill(be->context, out->local, 0.0f);
    copy_along(in[0]->local, 0, out->local, c->args.shape[0], c->args.i[0], in[0]->local->shape);
    return MG_OK;
}

static const mg_op_def narrow_backward_def = {
    .name = "narrow_backward", .arity = 1, .required = 1, .shape = preset_shape,
    .rule = narrow_rule, .kernel = narrow_backward_kernel, .cost = mg_ops_copy_cost,
};

static int narrow_vjp(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    const mg_spec *x = &n->inputs[0]->spec;
    mg_op_call c = {.n = 1, .x = {g}, .args = n->args, .out_ndim = x->ndim};
    memcpy(c.out_shape, x->shape, sizeof c.out_shape);
    NEED(out[0] = mg_op_run(&narrow_backward_def, &c));
    return MG_OK;
}

/* g added into grad (the narrowed tensor's gradient) in place, at grad's
 * placements, where they keep the dim whole (no mesh dim of size > 1
 * shards it); 1 where they do not. */
static int narrow_vjp_add(mg_node *n, mg_dtensor *g, mg_dtensor *grad) {
    int dim = n->args.i[0];
    if (mg_ops_shard_mask(&grad->spec, dim)) return 1;
    mg_spec at_grad = grad->spec; /* g's shape, grad's placements */
    at_grad.shape[dim] = g->spec.shape[dim];
    mg_dtensor *gg = mg_op_redistribute(g, &at_grad);
    NEED(gg);
    int64_t zero[MG_MAX_DIMS] = {0}, at[MG_MAX_DIMS] = {0};
    at[dim] = n->args.shape[0]; /* dim is whole on every rank */
    if (gg->local->numel == 0) return MG_OK;
    mg_backend *be = mg_backend_of(grad->local);
    be->iface->add_block(be->context, gg->local, zero, grad->local, at, gg->local->shape);
    return MG_OK;
}

static const mg_op_def narrow_def = {
    .name = "narrow", .arity = 1, .required = 1, .required_names = "input",
    .shape = preset_shape, .rule = narrow_rule, .kernel = narrow_kernel, .cost = mg_ops_copy_cost,
    .vjp = narrow_vjp, .vjp_fresh = true, .vjp_add = narrow_vjp_add,
};

mg_dtensor *mg_narrow(const mg_dtensor *x, int dim, int64_t start, int64_t length) {
    const char *who = "mg_narrow";
    if (!narrow_dim(who, x, &dim)) return NULL;
    int64_t size = x->spec.shape[dim];
    if (start < 0 || length < 0 || start > size - length)
        return mg_error_null(
            MG_EINVAL, "%s: [%lld, %lld + %lld) is not inside dim %d of size %lld (global)", who,
            (long long)start, (long long)start, (long long)length, dim, (long long)size);
    mg_op_call c = {.who = who, .n = 1, .x = {x}, .out_ndim = x->spec.ndim};
    memcpy(c.out_shape, x->spec.shape, sizeof c.out_shape);
    c.out_shape[dim] = length;
    c.args.i[0] = dim;
    c.args.ni = 1;
    c.args.shape[0] = start; /* where the gradient goes back */
    return mg_op_run(&narrow_def, &c);
}

static int cat_kernel(mg_op_call *c, mg_dtensor *const *in, mg_dtensor *out) {
    int64_t at = 0;
    int dim = c->args.i[0];
    for (int i = 0; i < c->n; i++) {
        copy_along(in[i]->local, 0, out->local, at, dim, in[i]->local->shape);
        at += in[i]->local->shape[dim];
    }
    return MG_OK;
}

static int cat_vjp(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    int dim = n->args.i[0];
    int64_t at = 0;
    for (int i = 0; i < n->n_inputs; i++) {
        int64_t len = n->inputs[i]->spec.shape[dim];
        if (mg_vjp_wants(n, i)) NEED(out[i] = mg_narrow(g, dim, at, len));
        at += len;
    }
    return MG_OK;
}

static const mg_op_def cat_def = {
    .name = "cat", .arity = MG_OP_MAX_INPUTS, .required = 1, .required_names = "input",
    .shape = preset_shape, .rule = narrow_rule, .kernel = cat_kernel, .cost = mg_ops_copy_cost,
    .vjp = cat_vjp,
};

/* one node: n <= MG_OP_MAX_INPUTS inputs */
static mg_dtensor *cat_node(const char *who, int n, const mg_dtensor *const *xs, int dim) {
    const mg_spec *first = &xs[0]->spec;
    mg_op_call c = {.who = who, .n = n, .out_ndim = first->ndim};
    memcpy(c.out_shape, first->shape, sizeof c.out_shape);
    c.out_shape[dim] = 0;
    for (int i = 0; i < n; i++) {
        c.x[i] = xs[i];
        c.out_shape[dim] += xs[i]->spec.shape[dim];
    }
    c.args.i[0] = dim;
    c.args.ni = 1;
    return mg_op_run(&cat_def, &c);
}

mg_dtensor *mg_cat(int n, const mg_dtensor *const *xs, int dim) {
    const char *who = "mg_cat";
    if (n < 1 || !xs) return mg_error_null(MG_EINVAL, "%s: no tensors to join (n = %d)", who, n);
    for (int i = 0; i < n; i++)
        if (!xs[i]) return mg_error_null(MG_EINVAL, "%s: tensor %d is NULL", who, i);
    if (mg_ops_check_inputs(who, n, xs) != MG_OK || !narrow_dim(who, xs[0], &dim)) return NULL;
    const mg_spec *a = &xs[0]->spec;
    for (int i = 1; i < n; i++) {
        const mg_spec *b = &xs[i]->spec;
        bool fits = b->ndim == a->ndim;
        for (int d = 0; fits && d < a->ndim; d++) fits = d == dim || a->shape[d] == b->shape[d];
        if (!fits) {
            char s0[96], s1[96];
            return mg_error_null(MG_ESHAPE,
                                 "%s: tensor %d %s does not fit tensor 0 %s: the sizes must be "
                                 "equal except on dim %d",
                                 who, i, mg_shape_format(s1, sizeof s1, b->ndim, b->shape),
                                 mg_shape_format(s0, sizeof s0, a->ndim, a->shape), dim);
        }
    }
    if (n <= MG_OP_MAX_INPUTS) return cat_node(who, n, xs, dim);
    /* a tree: groups of MG_OP_MAX_INPUTS joined, then the groups */
    int ng = (n + MG_OP_MAX_INPUTS - 1) / MG_OP_MAX_INPUTS;
    mg_dtensor **parts = mg_arena_alloc(mg_step_arena(), (size_t)ng * sizeof *parts);
    if (!parts) return NULL;
    for (int g = 0; g < ng; g++) {
        int first = g * MG_OP_MAX_INPUTS,
            k = n - first < MG_OP_MAX_INPUTS ? n - first : MG_OP_MAX_INPUTS;
        if (!(parts[g] = cat_node(who, k, xs + first, dim))) return NULL;
    }
    return mg_cat(ng, (const mg_dtensor *const *)parts, dim);
}
