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
 * Logits not sharded on V take the whole-row kernels, as before. */
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "dist/mesh.h"
#include "ops/ops.h"
#include "ops/tape.h"
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

mg_dtensor *mg_embedding(const mg_dtensor *ids, const mg_dtensor *table) {
    const char *who = "mg_embedding";
    const mg_dtensor *xs[2] = {ids, table};
    if (mg_ops_check_given(who, 2, xs, 2, "ids or table") != MG_OK) return NULL;
    const mg_spec *I = &ids->spec, *T = &table->spec;
    if (T->ndim != 2 || I->ndim + 1 > MG_MAX_DIMS) {
        char want[96];
        snprintf(want, sizeof want, "want a table (V, C) and ids of at most %d dims",
                 MG_MAX_DIMS - 1);
        return mg_ops_shape_error(who, "ids", I, "table", T, want);
    }
    int64_t out_shape[MG_MAX_DIMS];
    memcpy(out_shape, I->shape, sizeof(int64_t) * (size_t)I->ndim);
    out_shape[I->ndim] = T->shape[1];
    mg_candidates c;
    mg_rules_embedding(&c, I->ndim);
    mg_dtensor *in[2];
    mg_dtensor *y = mg_ops_begin(who, &c, 2, xs, I->ndim + 1, out_shape, in);
    if (!y) return NULL;
    mg_backend *be = backend(y->local);
    int64_t n = in[0]->local->numel, rows[2] = {n, y->local->shape[I->ndim]};
    mg_tensor *flat_ids = mg_tensor_view(mg_step_arena(), in[0]->local, 1, &n);
    mg_tensor *flat_out = mg_tensor_view(mg_step_arena(), y->local, 2, rows);
    if (!flat_ids || !flat_out) return NULL;
    float bad = (float)be->iface->embedding(be->context, flat_ids, in[1]->local,
                                            offset_of(&in[1]->spec, 0), T->shape[0], flat_out);
    /* ranks holding other ids agree on their validity (replicated ids agree already) */
    if (mg_ops_reduce_over(I->mesh, sharded_dims(&in[0]->spec), &bad, 1, MG_REDUCE_MAX) != MG_OK)
        return NULL;
    if (bad > 0)
        return mg_error_null(MG_EINVAL,
                             "%s: ids must be row indices 0..%lld of the table (integers "
                             "stored as floats); %g ids on some rank are not",
                             who, (long long)T->shape[0] - 1, bad);
    mg_ops_record(MG_OP_EMBEDDING, 2, in, y);
    return y;
}

mg_dtensor *mg_op_embedding_backward(const mg_dtensor *ids, const mg_dtensor *table,
                                     const mg_dtensor *out, const mg_dtensor *g) {
    mg_dtensor *dy = mg_ops_grad_at(g, &out->spec);
    if (!dy) return NULL;
    /* the table's placements, but Replicate where the forward used a Partial
     * table, and Partial where a replicated table met sharded ids */
    mg_spec s = table->spec;
    for (int m = 0; m < s.mesh->ndim; m++) {
        if (s.p[m].kind == MG_PLACE_PARTIAL)
            s.p[m] = MG_REPLICATE;
        else if (s.p[m].kind == MG_PLACE_REPLICATE && ids->spec.p[m].kind == MG_PLACE_SHARD)
            s.p[m] = MG_PARTIAL_SUM;
    }
    mg_dtensor *dt = mg_ops_output(&s);
    if (!dt) return NULL;
    mg_backend *be = backend(dt->local);
    int64_t n = ids->local->numel, rows[2] = {n, dt->local->shape[1]};
    mg_tensor *flat_ids = mg_tensor_view(mg_step_arena(), ids->local, 1, &n);
    mg_tensor *flat_dy = mg_tensor_view(mg_step_arena(), dy->local, 2, rows);
    if (!flat_ids || !flat_dy) return NULL;
    be->iface->embedding_backward(be->context, flat_ids, flat_dy, offset_of(&table->spec, 0),
                                  dt->local);
    return dt;
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

mg_dtensor *mg_cross_entropy(const mg_dtensor *logits, const mg_dtensor *labels) {
    const char *who = "mg_cross_entropy";
    const mg_dtensor *xs[2] = {logits, labels};
    if (mg_ops_check_given(who, 2, xs, 2, "input") != MG_OK) return NULL;
    const mg_spec *L = &logits->spec, *Y = &labels->spec;
    if (L->ndim < 1 || Y->ndim != L->ndim - 1 ||
        !mg_shape_equal(Y->ndim, Y->shape, Y->ndim, L->shape))
        return mg_ops_shape_error(who, "logits", L, "labels", Y,
                                  "want logits (..., V) and labels (...), e.g. (B, C) and (B)");
    int64_t n = mg_shape_numel(Y->ndim, Y->shape), v = L->shape[L->ndim - 1];
    mg_candidates c;
    mg_rules_cross_entropy(&c, L->ndim);
    mg_dtensor *in[2];
    mg_dtensor *y = mg_ops_begin(who, &c, 2, xs, 0, NULL, in);
    mg_tensor *lg, *lb;
    if (!y || flat_rows(in[0], in[1], &lg, &lb) != MG_OK) return NULL;
    mg_backend *be = backend(y->local);
    float scale = n > 0 ? 1.0f / (float)n : 0.0f;
    unsigned mask = mg_ops_shard_mask(&in[0]->spec, L->ndim - 1);
    mg_tensor *lse = NULL;
    int64_t bad = mask ? cross_entropy_sharded(in[0], lg, lb, mask, scale, y, &lse)
                       : be->iface->cross_entropy(be->context, lg, lb, scale, y->local);
    if (bad < 0) return NULL;
    /* labels are local: agree on their validity so no rank goes on alone */
    float bad_f = (float)bad;
    if (mg_comm_all_reduce(L->mesh->world, &bad_f, 1, MG_REDUCE_MAX) != MG_OK) return NULL;
    if (bad_f > 0)
        return mg_error_null(MG_EINVAL,
                             "%s: labels must be class indices in 0..%lld; %g rows on some rank "
                             "are outside",
                             who, (long long)v - 1, bad_f);
    mg_node *node = mg_ops_record(MG_OP_CROSS_ENTROPY, 2, in, y);
    if (node) node->saved = lse;
    return y;
}

mg_dtensor *mg_op_cross_entropy_backward(const mg_dtensor *logits, const mg_dtensor *labels,
                                         const mg_dtensor *out, const mg_dtensor *dloss) {
    /* the logits may be a parameter copy given back since the forward */
    if (mg_ops_hold(1, &logits) != MG_OK) return NULL;
    mg_dtensor *g = mg_ops_grad_at(dloss, &out->spec), *dx = mg_ops_output(&logits->spec);
    mg_tensor *lg, *lb, *dl;
    if (!g || !dx || flat_rows(logits, labels, &lg, &lb) != MG_OK) return NULL;
    if (!(dl = mg_tensor_view(mg_step_arena(), dx->local, 2, lg->shape))) return NULL;
    float gv = 0;
    mg_backend *be = backend(dx->local);
    be->iface->to_host(be->context, &gv, g->local->data, 1);
    int nd = logits->spec.ndim;
    int64_t n = mg_shape_numel(nd - 1, logits->spec.shape), v = logits->spec.shape[nd - 1];
    bool sharded = mg_ops_shard_mask(&logits->spec, nd - 1) != 0;
    be->iface->cross_entropy_backward(be->context, lg, lb, sharded ? out->node->saved : NULL,
                                      sharded ? offset_of(&logits->spec, nd - 1) : 0, v,
                                      n > 0 ? gv / (float)n : 0.0f, dl);
    return dx;
}
