/* grad_rows.h: the weight gradient of a data-parallel linear layer whose
 * optimizer step is split across the ranks of a node (nn/optim_shard.h), made
 * as this rank's rows of the summed gradient.
 *
 * The ordinary path has every rank compute a whole partial dW = dy_r^T x_r
 * from its own batch rows, and the split step then adds the k partials: each
 * rank reads (k-1)/k of the others' freshly written gradients out of their
 * caches. Here instead every rank copies its rows of dy (B, O) and x (B, I)
 * into one shared copy of the whole batch, at their global offsets, and after
 * a barrier computes rows [r O/k, (r+1) O/k) of dW = dy^T x over the whole
 * batch, straight into its gradient buffer. That slice is already the sum;
 * the step reads it as it is (MG_DTENSOR_GRAD_ROWS). Per layer a rank reads
 * the others' activations, B (O + I) floats, instead of their gradients, O I,
 * and its GEMM runs over the whole batch on 1/k of the rows.
 *
 * The rest of the gradient buffer is stale: mg_grad gathers the other ranks'
 * rows when asked (collectively). The staging copies alternate between two
 * halves of a shared window, so one barrier per layer is enough: a rank can
 * only overwrite a half after every rank passed the barrier of the layer that
 * followed its last use.
 *
 * Exports: mg_grad_rows_applies, mg_grad_rows_compute, mg_grad_rows_gather,
 * mg_grad_rows_slice. */
#ifndef MG_GRAD_ROWS_H
#define MG_GRAD_ROWS_H

#include <stdbool.h>
#include <stdint.h>

#include "autograd/tape.h"

/* Rank r of k: rows [*lo, *hi) of `rows`. The split step slices the same way. */
void mg_grad_rows_slice(int64_t rows, int k, int r, int64_t *lo, int64_t *hi);
/* Whether input i of node can take this path: a linear's weight, the parameter
 * itself, marked MG_DTENSOR_GRAD_DEFER by its optimizer and whole on every
 * rank, with dy and x 2-D, on the CPU, and sharded on their batch dim over
 * one mesh dim alone (*dim). The same on every rank. */
bool mg_grad_rows_applies(const mg_node *node, const mg_dtensor *dy, int i, int *dim);
/* Collective over mesh dim `dim`: this rank's rows of dy^T x, over the whole
 * batch, written into the parameter's gradient buffer, which must be in that
 * dim's shared memory (beta 0 when the buffer counts as zero, else added).
 * Sets MG_DTENSOR_GRAD_ROWS and grad_dim. */
int mg_grad_rows_compute(const mg_node *node, const mg_dtensor *dy, mg_dtensor *param, int dim);
/* Collective: every rank's rows into every rank's buffer; clears the flag. */
int mg_grad_rows_gather(mg_dtensor *param);

#endif
