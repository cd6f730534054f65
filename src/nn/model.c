/* model.c: Linear, the MLP and the permute-MLP, as lists of layers, and the
 * language models' entries (see model.h). model_lm.c holds the rest of
 * theirs and calls into this file, never the reverse: what is asked of a
 * whole model here goes to gpt.h or llama.h directly. */
#include "nn/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "array.h"
#include "dist/mesh.h"
#include "nn/recompute.h"
#include "status.h"

static const char *const model_names[] = {"mlp", "permute-mlp", "gpt", "llama"};

int mg_model_kind_parse(const char *text, mg_model_kind *kind) {
    int k = 0, st = mg_name_parse(text, model_names, 4, "model", &k);
    if (st == MG_OK) *kind = (mg_model_kind)k;
    return st;
}

const char *mg_model_kind_name(mg_model_kind kind) { return model_names[kind]; }

int mg_model_kind_is_lm(mg_model_kind kind) {
    return kind == MG_MODEL_GPT || kind == MG_MODEL_LLAMA;
}

int mg_linear_module_init(mg_linear_module *m, mg_param_table *t, const mg_mesh *mesh,
                          const mg_plan *plan, int layer, const char *name, int64_t in, int64_t out,
                          uint64_t seed) {
    mg_placement ws[MG_MAX_MESH_DIMS], wu[MG_MAX_MESH_DIMS], bs[MG_MAX_MESH_DIMS],
        bu[MG_MAX_MESH_DIMS];
    mg_plan_linear(plan, layer, ws, wu, bs, bu);
    float bound = 1.0f / sqrtf((float)in); /* torch.nn.Linear.reset_parameters */
    char pname[MG_PARAM_NAME_MAX];
    int64_t wshape[2] = {out, in}, bshape[1] = {out};
    m->in = in;
    m->out = out;
    snprintf(pname, sizeof pname, "%s.weight", name);
    m->weight = mg_params_add(t, mesh, pname, 2, wshape, ws, wu, seed, -bound, bound);
    if (m->weight < 0) return m->weight;
    snprintf(pname, sizeof pname, "%s.bias", name);
    m->bias = mg_params_add(t, mesh, pname, 1, bshape, bs, bu, seed, -bound, bound);
    if (m->bias < 0) return m->bias;
    return MG_OK;
}

mg_dtensor *mg_linear_module_forward(mg_linear_module *m, mg_param_table *t, const mg_dtensor *x) {
    mg_dtensor *w = mg_params_use(t, m->weight);
    if (!w) return NULL;
    mg_dtensor *b = mg_params_use(t, m->bias);
    if (!b) return NULL;
    return mg_linear(x, w, b);
}

/* Layer i's name: fc<i+1> (mlp), col then fc<i> (permute-mlp). */
static void layer_name(const mg_model *m, int i, char *buf, size_t len) {
    if (m->kind == MG_MODEL_PERMUTE_MLP) {
        if (i == 0) snprintf(buf, len, "col");
        else snprintf(buf, len, "fc%d", i);
    } else {
        snprintf(buf, len, "fc%d", i + 1);
    }
}

/* Layer i's (in, out) of config c (depth layers). */
static void layer_widths(const mg_model_config *c, int depth, int i, int64_t *in, int64_t *out) {
    int pmlp = c->kind == MG_MODEL_PERMUTE_MLP;
    if (!pmlp && c->widths) {
        *in = c->widths[i];
        *out = c->widths[i + 1];
    } else {
        *in = i == 0 ? (pmlp ? c->rows : c->rows * c->cols) : i == 1 && pmlp ? c->cols * c->channels
                                                                              : c->hidden;
        *out = i == depth - 1 ? c->classes : i == 0 && pmlp ? c->channels : c->hidden;
    }
}

double mg_model_config_params(const mg_model_config *c) {
    int least = c->kind == MG_MODEL_PERMUTE_MLP ? 3 : 2, depth = c->depth ? c->depth : least;
    double n = 0;
    for (int i = 0; i < depth && i < MG_MODEL_MAX_LAYERS; i++) {
        int64_t in, out;
        layer_widths(c, depth, i, &in, &out);
        n += (double)in * (double)out + (double)out;
    }
    return n;
}

int mg_model_build(mg_model *model, const mg_model_config *c, const mg_mesh *mesh,
                   const mg_plan *plan, const unsigned char *held) {
    memset(model, 0, sizeof *model);
    if (mg_model_kind_is_lm(c->kind))
        return mg_error(MG_EINVAL, "model %s takes token data: build it with mg_model_build_lm",
                        model_names[c->kind]);
    if (mg_plan_has_sequence(plan)) {
        char pb[64];
        return mg_error(MG_EINVAL, "parallel plan '%s' splits a sequence, but model %s has none: "
                        "use dp, tp, fsdp or pp (sp and tp+sp are for --model gpt or llama)",
                        mg_plan_format(pb, sizeof pb, plan), model_names[c->kind]);
    }
    int pmlp = c->kind == MG_MODEL_PERMUTE_MLP, least = pmlp ? 3 : 2;
    int depth = c->depth ? c->depth : least;
    if (c->hidden < 1 || c->channels < 1 || c->classes < 1 || c->rows < 1 || c->cols < 1)
        return mg_error(MG_EINVAL, "model: hidden (%lld), channels (%lld) and classes (%lld) must be >= 1",
                        (long long)c->hidden, (long long)c->channels, (long long)c->classes);
    if (depth < least || depth > MG_MODEL_MAX_LAYERS)
        return mg_error(MG_EINVAL, "model: %s has %d to %d linear layers; --depth %d is out of "
                                   "range", mg_model_kind_name(c->kind), least, MG_MODEL_MAX_LAYERS,
                        depth);
    model->kind = c->kind;
    model->sample_shape[0] = c->rows;
    model->sample_shape[1] = c->cols;
    model->hidden = c->hidden;
    model->channels = c->channels;
    model->classes = c->classes;
    model->nlayers = depth;
    model->mesh = mesh;
    model->plan = *plan;
    for (int i = 0; i < depth; i++) { /* widths: in and out of every layer */
        mg_linear_module *l = &model->layer[i];
        l->weight = l->bias = -1;
        layer_widths(c, depth, i, &l->in, &l->out);
        if (l->in < 1 || l->out < 1)
            return mg_error(MG_EINVAL, "model: layer %d is Linear(%lld, %lld): widths must be >= 1",
                            i, (long long)l->in, (long long)l->out);
    }
    int rc = MG_OK;
    mg_param_table *t = &model->params;
    for (int i = 0; i < depth && rc == MG_OK; i++) {
        if (held && !held[i]) continue;
        char name[32];
        layer_name(model, i, name, sizeof name);
        mg_linear_module *l = &model->layer[i];
        t->next_index = 2 * i; /* its parameters' place in the whole model */
        rc = mg_linear_module_init(l, t, mesh, plan, i, name, l->in, l->out, c->seed);
    }
    if (rc != MG_OK) mg_model_free(model);
    return rc;
}

int mg_model_init(mg_model *model, mg_model_kind kind, const mg_mesh *mesh, const mg_plan *plan,
                  int64_t rows, int64_t cols, int64_t hidden, int64_t channels, int64_t classes,
                  uint64_t seed) {
    mg_model_config c = {.kind = kind, .rows = rows, .cols = cols, .hidden = hidden,
                         .channels = channels, .classes = classes, .seed = seed};
    return mg_model_build(model, &c, mesh, plan, NULL);
}

int mg_model_init_gpt(mg_model *model, const mg_mesh *mesh, const mg_plan *plan,
                      const mg_gpt_config *cfg, uint64_t seed) {
    return mg_model_build_gpt(model, mesh, plan, cfg, seed, NULL);
}

int mg_model_build_gpt(mg_model *model, const mg_mesh *mesh, const mg_plan *plan,
                       const mg_gpt_config *cfg, uint64_t seed, const unsigned char *held) {
    memset(model, 0, sizeof *model);
    model->kind = MG_MODEL_GPT;
    model->classes = cfg->vocab;
    model->nlayers = (int)cfg->layers + 2; /* the embedding, the blocks, the head */
    model->mesh = mesh;
    model->plan = *plan;
    int rc = mg_gpt_init_held(&model->gpt, &model->params, mesh, plan, cfg, seed, held);
    if (rc != MG_OK) mg_params_free(&model->params);
    return rc;
}

void mg_model_free(mg_model *model) {
    if (model->kind == MG_MODEL_GPT) mg_gpt_free(&model->gpt);
    if (model->kind == MG_MODEL_LLAMA) mg_llama_free(&model->llama);
    mg_params_free(&model->params);
}

int mg_model_set_recompute(mg_model *model, mg_recompute_mode mode) {
    if (model->kind == MG_MODEL_GPT) {
        model->gpt.recompute = mode;
        return MG_OK;
    }
    if (model->kind == MG_MODEL_LLAMA) {
        model->llama.recompute = mode;
        return MG_OK;
    }
    if (mode == MG_RECOMPUTE_NONE) return MG_OK;
    return mg_error(MG_EINVAL, "recompute %s: model %s has no blocks to recompute (--model gpt "
                    "and llama have): use recompute none", mg_recompute_mode_name(mode),
                    mg_model_kind_name(model->kind));
}

mg_dtensor *mg_model_forward_layers(mg_model *model, int first, int last, const mg_dtensor *x) {
    mg_param_table *t = &model->params;
    if (model->kind == MG_MODEL_GPT) return mg_gpt_forward_layers(&model->gpt, t, first, last, x);
    if (model->kind == MG_MODEL_LLAMA)
        return mg_llama_forward_layers(&model->llama, t, first, last, x);
    const int64_t R = model->sample_shape[0], C = model->sample_shape[1];
    const int pmlp = model->kind == MG_MODEL_PERMUTE_MLP;
    mg_dtensor *h = (mg_dtensor *)x;
    for (int i = first; i < last && h; i++) {
        mg_linear_module *l = &model->layer[i];
        if (l->weight < 0)
            return mg_error_null(MG_ESTATE, "model: layer %d is held by another pipeline stage", i);
        const int64_t B = mg_dtensor_shape(h)[0];
        if (i == 0 && pmlp) {
            static const int perm[3] = {0, 2, 1};
            h = mg_permute(h, perm);                       // h: (B, C, R) columns
        } else if (i == 0 && mg_dtensor_ndim(h) == 3) {
            h = mg_reshape(h, 2, (int64_t[]){B, R * C});   // h: (B, R*C)
        }
        if (h) h = mg_linear_module_forward(l, t, h);      // h: (B, out) or (B, C, Ch)
        if (h && i + 1 < model->nlayers) h = mg_relu(h);
        if (h && i == 0 && pmlp) h = mg_reshape(h, 2, (int64_t[]){B, C * model->channels});
    }
    return h;
}

mg_dtensor *mg_model_forward(mg_model *model, const mg_dtensor *x) {
    return mg_model_forward_layers(model, 0, model->nlayers, x); // (B, K) or (B, T, V)
}

int mg_model_param_count(const mg_model *model) {
    return model->kind == MG_MODEL_GPT     ? mg_gpt_param_total(&model->gpt.cfg)
           : model->kind == MG_MODEL_LLAMA ? mg_llama_param_total(&model->llama.cfg)
                                           : 2 * model->nlayers;
}

mg_param *mg_model_param(mg_model *model, int k, mg_model_param_info *info) {
    if (mg_model_kind_is_lm(model->kind)) {
        int gpt = model->kind == MG_MODEL_GPT;
        if (info) {
            mg_gpt_param_desc d;
            if (gpt) mg_gpt_param_describe(&model->gpt.cfg, k, &d);
            else mg_llama_param_describe(&model->llama.cfg, k, &d);
            memset(info, 0, sizeof *info);
            snprintf(info->name, sizeof info->name, "%s", d.name);
            info->ndim = d.ndim;
            info->shape[0] = d.shape[0];
            info->shape[1] = d.shape[1];
            info->mesh_ndim = model->plan.ndim;
            mg_plan_gpt_param(&model->plan, d.role, info->store, NULL);
        }
        int idx = gpt ? *mg_gpt_param_slot(&model->gpt, k) : *mg_llama_param_slot(&model->llama, k);
        return idx >= 0 ? &model->params.p[idx] : NULL;
    }
    int i = k / 2, bias = k % 2;
    mg_linear_module *l = &model->layer[i];
    if (info) {
        memset(info, 0, sizeof *info);
        char name[32];
        layer_name(model, i, name, sizeof name);
        snprintf(info->name, sizeof info->name, "%s.%s", name, bias ? "bias" : "weight");
        info->ndim = bias ? 1 : 2;
        info->shape[0] = l->out;
        info->shape[1] = l->in;
        info->mesh_ndim = model->plan.ndim;
        if (bias) mg_plan_linear(&model->plan, i, NULL, NULL, info->store, NULL);
        else mg_plan_linear(&model->plan, i, info->store, NULL, NULL, NULL);
    }
    int idx = bias ? l->bias : l->weight;
    return idx >= 0 ? &model->params.p[idx] : NULL;
}

int64_t mg_model_numel(const mg_model *model) {
    if (model->kind == MG_MODEL_GPT) return mg_gpt_param_count(&model->gpt.cfg);
    if (model->kind == MG_MODEL_LLAMA) return mg_llama_param_count(&model->llama.cfg);
    int64_t n = 0;
    for (int i = 0; i < model->nlayers; i++) n += (model->layer[i].in + 1) * model->layer[i].out;
    return n;
}

int mg_model_layer_costs(const mg_model *model, mg_layer_cost *out) {
    if (model->kind == MG_MODEL_GPT) return mg_gpt_layer_costs(&model->gpt.cfg, out);
    if (model->kind == MG_MODEL_LLAMA) return mg_llama_layer_costs(&model->llama.cfg, out);
    int pmlp = model->kind == MG_MODEL_PERMUTE_MLP;
    for (int i = 0; i < model->nlayers; i++) {
        const mg_linear_module *l = &model->layer[i];
        int rc = mg_layer_costs_mlp((int64_t[]){l->in, l->out}, 2, &out[i]);
        if (rc != MG_OK) return rc;
        layer_name(model, i, out[i].name, sizeof out[i].name);
        double uses = i == 0 && pmlp ? (double)model->sample_shape[1] : 1.0; /* per column */
        mg_layer_cost *c = &out[i];
        c->forward_flops *= uses;
        c->backward_input_flops = i == 0 ? 0 : 2.0 * (double)l->in * (double)l->out + (double)l->out;
        c->backward_weight_flops *= uses;
        c->out_floats *= uses;
        c->saved_floats = uses * (double)(l->in + l->out);
    }
    return MG_OK;
}
