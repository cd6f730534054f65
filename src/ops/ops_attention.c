/* ops_attention.c: mg_attention and mg_attention_gqa on distributed tensors,
 * and their gradient. q, k, v (B, H, T, D) -> softmax(q k^T / sqrt(D)) v,
 * computed by the backend's fused kernel (flash attention: no (T, T) matrix,
 * the rows' log-sum-exp kept on its node, node->saved, for backward).
 * Grouped-query attention: k and v have KV heads, KV dividing H; query head h
 * reads k, v head h / (H / KV) where it lies (no copy), and the gradients of
 * k and v sum over the H / KV query heads of their group (the same kernel).
 *
 * Placements (mg_rules_attention): batch and head shards pass (data and tensor
 * parallel); q sharded on T with k, v Replicate is sequence parallel: k and v
 * are gathered along T only, and the causal mask is on global positions (the
 * kernel gets the global offsets of this rank's first query and first key).
 * Attention is linear in v: v Partial or sharded on D passes with q, k
 * Replicate. The gradients take the forward's placements, with Partial where
 * each rank holds a part of a sum: dk, dv where q was sharded on T (every
 * rank's queries add to them), dq, dk where v was Partial or sharded on D.
 * Grouped, the heads are sharded only where the inputs shard them already and
 * KV splits evenly over those ranks (mg_rules_attention_gqa; else a message
 * naming the fix), so that each rank's query heads find their k, v heads.
 * With KV == H, mg_attention_gqa is mg_attention (the same rule and kernel).
 * mg_attention_at is the grouped record with queries from position args.pos
 * (added to q's shard offset), causal: a KV cache attended in place.
 * The records (op_def.h): attention and attention_gqa, args.flag = causal. */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "dist/mesh.h"
#include "ops/ops.h"
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

static int attention_shape(mg_op_call *c) {
    const mg_spec *Q = &c->x[0]->spec, *K = &c->x[1]->spec, *V = &c->x[2]->spec;
    bool fits = Q->ndim == 4 && K->ndim == 4 && V->ndim == 4;
    for (int d = 0; fits && d < 2; d++)
        fits = Q->shape[d] == K->shape[d] && K->shape[d] == V->shape[d];
    fits = fits && Q->shape[3] == K->shape[3] && K->shape[2] == V->shape[2];
    if (!fits) {
        char a[96], b[96], d[96];
        bool fewer = Q->ndim == 4 && K->ndim == 4 && K->shape[1] < Q->shape[1];
        return mg_error(MG_ESHAPE,
                        "%s: q %s, k %s and v %s do not fit: want (B, H, T, D) each, k and v of "
                        "one length T, q and k of one D%s",
                        c->who, mg_shape_format(a, sizeof a, Q->ndim, Q->shape),
                        mg_shape_format(b, sizeof b, K->ndim, K->shape),
                        mg_shape_format(d, sizeof d, V->ndim, V->shape),
                        fewer ? " (k and v with fewer heads than q: mg_attention_gqa)" : "");
    }
    int64_t out_shape[4] = {Q->shape[0], Q->shape[1], Q->shape[2], V->shape[3]};
    c->out_ndim = 4;
    memcpy(c->out_shape, out_shape, sizeof out_shape);
    return MG_OK;
}

static void attention_rule(const mg_op_call *c, mg_candidates *cands) {
    (void)c;
    mg_rules_attention(cands);
}

static int attention_kernel(mg_op_call *c, mg_dtensor *const *in, mg_dtensor *out) {
    mg_tensor *lse = c->saved = mg_ops_temp(3, out->local->shape);
    if (!lse) return mg_last_code();
    mg_backend *be = mg_backend_of(out->local);
    be->iface->attention(be->context, in[0]->local, in[1]->local, in[2]->local, scale_of(in[0]),
                         c->args.flag != 0, c->args.pos + offset_of(&in[0]->spec, 2),
                         offset_of(&in[1]->spec, 2), out->local, lse);
    return MG_OK;
}

/* q k^T and p v, each 2 B H Tq Tk D: half of it under a causal mask; queries
 * from position pos > 0 (mg_attention_at) see pos + Tq keys at most */
static void attention_cost(const mg_op_call *c, mg_dtensor *const *in, const mg_dtensor *out,
                           mg_op_cost *cost) {
    const mg_tensor *q = in[0]->local, *k = in[1]->local, *v = in[2]->local;
    double keys = (double)k->shape[2], half = c->args.flag ? 0.5 : 1.0;
    if (c->args.pos > 0 && (double)(c->args.pos + q->shape[2]) < keys) {
        keys = (double)(c->args.pos + q->shape[2]);
        half = 1.0;
    }
    double pairs = (double)q->numel / (double)(q->shape[3] ? q->shape[3] : 1) * keys;
    cost->flops = 2.0 * pairs * (double)(q->shape[3] + v->shape[3]) * half;
    cost->bytes = 4.0 * (double)(q->numel + k->numel + v->numel + out->local->numel);
}

/* The gradient's spec of input i (0 q, 1 k, 2 v) from the forward's specs. */
static mg_spec grad_spec(mg_dtensor *const *in, int i) {
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

/* dq, dk, dv (all three are computed; those not wanted are dropped) */
static int attention_vjp(mg_node *node, mg_dtensor *g, mg_dtensor **grads) {
    mg_dtensor *const *in = node->inputs;
    const mg_dtensor *q = in[0], *k = in[1], *v = in[2];
    /* any of them may be a parameter copy given back since the forward */
    const mg_dtensor *held[3] = {q, k, v};
    int rc = mg_ops_hold(3, held);
    if (rc != MG_OK) return rc;
    mg_dtensor *dout = mg_ops_grad_at(g, &node->output->spec), *d[3];
    NEED(dout);
    for (int i = 0; i < 3; i++) {
        mg_spec s = grad_spec(in, i);
        NEED(d[i] = mg_ops_output(&s));
    }
    mg_backend *be = mg_backend_of(dout->local);
    be->iface->attention_backward(be->context, q->local, k->local, v->local, node->output->local,
                                  node->saved, dout->local, scale_of(q), node->args.flag != 0,
                                  node->args.pos + offset_of(&q->spec, 2), offset_of(&k->spec, 2),
                                  d[0]->local,
                                  d[1]->local, d[2]->local);
    for (int i = 0; i < 3; i++)
        if (mg_vjp_wants(node, i)) grads[i] = d[i];
    return MG_OK;
}

/* The fields both records share: q, k, v required, one kernel (it serves
 * grouped heads as well), its cost and its VJP; each record names its own
 * shape and rule. */
#define ATTENTION_FIELDS                                                                    \
    .arity = 3, .required = 3, .required_names = "q, k or v", .kernel = attention_kernel,   \
    .cost = attention_cost, .vjp = attention_vjp, .grad_at_output = true

/* One call of either record. */
static mg_dtensor *attention_run(const mg_op_def *def, const char *who, const mg_dtensor *q,
                                 const mg_dtensor *k, const mg_dtensor *v, int causal) {
    mg_op_call c = {.who = who, .n = 3, .x = {q, k, v}, .args.flag = causal != 0};
    return mg_op_run(def, &c);
}

static const mg_op_def attention_def = {
    .name = "attention", .shape = attention_shape, .rule = attention_rule, ATTENTION_FIELDS,
};

mg_dtensor *mg_attention(const mg_dtensor *q, const mg_dtensor *k, const mg_dtensor *v,
                         int causal) {
    return attention_run(&attention_def, "mg_attention", q, k, v, causal);
}

/* ---- grouped-query attention ------------------------------------------------------ */

/* The mesh dims (of size > 1) on which q, k or v is sharded on its heads. */
static unsigned heads_sharded(const mg_op_call *c) {
    unsigned mask = 0;
    for (int i = 0; i < 3; i++) mask |= mg_ops_shard_mask(&c->x[i]->spec, 1);
    return mask;
}

static int gqa_shape(mg_op_call *c) {
    const mg_spec *Q = &c->x[0]->spec, *K = &c->x[1]->spec, *V = &c->x[2]->spec;
    bool fits = Q->ndim == 4 && K->ndim == 4 && V->ndim == 4;
    fits = fits && Q->shape[0] == K->shape[0] && K->shape[0] == V->shape[0];
    fits = fits && K->shape[1] == V->shape[1] && Q->shape[3] == K->shape[3] &&
           K->shape[2] == V->shape[2];
    if (!fits) {
        char a[96], b[96], d[96];
        return mg_error(MG_ESHAPE,
                        "%s: q %s, k %s and v %s do not fit: want q (B, H, T, D), k and v "
                        "(B, KV, T, D) with KV dividing H, k and v of one length T, q and k of "
                        "one D",
                        c->who, mg_shape_format(a, sizeof a, Q->ndim, Q->shape),
                        mg_shape_format(b, sizeof b, K->ndim, K->shape),
                        mg_shape_format(d, sizeof d, V->ndim, V->shape));
    }
    int64_t h = Q->shape[1], kv = K->shape[1];
    if (h != kv && (kv == 0 || h < kv || h % kv != 0))
        return mg_error(MG_ESHAPE,
                        "%s: q has %lld heads and k, v have %lld: kv_heads must divide heads "
                        "(each k, v head serves heads / kv_heads query heads)",
                        c->who, (long long)h, (long long)kv);
    unsigned on = h == kv ? 0 : heads_sharded(c);
    int64_t ranks = 1;
    for (int m = 0; m < Q->mesh->ndim; m++)
        if (on >> m & 1u) ranks *= Q->mesh->shape[m];
    if (kv % ranks != 0)
        return mg_error(MG_EPLACEMENT,
                        "%s: the heads are sharded over %lld ranks but kv_heads = %lld does not "
                        "split evenly over them: make kv_heads a multiple of %lld, or shard the "
                        "heads over fewer ranks (or shard on batch or sequence instead)",
                        c->who, (long long)ranks, (long long)kv, (long long)ranks);
    int64_t out_shape[4] = {Q->shape[0], h, Q->shape[2], V->shape[3]};
    c->out_ndim = 4;
    memcpy(c->out_shape, out_shape, sizeof out_shape);
    return MG_OK;
}

static void gqa_rule(const mg_op_call *c, mg_candidates *cands) {
    if (c->x[0]->spec.shape[1] == c->x[1]->spec.shape[1])
        mg_rules_attention(cands);
    else
        mg_rules_attention_gqa(cands, heads_sharded(c));
}

static const mg_op_def attention_gqa_def = {
    .name = "attention_gqa", .shape = gqa_shape, .rule = gqa_rule, ATTENTION_FIELDS,
};

mg_dtensor *mg_attention_gqa(const mg_dtensor *q, const mg_dtensor *k, const mg_dtensor *v,
                             int causal) {
    return attention_run(&attention_gqa_def, "mg_attention_gqa", q, k, v, causal);
}

mg_dtensor *mg_attention_at(const mg_dtensor *q, const mg_dtensor *k, const mg_dtensor *v,
                            int64_t pos) {
    if (pos < 0)
        return mg_error_null(MG_EINVAL, "mg_attention_at: position %lld: give the first query's "
                             "position, 0 or more", (long long)pos);
    mg_op_call c = {.who = "mg_attention_at", .n = 3, .x = {q, k, v}, .args.flag = 1,
                    .args.pos = pos};
    return mg_op_run(&attention_gqa_def, &c);
}
