/* convert.h: what `meshgrad ckpt export` and `ckpt import` (ckpt_convert.c)
 * share with their formats: a model held whole in host memory, each
 * parameter in meshgrad's layout (nn/arch.h), and for each format a reader
 * and a writer of it:
 *   convert_model.c    the model in host memory, below the formats
 *   convert_hf.c       safetensors with Hugging Face's names and layouts
 *                      (nn/hf.h), and config.json beside it
 *   convert_llama2c.c  llama2.c's version-0 model file (io/llama2c.h)
 * A reader checks every size against the model before it reads a value; a
 * writer writes as a save does (io/files.h), replacing only a file of its
 * own kind. All of it is serial (one process reads or writes a file).
 * Exports mg_host_model, mg_host_model_alloc, mg_host_model_free,
 * mg_convert_hf_targets, mg_convert_hf_write, mg_convert_hf_read,
 * mg_convert_l2c_check, mg_convert_l2c_write, mg_convert_l2c_read. */
#ifndef MG_CLI_CONVERT_H
#define MG_CLI_CONVERT_H

#include <stddef.h>

#include "nn/arch.h"

typedef struct {
    mg_arch arch;
    int n;    /* mg_arch_param_count */
    float **p; /* p[k]: parameter k's values, its global shape, row-major */
} mg_host_model;

/* Room for every parameter of `arch` (MG_ENOMEM with a message). */
int mg_host_model_alloc(mg_host_model *m, const mg_arch *arch);
void mg_host_model_free(mg_host_model *m);

/* The config.json beside `out` into config[0..len). */
void mg_convert_hf_targets(const char *out, char *config, size_t len);
/* `out` (safetensors, F32) and the config.json beside it. */
int mg_convert_hf_write(const mg_host_model *m, const char *out);
/* The model of safetensors file `in` and its config (`config`, or NULL: the
 * config.json beside `in`): every tensor of the config's model, of its shape
 * under HF's name (a GPT's also without "transformer."), F32 or BF16, and no
 * tensor the model does not have. */
int mg_convert_hf_read(mg_host_model *m, const char *in, const char *config);

/* MG_OK when the model can be a llama2.c file (run.c reads it as meshgrad
 * computes it), else MG_EINVAL naming why; `in` names the checkpoint. */
int mg_convert_l2c_check(const mg_arch *arch, const char *in);
int mg_convert_l2c_write(const mg_host_model *m, const char *out);
int mg_convert_l2c_read(mg_host_model *m, const char *in);

#endif
