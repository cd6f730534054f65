/* ops_vocab.c: the ops over a vocabulary, on distributed tensors:
 * mg_embedding (rows of a table picked by ids) and mg_cross_entropy (logits
 * (..., V) against labels (...)), with their gradients.
 *
 * Both work on a table or logits sharded on the vocabulary without gathering it
 * (Megatron's vocab-parallel embedding and cross-entropy):
 *   embedding      each rank looks up the ids in its rows, zeros for the
 *                  others: the output is Partial (mg_rules_embedding); the
 *                  table's gradient is scattered into the rank's own rows.
 *   cross-entropy  each rank takes its classes' row max (all-reduce max), then
 *                  their sum of exp(x - max) and the label's logit where it
 *                  holds it (one all-reduce of 2N floats): O(N) floats move,
 *                  never the (N, V) logits. The rows' log-sum-exp is kept on the
 *                  node (node->saved) for backward.
 * Logits not sharded on V take the whole-row kernels.
 * Records (op_def.h): embedding, cross_entropy; their VJPs read the gradient
 * at the output's placements. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "context.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "exact.h"
#include "ops/ops.h"
#include "ops/ops_state.h"
#include "status.h"

static mg_backend *backend(const mg_tensor *t) { return mg_backend_of(t); }

/* global offset of this rank's block along dim d */
static int64_t offset_of(const mg_spec *s, int d) {
    int64_t shape[MG_MAX_DIMS], off[MG_MAX_DIMS];
    mg_spec_local(s, NULL, shape, off);
    return off[d];
}

/* The mesh dims on which t is sharded (on any dim). */
static unsigned sharded_dims(const mg_spec *s) {
    unsigned mask = 0;
    for (int d = 0; d < s->ndim; d++) mask |= mg_ops_shard_mask(s, d);
    return mask;
}

/* ---- embedding ------------------------------------------------------------------ */

static int embedding_shape(mg_op_call *c) {
    const mg_spec *I = &c->x[0]->spec, *T = &c->x[1]->spec;
    if (T->ndim != 2 || I->ndim + 1 > MG_MAX_DIMS) {
        char want[96];
        snprintf(want, sizeof want, "want a table (V, C) and ids of at most %d dims",
                 MG_MAX_DIMS - 1);
        mg_ops_shape_error(c->who, "ids", I, "table", T, want);
        return mg_last_code();
    }
    memcpy(c->out_shape, I->shape, sizeof(int64_t) * (size_t)I->ndim);
    c->out_shape[I->ndim] = T->shape[1];
    c->out_ndim = I->ndim + 1;
    return MG_OK;
}

static void embedding_rule(const mg_op_call *c, mg_candidates *cands) {
    mg_rules_embedding(cands, c->x[0]->spec.ndim);
}

static int embedding_kernel(mg_op_call *c, mg_dtensor *const *in, mg_dtensor *out) {
    const mg_spec *I = &c->x[0]->spec, *T = &c->x[1]->spec;
    mg_backend *be = backend(out->local);
    int64_t n = in[0]->local->numel, rows[2] = {n, out->local->shape[I->ndim]};
    mg_tensor *flat_ids = mg_tensor_view(mg_step_arena(), in[0]->local, 1, &n);
    mg_tensor *flat_out = mg_tensor_view(mg_step_arena(), out->local, 2, rows);
    if (!flat_ids || !flat_out) return mg_last_code();
    float bad = (float)be->iface->embedding(be->context, flat_ids, in[1]->local,
                                            offset_of(&in[1]->spec, 0), T->shape[0], flat_out);
    /* ranks holding other ids agree on their validity (replicated ids agree already) */
    int rc = mg_ops_reduce_over(I->mesh, sharded_dims(&in[0]->spec), &bad, 1, MG_REDUCE_MAX);
    if (rc != MG_OK) return rc;
    if (bad > 0)
        return mg_error(MG_EINVAL,
                        "%s: ids must be row indices 0..%lld of the table (integers stored as "
                        "floats); %g ids on some rank are not",
                        c->who, (long long)T->shape[0] - 1, bad);
    return MG_OK;
}

/* dtable: the table's placements, but Replicate where the forward used a
 * Partial table, and Partial where a replicated table met sharded ids */
static int embedding_vjp(mg_node *node, mg_dtensor *g, mg_dtensor **grads) {
    if (!mg_vjp_wants(node, 1)) return MG_OK; /* ids are data: no gradient */
    const mg_dtensor *ids = node->inputs[0], *table = node->inputs[1];
    mg_dtensor *dy = mg_ops_grad_at(g, &node->output->spec);
    NEED(dy);
    mg_spec s = table->spec;
    for (int m = 0; m < s.mesh->ndim; m++) {
        if (s.p[m].kind == MG_PLACE_PARTIAL)
            s.p[m] = MG_REPLICATE;
        else if (s.p[m].kind == MG_PLACE_REPLICATE && ids->spec.p[m].kind == MG_PLACE_SHARD)
            s.p[m] = MG_PARTIAL_SUM;
    }
    mg_dtensor *dt = mg_ops_output(&s);
    NEED(dt);
    mg_backend *be = backend(dt->local);
    int64_t n = ids->local->numel, rows[2] = {n, dt->local->shape[1]};
    mg_tensor *flat_ids = mg_tensor_view(mg_step_arena(), ids->local, 1, &n);
    mg_tensor *flat_dy = mg_tensor_view(mg_step_arena(), dy->local, 2, rows);
    NEED(flat_ids && flat_dy);
    be->iface->embedding_backward(be->context, flat_ids, flat_dy, offset_of(&table->spec, 0),
                                  dt->local);
    grads[1] = dt;
    return MG_OK;
}

static void embedding_cost(const mg_op_call *c, mg_dtensor *const *in, const mg_dtensor *out,
                           mg_op_cost *cost) {
    (void)c;
    cost->flops = 0;
    cost->bytes = 4.0 * (double)(in[0]->local->numel + 2 * out->local->numel);
}

static const mg_op_def embedding_def = {
    .name = "embedding", .arity = 2, .required = 2, .required_names = "ids or table",
    .shape = embedding_shape, .rule = embedding_rule, .kernel = embedding_kernel,
    .cost = embedding_cost, .vjp = embedding_vjp, .grad_at_output = true,
};

mg_dtensor *mg_embedding(const mg_dtensor *ids, const mg_dtensor *table) {
    return mg_op_run2(&embedding_def, "mg_embedding", ids, table);
}

/* ---- cross-entropy ---------------------------------------------------------------- */

/* logits (N, Vl) and labels (N) of the local shards */
static int flat_rows(const mg_dtensor *logits, const mg_dtensor *labels, mg_tensor **lg,
                     mg_tensor **lb) {
    int64_t n = labels->local->numel, shape[2] = {n, logits->local->shape[logits->spec.ndim - 1]};
    *lg = mg_tensor_view(mg_step_arena(), logits->local, 2, shape);
    *lb = mg_tensor_view(mg_step_arena(), labels->local, 1, &n);
    return *lg && *lb ? MG_OK : mg_last_code();
}

/* Loss parallel: out = scale * sum over rows of (lse - the label's logit), the
 * rows' statistics summed over the mesh dims in mask that shard the classes.
 * lse (N) goes to *lse_out, for backward. Returns the bad labels (or a
 * negative status). */
static int64_t cross_entropy_sharded(const mg_dtensor *logits, mg_tensor *lg, mg_tensor *lb,
                                     unsigned mask, float scale, mg_dtensor *out,
                                     mg_tensor **lse_out) {
    mg_backend *be = backend(out->local);
    void *ctx = be->context;
    const mg_mesh *mesh = logits->spec.mesh;
    int64_t rows = lb->numel, two = 2 * rows, col[2] = {rows, 1};
    int64_t v = logits->spec.shape[logits->spec.ndim - 1];
    mg_arena *arena = mg_step_arena();
    mg_tensor *max = mg_ops_temp(2, col), *sums = mg_ops_temp(1, &two), *one = NULL;
    mg_tensor *s = sums ? mg_tensor_slice(arena, sums, 0, rows) : NULL;
    mg_tensor *t = sums ? mg_tensor_slice(arena, sums, rows, rows) : NULL;
    mg_tensor *lse = *lse_out = mg_ops_temp(1, &rows);
    if (!max || !s || !t || !lse ||
        !(one = mg_tensor_view(arena, out->local, 1, (int64_t[]){1})))
        return mg_last_code();
    be->iface->reduce_max(ctx, lg, max);
    int rc = mg_ops_reduce_over(mesh, mask, max->data, rows, MG_REDUCE_MAX);
    if (rc != MG_OK) return rc;
    int64_t bad = be->iface->cross_entropy_sums(
        ctx, lg, lb, max, offset_of(&logits->spec, logits->spec.ndim - 1), v, sums);
    if ((rc = mg_ops_reduce_over(mesh, mask, sums->data, two, MG_REDUCE_SUM)) != MG_OK) return rc;
    mg_tensor *mv = mg_tensor_view(arena, max, 1, &rows);
    if (!mv) return mg_last_code();
    be->iface->unary(ctx, MG_UNARY_LOG, s, 0.0f, lse); /* lse = max + log(sum) */
    be->iface->binary(ctx, MG_BINARY_ADD, lse, mv, lse);
    be->iface->binary(ctx, MG_BINARY_SUB, lse, t, s); /* s = lse - target */
    be->iface->reduce_sum(ctx, s, one);
    be->iface->unary(ctx, MG_UNARY_SCALE, out->local, scale, out->local);
    return bad;
}

/* An exact sum summed over the ranks of the mesh dims in mask (integers). */
static int exact_over(const mg_mesh *mesh, unsigned mask, mg_exact *acc) {
    for (int m = 0; m < mesh->ndim; m++) {
        if (!(mask >> m & 1u)) continue;
        int rc = mg_comm_sum_exact(mesh->dim_comm[m], acc);
        if (rc != MG_OK) return rc;
    }
    return MG_OK;
}

/* The deterministic mode's loss: per row the max over every class, the exps'
 * fixed-point sum (integers, added exactly over the class shards), lse = max +
 * log(sum 2^-40); the rows' losses lse - target added exactly (exact.h) over
 * the rows and the ranks that hold others, so the loss has the same bits on
 * every mesh and split. `out` gets it on coordinate 0 of the mesh dims it is
 * Partial over, 0 elsewhere (a Partial all the same); the context keeps the
 * exact sum for the trainer's printed loss; *lse_out (N) serves backward. */
static int64_t cross_entropy_det(const mg_op_call *c, mg_dtensor *const *in, mg_tensor *lg,
                                 mg_tensor *lb, mg_dtensor *out, mg_tensor **lse_out) {
    const mg_spec *L = &in[0]->spec;
    const mg_mesh *mesh = L->mesh;
    mg_backend *be = backend(out->local);
    unsigned classes = mg_ops_shard_mask(L, L->ndim - 1), partial = 0;
    for (int m = 0; m < mesh->ndim; m++)
        if (out->spec.p[m].kind == MG_PLACE_PARTIAL && mesh->shape[m] > 1) partial |= 1u << m;
    int64_t rows = lb->numel, col[2] = {rows, 1}, v = L->shape[L->ndim - 1];
    mg_tensor *max = mg_ops_temp(2, col), *lse = *lse_out = mg_ops_temp(1, &rows);
    int64_t *fixed = malloc((size_t)(rows > 0 ? rows : 1) * sizeof *fixed);
    float *target = malloc((size_t)(rows > 0 ? rows : 1) * sizeof *target);
    int64_t bad = MG_ENOMEM;
    if (!max || !lse || !fixed || !target) {
        if (!mg_last_code()) mg_error(MG_ENOMEM, "%s: out of memory", c->who);
        goto done;
    }
    be->iface->reduce_max(be->context, lg, max);
    int rc = mg_ops_reduce_over(mesh, classes, max->data, rows, MG_REDUCE_MAX);
    if (rc != MG_OK) {
        bad = rc;
        goto done;
    }
    bad = be->iface->cross_entropy_fixed(be->context, lg, lb, max,
                                         offset_of(L, L->ndim - 1), v, fixed, target);
    for (int m = 0; m < mesh->ndim && bad >= 0; m++) {
        if (!(classes >> m & 1u)) continue;
        if ((rc = mg_comm_sum_i64(mesh->dim_comm[m], fixed, rows)) != MG_OK ||
            (rc = mg_comm_all_reduce(mesh->dim_comm[m], target, rows, MG_REDUCE_SUM)) != MG_OK)
            bad = rc;
    }
    if (bad < 0) goto done;
    mg_exact acc;
    mg_exact_zero(&acc);
    for (int64_t r = 0; r < rows; r++) {
        float l = (float)((double)max->data[r] + log(ldexp((double)fixed[r], -MG_CE_FIXED_BITS)));
        lse->data[r] = l;
        mg_exact_add(&acc, l - target[r]);
    }
    if ((rc = exact_over(mesh, partial, &acc)) != MG_OK) {
        bad = rc;
        goto done;
    }
    mg_ops_state *ctx = mg_ops();
    mg_exact keep = acc;
    mg_exact_merge(&ctx->det_loss, &keep);
    int64_t n = mg_shape_numel(c->x[1]->spec.ndim, c->x[1]->spec.shape);
    ctx->det_loss_rows += n;
    bool first = true;
    for (int m = 0; m < mesh->ndim; m++)
        if (partial >> m & 1u) first &= mesh->coord[m] == 0;
    out->local->data[0] = first && n > 0 ? (float)(mg_exact_value(&acc) / (double)n) : 0.0f;
done:
    free(fixed);
    free(target);
    return bad;
}

static int cross_entropy_shape(mg_op_call *c) {
    const mg_spec *L = &c->x[0]->spec, *Y = &c->x[1]->spec;
    if (L->ndim < 1 || Y->ndim != L->ndim - 1 ||
        !mg_shape_equal(Y->ndim, Y->shape, Y->ndim, L->shape)) {
        mg_ops_shape_error(c->who, "logits", L, "labels", Y,
                           "want logits (..., V) and labels (...), e.g. (B, C) and (B)");
        return mg_last_code();
    }
    c->out_ndim = 0;
    return MG_OK;
}

static void cross_entropy_rule(const mg_op_call *c, mg_candidates *cands) {
    mg_rules_cross_entropy(cands, c->x[0]->spec.ndim);
}

static int cross_entropy_kernel(mg_op_call *c, mg_dtensor *const *in, mg_dtensor *out) {
    const mg_spec *L = &c->x[0]->spec, *Y = &c->x[1]->spec;
    mg_tensor *lg, *lb;
    int rc = flat_rows(in[0], in[1], &lg, &lb);
    if (rc != MG_OK) return rc;
    int64_t n = mg_shape_numel(Y->ndim, Y->shape), v = L->shape[L->ndim - 1];
    mg_backend *be = backend(out->local);
    float scale = n > 0 ? 1.0f / (float)n : 0.0f;
    unsigned mask = mg_ops_shard_mask(&in[0]->spec, L->ndim - 1);
    /* the meta backend (plan --estimate) counts the ordinary way: it holds no data */
    bool det = mg_get_deterministic() && !mg_tensor_is_meta(in[0]->local);
    int64_t bad = det ? cross_entropy_det(c, in, lg, lb, out, &c->saved)
                  : mask ? cross_entropy_sharded(in[0], lg, lb, mask, scale, out, &c->saved)
                       : be->iface->cross_entropy(be->context, lg, lb, scale, out->local);
    if (bad < 0) return (int)bad;
    /* labels are local: agree on their validity so no rank goes on alone */
    float bad_f = (float)bad;
    if ((rc = mg_comm_all_reduce(L->mesh->world, &bad_f, 1, MG_REDUCE_MAX)) != MG_OK) return rc;
    if (bad_f > 0)
        return mg_error(MG_EINVAL,
                        "%s: labels must be class indices in 0..%lld; %g rows on some rank are "
                        "outside",
                        c->who, (long long)v - 1, bad_f);
    return MG_OK;
}

/* dlogits = dloss / N * (softmax(logits) - onehot(labels)) */
static int cross_entropy_vjp(mg_node *node, mg_dtensor *g, mg_dtensor **grads) {
    if (!mg_vjp_wants(node, 0)) return MG_OK; /* labels are data: no gradient */
    const mg_dtensor *logits = node->inputs[0], *labels = node->inputs[1];
    /* the logits may be a parameter copy given back since the forward */
    int rc = mg_ops_hold(1, &logits);
    if (rc != MG_OK) return rc;
    mg_dtensor *dl = mg_ops_grad_at(g, &node->output->spec), *dx = mg_ops_output(&logits->spec);
    mg_tensor *lg, *lb, *dflat;
    NEED(dl && dx);
    if ((rc = flat_rows(logits, labels, &lg, &lb)) != MG_OK) return rc;
    NEED(dflat = mg_tensor_view(mg_step_arena(), dx->local, 2, lg->shape));
    float gv = 0;
    mg_backend *be = backend(dx->local);
    be->iface->to_host(be->context, &gv, dl->local->data, 1);
    int nd = logits->spec.ndim;
    int64_t n = mg_shape_numel(nd - 1, logits->spec.shape), v = logits->spec.shape[nd - 1];
    /* the rows' lse is kept where the classes are sharded, and always in the
     * deterministic mode (one formula on every mesh) */
    bool sharded = mg_ops_shard_mask(&logits->spec, nd - 1) != 0 || node->saved;
    be->iface->cross_entropy_backward(be->context, lg, lb, sharded ? node->saved : NULL,
                                      sharded ? offset_of(&logits->spec, nd - 1) : 0, v,
                                      n > 0 ? gv / (float)n : 0.0f, dflat);
    grads[0] = dx;
    return MG_OK;
}

static void cross_entropy_cost(const mg_op_call *c, mg_dtensor *const *in, const mg_dtensor *out,
                               mg_op_cost *cost) {
    (void)c, (void)out;
    double n = (double)in[0]->local->numel;
    cost->flops = 4 * n; /* max, exp, sum */
    cost->bytes = 4.0 * 2 * n;
}

static const mg_op_def cross_entropy_def = {
    .name = "cross_entropy", .arity = 2, .required = 2, .required_names = "input",
    .shape = cross_entropy_shape, .rule = cross_entropy_rule, .kernel = cross_entropy_kernel,
    .cost = cross_entropy_cost, .vjp = cross_entropy_vjp, .grad_at_output = true,
};

mg_dtensor *mg_cross_entropy(const mg_dtensor *logits, const mg_dtensor *labels) {
    return mg_op_run2(&cross_entropy_def, "mg_cross_entropy", logits, labels);
}
