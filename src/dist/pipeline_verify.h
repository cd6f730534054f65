/* pipeline_verify.h: proves a pipeline schedule (pipeline_schedule.h): its
 * structure, then a run under each of the two transfer models of
 * pipeline_sim.h, which also times it.
 *
 * The structure (mg_pp_check, pipeline_verify.c), one rank's list at a time:
 * every action names a stage of its rank, a micro-batch in range and the
 * right peer; each stage runs F and its backward (B, or Bi then W) exactly
 * once per micro-batch; a stage's F comes before its backward, Bi before W;
 * a forward's input is received (or made by the rank's own previous stage)
 * before the forward, a backward's output gradient likewise; a send follows
 * the compute that made what it sends; every stage boundary between two ranks
 * has exactly one send and one receive each way per micro-batch; one
 * reduce-grad per stage, after all of the stage's backward work.
 *
 * A schedule passes mg_pp_verify when its structure is sound and both models
 * run it to the end: every send meets exactly one receive, in order, and no
 * rank waits forever. The generators' lists all pass
 * (tests/test_pipeline_schedule.c runs every schedule for p <= 8, M <= 32,
 * v <= 4).
 *
 * Exports: mg_pp_check, mg_pp_verify. */
#ifndef MG_PIPELINE_VERIFY_H
#define MG_PIPELINE_VERIFY_H

#include "dist/pipeline_schedule.h"
#include "dist/pipeline_sim.h"

/* The structure alone. MG_OK, or MG_EINVAL naming the rank, the action and
 * what is wrong. */
int mg_pp_check(const mg_pp_schedule *s);
/* mg_pp_check, then both models; *out (may be NULL) gets the MG_PP_P2P_ASYNC
 * run with `cost` (NULL: unit time). */
int mg_pp_verify(const mg_pp_schedule *s, const mg_pp_cost *cost, mg_pp_sim *out);

#endif
