/* ops_attention.c: mg_attention on distributed tensors and its gradient.
 * q, k, v (B, H, T, D) -> softmax(q k^T / sqrt(D)) v, computed by the backend's
 * fused kernel (flash attention: no (T, T) matrix, the rows' log-sum-exp kept
 * on its node, node->saved, for backward).
 *
 * Placements (mg_rules_attention): batch and head shards pass (data and tensor
 * parallel); q sharded on T with k, v Replicate is sequence parallel: k and v
 * are gathered along T only, and the causal mask is on global positions (the
 * kernel gets the global offsets of this rank's first query and first key).
 * Attention is linear in v: v Partial or sharded on D passes with q, k
 * Replicate. The gradients take the forward's placements, with Partial where
 * each rank holds a part of a sum: dk, dv where q was sharded on T (every
 * rank's queries add to them), dq, dk where v was Partial or sharded on D. */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "dist/mesh.h"
#include "ops/ops.h"
#include "ops/tape.h"
#include "status.h"

static int64_t offset_of(const mg_spec *s, int d) {
    int64_t shape[MG_MAX_DIMS], off[MG_MAX_DIMS];
    mg_spec_local(s, NULL, shape, off);
    return off[d];
}

static float scale_of(const mg_dtensor *q) {
    int64_t d = q->spec.shape[3];
    return d > 0 ? 1.0f / sqrtf((float)d) : 1.0f;
}

mg_dtensor *mg_attention(const mg_dtensor *q, const mg_dtensor *k, const mg_dtensor *v,
                         int causal) {
    const char *who = "mg_attention";
    const mg_dtensor *xs[3] = {q, k, v};
    if (mg_ops_check_given(who, 3, xs, 3, "q, k or v") != MG_OK) return NULL;
    const mg_spec *Q = &q->spec, *K = &k->spec, *V = &v->spec;
    bool fits = Q->ndim == 4 && K->ndim == 4 && V->ndim == 4;
    for (int d = 0; fits && d < 2; d++)
        fits = Q->shape[d] == K->shape[d] && K->shape[d] == V->shape[d];
    fits = fits && Q->shape[3] == K->shape[3] && K->shape[2] == V->shape[2];
    if (!fits) {
        char a[96], b[96], c[96];
        return mg_error_null(MG_ESHAPE,
                             "%s: q %s, k %s and v %s do not fit: want (B, H, T, D) each, k and v "
                             "of one length T, q and k of one D",
                             who, mg_shape_format(a, sizeof a, Q->ndim, Q->shape),
                             mg_shape_format(b, sizeof b, K->ndim, K->shape),
                             mg_shape_format(c, sizeof c, V->ndim, V->shape));
    }
    int64_t out_shape[4] = {Q->shape[0], Q->shape[1], Q->shape[2], V->shape[3]};
    mg_candidates c;
    mg_rules_attention(&c);
    mg_dtensor *in[3];
    mg_dtensor *y = mg_ops_begin(who, &c, 3, xs, 4, out_shape, in);
    mg_tensor *lse = y ? mg_ops_temp(3, y->local->shape) : NULL;
    if (!lse) return NULL;
    mg_backend *be = mg_backend_of(y->local);
    be->iface->attention(be->context, in[0]->local, in[1]->local, in[2]->local, scale_of(q),
                         causal != 0, offset_of(&in[0]->spec, 2), offset_of(&in[1]->spec, 2),
                         y->local, lse);
    mg_node *node = mg_ops_record(MG_OP_ATTENTION, 3, in, y);
    if (node) {
        node->iargs[0] = causal != 0;
        node->n_iargs = 1;
        node->saved = lse;
    }
    return y;
}

/* The gradient's spec of input i (0 q, 1 k, 2 v) from the forward's specs. */
static mg_spec grad_spec(const mg_dtensor *const *in, int i) {
    mg_spec s = in[i]->spec;
    for (int m = 0; m < s.mesh->ndim; m++) {
        mg_placement pq = in[0]->spec.p[m], pv = in[2]->spec.p[m];
        bool seq = pq.kind == MG_PLACE_SHARD && pq.dim == 2;
        bool v_split = pv.kind == MG_PLACE_PARTIAL || (pv.kind == MG_PLACE_SHARD && pv.dim == 3);
        if (i == 2 && pv.kind == MG_PLACE_PARTIAL)
            s.p[m] = MG_REPLICATE; /* d(sum) = the whole */
        else if ((i > 0 && seq) || (i < 2 && v_split))
            s.p[m] = MG_PARTIAL_SUM;
    }
    return s;
}

int mg_op_attention_backward(const mg_dtensor *q, const mg_dtensor *k, const mg_dtensor *v,
                             const mg_dtensor *out, const mg_dtensor *g, bool causal,
                             mg_dtensor **grads) {
    const mg_dtensor *in[3] = {q, k, v};
    /* any of them may be a parameter copy given back since the forward */
    int rc = mg_ops_hold(3, in);
    if (rc != MG_OK) return rc;
    mg_dtensor *dout = mg_ops_grad_at(g, &out->spec);
    if (!dout) return mg_last_code();
    for (int i = 0; i < 3; i++) {
        mg_spec s = grad_spec(in, i);
        if (!(grads[i] = mg_ops_output(&s))) return mg_last_code();
    }
    mg_backend *be = mg_backend_of(dout->local);
    be->iface->attention_backward(be->context, q->local, k->local, v->local, out->local, out->node->saved,
                                  dout->local, scale_of(q), causal, offset_of(&q->spec, 2),
                                  offset_of(&k->spec, 2), grads[0]->local, grads[1]->local,
                                  grads[2]->local);
    return MG_OK;
}
