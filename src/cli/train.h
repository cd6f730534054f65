/* train.h: what the files of `meshgrad train` share. The run itself is the
 * library's (meshgrad_train.h's mg_trainer: model, data, optimizer, steps,
 * evaluation, checkpoints); the program around it parses the flags, checks
 * where it may write, drives the steps, handles signals, and reports:
 * train.c the loop and its lines; train_ckpt.c where the run saves;
 * train_metrics.c the --metrics file; train_report.c the progress line's
 * figures and the end-of-run report (train_report.h).
 * Exports: trainer, mg_train_metrics_*, mg_train_check_paths,
 * mg_train_prepare_save, mg_train_save, mg_train_report_end. */
#ifndef MG_CLI_TRAIN_H
#define MG_CLI_TRAIN_H

#include <signal.h>
#include <stdio.h>

#include "cli/observe.h"
#include "cli/train_report.h"
#include "io/files.h"
#include "meshgrad_train.h"
#include "status.h"
#include "train/config.h"

typedef struct {
    mg_train_config cfg;
    mg_trainer *run;
    const mg_mesh *mesh; /* the run's */
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
/* Collective, after the last step (train_report.c): rank 0 prints the peak
 * memory of the largest rank and the bytes per step of each collective, and
 * gets them as a metrics line in json ("" elsewhere). */
int mg_train_report_end(trainer *tr, int64_t last_step, char *json, size_t len);

#endif
