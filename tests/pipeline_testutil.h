/* pipeline_testutil.h: what the MPI suites of pipelines (test_pipeline_exec.c,
 * test_gpt_pipeline.c) share, each checking a pipeline against the run it
 * replaces:
 * - mg_test_pp_config and mg_test_pp_start: one configuration (mesh shape,
 *   plan, schedule, virtual stages, micro-batches, a --microbatch-rows or a
 *   --pp-layers list) made into its mesh, plan and mg_pp_options;
 *   mg_test_pp_meshes: the meshes a suite runs on; mg_test_pp_schedule: one
 *   of them with a schedule;
 * - mg_test_accumulate: the reference, gradient accumulation over the same
 *   micro-batches (sums off but for the last);
 * - mg_test_pp_grads and mg_test_grad_diff: a parameter's gradients in a
 *   stage and in the reference, and how far apart they are;
 * - mg_test_max_all: the largest of every rank's value. */
#ifndef MG_PIPELINE_TESTUTIL_H
#define MG_PIPELINE_TESTUTIL_H

#include <math.h>

#include "dist/mesh.h"
#include "nn/model.h"
#include "nn/pipeline.h"
#include "status.h"
#include "testutil.h"

typedef struct {
    int ndim, shape[3];
    const char *plan;
    mg_pp_kind kind;
    int v, m;             /* virtual stages, micro-batches */
    const int64_t *rows;  /* NULL: the batch in m micro-batches */
    int nrows;
    const int *layers;    /* NULL: stages balanced by cost */
    int nlayers;
} mg_test_pp_config;

/* The meshes and plans a suite runs its pipelines on: pp over every rank,
 * and on 4 ranks each of `plans` (NULL-ended) on 2x2. Returns how many it
 * wrote to out (room for one more than the plans). */
static inline int mg_test_pp_meshes(mg_test_pp_config *out, const char *const *plans) {
    int w = mg_world_size(), n = 0;
    out[n++] = (mg_test_pp_config){.ndim = 1, .shape = {w}, .plan = "pp"};
    for (int i = 0; w == 4 && plans[i]; i++)
        out[n++] = (mg_test_pp_config){.ndim = 2, .shape = {2, 2}, .plan = plans[i]};
    return n;
}

/* Mesh configuration c with schedule k: 2 virtual stages for interleaved-1f1b,
 * else 1. */
static inline mg_test_pp_config mg_test_pp_schedule(const mg_test_pp_config *c, int k) {
    mg_test_pp_config s = *c;
    s.kind = (mg_pp_kind)k;
    s.v = k == MG_PP_INTERLEAVED_1F1B ? 2 : 1;
    return s;
}

/* The mesh, plan and options of c: 1, or 0 with the reason in msg (nothing
 * left to free). */
static inline int mg_test_pp_start(const mg_test_pp_config *c, mg_mesh **mesh, mg_plan *plan,
                                   mg_pp_options *o, char *msg, size_t len) {
    mg_pp_options_defaults(o);
    o->kind = c->kind;
    o->virtual_stages = c->v;
    o->microbatches = c->rows ? 0 : c->m;
    for (int i = 0; i < c->nrows; i++) o->rows[i] = c->rows[i];
    o->nrows = c->nrows;
    for (int i = 0; i < c->nlayers; i++) o->layers[i] = c->layers[i];
    o->nlayers = c->nlayers;
    *mesh = mg_mesh_new(c->ndim, c->shape);
    if (*mesh && mg_plan_parse(c->plan, plan) == MG_OK) return 1;
    snprintf(msg, len, "%s: %s", c->plan, mg_last_error());
    mg_mesh_free(*mesh);
    *mesh = NULL;
    return 0;
}

/* The gradient accumulation a pipeline replaces: for micro-batch mb of m,
 * loss_of(ctx, mb) and its backward, the sums synchronized after the last
 * only; *loss the sum of the losses. 1, or 0 on failure. */
static inline int mg_test_accumulate(int m, mg_dtensor *(*loss_of)(void *ctx, int mb), void *ctx,
                                     double *loss) {
    *loss = 0;
    for (int mb = 0; mb < m; mb++) {
        mg_set_grad_sync(mb == m - 1);
        mg_dtensor *l = loss_of(ctx, mb);
        if (!l || mg_backward(l) != MG_OK) return 0;
        mg_tensor *v = mg_full_tensor(l);
        *loss += mg_tensor_data(v)[0];
        mg_tensor_free(v);
    }
    mg_set_grad_sync(1);
    return 1;
}

/* Parameter k's gradients in a stage's model (*ga) and in the reference's
 * (*gb): 1; 0 when the stage does not hold k; -1, the reason in msg, when
 * either has none. */
static inline int mg_test_pp_grads(mg_model *stage, mg_model *ref, int k, mg_dtensor **ga,
                                   mg_dtensor **gb, char *msg, size_t len) {
    mg_param *pp = mg_model_param(stage, k, NULL), *pr = mg_model_param(ref, k, NULL);
    if (!pp) return 0;
    *ga = mg_grad(pp->value), *gb = mg_grad(pr->value);
    if (*ga && *gb) return 1;
    snprintf(msg, len, "parameter %d has no gradient (%s)", k, mg_last_error());
    return -1;
}

/* How far gradient a is from the reference b (full tensors): the largest
 * relative difference of an element (below 1e-6, b's elements count as
 * 1e-6), the largest difference over b's largest element, and whether every
 * element is bitwise equal. */
typedef struct {
    double per_element, of_largest;
    int bitwise;
} mg_test_diff;

static inline mg_test_diff mg_test_grad_diff(const mg_dtensor *a, const mg_dtensor *b) {
    mg_tensor *x = mg_full_tensor(a), *y = mg_full_tensor(b);
    mg_test_diff d = {0, 0, 1};
    double diff = 0, big = 0;
    for (int64_t i = 0; i < mg_tensor_numel(x); i++) {
        float u = mg_tensor_data(x)[i], v = mg_tensor_data(y)[i];
        if (u != v) d.bitwise = 0;
        double e = fabs((double)u - v);
        d.per_element = fmax(d.per_element, e / (fabs((double)v) > 1e-6 ? fabs((double)v) : 1e-6));
        diff = fmax(diff, e);
        big = fmax(big, fabs((double)v));
    }
    d.of_largest = diff / fmax(big, 1e-30);
    mg_tensor_free(x);
    mg_tensor_free(y);
    return d;
}

/* The largest of every rank's v. */
static inline double mg_test_max_all(double v) {
    double all = v;
    MPI_Allreduce(&v, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return all;
}

#endif
