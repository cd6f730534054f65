/* model.h: modules. A Linear layer (weight (out, in), bias (out), PyTorch's
 * default init: both U(-1/sqrt(in), 1/sqrt(in)), drawn with Philox by global
 * element index, stream = the parameter's index in the whole model), and the
 * two models of `meshgrad train`, as lists of layers:
 *   mlp          x (B, 8, 8) -> reshape (B, 64) -> Linear(64, H) -> ReLU
 *                [-> Linear(H, H) -> ReLU] x (depth - 2) -> Linear(H, K)
 *                (layers fc1 .. fc<depth>; with `widths`, Linear(w0, w1) ->
 *                ReLU -> ... on x (B, w0): the MLP of `meshgrad bench step`)
 *   permute-mlp  x (B, 8, 8) -> permute (0, 2, 1) -> one Linear(8, C) shared by
 *                the 8 columns -> ReLU -> reshape (B, 8C) -> Linear(8C, H)
 *                -> ReLU [-> Linear(H, H) -> ReLU] x (depth - 3) -> Linear(H, K)
 *                (layers col, fc1 .. fc<depth - 1>)
 *   gpt          ids (B, T) -> logits (B, T, V): GPT-2 (gpt.h), a list of
 *                blocks of its own; built by mg_model_build_gpt, as L + 2
 *                pipeline layers (the embedding, the blocks, ln_f and head)
 *   llama        ids (B, T) -> logits (B, T, V): llama2.c's Llama (llama.h),
 *                the same L + 2 pipeline layers (the embedding, the blocks,
 *                the norm and head)
 * The two language models (gpt, llama) are built from an mg_lm_config (one
 * of their configurations) by mg_model_build_lm; the functions mg_lm_* and
 * mg_model_* below dispatch on the kind (model_lm.c), so the trainer, the
 * pipeline (gpt_pipeline.h) and generation take either.
 * Layer i is its Linear with what comes before it (layer 0: the reshape or
 * permute of the input) and the ReLU after it (the last: none; the loss is
 * the caller's). Layer i's weight and bias are parameters 2i and 2i + 1 of
 * the whole model.
 *
 * A pipeline stage (nn/pipeline.h) builds only the layers it holds, on its
 * ranks' mesh: model->layer[i].weight is -1 for a layer another stage holds,
 * and mg_model_param describes every parameter of the whole model, held here
 * or not (checkpoints write them all). Placements come from a parallel plan
 * (plan.h); the forward pass is written in global shapes only.
 *
 * Exports: mg_linear_module, mg_model, mg_model_kind, mg_model_kind_parse,
 * mg_model_kind_is_lm, mg_model_config, mg_model_build, mg_model_init,
 * mg_model_init_gpt, mg_model_build_gpt, mg_model_free, mg_model_set_recompute,
 * mg_lm_config, mg_lm_check, mg_lm_ctx, mg_lm_vocab, mg_lm_layers,
 * mg_lm_param_count, mg_lm_layer_costs, mg_model_build_lm, mg_model_layer_param,
 * mg_model_embedding_copy, mg_model_lm_config, mg_model_cache_init,
 * mg_model_forward_cached,
 * mg_model_forward, mg_model_forward_layers, mg_linear_module_forward,
 * mg_model_config_params, mg_model_param_count, mg_model_param, mg_model_param_info, mg_model_numel,
 * mg_model_layer_costs. */
#ifndef MG_NN_MODEL_H
#define MG_NN_MODEL_H

#include <stdint.h>

#include "nn/gpt.h"
#include "nn/llama.h"
#include "nn/param.h"
#include "nn/pipeline_cost.h"
#include "nn/plan.h"

typedef struct {
    int weight, bias; /* indices in the parameter table */
    int64_t in, out;
} mg_linear_module;

typedef enum { MG_MODEL_MLP = 0, MG_MODEL_PERMUTE_MLP, MG_MODEL_GPT, MG_MODEL_LLAMA } mg_model_kind;

#define MG_MODEL_MAX_LAYERS 64

typedef struct {
    mg_model_kind kind;
    int64_t rows, cols;              /* a sample's shape: (8, 8) */
    int64_t hidden, channels, classes;
    int depth;                       /* linear layers; 0: 2 (mlp), 3 (permute-mlp) */
    const int64_t *widths;           /* mlp: the widths (depth + 1 of them) instead */
    uint64_t seed;
} mg_model_config;

typedef struct {
    mg_model_kind kind;
    int64_t sample_shape[2]; /* (8, 8) */
    int64_t hidden, channels, classes;
    int nlayers;             /* the whole model's (its depth; a language model's L + 2) */
    mg_linear_module layer[MG_MODEL_MAX_LAYERS]; /* weight -1: held by another stage */
    mg_param_table params;   /* the parameters of the layers held here */
    const mg_mesh *mesh;     /* the whole mesh (a pipeline's, not its stage's) */
    mg_plan plan;            /* the plan the layers are placed by (a stage's) */
    mg_gpt gpt;              /* MG_MODEL_GPT: its blocks (no layer[]) */
    mg_llama llama;          /* MG_MODEL_LLAMA: its blocks (no layer[]) */
} mg_model;

/* A language model's configuration: kind says which of the two is meant. */
typedef struct {
    mg_model_kind kind; /* MG_MODEL_GPT or MG_MODEL_LLAMA */
    mg_gpt_config gpt;
    mg_llama_config llama;
} mg_lm_config;

/* Parameter k of the whole model, described. */
typedef struct {
    char name[MG_PARAM_NAME_MAX];
    int ndim;
    int64_t shape[2];
    mg_placement store[MG_MAX_MESH_DIMS]; /* as stored, on the plan's mesh */
    int mesh_ndim;
} mg_model_param_info;

/* "mlp", "permute-mlp", "gpt" or "llama"; MG_EINVAL with a message otherwise. */
int mg_model_kind_parse(const char *text, mg_model_kind *kind);
const char *mg_model_kind_name(mg_model_kind kind);
/* 1 for a language model (gpt, llama: token ids in, logits (B, T, V) out). */
int mg_model_kind_is_lm(mg_model_kind kind);

/* Adds a Linear(in, out) named `name` (".weight", ".bias" appended) as layer
 * `layer` of the plan, initialized from `seed`. */
int mg_linear_module_init(mg_linear_module *m, mg_param_table *t, const mg_mesh *mesh,
                          const mg_plan *plan, int layer, const char *name, int64_t in, int64_t out,
                          uint64_t seed);
/* y (..., out) = x (..., in) W^T + b */
mg_dtensor *mg_linear_module_forward(mg_linear_module *m, mg_param_table *t, const mg_dtensor *x);

/* Builds the parameters of the layers `held` (NULL: all) on `mesh` with
 * `plan`. Samples are (rows, cols) images (8, 8 for digits); `channels` is
 * used by permute-mlp only. MG_EINVAL with a message for sizes below 1, a
 * depth below the model's 2 (mlp) or 3 (permute-mlp) or above
 * MG_MODEL_MAX_LAYERS. */
/* The parameter count a config (not a GPT) builds, before anything is made. */
double mg_model_config_params(const mg_model_config *c);
int mg_model_build(mg_model *model, const mg_model_config *c, const mg_mesh *mesh,
                   const mg_plan *plan, const unsigned char *held);
/* mg_model_build of every layer, default depth. */
int mg_model_init(mg_model *model, mg_model_kind kind, const mg_mesh *mesh, const mg_plan *plan,
                  int64_t rows, int64_t cols, int64_t hidden, int64_t channels, int64_t classes,
                  uint64_t seed);
/* The GPT of `cfg` on `mesh` with `plan`. */
int mg_model_init_gpt(mg_model *model, const mg_mesh *mesh, const mg_plan *plan,
                      const mg_gpt_config *cfg, uint64_t seed);
/* The same, of the pipeline layers `held` only (NULL: all; gpt.h). */
int mg_model_build_gpt(mg_model *model, const mg_mesh *mesh, const mg_plan *plan,
                       const mg_gpt_config *cfg, uint64_t seed, const unsigned char *held);
void mg_model_free(mg_model *model);
/* What backward recomputes (nn/recompute.h): a model of blocks (the GPT)
 * takes every mode; the MLPs only none (MG_EINVAL with a message). */
int mg_model_set_recompute(mg_model *model, mg_recompute_mode mode);
/* logits (B, K) from x (B, rows, cols), or for the GPT logits (B, T, V) from
 * ids (B, T); NULL with a message on failure. */
mg_dtensor *mg_model_forward(mg_model *model, const mg_dtensor *x);
/* Layers [first, last) (held here) of x: layer 0 takes x (B, rows, cols)
 * (the GPT: ids (B, T)), layer i > 0 the output of layer i - 1; the last gives
 * the logits. */
mg_dtensor *mg_model_forward_layers(mg_model *model, int first, int last, const mg_dtensor *x);
/* How many parameters the whole model has: 2 nlayers (MLPs), 4 + 12 L (GPT),
 * 2 + 9 L (+ 1 untied) (Llama). */
int mg_model_param_count(const mg_model *model);
/* Parameter k (< mg_model_param_count) of the whole model: its description
 * into *info (may be NULL), and its entry here, or NULL when another pipeline
 * stage holds it. */
mg_param *mg_model_param(mg_model *model, int k, mg_model_param_info *info);
/* Elements of every parameter of the whole model. */
int64_t mg_model_numel(const mg_model *model);
/* Each layer's costs per row (sample), for the stage balancer. */
int mg_model_layer_costs(const mg_model *model, mg_layer_cost *out);

/* ---- the language models (model_lm.c) ---- */

/* The checks of the kind's model (gpt.h's, llama.h's): one line naming the fix. */
int mg_lm_check(const mg_lm_config *c, const mg_plan *plan, const mg_mesh *mesh);
int64_t mg_lm_ctx(const mg_lm_config *c);
int64_t mg_lm_vocab(const mg_lm_config *c);
int64_t mg_lm_layers(const mg_lm_config *c);
/* Elements of every parameter (a tied head counted once). */
int64_t mg_lm_param_count(const mg_lm_config *c);
/* The L + 2 pipeline layers' costs per row (a sequence of ctx tokens). */
int mg_lm_layer_costs(const mg_lm_config *c, mg_layer_cost *out);
/* The model of `c` on `mesh` with `plan`, of the pipeline layers `held`
 * only (NULL: all). */
int mg_model_build_lm(mg_model *model, const mg_mesh *mesh, const mg_plan *plan,
                      const mg_lm_config *c, uint64_t seed, const unsigned char *held);
/* A language model's configuration back from the model. */
mg_lm_config mg_model_lm_config(const mg_model *model);
/* The first parameter (of the whole model) of pipeline layer `layer` of a
 * language model (nlayers: the count). */
int mg_model_layer_param(const mg_model *model, int layer);
/* The table index of the head's copy of a tied embedding, held by a pipeline
 * stage with the head and not the embedding (saved by the first stage, not
 * by this one), or -1. */
int mg_model_embedding_copy(const mg_model *model);
/* Generation: the KV cache of a language model (gpt.h's mg_gpt_cache, freed
 * by mg_gpt_cache_release), and the cached forward (gpt.h's
 * mg_gpt_forward_cached, llama.h's). */
int mg_model_cache_init(mg_model *model, mg_gpt_cache *c, const mg_mesh *mesh,
                        const mg_plan *plan);
mg_dtensor *mg_model_forward_cached(mg_model *model, mg_gpt_cache *c, const mg_dtensor *ids,
                                    int64_t pos);

#endif
