/* vjp.c: one vector-Jacobian product per op, written with the sharded ops
 * themselves (run with grad off), so each gradient is placed by the same rules
 * as a forward value: a batch-sharded input and a replicated weight give a
 * Partial weight gradient, a Shard(0) weight gathered for use gets its gradient
 * reduce-scattered by the mirror of that redistribute, and so on.
 *
 * Exports mg_vjp(node, grad_out, grads_in), mg_vjp_rows, mg_vjp_grad_in;
 * mg_vjp: grads_in[i] receives the gradient of
 * node->inputs[i] (global shape of that input, any placement), or NULL when that
 * input wants none. The table is kept in step with the op enum by a
 * static_assert. */
#include "autograd/vjp.h"

#include <assert.h>

#include "dist/mesh.h"
#include "ops/ops.h"
#include "status.h"

typedef int (*vjp_fn)(mg_node *, mg_dtensor *, mg_dtensor **);

static bool wants(const mg_node *n, int i) {
    return (n->want_mask >> i & 1u) && n->inputs[i] && mg_tape_wants_grad(n->inputs[i]);
}

#define NEED(p)                                                   \
    do {                                                          \
        if (!(p)) return mg_last_code() ? mg_last_code() : MG_ENOMEM; \
    } while (0)

static int vjp_redistribute(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    /* the mirror: back to the source placements, a Partial source taking a
     * Replicate gradient (each addend's gradient is the whole gradient) */
    mg_spec target = n->inputs[0]->spec;
    for (int m = 0; m < target.mesh->ndim; m++)
        if (n->placements[m].kind == MG_PLACE_PARTIAL) target.p[m] = MG_REPLICATE;
        else target.p[m] = n->placements[m];
    NEED(out[0] = mg_op_redistribute(g, &target));
    return MG_OK;
}

static int vjp_permute(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    int inv[MG_MAX_DIMS];
    for (int i = 0; i < n->n_iargs; i++) inv[n->iargs[i]] = i;
    NEED(out[0] = mg_permute(g, inv));
    return MG_OK;
}

static int vjp_expand(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    NEED(out[0] = mg_op_sum_to(g, n->ndim, n->shape));
    return MG_OK;
}

static int vjp_reshape(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    NEED(out[0] = mg_reshape(g, n->ndim, n->shape));
    return MG_OK;
}

static int vjp_linear(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    mg_dtensor *x = n->inputs[0], *w = n->inputs[1];
    if (wants(n, 0)) NEED(out[0] = mg_op_linear_input_grad(g, w));
    if (wants(n, 1)) NEED(out[1] = mg_op_linear_weight_grad(g, x));
    if (n->inputs[2] && wants(n, 2)) {
        int dims[MG_MAX_DIMS], nb = g->spec.ndim - 1;
        for (int d = 0; d < nb; d++) dims[d] = d;
        NEED(out[2] = nb ? mg_op_sum_scaled(g, nb, dims, 0, 1.0f, "linear bias grad") : g);
    }
    return MG_OK;
}

static int vjp_matmul(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    if (wants(n, 0)) NEED(out[0] = mg_op_matmul_grad_a(g, n->inputs[1]));
    if (wants(n, 1)) NEED(out[1] = mg_op_matmul_grad_b(n->inputs[0], g, n->ndim));
    return MG_OK;
}

static int vjp_sum(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    int64_t kept[MG_MAX_DIMS];
    for (int d = 0; d < n->ndim; d++) kept[d] = n->iargs[d] ? 1 : n->shape[d];
    mg_dtensor *k = mg_reshape(g, n->ndim, kept);
    NEED(k);
    mg_dtensor *e = mg_expand(k, n->ndim, n->shape);
    NEED(e);
    if (n->farg != 1.0f) NEED(e = mg_scale(e, n->farg));
    out[0] = e;
    return MG_OK;
}

static int vjp_add_sub(mg_node *n, mg_dtensor *g, mg_dtensor **out, float sign_b) {
    const mg_spec *a = &n->inputs[0]->spec, *b = &n->inputs[1]->spec;
    if (wants(n, 0)) NEED(out[0] = mg_op_sum_to(g, a->ndim, a->shape));
    if (wants(n, 1)) {
        mg_dtensor *gb = mg_op_sum_to(g, b->ndim, b->shape);
        NEED(gb);
        if (sign_b != 1.0f) NEED(gb = mg_scale(gb, sign_b));
        out[1] = gb;
    }
    return MG_OK;
}
static int vjp_add(mg_node *n, mg_dtensor *g, mg_dtensor **out) { return vjp_add_sub(n, g, out, 1.0f); }
static int vjp_sub(mg_node *n, mg_dtensor *g, mg_dtensor **out) { return vjp_add_sub(n, g, out, -1.0f); }

static int vjp_mul(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    mg_dtensor *a = n->inputs[0], *b = n->inputs[1];
    if (wants(n, 0)) {
        mg_dtensor *t = mg_mul(g, b);
        NEED(t);
        NEED(out[0] = mg_op_sum_to(t, a->spec.ndim, a->spec.shape));
    }
    if (wants(n, 1)) {
        mg_dtensor *t = mg_mul(g, a);
        NEED(t);
        NEED(out[1] = mg_op_sum_to(t, b->spec.ndim, b->spec.shape));
    }
    return MG_OK;
}

static int vjp_scale(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    NEED(out[0] = mg_scale(g, n->farg));
    return MG_OK;
}

static int vjp_relu(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    NEED(out[0] = mg_op_relu_backward(g, n->inputs[0]));
    return MG_OK;
}

static int vjp_gelu(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    NEED(out[0] = mg_op_gelu_backward(g, n->inputs[0]));
    return MG_OK;
}

static int vjp_cross_entropy(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    if (wants(n, 0))
        NEED(out[0] = mg_op_cross_entropy_backward(n->inputs[0], n->inputs[1], n->output, g));
    return MG_OK; /* labels are data: no gradient */
}

static int vjp_mse(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    const mg_spec *p = &n->inputs[0]->spec;
    int64_t count = mg_shape_numel(p->ndim, p->shape);
    mg_dtensor *d = mg_sub(n->inputs[0], n->inputs[1]);
    NEED(d);
    NEED(d = mg_scale(d, count ? 2.0f / (float)count : 0.0f));
    NEED(d = mg_mul(d, g));
    if (wants(n, 0)) out[0] = d;
    if (wants(n, 1)) NEED(out[1] = mg_scale(d, -1.0f));
    return MG_OK;
}

static int vjp_softmax(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    NEED(out[0] = mg_op_softmax_backward(n->output, g, n->op == MG_OP_LOG_SOFTMAX));
    return MG_OK;
}

static int vjp_layer_norm(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    bool want[3] = {wants(n, 0), wants(n, 1), wants(n, 2)};
    return mg_op_layer_norm_backward(n->inputs[0], n->inputs[1], n->inputs[2], n->output, g, want,
                                     out);
}

static int vjp_embedding(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    if (wants(n, 1))
        NEED(out[1] = mg_op_embedding_backward(n->inputs[0], n->inputs[1], n->output, g));
    return MG_OK; /* ids are data: no gradient */
}

static int vjp_attention(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    mg_dtensor *grads[3];
    int rc = mg_op_attention_backward(n->inputs[0], n->inputs[1], n->inputs[2], n->output, g,
                                      n->iargs[0] != 0, grads);
    for (int i = 0; i < 3 && rc == MG_OK; i++)
        if (wants(n, i)) out[i] = grads[i];
    return rc;
}

static int vjp_narrow(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    const mg_spec *x = &n->inputs[0]->spec;
    NEED(out[0] = mg_op_narrow_backward(g, x->ndim, x->shape, n->iargs[0], n->shape[0]));
    return MG_OK;
}

static int vjp_cat(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    int dim = n->iargs[0];
    int64_t at = 0;
    for (int i = 0; i < n->n_inputs; i++) {
        int64_t len = n->inputs[i]->spec.shape[dim];
        if (wants(n, i)) NEED(out[i] = mg_narrow(g, dim, at, len));
        at += len;
    }
    return MG_OK;
}

static const vjp_fn vjp_table[MG_OP_COUNT] = {
    [MG_OP_REDISTRIBUTE] = vjp_redistribute,
    [MG_OP_PERMUTE] = vjp_permute,
    [MG_OP_EXPAND] = vjp_expand,
    [MG_OP_RESHAPE] = vjp_reshape,
    [MG_OP_LINEAR] = vjp_linear,
    [MG_OP_MATMUL] = vjp_matmul,
    [MG_OP_SUM] = vjp_sum,
    [MG_OP_ADD] = vjp_add,
    [MG_OP_SUB] = vjp_sub,
    [MG_OP_MUL] = vjp_mul,
    [MG_OP_SCALE] = vjp_scale,
    [MG_OP_RELU] = vjp_relu,
    [MG_OP_GELU] = vjp_gelu,
    [MG_OP_CROSS_ENTROPY] = vjp_cross_entropy,
    [MG_OP_MSE] = vjp_mse,
    [MG_OP_SOFTMAX] = vjp_softmax,
    [MG_OP_LOG_SOFTMAX] = vjp_softmax,
    [MG_OP_LAYER_NORM] = vjp_layer_norm,
    [MG_OP_EMBEDDING] = vjp_embedding,
    [MG_OP_ATTENTION] = vjp_attention,
    [MG_OP_NARROW] = vjp_narrow,
    [MG_OP_CAT] = vjp_cat,
};
static_assert(MG_OP_COUNT == 22, "mg_op changed: give the new op its VJP in vjp_table");

/* ---- gradients as factors: grad = sum over rows of a^T b ---- */

typedef bool (*rows_fn)(const mg_node *, mg_dtensor *, int, const mg_dtensor **, const mg_dtensor **);

static bool rows_linear(const mg_node *n, mg_dtensor *g, int i, const mg_dtensor **a,
                        const mg_dtensor **b) {
    if (i != 1) return false;
    *a = g;            /* dy (..., N) */
    *b = n->inputs[0]; /* x (..., K): dW (N, K) = dy^T x over the rows */
    return true;
}

static const rows_fn rows_table[MG_OP_COUNT] = {
    [MG_OP_LINEAR] = rows_linear,
};

bool mg_vjp_rows(const mg_node *node, mg_dtensor *grad_out, int i, const mg_dtensor **a,
                 const mg_dtensor **b) {
    rows_fn f = node->op >= 0 && node->op < MG_OP_COUNT ? rows_table[node->op] : NULL;
    return f && f(node, grad_out, i, a, b);
}

int mg_vjp(mg_node *node, mg_dtensor *grad_out, unsigned mask, mg_dtensor **grads_in) {
    for (int i = 0; i < MG_NODE_MAX_INPUTS; i++) grads_in[i] = NULL;
    node->want_mask = mask;
    if (node->op < 0 || node->op >= MG_OP_COUNT || !vjp_table[node->op])
        return mg_error(MG_ESTATE, "backward: no VJP for op %d", node->op);
    return vjp_table[node->op](node, grad_out, grads_in);
}

mg_dtensor *mg_vjp_grad_in(const mg_node *node, mg_dtensor *g) {
    switch (node->op) {
    case MG_OP_LAYER_NORM:
    case MG_OP_SOFTMAX:
    case MG_OP_LOG_SOFTMAX:
    case MG_OP_EMBEDDING:
    case MG_OP_ATTENTION:
    case MG_OP_CROSS_ENTROPY: return mg_ops_grad_at(g, &node->output->spec);
    default: return g;
    }
}
