/* train.h: what the files of `meshgrad train` share. train.c builds the run
 * and drives the loop; train_text.c is the GPT's side of it (token data,
 * micro-batches, the validation loss); train_ckpt.c checks where the run may
 * write before step 1, saves it, and resumes it; train_eval.c evaluates it;
 * train_report.c reports on the run (train_report.h). The trainer holds the
 * run: configuration, mesh, plan, data, model, optimizer, metrics file, where
 * it saves.
 * Exports: trainer, mg_train_check_paths, mg_train_prepare_save, mg_train_save,
 * mg_train_resume, mg_train_report_end, mg_train_text_setup,
 * mg_train_text_batch, mg_train_text_pp_step, mg_train_text_evaluate,
 * mg_train_evaluate, mg_train_eval_chunks, mg_train_eval_least_rows,
 * mg_cli_gpt_fits (also bench step --model gpt's). */
#ifndef MG_CLI_TRAIN_H
#define MG_CLI_TRAIN_H

#include <signal.h>
#include <stdio.h>

#include "cli/observe.h"
#include "cli/train_config.h"
#include "cli/train_report.h"
#include "dist/mesh.h"
#include "io/data.h"
#include "io/files.h"
#include "io/tokens.h"
#include "nn/gpt.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "nn/plan.h"
#include "status.h"

typedef struct {
    mg_train_config cfg;
    mg_mesh *mesh;
    mg_plan plan;
    mg_dataset *train, *test; /* test: NULL when the data set has no test split */
    mg_tokens *tokens, *val;  /* --model gpt: the train and val splits (instead) */
    int64_t *starts;          /* gpt: window starts (room for a step's and for all of /val) */
    mg_loader train_loader, test_loader;
    int have_train_loader, have_test_loader;
    mg_model model; /* with pp: only the layers of this rank's stages */
    int have_model;
    struct mg_train_pp *pp; /* pp in the plan: the pipeline (train_pp.h) */
    struct mg_gpt_pp *gpt_pp; /* the same for --model gpt (nn/gpt_pipeline.h) */
    struct mg_arena *micro;   /* gpt --grad-accum N > 1: one micro-batch's tensor data */
    float *host;              /* gpt with pp: the step's windows on the host */
    size_t host_cap;
    mg_optimizer opt;
    mg_lr_schedule sched;
    mg_spec x_spec, y_spec;
    FILE *metrics;
    int metrics_errno;           /* rank 0: the first failed write of the metrics file */
    int rank;
    char save_path[MG_PATH_MAX]; /* the --save file, or directory without a trailing '/' */
    int save_dir;                /* 1: save_path is a directory of ckpt-<step>.h5 */
    int64_t start_step;          /* steps done before this run (a resume) */
    int64_t skipped;             /* steps skipped for a non-finite loss or gradient */
    char resumed_from[MG_PATH_MAX];
    char resume_note[MG_PATH_MAX + 256]; /* printed under the banner */
    int handled[3];              /* stop_signals[i] has our handler */
    struct sigaction old_signals[3];
    mg_timeline timeline;        /* --trace (observe.h) */
    mg_train_window window;      /* the progress line's figures (train_report.h) */
} trainer;

/* Collective (train_metrics.c). Opens --metrics on rank 0 (appended to on a
 * resume): a stream (a terminal, pipe, /dev/null or /dev/stdout, links
 * followed) as it is; a file only where nothing is or over a metrics file
 * (empty, or lines that start with a step), never through a link. */
int mg_train_metrics_open(trainer *tr);
/* Rank 0: one JSON line of metrics, flushed; the first write error is kept
 * (tr->metrics_errno) and ends the run at the next agreement. */
void mg_train_metrics_line(trainer *tr, const char *fmt, ...) MG_PRINTF(2, 3);
/* Collective: `failed` says a metrics write failed on rank 0 (whose message
 * is the one printed): MG_EIO naming the reason, else MG_OK. */
int mg_train_metrics_failed(trainer *tr, int64_t failed);
void mg_train_metrics_close(trainer *tr);

/* Collective, before anything is opened for writing: --save and --metrics
 * name neither the data set nor the config file nor each other. */
int mg_train_check_paths(trainer *tr);
/* Collective, before step 1: where --save goes (a directory, created when the
 * name ends in '/', or a file that is absent or a checkpoint), and a new run
 * does not save into a directory that already holds checkpoints (unless
 * --overwrite). */
int mg_train_prepare_save(trainer *tr);
/* Collective. Saves the run after `step` steps (to the --save file, or to
 * DIR/ckpt-<step>.h5, then keeps the newest --keep; on preemption without
 * --save to ./meshgrad-preempt.h5); *where gets the path. */
int mg_train_save(trainer *tr, int64_t step, char *where, size_t len);
/* Collective. --resume: loads the checkpoint into the current mesh and plan
 * and moves the loader to where the saved run stood. */
int mg_train_resume(trainer *tr);
/* Collective, after the last step (train_report.c): rank 0 prints the peak
 * memory of the largest rank and the bytes per step of each collective, and
 * gets them as a metrics line in json ("" elsewhere). */
int mg_train_report_end(trainer *tr, int64_t last_step, char *json, size_t len);

/* Collective (--model gpt). Opens the token splits of c->data, checks them
 * against --ctx (and the plan against the micro-batch), builds the GPT and its
 * batch specs. */
int mg_train_text_setup(trainer *tr);
/* Collective. Micro-batch `micro` of step `step`: rows [micro b, (micro + 1) b)
 * (b = batch / grad-accum) of the step's windows; ids x and targets y (b, T). */
int mg_train_text_batch(trainer *tr, int64_t step, int64_t micro, mg_dtensor **x, mg_dtensor **y);
/* Collective (gpt with pp). Forward and backward of the step's windows x,
 * y (batch, T), whole on every rank, over the pipeline; *loss the batch's. */
int mg_train_text_pp_step(trainer *tr, const mg_dtensor *x, const mg_dtensor *y, double *loss);
/* Collective. The GPT's evaluation after `step`: the mean loss over every
 * non-overlapping T-window of /val, without autograd; printed on rank 0, in
 * the metrics. */
int mg_train_text_evaluate(trainer *tr, int64_t step);
/* Collective. The MLP's evaluation after `step` (train_eval.c): its test loss
 * and accuracy; printed on rank 0, in the metrics. */
int mg_train_evaluate(trainer *tr, int64_t step);
/* The chunks an evaluation of n rows (windows) takes, of sizes that differ by
 * one at most, each no larger than a training forward and at least
 * mg_train_eval_least_rows. */
int64_t mg_train_eval_chunks(const trainer *tr, int64_t n);
/* Rows an evaluation chunk needs at least: one per data-parallel rank (with
 * pp, of each of the pipeline's `ranks` micro-batches). */
int mg_train_eval_least_rows(const trainer *tr);
/* MG_OK, or MG_ENOMEM with a message naming `smaller` (the flags that shrink
 * the batch), when a GPT step of `batch` windows in `micro` micro-batches
 * (--grad-accum) on the mesh and plan (no pp: mg_pipeline_make checks those)
 * is estimated to need more than this machine's memory; `states` optimizer
 * floats per parameter, `clip` on. */
int mg_cli_gpt_fits(const mg_gpt_config *g, const mg_mesh *mesh, const mg_plan *plan,
                    int64_t batch, int64_t micro, int states, int clip, const char *smaller);

#endif
