/* optim.h: optimizers on local shards, gradient clipping, LR schedules.
 *
 * SGD (PyTorch semantics: g += wd * p; buf = g on the first step, else
 * momentum * buf + g; p -= lr * buf) and AdamW (decoupled weight decay
 * p -= lr * wd * p, bias-corrected moments, eps added to sqrt(v_hat); PyTorch
 * defaults betas 0.9/0.999, eps 1e-8, weight decay 0.01). Each parameter's
 * state tensors have the parameter's own spec, so the update runs on each
 * rank's local shard with the backend kernels and needs no communication.
 *
 * Clipping by global norm: the squared norm is the sum over parameters of the
 * local shard's sum of squares divided by the parameter's replication factor
 * (a replica is counted once), all-reduced over the world.
 *
 * LR schedules, for 0-based step s of `total`: a linear warmup
 * lr * (s + 1) / warmup for s < warmup, then constant (lr), or cosine
 * lr * 0.5 * (1 + cos(pi * (s - warmup) / (total - warmup))).
 *
 * Exports: mg_optimizer, mg_optimizer_init/kind_parse/step/apply/state_name,
 * mg_grad_norm, mg_clip_grad_norm, mg_lr_schedule, mg_lr_at. */
#ifndef MG_NN_OPTIM_H
#define MG_NN_OPTIM_H

#include <stdint.h>

#include "nn/param.h"

typedef enum { MG_OPTIM_SGD = 0, MG_OPTIM_ADAMW } mg_optim_kind;

typedef struct {
    mg_optim_kind kind;
    float momentum;     /* SGD */
    float weight_decay;
    float beta1, beta2, eps; /* AdamW */
    int64_t step;       /* updates taken so far */
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
/* Allocates zeroed state tensors with each parameter's spec. */
int mg_optimizer_add_state(mg_optimizer *opt, mg_param_table *t);
/* Collective over the mesh. One update of every parameter that has a gradient
 * (p->grad), learning rate lr. Data-parallel parameters whose ranks share a node
 * are updated 1/k per rank and their gradients summed on the way
 * (optim_shard.h); the result is the same. */
int mg_optimizer_step(mg_optimizer *opt, mg_param_table *t, float lr);
/* The update kernel of one tensor (a parameter's local shard, or a slice of it):
 * w and the state tensors (opt's count of them) updated from gradient g at the
 * optimizer's current step. */
void mg_optimizer_apply(const mg_optimizer *opt, mg_tensor *w, const mg_tensor *g, mg_tensor *const *state,
                        float lr);

/* Collective over the mesh of the parameters. The global L2 norm of every
 * p->grad (replicas counted once). */
int mg_grad_norm(mg_param_table *t, double *norm);
/* Scales every gradient by max_norm / (norm + 1e-6) when norm > max_norm
 * (torch.nn.utils.clip_grad_norm_). *norm_out (may be NULL) gets the norm
 * before clipping. */
int mg_clip_grad_norm(mg_param_table *t, double max_norm, double *norm_out);

typedef enum { MG_SCHEDULE_CONSTANT = 0, MG_SCHEDULE_COSINE } mg_schedule_kind;

typedef struct {
    mg_schedule_kind kind;
    double lr;      /* peak learning rate */
    int64_t warmup; /* steps of linear warmup */
    int64_t total;  /* steps of the whole run */
} mg_lr_schedule;

int mg_schedule_kind_parse(const char *text, mg_schedule_kind *kind);
const char *mg_schedule_kind_name(mg_schedule_kind kind);
/* The learning rate of 0-based step s. */
double mg_lr_at(const mg_lr_schedule *s, int64_t step);

#endif
