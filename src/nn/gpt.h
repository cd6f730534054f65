/* gpt.h: GPT-2 (Radford et al. 2019; karpathy/llm.c's train_gpt2.c) on
 * distributed tensors, as a list of blocks with a forward each:
 *
 *   ids (B, T) -> wte[ids] + wpe[0:T]                      x: (B, T, C)
 *   L blocks:  x = x + proj(attention(qkv(ln1(x))))      causal, H heads of D = C / H
 *              x = x + fc2(gelu(fc(ln2(x))))              GELU (tanh), width 4C
 *   ln_f(x) wte^T                                          logits: (B, T, V), head tied to wte
 *
 * Parameters (names as in checkpoints, "h.<l>." prefixed per block):
 *   wte (V, C), wpe (T, C), h.l.ln1.weight/.bias (C), h.l.attn.qkv.weight (3C, C)
 *   and .bias (3C), h.l.attn.proj.weight (C, C) and .bias (C), h.l.ln2.weight/.bias,
 *   h.l.mlp.fc.weight (4C, C) and .bias (4C), h.l.mlp.fc2.weight (C, 4C) and .bias
 *   (C), ln_f.weight/.bias (C).
 * The rows of the qkv weight (and bias) are ordered per head, (H, 3, D): head h's
 * q, k and v rows lie together, rows [h 3D, (h + 1) 3D). So a split of the rows
 * over tensor-parallel ranks (column parallel, Shard(0)) is a split of the
 * heads, and the output (B, T, 3C) reshaped to (B, T, H, 3, D) and narrowed on
 * the "3" dim gives q, k and v with no data moved between ranks. (GPT-2's own
 * checkpoints order them (3, H, D); converting one permutes those rows.)
 *
 * Init (GPT-2's): every weight and both embeddings N(0, 0.02), the two residual
 * projections (attn.proj, mlp.fc2) N(0, 0.02 / sqrt(2 L)); biases 0; layer norm
 * weights 1 and biases 0. Drawn by Philox from (seed, the parameter's index) by
 * global element index: every mesh starts bitwise equal.
 *
 * Placements come from the plan (plan.h): each parameter's by its role; the
 * residual stream is brought to mg_plan_residual between blocks and the input
 * of each tensor-parallel region to mg_plan_region_input (on Megatron's tp
 * that is one all-reduce after each row-parallel layer; with tp+sp a
 * reduce-scatter there and an all-gather before each column-parallel layer).
 * Everything else the ops' sharding rules decide.
 *
 * Pipelines (nn/gpt_pipeline.h) cut the GPT as L + 2 layers: 0 the embedding
 * (wte, wpe), 1..L the blocks, L + 1 ln_f and the head. mg_gpt_init_held
 * builds only the parameters of the layers held (each numbered by its place in
 * the whole model, so every mesh draws the same values); a stage holding the
 * head without the embedding holds a copy of wte (wte_copy) for the tied head.
 * Parameter k of the whole model (0 .. 4 + 12 L) is wte, wpe, the blocks'
 * twelve each in the order of mg_gpt_block, then ln_f.weight and ln_f.bias.
 *
 * Recomputation (nn/recompute.h): with `recompute` blocks, each block's
 * activations are dropped after its forward and made again in backward (its
 * input and output kept); with attention, inside each block the part from
 * qkv (kept) to the heads merged (kept): the head split, the attention
 * kernel with what it saves (q, k, v in (B, H, T, D) and the row log-sum-exp)
 * and the merge. Without autograd (evaluation, generation) both run as they are.
 *
 * Generation: a KV cache (mg_gpt_cache) holds each block's k and v (1, H, T, D)
 * with the heads' placements; mg_gpt_forward_cached runs a prompt of n tokens
 * from position 0 (filling the cache) or one token at position pos against the
 * cache (O(T) per token instead of a rerun of the prefix).
 *
 * Exports: mg_gpt_config, mg_gpt_block, mg_gpt, mg_gpt_check, mg_gpt_init,
 * mg_gpt_init_held, mg_gpt_param_desc, mg_gpt_param_total, mg_gpt_param_layer,
 * mg_gpt_param_describe, mg_gpt_param_slot, mg_gpt_forward_layers,
 * mg_gpt_free, mg_gpt_embed, mg_gpt_block_forward, mg_gpt_head, mg_gpt_forward,
 * mg_gpt_param_count, mg_gpt_cache, mg_gpt_cache_init, mg_gpt_cache_free,
 * mg_gpt_cache_make, mg_gpt_cache_release, mg_gpt_cache_store,
 * mg_gpt_forward_cached, mg_gpt_layer_costs, mg_gpt_param_add. */
#ifndef MG_NN_GPT_H
#define MG_NN_GPT_H

#include <stdint.h>

#include "meshgrad_train.h"
#include "nn/param.h"
#include "nn/pipeline_cost.h"
#include "nn/plan.h"

typedef struct {
    int64_t layers, heads, embd, ctx, vocab; /* L, H, C, T (the longest sequence), V */
} mg_gpt_config;

typedef struct { /* indices in the parameter table (-1: another pipeline stage holds it) */
    int ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fc2_w, fc2_b;
} mg_gpt_block;

typedef struct {
    mg_gpt_config cfg;
    int wte, wpe, lnf_w, lnf_b;
    mg_gpt_block *block; /* cfg.layers of them */
    mg_placement residual[MG_MAX_MESH_DIMS], region_in[MG_MAX_MESH_DIMS];
    int mesh_ndim;
    int wte_copy; /* wte is here for the head only: the first stage holds (and saves) it */
    mg_recompute_mode recompute; /* what backward recomputes (nn/recompute.h; 0: none) */
} mg_gpt;

/* Parameter k of the whole model, described. */
typedef struct {
    char name[MG_PARAM_NAME_MAX];
    int ndim;
    int64_t shape[2];
    mg_gpt_role role;
    mg_param_init init;
} mg_gpt_param_desc;

/* Refuses, with one line naming the fix: sizes < 1, heads not dividing embd,
 * a tensor-parallel degree that does not divide the heads (or 4C, or whose
 * vocabulary shards would be empty), a sequence-parallel degree above ctx.
 * Metadata only: every rank decides the same. */
int mg_gpt_check(const mg_gpt_config *cfg, const mg_plan *plan, const mg_mesh *mesh);
/* Checks, then adds the parameters to t (placements from the plan). */
int mg_gpt_init(mg_gpt *g, mg_param_table *t, const mg_mesh *mesh, const mg_plan *plan,
                const mg_gpt_config *cfg, uint64_t seed);
/* The same, of the pipeline layers held[0 .. L + 2) only (NULL: all). */
int mg_gpt_init_held(mg_gpt *g, mg_param_table *t, const mg_mesh *mesh, const mg_plan *plan,
                     const mg_gpt_config *cfg, uint64_t seed, const unsigned char *held);
void mg_gpt_free(mg_gpt *g);
/* Parameters of the whole model: 4 + 12 L. */
int mg_gpt_param_total(const mg_gpt_config *cfg);
/* The pipeline layer (0 .. L + 1) of parameter k of the whole model. */
int mg_gpt_param_layer(const mg_gpt_config *cfg, int k);
void mg_gpt_param_describe(const mg_gpt_config *cfg, int k, mg_gpt_param_desc *d);
/* Where g keeps parameter k's index in the table (-1: not held here). */
int *mg_gpt_param_slot(mg_gpt *g, int k);
/* GPT-2's count, the tied head counted once: V C + T C + L (12 C^2 + 13 C) + 2 C. */
int64_t mg_gpt_param_count(const mg_gpt_config *cfg);

/* x (B, n, C) = wte[ids] + wpe[pos : pos + n] from ids (B, n), at the residual's
 * placements. */
mg_dtensor *mg_gpt_embed(mg_gpt *g, mg_param_table *t, const mg_dtensor *ids, int64_t pos);
/* Block l: x (B, T, C) -> x (B, T, C), causal over the T positions. */
mg_dtensor *mg_gpt_block_forward(mg_gpt *g, mg_param_table *t, int l, const mg_dtensor *x);
/* logits (B, T, V) = ln_f(x) wte^T (vocab-sharded under tp: loss parallel). */
mg_dtensor *mg_gpt_head(mg_gpt *g, mg_param_table *t, const mg_dtensor *x);
/* Pipeline layers [first, last) (held here) of x: layer 0 takes ids (B, T),
 * the others x (B, T, C); layer L + 1 gives the logits (B, T, V). */
mg_dtensor *mg_gpt_forward_layers(mg_gpt *g, mg_param_table *t, int first, int last,
                                  const mg_dtensor *x);
/* logits (B, T, V) from ids (B, T), T <= ctx: embed, every block, head. */
mg_dtensor *mg_gpt_forward(mg_gpt *g, mg_param_table *t, const mg_dtensor *ids);

typedef struct {
    mg_dtensor **k, **v; /* per block: (1, H, ctx, D), heads placed as the qkv rows */
    int64_t len;         /* positions held */
    int64_t layers;      /* blocks */
} mg_gpt_cache;

int mg_gpt_cache_init(mg_gpt_cache *c, const mg_gpt *g, const mg_mesh *mesh, const mg_plan *plan);
void mg_gpt_cache_free(mg_gpt_cache *c, const mg_gpt *g);
/* A cache of `layers` blocks' k and v (1, heads, ctx, head_dim), zeros, the
 * heads split over the plan's tp and tp+sp dims (any model's: the Llama's
 * holds its kv heads). Freed by mg_gpt_cache_release. */
int mg_gpt_cache_make(mg_gpt_cache *c, int64_t layers, int64_t heads, int64_t ctx,
                      int64_t head_dim, const mg_mesh *mesh, const mg_plan *plan);
void mg_gpt_cache_release(mg_gpt_cache *c);
/* kv[0], kv[1] (1, heads, n, head_dim) into block l's k and v at positions
 * [pos, pos + n), moved to the cache's placements first. */
int mg_gpt_cache_store(mg_gpt_cache *c, int l, mg_dtensor *const *kv, int64_t pos);
/* Without autograd. ids (1, n): with pos 0, a prompt of n <= ctx tokens (the
 * cache is refilled); else n == 1 and pos == c->len < ctx, the next token.
 * Returns the logits (1, 1, V) of the last position; the cache then holds
 * pos + n positions. */
mg_dtensor *mg_gpt_forward_cached(mg_gpt *g, mg_param_table *t, mg_gpt_cache *c,
                                  const mg_dtensor *ids, int64_t pos);

/* Parameter k of a language model (described by d: the GPT's or the Llama's)
 * added to t on `mesh` with the placements of its role under `plan`, at index
 * k of the whole model (so every stage draws the same initial values): its
 * index in t, or a negative status. */
int mg_gpt_param_add(mg_param_table *t, const mg_mesh *mesh, const mg_plan *plan, int k,
                     const mg_gpt_param_desc *d, uint64_t seed);

/* The L + 2 pipeline layers' costs per row (one sequence of ctx tokens):
 * the embedding, the blocks, the head (nn/pipeline_cost.h). */
int mg_gpt_layer_costs(const mg_gpt_config *cfg, mg_layer_cost *out);

#endif
