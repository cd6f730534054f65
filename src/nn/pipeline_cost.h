/* pipeline_cost.h: what a model's layers cost, how they are cut into pipeline
 * stages, and the per-stage costs a pipeline schedule is timed with
 * (dist/pipeline_sim.h's mg_pp_cost).
 *
 * A layer is described per row of a micro-batch (a sample; for a language
 * model, one sequence): the FLOPs of its forward, backward-input and
 * backward-weight passes, the floats of its output (what crosses to the next
 * stage), the floats its forward keeps for the backward, its parameters.
 * Models give their layers in order; a layer may be tied to its neighbour
 * (a GPT's embedding goes with the first block, its head and loss with the
 * last), and the tied layers form one unit: stages are cut between units.
 *
 * Stages are contiguous runs of units. The balancer picks the cut that
 * minimizes the largest stage's compute (F + Bi + W FLOPs), exactly (dynamic
 * programming; ties go to the cut with earlier boundaries). `--pp-layers
 * 3,3,2` gives the units per stage instead.
 *
 * Times come from a machine: a FLOP rate (every layer's FLOPs at that rate;
 * elementwise work counted as FLOPs too), a link (latency + bytes /
 * bandwidth per transfer), and the data-parallel degree (each micro-batch's
 * rows split over it; reduce-grad all-reduces the stage's gradients over it).
 *
 * Exports: mg_layer_cost, mg_layer_tie, mg_layer_costs_mlp, mg_pp_split,
 * mg_pp_split_make, mg_pp_machine, mg_pp_stage_costs, mg_pp_stage_costs_make,
 * mg_pp_stage_costs_free, mg_pp_measure_flops, mg_pp_measure_link. */
#ifndef MG_NN_PIPELINE_COST_H
#define MG_NN_PIPELINE_COST_H

#include <stdint.h>

#include "dist/comm.h"
#include "dist/pipeline_schedule.h"
#include "dist/pipeline_verify.h"

typedef enum {
    MG_LAYER_ALONE = 0,
    MG_LAYER_WITH_NEXT, /* in the same stage as the next layer (an embedding) */
    MG_LAYER_WITH_PREV, /* in the same stage as the layer before (a head, a loss) */
} mg_layer_tie;

typedef struct {
    char name[24];
    mg_layer_tie tie;
    double forward_flops, backward_input_flops, backward_weight_flops; /* per row */
    double out_floats;   /* per row: the output */
    double saved_floats; /* per row: kept from the forward until the backward */
    double params;       /* parameters (floats) */
    int64_t gemm_in, gemm_out; /* its largest matrix product (for calibration) */
} mg_layer_cost;

/* The MLP of `meshgrad bench step`: Linear(widths[i], widths[i + 1]) for
 * i < n - 1, ReLU between them, a mean-squared-error loss at the end. Fills
 * n - 1 layers ("fc1", "fc2", ...). The first layer makes no input gradient
 * (its input is data). MG_EINVAL for fewer than 2 widths or one below 1. */
int mg_layer_costs_mlp(const int64_t *widths, int n, mg_layer_cost *layers);

/* A cut of the layers into stages: stage s holds layers [first[s], first[s + 1]). */
typedef struct {
    int stages, units, layers;
    int first[MG_PP_MAX_STAGES + 1];
} mg_pp_split;

/* Cuts `n` layers into ranks * v stages: by `counts` (units per stage,
 * ncounts of them) when given, else balanced. MG_EINVAL with a message for:
 * more stages than units; v > 1 balanced over units that are not a multiple
 * of ranks * v (as Megatron-LM requires); counts whose number is not the
 * number of stages, whose sum is not the number of units, or with a zero. */
int mg_pp_split_make(mg_pp_split *split, const mg_layer_cost *layers, int n, int ranks, int v,
                     const int *counts, int ncounts);

typedef struct {
    double flops;     /* FLOPs per second of one rank */
    double latency;   /* seconds per transfer */
    double bandwidth; /* bytes per second of a link */
    int dp;           /* data-parallel degree (1: pipeline only) */
    double core_share; /* cores a rank gets when every rank computes: below 1 when
                        * the ranks outnumber the cores of their one machine
                        * (mg_pp_cost's); then `flops` is a whole core's rate */
} mg_pp_machine;

/* The per-stage arrays of an mg_pp_cost (pointing into *c's own storage)
 * from the layers, the split, the machine and the rows of each micro-batch
 * (M of them; the rows per rank are the largest torch.chunk piece of each
 * over dp). Also the parameter bytes per stage. MG_ENOMEM. */
typedef struct {
    mg_pp_cost cost;
    double *forward, *backward_input, *backward_weight, *act_bytes, *saved_bytes, *reduce;
    double *param_bytes; /* [stages] */
    int64_t *rows;       /* [M] rows per rank */
} mg_pp_stage_costs;

/* ---- calibration (pipeline_calibrate.c) ---- */

/* A rank's FLOP rate on the three matrix products of a Linear(in, out) over
 * `rows` rows (y = x W^T, dx = dy W, dW = dy^T x) through the CPU backend:
 * the median of a few repeats (about 50 ms in all). Collective over `c`: the
 * first `at_once` ranks (every rank when at_once <= 0) measure at the same
 * time, as a step's stages compute, and every rank gets the mean of their
 * rates. MG_ENOMEM. */
int mg_pp_measure_flops(mg_comm *c, int at_once, int64_t rows, int64_t in, int64_t out,
                        double *flops);
/* The link between ranks 0 and 1 of `c` (a rank with itself when c has one
 * rank: a memory copy through MPI): half the shortest of a few round trips of
 * a 1-float message (latency) and of an n-float one (bandwidth). Collective
 * over c. MG_ECOMM. */
int mg_pp_measure_link(mg_comm *c, int64_t n, double *latency, double *bandwidth);

int mg_pp_stage_costs_make(mg_pp_stage_costs *c, const mg_layer_cost *layers,
                           const mg_pp_split *split, const mg_pp_machine *m, const int64_t *rows,
                           int microbatches);
void mg_pp_stage_costs_free(mg_pp_stage_costs *c);

#endif
