/* pipeline_sim.h: runs a pipeline schedule's action lists
 * (pipeline_schedule.h) against each other and times them (mg_pp_simulate,
 * pipeline_sim.c): every rank walks its list in order, compute taking the
 * time the cost says. A transfer starts when both its send and its receive
 * are posted and takes latency + bytes / bandwidth.
 * Sends and receives between two ranks are matched in the order each side
 * posts them (as NCCL does, and MPI for one tag): the k-th send from a to b
 * meets the k-th receive on b from a, and the two must name the same
 * micro-batch, stage boundary and kind. Two models of what a rank waits for:
 *
 *   MG_PP_P2P_ASYNC       what the executor does on MPI: a send or receive is
 *                         posted (MPI_Isend / MPI_Irecv) and the rank moves on;
 *                         a compute waits for the receive it consumes; the
 *                         step ends when every send has completed.
 *   MG_PP_P2P_RENDEZVOUS  the strict one: a run of consecutive sends and
 *                         receives is posted as one batch and the rank waits
 *                         until every transfer of the batch has completed,
 *                         so a send waits for its receive to be posted (NCCL
 *                         send/recv in a group on the compute stream; MPI's
 *                         rendezvous protocol with a wait after each batch).
 *
 * Shared cores (0 < cost->core_share < 1, MG_PP_P2P_ASYNC only): more ranks
 * than cores on one machine, ranks * core_share cores in all. They are shared
 * evenly among the ranks computing at each moment (processor sharing): with a
 * computing, each F, B, Bi or W runs at min(1, cores / a) of its speed, so a
 * rank waiting in its bubble leaves its core to the others. The order-based
 * run above still matches the transfers and finds deadlocks; the times come
 * from a second pass in global time. Reduce-grad and transfers are not
 * slowed.
 *
 * Times: with cost NULL every F, Bi and W takes 1 (a full B takes 2) and
 * transfers are free: the unit-time bubble of the papers. The bubble is the
 * share of rank-time not spent in F, B, Bi or W: 1 - busy / (ranks * step).
 *
 * pipeline_verify.h checks a schedule's structure first and runs it under
 * both models.
 *
 * Exports: mg_pp_cost, mg_pp_p2p_model, mg_pp_sim, mg_pp_simulate,
 * mg_pp_sim_free, mg_pp_action_time. */
#ifndef MG_PIPELINE_SIM_H
#define MG_PIPELINE_SIM_H

#include <stdint.h>

#include "dist/pipeline_schedule.h"

typedef struct {
    /* per stage (stages entries), seconds per row of a micro-batch */
    const double *forward, *backward_input, *backward_weight;
    const double *act_bytes;   /* per stage, bytes per row of its output (= of that gradient) */
    const double *saved_bytes; /* per stage, bytes per row the forward keeps for the backward */
    const double *reduce;      /* per stage, seconds of its reduce-grad; NULL: none */
    const int64_t *rows;       /* per micro-batch; NULL: 1 row each */
    double latency;            /* seconds per transfer */
    double bandwidth;          /* bytes per second; <= 0: a transfer takes only the latency */
    double core_share;         /* cores a rank gets when all compute (4 ranks on 2 cores:
                                * 0.5); <= 0 or >= 1: a core each (see below) */
} mg_pp_cost;

typedef enum { MG_PP_P2P_ASYNC = 0, MG_PP_P2P_RENDEZVOUS } mg_pp_p2p_model;

typedef struct {
    int ranks, stages;
    double step_time;   /* when the last rank was done (its sends completed) */
    double busy;        /* F, B, Bi, W time summed over ranks */
    double bubble;      /* 1 - busy / (ranks * step_time) */
    double *busy_rank;  /* [ranks] */
    double *done_rank;  /* [ranks] when each rank was done */
    double **start, **end; /* [rank][action]: a send/recv ends when its transfer has */
    int **match;        /* [rank][action]: a send/recv's matching action on the peer */
    int *peak_live;     /* [stages] most micro-batches whose F ran and whose backward
                         * (W for a split one) had not finished */
    int *peak_live_rank;   /* [ranks] the same summed over the rank's stages */
    double *peak_bytes;    /* [ranks] most saved-activation bytes at once (cost given) */
    double *peak_stage_bytes; /* [stages] the same per stage */
} mg_pp_sim;

/* Runs the lists under `model` (no structure check: call mg_pp_check first,
 * pipeline_verify.h). MG_OK and the times in *out (freed by mg_pp_sim_free;
 * out may be NULL), or MG_EINVAL naming the mismatched transfer or, on a
 * deadlock, what each waiting rank waits for. */
int mg_pp_simulate(const mg_pp_schedule *s, const mg_pp_cost *cost, mg_pp_p2p_model model,
                   mg_pp_sim *out);
void mg_pp_sim_free(mg_pp_sim *sim);
/* Seconds one action takes under `cost` (NULL: unit time): compute for F, B,
 * Bi, W and reduce-grad, the transfer for a send or receive. */
double mg_pp_action_time(const mg_pp_cost *cost, const mg_pp_action *a);

#endif
