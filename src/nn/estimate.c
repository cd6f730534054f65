/* estimate.c: one training step walked at the level of specs, on coordinate
 * 0 of a described mesh (see estimate.h). The forward walk keeps, per op, the
 * specs its inputs came in and were moved to; the backward walk mirrors them
 * in reverse as the autograd engine does (each recorded redistribution takes
 * its gradient back to the source placements, a Partial source getting a
 * Replicate gradient), gives every parameter its gradient and hands it to the
 * reducer's rules. Exports: mg_estimate_step, mg_est_layers_model,
 * mg_estimate_total. */
#include "nn/estimate.h"
#include "nn/estimate_walk.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dtensor.h"
#include "dist/mesh.h"
#include "dist/redistribute.h"
#include "dist/reducer_buckets.h"
#include "dist/rules.h"
#include "ops/tape.h"
#include "status.h"

/* the contraction labels of ops/ops_matmul.c */
enum { LABEL_K = 101, LABEL_N };

static double data_bytes(const mg_spec *s) {
    double b = 4.0 * (double)mg_spec_local_numel(s, NULL);
    return b > 0 ? ROUND64(b) : 64;
}

/* A tensor of the step arena: its data, its tensor and dtensor headers, and
 * the tape node when it is recorded. */
static void made(walk *w, const mg_spec *s, bool data, bool node) {
    w->data += data ? data_bytes(s) : 0;
    w->step += (data ? data_bytes(s) : 0) + ROUND64(sizeof(mg_tensor)) + MG_DTENSOR_STEP_BYTES +
               (node ? ROUND64(sizeof(mg_node)) : 0);
}

static void count(walk *w, mg_coll_kind kind, int size, int64_t n) {
    w->e->bytes[kind] += (double)mg_coll_bytes(kind, size, 0, n, 0);
    w->e->calls[kind] += 1;
}

static int world_size(const walk *w) {
    int world = 1;
    for (int m = 0; m < w->mesh.ndim; m++) world *= w->mesh.shape[m];
    return world;
}

/* A control message over the whole mesh of `bytes` (comm_control.c). */
static void control(walk *w, mg_coll_kind kind, int64_t bytes) {
    count(w, kind, world_size(w), (bytes + 3) / 4);
}

/* src -> dst by the redistribute planner: its collectives counted (when
 * `comm`), its staging noted; *last gets the bytes of the last step's buffer
 * (with its header), and the return value the bytes of all of them (none
 * when no data moves: a view's header). */
static double planned(walk *w, const mg_spec *src, const mg_spec *dst, bool comm, double *last) {
    mg_redistribute_move mv[MG_REDISTRIBUTE_MAX_MOVES];
    int n = mg_redistribute_moves(src, dst, mv, MG_REDISTRIBUTE_MAX_MOVES);
    double bytes = n > 0 ? 0 : ROUND64(sizeof(mg_tensor));
    *last = bytes;
    for (int i = 0; i < n; i++) {
        if (comm && mv[i].kind != MG_COLL_COUNT) count(w, mv[i].kind, mv[i].size, mv[i].n);
        for (int k = 0; k < 2; k++)
            if ((double)mv[i].staging[k] > w->staging[k]) w->staging[k] = (double)mv[i].staging[k];
        *last = (mv[i].out > 0 ? ROUND64(4.0 * (double)mv[i].out) : 64) + ROUND64(sizeof(mg_tensor));
        bytes += *last;
    }
    return bytes;
}

/* A move made in the step arena: returns its bytes (buffers and headers). */
static double moved(walk *w, const mg_spec *src, const mg_spec *dst) {
    double last;
    return mg_spec_equal(src, dst) ? 0 : planned(w, src, dst, true, &last);
}

/* The tensor headers among a move's bytes: one a step, or a view's. */
static double move_headers(const mg_spec *src, const mg_spec *dst) {
    mg_redistribute_move mv[MG_REDISTRIBUTE_MAX_MOVES];
    int n = mg_redistribute_moves(src, dst, mv, MG_REDISTRIBUTE_MAX_MOVES);
    return ROUND64(sizeof(mg_tensor)) * (n > 0 ? n : 1);
}

/* A redistribution in the step arena (mg_op_redistribute; recorded when
 * `node`). */
static void redistribute(walk *w, const mg_spec *src, const mg_spec *dst, bool node) {
    if (mg_spec_equal(src, dst)) return;
    double bytes = moved(w, src, dst);
    w->data += bytes - move_headers(src, dst);
    w->step += bytes + MG_DTENSOR_STEP_BYTES + (node ? ROUND64(sizeof(mg_node)) : 0);
}

/* The rule's choice for n inputs. */
static int choose(const mg_candidates *c, int n, const mg_spec *const *in, int out_ndim,
                  const int64_t *out_shape, mg_spec *targets, mg_spec *out) {
    int rc = mg_rules_choose(c, n, in, out_ndim, out_shape, targets, out);
    return rc == MG_OK ? rc : mg_error(rc, "estimate: %s", mg_last_error());
}

static int spec(walk *w, mg_spec *s, const mg_placement *p, int ndim, const int64_t *shape) {
    return mg_spec_make(s, &w->mesh, p, w->mesh.ndim, ndim, shape, "estimate");
}

/* s with its Partial placements made Replicate (the spec of a gradient). */
static mg_spec replicated(const mg_spec *s) {
    mg_spec r = *s;
    for (int m = 0; m < r.mesh->ndim; m++)
        if (r.p[m].kind == MG_PLACE_PARTIAL) r.p[m] = MG_REPLICATE;
    return r;
}

/* ---- parameters and their gradients ---------------------------------------------- */

/* A large data-parallel parameter whose ranks share a node keeps its value
 * and state once per node and leaves its gradient sum to the optimizer's
 * split step (nn/optim_shard.h); *dim: the mesh dim of its replicas. */
static bool one_copy(const walk *w, const mg_spec *store, int *dim) {
    if (w->cfg->nodes > 1 || mg_spec_local_numel(store, NULL) < MG_GRAD_LARGE_FLOATS) return false;
    for (int m = 0; m < w->mesh.ndim; m++)
        if (w->mesh.shape[m] > 1 && store->p[m].kind == MG_PLACE_REPLICATE) {
            *dim = m;
            return true;
        }
    return false;
}

/* A parameter's memory: value, gradient buffer, optimizer state (1/k of a
 * value and state kept once per node is this rank's). */
static void param_memory(walk *w, const mg_spec *store) {
    double b = 4.0 * (double)mg_spec_local_numel(store, NULL);
    int dim = -1;
    double share = one_copy(w, store, &dim) ? 1.0 / w->mesh.shape[dim] : 1.0;
    w->e->params += b * share;
    w->e->grads += b;
    w->e->optim += b * w->cfg->states * share;
}

/* A gradient g in its buffer's placements but for Partial dims (reducer.h):
 * summed over those in buckets, in place when large, or not at all when the
 * optimizer's split step takes the sum. */
static void reduce(walk *w, const mg_spec *g, const mg_spec *store) {
    int64_t n = mg_spec_local_numel(g, NULL);
    int dim = -1;
    if (one_copy(w, store, &dim)) return;
    for (int m = 0; m < w->mesh.ndim; m++) {
        if (w->mesh.shape[m] == 1 || g->p[m].kind != MG_PLACE_PARTIAL) continue;
        if (n >= MG_GRAD_LARGE_FLOATS) { /* summed on its own, once a step */
            double bytes = w->e->bytes[MG_COLL_ALL_REDUCE];
            count(w, MG_COLL_ALL_REDUCE, w->mesh.shape[m], n);
            w->sync_bytes[MG_COLL_ALL_REDUCE] += w->e->bytes[MG_COLL_ALL_REDUCE] - bytes;
            w->sync_calls[MG_COLL_ALL_REDUCE] += 1;
            continue;
        }
        w->bucket_floats[m] += (double)n;
    }
}

/* The sums of the backward's buckets: packs of up to MG_GRAD_BUCKET_FLOATS,
 * one all-reduce each, and the packing buffers the reducer keeps. */
static void buckets(walk *w) {
    double packs = 0;
    for (int m = 0; m < w->mesh.ndim; m++)
        for (double left = w->bucket_floats[m]; left > 0; left -= MG_GRAD_BUCKET_FLOATS, packs++)
            count(w, MG_COLL_ALL_REDUCE, w->mesh.shape[m],
                  (int64_t)(left < MG_GRAD_BUCKET_FLOATS ? left : MG_GRAD_BUCKET_FLOATS));
    w->e->buffers += packs * 4.0 * MG_GRAD_BUCKET_FLOATS;
}

/* The split optimizer step of the parameters kept once per node: a barrier
 * before and after, on each comm that splits one. */
static void split_steps(walk *w, const mg_spec *stores, int n) {
    bool dims[MG_MAX_MESH_DIMS] = {false};
    for (int i = 0; i < n; i++) {
        int dim = -1;
        if (one_copy(w, &stores[i], &dim)) dims[dim] = true;
    }
    for (int m = 0; m < w->mesh.ndim; m++)
        if (dims[m]) w->e->calls[MG_COLL_BARRIER] += 2;
}

/* A parameter brought from `store` to `use` for an op (ops/ops.c: a copy
 * whose data is in the gather arena, recorded); returns the gathered bytes. */
static double gather(walk *w, const mg_spec *store, const mg_spec *use) {
    if (mg_spec_equal(store, use)) return 0;
    double all = moved(w, store, use), headers = move_headers(store, use);
    w->step += headers + MG_DTENSOR_STEP_BYTES + ROUND64(sizeof(mg_node));
    return all - headers;
}

/* The contribution g to a parameter's gradient, from a VJP that used it at
 * `use`: a copy's goes through the scratch arena (data and the reducer's
 * headers) and back to the stored placements; a parameter used as stored
 * has it written straight into its buffer. Returns the scratch bytes. */
static double contribute(walk *w, const mg_spec *g, const mg_spec *use, const mg_spec *store) {
    w->step += ROUND64(sizeof(mg_tensor)) + MG_DTENSOR_STEP_BYTES;
    if (mg_spec_equal(use, store)) {
        reduce(w, g, store);
        return 0;
    }
    /* the copy's mirror, back to the stored placements, in the scratch arena
     * but for its result (the gradient buffer) */
    mg_spec to = replicated(store);
    double last, all = planned(w, g, &to, true, &last);
    reduce(w, &to, store);
    return data_bytes(g) + ROUND64(sizeof(mg_tensor)) + ROUND64(sizeof(mg_dtensor)) + all - last;
}

/* ---- the forward pass ------------------------------------------------------------ */

/* Labels of mg_linear's contraction (ops/ops_matmul.c): x (.., K), w (N, K),
 * b (N) -> (.., N); and of its two gradients. */
static void linear_labels(int nb, int *x, int *w, int *b, int *out) {
    for (int i = 0; i < nb; i++) x[i] = out[i] = i;
    x[nb] = LABEL_K;
    out[nb] = LABEL_N;
    w[0] = LABEL_N;
    w[1] = LABEL_K;
    b[0] = LABEL_N;
}

static int forward_linear(walk *w, op_record *r, mg_spec *x) {
    const mg_est_layer *l = r->layer;
    if (x->shape[x->ndim - 1] != l->in)
        return mg_error(MG_ESHAPE, "estimate: layer %d takes %lld features but gets %lld", l->index,
                        (long long)l->in, (long long)x->shape[x->ndim - 1]);
    mg_placement ws[MG_MAX_MESH_DIMS], wu[MG_MAX_MESH_DIMS], bs[MG_MAX_MESH_DIMS], bu[MG_MAX_MESH_DIMS];
    if (l->gpt) { /* a GPT layer: placements by its parameters' roles */
        mg_plan_gpt_param(&w->cfg->plan, l->role, ws, wu);
        mg_plan_gpt_param(&w->cfg->plan, l->role == MG_GPT_ROW ? MG_GPT_REPLICATED : l->role, bs, bu);
    } else {
        mg_plan_linear(&w->cfg->plan, l->index, ws, wu, bs, bu);
    }
    int64_t wshape[2] = {l->out, l->in}, bshape[1] = {l->out};
    int rc = spec(w, &r->w_store, ws, 2, wshape);
    if (rc == MG_OK) rc = spec(w, &r->w_use, wu, 2, wshape);
    if (rc == MG_OK) rc = spec(w, &r->b_store, bs, 1, bshape);
    if (rc == MG_OK) rc = spec(w, &r->b_use, bu, 1, bshape);
    if (rc != MG_OK) return rc;
    int nin = l->no_bias ? 2 : 3; /* the GPT's head: tied to wte, no bias */
    if (!l->no_bias) {
        param_memory(w, &r->w_store);
        param_memory(w, &r->b_store);
    }
    int nd = x->ndim, lx[MG_MAX_DIMS], lw[2], lb[1], lo[MG_MAX_DIMS];
    linear_labels(nd - 1, lx, lw, lb, lo);
    int ndims[3] = {nd, 2, 1};
    const int *labels[3] = {lx, lw, lb};
    mg_candidates c;
    mg_rules_contraction(&c, nin, ndims, labels, nd, lo, true);
    int64_t out_shape[MG_MAX_DIMS];
    memcpy(out_shape, x->shape, sizeof out_shape);
    out_shape[nd - 1] = l->out;
    const mg_spec *in[3] = {x, &r->w_use, &r->b_use};
    mg_spec t[3];
    if ((rc = choose(&c, nin, in, nd, out_shape, t, &r->out)) != MG_OK) return rc;
    r->in_to = t[0];
    r->w_to = t[1];
    r->b_to = l->no_bias ? r->b_use : t[2];
    /* a parameter the rule wants elsewhere than its plan said is a copy there
     * (ops.c: mg_op_param_copy); a copy it wants elsewhere moves on */
    if (mg_spec_equal(&r->w_use, &r->w_store)) r->w_use = r->w_to;
    if (mg_spec_equal(&r->b_use, &r->b_store)) r->b_use = r->b_to;
    double held = gather(w, &r->w_store, &r->w_use) +
                  (l->no_bias ? 0 : gather(w, &r->b_store, &r->b_use));
    if (held > w->e->gathered) w->e->gathered = held;
    redistribute(w, x, &t[0], r->in_grad);
    redistribute(w, &r->w_use, &t[1], true);
    if (!l->no_bias) redistribute(w, &r->b_use, &t[2], true);
    made(w, &r->out, true, true);
    *x = r->out;
    return MG_OK;
}

/* An op of one input x and a new output of shape (nd) among the candidates c:
 * the cheapest choice, x moved to it, the output made. */
static int forward_one(walk *w, op_record *r, const mg_spec *x, const mg_candidates *c, int nd,
                       const int64_t *shape) {
    mg_spec t[1];
    int rc = choose(c, 1, (const mg_spec *const[]){x}, nd, shape, t, &r->out);
    if (rc != MG_OK) return rc;
    r->in_to = t[0];
    redistribute(w, x, &t[0], r->in_grad);
    made(w, &r->out, true, r->in_grad);
    return MG_OK;
}

/* One op of the forward pass on the activation x (its spec, updated). */
static int forward(walk *w, op_record *r, mg_spec *x) {
    const mg_est_layer *l = r->layer;
    mg_candidates c;
    mg_spec t[2];
    int nd = x->ndim, rc = MG_OK;
    r->in = *x;
    switch (l->kind) {
    case MG_EST_LINEAR:
        if ((rc = forward_linear(w, r, x)) != MG_OK) return rc;
        break;
    case MG_EST_RELU:
        mg_rules_pointwise(&c, 1, &nd, (const int64_t *const[]){x->shape}, nd, x->shape,
                           MG_LINEARITY_NONE);
        if ((rc = forward_one(w, r, x, &c, nd, x->shape)) != MG_OK) return rc;
        break;
    case MG_EST_PERMUTE: {
        int64_t shape[MG_MAX_DIMS];
        for (int i = 0; i < nd; i++) shape[i] = x->shape[l->perm[i]];
        mg_rules_permute(&c, nd, l->perm);
        if ((rc = forward_one(w, r, x, &c, nd, shape)) != MG_OK) return rc;
        break;
    }
    case MG_EST_RESHAPE: {
        mg_placement keep[MG_MAX_MESH_DIMS];
        bool ok[MG_MAX_MESH_DIMS];
        int64_t shape[MG_MAX_DIMS];
        memcpy(shape, l->shape, sizeof shape);
        shape[0] = x->shape[0];
        mg_rules_reshape(x, l->ndim, shape, keep, ok);
        r->in_to = *x;
        r->out = *x;
        r->out.ndim = l->ndim;
        memcpy(r->out.shape, shape, sizeof shape);
        for (int m = 0; m < w->mesh.ndim; m++) {
            if (!ok[m]) r->in_to.p[m] = MG_REPLICATE;
            r->out.p[m] = ok[m] ? keep[m] : MG_REPLICATE;
        }
        redistribute(w, x, &r->in_to, r->in_grad);
        made(w, &r->out, false, r->in_grad); /* a view */
        break;
    }
    case MG_EST_CROSS_ENTROPY: {
        mg_placement bp[MG_MAX_MESH_DIMS];
        mg_plan_batch(&w->cfg->plan, bp);
        if ((rc = spec(w, &r->labels, bp, x->ndim - 1, x->shape)) != MG_OK) return rc;
        mg_rules_cross_entropy(&c, x->ndim);
        if ((rc = choose(&c, 2, (const mg_spec *const[]){x, &r->labels}, 0, NULL, t, &r->out)))
            return rc;
        r->in_to = t[0];
        r->labels_to = t[1];
        redistribute(w, x, &t[0], r->in_grad);
        redistribute(w, &r->labels, &t[1], false);
        made(w, &r->out, true, r->in_grad);
        /* loss parallel: each mesh dim that shards the classes sums the rows' max,
         * then their sums of exponentials and label logits (2 per row) */
        for (int m = 0; m < w->mesh.ndim; m++)
            if (t[0].p[m].kind == MG_PLACE_SHARD && t[0].p[m].dim == x->ndim - 1) {
                int64_t rows = mg_spec_local_numel(&t[1], NULL);
                count(w, MG_COLL_ALL_REDUCE, w->mesh.shape[m], rows);
                count(w, MG_COLL_ALL_REDUCE, w->mesh.shape[m], 2 * rows);
            }
        count(w, MG_COLL_ALL_REDUCE, world_size(w), 1); /* the labels' check, over the mesh */
        break;
    }
    }
    r->in_moved = !mg_spec_equal(&r->in, &r->in_to);
    *x = r->out;
    return rc;
}

/* ---- the backward pass ----------------------------------------------------------- */

/* The mirror of the op's input redistribution: g taken back to the input's
 * placements (a Partial one getting a Replicate gradient). */
static void mirror(walk *w, const op_record *r, mg_spec *g) {
    if (!r->in_moved) return;
    mg_spec to = replicated(&r->in);
    to.ndim = g->ndim; /* the same tensor */
    redistribute(w, g, &to, false);
    *g = to;
}

/* A parameter copy that moved on to `to` for its op: its gradient g goes back
 * to the copy's placements first (the mirror of that move); returns g. */
static mg_spec *param_mirror(walk *w, mg_spec *g, const mg_spec *to, const mg_spec *use) {
    if (mg_spec_equal(to, use)) return g;
    mg_spec back = replicated(use);
    redistribute(w, g, &back, false);
    *g = back;
    return g;
}

/* The VJP of a linear layer for the gradient g of its output: the input's
 * gradient (into *g) and the contributions of W and b. */
static int backward_linear(walk *w, const op_record *r, mg_spec *g) {
    int nd = g->ndim, nb = nd - 1, lx[MG_MAX_DIMS], lw[2], lb[1], lo[MG_MAX_DIMS], rc;
    linear_labels(nb, lx, lw, lb, lo);
    mg_candidates c;
    mg_spec t[2], out;
    const mg_spec *G = g;
    mg_spec dx;
    if (r->in_grad) { /* dx = dy w: dy (.., N), w (N, K) -> (.., K) */
        /* a copy the op took as it was was given back since: gathered again
         * (one that moved on lives in the step arena) */
        double held = mg_spec_equal(&r->w_to, &r->w_use) ? gather(w, &r->w_store, &r->w_use) : 0;
        if (held > w->e->gathered) w->e->gathered = held;
        int ndims[2] = {nd, 2};
        mg_rules_contraction(&c, 2, ndims, (const int *const[]){lo, lw}, nd, lx, false);
        if ((rc = choose(&c, 2, (const mg_spec *const[]){G, &r->w_to}, nd, r->in_to.shape, t,
                         &dx)) != MG_OK)
            return rc;
        redistribute(w, G, &t[0], false);
        redistribute(w, &r->w_to, &t[1], false);
        made(w, &dx, true, false);
    }
    /* dw = dy^T x: dy (.., N), x (.., K) -> (N, K) */
    int ndims[2] = {nd, nd}, ld[2] = {LABEL_N, LABEL_K};
    mg_rules_contraction(&c, 2, ndims, (const int *const[]){lo, lx}, 2, ld, false);
    int64_t wshape[2] = {r->layer->out, r->layer->in};
    if ((rc = choose(&c, 2, (const mg_spec *const[]){G, &r->in_to}, 2, wshape, t, &out)) != MG_OK)
        return rc;
    redistribute(w, G, &t[0], false);
    redistribute(w, &r->in_to, &t[1], false);
    double scratch = contribute(w, param_mirror(w, &out, &r->w_to, &r->w_use), &r->w_use, &r->w_store);
    if (r->layer->no_bias) {
        if (scratch > w->e->scratch) w->e->scratch = scratch;
        if (r->in_grad) *g = dx;
        return MG_OK;
    }
    /* db: dy summed over its batch dims */
    bool reduced[MG_MAX_DIMS] = {false};
    for (int d = 0; d < nb; d++) reduced[d] = true;
    mg_rules_reduce(&c, nd, reduced, false);
    int64_t bshape[1] = {r->layer->out};
    if ((rc = choose(&c, 1, (const mg_spec *const[]){G}, 1, bshape, t, &out)) != MG_OK) return rc;
    redistribute(w, G, &t[0], false);
    scratch += contribute(w, param_mirror(w, &out, &r->b_to, &r->b_use), &r->b_use, &r->b_store);
    if (scratch > w->e->scratch) w->e->scratch = scratch;
    if (r->in_grad) *g = dx;
    return MG_OK;
}

/* One op's VJP: g, the gradient of its output, becomes its input's. */
static int backward(walk *w, const op_record *r, mg_spec *g) {
    mg_candidates c;
    mg_spec t[3], out;
    int rc = MG_OK, nd = r->in_to.ndim;
    switch (r->layer->kind) {
    case MG_EST_LINEAR:
        if ((rc = backward_linear(w, r, g)) != MG_OK) return rc;
        break;
    case MG_EST_RELU: /* relu_backward(dy, x): Partial passes through dy */
        mg_rules_pointwise(&c, 2, (int[]){nd, nd}, (const int64_t *const[]){g->shape, g->shape}, nd,
                           g->shape, MG_LINEARITY_FIRST);
        if ((rc = choose(&c, 2, (const mg_spec *const[]){g, &r->in_to}, nd, g->shape, t, &out)))
            return rc;
        redistribute(w, g, &t[0], false);
        redistribute(w, &r->in_to, &t[1], false);
        made(w, &out, true, false);
        *g = out;
        break;
    case MG_EST_PERMUTE: {
        int inv[MG_MAX_DIMS];
        for (int i = 0; i < nd; i++) inv[r->layer->perm[i]] = i;
        mg_rules_permute(&c, nd, inv);
        if ((rc = choose(&c, 1, (const mg_spec *const[]){g}, nd, r->in_to.shape, t, &out)))
            return rc;
        redistribute(w, g, &t[0], false);
        made(w, &out, true, false);
        *g = out;
        break;
    }
    case MG_EST_RESHAPE: {
        mg_placement keep[MG_MAX_MESH_DIMS];
        bool ok[MG_MAX_MESH_DIMS];
        mg_rules_reshape(g, nd, r->in_to.shape, keep, ok);
        out = *g;
        for (int m = 0; m < w->mesh.ndim; m++)
            if (!ok[m]) out.p[m] = MG_REPLICATE;
        redistribute(w, g, &out, false);
        out.ndim = nd;
        memcpy(out.shape, r->in_to.shape, sizeof out.shape);
        for (int m = 0; m < w->mesh.ndim; m++) out.p[m] = ok[m] ? keep[m] : MG_REPLICATE;
        made(w, &out, false, false);
        *g = out;
        break;
    }
    case MG_EST_CROSS_ENTROPY: { /* dlogits at the logits' placements, from the loss's
                                  * gradient at the loss's (Partial made Replicate) */
        mg_spec gl = replicated(&r->out);
        redistribute(w, g, &gl, false);
        out = r->in_to;
        made(w, &out, true, false);
        *g = out;
        break;
    }
    }
    if (r->in_grad) mirror(w, r, g);
    return MG_OK;
}

/* ---- the step ------------------------------------------------------------------- */

/* gathered and scratch share one arena (context.h), at most one of them
 * large at a time: its high-water is the larger */
double mg_estimate_total(const mg_estimate *e) {
    return e->params + e->grads + e->optim + e->activations + fmax(e->gathered, e->scratch) +
           e->buffers;
}

int mg_estimate_step(const mg_est_layer *layers, int n, const mg_est_config *cfg, mg_estimate *e) {
    memset(e, 0, sizeof *e);
    if (n < 1 || n > MAX_LAYERS || layers[n - 1].kind != MG_EST_CROSS_ENTROPY)
        return mg_error(MG_EINVAL, "estimate: a model of 1 to %d layers ending in its loss",
                        MAX_LAYERS);
    walk *w = calloc(1, sizeof *w);
    if (!w) return mg_error(MG_ENOMEM, "estimate: out of memory");
    w->cfg = cfg;
    w->e = e;
    w->mesh.ndim = cfg->mesh_ndim;
    for (int m = 0; m < cfg->mesh_ndim; m++) w->mesh.shape[m] = cfg->mesh[m];
    int rc = cfg->plan.ndim == cfg->mesh_ndim
                 ? MG_OK
                 : mg_error(MG_EINVAL, "estimate: %d plans for a %d-d mesh: give one per mesh dim",
                            cfg->plan.ndim, cfg->mesh_ndim);
    /* the batch, as the loader makes it in the step arena: inputs and labels */
    mg_placement bp[MG_MAX_MESH_DIMS];
    mg_plan_batch(&cfg->plan, bp);
    int64_t shape[MG_MAX_DIMS] = {cfg->batch};
    for (int i = 0; i < cfg->sample_ndim; i++) shape[i + 1] = cfg->sample[i];
    mg_spec x, y;
    if (rc == MG_OK) rc = spec(w, &x, bp, 1 + cfg->sample_ndim, shape);
    if (rc == MG_OK) rc = spec(w, &y, bp, 1, shape);
    if (rc == MG_OK) {
        made(w, &x, true, false);
        made(w, &y, true, false);
        control(w, MG_COLL_ALL_REDUCE, 8); /* the loader's agreement */
    }
    bool grad = false; /* the input is data: no gradient until the first parameter */
    for (int i = 0; i < n && rc == MG_OK; i++) {
        op_record *r = &w->ops[i];
        r->layer = &layers[i];
        r->in_grad = grad;
        rc = forward(w, r, &x);
        grad |= layers[i].kind == MG_EST_LINEAR;
    }
    mg_spec g;
    if (rc == MG_OK) { /* the seed, d loss / d loss = 1, Replicate */
        mg_placement rep[MG_MAX_MESH_DIMS];
        for (int m = 0; m < cfg->mesh_ndim; m++) rep[m] = MG_REPLICATE;
        rc = spec(w, &g, rep, 0, NULL);
        if (rc == MG_OK) made(w, &g, true, false);
    }
    for (int i = n - 1; i >= 0 && rc == MG_OK; i--) {
        if (i < n - 1 && !w->ops[i + 1].in_grad) break; /* nothing below wants a gradient */
        rc = backward(w, &w->ops[i], &g);
    }
    if (rc == MG_OK) {
        mg_spec stores[2 * MAX_LAYERS];
        int ns = 0;
        for (int i = 0; i < n; i++)
            if (layers[i].kind == MG_EST_LINEAR) {
                stores[ns++] = w->ops[i].w_store;
                stores[ns++] = w->ops[i].b_store;
            }
        mg_est_finish(w, &w->ops[n - 1].out, stores, ns);
    }
    free(w);
    return rc;
}

/* The end of a step walked to its loss (spec `loss`), for the parameters
 * stored at stores[0..n): the backward's buckets, the loss read on rank 0,
 * train's control messages, the split optimizer steps, the checksum of
 * train's start, the arena's and staging's totals. */
void mg_est_finish(walk *w, const mg_spec *loss, const mg_spec *stores, int ns) {
    const mg_est_config *cfg = w->cfg;
    mg_estimate *e = w->e;
    buckets(w);
    mg_spec all = replicated(loss); /* the loss read on rank 0, each micro-batch's */
    for (int m = 0; m < cfg->mesh_ndim; m++) all.p[m] = MG_REPLICATE;
    double step = w->step;
    for (int64_t i = 0; i < (cfg->micro > 1 ? cfg->micro : 1); i++) moved(w, loss, &all);
    w->step = step;
    control(w, MG_COLL_ALL_REDUCE, 8 * 5); /* the per-step agreement of train.c */
    if (cfg->clip) control(w, MG_COLL_ALL_REDUCE, 8);
    split_steps(w, stores, ns);
    for (int i = 0; i < ns; i++) { /* the checksum of train's start gathers each parameter */
        mg_spec rep = replicated(&stores[i]), last_spec = stores[i];
        double last;
        for (int m = 0; m < cfg->mesh_ndim; m++) rep.p[m] = MG_REPLICATE;
        planned(w, &last_spec, &rep, false, &last);
    }
    e->activations = w->step;
    for (int k = 0; k < 2; k++) e->buffers += w->staging[k] > 0 ? ROUND64(4.0 * w->staging[k]) : 0;
}

/* ---- the walk's steps, for the GPT's walk (estimate_walk.h) ---------------------- */

void mg_est_made(walk *w, const mg_spec *s, bool data, bool node) { made(w, s, data, node); }
void mg_est_count(walk *w, mg_coll_kind kind, int size, int64_t n) { count(w, kind, size, n); }
void mg_est_redistribute(walk *w, const mg_spec *src, const mg_spec *dst, bool node) {
    redistribute(w, src, dst, node);
}
int mg_est_choose(const mg_candidates *c, int n, const mg_spec *const *in, int out_ndim,
                  const int64_t *out_shape, mg_spec *targets, mg_spec *out) {
    return choose(c, n, in, out_ndim, out_shape, targets, out);
}
int mg_est_spec(walk *w, mg_spec *s, const mg_placement *p, int ndim, const int64_t *shape) {
    return spec(w, s, p, ndim, shape);
}
mg_spec mg_est_replicated(const mg_spec *s) { return replicated(s); }
void mg_est_param_memory(walk *w, const mg_spec *store) { param_memory(w, store); }
double mg_est_gather(walk *w, const mg_spec *store, const mg_spec *use) { return gather(w, store, use); }
double mg_est_contribute(walk *w, const mg_spec *g, const mg_spec *use, const mg_spec *store) {
    return contribute(w, g, use, store);
}
void mg_est_control(walk *w, mg_coll_kind kind, int64_t bytes) { control(w, kind, bytes); }
int mg_est_forward(walk *w, op_record *r, mg_spec *x) { return forward(w, r, x); }
int mg_est_backward(walk *w, const op_record *r, mg_spec *g) { return backward(w, r, g); }

/* ---- the models of meshgrad train ------------------------------------------------ */

static mg_est_layer linear(int index, int64_t in, int64_t out) {
    return (mg_est_layer){.kind = MG_EST_LINEAR, .index = index, .in = in, .out = out};
}

int mg_est_layers_model(mg_model_kind kind, int64_t rows, int64_t cols, int64_t hidden,
                        int64_t channels, int64_t classes, int depth, mg_est_layer *out, int max) {
    /* model.h: layer i is Linear i with the ReLU after it (the last: none) */
    int pmlp = kind == MG_MODEL_PERMUTE_MLP, least = pmlp ? 3 : 2;
    if (depth == 0) depth = least;
    if (depth < least || depth > MG_MODEL_MAX_LAYERS)
        return mg_error(MG_EINVAL, "estimate: %s has %d to %d linear layers; --depth %d is out of "
                        "range", mg_model_kind_name(kind), least, MG_MODEL_MAX_LAYERS, depth);
    mg_est_layer l[MG_EST_MODEL_MAX_LAYERS];
    int n = 0;
    if (!pmlp) {
        l[n++] = (mg_est_layer){.kind = MG_EST_RESHAPE, .ndim = 2, .shape = {0, rows * cols}};
        l[n++] = linear(0, rows * cols, hidden);
    } else {
        l[n++] = (mg_est_layer){.kind = MG_EST_PERMUTE, .ndim = 3, .perm = {0, 2, 1}};
        l[n++] = linear(0, rows, channels);
        l[n++] = (mg_est_layer){.kind = MG_EST_RELU};
        l[n++] = (mg_est_layer){.kind = MG_EST_RESHAPE, .ndim = 2, .shape = {0, cols * channels}};
        l[n++] = linear(1, cols * channels, hidden);
    }
    for (int i = pmlp ? 2 : 1; i < depth; i++) { /* Linear(H, H), ..., Linear(H, K) */
        l[n++] = (mg_est_layer){.kind = MG_EST_RELU};
        l[n++] = linear(i, hidden, i == depth - 1 ? classes : hidden);
    }
    l[n++] = (mg_est_layer){.kind = MG_EST_CROSS_ENTROPY};
    if (n > max) return mg_error(MG_EINVAL, "estimate: %d layers, room for %d", n, max);
    memcpy(out, l, (size_t)n * sizeof *l);
    return n;
}
