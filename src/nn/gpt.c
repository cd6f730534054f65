/* gpt.c: the GPT-2 model on distributed tensors, its init, its forward per
 * block, and the KV-cached forward of generation (see gpt.h). */
#include "nn/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "dist/mesh.h"
#include "nn/recompute.h"
#include "ops/ops.h"
#include "status.h"

#define LN_EPS 1e-5f /* torch.nn.LayerNorm's */
#define INIT_STD 0.02f

int64_t mg_gpt_param_count(const mg_gpt_config *c) {
    int64_t C = c->embd;
    return c->vocab * C + c->ctx * C + c->layers * (12 * C * C + 13 * C) + 2 * C;
}

int mg_gpt_check(const mg_gpt_config *c, const mg_plan *plan, const mg_mesh *mesh) {
    if (c->layers < 1 || c->heads < 1 || c->embd < 1 || c->ctx < 1 || c->vocab < 1)
        return mg_error(MG_EINVAL, "gpt: layers (%lld), heads (%lld), embd (%lld), ctx (%lld) and "
                        "vocabulary (%lld) must all be >= 1", (long long)c->layers,
                        (long long)c->heads, (long long)c->embd, (long long)c->ctx,
                        (long long)c->vocab);
    /* sizes reach int code (a parameter's index is 4 + 12 x layers) and products
     * (the parameter count, batch x ctx x embd): each below 2^31, the count below 2^53 */
    if (c->layers > (INT32_MAX - 4) / 12 || c->heads > INT32_MAX || c->embd > INT32_MAX ||
        c->ctx > INT32_MAX || c->vocab > INT32_MAX)
        return mg_error(MG_EINVAL, "gpt: layers (%lld), heads (%lld), embd (%lld), ctx (%lld) or "
                        "vocabulary (%lld) is too large: each must be <= %d (layers <= %d)",
                        (long long)c->layers, (long long)c->heads, (long long)c->embd,
                        (long long)c->ctx, (long long)c->vocab, INT32_MAX, (INT32_MAX - 4) / 12);
    double C = (double)c->embd, params = ((double)c->vocab + (double)c->ctx + 2) * C +
                                          (double)c->layers * (12 * C * C + 13 * C);
    if (params > 9007199254740992.0)
        return mg_error(MG_EINVAL, "gpt: %lld layers of embd %lld make %.3g parameters, more than "
                        "any machine holds: give a smaller --layers or --embd",
                        (long long)c->layers, (long long)c->embd, params);
    if (c->embd % c->heads != 0)
        return mg_error(MG_EINVAL, "gpt: --heads %lld does not divide --embd %lld: each head takes "
                        "embd / heads channels (e.g. --heads 4 --embd 128)", (long long)c->heads,
                        (long long)c->embd);
    int tp = mg_plan_tensor_degree(plan, mesh), sp = mg_plan_sequence_degree(plan, mesh);
    if (c->heads % tp != 0)
        return mg_error(MG_EINVAL, "gpt: tensor-parallel degree %d cannot split %lld heads "
                        "evenly (each rank takes whole heads): give --heads a multiple of %d, or "
                        "a tp mesh dim that divides %lld", tp, (long long)c->heads, tp,
                        (long long)c->heads);
    if (c->vocab < tp)
        return mg_error(MG_EINVAL, "gpt: tensor-parallel degree %d is larger than the vocabulary "
                        "(%lld): every rank needs rows of the embedding", tp, (long long)c->vocab);
    if (c->ctx < sp)
        return mg_error(MG_EINVAL, "gpt: sequence-parallel degree %d is larger than --ctx %lld: "
                        "every rank needs positions of the sequence", sp, (long long)c->ctx);
    return MG_OK;
}

int mg_gpt_param_total(const mg_gpt_config *c) { return 4 + 12 * (int)c->layers; }

int mg_gpt_param_layer(const mg_gpt_config *c, int k) {
    return k < 2 ? 0 : k < 2 + 12 * (int)c->layers ? 1 + (k - 2) / 12 : (int)c->layers + 1;
}

/* A block's twelve parameters, in the order of mg_gpt_block's fields. */
static const struct {
    const char *name;
    mg_gpt_role role;
    int ndim, rows, cols; /* the shape in units of C (a 1-d one: rows C) */
    char init;            /* '1', '0', 'n' (normal), 'r' (residual projection) */
} block_params[12] = {
    {"ln1.weight", MG_GPT_REPLICATED, 1, 1, 0, '1'},
    {"ln1.bias", MG_GPT_REPLICATED, 1, 1, 0, '0'},
    {"attn.qkv.weight", MG_GPT_COLUMN, 2, 3, 1, 'n'},
    {"attn.qkv.bias", MG_GPT_COLUMN, 1, 3, 0, '0'},
    {"attn.proj.weight", MG_GPT_ROW, 2, 1, 1, 'r'},
    {"attn.proj.bias", MG_GPT_REPLICATED, 1, 1, 0, '0'},
    {"ln2.weight", MG_GPT_REPLICATED, 1, 1, 0, '1'},
    {"ln2.bias", MG_GPT_REPLICATED, 1, 1, 0, '0'},
    {"mlp.fc.weight", MG_GPT_COLUMN, 2, 4, 1, 'n'},
    {"mlp.fc.bias", MG_GPT_COLUMN, 1, 4, 0, '0'},
    {"mlp.fc2.weight", MG_GPT_ROW, 2, 1, 4, 'r'},
    {"mlp.fc2.bias", MG_GPT_REPLICATED, 1, 1, 0, '0'},
};

void mg_gpt_param_describe(const mg_gpt_config *c, int k, mg_gpt_param_desc *d) {
    const int64_t C = c->embd, L = c->layers;
    const mg_param_init normal = {MG_INIT_NORMAL, 0.0f, INIT_STD}, zero = {MG_INIT_CONSTANT, 0, 0},
                        one = {MG_INIT_CONSTANT, 1, 0},
                        resid = {MG_INIT_NORMAL, 0.0f, INIT_STD / sqrtf(2.0f * (float)L)};
    memset(d, 0, sizeof *d);
    if (k < 2 || k >= 2 + 12 * L) { /* wte, wpe; ln_f.weight, ln_f.bias */
        int top = k < 2;
        snprintf(d->name, sizeof d->name, "%s",
                 top ? (k ? "wpe" : "wte") : k % 2 ? "ln_f.bias" : "ln_f.weight");
        d->ndim = top ? 2 : 1;
        d->shape[0] = top ? (k ? c->ctx : c->vocab) : C;
        d->shape[1] = top ? C : 0;
        d->role = k == 0 ? MG_GPT_EMBEDDING : MG_GPT_REPLICATED;
        d->init = top ? normal : k % 2 ? zero : one;
        return;
    }
    int l = (k - 2) / 12, j = (k - 2) % 12;
    snprintf(d->name, sizeof d->name, "h.%d.%s", l, block_params[j].name);
    d->ndim = block_params[j].ndim;
    d->shape[0] = block_params[j].rows * C;
    d->shape[1] = block_params[j].cols * C;
    d->role = block_params[j].role;
    char i = block_params[j].init;
    d->init = i == '1' ? one : i == '0' ? zero : i == 'n' ? normal : resid;
}

int *mg_gpt_param_slot(mg_gpt *g, int k) {
    if (k == 0) return &g->wte;
    if (k == 1) return &g->wpe;
    int blocks = 12 * (int)g->cfg.layers;
    if (k >= 2 + blocks) return k == 2 + blocks ? &g->lnf_w : &g->lnf_b;
    _Static_assert(sizeof(mg_gpt_block) == 12 * sizeof(int), "mg_gpt_block: twelve indices");
    return (int *)(void *)&g->block[(k - 2) / 12] + (k - 2) % 12;
}

int mg_gpt_init(mg_gpt *g, mg_param_table *t, const mg_mesh *mesh, const mg_plan *plan,
                const mg_gpt_config *cfg, uint64_t seed) {
    return mg_gpt_init_held(g, t, mesh, plan, cfg, seed, NULL);
}

int mg_gpt_init_held(mg_gpt *g, mg_param_table *t, const mg_mesh *mesh, const mg_plan *plan,
                     const mg_gpt_config *cfg, uint64_t seed, const unsigned char *held) {
    memset(g, 0, sizeof *g);
    int rc = mg_gpt_check(cfg, plan, mesh);
    if (rc != MG_OK) return rc;
    g->cfg = *cfg;
    g->mesh_ndim = mesh->ndim;
    mg_plan_residual(plan, g->residual);
    mg_plan_region_input(plan, g->region_in);
    g->block = calloc((size_t)cfg->layers, sizeof *g->block);
    if (!g->block) return mg_error(MG_ENOMEM, "gpt: out of memory for %lld blocks", (long long)cfg->layers);
    int total = mg_gpt_param_total(cfg), head = (int)cfg->layers + 1;
    for (int k = 0; k < total; k++) *mg_gpt_param_slot(g, k) = -1;
    /* the head uses wte: a stage with the head and not the embedding holds a copy */
    g->wte_copy = held && !held[0] && held[head];
    for (int k = 0; k < total; k++) {
        int layer = mg_gpt_param_layer(cfg, k);
        if (held && !held[layer] && !(k == 0 && g->wte_copy)) continue;
        mg_gpt_param_desc d;
        mg_gpt_param_describe(cfg, k, &d);
        rc = mg_gpt_param_add(t, mesh, plan, k, &d, seed);
        if (rc < 0) {
            mg_gpt_free(g);
            return rc;
        }
        *mg_gpt_param_slot(g, k) = rc;
    }
    return MG_OK;
}

int mg_gpt_param_add(mg_param_table *t, const mg_mesh *mesh, const mg_plan *plan, int k,
                     const mg_gpt_param_desc *d, uint64_t seed) {
    mg_placement store[MG_MAX_MESH_DIMS], use[MG_MAX_MESH_DIMS];
    mg_plan_gpt_param(plan, d->role, store, use);
    t->next_index = k; /* its place in the whole model: the same initial values */
    return mg_params_add_init(t, mesh, d->name, d->ndim, d->shape, store, use, seed, d->init);
}

void mg_gpt_free(mg_gpt *g) {
    free(g->block);
    g->block = NULL;
}

/* ---- forward ------------------------------------------------------------------ */

/* x at placements p (no-op when it is there); recorded for autograd. */
static mg_dtensor *to(const mg_dtensor *x, const mg_placement *p) {
    return mg_op_redistribute_to(x, p, "gpt activation");
}

static mg_dtensor *use(mg_param_table *t, int i) { return mg_params_use(t, i); }

static mg_dtensor *embed(mg_gpt *g, mg_param_table *t, const mg_dtensor *ids, int64_t pos,
                         const mg_placement *resid) {
    int64_t n = mg_dtensor_shape(ids)[1];
    mg_dtensor *wte = use(t, g->wte), *wpe = wte ? use(t, g->wpe) : NULL;
    if (!wpe) return NULL;
    if (pos != 0 || n != g->cfg.ctx) wpe = mg_narrow(wpe, 0, pos, n); // wpe: (n, C)
    mg_dtensor *x = wpe ? mg_embedding(ids, wte) : NULL;              // x: (B, n, C)
    if (x) x = mg_add(x, wpe);
    return to(x, resid);
}

mg_dtensor *mg_gpt_embed(mg_gpt *g, mg_param_table *t, const mg_dtensor *ids, int64_t pos) {
    return embed(g, t, ids, pos, g->residual);
}

/* q, k, v (B, H, n, D) from qkv (B, n, 3C) whose rows are (H, 3, D) */
static int split_heads(const mg_gpt *g, const mg_dtensor *qkv, mg_dtensor **out) {
    const int64_t *s = mg_dtensor_shape(qkv), H = g->cfg.heads, D = g->cfg.embd / H;
    static const int perm[4] = {0, 2, 1, 3};
    mg_dtensor *h = mg_reshape(qkv, 4, (int64_t[]){s[0], s[1], H, 3 * D}); // (B, n, H, 3D)
    for (int i = 0; i < 3; i++) {
        out[i] = h ? mg_narrow(h, 3, i * D, D) : NULL; // (B, n, H, D)
        if (out[i]) out[i] = mg_permute(out[i], perm);  // (B, H, n, D)
        if (!out[i]) return mg_last_code() ? mg_last_code() : MG_ENOMEM;
    }
    return MG_OK;
}

/* a (B, H, n, D) -> (B, n, C) */
static mg_dtensor *merge_heads(const mg_gpt *g, const mg_dtensor *a) {
    static const int perm[4] = {0, 2, 1, 3};
    const int64_t *s = mg_dtensor_shape(a);
    mg_dtensor *y = a ? mg_permute(a, perm) : NULL;
    return y ? mg_reshape(y, 3, (int64_t[]){s[0], s[2], g->cfg.embd}) : NULL;
}

/* The attention of a block without a cache, from qkv (B, T, 3C) to the heads
 * merged (B, T, C): the head split, causal attention, the merge. A part of
 * its own (MG_RECOMPUTE_ATTENTION recomputes it): g is all it needs. */
static mg_dtensor *attention_part(void *ctx, const mg_dtensor *qkv) {
    const mg_gpt *g = *(const mg_gpt **)ctx;
    mg_dtensor *hd[3];
    if (split_heads(g, qkv, hd) != MG_OK) return NULL;
    return merge_heads(g, mg_attention(hd[0], hd[1], hd[2], 1));
}

/* Block l; with a cache: store this block's k, v at [pos, pos + n) and attend
 * to the cache (pos > 0: one query against positions 0..pos). */
static mg_dtensor *block(mg_gpt *g, mg_param_table *t, int l, const mg_dtensor *x,
                         mg_gpt_cache *c, int64_t pos, const mg_placement *resid,
                         const mg_placement *region) {
    const mg_gpt_block *b = &g->block[l];
    mg_dtensor *h = mg_layer_norm(x, use(t, b->ln1_w), use(t, b->ln1_b), LN_EPS);
    h = to(h, region);
    mg_dtensor *qkv = h ? mg_linear(h, use(t, b->qkv_w), use(t, b->qkv_b)) : NULL; // (B, n, 3C)
    if (!qkv) return NULL;
    mg_dtensor *y, *hd[3];
    if (!c) {
        const mg_gpt *self = g;
        y = mg_recompute_part(g->recompute, MG_RECOMPUTE_ATTENTION, attention_part, &self,
                              sizeof self, qkv); // (B, n, C)
    } else {
        if (split_heads(g, qkv, hd) != MG_OK) return NULL;
        mg_dtensor *a;
        if (pos == 0) {
            if (mg_gpt_cache_store(c, l, hd + 1, 0) != MG_OK) return NULL;
            a = mg_attention(hd[0], hd[1], hd[2], 1);
        } else {
            if (mg_gpt_cache_store(c, l, hd + 1, pos) != MG_OK) return NULL;
            a = mg_attention_at(hd[0], c->k[l], c->v[l], pos); /* the cache, in place */
        }
        y = merge_heads(g, a);
    }
    if (y) y = mg_linear(y, use(t, b->proj_w), use(t, b->proj_b));
    mg_dtensor *r = y ? to(mg_add(x, y), resid) : NULL;
    h = r ? mg_layer_norm(r, use(t, b->ln2_w), use(t, b->ln2_b), LN_EPS) : NULL;
    h = to(h, region);
    if (h) h = mg_linear(h, use(t, b->fc_w), use(t, b->fc_b)); // (B, n, 4C)
    if (h) h = mg_gelu(h);
    if (h) h = mg_linear(h, use(t, b->fc2_w), use(t, b->fc2_b)); // (B, n, C)
    return h ? to(mg_add(r, h), resid) : NULL;
}

/* Block l as a function of its input alone (MG_RECOMPUTE_BLOCKS recomputes it). */
typedef struct {
    mg_gpt *g;
    mg_param_table *t;
    int l;
} block_args;

static mg_dtensor *block_part(void *ctx, const mg_dtensor *x) {
    const block_args *a = ctx;
    return block(a->g, a->t, a->l, x, NULL, 0, a->g->residual, a->g->region_in);
}

mg_dtensor *mg_gpt_block_forward(mg_gpt *g, mg_param_table *t, int l, const mg_dtensor *x) {
    block_args a = {g, t, l};
    return mg_recompute_part(g->recompute, MG_RECOMPUTE_BLOCKS, block_part, &a, sizeof a, x);
}

static mg_dtensor *head(mg_gpt *g, mg_param_table *t, const mg_dtensor *x, const mg_placement *region) {
    mg_dtensor *h = mg_layer_norm(x, use(t, g->lnf_w), use(t, g->lnf_b), LN_EPS);
    h = to(h, region);
    mg_dtensor *wte = h ? use(t, g->wte) : NULL;
    return wte ? mg_linear(h, wte, NULL) : NULL;
}

mg_dtensor *mg_gpt_head(mg_gpt *g, mg_param_table *t, const mg_dtensor *x) {
    return head(g, t, x, g->region_in);
}

mg_dtensor *mg_gpt_forward_layers(mg_gpt *g, mg_param_table *t, int first, int last,
                                  const mg_dtensor *x) {
    const int L = (int)g->cfg.layers;
    mg_dtensor *h = (mg_dtensor *)x;
    for (int i = first; i < last && h; i++) {
        int k = i == 0 ? 0 : i <= L ? 2 + 12 * (i - 1) : 2 + 12 * L; /* its first parameter */
        if (*mg_gpt_param_slot(g, k) < 0)
            return mg_error_null(MG_ESTATE, "gpt: layer %d is held by another pipeline stage", i);
        h = i == 0 ? mg_gpt_embed(g, t, h, 0) : i <= L ? mg_gpt_block_forward(g, t, i - 1, h)
                                                  : mg_gpt_head(g, t, h);
    }
    return h;
}

mg_dtensor *mg_gpt_forward(mg_gpt *g, mg_param_table *t, const mg_dtensor *ids) {
    mg_dtensor *x = mg_gpt_embed(g, t, ids, 0);
    for (int l = 0; x && l < g->cfg.layers; l++) x = mg_gpt_block_forward(g, t, l, x);
    return x ? mg_gpt_head(g, t, x) : NULL;
}

/* ---- the KV cache of generation ------------------------------------------------ */

/* Generation runs one sequence: every activation is Replicate, and only the
 * parameters keep the plan's placements (tensor parallel: each rank its heads). */
static void replicated(int ndim, mg_placement *p) {
    for (int d = 0; d < ndim; d++) p[d] = MG_REPLICATE;
}

int mg_gpt_cache_make(mg_gpt_cache *c, int64_t layers, int64_t heads, int64_t ctx,
                      int64_t head_dim, const mg_mesh *mesh, const mg_plan *plan) {
    memset(c, 0, sizeof *c);
    mg_placement p[MG_MAX_MESH_DIMS];
    for (int d = 0; d < mesh->ndim; d++) /* the heads as the column-parallel rows split them */
        p[d] = plan->kind[d] == MG_PLAN_TP || plan->kind[d] == MG_PLAN_TP_SP ? MG_SHARD(1)
                                                                           : MG_REPLICATE;
    mg_spec s;
    int rc = mg_spec_make(&s, mesh, p, mesh->ndim, 4, (int64_t[]){1, heads, ctx, head_dim},
                          "kv cache");
    if (rc != MG_OK) return rc;
    c->layers = layers;
    c->k = calloc((size_t)layers, sizeof *c->k);
    c->v = calloc((size_t)layers, sizeof *c->v);
    if (!c->k || !c->v) {
        mg_gpt_cache_release(c);
        return mg_error(MG_ENOMEM, "kv cache: out of memory for %lld blocks", (long long)layers);
    }
    for (int l = 0; l < layers; l++) {
        c->k[l] = mg_dtensor_zeros(&s, NULL);
        c->v[l] = c->k[l] ? mg_dtensor_zeros(&s, NULL) : NULL;
        if (!c->v[l]) {
            mg_gpt_cache_release(c);
            return mg_last_code() ? mg_last_code() : MG_ENOMEM;
        }
    }
    return MG_OK;
}

int mg_gpt_cache_init(mg_gpt_cache *c, const mg_gpt *g, const mg_mesh *mesh, const mg_plan *plan) {
    const int64_t H = g->cfg.heads;
    return mg_gpt_cache_make(c, g->cfg.layers, H, g->cfg.ctx, g->cfg.embd / H, mesh, plan);
}

void mg_gpt_cache_release(mg_gpt_cache *c) {
    for (int l = 0; l < c->layers; l++) {
        if (c->k) mg_dtensor_free(c->k[l]);
        if (c->v) mg_dtensor_free(c->v[l]);
    }
    free(c->k);
    free(c->v);
    memset(c, 0, sizeof *c);
}

void mg_gpt_cache_free(mg_gpt_cache *c, const mg_gpt *g) {
    (void)g; /* the cache knows its blocks */
    mg_gpt_cache_release(c);
}

int mg_gpt_cache_store(mg_gpt_cache *c, int l, mg_dtensor *const *kv, int64_t pos) {
    mg_dtensor *dst[2] = {c->k[l], c->v[l]};
    for (int i = 0; i < 2; i++) {
        mg_spec s = dst[i]->spec;
        s.shape[2] = kv[i]->spec.shape[2];
        mg_dtensor *src = mg_op_redistribute(kv[i], &s); /* at the cache's placements */
        if (!src) return mg_last_code() ? mg_last_code() : MG_ECOMM;
        mg_backend *be = mg_backend_of(dst[i]->local);
        int64_t zero[4] = {0, 0, 0, 0}, at[4] = {0, 0, pos, 0};
        be->iface->copy_block(be->context, src->local, zero, dst[i]->local, at, src->local->shape);
    }
    return MG_OK;
}

mg_dtensor *mg_gpt_forward_cached(mg_gpt *g, mg_param_table *t, mg_gpt_cache *c,
                                  const mg_dtensor *ids, int64_t pos) {
    int64_t n = mg_dtensor_shape(ids)[1];
    if (pos < 0 || n < 1 || (pos == 0 && n > g->cfg.ctx) || (pos > 0 && (n != 1 || pos != c->len)) ||
        pos + n > g->cfg.ctx)
        return mg_error_null(MG_EINVAL, "gpt: a cached forward of %lld tokens at position %lld "
                             "(the cache holds %lld of %lld): give a prompt from position 0 or one "
                             "token after the last", (long long)n, (long long)pos,
                             (long long)c->len, (long long)g->cfg.ctx);
    mg_placement rep[MG_MAX_MESH_DIMS];
    replicated(g->mesh_ndim, rep);
    int prev = mg_set_grad_enabled(0);
    mg_dtensor *x = to(ids, rep);
    if (x) x = embed(g, t, x, pos, rep);
    for (int l = 0; x && l < g->cfg.layers; l++) x = block(g, t, l, x, c, pos, rep, rep);
    if (x && n > 1) x = mg_narrow(x, 1, n - 1, 1); /* only the last position's logits */
    mg_dtensor *logits = x ? head(g, t, x, rep) : NULL;
    mg_set_grad_enabled(prev);
    if (logits) c->len = pos + n;
    return logits;
}

int mg_gpt_layer_costs(const mg_gpt_config *c, mg_layer_cost *out) {
    const double T = (double)c->ctx, C = (double)c->embd, V = (double)c->vocab,
                 H = (double)c->heads;
    const int L = (int)c->layers;
    for (int i = 0; i < L + 2; i++) {
        mg_layer_cost *l = &out[i];
        memset(l, 0, sizeof *l);
        if (i == 0) { /* wte[ids] + wpe: adds forward, scatter-adds into wte backward */
            snprintf(l->name, sizeof l->name, "embedding");
            l->tie = MG_LAYER_WITH_NEXT;
            l->forward_flops = T * C;
            l->backward_weight_flops = 2 * T * C;
            l->out_floats = T * C;
            l->saved_floats = T;
            l->params = (V + T) * C;
            l->gemm_in = c->embd;
            l->gemm_out = c->embd;
        } else if (i <= L) { /* qkv, proj, fc, fc2: 24 T C^2; attention 4 T^2 C; elementwise */
            snprintf(l->name, sizeof l->name, "h.%d", i - 1);
            double gemm = 24 * T * C * C, attn = 4 * T * T * C, elem = 60 * T * C + 5 * H * T * T;
            l->forward_flops = gemm + attn + elem;
            l->backward_input_flops = gemm + 2 * attn + 2 * elem;
            l->backward_weight_flops = gemm + 4 * T * C;
            l->out_floats = T * C;
            /* what its forward leaves in the micro-batch's arena (measured: 25.5 T C
             * at T 64 and 128, C 128 and 256): the outputs of the two norms (2 T C),
             * qkv (3), the heads split (6) and merged (1), attention (1), the
             * projection and residual (2), the MLP (4 + 4 + 1) and residual (1);
             * the norms' statistics (4 T) and attention's log-sum-exp per query
             * and head (H T): no (T, T) matrix is kept (ops_attention.c) */
            l->saved_floats = 25 * T * C + 4 * T + H * T;
            l->params = 12 * C * C + 13 * C;
            l->gemm_in = c->embd;
            l->gemm_out = 4 * c->embd;
        } else { /* ln_f, logits = x wte^T, the cross-entropy */
            snprintf(l->name, sizeof l->name, "head");
            l->tie = MG_LAYER_WITH_PREV;
            l->forward_flops = 2 * T * C * V + 5 * T * C + 5 * T * V;
            l->backward_input_flops = 2 * T * C * V + 10 * T * C + 2 * T * V;
            l->backward_weight_flops = 2 * T * C * V + 2 * T * C;
            l->out_floats = 1;
            l->saved_floats = 2 * T * C + T * V;
            l->params = 2 * C; /* wte is the embedding's */
            l->gemm_in = c->embd;
            l->gemm_out = c->vocab;
        }
    }
    return MG_OK;
}
