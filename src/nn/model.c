/* model.c: Linear, the MLP and the permute-MLP, and the GPT's entry (see model.h). */
#include "nn/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "array.h"
#include "dist/mesh.h"
#include "status.h"

static const char *const model_names[] = {"mlp", "permute-mlp", "gpt"};

int mg_model_kind_parse(const char *text, mg_model_kind *kind) {
    int k = mg_name_find(text, model_names, 3);
    if (k < 0) return mg_error(MG_EINVAL, "unknown model '%s'; use mlp, permute-mlp or gpt", text);
    *kind = (mg_model_kind)k;
    return MG_OK;
}

const char *mg_model_kind_name(mg_model_kind kind) { return model_names[kind]; }

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

int mg_model_init(mg_model *model, mg_model_kind kind, const mg_mesh *mesh, const mg_plan *plan,
                  int64_t rows, int64_t cols, int64_t hidden, int64_t channels, int64_t classes,
                  uint64_t seed) {
    memset(model, 0, sizeof *model);
    if (kind == MG_MODEL_GPT)
        return mg_error(MG_EINVAL, "model gpt takes token data: build it with mg_model_init_gpt");
    if (mg_plan_has_sequence(plan)) {
        char pb[64];
        return mg_error(MG_EINVAL, "parallel plan '%s' splits a sequence, but model %s has none: "
                        "use dp, tp or fsdp (sp and tp+sp are for --model gpt)",
                        mg_plan_format(pb, sizeof pb, plan), model_names[kind]);
    }
    if (hidden < 1 || channels < 1 || classes < 1 || rows < 1 || cols < 1)
        return mg_error(MG_EINVAL, "model: hidden (%lld), channels (%lld) and classes (%lld) must be >= 1",
                        (long long)hidden, (long long)channels, (long long)classes);
    model->kind = kind;
    model->sample_shape[0] = rows;
    model->sample_shape[1] = cols;
    model->hidden = hidden;
    model->channels = channels;
    model->classes = classes;
    int rc;
    mg_param_table *t = &model->params;
    if (kind == MG_MODEL_MLP) {
        model->nlayers = 2;
        rc = mg_linear_module_init(&model->layer[0], t, mesh, plan, 0, "fc1", rows * cols, hidden, seed);
        if (rc == MG_OK)
            rc = mg_linear_module_init(&model->layer[1], t, mesh, plan, 1, "fc2", hidden, classes, seed);
    } else {
        model->nlayers = 3;
        /* the columns of x are the rows of x^T: Linear(rows, C) per column */
        rc = mg_linear_module_init(&model->layer[0], t, mesh, plan, 0, "col", rows, channels, seed);
        if (rc == MG_OK)
            rc = mg_linear_module_init(&model->layer[1], t, mesh, plan, 1, "fc1", cols * channels,
                                       hidden, seed);
        if (rc == MG_OK)
            rc = mg_linear_module_init(&model->layer[2], t, mesh, plan, 2, "fc2", hidden, classes, seed);
    }
    if (rc != MG_OK) mg_model_free(model);
    return rc;
}

int mg_model_init_gpt(mg_model *model, const mg_mesh *mesh, const mg_plan *plan,
                      const mg_gpt_config *cfg, uint64_t seed) {
    memset(model, 0, sizeof *model);
    model->kind = MG_MODEL_GPT;
    model->classes = cfg->vocab;
    int rc = mg_gpt_init(&model->gpt, &model->params, mesh, plan, cfg, seed);
    if (rc != MG_OK) mg_params_free(&model->params);
    return rc;
}

void mg_model_free(mg_model *model) {
    if (model->kind == MG_MODEL_GPT) mg_gpt_free(&model->gpt);
    mg_params_free(&model->params);
}

mg_dtensor *mg_model_forward(mg_model *model, const mg_dtensor *x) {
    mg_param_table *t = &model->params;
    if (model->kind == MG_MODEL_GPT) return mg_gpt_forward(&model->gpt, t, x); // logits: (B, T, V)
    const int64_t B = mg_dtensor_shape(x)[0];
    const int64_t R = model->sample_shape[0], C = model->sample_shape[1];
    mg_dtensor *h;
    if (model->kind == MG_MODEL_MLP) {
        int64_t flat[2] = {B, R * C};
        h = mg_reshape(x, 2, flat);                          // h: (B, R*C)
        if (h) h = mg_linear_module_forward(&model->layer[0], t, h); // h: (B, H)
        if (h) h = mg_relu(h);
        if (h) h = mg_linear_module_forward(&model->layer[1], t, h); // logits: (B, K)
        return h;
    }
    static const int perm[3] = {0, 2, 1};
    int64_t flat[2] = {B, C * model->channels};
    h = mg_permute(x, perm);                                     // h: (B, C, R) columns
    if (h) h = mg_linear_module_forward(&model->layer[0], t, h); // h: (B, C, Ch)
    if (h) h = mg_relu(h);
    if (h) h = mg_reshape(h, 2, flat);                           // h: (B, C*Ch)
    if (h) h = mg_linear_module_forward(&model->layer[1], t, h); // h: (B, H)
    if (h) h = mg_relu(h);
    if (h) h = mg_linear_module_forward(&model->layer[2], t, h); // logits: (B, K)
    return h;
}
