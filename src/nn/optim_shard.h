/* optim_shard.h: the optimizer step of a data-parallel parameter, split across
 * the ranks that hold its replicas when they share a node (ZeRO stage 1, in
 * shared memory).
 *
 * Backward moves a large data-parallel gradient into a shared window of its
 * mesh dim's comm the first time it sums it (autograd/backward.c). On the
 * parameter's first step its
 * value and optimizer state move into shared memory too, as one copy that all
 * k ranks of the comm map (mg_comm_alloc_shared_one): a replica that is
 * identical on every rank by definition is stored once per node. Each rank
 * then updates its 1/k of the rows (dim 0), [r R/k, (r+1) R/k), in place, with
 * the same backend kernel as an ordinary step.
 *
 * When the optimizer makes their state it tells the gradient reducer that it
 * takes these parameters' sums (mg_reducer_defer, dist/reducer.h), so the
 * reducer, from the first step on, leaves the gradient unsummed, each rank's
 * part in its own shared buffer (LOCAL). The step adds the k parts up tile by
 * tile as it updates, in rank order like the shared-memory all-reduce: the
 * gradient sum makes no pass of its own, and the result has the same bits as
 * summing first. The buffers keep their parts; mg_grad sums them when asked
 * (collectively), before or after the step. A linear layer's weight does
 * better still: the reducer computes each rank's rows of the summed gradient
 * from every rank's activations (ROWS, dist/reducer_rows.h), and the step
 * reads its rows as they are.
 *
 * Per step and node this moves what the update must: every rank's gradient
 * read once, value and state read and written once. Separate replicas would
 * add k-1 copies of value and state written per step (and an all-reduce would
 * add two passes over every gradient); on a node the memory bandwidth is shared
 * by all its ranks, so that is what a data-parallel step pays for.
 *
 * What one copy asks of the code around it: a parameter split here is written
 * only by this step and by a checkpoint load (every rank writes the same
 * values). Barriers over the comm bracket the split updates: before, so every
 * part of every gradient is final and no rank still reads the parameter in
 * backward; after, so no rank reads the parameter (the next forward) or
 * writes its gradient buffer (the next backward) before all slices are done.
 *
 * Exports: mg_optim_shard_mark, mg_optim_shard_begin, mg_optim_shard_update,
 * mg_optim_shard_end. */
#ifndef MG_NN_OPTIM_SHARD_H
#define MG_NN_OPTIM_SHARD_H

#include "nn/optim_update.h"
#include "nn/param.h"

/* Tells the gradient reducer which parameters' sums this step takes (large,
 * on the CPU, Replicate over some mesh dim: mg_reducer_defer), before any
 * backward: from the first step on, backward leaves their data-parallel sums
 * to the step, so a resumed run computes exactly what an uninterrupted one
 * does. */
int mg_optim_shard_mark(mg_param_table *t);
/* Collective over the mesh. Sets each parameter's shard_dim (the mesh dim whose
 * ranks split its update, or -1), moving value and state into shared memory
 * the first time, and waits at a barrier on every comm that splits one. */
int mg_optim_shard_begin(mg_optimizer *opt, mg_param_table *t);
/* This rank's slice of p's update (p->shard_dim >= 0); decay: whether the
 * update applies opt's weight decay to p (the caller's grouping, optim.h). */
void mg_optim_shard_update(const mg_optimizer *opt, mg_param *p, float lr, int decay);
/* The barrier after the split updates. */
int mg_optim_shard_end(mg_param_table *t);

#endif
