/* rules.h: sharding strategies per op, in global shapes (docs/DESIGN.md
 * "Sharding rules").
 *
 * A rule lists candidate strategies for ONE mesh dimension: a target placement
 * for each input and the output placement that results. The same list applies
 * to every mesh dimension (a candidate may name the mesh dims it is limited to);
 * mg_rules_choose() picks, for each mesh dim on its own,
 * the candidate that moves the fewest bytes from the inputs' current placements
 * (on ties the one that changes the fewest inputs' placements, then the first
 * in the list, so every rank picks the same one), and
 * returns the full target specs and the output spec.
 *
 * Exports the candidate generators for each family of ops:
 *   contraction (linear, matmul and their gradients, einsum-style labels),
 *   pointwise (broadcasting), reduction, permute, expand, reshape, losses,
 *   and the transformer ops: softmax, layer norm (and RMS norm), embedding,
 *   attention (and grouped-query attention), rotary embedding, narrow / cat. A candidate may shard a dim the op reduces over (softmax,
 *   layer norm, loss-parallel cross-entropy): the op then sums its small
 *   per-row statistics over the mesh dims that shard it, never the tensor. */
#ifndef MG_RULES_H
#define MG_RULES_H

#include <stdbool.h>

#include "dist/placement.h"

#define MG_RULE_MAX_INPUTS 3
#define MG_RULE_MAX_CANDIDATES 40

typedef struct {
    mg_placement in[MG_RULE_MAX_INPUTS];
    mg_placement out;
    unsigned mesh_dims; /* the mesh dims (bit m) it may be chosen on; 0: every one */
} mg_dim_strategy;

typedef struct {
    int n;
    mg_dim_strategy c[MG_RULE_MAX_CANDIDATES];
} mg_candidates;

/* Bytes moved (estimate, global metadata only) to change mesh dim m of spec s
 * to placement `to`, everything else unchanged. Shard -> Partial counts the
 * sum it makes owed as well (a reduce-scatter), so an op sums a Partial input
 * into a shard rather than gathering a shard into a Partial sum. */
double mg_rules_dim_cost(const mg_spec *s, int m, mg_placement to);

/* inputs[i] may be NULL (an absent optional input, e.g. no bias): its target is
 * left untouched. targets[i] receives input i's target spec; *out the output spec
 * with global shape (out_ndim, out_shape). */
int mg_rules_choose(const mg_candidates *cands, int n_inputs, const mg_spec *const *inputs,
                    int out_ndim, const int64_t *out_shape, mg_spec *targets, mg_spec *out);

/* Contraction: each operand's dims carry integer labels; a label found in the
 * output is free (batch, rows, columns), one missing from the output is
 * contracted. Candidates: all Replicate; each label sharded on every operand
 * that has it (output sharded if free, Partial if contracted); Partial through
 * one operand times Replicate others. Operand 2 (optional bias) has the output's
 * last label only; it is Replicate whenever the output is Partial. */
void mg_rules_contraction(mg_candidates *c, int n_inputs, const int *ndims, const int *const *labels,
                          int out_ndim, const int *out_labels, bool has_bias);

typedef enum {
    MG_LINEARITY_NONE = 0, /* no Partial input passes (relu, gelu, ...) */
    MG_LINEARITY_SUM,      /* Partial passes when every input is Partial (add, sub) */
    MG_LINEARITY_FIRST,    /* Partial passes through input 0 when the others are Replicate
                              (mul, div by a replicated factor, relu_backward(dy, x)) */
    MG_LINEARITY_ANY,      /* Partial passes through any one input, others Replicate (mul) */
} mg_linearity;

/* Pointwise with broadcasting (shapes aligned right). */
void mg_rules_pointwise(mg_candidates *c, int n_inputs, const int *ndims,
                        const int64_t *const *shapes, int out_ndim, const int64_t *out_shape,
                        mg_linearity lin);

/* Sum over the dims in `reduced` (mask over the input's dims). */
void mg_rules_reduce(mg_candidates *c, int ndim, const bool *reduced, bool keepdim);

/* Output dim i is input dim perm[i]. */
void mg_rules_permute(mg_candidates *c, int ndim, const int *perm);

/* Expand (broadcast) in_shape to out_shape (aligned right, global sizes). */
void mg_rules_expand(mg_candidates *c, int in_ndim, const int64_t *in_shape, int out_ndim,
                     const int64_t *out_shape);

/* Reshape/view: the output placements that keep the input's sharding where the
 * element blocks stay the same on every coordinate, computed for the actual
 * spec. keep_out[m] receives the output placement for mesh dim m, and ok[m]
 * says whether the input placement on m can be kept (else it must be made
 * Replicate first). */
void mg_rules_reshape(const mg_spec *in, int out_ndim, const int64_t *out_shape,
                      mg_placement *keep_out, bool *ok);

/* Cross-entropy: logits (..., V) of logits_ndim dims, labels (...): all
 * Replicate; a row dim sharded on both -> Partial (the loss is a mean over the
 * global rows); logits sharded on V with labels Replicate -> Replicate (loss
 * parallel: the op sums the rows' max, sum of exponentials and target logit
 * over the mesh dims that shard V; the logits are never gathered). */
void mg_rules_cross_entropy(mg_candidates *c, int logits_ndim);

/* Element-wise loss over two same-shape inputs, reduced to a scalar (mse):
 * all Replicate -> Replicate, both Shard(d) -> Partial. */
void mg_rules_elementwise_loss(mg_candidates *c, int ndim);

/* Softmax over the last dim of an ndim tensor: every shard passes, the last dim's
 * too (the op sums the rows' statistics across); no Partial (not linear). */
void mg_rules_softmax(mg_candidates *c, int ndim);

/* Layer norm of x (..., C) with weight and bias (C): a shard of a row dim passes
 * (weight and bias Replicate); x sharded on C takes weight and bias sharded alike
 * (the op sums Partial statistics over that mesh dim); no Partial. RMS norm's
 * rule too (x and weight: its bias input is absent). */
void mg_rules_layer_norm(mg_candidates *c, int ndim);

/* Embedding: ids (...) of ids_ndim dims, table (V, C) -> (..., C). A shard of the
 * ids passes to the output (table Replicate); table S(0) with ids Replicate ->
 * Partial (vocab parallel: each rank looks up the ids in its rows); table S(1) ->
 * output sharded on its last dim; a Partial table -> Partial. Ids are indices:
 * never Partial. */
void mg_rules_embedding(mg_candidates *c, int ids_ndim);

/* Attention, q, k, v (B, H, T, D): a batch or head shard on all three passes;
 * q sharded on T with k, v Replicate -> output sharded on T (sequence parallel:
 * k and v gathered along T only); with q, k Replicate, v Partial -> Partial and
 * v sharded on D -> output sharded on D (attention is linear in v). */
void mg_rules_attention(mg_candidates *c);

/* Grouped-query attention, q (B, H, T, D), k and v (B, KV, T, D): the candidates
 * of mg_rules_attention, the heads shard only on the mesh dims in heads_on (bit
 * m; none when 0): those on which an input is sharded on its heads already,
 * where the op has checked that KV splits evenly. Elsewhere a heads shard could
 * give a rank query heads whose k, v heads another rank holds. */
void mg_rules_attention_gqa(mg_candidates *c, unsigned heads_on);

/* Rotary embedding of x (B, T, H, D): a shard of B, T or H passes (a T shard
 * takes its positions from its offset), Partial passes (a rotation is linear);
 * D is never sharded (its pairs would split). */
void mg_rules_rope(mg_candidates *c);

/* Narrow or cat along `dim` (n inputs of ndim dims): all Replicate, all sharded on
 * one same other dim, or all Partial pass through; a shard of `dim` is undone. */
void mg_rules_narrow(mg_candidates *c, int n_inputs, int ndim, int dim);

#endif
