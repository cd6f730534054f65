/* autograd_state.h: what the autograd layer remembers between calls (memory
 * kept between steps), behind the context's layers.autograd (context.h):
 * made on first use by mg_autograd, freed at each mg_context_reset by
 * mg_autograd_state_free (autograd_state.c). Included by autograd/ and the
 * layers above it.
 * Exports: mg_autograd_state, mg_leaf_uses, mg_autograd, mg_autograd_state_free. */
#ifndef MG_AUTOGRAD_STATE_H
#define MG_AUTOGRAD_STATE_H

#include <stdint.h>

#include "context.h"

struct mg_dtensor;
struct mg_node;
struct mg_recompute_seg;

/* A leaf of the graph being walked, and how many contributions to its
 * gradient are still to come (autograd/backward.c). */
typedef struct {
    struct mg_dtensor *leaf;
    int remaining;
} mg_leaf_uses;

struct mg_autograd_state {
    /* backward.c */
    int64_t walks;          /* backward passes so far: marks the nodes each one reached */
    struct mg_node **graph; /* the nodes of the graph being walked */
    int cap_graph;
    mg_leaf_uses *uses;     /* its leaves, with the contributions each has to come */
    int cap_uses;
    struct mg_node **replay; /* the nodes of a recomputed segment, run again */
    int cap_replay;
    /* recompute.c: this step's recomputed segments, in recording order */
    struct mg_recompute_seg *segments;
    int n_segments, cap_segments;
    int recomputing; /* recompute.c: inside a segment's function (one inside runs as it is) */
};
typedef struct mg_autograd_state mg_autograd_state;

/* Frees the walks' arrays and the segments, then the state, and NULLs the
 * context's pointer (mg_context_on_reset: at every reset; nothing when the
 * state was not made). */
void mg_autograd_state_free(void);

/* The autograd layer's state, made on first use. */
MG_CONTEXT_LAYER(mg_autograd, mg_autograd_state, autograd, mg_autograd_state_free)

#endif
