/* llama.c: the Llama's configuration, its checks, its parameters (names,
 * shapes, init, placements) and its pipeline layers' costs (see llama.h).
 * The forward and the KV cache are llama_forward.c's. */
#include "nn/llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/mesh.h"
#include "status.h"

#define INIT_STD 0.02f
#define BLOCK_PARAMS 9

int64_t mg_llama_hidden(int64_t embd, int64_t multiple_of) {
    int64_t h = 2 * 4 * embd / 3, m = multiple_of > 0 ? multiple_of : 1;
    return m * ((h + m - 1) / m);
}

int64_t mg_llama_param_count(const mg_llama_config *c) {
    const int64_t C = c->embd, D = c->heads > 0 ? C / c->heads : 0;
    int64_t block = 2 * C + 2 * C * c->heads * D + 2 * C * c->kv_heads * D + 3 * C * c->hidden;
    return (c->tied ? 1 : 2) * c->vocab * C + c->layers * block + C;
}

int mg_llama_check(const mg_llama_config *c, const mg_plan *plan, const mg_mesh *mesh) {
    if (c->layers < 1 || c->heads < 1 || c->kv_heads < 1 || c->embd < 1 || c->ctx < 1 ||
        c->vocab < 1 || c->hidden < 1)
        return mg_error(MG_EINVAL, "llama: layers (%lld), heads (%lld), kv-heads (%lld), embd "
                        "(%lld), ctx (%lld), hidden (%lld) and vocabulary (%lld) must all be >= 1",
                        (long long)c->layers, (long long)c->heads, (long long)c->kv_heads,
                        (long long)c->embd, (long long)c->ctx, (long long)c->hidden,
                        (long long)c->vocab);
    /* sizes reach int code (a parameter's index is 3 + 9 x layers) and products */
    const int64_t most = INT32_MAX;
    if (c->layers > (most - 3) / BLOCK_PARAMS || c->heads > most || c->embd > most ||
        c->ctx > most || c->vocab > most || c->hidden > most)
        return mg_error(MG_EINVAL, "llama: layers (%lld), heads (%lld), embd (%lld), ctx (%lld), "
                        "hidden (%lld) or vocabulary (%lld) is too large: each must be <= %lld "
                        "(layers <= %lld)", (long long)c->layers, (long long)c->heads,
                        (long long)c->embd, (long long)c->ctx, (long long)c->hidden,
                        (long long)c->vocab, (long long)most, (long long)(most - 3) / BLOCK_PARAMS);
    double C = (double)c->embd, F = (double)c->hidden,
           params = 2.0 * (double)c->vocab * C + (double)c->layers * (4 * C * C + 3 * C * F);
    if (params > 9007199254740992.0)
        return mg_error(MG_EINVAL, "llama: %lld layers of embd %lld and hidden %lld make %.3g "
                        "parameters, more than any machine holds: give a smaller --layers, "
                        "--embd or --hidden", (long long)c->layers, (long long)c->embd,
                        (long long)c->hidden, params);
    if (c->embd % c->heads != 0)
        return mg_error(MG_EINVAL, "llama: --heads %lld does not divide --embd %lld: each head "
                        "takes embd / heads channels (e.g. --heads 4 --embd 128)",
                        (long long)c->heads, (long long)c->embd);
    if ((c->embd / c->heads) % 2 != 0)
        return mg_error(MG_EINVAL, "llama: the head dim embd / heads = %lld is odd, and rope "
                        "turns pairs of channels: give an --embd that is an even multiple of "
                        "--heads (e.g. --heads 4 --embd 128)", (long long)(c->embd / c->heads));
    if (c->heads % c->kv_heads != 0)
        return mg_error(MG_EINVAL, "llama: --kv-heads %lld does not divide --heads %lld: each k, v "
                        "head serves heads / kv-heads query heads (e.g. --heads 8 --kv-heads 2)",
                        (long long)c->kv_heads, (long long)c->heads);
    if (!(c->rope_theta > 0) || !isfinite(c->rope_theta) || !(c->norm_eps > 0) ||
        !isfinite(c->norm_eps))
        return mg_error(MG_EINVAL, "llama: --rope-theta %g and --norm-eps %g must be finite and "
                        "above 0 (llama2.c's: 10000 and 1e-5)", c->rope_theta, c->norm_eps);
    int tp = mg_plan_tensor_degree(plan, mesh), sp = mg_plan_sequence_degree(plan, mesh);
    if (c->kv_heads % tp != 0)
        return mg_error(MG_EINVAL, "llama: tensor-parallel degree %d cannot split --kv-heads %lld "
                        "(each rank takes whole k, v heads and the query heads they serve): "
                        "give --kv-heads a multiple of %d, or a tp mesh dim that divides %lld",
                        tp, (long long)c->kv_heads, tp, (long long)c->kv_heads);
    if (c->vocab < tp)
        return mg_error(MG_EINVAL, "llama: tensor-parallel degree %d is larger than the "
                        "vocabulary (%lld): every rank needs rows of the embedding", tp,
                        (long long)c->vocab);
    if (c->ctx < sp)
        return mg_error(MG_EINVAL, "llama: sequence-parallel degree %d is larger than --ctx %lld: "
                        "every rank needs positions of the sequence", sp, (long long)c->ctx);
    return MG_OK;
}

int mg_llama_param_total(const mg_llama_config *c) {
    return 2 + BLOCK_PARAMS * (int)c->layers + (c->tied ? 0 : 1);
}

int mg_llama_param_layer(const mg_llama_config *c, int k) {
    int blocks = BLOCK_PARAMS * (int)c->layers;
    return k == 0 ? 0 : k < 1 + blocks ? 1 + (k - 1) / BLOCK_PARAMS : (int)c->layers + 1;
}

int mg_llama_layer_param(const mg_llama_config *c, int layer) {
    if (layer <= 0) return 0;
    if (layer <= c->layers + 1) return 1 + BLOCK_PARAMS * (layer - 1);
    return mg_llama_param_total(c);
}

/* A block's nine parameters, in the order of mg_llama_block's fields. */
static const struct {
    const char *name;
    mg_gpt_role role;
    char rows, cols; /* 'C' embd, 'Q' heads x D, 'K' kv heads x D, 'F' hidden, 0 none */
    char init;       /* '1' (a norm), 'n' (normal), 'r' (scaled: w3 and wo) */
} block_params[BLOCK_PARAMS] = {
    {"attention_norm.weight", MG_GPT_REPLICATED, 'C', 0, '1'},
    {"attention.wq.weight", MG_GPT_COLUMN, 'Q', 'C', 'n'},
    {"attention.wk.weight", MG_GPT_COLUMN, 'K', 'C', 'n'},
    {"attention.wv.weight", MG_GPT_COLUMN, 'K', 'C', 'n'},
    {"attention.wo.weight", MG_GPT_ROW, 'C', 'Q', 'r'},
    {"ffn_norm.weight", MG_GPT_REPLICATED, 'C', 0, '1'},
    {"feed_forward.w1.weight", MG_GPT_COLUMN, 'F', 'C', 'n'},
    {"feed_forward.w2.weight", MG_GPT_ROW, 'C', 'F', 'n'},
    {"feed_forward.w3.weight", MG_GPT_COLUMN, 'F', 'C', 'r'},
};

static int64_t size_of(const mg_llama_config *c, char what) {
    const int64_t D = c->embd / c->heads;
    return what == 'C' ? c->embd : what == 'Q' ? c->heads * D : what == 'K' ? c->kv_heads * D
                                                                             : c->hidden;
}

void mg_llama_param_describe(const mg_llama_config *c, int k, mg_gpt_param_desc *d) {
    const mg_param_init normal = {MG_INIT_NORMAL, 0.0f, INIT_STD}, one = {MG_INIT_CONSTANT, 1, 0},
                        scaled = {MG_INIT_NORMAL, 0.0f, INIT_STD / sqrtf(2.0f * (float)c->layers)};
    const int blocks = BLOCK_PARAMS * (int)c->layers;
    memset(d, 0, sizeof *d);
    if (k == 0 || k > blocks) { /* tok_embeddings, norm, output */
        int norm = k == 1 + blocks;
        snprintf(d->name, sizeof d->name, "%s",
                 k == 0 ? "tok_embeddings.weight" : norm ? "norm.weight" : "output.weight");
        d->ndim = norm ? 1 : 2;
        d->shape[0] = norm ? c->embd : c->vocab;
        d->shape[1] = norm ? 0 : c->embd;
        d->role = k == 0 ? MG_GPT_EMBEDDING : norm ? MG_GPT_REPLICATED : MG_GPT_COLUMN;
        d->init = norm ? one : normal;
        return;
    }
    int l = (k - 1) / BLOCK_PARAMS, j = (k - 1) % BLOCK_PARAMS;
    snprintf(d->name, sizeof d->name, "layers.%d.%s", l, block_params[j].name);
    d->ndim = block_params[j].cols ? 2 : 1;
    d->shape[0] = size_of(c, block_params[j].rows);
    d->shape[1] = block_params[j].cols ? size_of(c, block_params[j].cols) : 0;
    d->role = block_params[j].role;
    char i = block_params[j].init;
    d->init = i == '1' ? one : i == 'n' ? normal : scaled;
}

int *mg_llama_param_slot(mg_llama *m, int k) {
    const int blocks = BLOCK_PARAMS * (int)m->cfg.layers;
    if (k == 0) return &m->emb;
    if (k > blocks) return k == blocks + 1 ? &m->norm : &m->output;
    _Static_assert(sizeof(mg_llama_block) == BLOCK_PARAMS * sizeof(int),
                   "mg_llama_block: nine indices");
    return (int *)(void *)&m->block[(k - 1) / BLOCK_PARAMS] + (k - 1) % BLOCK_PARAMS;
}

int mg_llama_init_held(mg_llama *m, mg_param_table *t, const mg_mesh *mesh, const mg_plan *plan,
                       const mg_llama_config *cfg, uint64_t seed, const unsigned char *held) {
    memset(m, 0, sizeof *m);
    int rc = mg_llama_check(cfg, plan, mesh);
    if (rc != MG_OK) return rc;
    m->cfg = *cfg;
    m->mesh_ndim = mesh->ndim;
    mg_plan_residual(plan, m->residual);
    mg_plan_region_input(plan, m->region_in);
    m->block = calloc((size_t)cfg->layers, sizeof *m->block);
    if (!m->block)
        return mg_error(MG_ENOMEM, "llama: out of memory for %lld blocks", (long long)cfg->layers);
    int total = mg_llama_param_total(cfg), head = (int)cfg->layers + 1;
    m->output = -1;
    for (int k = 0; k < total; k++) *mg_llama_param_slot(m, k) = -1;
    /* a tied head uses tok_embeddings: a stage with the head and not the embedding holds a copy */
    m->emb_copy = cfg->tied && held && !held[0] && held[head];
    for (int k = 0; k < total; k++) {
        int layer = mg_llama_param_layer(cfg, k);
        if (held && !held[layer] && !(k == 0 && m->emb_copy)) continue;
        mg_gpt_param_desc d;
        mg_llama_param_describe(cfg, k, &d);
        rc = mg_gpt_param_add(t, mesh, plan, k, &d, seed);
        if (rc < 0) {
            mg_llama_free(m);
            return rc;
        }
        *mg_llama_param_slot(m, k) = rc;
    }
    return MG_OK;
}

void mg_llama_free(mg_llama *m) {
    free(m->block);
    m->block = NULL;
}

int mg_llama_layer_costs(const mg_llama_config *c, mg_layer_cost *out) {
    const double T = (double)c->ctx, C = (double)c->embd, V = (double)c->vocab,
                 H = (double)c->heads, F = (double)c->hidden,
                 QD = (double)c->embd, KD = (double)c->kv_heads * (C / H);
    const int L = (int)c->layers;
    for (int i = 0; i < L + 2; i++) {
        mg_layer_cost *l = &out[i];
        memset(l, 0, sizeof *l);
        if (i == 0) { /* tok_embeddings[ids]: a gather forward, scatter-adds backward */
            snprintf(l->name, sizeof l->name, "embedding");
            l->tie = MG_LAYER_WITH_NEXT;
            l->forward_flops = T * C;
            l->backward_weight_flops = T * C;
            l->out_floats = T * C;
            l->saved_floats = T;
            l->params = V * C;
            l->gemm_in = c->embd;
            l->gemm_out = c->embd;
        } else if (i <= L) { /* wq, wk, wv, wo, w1, w2, w3; attention 4 T^2 C; elementwise */
            snprintf(l->name, sizeof l->name, "layers.%d", i - 1);
            double weights = 2 * C * QD + 2 * C * KD + 3 * C * F;
            double gemm = 2 * T * weights, attn = 4 * T * T * C,
                   elem = 40 * T * C + 10 * T * F + 5 * H * T * T;
            l->forward_flops = gemm + attn + elem;
            l->backward_input_flops = gemm + 2 * attn + 2 * elem;
            l->backward_weight_flops = gemm;
            l->out_floats = T * C;
            /* kept for the backward: the two norms' outputs (2 T C), q, k, v as made,
             * turned and laid out by heads (3 (T C + 2 T KD)), attention's output
             * and its merge (2), wo's and the residual (2); w1, w3, silu and the
             * product (4 T F), w2's and the residual (2 T C); the norms' statistics
             * (2 T) and attention's log-sum-exp per query and head (H T) */
            l->saved_floats = 11 * T * C + 6 * T * KD + 4 * T * F + 2 * T + H * T;
            l->params = weights + 2 * C;
            l->gemm_in = c->embd;
            l->gemm_out = c->hidden;
        } else { /* norm, logits = x output^T, the cross-entropy */
            snprintf(l->name, sizeof l->name, "head");
            l->tie = MG_LAYER_WITH_PREV;
            l->forward_flops = 2 * T * C * V + 4 * T * C + 5 * T * V;
            l->backward_input_flops = 2 * T * C * V + 8 * T * C + 2 * T * V;
            l->backward_weight_flops = 2 * T * C * V + T * C;
            l->out_floats = 1;
            l->saved_floats = 2 * T * C + T * V;
            l->params = C + (c->tied ? 0 : V * C); /* a tied head's matrix is the embedding's */
            l->gemm_in = c->embd;
            l->gemm_out = c->vocab;
        }
    }
    return MG_OK;
}
