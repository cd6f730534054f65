/* gpt_pipeline.h: a language model (model.h: the GPT, gpt.h, or the Llama,
 * llama.h) cut into pipeline stages (pipeline.h).
 *
 * Its pipeline layers: 0 the embedding (wte and wpe, or tok_embeddings; tied
 * to the first block), 1..L the blocks, L + 1 the final norm, the head and
 * the loss (tied to the last block), so stages are cut between blocks and
 * --pp-layers counts blocks. Each rank
 * builds the parts its stages hold on its stage mesh with the stage plan (dp,
 * tp, sp, fsdp inside a stage as without pp), every parameter numbered by its
 * place in the whole model: the initial values do not depend on the mesh.
 *
 * The head is tied to wte (the Llama's to tok_embeddings, unless untied: then
 * nothing of this happens). The last stage holds a copy of wte (drawn with the
 * same values), and after the schedule of a step the two gradients (the
 * embedding's on the first stage, the head's on the last) are summed by one
 * all-reduce over a comm of those two ranks (Megatron's embedding group), so
 * both copies take the same update and stay bitwise equal. The copy is left
 * out of the gradient norm and of checkpoints (the first stage writes wte).
 * With one stage nothing of this happens.
 *
 * A step: the batch's token windows (host arrays, the same on every rank) cut
 * into the pipeline's micro-batches; stage 0 takes micro-batch mb's ids
 * (rows, T), the last stage returns its loss share (rows / batch of the
 * batch's mean cross-entropy), the executor (pipeline_exec.h) runs the
 * schedule. The loss and the gradient norm are summed over the stages.
 *
 * Exports: mg_gpt_pp, mg_gpt_pp_new, mg_lm_pp_new, mg_gpt_pp_step,
 * mg_gpt_pp_update, mg_gpt_pp_loss, mg_gpt_pp_checksum, mg_gpt_pp_pipeline,
 * mg_gpt_pp_free. */
#ifndef MG_NN_GPT_PIPELINE_H
#define MG_NN_GPT_PIPELINE_H

#include <stdint.h>

#include "nn/gpt.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "nn/pipeline.h"
#include "nn/pipeline_cost.h"

typedef struct mg_gpt_pp mg_gpt_pp;

/* Collective over the mesh. Cuts the GPT of `cfg` over the pp dim of `plan`
 * (options o, batches of `batch` windows) and builds this rank's parts into
 * *model (model->mesh: the whole mesh). MG_EINVAL with a message for a bad
 * option (more stages than blocks, --pp-layers not summing to them, ...). */
int mg_gpt_pp_new(mg_gpt_pp **out, const mg_mesh *mesh, const mg_plan *plan,
                  const mg_pp_options *o, const mg_gpt_config *cfg, uint64_t seed, int64_t batch,
                  mg_model *model);
/* The same for any language model of model.h (the GPT's or the Llama's config). */
int mg_lm_pp_new(mg_gpt_pp **out, const mg_mesh *mesh, const mg_plan *plan,
                 const mg_pp_options *o, const mg_lm_config *cfg, uint64_t seed, int64_t batch,
                 mg_model *model);
/* Forward and backward of the batch: ids and targets (batch, T) host arrays.
 * *loss: the batch's mean loss (the stages' shares summed). The gradients of
 * this rank's stages are then complete, the tied wte's summed. */
int mg_gpt_pp_step(mg_gpt_pp *t, const float *ids, const float *targets, double *loss);
/* After mg_gpt_pp_step: clipping by the norm over the whole model (*norm,
 * before clipping; 0 when clip is 0), then the optimizer step on this rank's
 * parameters. The caller zeroes the gradients and ends the step. */
int mg_gpt_pp_update(mg_gpt_pp *t, mg_optimizer *opt, double lr, double clip, double *norm);
/* Without autograd: the mean loss of n windows (ids, targets (n, T)), run as
 * `ranks` micro-batches (n >= ranks x the data-parallel degree). */
int mg_gpt_pp_loss(mg_gpt_pp *t, const float *ids, const float *targets, int64_t n, double *loss);
/* Collective: FNV-1a 64 of the whole model's parameters in order (wte once). */
int mg_gpt_pp_checksum(mg_gpt_pp *t, uint64_t *out);
const mg_pipeline *mg_gpt_pp_pipeline(const mg_gpt_pp *t);
void mg_gpt_pp_free(mg_gpt_pp *t);

#endif
