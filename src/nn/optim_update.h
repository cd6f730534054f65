/* optim_update.h: the update rule of one tensor: SGD (PyTorch semantics: g +=
 * wd * p; buf = g on the first step, else momentum * buf + g; p -= lr * buf)
 * and AdamW (decoupled weight decay p -= lr * wd * p, bias-corrected moments,
 * eps added to sqrt(v_hat); PyTorch defaults betas 0.9/0.999, eps 1e-8, weight
 * decay 0.01), run by the backend kernels on a local shard or a slice of one.
 * Which parameters are decayed (all, or those of two or more dims: nanoGPT's
 * and llama2.c's rule) is the optimizer's `decay_2d_only`, applied per
 * parameter by the step over a table (optim.h's mg_optimizer_decays).
 * The step over a parameter table is optim.h's; the split step optim_shard.h's.
 *
 * Exports: mg_optim_kind, mg_optimizer, mg_optim_kind_parse/name,
 * mg_optimizer_init, mg_optimizer_state_count/name, mg_optimizer_apply. */
#ifndef MG_NN_OPTIM_UPDATE_H
#define MG_NN_OPTIM_UPDATE_H

#include <stdint.h>

#include "tensor.h"

typedef enum { MG_OPTIM_SGD = 0, MG_OPTIM_ADAMW } mg_optim_kind;

typedef struct {
    mg_optim_kind kind;
    float momentum;     /* SGD */
    float weight_decay;
    float beta1, beta2, eps; /* AdamW */
    int64_t step;       /* updates taken so far */
    int decay_2d_only;  /* 1: weight decay only on parameters of 2 or more dims
                         * (matrices and embeddings; not norms nor biases) */
} mg_optimizer;

/* "sgd" or "adamw"; MG_EINVAL with a message otherwise. */
int mg_optim_kind_parse(const char *text, mg_optim_kind *kind);
const char *mg_optim_kind_name(mg_optim_kind kind);
/* PyTorch defaults for the kind; weight_decay < 0 means the default (0 for SGD,
 * 0.01 for AdamW). */
void mg_optimizer_init(mg_optimizer *opt, mg_optim_kind kind, float momentum, float weight_decay);
/* Number of state tensors per parameter (SGD: 1 if momentum else 0; AdamW: 2)
 * and their names as in PyTorch ("momentum_buffer", "exp_avg", "exp_avg_sq"). */
int mg_optimizer_state_count(const mg_optimizer *opt);
const char *mg_optimizer_state_name(const mg_optimizer *opt, int i);
/* The update kernel of one tensor (a parameter's local shard, or a slice of it):
 * w and the state tensors (opt's count of them) updated from gradient g at the
 * optimizer's current step; with decay 0, no weight decay. The weights' bf16
 * copies are cast again after it. */
void mg_optimizer_apply(const mg_optimizer *opt, mg_tensor *w, const mg_tensor *g, mg_tensor *const *state,
                        float lr, int decay);

#endif
