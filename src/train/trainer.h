/* trainer.h: inside the trainer (meshgrad_train.h's mg_trainer), the training
 * run of `meshgrad train` and of any program: configuration, mesh, plan, data,
 * model, optimizer and schedule, and where the run stands. The trainer's
 * files stand in a line, each calling only those below it:
 *   trainer_pp.c     the MLPs' pipeline
 *   trainer.c        what the run holds, its free, a meta run's batches
 *   trainer_det.c, trainer_eval.c, trainer_ckpt.c
 *                    --deterministic's check; evaluating the MLPs (and the
 *                    chunks of any evaluation); saving and resuming
 *   trainer_text.c   the language models' side: token data, micro-batches,
 *                    the validation loss
 *   trainer_run.c    building the run, taking its steps
 *   estimate.c       the run on the meta device, and mg_trainer_new: a run
 *                    built with that estimate as its memory check
 *
 * On the meta device (a mesh made by mg_mesh_new_meta, backend/meta.c) the
 * same run reads no data set: its batches are tensors of the shapes a data
 * set of `meta` would give (mg_trainer_build with data), which is how
 * `meshgrad plan --estimate` runs the real step without data.
 *
 * Exports struct mg_trainer, mg_trainer_meta_data, mg_trainer_fits_fn,
 * mg_trainer_build, mg_trainer_mesh_new, and the functions the trainer's
 * files share. */
#ifndef MG_TRAIN_TRAINER_H
#define MG_TRAIN_TRAINER_H

#include <stdint.h>

#include "dist/mesh.h"
#include "io/data.h"
#include "io/tokens.h"
#include "meshgrad_train.h"
#include "nn/gpt.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "nn/plan.h"
#include "train/config.h"

/* The shapes of a data set, for a run that reads none (the meta device's). */
typedef struct {
    int64_t rows, cols, classes; /* the MLPs': samples (rows, cols), classes */
    int64_t vocab;               /* the GPT's */
    int64_t train_rows, test_rows; /* the MLPs' splits; the GPT's: windows of /val */
} mg_trainer_meta_data;

/* Whether the run of `cfg` on `mesh`, with data of `data`'s shapes and a model
 * of `params` parameters, fits this machine's memory: MG_OK, or MG_ENOMEM and
 * one line ending in `fix`. A run takes it before it builds its model; it is
 * estimate.h's mg_train_estimate_fits, which runs this trainer's step itself
 * and so stands above it, given by the caller of mg_trainer_build. */
typedef int (*mg_trainer_fits_fn)(const mg_train_config *cfg, const mg_mesh *mesh,
                                  const mg_trainer_meta_data *data, double params,
                                  const char *fix);

struct mg_trainer {
    mg_train_config cfg;
    mg_mesh *mesh;
    int own_mesh; /* made by mg_trainer_build (freed with the trainer) */
    int det_was;  /* the deterministic mode before this trainer set its own (restored by free) */
    mg_plan plan;
    int rank;
    mg_trainer_fits_fn fits;  /* the memory check before the model is built */
    int meta;                 /* on the meta device: no data read */
    mg_trainer_meta_data shapes; /* meta: the data set's shapes */
    mg_dataset *train, *test; /* test: NULL when the data set has no test split */
    mg_tokens *tokens, *val;  /* --model gpt, llama: the train and val splits (instead) */
    int eval_train;           /* gpt, llama: evaluations read the train split (meshgrad eval) */
    int64_t *starts;          /* gpt, llama: window starts (room for a step's and all of /val) */
    mg_loader train_loader, test_loader;
    int have_train_loader, have_test_loader;
    mg_model model; /* with pp: only the layers of this rank's stages */
    int have_model;
    struct mg_train_pp *pp;   /* pp in the plan: the MLPs' pipeline (trainer_pp.h) */
    struct mg_gpt_pp *gpt_pp; /* the same for the GPT, the Llama (nn/gpt_pipeline.h) */
    struct mg_arena *micro;   /* gpt, llama --grad-accum N > 1: one micro-batch's tensor data */
    float *host;              /* gpt, llama with pp: the step's windows on the host */
    size_t host_cap;
    mg_optimizer opt;
    mg_lr_schedule sched;
    mg_spec x_spec, y_spec;
    int64_t step;    /* optimizer steps done (a resume starts at the checkpoint's) */
    char resumed_from[MG_PATH_MAX]; /* the checkpoint a resume loaded ("" none) */
    char resume_changes[2048]; /* its settings the run changed: "key: saved -> now; ..." */
    int64_t skipped; /* steps skipped for a non-finite loss or gradient */
};

/* Collective. The run of `cfg` on `mesh` (NULL: the mesh of cfg's --mesh,
 * which the run frees), `fits` checked before its model is built
 * (trainer_run.c); with `data` a run on the meta device that reads no data
 * set: its batches have the shapes of `data`. NULL with the error set when
 * any part is refused. */
mg_trainer *mg_trainer_build(const mg_train_config *cfg, mg_mesh *mesh,
                             const mg_trainer_meta_data *data, mg_trainer_fits_fn fits);
/* Collective. The mesh of --mesh `mesh` ("": one dim of every rank) over every
 * rank, on `device` ("cuda" is chosen first; else the device in use): NULL
 * with the error set for a mesh that is not one or whose size is not the
 * number of ranks (trainer_run.c). */
mg_mesh *mg_trainer_mesh_new(const char *mesh, const char *device);

/* trainer_det.c: MG_EINVAL, with the fix, for a --deterministic run that cannot
 * give the same bits on every mesh and split (the device, dtype, sequence
 * parallelism, micro-batch and data-parallel cuts of the rows). */
int mg_trainer_det_check(const mg_train_config *c, const mg_mesh *mesh, const mg_plan *plan);

/* The language models' side (trainer_text.c). Collective: opens the token splits of the
 * data set, checks them against ctx (and the plan against the micro-batch),
 * builds the model (the GPT or the Llama) and its batch specs. */
int mg_trainer_text_setup(mg_trainer *tr);
/* Collective. Micro-batch `micro` of step `step`: rows [micro b, (micro + 1) b)
 * (b = batch / grad-accum) of the step's windows; ids x and targets y (b, T). */
int mg_trainer_text_batch(mg_trainer *tr, int64_t step, int64_t micro, mg_dtensor **x,
                          mg_dtensor **y);
/* Collective (gpt, llama with pp). Forward and backward of the step's windows x,
 * y (batch, T), whole on every rank, over the pipeline; *loss the batch's. */
int mg_trainer_text_pp_step(mg_trainer *tr, const mg_dtensor *x, const mg_dtensor *y,
                            double *loss);
/* Collective. The mean loss over the evaluation windows of /val (at most
 * eval-tokens of them), without autograd (trainer_text.c). */
int mg_trainer_text_evaluate(mg_trainer *tr, mg_train_eval *ev);
/* The split the GPT's evaluations read: "val" (the default) or "train"
 * (`meshgrad eval --split`); MG_EINVAL for another, or a split of fewer
 * windows than an evaluation needs (trainer_text.c). */
int mg_trainer_text_eval_split(mg_trainer *tr, const char *split);
/* Collective. Loads the parameters of the checkpoint at `path` (written on
 * any mesh, by any run or import of this model) into the run's model, the
 * pipeline stages' theirs; nothing else of the run changes (trainer_ckpt.c). */
int mg_trainer_load_params(mg_trainer *tr, const char *path);
/* Collective. The MLPs' test loss and accuracy (trainer_eval.c). */
int mg_trainer_image_evaluate(mg_trainer *tr, mg_train_eval *ev);
/* The chunks an evaluation of n rows (windows) takes, of sizes that differ by
 * one at most, each no larger than a training forward and at least
 * mg_trainer_eval_least_rows (trainer_eval.c). */
int64_t mg_trainer_eval_chunks(const mg_trainer *tr, int64_t n);
/* Rows an evaluation chunk needs at least: one per data-parallel rank (with
 * pp, of each of the pipeline's `ranks` micro-batches). */
int mg_trainer_eval_least_rows(const mg_trainer *tr);
/* Collective. A batch of tensors of x_spec and y_spec read from no data set
 * (a meta run's), made as a data set's batch is made. */
int mg_trainer_meta_batch(const mg_trainer *tr, const mg_spec *x_spec, const mg_spec *y_spec,
                          mg_dtensor **x, mg_dtensor **y);
#endif
