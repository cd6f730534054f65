/* llama.h: a Llama (llama2.c's model.py; Meta's Llama 2) on distributed
 * tensors, as a list of blocks with a forward each:
 *
 *   ids (B, T) -> tok_embeddings[ids]                         x: (B, T, C)
 *   L blocks:  h = rms_norm(x)                               attention_norm
 *              q = rope(h wq^T), k = rope(h wk^T), v = h wv^T  H heads of D = C / H
 *                                                            for q, KV for k and v
 *              x = x + wo(attention_gqa(q, k, v))            causal
 *              h = rms_norm(x)                               ffn_norm
 *              x = x + w2(silu(h w1^T) * (h w3^T))           SwiGLU of width F
 *   rms_norm(x) output^T                                     logits: (B, T, V)
 *
 * No biases. RMS norms over C with eps; rope on (B, T, H, D) pairs (2i, 2i + 1)
 * turned by pos theta^(-2i / D) (mg_rope). The head is tied to tok_embeddings
 * (llama2.c's default) unless cfg.tied is 0, when `output.weight` is a
 * parameter of its own. F (hidden) is llama2.c's rule by default:
 * floor(2 * 4C / 3) rounded up to a multiple of `multiple_of`
 * (mg_llama_hidden).
 *
 * Parameters, with llama2.c's state_dict names and PyTorch's (out, in) layout:
 *   tok_embeddings.weight (V, C); per block l, "layers.l." and
 *   attention_norm.weight (C), attention.wq.weight (H D, C), attention.wk.weight
 *   and .wv.weight (KV D, C), attention.wo.weight (C, H D), ffn_norm.weight (C),
 *   feed_forward.w1.weight (F, C), feed_forward.w2.weight (C, F),
 *   feed_forward.w3.weight (F, C); then norm.weight (C), and output.weight
 *   (V, C) when untied. The rows of wq are (H, D) and of wk, wv (KV, D): a
 *   split of the rows is a split of the heads.
 * Parameter k of the whole model: 0 tok_embeddings, then each block's nine in
 * the order above, then norm.weight, then output.weight (untied only).
 *
 * Init (model.py's): every weight and the embedding N(0, 0.02), w3 and wo
 * N(0, 0.02 / sqrt(2 L)), the norms' weights 1. Drawn by Philox from (seed,
 * the parameter's index) by global element index: every mesh starts bitwise
 * equal.
 *
 * Plans (torchtitan's Llama; placements from plan.h's mg_plan_gpt_param):
 * tp splits the heads of q and of k, v (wq, wk, wv column parallel: KV must
 * be divisible by the tp degree), w1 and w3 column parallel, wo and w2 row
 * parallel, the embedding and head vocab parallel; sp, tp+sp, fsdp, dp and
 * pp as the GPT's (gpt.h): the residual stream between blocks at
 * mg_plan_residual, the input of each tensor-parallel region at
 * mg_plan_region_input.
 *
 * Pipelines (gpt_pipeline.h) cut the Llama as L + 2 layers: 0 the embedding,
 * 1..L the blocks, L + 1 the norm and the head; a stage holding a tied head
 * without the embedding holds a copy of tok_embeddings (emb_copy).
 *
 * Generation: a KV cache (mg_gpt_cache, gpt.h) holds each block's k and v
 * (1, KV, ctx, D) after rope; mg_llama_forward_cached runs a prompt from
 * position 0 or one token at position pos against it.
 *
 * Exports: mg_llama_config, mg_llama_block, mg_llama, mg_llama_hidden,
 * mg_llama_check, mg_llama_init_held, mg_llama_free, mg_llama_param_total,
 * mg_llama_param_layer, mg_llama_layer_param, mg_llama_param_describe,
 * mg_llama_param_slot, mg_llama_param_count, mg_llama_layer_costs,
 * mg_llama_forward_layers, mg_llama_cache_init, mg_llama_forward_cached. */
#ifndef MG_NN_LLAMA_H
#define MG_NN_LLAMA_H

#include <stdint.h>

#include "nn/gpt.h"
#include "nn/param.h"
#include "nn/pipeline_cost.h"
#include "nn/plan.h"

typedef struct {
    int64_t layers, heads, kv_heads, embd, ctx, vocab; /* L, H, KV, C, T, V */
    int64_t hidden;                                    /* F: the SwiGLU's width */
    double rope_theta, norm_eps;
    int tied; /* 1: the head is tok_embeddings (llama2.c's default) */
} mg_llama_config;

typedef struct { /* indices in the parameter table (-1: another pipeline stage holds it) */
    int attn_norm, wq, wk, wv, wo, ffn_norm, w1, w2, w3;
} mg_llama_block;

typedef struct {
    mg_llama_config cfg;
    int emb, norm, output; /* output: -1 when tied (the head is emb) */
    mg_llama_block *block; /* cfg.layers of them */
    mg_placement residual[MG_MAX_MESH_DIMS], region_in[MG_MAX_MESH_DIMS];
    int mesh_ndim;
    int emb_copy; /* tok_embeddings is here for the tied head only (the first stage saves it) */
    mg_recompute_mode recompute; /* what backward runs again (nn/recompute.h) */
} mg_llama;

/* llama2.c's FFN width for embd C: floor(2 * 4C / 3) rounded up to a
 * multiple of `multiple_of` (>= 1). */
int64_t mg_llama_hidden(int64_t embd, int64_t multiple_of);

/* Refuses, with one line naming the fix: sizes < 1, heads not dividing embd,
 * an odd head dim (rope turns pairs), kv_heads not dividing heads, a
 * tensor-parallel degree that does not divide kv_heads (and so the heads), a
 * vocabulary smaller than it, a sequence-parallel degree above ctx, theta
 * or eps not above 0. Metadata only: every rank decides the same. */
int mg_llama_check(const mg_llama_config *cfg, const mg_plan *plan, const mg_mesh *mesh);
/* Checks, then adds the parameters of the pipeline layers held[0 .. L + 2)
 * (NULL: all) to t (placements from the plan). */
int mg_llama_init_held(mg_llama *m, mg_param_table *t, const mg_mesh *mesh, const mg_plan *plan,
                       const mg_llama_config *cfg, uint64_t seed, const unsigned char *held);
void mg_llama_free(mg_llama *m);

/* Parameters of the whole model: 2 + 9 L, and output.weight when untied. */
int mg_llama_param_total(const mg_llama_config *cfg);
/* The pipeline layer (0 .. L + 1) of parameter k of the whole model. */
int mg_llama_param_layer(const mg_llama_config *cfg, int k);
/* The first parameter of pipeline layer `layer` (L + 2: the count). */
int mg_llama_layer_param(const mg_llama_config *cfg, int layer);
/* Parameter k described (gpt.h's description: name, shape, role, init). */
void mg_llama_param_describe(const mg_llama_config *cfg, int k, mg_gpt_param_desc *d);
/* Where m keeps parameter k's index in the table (-1: not held here). */
int *mg_llama_param_slot(mg_llama *m, int k);
/* Elements of every parameter, the tied head counted once:
 * V C + L (2 C + 2 C H D + 2 C KV D + 3 C F) + C (+ V C untied). */
int64_t mg_llama_param_count(const mg_llama_config *cfg);
/* The L + 2 pipeline layers' costs per row (one sequence of ctx tokens). */
int mg_llama_layer_costs(const mg_llama_config *cfg, mg_layer_cost *out);

/* Pipeline layers [first, last) (held here) of x: layer 0 takes ids (B, T),
 * the others x (B, T, C); layer L + 1 gives the logits (B, T, V). */
mg_dtensor *mg_llama_forward_layers(mg_llama *m, mg_param_table *t, int first, int last,
                                    const mg_dtensor *x);

/* The KV cache: per block k and v (1, KV, ctx, D), the kv heads placed as the
 * wk, wv rows (split under tp). Freed by mg_gpt_cache_release. */
int mg_llama_cache_init(mg_gpt_cache *c, const mg_llama *m, const mg_mesh *mesh,
                        const mg_plan *plan);
/* Without autograd. ids (1, n): with pos 0, a prompt of n <= ctx tokens (the
 * cache is refilled); else n == 1 and pos == c->len < ctx, the next token.
 * Returns the logits (1, 1, V) of the last position. */
mg_dtensor *mg_llama_forward_cached(mg_llama *m, mg_param_table *t, mg_gpt_cache *c,
                                    const mg_dtensor *ids, int64_t pos);

#endif
