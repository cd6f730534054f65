/* plan_show.h: how `meshgrad plan` shows a pipeline plan (plan_show.c): the
 * text report (model, machine, stages, per-rank timeline, predicted step
 * time, peak activation memory per stage) and the Chrome-trace JSON of the
 * timeline (one process per rank; F, B, W spans on a compute thread,
 * transfers on a second one, a flow arrow from each send to its receive).
 * Exports mg_plan_report, mg_plan_print, mg_plan_write_trace,
 * mg_plan_calibrate (plan.c), mg_plan_estimate_pipeline (plan_estimate.c). */
#ifndef MG_CLI_PLAN_SHOW_H
#define MG_CLI_PLAN_SHOW_H

#include <stdint.h>
#include <stdio.h>

#include "nn/pipeline_cost.h"

typedef struct {
    const mg_pp_schedule *schedule;
    const mg_pp_sim *sim;  /* with the measured costs */
    const mg_pp_sim *unit; /* at unit time */
    const mg_pp_stage_costs *costs;
    const mg_pp_split *split;
    const mg_layer_cost *layers;
    const mg_pp_machine *machine;
    const int64_t *rows; /* per micro-batch (whole, before dp) */
    int64_t batch;
    const char *mesh, *parallel, *calibration;
    int dp;
    const char *model; /* "mlp 1024,4096,1024" or "gpt L4 H4 C128 T64 V256" */
} mg_plan_report;

void mg_plan_print(FILE *out, const mg_plan_report *r);
/* (plan.c) Collective over the world. The FLOP rate (of the largest layer's
 * products over `rows` rows) and the link (a transfer of the largest output),
 * measured here, or given (gflops GFLOP/s, gbps GB/s, latency_us; 0:
 * measure); `how` gets a line saying which and how. */
int mg_plan_calibrate(double gflops, double gbps, double latency_us, const mg_layer_cost *layers,
                      int n, int64_t rows, mg_pp_machine *m, char *how, size_t len);
/* Writes the timeline to `path`, which must be absent or a trace this
 * program wrote (anything else is left alone: MG_EIO with a message). */
int mg_plan_write_trace(const char *path, const mg_plan_report *r);
/* plan --estimate of a pipeline plan (plan_estimate.c): each pipeline rank's
 * memory and bytes sent per step, `states` optimizer states a parameter. */
void mg_plan_estimate_pipeline(FILE *out, const mg_plan_report *r, int states);

#endif
