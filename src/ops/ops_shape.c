/* ops_shape.c: layout ops on distributed tensors: mg_permute, mg_transpose,
 * mg_expand, mg_reshape, mg_view, mg_narrow, mg_cat (and the gradient of a
 * narrow). Every size argument is GLOBAL; the local
 * sizes the kernel gets come from the output spec (mg_spec_local), never from
 * an input's local shape. */
#include <string.h>

#include "ops/tape.h"
#include "backend/backend.h"
#include "dist/mesh.h"
#include "ops/ops.h"
#include "status.h"

mg_dtensor *mg_permute(const mg_dtensor *x, const int *perm) {
    const char *who = "mg_permute";
    if (mg_ops_check_inputs(who, 1, &x) != MG_OK) return NULL;
    int nd = x->spec.ndim;
    if (nd > 0 && !perm) return mg_error_null(MG_EINVAL, "%s: perm is NULL", who);
    int p[MG_MAX_DIMS];
    bool seen[MG_MAX_DIMS] = {false};
    for (int i = 0; i < nd; i++) {
        p[i] = mg_ops_dim(who, perm[i], nd);
        if (p[i] < 0) return NULL;
        if (seen[p[i]])
            return mg_error_null(MG_EINVAL, "%s: dim %d appears twice in the permutation", who,
                                 p[i]);
        seen[p[i]] = true;
    }
    int64_t out_shape[MG_MAX_DIMS];
    for (int i = 0; i < nd; i++) out_shape[i] = x->spec.shape[p[i]];

    mg_candidates c;
    mg_rules_permute(&c, nd, p);
    mg_dtensor *xin;
    mg_dtensor *y = mg_ops_begin(who, &c, 1, &x, nd, out_shape, &xin);
    if (!y) return NULL;
    mg_backend *be = mg_backend_of(xin->local);
    be->iface->permute(be->context, xin->local, p, y->local);
    mg_node *node = mg_ops_record(MG_OP_PERMUTE, 1, &xin, y);
    if (node) {
        node->n_iargs = nd;
        for (int i = 0; i < nd; i++) node->iargs[i] = p[i];
    }
    return y;
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

mg_dtensor *mg_expand(const mg_dtensor *x, int ndim, const int64_t *global_shape) {
    const char *who = "mg_expand";
    if (mg_ops_check_inputs(who, 1, &x) != MG_OK) return NULL;
    if (mg_shape_check(ndim, global_shape, who) != MG_OK) {
        /* -1 means "keep this dim": allowed, checked below */
        bool only_minus_one = ndim >= 0 && ndim <= MG_MAX_DIMS && global_shape;
        for (int i = 0; only_minus_one && i < ndim; i++)
            if (global_shape[i] < -1) only_minus_one = false;
        if (!only_minus_one) return NULL;
    }
    const mg_spec *xs = &x->spec;
    char a[96], b[96];
    if (ndim < xs->ndim)
        return mg_error_null(MG_ESHAPE,
                             "%s: cannot expand %s to %s: the target has fewer dims than the tensor",
                             who, mg_shape_format(a, sizeof a, xs->ndim, xs->shape),
                             mg_shape_format(b, sizeof b, ndim, global_shape));
    int lead = ndim - xs->ndim;
    int64_t out_shape[MG_MAX_DIMS];
    for (int i = 0; i < ndim; i++) {
        int64_t want = global_shape[i];
        if (i < lead) {
            if (want < 0)
                return mg_error_null(MG_ESHAPE, "%s: -1 is not allowed for the new leading dim %d",
                                     who, i);
            out_shape[i] = want;
            continue;
        }
        int64_t have = xs->shape[i - lead];
        if (want == -1) want = have;
        if (have != want && have != 1)
            return mg_error_null(
                MG_ESHAPE,
                "%s: cannot expand global shape %s to %s: dim %d has size %lld, which is neither "
                "%lld nor 1 (sizes are global, not per-rank)",
                who, mg_shape_format(a, sizeof a, xs->ndim, xs->shape),
                mg_shape_format(b, sizeof b, ndim, global_shape), i, (long long)have,
                (long long)want);
        out_shape[i] = want;
    }
    mg_candidates c;
    mg_rules_expand(&c, xs->ndim, xs->shape, ndim, out_shape);
    mg_dtensor *xin;
    mg_dtensor *y = mg_ops_begin(who, &c, 1, &x, ndim, out_shape, &xin);
    if (!y) return NULL;
    /* local kernel: broadcast the local input (aligned right, leading 1s) into the
     * local output whose sizes come from the output spec */
    int64_t aligned[MG_MAX_DIMS];
    for (int i = 0; i < ndim; i++) aligned[i] = i < lead ? 1 : xin->local->shape[i - lead];
    mg_tensor *xv = mg_tensor_view(mg_step_arena(), xin->local, ndim, aligned);
    int64_t ones[MG_MAX_DIMS];
    for (int i = 0; i < ndim; i++) ones[i] = 1;
    mg_tensor *zero = mg_tensor_zeros(mg_step_arena(), ndim, ones);
    if (!xv || !zero) return NULL;
    mg_backend *be = mg_backend_of(y->local);
    be->iface->binary(be->context, MG_BINARY_ADD, xv, zero, y->local);
    mg_node *node = mg_ops_record(MG_OP_EXPAND, 1, &xin, y);
    if (node) {
        node->ndim = xs->ndim;
        memcpy(node->shape, xs->shape, sizeof node->shape);
    }
    return y;
}

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
    mg_node *node = mg_ops_record(MG_OP_RESHAPE, 1, &xin, y);
    if (node) {
        node->ndim = xs->ndim;
        memcpy(node->shape, xs->shape, sizeof node->shape);
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
 * placement. A tape node holds at most MG_NODE_MAX_INPUTS inputs, so a cat of
 * more is a tree of cats of that many. */

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

mg_dtensor *mg_narrow(const mg_dtensor *x, int dim, int64_t start, int64_t length) {
    const char *who = "mg_narrow";
    if (!narrow_dim(who, x, &dim)) return NULL;
    int64_t size = x->spec.shape[dim];
    if (start < 0 || length < 0 || start > size - length)
        return mg_error_null(
            MG_EINVAL, "%s: [%lld, %lld + %lld) is not inside dim %d of size %lld (global)", who,
            (long long)start, (long long)start, (long long)length, dim, (long long)size);
    int nd = x->spec.ndim;
    int64_t out_shape[MG_MAX_DIMS];
    memcpy(out_shape, x->spec.shape, sizeof out_shape);
    out_shape[dim] = length;
    mg_candidates c;
    mg_rules_narrow(&c, 1, nd, dim);
    mg_dtensor *in;
    mg_dtensor *y = mg_ops_begin(who, &c, 1, &x, nd, out_shape, &in);
    if (!y) return NULL;
    copy_along(in->local, start, y->local, 0, dim, y->local->shape);
    mg_node *node = mg_ops_record(MG_OP_NARROW, 1, &in, y);
    if (node) {
        node->iargs[0] = dim;
        node->n_iargs = 1;
        node->shape[0] = start; /* where the gradient goes back */
    }
    return y;
}

mg_dtensor *mg_op_narrow_backward(const mg_dtensor *g, int ndim, const int64_t *shape, int dim,
                                  int64_t start) {
    mg_candidates c;
    mg_rules_narrow(&c, 1, ndim, dim);
    mg_dtensor *in;
    mg_dtensor *y = mg_ops_begin("narrow_backward", &c, 1, &g, ndim, shape, &in);
    if (!y) return NULL;
    mg_backend *be = mg_backend_of(y->local);
    be->iface->fill(be->context, y->local, 0.0f);
    copy_along(in->local, 0, y->local, start, dim, in->local->shape);
    return y;
}

int mg_op_narrow_backward_add(const mg_dtensor *g, mg_dtensor *grad, int dim, int64_t start) {
    if (mg_ops_shard_mask(&grad->spec, dim))
        return mg_error(MG_EINVAL, "narrow backward: the gradient shards dim %d; add a whole one",
                        dim);
    mg_spec at_grad = grad->spec; /* g's shape, grad's placements */
    at_grad.shape[dim] = g->spec.shape[dim];
    mg_dtensor *gg = mg_op_redistribute(g, &at_grad);
    if (!gg) return mg_last_code();
    int64_t zero[MG_MAX_DIMS] = {0}, at[MG_MAX_DIMS] = {0};
    at[dim] = start; /* dim is whole on every rank */
    if (gg->local->numel == 0) return MG_OK;
    mg_backend *be = mg_backend_of(grad->local);
    be->iface->add_block(be->context, gg->local, zero, grad->local, at, gg->local->shape);
    return MG_OK;
}

/* one node: n <= MG_NODE_MAX_INPUTS inputs */
static mg_dtensor *cat_node(const char *who, int n, const mg_dtensor *const *xs, int dim) {
    const mg_spec *first = &xs[0]->spec;
    int nd = first->ndim;
    int64_t out_shape[MG_MAX_DIMS];
    memcpy(out_shape, first->shape, sizeof out_shape);
    out_shape[dim] = 0;
    for (int i = 0; i < n; i++) out_shape[dim] += xs[i]->spec.shape[dim];
    mg_candidates c;
    mg_rules_narrow(&c, n, nd, dim);
    mg_dtensor *in[MG_NODE_MAX_INPUTS];
    mg_dtensor *y = mg_ops_begin(who, &c, n, xs, nd, out_shape, in);
    if (!y) return NULL;
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        copy_along(in[i]->local, 0, y->local, at, dim, in[i]->local->shape);
        at += in[i]->local->shape[dim];
    }
    mg_node *node = mg_ops_record(MG_OP_CAT, n, in, y);
    if (node) {
        node->iargs[0] = dim;
        node->n_iargs = 1;
    }
    return y;
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
    if (n <= MG_NODE_MAX_INPUTS) return cat_node(who, n, xs, dim);
    /* a tree: groups of MG_NODE_MAX_INPUTS joined, then the groups */
    int ng = (n + MG_NODE_MAX_INPUTS - 1) / MG_NODE_MAX_INPUTS;
    mg_dtensor **parts = mg_arena_alloc(mg_step_arena(), (size_t)ng * sizeof *parts);
    if (!parts) return NULL;
    for (int g = 0; g < ng; g++) {
        int first = g * MG_NODE_MAX_INPUTS,
            k = n - first < MG_NODE_MAX_INPUTS ? n - first : MG_NODE_MAX_INPUTS;
        if (!(parts[g] = cat_node(who, k, xs + first, dim))) return NULL;
    }
    return mg_cat(ng, (const mg_dtensor *const *)parts, dim);
}
