/* reducer_rows.h: the weight gradient of a data-parallel linear layer whose
 * optimizer step is split across the ranks of a node (nn/optim_shard.h), made
 * as this rank's rows of the summed gradient: the reducer's way with a
 * gradient that comes as factors (dist/reducer.h: dW = sum over rows of
 * dy^T x).
 *
 * The ordinary path has every rank compute a whole partial dW = dy_r^T x_r
 * from its own batch rows, and the split step then adds the k partials: each
 * rank reads (k-1)/k of the others' freshly written gradients out of their
 * caches. Here instead every rank copies its rows of dy (B, O) and x (B, I)
 * into one shared copy of the whole batch, at their global offsets, and after
 * a barrier computes rows [r O/k, (r+1) O/k) of dW = dy^T x over the whole
 * batch, straight into its gradient buffer. That slice is already the sum;
 * the step reads it as it is. Per layer a rank reads the others' activations,
 * B (O + I) floats, instead of their gradients, O I, and its GEMM runs over
 * the whole batch on 1/k of the rows.
 *
 * The rest of the gradient buffer is stale: mg_rows_gather fetches the other
 * ranks' rows when the whole gradient is asked for (collectively). The staging
 * copies alternate between two halves of a shared window, so one barrier per
 * layer is enough: a rank can only overwrite a half after every rank passed
 * the barrier of the layer that followed its last use.
 *
 * A gradient accumulated over micro-batches (or uses) has a cheaper way too:
 * mg_rows_add adds this contribution's dy^T x to the buffer in the GEMM
 * itself (beta 1; Megatron's gradient accumulation fusion), when the local
 * product is exactly the buffer's local block, instead of computing it into
 * scratch memory and adding that (a write and two reads of the whole weight's
 * size more, per micro-batch).
 *
 * Exports: mg_rows_slice, mg_rows_dim, mg_rows_compute, mg_rows_gather,
 * mg_rows_add. */
#ifndef MG_DIST_REDUCER_ROWS_H
#define MG_DIST_REDUCER_ROWS_H

#include <stdint.h>

#include "dist/dtensor.h"

/* Rank r of k: rows [*lo, *hi) of `rows`. The split step slices the same way. */
void mg_rows_slice(int64_t rows, int k, int r, int64_t *lo, int64_t *hi);
/* The mesh dim over which this rank can compute its rows of dW = dy^T x for the
 * weight w (O, I), or -1: w whole on every rank, dy (B, O) and x (B, I) 2-D on
 * the CPU and sharded on their batch dim over that one mesh dim alone. The
 * same on every rank. */
int mg_rows_dim(const mg_dtensor *w, const mg_dtensor *dy, const mg_dtensor *x);
/* Collective over mesh dim `dim`: this rank's rows of dy^T x, over the whole
 * batch, into w's gradient buffer (beta 0: written; 1: added), which must be
 * in that dim's shared memory. */
int mg_rows_compute(const mg_dtensor *dy, const mg_dtensor *x, mg_dtensor *w, int dim, float beta);
/* Collective over mesh dim `dim`: every rank's rows into every rank's buffer. */
int mg_rows_gather(mg_dtensor *w, int dim);
/* buf (O, I), the local block of a gradient of spec `at`, += dy^T x over the
 * rows (dy (..., O), x (..., I): every dim but the last is rows), computed
 * from the local blocks alone. 1: added; 0: the local product is not that
 * block here (nothing done): on each mesh dim, `at` Replicate needs dy and x
 * whole, Partial needs both split on the same row dim, Shard(0) dy split on
 * its last dim and x whole, Shard(1) the reverse. Local, no communication. */
int mg_rows_add(const mg_dtensor *dy, const mg_dtensor *x, const mg_spec *at, mg_tensor *buf);

#endif
