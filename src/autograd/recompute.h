/* recompute.h: activation recomputation (meshgrad_train.h's mg_recompute):
 * a segment of the forward (a transformer block, say) whose activations are
 * given back when its forward is done and made again when backward reaches it.
 *
 * Forward: the segment's function runs with recording on and its tensor data
 * redirected to the recompute arena (context.h); its output's data is then
 * copied to where the step's data goes (the step arena, a micro-batch's or a
 * pipeline slot's arena) and the arena reset. Its ops stay on the tape, with
 * their data gone: the graph is whole, so mg_backward counts every leaf's
 * uses (which contribution is a parameter's last: the tied wte's sums wait
 * for its embedding's), the ranks agree on it, and one walk takes the nodes
 * in the order it always does.
 *
 * Backward (autograd/backward.c): when the walk meets a node of a segment,
 * the segment's function runs again from the kept input, its data in the
 * recompute arena; the new nodes must hash as the first ones did (else the
 * backward stops, naming the op); they are walked in the same order with the
 * output's gradient as it stands, every leaf contribution handed over as the
 * first nodes would have (in the enclosing arena's memory for a leaf of the
 * step), the input's gradient copied out, and the arena reset. The kernels,
 * their inputs and the order of every sum are those of a step without
 * recomputation, so the gradients are bitwise the same.
 *
 * Exports mg_recompute_seg, mg_recompute_find, mg_recompute_again,
 * mg_recompute_keep, mg_recompute_step_end (and meshgrad_train.h's
 * mg_recompute). */
#ifndef MG_AUTOGRAD_RECOMPUTE_H
#define MG_AUTOGRAD_RECOMPUTE_H

#include <stdint.h>

#include "meshgrad_train.h"
#include "ops/tape.h"

typedef struct mg_recompute_seg {
    int64_t lo, hi; /* the sequence numbers of its ops as first recorded: [lo, hi) */
    mg_dtensor *x, *y; /* its input and output, whose data are kept */
    mg_recompute_fn fn;
    void *ctx;
} mg_recompute_seg;

/* The segment of this step whose first recording holds op `seq`, or NULL. */
mg_recompute_seg *mg_recompute_find(int64_t seq);
/* The segment's function run again, recording on (its data where the step
 * arena's goes now); *first gets the sequence number of its first op.
 * Returns its output; NULL with a message. */
mg_dtensor *mg_recompute_again(const mg_recompute_seg *s, int64_t *first);
/* t's data copied to a new tensor of the step arena (wherever its data goes
 * now): the copy, or NULL with a message. */
mg_dtensor *mg_recompute_keep(const mg_dtensor *t);
/* The step ends: its segments are gone. */
void mg_recompute_step_end(void);

#endif
