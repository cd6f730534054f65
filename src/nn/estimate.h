/* estimate.h: what one training step will cost each rank, worked out before
 * anything runs (`meshgrad plan --estimate`): the peak memory of a rank
 * (parameters, gradients, optimizer state, the step arena's activations and
 * their gradients, the scratch arena: gathered fully sharded parameters, or
 * gradients on their way, the larger; the reducer's bucket buffers) and the bytes
 * each collective moves per step, the figures `meshgrad train` measures and
 * prints at its end (cli/train_report.h).
 *
 * A model describes itself as a list of layers (mg_est_layer), in the order
 * its forward pass runs them: what each does to the activation (global
 * shapes) and the parameters it holds; the parallel plan places them
 * (mg_plan_linear, mg_plan_batch). The estimate then walks the step at the
 * level of specs, on coordinate 0 of the mesh (whose shards are the largest),
 * with the library's own decisions: each op's sharding rule (dist/rules.h,
 * the candidates the op itself offers), the redistribute planner's
 * collectives (mg_redistribute_moves), each forward redistribution mirrored
 * in backward, parameters gathered for use (and again for an input gradient)
 * and their gradients reduce-scattered, data-parallel gradients summed in
 * buckets (4 MiB packing buffers, or in place when large; on one node a large
 * one is left to the optimizer's split step, ZeRO-1, its value and state kept
 * once per node), and the few control messages of `meshgrad train` (the data
 * loader's, the loss's label check and read, the per-step agreement, the
 * clipping norm). Memory counts tensor data as the arenas hand it out (64-byte
 * blocks) and the headers every tensor, distributed tensor and tape node take.
 *
 * A new layer kind is a case in estimate.c's forward and backward walks that
 * offers the same rule candidates as its op and records what its VJP makes.
 * The GPT, which branches (residual stream, q/k/v), is walked by
 * estimate_gpt.c on a small tape of its own with the same steps
 * (estimate_walk.h). Its approximations: activations a few percent high
 * (every VJP output counted as a new tensor); the tied wte's gradient
 * scratch and tp's gathered copies not counted.
 *
 * Exports: mg_est_kind, mg_est_layer, mg_est_config, mg_estimate,
 * mg_estimate_step, mg_est_layers_model, MG_EST_MODEL_MAX_LAYERS, mg_estimate_total,
 * mg_estimate_gpt. */
#ifndef MG_NN_ESTIMATE_H
#define MG_NN_ESTIMATE_H

#include <stdbool.h>
#include <stdint.h>

#include "meshgrad.h"
#include "nn/gpt.h"
#include "nn/model.h"
#include "nn/plan.h"

typedef enum {
    MG_EST_RESHAPE,       /* x -> reshaped to `shape` (dim 0, the batch, kept) */
    MG_EST_PERMUTE,       /* x -> permuted by `perm` */
    MG_EST_LINEAR,        /* y = x W^T + b, W (out, in), b (out): layer `index` of the plan */
    MG_EST_RELU,          /* an elementwise op that a Partial input does not pass */
    MG_EST_CROSS_ENTROPY, /* the mean loss of (B, C) logits against (B) labels */
} mg_est_kind;

typedef struct {
    mg_est_kind kind;
    int index;                     /* LINEAR: its place in the plan (column/row parallel) */
    int64_t in, out;               /* LINEAR: features */
    int ndim;                      /* RESHAPE: the output's rank; PERMUTE: the input's */
    int64_t shape[MG_MAX_DIMS];    /* RESHAPE: the global shape, shape[0] the batch */
    int perm[MG_MAX_DIMS];         /* PERMUTE */
    bool gpt;                      /* LINEAR of the GPT: placed by `role` (plan.h), not `index` */
    bool no_bias;                  /* LINEAR: none (the GPT's head, tied to wte: no memory) */
    mg_gpt_role role;
} mg_est_layer;

typedef struct {
    int mesh_ndim;
    int mesh[MG_MAX_MESH_DIMS];
    mg_plan plan;
    int64_t batch;                 /* global */
    int64_t micro;                 /* GPT: micro-batches a step (--grad-accum), of batch / micro
                                      windows each; 0 or 1: the whole batch at once */
    int sample_ndim;
    int64_t sample[MG_MAX_DIMS];   /* one input sample: (8, 8) for the digits */
    int64_t classes;
    int states;                    /* optimizer state tensors per parameter (AdamW 2) */
    int clip;                      /* gradients clipped by global norm */
    int nodes;                     /* nodes the ranks run on (shared memory within one) */
} mg_est_config;

typedef struct {
    double params, grads, optim;          /* bytes of coordinate 0 */
    double activations, gathered, scratch; /* the arenas' high-water marks */
    double buffers;                        /* the reducer's packing buffers */
    double bytes[MG_COLL_COUNT];           /* sent per step, as mg_comm_stats counts */
    double calls[MG_COLL_COUNT];
} mg_estimate;

/* Walks one step of the model (n layers) under the configuration. MG_EINVAL
 * with a message for shapes that do not fit or a plan that does not fit the
 * mesh. */
int mg_estimate_step(const mg_est_layer *layers, int n, const mg_est_config *cfg, mg_estimate *out);
/* The layers of `meshgrad train`'s models (model.h) of `depth` linear layers
 * (0: the model's least, as --depth 0); how many (at most max, which
 * MG_EST_MODEL_MAX_LAYERS always is enough for). */
#define MG_EST_MODEL_MAX_LAYERS (2 * MG_MODEL_MAX_LAYERS + 2)
int mg_est_layers_model(mg_model_kind kind, int64_t rows, int64_t cols, int64_t hidden,
                        int64_t channels, int64_t classes, int depth, mg_est_layer *out, int max);
double mg_estimate_total(const mg_estimate *e);
/* The GPT's step (estimate_gpt.c) on batches of cfg->batch windows of
 * g->ctx tokens. */
int mg_estimate_gpt(const mg_gpt_config *g, const mg_est_config *cfg, mg_estimate *out);

#endif
