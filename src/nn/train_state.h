/* train_state.h: a training run as a checkpoint (DESIGN.md "Formats:
 * Checkpoint", docs/CHECKPOINTS.md). The entries are params/<name> for every
 * parameter and optim/<name>/<state> for each optimizer state tensor
 * (PyTorch's names: exp_avg, exp_avg_sq, momentum_buffer), each a float32
 * dataset of its GLOBAL shape. The root attributes (text) say where the run
 * stands and how it was configured:
 *   step                      optimizer steps completed
 *   seed, rng                 the seed; how the random streams are keyed
 *   data.epoch, data.cursor   the loader's position after the last step
 *   data.batch, data.file     the global batch; the data set (informational)
 *   model, model.hidden, model.channels, model.classes, model.input
 *   optimizer, optimizer.state, optimizer.step (updates taken, for AdamW's bias
 *   correction), optimizer.momentum, .weight_decay, .beta1, .beta2, .eps, clip
 *   schedule, schedule.lr, schedule.warmup, schedule.total_steps
 *   mesh, parallel, placements.<name>   at save time (informational)
 *   meshgrad.version
 *
 * Exports: mg_train_state, mg_train_state_save, mg_train_state_load. */
#ifndef MG_NN_TRAIN_STATE_H
#define MG_NN_TRAIN_STATE_H

#include <stdint.h>
#include <stdio.h>

#include "nn/model.h"
#include "nn/optim.h"
#include "nn/plan.h"

typedef struct {
    int64_t step;                    /* optimizer steps completed */
    int64_t seed;
    int64_t data_epoch, data_cursor; /* loader position after step `step` */
    int64_t batch;                   /* global batch size */
    const char *data_file;           /* informational; NULL after a load */
    mg_lr_schedule schedule;
    double clip;
    char mesh[64], parallel[64];     /* filled by a load: where it was saved */
} mg_train_state;

/* Collective. Saves the model's parameters, the optimizer's state and the
 * attributes of `st` (plus mesh, plan and placements now) to `path`
 * (mg_checkpoint_save: atomic, any failure agreed and named). */
int mg_train_state_save(const char *path, mg_model *model, const mg_optimizer *opt,
                        const mg_plan *plan, const mg_train_state *st);

/* Collective. Reads the attributes of the checkpoint at `path` first and
 * refuses (MG_EINVAL, naming the file, the attribute, the file's value and the
 * current one) a checkpoint whose model (kind, hidden, channels of a
 * permute-mlp, classes, input shape) or optimizer (kind, state tensors) differ
 * from `model` and `opt`, or one not written by a training run. Then loads every
 * parameter and state tensor into the tensors of the current mesh and plan
 * (each rank reads its block), sets opt->step, and fills `saved` with the
 * file's step, data position, seed, batch, schedule, clip, mesh and plan.
 * `cur` is the current configuration: each setting that differs from the
 * file's (seed, batch, lr, schedule, warmup, total steps of a cosine schedule,
 * momentum, weight decay, clip) is printed as one "warning:" line on `notes`
 * (NULL: none); the current value is the one used. */
int mg_train_state_load(const char *path, mg_model *model, mg_optimizer *opt, const mg_plan *plan,
                        const mg_train_state *cur, mg_train_state *saved, FILE *notes);

#endif
