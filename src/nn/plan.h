/* plan.h: parallel plans, one per mesh dimension, as placements only.
 *   dp    parameters Replicate on that mesh dim; the batch Shard(0).
 *   tp    Megatron tensor parallel: linear layers alternate column-parallel
 *         (W (out, in) Shard(0), b Shard(0)) and row-parallel (W Shard(1),
 *         b Replicate); the batch Replicate.
 *   fsdp  parameters (and their optimizer state) stored Shard(0); each is
 *         redistributed to Replicate on that dim before use, so autograd
 *         reduce-scatters its gradient; the batch Shard(0).
 *   sp    sequence parallel (GPT, Llama): parameters Replicate, tokens and every
 *         activation Shard(1) (the T dim); attention gathers k and v along T.
 *   tp+sp tensor parallel with Megatron's sequence parallelism on one mesh
 *         dim: parameters as tp; the residual stream and the layer norms
 *         Shard(1) on T between the tensor-parallel regions, all-gathered on
 *         entry to a region and reduce-scattered on the way out.
 *   pp    pipeline parallel (nn/pipeline.h; the GPT's: gpt_pipeline.h): the model's layers
 *         cut into contiguous stages along that mesh dim; a stage's parameters
 *         exist only on its ranks, on the mesh of the other dims (mg_mesh_sub)
 *         under the plans of the others (mg_plan_without). At most one pp dim.
 * "dp,tp" on a 2-D mesh: dim 0 data parallel, dim 1 tensor parallel.
 *
 * The GPT (gpt.h) and the Llama (llama.h) ask three more things of a plan:
 * where each kind of their parameters lives (mg_plan_gpt_param), where the
 * residual stream lives between blocks (mg_plan_residual), and where the
 * input of a tensor-parallel region (qkv, fc, the head; the Llama's wq, wk,
 * wv, w1, w3) lives (mg_plan_region_input).
 *
 * Exports: mg_plan, mg_plan_parse, mg_plan_check, mg_plan_format,
 * mg_plan_linear (placements of one linear layer's weight and bias),
 * mg_plan_batch (placements of the batch dim), mg_plan_data_degree,
 * mg_plan_has_sequence, mg_plan_tensor_degree, mg_plan_sequence_degree,
 * mg_gpt_role, mg_plan_gpt_param, mg_plan_residual, mg_plan_region_input,
 * mg_plan_pp_dim, mg_plan_without. */
#ifndef MG_NN_PLAN_H
#define MG_NN_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "meshgrad.h"

typedef enum {
    MG_PLAN_DP = 0,
    MG_PLAN_TP,
    MG_PLAN_FSDP,
    MG_PLAN_PP,
    MG_PLAN_SP,
    MG_PLAN_TP_SP
} mg_plan_kind;

typedef struct {
    int ndim; /* number of plans = mesh dims */
    mg_plan_kind kind[MG_MAX_MESH_DIMS];
} mg_plan;

/* "dp", "tp", "fsdp", "sp", "tp+sp", "fsdp,tp"... MG_EINVAL with a message on an unknown or
 * empty name or too many entries. */
int mg_plan_parse(const char *text, mg_plan *plan);
/* "dp,tp" */
char *mg_plan_format(char *buf, size_t len, const mg_plan *plan);
/* Refuses (MG_EINVAL, clear message) a plan count that is not the mesh's ndim,
 * two data-parallel (dp or fsdp) dims, and a global batch smaller than the
 * data-parallel degree. Metadata only: every rank decides the same. */
int mg_plan_check(const mg_plan *plan, const mg_mesh *mesh, int64_t batch);
/* Product of mesh sizes over dp/fsdp dims (1 when none). */
int mg_plan_data_degree(const mg_plan *plan, const mg_mesh *mesh);

/* Placements of linear layer `layer` (0-based position in the model; even
 * layers are column-parallel under tp, odd ones row-parallel): weight and bias,
 * as stored and as used by the forward pass. Any pointer may be NULL. */
void mg_plan_linear(const mg_plan *plan, int layer, mg_placement *w_store, mg_placement *w_use,
                    mg_placement *b_store, mg_placement *b_use);
/* Placements of a batch-major tensor (inputs, labels, token ids (B, T)):
 * Shard(0) on dp/fsdp dims, Shard(1) on sp dims, Replicate on tp, tp+sp and
 * pp dims (Megatron gives every tensor-parallel rank the whole sequence of ids). */
void mg_plan_batch(const mg_plan *plan, mg_placement *p);
/* 1 when some mesh dim is sp or tp+sp (a plan only the GPT can run). */
int mg_plan_has_sequence(const mg_plan *plan);
/* Product of mesh sizes over tp and tp+sp dims (how many ways heads split),
 * and over sp and tp+sp dims (how many ways T splits). */
int mg_plan_tensor_degree(const mg_plan *plan, const mg_mesh *mesh);
int mg_plan_sequence_degree(const mg_plan *plan, const mg_mesh *mesh);

/* The kinds of GPT parameters, by how tensor parallelism splits them (the
 * Llama's: tok_embeddings EMBEDDING, norms REPLICATED, wq, wk, wv, w1, w3 and
 * an untied output COLUMN, wo and w2 ROW). */
typedef enum {
    MG_GPT_EMBEDDING, /* wte (V, C): vocab parallel (Shard(0)), the head tied to it */
    MG_GPT_REPLICATED, /* wpe, layer norms, biases of row-parallel layers */
    MG_GPT_COLUMN,    /* qkv and fc weights (out, in) and biases (out): Shard(0) */
    MG_GPT_ROW,       /* proj and fc2 weights (out, in): Shard(1) */
} mg_gpt_role;
/* Placements of a GPT parameter of `role`, as stored and as used. */
void mg_plan_gpt_param(const mg_plan *plan, mg_gpt_role role, mg_placement *store,
                       mg_placement *use);
/* Placements of the residual stream (B, T, C) between blocks: Shard(0) on
 * dp/fsdp dims, Replicate on tp dims, Shard(1) on sp and tp+sp dims. */
void mg_plan_residual(const mg_plan *plan, mg_placement *p);
/* Placements of the input (B, T, C) of a tensor-parallel region (a column-
 * parallel linear): the residual's, but Replicate on tp+sp dims (gathered on T). */
void mg_plan_region_input(const mg_plan *plan, mg_placement *p);
/* The pp dim, or -1. */
int mg_plan_pp_dim(const mg_plan *plan);
/* The plan without dim `dim` (a stage's plan on mg_mesh_sub's mesh; "dp" on
 * its one dim of 1 rank when `dim` was the only one). */
mg_plan mg_plan_without(const mg_plan *plan, int dim);

#endif
