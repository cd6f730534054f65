/* train_state.h: a training run as a checkpoint (docs/DESIGN.md
 * "Checkpoints", docs/CHECKPOINTS.md "The file format"). The entries are
 * params/<name> for every parameter and optim/<name>/<state> for each
 * optimizer state tensor (PyTorch's names: exp_avg, exp_avg_sq,
 * momentum_buffer), each a float32 dataset of its GLOBAL shape. The root attributes (text) say where the run
 * stands and how it was configured:
 *   step                      optimizer steps completed
 *   seed, rng                 the seed; how the random streams are keyed
 *   data.epoch, data.cursor   the loader's position after the last step
 *   data.batch, data.file     the global batch; the data set (informational)
 *   model, model.hidden, model.channels, model.depth, model.classes,
 *   model.input (the MLPs)
 *   model.layers, model.heads, model.embd, model.ctx, model.vocab, model.qkv_rows
 *   (the GPT, gpt.h; qkv_rows says how the rows of attn.qkv are ordered)
 *   model.kind (llama again), model.layers, model.heads, model.kv_heads,
 *   model.embd, model.ctx, model.hidden, model.vocab, model.rope_theta,
 *   model.norm_eps, model.tied (1 or 0) (the Llama, llama.h)
 *   optimizer, optimizer.state, optimizer.step (updates taken, for AdamW's bias
 *   correction), optimizer.momentum, .weight_decay, .beta1, .beta2, .eps, clip,
 *   optimizer.decay (the parameters weight decay applies to: all, or 2-d)
 *   schedule, schedule.lr, schedule.warmup, schedule.total_steps, schedule.lr_min
 *   mesh, parallel, placements.<name>   at save time (informational)
 *   meshgrad.version
 *
 * Exports: mg_train_state, mg_train_state_diff, mg_train_state_save,
 * mg_train_state_load, mg_train_state_load_params. */
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
    char mesh[64], parallel[64];     /* filled by a load: where it was saved (control
                                      * bytes escaped: they are printed, text.h) */
} mg_train_state;

/* Collective. Saves the model's parameters, the optimizer's state and the
 * attributes of `st` (plus mesh, plan and placements now) to `path`
 * (mg_checkpoint_save: atomic, any failure agreed and named). */
int mg_train_state_save(const char *path, mg_model *model, const mg_optimizer *opt,
                        const mg_plan *plan, const mg_train_state *st);

/* A setting whose value in a checkpoint differs from the current run's. */
typedef struct {
    const char *path;    /* the checkpoint */
    const char *key;     /* the attribute: "model.hidden", "schedule.lr" */
    const char *saved;   /* its value in the file, control bytes escaped (text.h) */
    const char *current; /* this run's value (as text, formatted as saved) */
    int must_match;      /* 1: the model or the optimizer's state (a load cannot go on) */
} mg_train_state_diff;
/* Told of each differing setting; a status other than MG_OK stops the load
 * with it (and its message). */
typedef int (*mg_train_state_on_diff)(void *ctx, const mg_train_state_diff *diff);

/* Collective. Reads the attributes of the checkpoint at `path` first, refuses
 * one not written by a training run, and compares the settings of the file
 * with `cur` and the model and optimizer: each that differs is given to
 * on_diff (NULL: a difference in the model (kind, hidden, channels of a
 * permute-mlp, classes, input shape) or the optimizer (kind, state tensors)
 * is refused with MG_EINVAL naming the attribute and both values; others are
 * accepted). The current values are the ones used. The step, data position
 * and optimizer step are parsed exactly and checked against each other. Then
 * loads every parameter and state tensor into the tensors of the current mesh
 * and plan (each rank reads its block; checksums verified, values finite),
 * sets opt->step, and fills `saved` with the file's step, data position,
 * seed, batch, schedule, clip, mesh and plan.
 * A checkpoint of parameters only (optimizer "none" at step 0: what `meshgrad
 * ckpt import` writes) is compared on the model alone; its parameters are
 * loaded, the optimizer starts fresh (opt->step 0, its state as made) and
 * `saved` is `cur` at step 0. */
int mg_train_state_load(const char *path, mg_model *model, mg_optimizer *opt, const mg_plan *plan,
                        const mg_train_state *cur, mg_train_state *saved,
                        mg_train_state_on_diff on_diff, void *ctx);

/* Collective. Reads only the model's parameters (params/<name>) from the
 * checkpoint at `path`, whatever run or program wrote it (the training API's
 * too): for generation. The caller built the model from the file's model
 * attributes. */
int mg_train_state_load_params(const char *path, mg_model *model);

#endif
