/* gpt.c: the GPT-2 model on distributed tensors, its init, its forward per
 * block, and the KV-cached forward of generation (see gpt.h). */
#include "nn/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "dist/mesh.h"
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
    if (c->embd % c->heads != 0)
        return mg_error(MG_EINVAL, "gpt: --heads %lld does not divide --embd %lld: each head takes "
                        "embd / heads channels (e.g. --heads 4 --embd 128)", (long long)c->heads,
                        (long long)c->embd);
    if (mg_plan_pp_dim(plan) >= 0)
        return mg_error(MG_EINVAL, "gpt: pipeline parallelism (pp) runs the MLPs only so far: give "
                        "the GPT dp, tp, sp, tp+sp or fsdp (e.g. --parallel dp,tp)");
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

/* One parameter of `role`, `shape`, drawn as `init`; its index or a status. */
static int add(mg_param_table *t, const mg_mesh *mesh, const mg_plan *plan, const char *name,
               mg_gpt_role role, int ndim, int64_t d0, int64_t d1, uint64_t seed,
               mg_param_init init) {
    mg_placement store[MG_MAX_MESH_DIMS], use[MG_MAX_MESH_DIMS];
    mg_plan_gpt_param(plan, role, store, use);
    int64_t shape[2] = {d0, d1};
    return mg_params_add_init(t, mesh, name, ndim, shape, store, use, seed, init);
}

int mg_gpt_init(mg_gpt *g, mg_param_table *t, const mg_mesh *mesh, const mg_plan *plan,
                const mg_gpt_config *cfg, uint64_t seed) {
    memset(g, 0, sizeof *g);
    int rc = mg_gpt_check(cfg, plan, mesh);
    if (rc != MG_OK) return rc;
    g->cfg = *cfg;
    g->mesh_ndim = mesh->ndim;
    mg_plan_residual(plan, g->residual);
    mg_plan_region_input(plan, g->region_in);
    g->block = calloc((size_t)cfg->layers, sizeof *g->block);
    if (!g->block) return mg_error(MG_ENOMEM, "gpt: out of memory for %lld blocks", (long long)cfg->layers);
    const int64_t C = cfg->embd, V = cfg->vocab;
    const mg_param_init normal = {MG_INIT_NORMAL, 0.0f, INIT_STD}, zero = {MG_INIT_CONSTANT, 0, 0},
                        one = {MG_INIT_CONSTANT, 1, 0},
                        resid = {MG_INIT_NORMAL, 0.0f, INIT_STD / sqrtf(2.0f * (float)cfg->layers)};
    const mg_gpt_role E = MG_GPT_EMBEDDING, R = MG_GPT_REPLICATED, COL = MG_GPT_COLUMN, ROW = MG_GPT_ROW;
#define ADD(field, name, role, nd, d0, d1, init)                                   \
    do {                                                                           \
        if ((rc = add(t, mesh, plan, name, role, nd, d0, d1, seed, init)) < 0) goto fail; \
        field = rc;                                                                \
    } while (0)
    ADD(g->wte, "wte", E, 2, V, C, normal);
    ADD(g->wpe, "wpe", R, 2, cfg->ctx, C, normal);
    char n[MG_PARAM_NAME_MAX];
    for (int l = 0; l < cfg->layers; l++) {
        mg_gpt_block *b = &g->block[l];
#define NAME(s) (snprintf(n, sizeof n, "h.%d.%s", l, s), n)
        ADD(b->ln1_w, NAME("ln1.weight"), R, 1, C, 0, one);
        ADD(b->ln1_b, NAME("ln1.bias"), R, 1, C, 0, zero);
        ADD(b->qkv_w, NAME("attn.qkv.weight"), COL, 2, 3 * C, C, normal);
        ADD(b->qkv_b, NAME("attn.qkv.bias"), COL, 1, 3 * C, 0, zero);
        ADD(b->proj_w, NAME("attn.proj.weight"), ROW, 2, C, C, resid);
        ADD(b->proj_b, NAME("attn.proj.bias"), R, 1, C, 0, zero);
        ADD(b->ln2_w, NAME("ln2.weight"), R, 1, C, 0, one);
        ADD(b->ln2_b, NAME("ln2.bias"), R, 1, C, 0, zero);
        ADD(b->fc_w, NAME("mlp.fc.weight"), COL, 2, 4 * C, C, normal);
        ADD(b->fc_b, NAME("mlp.fc.bias"), COL, 1, 4 * C, 0, zero);
        ADD(b->fc2_w, NAME("mlp.fc2.weight"), ROW, 2, C, 4 * C, resid);
        ADD(b->fc2_b, NAME("mlp.fc2.bias"), R, 1, C, 0, zero);
#undef NAME
    }
    ADD(g->lnf_w, "ln_f.weight", R, 1, C, 0, one);
    ADD(g->lnf_b, "ln_f.bias", R, 1, C, 0, zero);
#undef ADD
    return MG_OK;
fail:
    mg_gpt_free(g);
    return rc;
}

void mg_gpt_free(mg_gpt *g) {
    free(g->block);
    g->block = NULL;
}

/* ---- forward ------------------------------------------------------------------ */

/* x at placements p (no-op when it is there); recorded for autograd. */
static mg_dtensor *to(const mg_dtensor *x, const mg_placement *p) {
    if (!x) return NULL;
    mg_spec s;
    if (mg_spec_make(&s, x->spec.mesh, p, x->spec.mesh->ndim, x->spec.ndim, x->spec.shape,
                     "gpt activation") != MG_OK)
        return NULL;
    return mg_op_redistribute(x, &s);
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

static int cache_store(mg_gpt_cache *c, int l, mg_dtensor *const *kv, int64_t pos);

/* Block l; with a cache: store this block's k, v at [pos, pos + n) and attend
 * to the cache (pos > 0: one query against positions 0..pos). */
static mg_dtensor *block(mg_gpt *g, mg_param_table *t, int l, const mg_dtensor *x,
                         mg_gpt_cache *c, int64_t pos, const mg_placement *resid,
                         const mg_placement *region) {
    const mg_gpt_block *b = &g->block[l];
    mg_dtensor *h = mg_layer_norm(x, use(t, b->ln1_w), use(t, b->ln1_b), LN_EPS);
    h = to(h, region);
    mg_dtensor *qkv = h ? mg_linear(h, use(t, b->qkv_w), use(t, b->qkv_b)) : NULL; // (B, n, 3C)
    mg_dtensor *hd[3];
    if (!qkv || split_heads(g, qkv, hd) != MG_OK) return NULL;
    mg_dtensor *a;
    if (!c || pos == 0) {
        if (c && cache_store(c, l, hd + 1, 0) != MG_OK) return NULL;
        a = mg_attention(hd[0], hd[1], hd[2], 1);
    } else {
        if (cache_store(c, l, hd + 1, pos) != MG_OK) return NULL;
        mg_dtensor *k = mg_narrow(c->k[l], 2, 0, pos + 1), *v = k ? mg_narrow(c->v[l], 2, 0, pos + 1) : NULL;
        a = v ? mg_attention(hd[0], k, v, 0) : NULL; /* the cache holds only the past */
    }
    mg_dtensor *y = merge_heads(g, a);
    if (y) y = mg_linear(y, use(t, b->proj_w), use(t, b->proj_b));
    mg_dtensor *r = y ? to(mg_add(x, y), resid) : NULL;
    h = r ? mg_layer_norm(r, use(t, b->ln2_w), use(t, b->ln2_b), LN_EPS) : NULL;
    h = to(h, region);
    if (h) h = mg_linear(h, use(t, b->fc_w), use(t, b->fc_b)); // (B, n, 4C)
    if (h) h = mg_gelu(h);
    if (h) h = mg_linear(h, use(t, b->fc2_w), use(t, b->fc2_b)); // (B, n, C)
    return h ? to(mg_add(r, h), resid) : NULL;
}

mg_dtensor *mg_gpt_block_forward(mg_gpt *g, mg_param_table *t, int l, const mg_dtensor *x) {
    return block(g, t, l, x, NULL, 0, g->residual, g->region_in);
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

int mg_gpt_cache_init(mg_gpt_cache *c, const mg_gpt *g, const mg_mesh *mesh, const mg_plan *plan) {
    memset(c, 0, sizeof *c);
    const int64_t H = g->cfg.heads, D = g->cfg.embd / H, L = g->cfg.layers;
    mg_placement p[MG_MAX_MESH_DIMS];
    for (int d = 0; d < mesh->ndim; d++) /* the heads as the qkv rows split them */
        p[d] = plan->kind[d] == MG_PLAN_TP || plan->kind[d] == MG_PLAN_TP_SP ? MG_SHARD(1)
                                                                           : MG_REPLICATE;
    mg_spec s;
    int rc = mg_spec_make(&s, mesh, p, mesh->ndim, 4, (int64_t[]){1, H, g->cfg.ctx, D}, "kv cache");
    if (rc != MG_OK) return rc;
    c->k = calloc((size_t)L, sizeof *c->k);
    c->v = calloc((size_t)L, sizeof *c->v);
    if (!c->k || !c->v) {
        mg_gpt_cache_free(c, g);
        return mg_error(MG_ENOMEM, "gpt: out of memory for the kv cache");
    }
    for (int l = 0; l < L; l++) {
        c->k[l] = mg_dtensor_zeros(&s, NULL);
        c->v[l] = c->k[l] ? mg_dtensor_zeros(&s, NULL) : NULL;
        if (!c->v[l]) {
            mg_gpt_cache_free(c, g);
            return mg_last_code() ? mg_last_code() : MG_ENOMEM;
        }
    }
    return MG_OK;
}

void mg_gpt_cache_free(mg_gpt_cache *c, const mg_gpt *g) {
    for (int l = 0; l < g->cfg.layers; l++) {
        if (c->k) mg_dtensor_free(c->k[l]);
        if (c->v) mg_dtensor_free(c->v[l]);
    }
    free(c->k);
    free(c->v);
    memset(c, 0, sizeof *c);
}

/* kv[0], kv[1] (1, H, n, D) into block l's cache at positions [pos, pos + n) */
static int cache_store(mg_gpt_cache *c, int l, mg_dtensor *const *kv, int64_t pos) {
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
