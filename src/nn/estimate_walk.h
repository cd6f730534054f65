/* estimate_walk.h: the step walk of estimate.c, shared with the GPT's walk
 * (estimate_gpt.c): its state, one op's record, and its steps (tensors made
 * in the step arena, collectives counted, redistributions, rule choices,
 * parameters' memory, gathers and gradient contributions, the step's end).
 * Internal to src/nn. Exports walk, op_record, mg_est_* below. */
#ifndef MG_NN_ESTIMATE_WALK_H
#define MG_NN_ESTIMATE_WALK_H

#include <stdbool.h>

#include "dist/mesh.h"
#include "dist/rules.h"
#include "nn/estimate.h"

#define MAX_LAYERS MG_EST_MODEL_MAX_LAYERS /* the deepest model of train */
/* bytes as an arena hands them out: whole 64-byte blocks */
#define ROUND64(b) ((double)(((int64_t)(b) + 63) / 64 * 64))

/* What the forward pass did at one op, for its backward. */
typedef struct {
    const mg_est_layer *layer;
    mg_spec in, in_to;     /* the input as it came, and as the op took it */
    bool in_moved, in_grad; /* it was redistributed; it wants a gradient */
    mg_spec w_store, w_use, w_to, b_store, b_use, b_to; /* LINEAR */
    mg_spec labels, labels_to, out;
} op_record;

typedef struct {
    const mg_est_config *cfg;
    mg_estimate *e;
    mg_mesh mesh; /* described: shape, coordinate 0; no communicators */
    double step;  /* step arena bytes so far */
    double data;  /* of them, tensor data (the rest: headers) */
    /* of e's collectives, the gradients' sums, which a step makes once
     * whatever its micro-batches (the buckets' are counted at its end) */
    double sync_bytes[MG_COLL_COUNT], sync_calls[MG_COLL_COUNT];
    double bucket_floats[MG_MAX_MESH_DIMS]; /* small gradients summed over each dim */
    double staging[2]; /* floats of redistribute's two staging buffers (the largest asked) */
    op_record ops[MAX_LAYERS];
} walk;

void mg_est_made(walk *w, const mg_spec *s, bool data, bool node);
void mg_est_count(walk *w, mg_coll_kind kind, int size, int64_t n);
void mg_est_redistribute(walk *w, const mg_spec *src, const mg_spec *dst, bool node);
int mg_est_choose(const mg_candidates *c, int n, const mg_spec *const *in, int out_ndim,
                  const int64_t *out_shape, mg_spec *targets, mg_spec *out);
int mg_est_spec(walk *w, mg_spec *s, const mg_placement *p, int ndim, const int64_t *shape);
mg_spec mg_est_replicated(const mg_spec *s);
void mg_est_param_memory(walk *w, const mg_spec *store);
double mg_est_gather(walk *w, const mg_spec *store, const mg_spec *use);
double mg_est_contribute(walk *w, const mg_spec *g, const mg_spec *use, const mg_spec *store);
void mg_est_control(walk *w, mg_coll_kind kind, int64_t bytes);
int mg_est_forward(walk *w, op_record *r, mg_spec *x);
int mg_est_backward(walk *w, const op_record *r, mg_spec *g);
void mg_est_finish(walk *w, const mg_spec *loss, const mg_spec *stores, int ns);

#endif
