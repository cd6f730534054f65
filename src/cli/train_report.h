/* train_report.h: the figures `meshgrad train` reports about itself.
 * - The progress line: ms/step split into compute, communication wait (time
 *   blocked in collectives and transfer waits, from the flight recorder) and
 *   data wait (the loader), samples/s, and the slowest rank. Each rank packs
 *   its previous step's time and its rank into one value of the per-step
 *   agreement (an all-reduce MAX that train.c makes anyway), so every step
 *   names its slowest rank at no extra message; the line names the rank that
 *   was slowest in most steps since the last line, with its mean step time in
 *   those steps.
 * - At the end: the peak memory of the largest rank (parameters, gradients,
 *   optimizer state, the arenas' high-water marks, the reducer's and
 *   redistribute's buffers) and the bytes each collective moved per step
 *   (mg_comm_stats over the steps after the first, the largest rank's), the
 *   figures `meshgrad plan --estimate` predicts.
 * Exports: mg_train_window, mg_window_init, mg_window_free,
 * mg_window_step_begin, mg_window_step_end, mg_window_slowest_pack,
 * mg_window_slowest_add, mg_window_format, mg_train_memory,
 * mg_train_measured, mg_train_log_flush. */
#ifndef MG_CLI_TRAIN_REPORT_H
#define MG_CLI_TRAIN_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "meshgrad.h"
#include "meshgrad_train.h"

typedef struct {
    /* this rank, summed over the steps since the last progress line */
    double step_s, data_s, comm_s;
    int64_t steps;
    /* the step in progress: its start, and the flight recorder's wait then
     * (moved on by the time the data loader's collectives took: data wait) */
    double t0;
    int64_t comm_ns0;
    double last_step_s; /* the step before, which the agreement carries */
    /* agreed: per rank, the steps of the window it was slowest in, their time */
    int world;
    int *slow_steps;
    double *slow_s;
    /* mg_comm_stats at the end of the first step, for the figures per step */
    mg_comm_stats at_first[MG_COLL_COUNT];
    int64_t first_step; /* 0: not taken yet */
} mg_train_window;

int mg_window_init(mg_train_window *w, int world);
void mg_window_free(mg_train_window *w);
void mg_window_step_begin(mg_train_window *w);
/* data_s: the time this step spent in the data loader. */
void mg_window_step_end(mg_train_window *w, int64_t step, double data_s);
/* The value this rank puts in the agreement, and what the agreement gave. */
int64_t mg_window_slowest_pack(const mg_train_window *w, int rank);
void mg_window_slowest_add(mg_train_window *w, int64_t agreed);
/* "12.3 ms/step (compute 9.1, comm 2.8, data 0.4) | 5210 samples/s | slowest rank 1
 * (12.9 ms)"; starts a new window. `unit` names what batch counts ("samples"). */
void mg_window_format(mg_train_window *w, char *buf, size_t len, int64_t batch, const char *unit);


/* fflush(stdout) after a line of the log. The first time stdout cannot take
 * it (closed, a full disk), one warning on stderr: the run goes on (its
 * checkpoints and --metrics file do not depend on the log). */
void mg_train_log_flush(void);

#endif
