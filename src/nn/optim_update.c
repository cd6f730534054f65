/* optim_update.c: SGD and AdamW on one tensor (see optim_update.h). */
#include "nn/optim_update.h"

#include <string.h>

#include "array.h"
#include "backend/backend.h"
#include "status.h"

static const char *const optim_names[] = {"sgd", "adamw"};

int mg_optim_kind_parse(const char *text, mg_optim_kind *kind) {
    int k = 0, st = mg_name_parse(text, optim_names, 2, "optimizer", &k);
    if (st == MG_OK) *kind = (mg_optim_kind)k;
    return st;
}

const char *mg_optim_kind_name(mg_optim_kind kind) { return optim_names[kind]; }

void mg_optimizer_init(mg_optimizer *opt, mg_optim_kind kind, float momentum, float weight_decay) {
    memset(opt, 0, sizeof *opt);
    opt->kind = kind;
    opt->momentum = momentum;
    opt->weight_decay = weight_decay >= 0 ? weight_decay : kind == MG_OPTIM_ADAMW ? 0.01f : 0.0f;
    opt->beta1 = 0.9f;
    opt->beta2 = 0.999f;
    opt->eps = 1e-8f;
}

int mg_optimizer_state_count(const mg_optimizer *opt) {
    if (opt->kind == MG_OPTIM_ADAMW) return 2;
    return opt->momentum != 0.0f ? 1 : 0;
}

const char *mg_optimizer_state_name(const mg_optimizer *opt, int i) {
    if (opt->kind == MG_OPTIM_ADAMW) return i == 0 ? "exp_avg" : "exp_avg_sq";
    return "momentum_buffer";
}

void mg_optimizer_apply(const mg_optimizer *opt, mg_tensor *w, const mg_tensor *g, mg_tensor *const *state,
                        float lr, int decay) {
    mg_backend *be = mg_backend_of(w);
    float wd = decay ? opt->weight_decay : 0.0f;
    if (opt->kind == MG_OPTIM_ADAMW)
        be->iface->adamw_step(be->context, w, g, state[0], state[1], lr, opt->beta1, opt->beta2,
                              opt->eps, wd, opt->step);
    else
        be->iface->sgd_step(be->context, w, g, opt->momentum != 0.0f ? state[0] : NULL, lr,
                            opt->momentum, wd, opt->step == 1);
    mg_backend_bf16_weights_changed(); /* the bf16 GEMMs cast w again */
}
