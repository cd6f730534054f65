/* trainer_pp.c: a training run of the MLPs with pp in its plan (see
 * trainer_pp.h). */
#include "train/trainer_pp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "context.h"
#include "dist/mesh.h"
#include "machine.h"
#include "nn/pipeline.h"
#include "nn/pipeline_exec.h"
#include "status.h"

struct mg_train_pp {
    mg_pipeline p;
    mg_model *model;
    mg_pp_exec *train, *eval;
    mg_pp_schedule eval_schedule;
    int64_t *eval_rows;
    /* the batch of the step running: host copies of x and y, its micro-batches */
    float *x, *y;
    size_t cap_x, cap_y;
    int64_t batch, starts[MG_PP_MAX_MICROBATCHES];
    const int64_t *rows;
    int64_t correct; /* evaluation: right predictions so far */
    int evaluating;
};

void mg_train_pp_memory(mg_pp_options *o, int states) {
    o->machine_bytes = mg_machine_memory_bytes();
    o->node_ranks = mg_ctx()->node_ranks > 0 ? mg_ctx()->node_ranks : 1;
    o->param_copies = 2 + states;
}

int mg_train_pp_options(const mg_train_config *c, mg_pp_options *o) {
    mg_pp_options_defaults(o);
    mg_train_pp_memory(o, c->optimizer == MG_OPTIM_ADAMW ? 2 : c->momentum != 0 ? 1 : 0);
    int rc = mg_pp_kind_parse(c->pp_schedule, &o->kind);
    if (rc != MG_OK) return rc;
    if (c->microbatches > MG_PP_MAX_MICROBATCHES)
        return mg_error(MG_EINVAL, "--microbatches %lld: at most %d", (long long)c->microbatches,
                        MG_PP_MAX_MICROBATCHES);
    if (c->virtual_stages > MG_PP_MAX_STAGES)
        return mg_error(MG_EINVAL, "--virtual-stages %lld: at most %d",
                        (long long)c->virtual_stages, MG_PP_MAX_STAGES);
    o->microbatches = (int)c->microbatches;
    o->virtual_stages = (int)c->virtual_stages;
    int64_t list[MG_PP_LIST_MAX];
    if (c->pp_layers[0]) {
        int n = mg_pp_int_list("--pp-layers", c->pp_layers, list, MG_PP_LIST_MAX, 0);
        if (n < 0) return n;
        for (int i = 0; i < n; i++) o->layers[i] = (int)list[i];
        o->nlayers = n;
    }
    if (c->microbatch_rows[0]) {
        int n = mg_pp_int_list("--microbatch-rows", c->microbatch_rows, o->rows, MG_PP_LIST_MAX, 1);
        if (n < 0) return n;
        o->nrows = n;
    }
    return MG_OK;
}

void mg_train_pp_free(mg_train_pp *t) {
    if (!t) return;
    mg_pp_exec_free(t->train);
    mg_pp_exec_free(t->eval);
    mg_pp_schedule_free(&t->eval_schedule);
    free(t->eval_rows);
    free(t->x);
    free(t->y);
    mg_pipeline_free(&t->p);
    free(t);
}

int mg_train_pp_new(mg_train_pp **out, const mg_train_config *c, const mg_mesh *mesh,
                    const mg_plan *plan, const mg_model_config *mc, int64_t test_rows,
                    mg_model *model) {
    *out = NULL;
    mg_pp_options *o = malloc(sizeof *o);
    mg_train_pp *t = calloc(1, sizeof *t);
    mg_layer_cost costs[MG_MODEL_MAX_LAYERS];
    unsigned char held[MG_MODEL_MAX_LAYERS] = {0};
    int rc = !o || !t ? mg_error(MG_ENOMEM, "train: out of memory") : mg_train_pp_options(c, o);
    if (rc == MG_OK && mesh->meta) o->machine_bytes = 0; /* a plan, not this machine's run */
    /* the layers' shapes and costs, no parameters yet */
    if (rc == MG_OK) rc = mg_model_build(model, mc, mesh, plan, held);
    if (rc == MG_OK) rc = mg_model_layer_costs(model, costs);
    int nlayers = model->nlayers;
    mg_model_free(model);
    if (rc == MG_OK) rc = mg_pipeline_make(&t->p, mesh, plan, o, costs, nlayers, c->batch);
    free(o);
    if (rc != MG_OK) {
        mg_train_pp_free(t);
        return rc;
    }
    mg_pipeline *p = &t->p;
    for (int i = 0; i < nlayers; i++) held[i] = mg_pipeline_holds(p, i);
    rc = mg_model_build(model, mc, p->stage_mesh, &p->stage_plan, held);
    if (rc == MG_OK) {
        model->mesh = mesh; /* checkpoints name the whole mesh */
        t->model = model;
        t->train = mg_pp_exec_new(&p->schedule, p->rank, p->comm, p->stage_mesh);
        if (!t->train) rc = mg_last_code();
    }
    /* evaluation: chunks of the test split in `ranks` micro-batches, the same
     * schedule (the split checked to make them) */
    int m = p->ranks;
    if (rc == MG_OK && !(t->eval_rows = calloc((size_t)m, sizeof *t->eval_rows)))
        rc = mg_error(MG_ENOMEM, "train: out of memory");
    if (rc == MG_OK) rc = mg_pp_microbatch_rows(test_rows, m, t->eval_rows);
    if (rc == MG_OK)
        rc = mg_pp_schedule_make(&t->eval_schedule, p->schedule.kind, p->ranks,
                                 p->schedule.virtual_stages, m);
    if (rc == MG_OK &&
        !(t->eval = mg_pp_exec_new(&t->eval_schedule, p->rank, p->comm, p->stage_mesh)))
        rc = mg_last_code();
    if (rc == MG_OK) rc = mg_pp_exec_share_arenas(t->eval, t->train); /* one's memory, not both's */
    if (rc != MG_OK) {
        mg_train_pp_free(t);
        return rc;
    }
    *out = t;
    return MG_OK;
}

/* ---- the stages ------------------------------------------------------------- */

/* Labels (rows of y): how many of the logits' argmaxes match. */
static int count_correct(mg_train_pp *t, const mg_dtensor *logits, int64_t start) {
    mg_tensor *lf = mg_full_tensor(logits);
    if (!lf) return mg_last_code() ? mg_last_code() : MG_ENOMEM;
    // lf: (N, K) logits
    int64_t n = mg_tensor_shape(lf)[0], K = mg_tensor_shape(lf)[1];
    for (int64_t i = 0; i < n; i++) {
        const float *row = mg_tensor_data(lf) + i * K;
        int64_t best = 0;
        for (int64_t k = 1; k < K; k++)
            if (row[k] > row[best]) best = k;
        t->correct += (float)best == t->y[start + i];
    }
    mg_tensor_free(lf);
    return MG_OK;
}

static mg_dtensor *stage_forward(void *ctx, int stage, int mb, mg_dtensor *x) {
    mg_train_pp *t = ctx;
    const mg_pipeline *p = &t->p;
    const int64_t R = t->model->sample_shape[0], C = t->model->sample_shape[1];
    int64_t r = t->rows[mb], start = t->starts[mb];
    if (stage == 0 && !(x = mg_pipeline_rows(p, t->x, start, 3, (int64_t[]){r, R, C})))
        return NULL;
    mg_dtensor *out = mg_model_forward_layers(t->model, mg_pipeline_stage_first(p, stage),
                                              mg_pipeline_stage_first(p, stage + 1), x);
    if (!out || stage + 1 < p->split.stages) return out;
    // out: (r, K) logits; the loss is this micro-batch's share of the batch's mean
    mg_dtensor *labels = mg_pipeline_rows(p, t->y, start, 1, (int64_t[]){r});
    mg_dtensor *loss = labels ? mg_cross_entropy(out, labels) : NULL;
    if (loss) loss = mg_scale(loss, (float)((double)r / (double)t->batch));
    if (loss && t->evaluating && count_correct(t, out, start) != MG_OK) return NULL;
    return loss;
}

/* reduce-grad: the stage's gradients, as the optimizer will read them. */
static int stage_reduce(void *ctx, int stage) {
    mg_train_pp *t = ctx;
    const mg_pipeline *p = &t->p;
    for (int k = 2 * mg_pipeline_stage_first(p, stage); k < 2 * mg_pipeline_stage_first(p, stage + 1);
         k++) {
        mg_param *pr = mg_model_param(t->model, k, NULL);
        if (!pr) return mg_error(MG_ESTATE, "train: stage %d's parameter %d is not here", stage, k);
        pr->grad = mg_param_grad_in_parts(pr) ? pr->value->grad : mg_grad(pr->value);
    }
    return MG_OK;
}

/* Host copies of the batch (its rows start where the micro-batches say). */
static int take_batch(mg_train_pp *t, const mg_dtensor *x, const mg_dtensor *y,
                      const int64_t *rows, int m) {
    const mg_tensor *lx = mg_local(x), *ly = mg_local(y);
    size_t nx = (size_t)lx->numel, ny = (size_t)ly->numel;
    if (nx > t->cap_x) {
        free(t->x);
        if (!(t->x = malloc(nx * sizeof(float)))) return mg_error(MG_ENOMEM, "train: out of memory");
        t->cap_x = nx;
    }
    if (ny > t->cap_y) {
        free(t->y);
        if (!(t->y = malloc(ny * sizeof(float)))) return mg_error(MG_ENOMEM, "train: out of memory");
        t->cap_y = ny;
    }
    mg_backend *be = mg_backend_of(lx);
    be->iface->to_host(be->context, t->x, lx->data, lx->numel);
    be->iface->to_host(be->context, t->y, ly->data, ly->numel);
    t->batch = mg_dtensor_shape(y)[0];
    t->rows = rows;
    for (int i = 0, a = 0; i < m; a += (int)rows[i], i++) t->starts[i] = a;
    t->correct = 0;
    return MG_OK;
}

int mg_train_pp_step(mg_train_pp *t, const mg_dtensor *x, const mg_dtensor *y, double *loss) {
    mg_pipeline *p = &t->p;
    mg_pp_stage_fns fns = {t, stage_forward, stage_reduce};
    mg_pp_exec_stats st;
    t->evaluating = 0;
    int rc = take_batch(t, x, y, p->rows, p->microbatches);
    if (rc == MG_OK) rc = mg_pp_exec_step(t->train, &fns, &st);
    double sum = rc == MG_OK ? mg_pipeline_step_loss(st.loss) : 0;
    if (rc == MG_OK) rc = mg_pipeline_sum(p, &sum, 1); /* the stages' losses add up */
    *loss = sum;
    return rc;
}

int mg_train_pp_update(mg_train_pp *t, mg_optimizer *opt, double lr, double clip, double *norm) {
    return mg_pipeline_update(&t->p, &t->model->params, NULL, opt, lr, clip, norm);
}

const mg_pipeline *mg_train_pp_pipeline(const mg_train_pp *t) { return &t->p; }

int mg_train_pp_evaluate(mg_train_pp *t, const mg_dtensor *x, const mg_dtensor *y, double *loss,
                         int64_t *correct) {
    mg_pp_stage_fns fns = {t, stage_forward, stage_reduce};
    mg_pp_exec_stats st;
    int m = t->eval_schedule.microbatches;
    int rc = mg_pp_microbatch_rows(mg_dtensor_shape(y)[0], m, t->eval_rows);
    t->evaluating = 1;
    if (rc == MG_OK) rc = take_batch(t, x, y, t->eval_rows, m);
    if (rc == MG_OK) rc = mg_pp_exec_forward(t->eval, &fns, &st);
    t->evaluating = 0;
    double sums[2] = {rc == MG_OK ? st.loss : 0, (double)t->correct};
    if (rc == MG_OK) rc = mg_pipeline_sum(&t->p, sums, 2);
    *loss = sums[0];
    *correct += (int64_t)llround(sums[1]);
    return rc;
}

/* Stage s's parameters continue the hash (they are consecutive in the table). */
static int hash_stage(void *ctx, int s, uint64_t *h) {
    mg_train_pp *t = ctx;
    int first = mg_pipeline_stage_first(&t->p, s), last = mg_pipeline_stage_first(&t->p, s + 1);
    return mg_params_checksum_more(&t->model->params, t->model->layer[first].weight,
                                   2 * (last - first), h);
}

int mg_train_pp_checksum(mg_train_pp *t, uint64_t *out) {
    return mg_pipeline_checksum(&t->p, hash_stage, t, out);
}
