/* model_lm.c: the language models of model.h (the GPT, gpt.h; the Llama,
 * llama.h) behind one set of calls that dispatch on the kind: checks, sizes,
 * pipeline layers and costs, building, the embedding's copy of a pipeline's
 * last stage, and the KV-cached forward of generation. Exports the mg_lm_*
 * functions and mg_model_build_lm, mg_model_lm_config, mg_model_layer_param,
 * mg_model_embedding_copy, mg_model_cache_init and mg_model_forward_cached (model.h). */
#include <string.h>

#include "nn/model.h"
#include "status.h"

static int is_gpt(const mg_lm_config *c) { return c->kind == MG_MODEL_GPT; }

int mg_lm_check(const mg_lm_config *c, const mg_plan *plan, const mg_mesh *mesh) {
    if (!mg_model_kind_is_lm(c->kind))
        return mg_error(MG_EINVAL, "model %s is not a language model (gpt or llama)",
                        mg_model_kind_name(c->kind));
    return is_gpt(c) ? mg_gpt_check(&c->gpt, plan, mesh) : mg_llama_check(&c->llama, plan, mesh);
}

int64_t mg_lm_ctx(const mg_lm_config *c) { return is_gpt(c) ? c->gpt.ctx : c->llama.ctx; }
int64_t mg_lm_vocab(const mg_lm_config *c) { return is_gpt(c) ? c->gpt.vocab : c->llama.vocab; }
int64_t mg_lm_layers(const mg_lm_config *c) { return is_gpt(c) ? c->gpt.layers : c->llama.layers; }

int64_t mg_lm_param_count(const mg_lm_config *c) {
    return is_gpt(c) ? mg_gpt_param_count(&c->gpt) : mg_llama_param_count(&c->llama);
}

int mg_lm_layer_costs(const mg_lm_config *c, mg_layer_cost *out) {
    return is_gpt(c) ? mg_gpt_layer_costs(&c->gpt, out) : mg_llama_layer_costs(&c->llama, out);
}

int mg_model_build_lm(mg_model *model, const mg_mesh *mesh, const mg_plan *plan,
                      const mg_lm_config *c, uint64_t seed, const unsigned char *held) {
    if (is_gpt(c)) return mg_model_build_gpt(model, mesh, plan, &c->gpt, seed, held);
    memset(model, 0, sizeof *model);
    if (c->kind != MG_MODEL_LLAMA) return mg_lm_check(c, plan, mesh);
    model->kind = MG_MODEL_LLAMA;
    model->classes = c->llama.vocab;
    model->nlayers = (int)c->llama.layers + 2; /* the embedding, the blocks, the head */
    model->mesh = mesh;
    model->plan = *plan;
    int rc = mg_llama_init_held(&model->llama, &model->params, mesh, plan, &c->llama, seed, held);
    if (rc != MG_OK) mg_params_free(&model->params);
    return rc;
}

mg_lm_config mg_model_lm_config(const mg_model *model) {
    mg_lm_config c;
    memset(&c, 0, sizeof c);
    c.kind = model->kind;
    if (model->kind == MG_MODEL_GPT) c.gpt = model->gpt.cfg;
    if (model->kind == MG_MODEL_LLAMA) c.llama = model->llama.cfg;
    return c;
}

int mg_model_layer_param(const mg_model *model, int layer) {
    if (model->kind == MG_MODEL_LLAMA) return mg_llama_layer_param(&model->llama.cfg, layer);
    const int L = (int)model->gpt.cfg.layers; /* wte, wpe; twelve a block; ln_f's two */
    return layer <= 0 ? 0 : layer <= L + 1 ? 2 + 12 * (layer - 1) : 4 + 12 * L;
}

int mg_model_embedding_copy(const mg_model *model) {
    if (model->kind == MG_MODEL_GPT) return model->gpt.wte_copy ? model->gpt.wte : -1;
    if (model->kind == MG_MODEL_LLAMA) return model->llama.emb_copy ? model->llama.emb : -1;
    return -1;
}

int mg_model_cache_init(mg_model *model, mg_gpt_cache *c, const mg_mesh *mesh,
                        const mg_plan *plan) {
    if (model->kind == MG_MODEL_LLAMA) return mg_llama_cache_init(c, &model->llama, mesh, plan);
    if (model->kind == MG_MODEL_GPT) return mg_gpt_cache_init(c, &model->gpt, mesh, plan);
    return mg_error(MG_EINVAL, "model %s has no KV cache: generation takes gpt or llama",
                    mg_model_kind_name(model->kind));
}

mg_dtensor *mg_model_forward_cached(mg_model *model, mg_gpt_cache *c, const mg_dtensor *ids,
                                    int64_t pos) {
    if (model->kind == MG_MODEL_LLAMA)
        return mg_llama_forward_cached(&model->llama, &model->params, c, ids, pos);
    return mg_gpt_forward_cached(&model->gpt, &model->params, c, ids, pos);
}
