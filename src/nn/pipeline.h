/* pipeline.h: pp as a plan on a mesh dim. Given the whole mesh, a plan with
 * one pp entry (plan.h), the model's layer costs (pipeline_cost.h) and the
 * pipeline options, mg_pipeline_make decides, identically on every rank:
 *   - the stages: the model's layers cut into ranks x v contiguous stages
 *     (balanced by cost, or --pp-layers), stage s on pipeline rank s % ranks;
 *   - the micro-batches: the batch split as torch.chunk does (--microbatches),
 *     or as --microbatch-rows lists, each at least one row per data-parallel
 *     rank;
 *   - the schedule (--pp-schedule, --virtual-stages), proven by the verifier
 *     before anything runs;
 * and then gives this rank its stage group: the mesh of the other dims
 * (mg_mesh_sub) and their plan (mg_plan_without), on which the layers it
 * holds are built, and the pipeline dim's comm its transfers go through.
 * Every bad combination is refused with one message naming what to change
 * (more stages than layers, fewer micro-batches than a schedule needs, virtual
 * stages that do not divide the layers, --pp-layers that do not sum to them),
 * and so is a pipeline whose ranks on this machine (node_ranks, taken to be
 * the ones that need the least), by the layers' costs and the schedule's
 * simulated peak of kept activations, need more than its memory (options'
 * machine_bytes).
 *
 * A model that a pipeline cuts gives: its layers' costs, in order (an
 * embedding tied to the first block, MG_LAYER_WITH_NEXT; a head and loss tied
 * to the last, MG_LAYER_WITH_PREV: they stay on the first and last stage);
 * a way to build only the layers mg_pipeline_holds says (its parameters
 * numbered by their place in the whole model, so the initial values do not
 * depend on the mesh); the forward of a run of layers; and the loss. The MLPs
 * of nn/model.h do (mg_model_build with `held`, mg_model_forward_layers); the
 * executor (pipeline_exec.h) runs the stages through callbacks.
 *
 * Exports: mg_pp_options, mg_pipeline, mg_pp_options_defaults,
 * mg_pp_int_list, mg_pp_int_list_parse, mg_pipeline_make, mg_pipeline_free,
 * mg_pipeline_holds, mg_pipeline_stage_first, mg_pipeline_rows, mg_pipeline_sum,
 * mg_pipeline_eval_rows, mg_pipeline_update, mg_pipeline_checksum. */
#ifndef MG_NN_PIPELINE_H
#define MG_NN_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>

#include "dist/pipeline_schedule.h"
#include "nn/optim.h"
#include "nn/pipeline_cost.h"
#include "nn/plan.h"

#define MG_PP_LIST_MAX 1024 /* entries of --pp-layers and --microbatch-rows */

typedef struct {
    mg_pp_kind kind;     /* --pp-schedule (1f1b) */
    int microbatches;    /* --microbatches (0: the rows list's length, else 8) */
    int virtual_stages;  /* --virtual-stages (1) */
    int layers[MG_PP_LIST_MAX];   /* --pp-layers: layers per stage */
    int nlayers;
    int64_t rows[MG_PP_LIST_MAX]; /* --microbatch-rows: rows per micro-batch */
    int nrows;
    /* the memory check (mg_pipeline_make): the machine's bytes (0: no check),
     * the ranks sharing them, floats kept per parameter (value, gradient,
     * optimizer state) */
    double machine_bytes;
    int node_ranks, param_copies;
} mg_pp_options;

typedef struct {
    const mg_mesh *mesh; /* the whole mesh */
    int dim;             /* its pp dim */
    int ranks, rank;     /* pipeline ranks; this rank's coordinate on the dim */
    mg_comm *comm;       /* the pp dim's comm (rank r = pipeline rank r) */
    mg_mesh *stage_mesh; /* this rank's stage group: the other dims */
    mg_plan stage_plan;
    int data_degree;     /* data-parallel ranks of a stage (dp and fsdp dims) */
    mg_pp_split split;   /* stage s: layers [split.first[s], split.first[s + 1]) */
    mg_pp_schedule schedule;
    int microbatches;
    int64_t *rows;       /* [microbatches] global rows of each */
} mg_pipeline;

void mg_pp_options_defaults(mg_pp_options *o);
/* "3,3,2" into out (at most max entries, each from lo to INT_MAX): the count, or MG_EINVAL
 * with a message naming `flag`. */
int mg_pp_int_list(const char *flag, const char *text, int64_t *out, int max, int64_t lo);
/* The same without a message, for a caller that says its own: the count (0 for
 * empty text), or -1 when text is not such a list. */
int mg_pp_int_list_parse(const char *text, int64_t *out, int max, int64_t lo);
/* Collective over the mesh (the stage meshes are made at the end, after every
 * check). MG_EINVAL with a message for a plan without pp, or a bad option. */
int mg_pipeline_make(mg_pipeline *p, const mg_mesh *mesh, const mg_plan *plan,
                     const mg_pp_options *o, const mg_layer_cost *layers, int nlayers,
                     int64_t batch);
void mg_pipeline_free(mg_pipeline *p);
/* This rank holds layer i (one of its stages does). */
bool mg_pipeline_holds(const mg_pipeline *p, int layer);
/* The first layer of stage s (s == stages: the layer count). */
static inline int mg_pipeline_stage_first(const mg_pipeline *p, int s) { return p->split.first[s]; }
/* Rows [start, start + shape[0]) of a host array of rows of shape[1..ndim)
 * floats, as a tensor of global shape `shape` on the stage mesh, split over
 * its data-parallel dims as the batch is (mg_plan_batch): each rank copies
 * its own rows. Header and data from the step arena (redirected: the
 * executor's micro-batch arena). NULL with a message on failure. */
mg_dtensor *mg_pipeline_rows(const mg_pipeline *p, const float *data, int64_t start, int ndim,
                             const int64_t *shape);
/* A step's loss on this rank for mg_pipeline_sum: `loss` (the micro-batches'
 * sum), or in the deterministic mode the exact sum of the rows' losses over
 * their count where this stage made them (ops_vocab.c), 0 on other stages. */
double mg_pipeline_step_loss(double loss);
/* Collective over the pp dim: v[0..n) summed over the pipeline ranks (in
 * doubles: the loss of the last stage, squared norms of every stage). */
int mg_pipeline_sum(const mg_pipeline *p, double *v, int n);
/* The rows an evaluation forward takes at once: its micro-batches, one per
 * pipeline rank, each as large as the step's largest (check_memory counts
 * them so). */
int64_t mg_pipeline_eval_rows(const mg_pipeline *p);
/* Collective over the mesh. The update after a step: clipping by the norm of
 * every stage's gradients (*norm, before clipping; 0 when clip is 0), then
 * the optimizer step on this rank's `params`. `counted` (NULL: params) are
 * the ones the norm counts here (a tied copy another stage counts is left
 * out); clipping scales all of params. */
int mg_pipeline_update(const mg_pipeline *p, mg_param_table *params, mg_param_table *counted,
                       mg_optimizer *opt, double lr, double clip, double *norm);
/* Collective over the mesh: FNV-1a 64 of the whole model's parameters in
 * order. hash(ctx, s, &h) continues h over stage s's parameters (on the ranks
 * of stage s); the hash travels from stage to stage and every rank gets it. */
int mg_pipeline_checksum(const mg_pipeline *p, int (*hash)(void *ctx, int stage, uint64_t *h),
                         void *ctx, uint64_t *out);

#endif
