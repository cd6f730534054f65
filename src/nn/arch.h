/* arch.h: a model as its checkpoint describes it, without building it: the
 * kind and sizes that the attributes model, model.* give, and its
 * parameters' names and global shapes. What reads a checkpoint before it
 * knows the model (meshgrad eval, ckpt export) starts here, and what writes
 * one without a model (ckpt import) writes these attributes.
 *
 *   gpt    (gpt.h) model.layers, model.heads, model.embd, model.ctx,
 *          model.vocab; parameters as mg_gpt_param_describe names them
 *   llama  llama2.c's model.py: model.layers, model.heads, model.kv_heads,
 *          model.embd, model.ctx, model.hidden, model.vocab, model.rope_theta,
 *          model.norm_eps, model.tied (1: the head is the embedding); its
 *          state_dict's names and PyTorch's (out, in) shapes: tok_embeddings.
 *          weight (V, C), layers.<l>.attention_norm.weight (C),
 *          layers.<l>.attention.wq.weight (H D, C), .wk and .wv (KV D, C),
 *          .wo (C, H D), layers.<l>.ffn_norm.weight (C),
 *          layers.<l>.feed_forward.w1.weight (hidden, C), .w2 (C, hidden),
 *          .w3 (hidden, C), norm.weight (C), output.weight (V, C) when untied
 *
 * The kind is the attribute "model" (or "model.kind"). Sizes are parsed
 * exactly (digits only) and checked (mg_arch_check): a file that lies is
 * refused with one line naming it and the attribute.
 *
 * A new kind of model is added here (its attributes and parameters), in
 * mg_arch_build (the model for inference) and in train/config.c's
 * mg_train_config_from_arch (the run that evaluates it): every program that
 * loads a checkpoint takes its model through mg_arch_from_attrs.
 *
 * Exports mg_arch_kind, mg_arch, mg_arch_param_desc, mg_arch_from_attrs,
 * mg_arch_check, mg_arch_attrs, mg_arch_param_count, mg_arch_param,
 * mg_arch_kind_name, mg_arch_numel, mg_arch_describe, mg_arch_check_file,
 * mg_arch_build. */
#ifndef MG_NN_ARCH_H
#define MG_NN_ARCH_H

#include <stddef.h>
#include <stdint.h>

#include "io/checkpoint.h"
#include "io/files.h"
#include "nn/model.h"
#include "nn/param.h"
#include "nn/plan.h"

typedef enum { MG_ARCH_GPT = 0, MG_ARCH_LLAMA } mg_arch_kind;

typedef struct {
    mg_arch_kind kind;
    int64_t layers, heads, embd, ctx, vocab;
    int64_t kv_heads, hidden; /* llama (the GPT's: heads, 4 embd) */
    double rope_theta, norm_eps; /* llama */
    int tied;                 /* the head is the embedding (always, for the GPT) */
} mg_arch;

typedef struct {
    char name[MG_PARAM_NAME_MAX];
    int ndim;
    int64_t shape[2];
} mg_arch_param_desc;

const char *mg_arch_kind_name(mg_arch_kind kind);
/* The model of the attributes a[0..n) of the checkpoint `path` (for
 * messages), checked. MG_EFORMAT naming the attribute otherwise. */
int mg_arch_from_attrs(mg_arch *arch, const mg_ckpt_attr *a, int n, const char *path);
/* MG_OK when the sizes can be: each >= 1 and below 2^31, heads dividing embd
 * (into an even head size for the llama), kv_heads dividing heads, rope_theta
 * and norm_eps finite and > 0; else MG_EFORMAT "<where>: ...". */
int mg_arch_check(const mg_arch *arch, const char *where);
/* The model's attributes, as a training run writes them, into out[0..max):
 * how many. */
int mg_arch_attrs(const mg_arch *arch, mg_ckpt_attr *out, int max);
int mg_arch_param_count(const mg_arch *arch);
/* Parameter k (< mg_arch_param_count) of the model. */
void mg_arch_param(const mg_arch *arch, int k, mg_arch_param_desc *d);
/* Elements of every parameter. */
int64_t mg_arch_numel(const mg_arch *arch);
/* "gpt: 4 layers, 4 heads, embd 128, ctx 64, vocab 256" (and the llama's
 * kv heads, hidden, tied or untied head) into buf. */
void mg_arch_describe(const mg_arch *arch, char *buf, size_t len);
/* Collective. The checkpoint at `path` holds the parameters of `arch`: its
 * params/ datasets are exactly the model's names (a walk of the names, no
 * data read), and the file is large enough to hold their values (4 bytes
 * each: a checkpoint's datasets are not compressed). So attributes that
 * describe another model than the weights (more layers, wider) are refused
 * in one line before anything of that size is made. */
int mg_arch_check_file(const mg_arch *arch, const char *path);
/* Collective. The whole model of `arch` (no pipeline) on `mesh` with `plan`,
 * its parameters initialized from seed 0 (load them next); MG_EINVAL for a
 * kind this build cannot run. */
int mg_arch_build(mg_model *model, const mg_arch *arch, const mg_mesh *mesh, const mg_plan *plan);

#endif
