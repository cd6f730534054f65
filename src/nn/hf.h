/* hf.h: meshgrad's models under Hugging Face's names and layouts, as
 * `meshgrad ckpt export|import --format safetensors` writes and reads them.
 *
 *   gpt    GPT2LMHeadModel: transformer.wte.weight, transformer.wpe.weight,
 *          transformer.h.<l>.ln_1.weight/.bias, .attn.c_attn.weight (C, 3C)
 *          and .bias (3C), .attn.c_proj, .ln_2, .mlp.c_fc, .mlp.c_proj,
 *          transformer.ln_f; its linears are Conv1D (weight (in, out)), so
 *          each weight is meshgrad's transposed, and c_attn's columns are
 *          ordered (3, H, D) where meshgrad's qkv rows are (H, 3, D)
 *   llama  LlamaForCausalLM: model.embed_tokens.weight,
 *          model.layers.<l>.self_attn.q_proj/k_proj/v_proj/o_proj.weight,
 *          model.layers.<l>.mlp.gate_proj (w1), up_proj (w3), down_proj (w2),
 *          model.layers.<l>.input_layernorm.weight,
 *          model.layers.<l>.post_attention_layernorm.weight, model.norm.weight,
 *          lm_head.weight (untied only, as save_pretrained leaves a tied one
 *          out); the rows of q_proj and k_proj permuted within each head
 *          from llama2.c's interleaved rotary pairs (2i, 2i + 1) to HF's
 *          rotate-half halves (i, i + D/2), as llama2.c's export.py
 *          (hf_export's permute) does
 *
 * Every layout is a permutation of the elements, so an export followed by
 * an import gives the same bits. config.json holds HF's keys for each
 * architecture (GPT2Config, LlamaConfig), with "producer": "meshgrad" first
 * so that an export replaces only a config.json it wrote.
 *
 * Exports mg_hf_layout, mg_hf_tensor, mg_hf_tensor_of, mg_hf_to, mg_hf_from,
 * mg_hf_extra, mg_hf_config_read, mg_hf_config_write, mg_hf_config_is_ours. */
#ifndef MG_NN_HF_H
#define MG_NN_HF_H

#include <stdint.h>

#include "nn/arch.h"

typedef enum {
    MG_HF_COPY,      /* the same elements in the same order */
    MG_HF_TRANSPOSE, /* (r, c) -> (c, r): Conv1D */
    MG_HF_QKV,       /* rows (H, 3, D) -> (3, H, D), transposed for a weight */
    MG_HF_ROPE       /* rows of each head: interleaved pairs -> halves */
} mg_hf_layout;

typedef struct {
    char name[96];
    int ndim;
    int64_t shape[2];
    mg_hf_layout layout;
    int64_t heads; /* MG_HF_QKV, MG_HF_ROPE: the heads of the rows */
} mg_hf_tensor;

/* The HF tensor of parameter k of the model (mg_arch_param's). */
void mg_hf_tensor_of(const mg_arch *arch, int k, mg_hf_tensor *t);
/* Parameter k's values (mg, its meshgrad shape) into the HF tensor's layout,
 * and back. */
void mg_hf_to(const mg_arch *arch, int k, const float *mg, float *hf);
void mg_hf_from(const mg_arch *arch, int k, const float *hf, float *mg);
/* A tensor a file of this model may hold besides its parameters, which an
 * import leaves out: 1 for HF's buffers (attn.bias, attn.masked_bias,
 * rotary_emb.inv_freq), 2 for lm_head.weight of a tied head (the same
 * values as the embedding, which the importer checks), else 0. */
int mg_hf_extra(const mg_arch *arch, const char *name);
/* The model of config.json at `path`: HF's keys and defaults, and what
 * meshgrad's models cannot be refused (another architecture or activation,
 * biases of a llama, an untied GPT head, rope scaling, ...). One line
 * naming the file and the key on failure. */
int mg_hf_config_read(mg_arch *arch, const char *path);
/* config.json of the model to `target`, as a save writes (io/files.h): only
 * where nothing is or a config.json that meshgrad wrote. */
int mg_hf_config_write(const mg_arch *arch, const char *target);
int mg_hf_config_is_ours(const char *path);

#endif
