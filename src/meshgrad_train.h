/* meshgrad_train.h: the training API of meshgrad, for C programs that build
 * their own model from the ops of meshgrad.h (installed beside it).
 *
 * Exports opaque handles and their calls:
 *   mg_optim         SGD or AdamW over a list of named distributed tensors,
 *                    clipping of their gradients by global norm
 *   mg_schedule      learning-rate schedules: constant, cosine, with warmup
 *   mg_ckpt          checkpoints: named tensors + the state of one optimizer
 *                    or of several named ones + step + attributes, in the
 *                    file format of `meshgrad train` (read by `meshgrad ckpt
 *                    info`; docs/CHECKPOINTS.md)
 *   mg_token_loader  windows of a token data set (docs/DATA.md)
 *   mg_recompute     a block of a model whose activations are dropped after
 *                    its forward and computed again in backward
 *   mg_train_config, mg_trainer
 *                    a training run of a model meshgrad builds (the MLPs,
 *                    the GPT, the Llama): what `meshgrad train` runs, step
 *                    by step
 *
 * These are the same optimizers, clipping, checkpoints and loader that
 * `meshgrad train` uses (a data-parallel parameter whose ranks share a node
 * gets the same split update, docs/CHECKPOINTS.md's guarantees hold for every
 * save). As in meshgrad.h, shapes are GLOBAL, fallible calls return a status
 * (0 ok, negative MG_E*) or NULL and mg_last_error() says what was wrong and
 * what to do, and a call marked "Collective" must be made by every rank with
 * the same arguments (where they differ, every rank gets the same error). */
#ifndef MESHGRAD_TRAIN_H
#define MESHGRAD_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "meshgrad.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- optimizers ----------------------------------------------------------- */
typedef struct mg_optim mg_optim;

/* Collective. An optimizer over n parameters: tensors made by mg_distribute or
 * mg_from_local that require grad (Shard or Replicate), each named once
 * (letters, digits, '_', '.', '-'; up to 63 characters, not starting with
 * '.'): the names of its state in checkpoints. Make it before the first
 * backward; the tensors must outlive it. Its state tensors (zeros) have each
 * parameter's placements.
 * SGD as PyTorch's: g += weight_decay p; buf = g at the first step, else
 * momentum buf + g; p -= lr buf (no buffer when momentum is 0). */
mg_optim *mg_optim_new_sgd(int n, mg_dtensor *const *params, const char *const *names,
                           float momentum, float weight_decay);
/* AdamW as PyTorch's: p -= lr weight_decay p, then the bias-corrected Adam
 * step with eps added to sqrt(v_hat) (PyTorch's defaults: betas 0.9, 0.999,
 * eps 1e-8, weight_decay 0.01). */
mg_optim *mg_optim_new_adamw(int n, mg_dtensor *const *params, const char *const *names,
                             float beta1, float beta2, float eps, float weight_decay);
/* Collective. One update of every parameter that has a gradient (mg_grad; a
 * parameter the loss did not reach is left as it is), learning rate lr. */
int mg_optim_step(mg_optim *, float lr);
/* Zeroes every parameter's gradient (mg_zero_grad): call after each step,
 * or gradients add up across steps. */
int mg_optim_zero_grad(mg_optim *);
/* Collective. The L2 norm of all the parameters' gradients together (a
 * replicated gradient counted once). */
int mg_optim_grad_norm(mg_optim *, double *norm);
/* Collective. Clips by global norm (torch.nn.utils.clip_grad_norm_): when the
 * norm exceeds max_norm, every gradient is scaled by max_norm / (norm + 1e-6).
 * *norm (may be NULL) gets the norm before clipping. */
int mg_optim_clip_grads(mg_optim *, double max_norm, double *norm);
void mg_optim_free(mg_optim *); /* frees its state; the parameters are the caller's (refused,
                                 * with a message, while a checkpoint holds it) */

/* ---- learning-rate schedules ----------------------------------------------- */
typedef struct mg_schedule mg_schedule;

/* For 0-based step s: lr (s + 1) / warmup while s < warmup (none when warmup
 * is 0), then constant: lr. */
mg_schedule *mg_schedule_new_constant(double lr, int64_t warmup);
/* The same warmup, then lr_min + (lr - lr_min) 0.5 (1 + cos(pi p)) with
 * p = (s - warmup) / (total - warmup), and lr_min from step `total` on. */
mg_schedule *mg_schedule_new_cosine(double lr, double lr_min, int64_t warmup, int64_t total);
/* The learning rate of 0-based step `step`; NAN (with a message) when the
 * schedule is NULL or the step negative. */
double mg_schedule_lr(const mg_schedule *, int64_t step);
void mg_schedule_free(mg_schedule *);

/* ---- checkpoints ------------------------------------------------------------ */
typedef struct mg_ckpt mg_ckpt;

/* A list of what a checkpoint holds, saved and loaded together: named
 * tensors (as /params/<name>), optimizers' state (PyTorch's state names:
 * /optim/<param>/<state> for one optimizer set by mg_ckpt_set_optim, as
 * `meshgrad train` writes it; /optim/<optimizer>/<param>/<state> for
 * optimizers named by mg_ckpt_add_optim), the step, and text attributes.
 * One HDF5 file of global arrays: it loads on any mesh and any placements
 * (docs/CHECKPOINTS.md). */
mg_ckpt *mg_ckpt_new(void);
/* A tensor made by mg_distribute or mg_from_local, under a name as the
 * optimizer's. It is read at each save and written at each load. */
int mg_ckpt_add(mg_ckpt *, const char *name, mg_dtensor *tensor);
/* The one optimizer whose state is saved and loaded too, unnamed (NULL: no
 * optimizer from now on, also none of mg_ckpt_add_optim's). Given again, the
 * same optimizer changes nothing; another one is refused (its state would
 * not be saved): name each of several with mg_ckpt_add_optim. */
int mg_ckpt_set_optim(mg_ckpt *, mg_optim *);
/* One more optimizer whose state is saved and loaded too, under `name` (1
 * to 31 letters, digits, '_', '.', '-'; not starting with '.'), e.g. the
 * AdamW of the weights that decay and the AdamW of those that do not: up to
 * 16 of them, each once and under its own name. Refused when the checkpoint
 * holds an optimizer of mg_ckpt_set_optim. A load finds each by its name in
 * the file; a file of one optimizer (named or not) loads into a checkpoint
 * of one (named or not). */
int mg_ckpt_add_optim(mg_ckpt *, const char *name, mg_optim *);
int mg_ckpt_set_step(mg_ckpt *, int64_t step); /* optimizer steps taken, >= 0 */
int64_t mg_ckpt_step(const mg_ckpt *);         /* set, or loaded; -1 when NULL */
/* A text attribute (key up to 63 characters, value up to 1023), set or
 * replaced. The keys meshgrad writes are refused: format, version, step,
 * mesh, meshgrad.version, optimizer, optimizer.*, placements.*. */
int mg_ckpt_set_attr(mg_ckpt *, const char *key, const char *value);
/* An attribute set, or read by the last load (any of the file's, also
 * "step", "mesh", "optimizer"...); NULL when there is none. */
const char *mg_ckpt_get_attr(const mg_ckpt *, const char *key);
/* Collective. Writes the checkpoint to path (the step, each optimizer's kind,
 * settings and step, the mesh and placements now, meshgrad's version, and
 * the attributes). The file is written under a temporary name and renamed
 * when complete; it replaces `path` only when that is absent or a meshgrad
 * checkpoint; any failure on any rank ends the save on all of them with one
 * message, nothing else changed (docs/CHECKPOINTS.md). */
int mg_ckpt_save(mg_ckpt *, const char *path);
/* Collective. Reads path into the tensors (each rank its block, under the
 * tensors' placements now), the optimizers' state and steps, the step and
 * the attributes. Refused before any tensor changes: a file whose tensors
 * are not exactly the names given (a checkpoint of another model), a shape
 * that differs, an optimizer of another kind or without state in the file,
 * optimizers of other names or number than the file's. A
 * file that fails its checksums or holds a non-finite value is refused too,
 * but tensors read before that one hold the file's values. */
int mg_ckpt_load(mg_ckpt *, const char *path);
void mg_ckpt_free(mg_ckpt *);

/* ---- token data sets --------------------------------------------------------- */
typedef struct mg_token_loader mg_token_loader;

/* Collective. Opens split "train" or "val" of a token data set (uint8, uint16
 * or int32 tokens and a vocab_size attribute: docs/DATA.md; made by `meshgrad
 * data text2h5` or `bin2h5`) for batches on `mesh`; every token is checked to
 * be inside the vocabulary. */
mg_token_loader *mg_token_loader_open(const mg_mesh *mesh, const char *path, const char *split);
int64_t mg_token_loader_count(const mg_token_loader *); /* tokens in the split; -1 when NULL */
int mg_token_loader_vocab(const mg_token_loader *);     /* vocabulary size; -1 when NULL */
/* Collective. The training batch of `step`: B windows of T + 1 tokens whose
 * starts are drawn by Philox from (seed, step, row), the same on every mesh
 * and every run; x (B, T) holds tokens [start, start + T) as floats and
 * y (B, T) the next ones, both with placements p (n = the mesh's dims; e.g.
 * Shard(0) for data parallel). They live until mg_step_end(). */
int mg_token_loader_batch(mg_token_loader *, uint64_t seed, int64_t step, int64_t B, int64_t T,
                          const mg_placement *p, int n, mg_dtensor **x, mg_dtensor **y);
/* The non-overlapping evaluation windows of the split: floor((count - 1) / T). */
int64_t mg_token_loader_eval_windows(const mg_token_loader *, int64_t T);
/* Collective. Evaluation windows first .. first + B - 1 (window k starts at
 * token k T) as x and y, like mg_token_loader_batch. */
int mg_token_loader_eval_batch(mg_token_loader *, int64_t first, int64_t B, int64_t T,
                               const mg_placement *p, int n, mg_dtensor **x, mg_dtensor **y);
/* Collective. Closes the loader; a loader closed already (or NULL) is left
 * alone: a second close does nothing. */
void mg_token_loader_close(mg_token_loader *);

/* ---- activation recomputation ------------------------------------------------
 * Memory for time: a block's activations are given back as soon as its
 * forward is done and computed again when backward reaches the block. The
 * gradients are bitwise those of the block kept (the same kernels run in the
 * same order: one backward walks the whole graph, the block's part with its
 * ops run again), on every plan, with micro-batches and in a pipeline stage;
 * not with zero-bubble's split backward (--pp-schedule zb-h1), whose weight
 * step would need the activations after the block gave them back. */
typedef mg_dtensor *(*mg_recompute_fn)(void *ctx, const mg_dtensor *x);

/* y = fn(ctx, x), its activations dropped: only x and y are kept (y's data
 * copied out of the memory the block used). fn must record the same ops on
 * the same tensors each time it runs (a function of x, of parameters and of
 * ctx, with no state of its own), and nothing it makes but y may be used
 * after it: a backward refuses otherwise, naming the op. ctx_bytes > 0: *ctx
 * is copied (a small struct of pointers, say); 0: ctx itself is kept and must
 * stay valid until the backward. With gradients off (evaluation), or inside
 * another fn, it is just fn(ctx, x). NULL with a message on failure. */
mg_dtensor *mg_recompute(mg_recompute_fn fn, void *ctx, size_t ctx_bytes, const mg_dtensor *x);

/* ---- training runs ------------------------------------------------------------
 * The run of `meshgrad train`, for a program that drives it itself: a model
 * meshgrad builds (mlp, permute-mlp, gpt, llama) with its parallel plan, its data
 * set, optimizer, schedule, clipping, gradient accumulation and pipeline,
 * one call a step. The CLI is such a program; so is plan --estimate, which
 * runs the same steps on a device with no data. */
typedef struct mg_train_config mg_train_config;
typedef struct mg_trainer mg_trainer;

/* A configuration with every option at its default (`meshgrad train --help`
 * lists them). */
mg_train_config *mg_train_config_new(void);
/* Sets one option from text, key as the flag without "--" ("lr", "parallel",
 * "grad-accum"). MG_EINVAL naming the key on an unknown key or a bad value. */
int mg_train_config_set(mg_train_config *, const char *key, const char *value);
/* What a run recomputes in backward (config key "recompute": none, blocks,
 * attention): nothing; each transformer block (its input and output kept);
 * each block's attention (from the qkv projection's output to the heads
 * merged: the head split, the attention kernel with what it saves, the
 * merge). Models without blocks (the MLPs) take only none. */
typedef enum { MG_RECOMPUTE_NONE = 0, MG_RECOMPUTE_BLOCKS, MG_RECOMPUTE_ATTENTION } mg_recompute_mode;
int mg_train_config_set_recompute(mg_train_config *, mg_recompute_mode mode);
/* Reads a file of `key = value` lines ('#' starts a comment), as --config. */
int mg_train_config_load(mg_train_config *, const char *path);
void mg_train_config_free(mg_train_config *);

/* Collective. The run of `cfg` on `mesh` (NULL: one made from the config's
 * "mesh", over every rank, freed with the trainer): the plan, the data set
 * (its "data"), the model with its initial parameters, the optimizer and the
 * schedule. NULL with a message. */
mg_trainer *mg_trainer_new(const mg_train_config *cfg, mg_mesh *mesh);
void mg_trainer_free(mg_trainer *);

/* One optimizer step. */
#define MG_TRAIN_AGREE 3
typedef struct {
    /* in: values the ranks agree on with the step's own agreement (one
     * all-reduce MAX after the backward): a stop request, an error of the
     * caller's; out: each one's largest over the ranks */
    int64_t agree[MG_TRAIN_AGREE];
    /* out */
    double loss;      /* the batch's mean loss */
    double lr;        /* the learning rate the step took */
    double grad_norm; /* before clipping (0 when not clipping) */
    double data_s;    /* seconds this rank waited for the batch */
    int64_t data_comm_ns; /* of them, nanoseconds in the loader's collectives */
    int skipped;      /* the loss or a gradient was not finite and the run skips such
                       * steps (config "on-nonfinite" skip): no update was made */
    char nonfinite[256]; /* then: what was not finite */
} mg_train_step;

/* Collective. One step: the micro-batches' forward and backward (the
 * pipeline's schedule with pp), the agreement, clipping and the update, the
 * gradients zeroed. A step whose loss or gradient is not finite is refused
 * (MG_ESTATE naming it, nothing updated) or, with on-nonfinite skip, skipped
 * (st->skipped). */
int mg_trainer_step(mg_trainer *, mg_train_step *st);

/* An evaluation, without autograd. */
typedef struct {
    /* in: called during a long evaluation (NULL: not) with the windows or
     * rows done and in all, on every rank */
    void (*progress)(void *ctx, int64_t done, int64_t total);
    void *ctx;
    /* out */
    double loss;     /* the mean loss: the GPT's and the Llama's over the val windows, the
                      * MLPs' over the test split */
    double accuracy; /* the MLPs' (0 for the GPT and the Llama) */
    int64_t rows;    /* windows or rows evaluated (0: none, a data set without a test split) */
    int64_t correct; /* the MLPs' right predictions */
} mg_train_eval;

/* Collective. The GPT, the Llama: the mean loss over the non-overlapping ctx-windows of
 * /val (at most the config's "eval-tokens" tokens of them, from the start);
 * the MLPs: loss and accuracy on the test split. */
int mg_trainer_evaluate(mg_trainer *, mg_train_eval *ev);

/* Collective. Saves the run (parameters, optimizer state, where the data and
 * schedule stand, the settings) to path, atomically (mg_ckpt_save's rules). */
int mg_trainer_save(mg_trainer *, const char *path);
/* Collective. Loads a checkpoint of this run's model and optimizer (saved on
 * any mesh) and moves the data and the step to where it stood; a setting that
 * differs (lr, batch) is reported on stderr and the config's is used, a model
 * or optimizer that differs is refused. `note` (may be NULL) gets a line
 * saying where the run resumed. */
int mg_trainer_resume(mg_trainer *, const char *path, char *note, size_t len);

/* Steps done (the checkpoint's after a resume). */
int64_t mg_trainer_steps(const mg_trainer *);
/* The checkpoint file the last resume loaded ("" when none), and the
 * settings of it the run changed ("data.file: a.h5 -> b.h5; schedule.lr:
 * 0.001 -> 0.002", "" when none), each also reported on stderr. */
const char *mg_trainer_resumed_from(const mg_trainer *);
const char *mg_trainer_resume_changes(const mg_trainer *);
/* The mesh the run is on. */
const mg_mesh *mg_trainer_mesh(const mg_trainer *);
/* Collective. FNV-1a 64 of every parameter of the whole model, in order: the
 * same on every mesh for the same parameters. */
int mg_trainer_checksum(mg_trainer *, uint64_t *out);
/* Elements of every parameter of the whole model. */
int64_t mg_trainer_numel(const mg_trainer *);

/* A rank's memory, in bytes: parameters, gradients, optimizer state, the
 * step arena's high-water mark (activations), the scratch arena's (gathered
 * weights, gradients on their way), the reducer's and redistribute's buffers,
 * and with --dtype bf16 the weights' bf16 copies (casts). */
typedef struct {
    double params, grads, optim, activations, scratch, buffers, casts;
} mg_train_memory;
void mg_trainer_memory_get(const mg_trainer *, mg_train_memory *m);
/* The sum of its parts. */
double mg_train_memory_total(const mg_train_memory *m);

#ifdef __cplusplus
}
#endif
#endif
