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
 * Exports: mg_rows_slice, mg_rows_dim, mg_rows_compute, mg_rows_gather. */
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

#endif
