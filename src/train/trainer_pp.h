/* trainer_pp.h: a training run of the MLPs with pp in its plan (--parallel
 * pp, pp,dp, pp,tp, pp,fsdp, pp,dp,tp...). trainer.c keeps everything else
 * (data, optimizer, checkpoints); this part gives it:
 *   - the model: only the layers this rank's stages hold, on its stage mesh
 *     (nn/pipeline.h), their parameters numbered by their place in the whole
 *     model (the same initial values as on any mesh);
 *   - the step: the batch (loaded whole on every rank) cut into the
 *     micro-batches, each one's loss its share of the batch's mean
 *     (rows / batch), run by the executor (nn/pipeline_exec.h); the loss and
 *     the gradient norm summed over the stages; clipping and the optimizer
 *     step on each stage's parameters;
 *   - evaluation: the test split in chunks, each in `ranks` micro-batches,
 *     forwards only, on the step's arenas;
 *   - the parameter checksum of the whole model, stage after stage.
 * Exports: mg_train_pp, mg_train_pp_options, mg_train_pp_memory, mg_train_pp_new, mg_train_pp_step,
 * mg_train_pp_update, mg_train_pp_pipeline, mg_train_pp_evaluate, mg_train_pp_checksum,
 * mg_train_pp_free. */
#ifndef MG_TRAIN_TRAINER_PP_H
#define MG_TRAIN_TRAINER_PP_H

#include <stdint.h>

#include "nn/model.h"
#include "nn/optim.h"
#include "nn/pipeline.h"
#include "train/config.h"

typedef struct mg_train_pp mg_train_pp;

/* The pipeline flags of c (--pp-schedule, --microbatches, --microbatch-rows,
 * --virtual-stages, --pp-layers) into *o; MG_EINVAL with a message. The GPT's
 * pipeline (trainer_text.c) takes them too. */
int mg_train_pp_options(const mg_train_config *c, mg_pp_options *o);
/* The memory check's part of *o: this machine's memory and ranks, and
 * `states` optimizer floats per parameter (benches set it; the options of a
 * train config get it from its optimizer). */
void mg_train_pp_memory(mg_pp_options *o, int states);

/* Collective. Parses the pipeline flags of c, cuts the model of `mc` over the
 * pp dim of `plan` on `mesh` and builds this rank's layers into *model.
 * `test_rows`: the test split's rows (evaluation's micro-batches). */
int mg_train_pp_new(mg_train_pp **out, const mg_train_config *c, const mg_mesh *mesh,
                    const mg_plan *plan, const mg_model_config *mc, int64_t test_rows,
                    mg_model *model);
/* Forward and backward of the batch x (B, rows, cols), y (B), replicated on
 * the whole mesh, over the schedule: *loss the batch's loss (the stages'
 * shares summed); the gradients of this rank's stages are then complete. */
int mg_train_pp_step(mg_train_pp *t, const mg_dtensor *x, const mg_dtensor *y, double *loss);
/* The update after mg_train_pp_step: clipping by the norm over every stage
 * (*norm, before clipping; 0 when clip is 0), then the optimizer step on this
 * rank's parameters. The caller zeroes the gradients and ends the step. */
int mg_train_pp_update(mg_train_pp *t, mg_optimizer *opt, double lr, double clip, double *norm);
/* The pipeline (its evaluation's rows: mg_pipeline_eval_rows). */
const mg_pipeline *mg_train_pp_pipeline(const mg_train_pp *t);
/* The loss on x, y (replicated; a chunk of the test split, cut into the
 * evaluation's micro-batches), its correct predictions added to *correct. */
int mg_train_pp_evaluate(mg_train_pp *t, const mg_dtensor *x, const mg_dtensor *y, double *loss,
                         int64_t *correct);
/* FNV-1a 64 of every parameter of the whole model, in order (mg_params_checksum's). */
int mg_train_pp_checksum(mg_train_pp *t, uint64_t *out);
void mg_train_pp_free(mg_train_pp *t);

#endif
