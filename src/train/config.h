/* config.h: the configuration of a training job (`meshgrad train`, and
 * meshgrad_train.h's mg_train_config, opaque there):
 * defaults, `key = value` config files and command-line flags, one table of
 * options shared by both (a key is the flag's name without "--"; '-' and '_'
 * are the same in keys). Flags override the file.
 *
 * A config file must be a text file of `key = value` lines: a directory, a
 * binary file (a NUL byte), an unknown key or a key given twice is refused
 * naming the file and line(s).
 *
 * Exports: struct mg_train_config, mg_train_config_defaults, mg_train_config_set_at,
 * mg_train_config_load, mg_train_config_parse_args, mg_train_config_usage,
 * mg_train_config_check, mg_train_config_flag_of, mg_train_config_hidden,
 * mg_train_config_llama, mg_train_config_lm, mg_train_config_from_arch. */
#ifndef MG_TRAIN_CONFIG_H
#define MG_TRAIN_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "io/files.h"
#include "meshgrad_train.h"
#include "nn/arch.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "nn/plan.h"

/* where a preempted run saves when no --save was given */
#define MG_TRAIN_PREEMPT_PATH "meshgrad-preempt.h5"

struct mg_train_config {
    char config[MG_PATH_MAX];  /* the file read, "" when none */
    char mesh[64];             /* "2", "1x2"; "" = 1-D over every rank */
    char parallel[64];         /* "dp", "dp,tp" */
    mg_model_kind model;
    int64_t hidden;            /* mlp: the width (0: 128); llama: the FFN's (0: llama2.c's rule) */
    int64_t channels;
    int64_t layers, heads, embd, ctx; /* gpt, llama */
    int64_t kv_heads;          /* llama: k, v heads (0: --heads) */
    int64_t multiple_of;       /* llama: the FFN width's rounding */
    double rope_theta, norm_eps; /* llama */
    int64_t untied_head;       /* llama: 1: the head is a parameter of its own */
    int64_t decay_all;         /* gpt, llama: 1: weight decay on every parameter, not 2-D only */
    char data[MG_PATH_MAX];    /* "" = data/digits.h5, or data/mobydick.h5 for gpt, llama */
    int64_t steps, batch;
    double lr;
    mg_optim_kind optimizer;
    double momentum;
    double weight_decay;       /* < 0: the optimizer's default */
    double betas[2];           /* AdamW's beta1, beta2 */
    mg_schedule_kind schedule;
    int64_t warmup;
    double lr_min;             /* where a cosine schedule ends */
    int64_t grad_accum;        /* micro-batches per step (gpt, llama) */
    double clip;               /* 0 = no clipping */
    int64_t seed;
    int64_t eval_every;        /* 0 = only at the end, -1 = never */
    int64_t eval_tokens;       /* gpt, llama: tokens of /val an evaluation reads at most (0: all) */
    char metrics[MG_PATH_MAX]; /* "" = none */
    int64_t threads;           /* 0 = default */
    int64_t log_every;         /* 0 = no progress lines */
    char save[MG_PATH_MAX];    /* checkpoint file, or directory ("dir/"); "" = none */
    int64_t save_every;        /* save every N steps (0 = only at the end) */
    int64_t keep;              /* directory --save: keep the newest K (0 = all) */
    char resume[MG_PATH_MAX];  /* checkpoint file or directory to resume; "" = none */
    int64_t overwrite;         /* 1: a fresh run may save over a checkpoint file, or into a
                                * directory of checkpoints */
    char on_nonfinite[8];      /* "stop" (default) or "skip" a step with a NaN/inf loss or
                                * gradient */
    char device[16];           /* "cpu" or "cuda" */
    char dtype[8];             /* "fp32" or "bf16" (the GEMMs' inputs) */
    int64_t tf32;              /* 1: TF32 GEMMs on cuda */
    int64_t deterministic;     /* 1: every sum in one fixed order: the same bits on every mesh */
    char flight_dir[MG_PATH_MAX]; /* where the flight recorder's dumps go ("" none) */
    char trace[MG_PATH_MAX];   /* --trace FILE: the timeline ("" none) */
    char trace_steps[32];      /* "A:B": the steps it records ("" the default) */
    int64_t depth;             /* linear layers of the model (0: 2, permute-mlp 3) */
    mg_recompute_mode recompute; /* what backward recomputes (gpt: nn/recompute.h) */
    /* pipeline (--parallel with pp; nn/pipeline.h), as given: trainer_pp.c parses */
    char pp_schedule[32];      /* gpipe | 1f1b | interleaved-1f1b | zb-h1 */
    int64_t microbatches;      /* 0: 8, or as many as --microbatch-rows lists */
    char microbatch_rows[1024]; /* "32,32,16" or "" */
    int64_t virtual_stages;
    char pp_layers[1024];      /* layers per stage "3,3,2", or "" (balanced) */
    int help;
    uint64_t given;            /* bit i: option i of config.c's table was set (a file, a
                                * flag, mg_train_config_set): an option of another model
                                * than `model` is refused, not dropped */
};

void mg_train_config_defaults(mg_train_config *c);
/* Sets one option from text. `where` ("file.conf:3" or "--lr") prefixes the
 * message of a bad value or unknown key. MG_EINVAL on failure. */
int mg_train_config_set_at(mg_train_config *c, const char *key, const char *value,
                           const char *where);
/* Reads a `key = value` file (# starts a comment). Unknown keys, keys given
 * twice, malformed lines, NUL bytes and bad values are refused with file:line
 * in the message; so is a path that is not a regular file. */
int mg_train_config_load(mg_train_config *c, const char *path);
/* argv[0] is the subcommand name. Applies --config FILE first, then every other
 * flag. Unknown flags, missing values and stray arguments are refused. */
int mg_train_config_parse_args(mg_train_config *c, int argc, char **argv);
void mg_train_config_usage(FILE *out);
/* Cross-option checks that need no mesh (warmup < steps...), and options of
 * another model than the one given (--heads with the MLP) refused. */
int mg_train_config_check(const mg_train_config *c);
/* The model keys of c (model, layers, heads, embd, ctx; the Llama's
 * kv_heads, hidden, rope_theta, norm_eps, untied_head) set to `arch`'s (a
 * checkpoint's model, nn/arch.h). */
int mg_train_config_from_arch(mg_train_config *c, const mg_arch *arch);
/* What sets a checkpoint attribute in this program, for messages on resume:
 * "--hidden" for "model.hidden", "the data set gives" for "model.classes". */
const char *mg_train_config_flag_of(const char *key);
/* The width --hidden gives the model: the MLPs' (0: 128), the Llama's FFN
 * (0: llama.h's mg_llama_hidden of --embd and --multiple-of); 0 for the GPT. */
int64_t mg_train_config_hidden(const mg_train_config *c);
/* The Llama of the config, with vocabulary `vocab`. */
mg_llama_config mg_train_config_llama(const mg_train_config *c, int64_t vocab);
/* The language model of the config (gpt or llama), with vocabulary `vocab`. */
mg_lm_config mg_train_config_lm(const mg_train_config *c, int64_t vocab);

#endif
