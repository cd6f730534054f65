/* pipeline_exec.h: the executor of pipeline schedules (dist/pipeline_schedule.h):
 * one loop that runs this rank's action list of any verified schedule, for
 * any model whose stages it is handed as callbacks.
 *
 *   send/recv  a batch of transfers is posted at once on the pipeline dim's
 *              comm (mg_comm_isend / _irecv between p2p_group_begin/_end).
 *              Each tensor travels as a header (its global shape and
 *              placements, the micro-batch and stage, for a check) and then
 *              its local data: the receiver learns the shape from the header,
 *              so micro-batches may differ in size and nothing is padded. The
 *              data's receive is posted as soon as its header is in (the loop
 *              tests the headers between actions) or at the latest when the
 *              compute that consumes it waits for it.
 *   F          stage s on micro-batch mb: its input is the received activation
 *              as a leaf that requires grad (the first stage: NULL, the
 *              callback takes the micro-batch's inputs); the callback returns
 *              the output, or on the last stage the micro-batch's loss (its
 *              share of the batch's loss: the executor adds nothing).
 *   B          mg_backward_with(output, received gradient) (the last stage:
 *              the loss's backward); the input's gradient is what is sent.
 *   Bi, W      zero-bubble's split: mg_backward_input serves the input's
 *              gradient now and keeps the weights' contributions for
 *              mg_backward_weight (autograd/backward.h).
 *   reduce-grad  the stage's gradients are complete: the callback (which
 *              collects them; their data-parallel sums ran in the last
 *              micro-batch's backward).
 * Gradient sums: sync is off (mg_set_grad_sync(0)) for every backward that
 * hands weight contributions but the last micro-batch's, so data-parallel
 * sums happen once per step, overlapped with that backward.
 *
 * Memory (Megatron's deallocation): every (micro-batch, stage) has an arena
 * of its own for tensor data, taken from a pool at its forward (or when its
 * input arrives) and given back as soon as its backward (W for a split one)
 * is done and its sends have completed: activations live exactly as long as
 * the schedule keeps them. Tensor headers and graph nodes stay in the step
 * arena (a few hundred bytes an op) until mg_step_end. The stats give the
 * high-water of tensor data held (inputs received early and gradients still
 * being sent included), per rank and per stage, and the most micro-batches
 * between forward and backward at once.
 *
 * Exports: mg_pp_stage_fns, mg_pp_exec_stats, mg_pp_exec, mg_pp_exec_new,
 * mg_pp_exec_step, mg_pp_exec_forward, mg_pp_exec_share_arenas, mg_pp_exec_free,
 * mg_pp_meta_headers_missing, mg_pp_meta_headers_free. */
#ifndef MG_NN_PIPELINE_EXEC_H
#define MG_NN_PIPELINE_EXEC_H

#include <stddef.h>

#include "dist/comm.h"
#include "dist/dtensor.h"
#include "dist/pipeline_schedule.h"

typedef struct {
    void *ctx;
    /* Stage `stage`'s forward on micro-batch mb (tensor data goes to the
     * micro-batch's arena). x: the input (NULL on stage 0). Returns the
     * output, on the last stage the 0-d loss; NULL with a message on failure. */
    mg_dtensor *(*forward)(void *ctx, int stage, int mb, mg_dtensor *x);
    /* reduce-grad: every backward of `stage` this step is done. */
    int (*reduce_grad)(void *ctx, int stage);
} mg_pp_stage_fns;

typedef struct {
    double step_s;        /* this rank: from its first action to its last send done */
    double busy_s;        /* this rank: time in F, B, Bi and W (not waiting for their inputs) */
    double loss;          /* ranks of the last stage: the sum of the micro-batches' losses */
    size_t peak_bytes;    /* most tensor data of micro-batches held at once */
    int peak_live;        /* most (micro-batch, stage) pairs between their forward and
                           * the end of their backward at once (the verifier's count) */
    size_t mb_bytes;      /* most tensor data one (micro-batch, stage) held (its backward's
                           * temporaries too) */
    /* per stage this rank holds (stage rank + c * ranks, c < virtual_stages) */
    const size_t *stage_peak_bytes;
    const int *stage_peak_live;
    const size_t *stage_mb_bytes; /* the most one micro-batch of the stage held after
                                   * its forward (its input and activations) */
    const double *start, *end; /* per action of the list: seconds from the step's start
                                * (a compute's start: when its inputs were in) */
    int nactions;
    int arenas; /* in the pool after the run (a shared pool's, all its executors') */
} mg_pp_exec_stats;

typedef struct mg_pp_exec mg_pp_exec;

/* An executor of schedule `s` (kept by reference) for pipeline rank `rank`,
 * transfers on `pp` (the pipeline dim's comm, whose rank r is pipeline rank
 * r), stage tensors on `stage_mesh`. NULL with a message (out of memory). */
mg_pp_exec *mg_pp_exec_new(const mg_pp_schedule *s, int rank, mg_comm *pp,
                           const mg_mesh *stage_mesh);
/* Runs this rank's list once: one training step's forwards and backwards of
 * every micro-batch, ending with each stage's reduce-grad. Tensors live until
 * the caller's mg_step_end. Collective over the pipeline (and, inside the
 * callbacks, over each stage's mesh). */
int mg_pp_exec_step(mg_pp_exec *e, const mg_pp_stage_fns *fns, mg_pp_exec_stats *st);
/* The forwards alone (evaluation, without grad): F and the activations'
 * transfers of the list; every backward, gradient transfer and reduce-grad
 * is skipped. */
int mg_pp_exec_forward(mg_pp_exec *e, const mg_pp_stage_fns *fns, mg_pp_exec_stats *st);
/* Makes e take its arenas from with's pool (and give them back there), so
 * that two executors run one after the other (a step's, an evaluation's)
 * hold the memory of the larger, not of both. Before e's first run. */
int mg_pp_exec_share_arenas(mg_pp_exec *e, mg_pp_exec *with);
void mg_pp_exec_free(mg_pp_exec *e);

/* On a meta comm (a plan estimate, train/estimate.c) no header arrives: each
 * activation's is taken from the sending rank's earlier run, kept in the
 * context. Whether a receive found none since the last call (that rank's run
 * must come again, after the sender's); and the store's end. */
int mg_pp_meta_headers_missing(void);
void mg_pp_meta_headers_free(void);

#endif
