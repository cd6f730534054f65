/* model.h: modules. A Linear layer (weight (out, in), bias (out), PyTorch's
 * default init: both U(-1/sqrt(in), 1/sqrt(in)), drawn with Philox by global
 * element index, stream = the parameter's index in the table), and the two
 * models of `meshgrad train`:
 *   mlp          x (B, 8, 8) -> reshape (B, 64) -> Linear(64, H) -> ReLU
 *                -> Linear(H, K)
 *   permute-mlp  x (B, 8, 8) -> permute (0, 2, 1) -> one Linear(8, C) shared by
 *                the 8 columns -> ReLU -> reshape (B, 8C) -> Linear(8C, H)
 *                -> ReLU -> Linear(H, K)
 *   gpt          ids (B, T) -> logits (B, T, V): GPT-2 (gpt.h)
 * Placements come from a parallel plan (plan.h); the forward pass is written
 * in global shapes only.
 *
 * Exports: mg_linear_module, mg_model, mg_model_kind, mg_model_kind_parse,
 * mg_model_init, mg_model_init_gpt, mg_model_free, mg_model_forward,
 * mg_linear_module_forward. */
#ifndef MG_NN_MODEL_H
#define MG_NN_MODEL_H

#include <stdint.h>

#include "nn/gpt.h"
#include "nn/param.h"
#include "nn/plan.h"

typedef struct {
    int weight, bias; /* indices in the parameter table */
    int64_t in, out;
} mg_linear_module;

typedef enum { MG_MODEL_MLP = 0, MG_MODEL_PERMUTE_MLP, MG_MODEL_GPT } mg_model_kind;

#define MG_MODEL_MAX_LAYERS 4

typedef struct {
    mg_model_kind kind;
    int64_t sample_shape[2]; /* (8, 8) */
    int64_t hidden, channels, classes;
    int nlayers;
    mg_linear_module layer[MG_MODEL_MAX_LAYERS];
    mg_gpt gpt; /* MG_MODEL_GPT */
    mg_param_table params;
} mg_model;

/* "mlp", "permute-mlp" or "gpt"; MG_EINVAL with a message otherwise. */
int mg_model_kind_parse(const char *text, mg_model_kind *kind);
const char *mg_model_kind_name(mg_model_kind kind);

/* Adds a Linear(in, out) named `name` (".weight", ".bias" appended) as layer
 * `layer` of the plan, initialized from `seed`. */
int mg_linear_module_init(mg_linear_module *m, mg_param_table *t, const mg_mesh *mesh,
                          const mg_plan *plan, int layer, const char *name, int64_t in, int64_t out,
                          uint64_t seed);
/* y (..., out) = x (..., in) W^T + b */
mg_dtensor *mg_linear_module_forward(mg_linear_module *m, mg_param_table *t, const mg_dtensor *x);

/* Builds the model's parameters on `mesh` with `plan`. Samples are (rows, cols)
 * images (8, 8 for digits); `channels` is used by permute-mlp only. */
int mg_model_init(mg_model *model, mg_model_kind kind, const mg_mesh *mesh, const mg_plan *plan,
                  int64_t rows, int64_t cols, int64_t hidden, int64_t channels, int64_t classes,
                  uint64_t seed);
/* The GPT of `cfg` on `mesh` with `plan`. */
int mg_model_init_gpt(mg_model *model, const mg_mesh *mesh, const mg_plan *plan,
                      const mg_gpt_config *cfg, uint64_t seed);
void mg_model_free(mg_model *model);
/* logits (B, K) from x (B, rows, cols), or for the GPT logits (B, T, V) from
 * ids (B, T); NULL with a message on failure. */
mg_dtensor *mg_model_forward(mg_model *model, const mg_dtensor *x);

#endif
