/* llama_forward.c: the Llama's forward, per pipeline layer, and the
 * KV-cached forward of generation (see llama.h). Exports
 * mg_llama_forward_layers, mg_llama_cache_init, mg_llama_forward_cached. */
#include <string.h>

#include "dist/mesh.h"
#include "nn/llama.h"
#include "nn/recompute.h"
#include "ops/ops.h"
#include "status.h"

/* x at placements p (no-op when it is there); recorded for autograd. */
static mg_dtensor *to(const mg_dtensor *x, const mg_placement *p) {
    return mg_op_redistribute_to(x, p, "llama activation");
}

static mg_dtensor *use(mg_param_table *t, int i) { return mg_params_use(t, i); }

/* rms_norm(x) with parameter w's weight */
static mg_dtensor *norm(const mg_llama *m, mg_param_table *t, const mg_dtensor *x, int w) {
    mg_dtensor *weight = x ? use(t, w) : NULL;
    return weight ? mg_rms_norm(x, weight, (float)m->cfg.norm_eps) : NULL;
}

/* x (B, n, C) = tok_embeddings[ids (B, n)], at placements resid */
static mg_dtensor *embed(mg_llama *m, mg_param_table *t, const mg_dtensor *ids,
                         const mg_placement *resid) {
    mg_dtensor *emb = use(t, m->emb);
    return emb ? to(mg_embedding(ids, emb), resid) : NULL;
}

/* heads (B, heads, n, D) from y (B, n, heads D) = h w^T, rotated from
 * position pos when `turn` (q and k) */
static mg_dtensor *heads_of(const mg_llama *m, const mg_dtensor *h, mg_dtensor *w, int64_t heads,
                            int turn, int64_t pos) {
    static const int perm[4] = {0, 2, 1, 3};
    const int64_t *s = mg_dtensor_shape(h), D = m->cfg.embd / m->cfg.heads;
    mg_dtensor *y = w ? mg_linear(h, w, NULL) : NULL;                         // (B, n, heads D)
    if (y) y = mg_reshape(y, 4, (int64_t[]){s[0], s[1], heads, D});           // (B, n, heads, D)
    if (y && turn) y = mg_rope(y, pos, (float)m->cfg.rope_theta);
    return y ? mg_permute(y, perm) : NULL;                                    // (B, heads, n, D)
}

/* a (B, H, n, D) -> (B, n, H D) */
static mg_dtensor *merge_heads(const mg_llama *m, const mg_dtensor *a) {
    static const int perm[4] = {0, 2, 1, 3};
    if (!a) return NULL;
    const int64_t *s = mg_dtensor_shape(a);
    mg_dtensor *y = mg_permute(a, perm);
    return y ? mg_reshape(y, 3, (int64_t[]){s[0], s[2], m->cfg.embd}) : NULL;
}

/* Block l of the Llama, for a part that runs as a function of one input. */
typedef struct {
    mg_llama *m;
    mg_param_table *t;
    int l;
} part_args;

/* The attention of block l without a cache, from its normed input h (B, n, C)
 * to the heads merged (B, n, C): the q, k, v projections and their rotation,
 * grouped-query causal attention, the merge. A part of its own
 * (MG_RECOMPUTE_ATTENTION recomputes it). */
static mg_dtensor *attention_part(void *ctx, const mg_dtensor *h) {
    const part_args *a = ctx;
    const mg_llama_block *b = &a->m->block[a->l];
    mg_dtensor *q = heads_of(a->m, h, use(a->t, b->wq), a->m->cfg.heads, 1, 0); // (B, H, n, D)
    mg_dtensor *k = q ? heads_of(a->m, h, use(a->t, b->wk), a->m->cfg.kv_heads, 1, 0) : NULL;
    mg_dtensor *v = k ? heads_of(a->m, h, use(a->t, b->wv), a->m->cfg.kv_heads, 0, 0) : NULL;
    return v ? merge_heads(a->m, mg_attention_gqa(q, k, v, 1)) : NULL;
}

/* The attention of block l against the cache: this block's k, v stored at
 * [pos, pos + n), then (pos > 0) one query against positions 0..pos, read
 * where they lie in the cache. */
static mg_dtensor *cached_attention(mg_llama *m, mg_param_table *t, int l, const mg_dtensor *h,
                                    mg_gpt_cache *c, int64_t pos) {
    const mg_llama_block *b = &m->block[l];
    const int64_t H = m->cfg.heads, KV = m->cfg.kv_heads;
    mg_dtensor *q = heads_of(m, h, use(t, b->wq), H, 1, pos);                 // (B, H, n, D)
    mg_dtensor *kv[2] = {q ? heads_of(m, h, use(t, b->wk), KV, 1, pos) : NULL, NULL};
    if (kv[0]) kv[1] = heads_of(m, h, use(t, b->wv), KV, 0, pos);            // (B, KV, n, D)
    if (!kv[1] || mg_gpt_cache_store(c, l, kv, pos) != MG_OK) return NULL;
    if (pos == 0) return merge_heads(m, mg_attention_gqa(q, kv[0], kv[1], 1));
    return merge_heads(m, mg_attention_at(q, c->k[l], c->v[l], pos)); /* the cache, in place */
}

/* Block l; with a cache, its attention is cached_attention's. */
static mg_dtensor *block(mg_llama *m, mg_param_table *t, int l, const mg_dtensor *x,
                         mg_gpt_cache *c, int64_t pos, const mg_placement *resid,
                         const mg_placement *region) {
    const mg_llama_block *b = &m->block[l];
    mg_dtensor *h = to(norm(m, t, x, b->attn_norm), region);                   // (B, n, C)
    mg_dtensor *y = NULL;
    if (h && c) {
        y = cached_attention(m, t, l, h, c, pos);
    } else if (h) {
        part_args a = {m, t, l};
        y = mg_recompute_part(m->recompute, MG_RECOMPUTE_ATTENTION, attention_part, &a, sizeof a,
                              h); // (B, n, C)
    }
    if (y) y = mg_linear(y, use(t, b->wo), NULL);
    mg_dtensor *r = y ? to(mg_add(x, y), resid) : NULL;
    h = to(norm(m, t, r, b->ffn_norm), region);
    mg_dtensor *gate = h ? mg_linear(h, use(t, b->w1), NULL) : NULL; // (B, n, F)
    mg_dtensor *up = gate ? mg_linear(h, use(t, b->w3), NULL) : NULL;
    mg_dtensor *act = up ? mg_silu(gate) : NULL;
    mg_dtensor *f = act ? mg_mul(act, up) : NULL;
    if (f) f = mg_linear(f, use(t, b->w2), NULL); // (B, n, C)
    return f ? to(mg_add(r, f), resid) : NULL;
}

/* Block l as a function of its input alone (MG_RECOMPUTE_BLOCKS recomputes it). */
static mg_dtensor *block_part(void *ctx, const mg_dtensor *x) {
    const part_args *a = ctx;
    return block(a->m, a->t, a->l, x, NULL, 0, a->m->residual, a->m->region_in);
}

/* logits (B, n, V) = rms_norm(x) output^T (output: tok_embeddings when tied) */
static mg_dtensor *head(mg_llama *m, mg_param_table *t, const mg_dtensor *x,
                        const mg_placement *region) {
    mg_dtensor *h = to(norm(m, t, x, m->norm), region);
    mg_dtensor *w = h ? use(t, m->output >= 0 ? m->output : m->emb) : NULL;
    return w ? mg_linear(h, w, NULL) : NULL;
}

mg_dtensor *mg_llama_forward_layers(mg_llama *m, mg_param_table *t, int first, int last,
                                    const mg_dtensor *x) {
    const int L = (int)m->cfg.layers;
    mg_dtensor *h = (mg_dtensor *)x;
    for (int i = first; i < last && h; i++) {
        if (*mg_llama_param_slot(m, mg_llama_layer_param(&m->cfg, i)) < 0)
            return mg_error_null(MG_ESTATE, "llama: layer %d is held by another pipeline stage", i);
        h = i == 0   ? embed(m, t, h, m->residual)
            : i <= L ? mg_recompute_part(m->recompute, MG_RECOMPUTE_BLOCKS, block_part,
                                         &(part_args){m, t, i - 1}, sizeof(part_args), h)
                     : head(m, t, h, m->region_in);
    }
    return h;
}

/* ---- the KV cache of generation ------------------------------------------------ */

int mg_llama_cache_init(mg_gpt_cache *c, const mg_llama *m, const mg_mesh *mesh,
                        const mg_plan *plan) {
    const mg_llama_config *g = &m->cfg;
    return mg_gpt_cache_make(c, g->layers, g->kv_heads, g->ctx, g->embd / g->heads, mesh, plan);
}

mg_dtensor *mg_llama_forward_cached(mg_llama *m, mg_param_table *t, mg_gpt_cache *c,
                                    const mg_dtensor *ids, int64_t pos) {
    int64_t n = mg_dtensor_shape(ids)[1];
    if (pos < 0 || n < 1 || (pos == 0 && n > m->cfg.ctx) ||
        (pos > 0 && (n != 1 || pos != c->len)) || pos + n > m->cfg.ctx)
        return mg_error_null(MG_EINVAL, "llama: a cached forward of %lld tokens at position %lld "
                             "(the cache holds %lld of %lld): give a prompt from position 0 or "
                             "one token after the last", (long long)n, (long long)pos,
                             (long long)c->len, (long long)m->cfg.ctx);
    /* one sequence: every activation Replicate, the parameters at the plan's placements */
    mg_placement rep[MG_MAX_MESH_DIMS];
    for (int d = 0; d < m->mesh_ndim; d++) rep[d] = MG_REPLICATE;
    int prev = mg_set_grad_enabled(0);
    mg_dtensor *x = to(ids, rep);
    if (x) x = embed(m, t, x, rep);
    for (int l = 0; x && l < m->cfg.layers; l++) x = block(m, t, l, x, c, pos, rep, rep);
    if (x && n > 1) x = mg_narrow(x, 1, n - 1, 1); /* only the last position's logits */
    mg_dtensor *logits = x ? head(m, t, x, rep) : NULL;
    mg_set_grad_enabled(prev);
    if (logits) c->len = pos + n;
    return logits;
}
