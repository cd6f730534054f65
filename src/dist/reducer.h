/* reducer.h: everything that happens to a leaf's gradient after the VJP of the
 * op that used the leaf made it, in one place (in the spirit of PyTorch's DDP
 * Reducer): the gradient buffer, accumulation across uses and micro-batches,
 * data-parallel sums in buckets overlapped with backward (reducer_buckets.h),
 * shared-memory sums, row-slice weight gradients (reducer_rows.h), sums left
 * to a split optimizer step (ZeRO-1, nn/optim_shard.h), and the reduce-scatter
 * of a gathered (fully sharded) parameter's gradient.
 *
 * The autograd engine calls mg_reducer_add once per contribution to a leaf's
 * gradient (a leaf used twice gets two), saying which is the last one of this
 * backward, mg_reducer_poll between nodes and mg_reducer_backward_end at the
 * end; it knows nothing else of what happens here. The optimizer asks the
 * reducer, not the engine, what a gradient holds (mg_reducer_form).
 *
 * A leaf's gradient buffer (leaf->grad) has the leaf's placements with Partial
 * made Replicate (the gradient of a Partial value is Replicate), and holds, in
 * the reducer's words (mg_grad_form):
 *   ZERO   nothing yet: it counts as zero (mg_zero_grad keeps the memory, the
 *          next contribution is written over it, often by the VJP's own kernel)
 *   FULL   the gradient
 *   LOCAL  this rank's addend: the gradient is its sum over some mesh dims
 *          (those the batch was split over). Contributions add to it locally;
 *          the sum starts after the last contribution of a backward, unless
 *          sums are off (micro-batches: mg_set_grad_sync), or unless the
 *          leaf's optimizer takes the sum itself (mg_reducer_defer: its ranks
 *          share a node and the buffer is in shared memory).
 *   ROWS   this rank's rows of the summed gradient only (reducer_rows.h).
 * mg_grad (mg_reducer_grad) always returns the whole gradient: it sums a LOCAL
 * buffer and gathers ROWS first (collectively) and keeps the result FULL; a
 * later contribution is then summed on its own and added.
 *
 * In the deterministic mode none of those ways runs: each contribution is
 * summed over the ranks at once and kept per use of the leaf in a tree over
 * the micro-batches (reducer_det.c), folded into the buffer (FULL) by the last
 * contribution of a backward that syncs.
 *
 * Exports: mg_grad_form, mg_leaf_grad, mg_reducer_add, mg_reducer_poll,
 * mg_reducer_backward_end, mg_reducer_grad, mg_reducer_zero, mg_reducer_defer,
 * mg_reducer_finite, mg_reducer_deferred, mg_reducer_form, mg_reducer_holds, mg_reducer_forget,
 * mg_reducer_step_end, mg_reducer_free,
 * mg_reducer_buffer_bytes, mg_det_sums_add/fold/clear/free (reducer_det.c), and
 * the public mg_set_grad_sync / mg_grad_sync. */
#ifndef MG_DIST_REDUCER_H
#define MG_DIST_REDUCER_H

#include <stdbool.h>
#include <stddef.h>

#include "dist/dtensor.h"

typedef enum { MG_GRAD_ZERO = 0, MG_GRAD_FULL, MG_GRAD_LOCAL, MG_GRAD_ROWS } mg_grad_form;

/* One contribution to a leaf's gradient, as the engine hands it: not computed
 * yet, so the reducer can ask for it in the form it wants. */
typedef struct mg_leaf_grad {
    /* Computes the contribution (any placement; for a parameter copy, the
     * copy's). `dest`, when not NULL, is `dest_bytes` of memory the VJP's last
     * kernel may write its local data into (used when the sizes match). */
    mg_dtensor *(*value)(struct mg_leaf_grad *g, void *dest, size_t dest_bytes);
    /* When the op's VJP has this form, the contribution is also the sum over
     * rows of a^T b (a (N, O), b (N, I): a linear's weight, a = dy, b = x), and
     * the reducer may compute it from these instead (their data valid now);
     * NULL otherwise. */
    const mg_dtensor *rows_a, *rows_b;
} mg_leaf_grad;

/* A contribution `g` to leaf's gradient; `last`: no more this backward. g may
 * be NULL with `last` set: the contributions ended without one. */
int mg_reducer_add(mg_dtensor *leaf, mg_leaf_grad *g, bool last);
/* Lets started sums progress (cheap; between nodes). */
int mg_reducer_poll(void);
/* Waits for every sum started in this backward. */
int mg_reducer_backward_end(void);

/* The whole gradient (collective when a sum or gather is left), or NULL when
 * the leaf has none yet. */
mg_dtensor *mg_reducer_grad(mg_dtensor *leaf);
/* The buffer is kept and counts as zero from now on. */
void mg_reducer_zero(mg_dtensor *leaf);
/* The leaf's optimizer sums its data-parallel gradient itself when the buffer
 * is in shared memory (nn/optim_shard.h): its sums are left LOCAL, or its
 * rows computed. Call before any backward, so every step is alike. */
int mg_reducer_defer(mg_dtensor *leaf);
/* The part of the leaf's gradient this rank holds (all of a FULL buffer, its
 * addend, its rows) has only finite values; no collective. A non-finite value
 * anywhere is in some rank's part. */
bool mg_reducer_finite(const mg_dtensor *leaf);
/* mg_reducer_defer was called for the leaf. */
bool mg_reducer_deferred(const mg_dtensor *leaf);
/* What the leaf's buffer holds now; *dim (may be NULL) gets the mesh dim of a
 * LOCAL sum over one dim or of ROWS, else -1. */
mg_grad_form mg_reducer_form(const mg_dtensor *leaf, int *dim);
/* t's data overlaps a leaf's gradient buffer (which a backward writes). */
bool mg_reducer_holds(const mg_tensor *t);
/* The leaf is being freed: its record goes. The reducer registers it with
 * mg_dtensor_on_free when it starts (dtensor.h), so every heap tensor freed
 * is forgotten. */
void mg_reducer_forget(const mg_dtensor *leaf);
/* The step ends: leaves that lived in the step arena are gone. */
void mg_reducer_step_end(void);
void mg_reducer_free(void);
/* Bytes of the packing buffers its buckets keep between steps (the memory
 * report of `meshgrad train`). */
size_t mg_reducer_buffer_bytes(void);

/* reducer_det.c: one leaf's deterministic sums, a tree over the micro-batches
 * per use of the leaf. add: `v` (numel floats, summed over the ranks already)
 * as the next micro-batch of use `use`. fold: out = the uses' trees, each
 * folded, added in use order (the trees kept: later micro-batches add on); 1
 * (no error) when none holds anything. clear: the trees emptied (the gradient
 * zeroed). bytes: the memory the trees hold (the reducer's buffers count it). */
typedef struct mg_det_sums mg_det_sums;
int mg_det_sums_add(mg_det_sums **s, int use, const float *v, int64_t numel);
int mg_det_sums_fold(mg_det_sums *s, float *out, int64_t numel);
void mg_det_sums_clear(mg_det_sums *s);
size_t mg_det_sums_bytes(const mg_det_sums *s); /* the trees' buffers */
void mg_det_sums_free(mg_det_sums *s);

#endif
