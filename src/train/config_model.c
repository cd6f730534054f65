/* config_model.c: the model a training config describes, and the config a
 * checkpoint's model gives (see config.h).
 * Exports: mg_train_config_hidden, mg_train_config_llama, mg_train_config_lm,
 * mg_train_config_from_arch. */
#include <string.h>

#include "train/config.h"

int64_t mg_train_config_hidden(const mg_train_config *c) {
    if (c->model == MG_MODEL_GPT) return 0;
    if (c->hidden > 0) return c->hidden;
    return c->model == MG_MODEL_LLAMA ? mg_llama_hidden(c->embd, c->multiple_of) : 128;
}

mg_llama_config mg_train_config_llama(const mg_train_config *c, int64_t vocab) {
    return (mg_llama_config){.layers = c->layers, .heads = c->heads,
                             .kv_heads = c->kv_heads ? c->kv_heads : c->heads, .embd = c->embd,
                             .ctx = c->ctx, .vocab = vocab, .hidden = mg_train_config_hidden(c),
                             .rope_theta = c->rope_theta, .norm_eps = c->norm_eps,
                             .tied = !c->untied_head};
}

mg_lm_config mg_train_config_lm(const mg_train_config *c, int64_t vocab) {
    mg_lm_config l;
    memset(&l, 0, sizeof l);
    l.kind = c->model;
    l.gpt = (mg_gpt_config){c->layers, c->heads, c->embd, c->ctx, vocab};
    l.llama = mg_train_config_llama(c, vocab);
    return l;
}

int mg_train_config_from_arch(mg_train_config *c, const mg_arch *a) {
    c->model = a->kind == MG_ARCH_GPT ? MG_MODEL_GPT : MG_MODEL_LLAMA;
    c->layers = a->layers;
    c->heads = a->heads;
    c->embd = a->embd;
    c->ctx = a->ctx;
    if (a->kind == MG_ARCH_LLAMA) {
        c->kv_heads = a->kv_heads;
        c->hidden = a->hidden;
        c->rope_theta = a->rope_theta;
        c->norm_eps = a->norm_eps;
        c->untied_head = !a->tied;
    }
    return MG_OK;
}
