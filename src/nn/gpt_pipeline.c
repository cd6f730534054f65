/* gpt_pipeline.c: a language model (the GPT or the Llama, model.h) cut into
 * pipeline stages, its tied embedding summed between the first and last
 * stage (see gpt_pipeline.h). */
#include "nn/gpt_pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "context.h"
#include "dist/mesh.h"
#include "nn/pipeline_exec.h"
#include "ops/ops.h"
#include "status.h"

struct mg_gpt_pp {
    mg_pipeline p;
    mg_model *model;
    mg_mesh_pair tied; /* the first and last stage's ranks: wte's gradient sum */
    mg_pp_exec *train, *eval;
    mg_pp_schedule eval_schedule;
    /* the windows of the step running and their micro-batches */
    const float *ids, *targets;
    int64_t T, windows, starts[MG_PP_MAX_MICROBATCHES], eval_rows[MG_PP_MAX_MICROBATCHES];
    const int64_t *rows;
};

const mg_pipeline *mg_gpt_pp_pipeline(const mg_gpt_pp *t) { return &t->p; }

void mg_gpt_pp_free(mg_gpt_pp *t) {
    if (!t) return;
    mg_pp_exec_free(t->train);
    mg_pp_exec_free(t->eval);
    mg_pp_schedule_free(&t->eval_schedule);
    mg_mesh_pair_free(&t->tied);
    mg_pipeline_free(&t->p);
    free(t);
}

/* The head is the embedding (the GPT's always, the Llama's unless untied). */
static int tied_head(const mg_model *m) { return m->kind == MG_MODEL_GPT || m->llama.cfg.tied; }

int mg_gpt_pp_new(mg_gpt_pp **out, const mg_mesh *mesh, const mg_plan *plan,
                  const mg_pp_options *o, const mg_gpt_config *cfg, uint64_t seed, int64_t batch,
                  mg_model *model) {
    mg_lm_config c = {.kind = MG_MODEL_GPT, .gpt = *cfg};
    return mg_lm_pp_new(out, mesh, plan, o, &c, seed, batch, model);
}

int mg_lm_pp_new(mg_gpt_pp **out, const mg_mesh *mesh, const mg_plan *plan,
                 const mg_pp_options *o, const mg_lm_config *cfg, uint64_t seed, int64_t batch,
                 mg_model *model) {
    *out = NULL;
    const int n = (int)mg_lm_layers(cfg) + 2;
    mg_gpt_pp *t = calloc(1, sizeof *t);
    mg_layer_cost *costs = calloc((size_t)n, sizeof *costs);
    unsigned char *held = calloc((size_t)n, 1);
    int rc = !t || !costs || !held ? mg_error(MG_ENOMEM, "pipeline: out of memory") : MG_OK;
    if (rc == MG_OK) t->tied.mpi = MPI_COMM_NULL;
    if (rc == MG_OK) rc = mg_lm_check(cfg, plan, mesh);
    if (rc == MG_OK) rc = mg_lm_layer_costs(cfg, costs);
    if (rc == MG_OK) rc = mg_pipeline_make(&t->p, mesh, plan, o, costs, n, batch);
    mg_pipeline *p = t ? &t->p : NULL;
    for (int i = 0; rc == MG_OK && i < n; i++) held[i] = mg_pipeline_holds(p, i);
    if (rc == MG_OK)
        rc = mg_model_build_lm(model, p->stage_mesh, &p->stage_plan, cfg, seed, held);
    if (rc == MG_OK) {
        model->mesh = mesh; /* checkpoints name the whole mesh */
        t->model = model;
        t->T = mg_lm_ctx(cfg);
        if (p->ranks > 1 && tied_head(model))
            rc = mg_mesh_pair_new(&t->tied, mesh, p->dim, 0, p->ranks - 1);
    }
    if (rc == MG_OK && !(t->train = mg_pp_exec_new(&p->schedule, p->rank, p->comm, p->stage_mesh)))
        rc = mg_last_code();
    /* evaluation: `ranks` micro-batches on the same schedule, forwards only */
    if (rc == MG_OK)
        rc = mg_pp_schedule_make(&t->eval_schedule, p->schedule.kind, p->ranks,
                                 p->schedule.virtual_stages, p->ranks);
    if (rc == MG_OK &&
        !(t->eval = mg_pp_exec_new(&t->eval_schedule, p->rank, p->comm, p->stage_mesh)))
        rc = mg_last_code();
    if (rc == MG_OK) rc = mg_pp_exec_share_arenas(t->eval, t->train); /* one's memory, not both's */
    free(costs);
    free(held);
    if (rc != MG_OK) {
        if (t && t->model) mg_model_free(model);
        mg_gpt_pp_free(t);
        return rc;
    }
    *out = t;
    return MG_OK;
}

/* ---- the stages --------------------------------------------------------------- */

/* Micro-batch mb's rows of a (windows, T) host array, on the stage mesh at the
 * batch's placements (rows over dp and fsdp, positions over sp). */
static mg_dtensor *tokens(mg_gpt_pp *t, const float *data, int mb) {
    const mg_pipeline *p = &t->p;
    const mg_mesh *m = p->stage_mesh;
    int64_t shape[2] = {t->rows[mb], t->T};
    mg_placement rep[MG_MAX_MESH_DIMS], bp[MG_MAX_MESH_DIMS];
    for (int d = 0; d < m->ndim; d++) rep[d] = MG_REPLICATE;
    mg_plan_batch(&p->stage_plan, bp);
    mg_spec whole, spec;
    if (mg_spec_make(&whole, m, rep, m->ndim, 2, shape, "micro-batch tokens") != MG_OK ||
        mg_spec_make(&spec, m, bp, m->ndim, 2, shape, "micro-batch tokens") != MG_OK)
        return NULL;
    mg_tensor *x = mg_tensor_alloc(mg_step_arena(), 2, shape);
    if (!x) return NULL;
    mg_backend *be = mg_backend_of(x);
    if (x->numel > 0) be->iface->from_host(be->context, x->data, data + t->starts[mb] * t->T, x->numel);
    mg_dtensor *d = mg_dtensor_make(&whole, x, mg_step_arena());
    return d ? mg_op_redistribute(d, &spec) : NULL; /* each rank keeps its part */
}

static mg_dtensor *stage_forward(void *ctx, int stage, int mb, mg_dtensor *x) {
    mg_gpt_pp *t = ctx;
    const mg_pipeline *p = &t->p;
    if (stage == 0 && !(x = tokens(t, t->ids, mb))) return NULL;
    mg_dtensor *out = mg_model_forward_layers(t->model, mg_pipeline_stage_first(p, stage),
                                              mg_pipeline_stage_first(p, stage + 1), x);
    if (!out || stage + 1 < p->split.stages) return out;
    // out: (rows, T, V) logits; the loss is this micro-batch's share of the batch's mean
    mg_dtensor *y = tokens(t, t->targets, mb);
    mg_dtensor *loss = y ? mg_cross_entropy(out, y) : NULL;
    return loss ? mg_scale(loss, (float)((double)t->rows[mb] / (double)t->windows)) : NULL;
}

static void take_grad(mg_param *pr) {
    pr->grad = mg_param_grad_in_parts(pr) ? pr->value->grad : mg_grad(pr->value);
}

/* reduce-grad: the stage's gradients, as the optimizer will read them (the
 * last stage's: the wte copy's too). */
static int stage_reduce(void *ctx, int stage) {
    mg_gpt_pp *t = ctx;
    const mg_pipeline *p = &t->p;
    int first = mg_model_layer_param(t->model, mg_pipeline_stage_first(p, stage)),
        last = mg_model_layer_param(t->model, mg_pipeline_stage_first(p, stage + 1));
    for (int k = first; k < last; k++) {
        mg_param *pr = mg_model_param(t->model, k, NULL);
        if (!pr) return mg_error(MG_ESTATE, "pipeline: stage %d's parameter %d is not here", stage, k);
        take_grad(pr);
    }
    int copy = mg_model_embedding_copy(t->model);
    if (stage + 1 == p->split.stages && copy >= 0) take_grad(&t->model->params.p[copy]);
    return MG_OK;
}

/* The tied embedding (wte, tok_embeddings): the embedding's gradient (first
 * stage) plus the head's (last), whole on each side (a split optimizer's
 * parts summed first), one all-reduce between the two: both sides then hold
 * the same sum, bit for bit. */
static int sum_tied(mg_gpt_pp *t) {
    if (!t->tied.comm) return MG_OK;
    mg_param *pr = mg_model_param(t->model, 0, NULL); /* the embedding, or the head's copy */
    if (!pr || !(pr->grad = mg_grad(pr->value)))
        return mg_error(MG_ESTATE, "pipeline: the tied embedding has no gradient after the step");
    mg_tensor *g = pr->grad->local;
    return mg_comm_all_reduce(t->tied.comm, g->data, g->numel, MG_REDUCE_SUM);
}

int mg_gpt_pp_step(mg_gpt_pp *t, const float *ids, const float *targets, double *loss) {
    mg_pipeline *p = &t->p;
    mg_pp_stage_fns fns = {t, stage_forward, stage_reduce};
    mg_pp_exec_stats st;
    t->ids = ids;
    t->targets = targets;
    t->rows = p->rows;
    t->windows = 0;
    for (int i = 0; i < p->microbatches; i++) {
        t->starts[i] = t->windows;
        t->windows += p->rows[i];
    }
    int rc = mg_pp_exec_step(t->train, &fns, &st);
    if (rc == MG_OK) rc = sum_tied(t);
    double sum = rc == MG_OK ? mg_pipeline_step_loss(st.loss) : 0;
    if (rc == MG_OK) rc = mg_pipeline_sum(p, &sum, 1); /* the stages' losses add up */
    *loss = sum;
    return rc;
}

int mg_gpt_pp_update(mg_gpt_pp *t, mg_optimizer *opt, double lr, double clip, double *norm) {
    mg_param_table *params = &t->model->params, own = *params;
    if (mg_model_embedding_copy(t->model) >= 0) { /* the copy (the table's first entry) counts on the first stage */
        own.p++;
        own.n--;
    }
    return mg_pipeline_update(&t->p, params, &own, opt, lr, clip, norm);
}

int mg_gpt_pp_loss(mg_gpt_pp *t, const float *ids, const float *targets, int64_t n, double *loss) {
    const mg_pipeline *p = &t->p;
    int m = t->eval_schedule.microbatches;
    if (n < (int64_t)m * p->data_degree)
        return mg_error(MG_EINVAL, "pipeline: %lld windows cannot make %d micro-batches of at "
                        "least %d (the data-parallel degree) each", (long long)n, m,
                        p->data_degree);
    t->ids = ids;
    t->targets = targets;
    t->windows = n;
    for (int i = 0, a = 0; i < m; a += (int)t->eval_rows[i], i++) { /* sizes differ by one at most */
        t->eval_rows[i] = n / m + (i < n % m);
        t->starts[i] = a;
    }
    t->rows = t->eval_rows;
    mg_pp_stage_fns fns = {t, stage_forward, stage_reduce};
    mg_pp_exec_stats st;
    int rc = mg_pp_exec_forward(t->eval, &fns, &st);
    double sum = rc == MG_OK ? st.loss : 0;
    if (rc == MG_OK) rc = mg_pipeline_sum(p, &sum, 1);
    *loss = sum;
    return rc;
}

/* Stage s's parameters continue the hash, in the whole model's order. */
static int hash_stage(void *ctx, int s, uint64_t *h) {
    mg_gpt_pp *t = ctx;
    int first = mg_model_layer_param(t->model, mg_pipeline_stage_first(&t->p, s)),
        last = mg_model_layer_param(t->model, mg_pipeline_stage_first(&t->p, s + 1));
    int rc = MG_OK;
    for (int k = first; k < last && rc == MG_OK; k++) {
        mg_param *p = mg_model_param(t->model, k, NULL);
        rc = p ? mg_params_checksum_more(&t->model->params, (int)(p - t->model->params.p), 1, h)
               : mg_error(MG_ESTATE, "pipeline: stage %d's parameter %d is not here", s, k);
    }
    return rc;
}

int mg_gpt_pp_checksum(mg_gpt_pp *t, uint64_t *out) {
    return mg_pipeline_checksum(&t->p, hash_stage, t, out);
}
