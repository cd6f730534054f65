/* optim.h: optimizers on local shards, gradient clipping, LR schedules.
 *
 * The step over a parameter table: each parameter's state tensors have the
 * parameter's own spec, so the update (SGD or AdamW, optim_update.h) runs on
 * each rank's local shard with the backend kernels and needs no communication;
 * data-parallel parameters whose ranks share a node split it (optim_shard.h).
 *
 * Clipping by global norm: the squared norm is the sum over parameters of the
 * local shard's sum of squares divided by the parameter's replication factor
 * (a replica is counted once), all-reduced over the world.
 *
 * LR schedules, for 0-based step s of `total`: a linear warmup
 * lr * (s + 1) / warmup for s < warmup, then constant (lr), or cosine
 * from lr down to lr_min (0 unless given):
 * lr_min + (lr - lr_min) * 0.5 * (1 + cos(pi * (s - warmup) / (total - warmup))).
 *
 * Weight decay: on every parameter, or (opt->decay_2d_only) only on those of
 * two or more dims, as nanoGPT and llama2.c group them: the matrices and
 * embeddings decay, the norms' weights and the biases do not.
 *
 * Exports: mg_optimizer_add_state, mg_optimizer_step, mg_optimizer_decays, mg_grad_norm,
 * mg_grad_norm_exact,
 * mg_clip_grad_norm, mg_clip_grads_to, mg_lr_schedule, mg_lr_at (and optim_update.h). */
#ifndef MG_NN_OPTIM_H
#define MG_NN_OPTIM_H

#include <stdint.h>

#include "dist/comm.h"
#include "nn/optim_update.h"
#include "nn/param.h"

/* Allocates zeroed state tensors with each parameter's spec. */
int mg_optimizer_add_state(mg_optimizer *opt, mg_param_table *t);
/* Collective over the mesh. One update of every parameter that has a gradient
 * (p->grad), learning rate lr. Data-parallel parameters whose ranks share a node
 * are updated 1/k per rank and their gradients summed on the way
 * (optim_shard.h); the result is the same. */
int mg_optimizer_step(mg_optimizer *opt, mg_param_table *t, float lr);
/* 1 when the step applies opt's weight decay to p (see above). */
int mg_optimizer_decays(const mg_optimizer *opt, const mg_param *p);
/* Collective over the mesh of the parameters. The global L2 norm of every
 * p->grad (replicas counted once). */
int mg_grad_norm(mg_param_table *t, double *norm);
/* The deterministic mode's norm (what mg_grad_norm runs in it): every square
 * added exactly over the table's mesh and then over `also` (a pipeline's comm
 * across stages; NULL: none), so the stages' norms add without a rounding. */
int mg_grad_norm_exact(mg_param_table *t, mg_comm *also, double *norm);
/* Scales every gradient by max_norm / (norm + 1e-6) when norm > max_norm
 * (torch.nn.utils.clip_grad_norm_). *norm_out (may be NULL) gets the norm
 * before clipping. */
int mg_clip_grad_norm(mg_param_table *t, double max_norm, double *norm_out);
/* The scaling of mg_clip_grad_norm for a norm found otherwise (a pipeline's:
 * the stages' norms summed). */
void mg_clip_grads_to(mg_param_table *t, double max_norm, double norm);

typedef enum { MG_SCHEDULE_CONSTANT = 0, MG_SCHEDULE_COSINE } mg_schedule_kind;

typedef struct {
    mg_schedule_kind kind;
    double lr;      /* peak learning rate */
    int64_t warmup; /* steps of linear warmup */
    int64_t total;  /* steps of the whole run */
    double lr_min;  /* where the cosine ends */
} mg_lr_schedule;

int mg_schedule_kind_parse(const char *text, mg_schedule_kind *kind);
const char *mg_schedule_kind_name(mg_schedule_kind kind);
/* The learning rate of 0-based step s. */
double mg_lr_at(const mg_lr_schedule *s, int64_t step);

#endif
