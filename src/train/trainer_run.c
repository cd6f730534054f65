/* trainer_run.c: a training run (meshgrad_train.h's mg_trainer, trainer.h)
 * built from a config (mesh, plan, data set, model, optimizer, schedule), then
 * one step a call:
 *   batch -> forward -> loss -> backward (each micro-batch; the pipeline's
 *   schedule with pp) -> agree -> clip -> optimizer step -> zero grads ->
 *   mg_step_end()
 * After the backward the ranks agree, in one small all-reduce over the mesh,
 * on a non-finite loss or gradient (the step is refused before the update,
 * naming the first parameter whose gradient is not finite, or skipped and
 * counted) and on the caller's own values (mg_train_step's agree[]: a stop
 * signal, a failed write of its log), so every rank takes the same way.
 * It stands above the models' sides (trainer_text.c, trainer_pp.c,
 * trainer_eval.c) and below the estimate (estimate.c), which builds runs of
 * its own: the memory check it takes before the model is built is given by
 * the caller (mg_trainer_fits_fn).
 * Exports mg_trainer_build, mg_trainer_mesh_new (trainer.h) and
 * meshgrad_train.h's mg_trainer_step and mg_trainer_evaluate. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/device.h"
#include "context.h"
#include "dist/comm.h"
#include "dist/flight.h"
#include "dist/reducer.h"
#include "dist/redistribute.h"
#include "machine.h"
#include "nn/gpt_pipeline.h"
#include "ops/ops_state.h"
#include "status.h"
#include "trace.h"
#include "train/trainer.h"
#include "train/trainer_pp.h"

/* ---- building the run ------------------------------------------------------------- */

/* A model whose parameters, gradients and optimizer state could not fit this
 * machine's memory even split evenly over every rank is refused before it is
 * made (one label of 16777215 in a data set asks for 16.7M classes: tens of
 * GB, and the kernel would kill the job while it fills them). */
static int check_fits(const mg_trainer *tr, const mg_model_config *mc, int64_t ntest) {
    mg_trainer_meta_data d = {.rows = mc->rows, .cols = mc->cols, .classes = mc->classes,
                              .train_rows = tr->cfg.batch, .test_rows = ntest};
    char fix[sizeof tr->cfg.data + 160];
    snprintf(fix, sizeof fix, "make the model smaller (--hidden, --depth) or the --batch, or check "
             "the labels of %s (%lld classes)", tr->cfg.data, (long long)mc->classes);
    return tr->fits(&tr->cfg, tr->mesh, &d, mg_model_config_params(mc), fix);
}

/* Opens the test split when the data set has one (else a warning: nothing
 * is evaluated) and checks its samples have the train split's shape. */
static int open_test_split(mg_trainer *tr) {
    mg_train_config *c = &tr->cfg;
    int has = mg_dataset_has_split(c->data, "test", tr->mesh->world);
    if (has < 0) return has;
    if (!has) {
        if (tr->rank == 0)
            fprintf(stderr, "warning: %s has no test split (/test): the run evaluates nothing\n",
                    c->data);
        return MG_OK;
    }
    tr->test = mg_dataset_open(c->data, "test", tr->mesh->world);
    if (!tr->test) return mg_last_code();
    char want[128], have[128];
    int n = mg_dataset_sample_ndim(tr->train);
    if (!mg_shape_equal(mg_dataset_sample_ndim(tr->test), mg_dataset_sample_shape(tr->test), n,
                        mg_dataset_sample_shape(tr->train)))
        return mg_error(MG_EFORMAT, "%s: the test split holds samples of shape %s but the train "
                        "split %s: both splits need one sample shape", c->data,
                        mg_shape_format(have, sizeof have, mg_dataset_sample_ndim(tr->test),
                                        mg_dataset_sample_shape(tr->test)),
                        mg_shape_format(want, sizeof want, n, mg_dataset_sample_shape(tr->train)));
    int64_t ntest = mg_dataset_rows(tr->test);
    if (ntest < mg_plan_data_degree(&tr->plan, tr->mesh))
        return mg_error(MG_EINVAL, "the test split of %s has %lld rows, fewer than the data-parallel "
                                   "degree %d", c->data, (long long)ntest,
                        mg_plan_data_degree(&tr->plan, tr->mesh));
    return MG_OK;
}

/* The MLPs' data set: its splits (or, meta, their shapes), the sample shape,
 * the classes, and the rows of the test split. */
static int open_images(mg_trainer *tr, int64_t sample[2], int *classes, int64_t *ntest) {
    mg_train_config *c = &tr->cfg;
    if (tr->meta) {
        sample[0] = tr->shapes.rows;
        sample[1] = tr->shapes.cols;
        *classes = (int)tr->shapes.classes;
        *ntest = tr->shapes.test_rows;
        return MG_OK;
    }
    tr->train = mg_dataset_open(c->data, "train", tr->mesh->world);
    if (!tr->train) return mg_last_code();
    if (mg_dataset_sample_ndim(tr->train) != 2)
        return mg_error(MG_EFORMAT, "%s: the models take (rows, cols) images but samples are %d-d",
                        c->data, mg_dataset_sample_ndim(tr->train));
    int rc = open_test_split(tr);
    if (rc != MG_OK) return rc;
    memcpy(sample, mg_dataset_sample_shape(tr->train), 2 * sizeof *sample);
    if (c->batch > mg_dataset_rows(tr->train))
        return mg_error(MG_EINVAL, "batch %lld is larger than the %lld training rows of %s",
                        (long long)c->batch, (long long)mg_dataset_rows(tr->train), c->data);
    *classes = mg_dataset_num_classes(tr->train);
    if (tr->test && mg_dataset_num_classes(tr->test) > *classes)
        *classes = mg_dataset_num_classes(tr->test);
    *ntest = tr->test ? mg_dataset_rows(tr->test) : 0;
    return MG_OK;
}

/* The MLP or permute-MLP of the run, its loaders and batch specs. */
static int image_setup(mg_trainer *tr) {
    mg_train_config *c = &tr->cfg;
    int64_t sample[2], ntest = 0;
    int classes = 0;
    int rc = open_images(tr, sample, &classes, &ntest);
    if (rc != MG_OK) return rc;
    mg_model_config mc = {.kind = c->model, .rows = sample[0], .cols = sample[1],
                          .hidden = mg_train_config_hidden(c), .channels = c->channels, .classes = classes,
                          .depth = (int)c->depth, .seed = (uint64_t)c->seed};
    if ((rc = check_fits(tr, &mc, ntest)) != MG_OK) return rc;
    rc = mg_plan_pp_dim(&tr->plan) >= 0
             ? mg_train_pp_new(&tr->pp, c, tr->mesh, &tr->plan, &mc, ntest, &tr->model)
             : mg_model_build(&tr->model, &mc, tr->mesh, &tr->plan, NULL);
    if (rc != MG_OK) return rc;
    tr->have_model = 1;
    if (!tr->meta) {
        rc = mg_loader_init(&tr->train_loader, tr->train, c->batch, (uint64_t)c->seed);
        if (rc != MG_OK) return rc;
        tr->have_train_loader = 1;
        if (tr->test) {
            rc = mg_loader_init(&tr->test_loader, tr->test, ntest, (uint64_t)c->seed);
            if (rc != MG_OK) return rc;
            tr->have_test_loader = 1;
        }
    }
    int ndim = tr->mesh->ndim;
    mg_placement bp[MG_MAX_MESH_DIMS];
    mg_plan_batch(&tr->plan, bp);
    for (int d = 0; tr->pp && d < ndim; d++) bp[d] = MG_REPLICATE; /* micro-batches cut later */
    int64_t xs[3] = {c->batch, sample[0], sample[1]}, ys[1] = {c->batch};
    rc = mg_spec_make(&tr->x_spec, tr->mesh, bp, ndim, 3, xs, "train inputs");
    if (rc == MG_OK) rc = mg_spec_make(&tr->y_spec, tr->mesh, bp, ndim, 1, ys, "train labels");
    return rc;
}

mg_mesh *mg_trainer_mesh_new(const char *mesh, const char *device) {
    int shape[MG_MAX_MESH_DIMS], ndim = 1;
    shape[0] = mg_world_size();
    if (mesh[0]) {
        ndim = mg_mesh_parse(mesh, shape);
        if (ndim < 0) return NULL;
        int64_t prod = 1;
        for (int d = 0; d < ndim; d++) prod *= shape[d];
        if (prod != mg_world_size())
            return mg_error_null(MG_EMESH, "mesh %s has %lld ranks but mpirun started %d: run "
                                 "mpirun -np %lld or pass a --mesh whose sizes multiply to %d",
                                 mesh, (long long)prod, mg_world_size(), (long long)prod,
                                 mg_world_size());
    }
    if (strcmp(device, "cuda") == 0 && mg_set_device(MG_DEVICE_CUDA) != MG_OK) return NULL;
    return mg_mesh_new(ndim, shape);
}

/* After the model: what it recomputes, the optimizer and the schedule. */
static int setup_training(mg_trainer *tr) {
    mg_train_config *c = &tr->cfg;
    mg_optimizer_init(&tr->opt, c->optimizer, (float)c->momentum, (float)c->weight_decay);
    tr->opt.beta1 = (float)c->betas[0];
    tr->opt.beta2 = (float)c->betas[1];
    /* the language models decay their matrices only, as nanoGPT and llama2.c do */
    tr->opt.decay_2d_only = mg_model_kind_is_lm(c->model) && !c->decay_all;
    int rc = mg_model_set_recompute(&tr->model, c->recompute);
    if (rc == MG_OK) rc = mg_optimizer_add_state(&tr->opt, &tr->model.params);
    tr->sched = (mg_lr_schedule){c->schedule, c->lr, c->warmup, c->steps, c->lr_min};
    return rc;
}

static int setup(mg_trainer *tr, mg_mesh *mesh) {
    mg_train_config *c = &tr->cfg;
    int rc = mg_train_config_check(c);
    if (rc != MG_OK) return rc;
    if (c->threads > 0) mg_backend_cpu_set_threads((int)c->threads);
    if (c->tf32) mg_backend_cuda_set_tf32(1);
    mg_backend_set_gemm_bf16(strcmp(c->dtype, "bf16") == 0);
    if (c->deterministic && strcmp(c->device, "cpu") != 0)
        return mg_trainer_det_check(c, NULL, NULL); /* before a GPU starts */
    tr->own_mesh = !mesh;
    tr->mesh = mesh ? mesh : mg_trainer_mesh_new(c->mesh, c->device);
    if (!tr->mesh) return mg_last_code();
    rc = mg_plan_parse(c->parallel, &tr->plan);
    if (rc == MG_OK) rc = mg_plan_check(&tr->plan, tr->mesh, c->batch);
    if (rc == MG_OK && c->deterministic) rc = mg_trainer_det_check(c, tr->mesh, &tr->plan);
    tr->det_was = mg_get_deterministic();
    if (rc == MG_OK) rc = mg_set_deterministic(c->deterministic ? 1 : 0);
    if (rc != MG_OK) return rc;
    if (!c->data[0])
        snprintf(c->data, sizeof c->data, "%s",
                 mg_model_kind_is_lm(c->model) ? "data/mobydick.h5" : "data/digits.h5");
    rc = mg_model_kind_is_lm(c->model) ? mg_trainer_text_setup(tr) : image_setup(tr);
    return rc == MG_OK ? setup_training(tr) : rc;
}

mg_trainer *mg_trainer_build(const mg_train_config *cfg, mg_mesh *mesh,
                             const mg_trainer_meta_data *data, mg_trainer_fits_fn fits) {
    if (!cfg) return mg_error_null(MG_EINVAL, "mg_trainer_new: the config is NULL");
    mg_trainer *tr = calloc(1, sizeof *tr);
    if (!tr) return mg_error_null(MG_ENOMEM, "mg_trainer_new: out of memory");
    tr->cfg = *cfg;
    tr->rank = mg_rank();
    tr->fits = fits;
    if (data) {
        tr->meta = 1;
        tr->shapes = *data;
    }
    if (setup(tr, mesh) != MG_OK) {
        /* the message outlives the frees */
        char msg[1024];
        int rc = mg_last_code();
        snprintf(msg, sizeof msg, "%s", mg_last_error());
        mg_trainer_free(tr);
        mg_error(rc ? rc : MG_ESTATE, "%s", msg);
        return NULL;
    }
    return tr;
}

/* ---- a step ---------------------------------------------------------------------- */

/* What the ranks agree on after the backward (one all-reduce MAX): the
 * caller's values, then the step's own. */
enum { AGREE_BAD_GRAD = MG_TRAIN_AGREE, AGREE_BAD_LOSS, AGREE_N };

/* This rank's first parameter whose gradient (the part this rank holds) is not
 * finite, or -1. */
static int first_nonfinite_grad(const mg_param_table *t) {
    for (int i = 0; i < t->n; i++)
        if (t->p[i].grad && !mg_reducer_finite(t->p[i].value)) return i;
    return -1;
}

/* The arena of one micro-batch's tensor data (--grad-accum N > 1), made once.
 * Its activations are dead once its backward has handed the gradients to the
 * reducer, so it is reset after each: N micro-batches take one micro-batch's
 * memory, not the whole batch's (as the pipeline's arenas, nn/pipeline_exec.c). */
static int micro_arena(mg_trainer *tr) {
    if (!tr->micro) tr->micro = mg_micro_arena_new(1 << 20);
    return tr->micro ? MG_OK : mg_last_code();
}

/* The loss of batch (x, y), scaled by 1 / --grad-accum, and its backward. */
static int forward_backward(mg_trainer *tr, const mg_dtensor *x, const mg_dtensor *y,
                            int64_t micro, double *loss_out) {
    int64_t n = tr->cfg.grad_accum;
    int rc;
    mg_trace_begin(MG_TRACE_PHASE, "forward", 0);
    mg_dtensor *logits = mg_model_forward(&tr->model, x); // logits: (B, K) or (B, T, V)
    mg_dtensor *loss = logits ? mg_cross_entropy(logits, y) : NULL;
    if (loss && n > 1) loss = mg_scale(loss, 1.0f / (float)n);
    mg_trace_end();
    if (!loss) return mg_last_code();
    if (n > 1) mg_set_grad_sync(micro == n - 1);
    mg_trace_begin(MG_TRACE_PHASE, "backward", 0);
    rc = mg_backward(loss);
    mg_trace_end();
    if (n > 1) mg_set_grad_sync(1);
    if (rc == MG_OK) rc = mg_dtensor_item(loss, loss_out);
    return rc;
}

/* The batch of micro-batch `micro` of step `step`. */
static int load_batch(mg_trainer *tr, int64_t step, int64_t micro, mg_dtensor **x, mg_dtensor **y) {
    if (mg_model_kind_is_lm(tr->cfg.model)) return mg_trainer_text_batch(tr, step, micro, x, y);
    if (tr->meta) return mg_trainer_meta_batch(tr, &tr->x_spec, &tr->y_spec, x, y);
    return mg_loader_next(&tr->train_loader, &tr->x_spec, &tr->y_spec, x, y, mg_step_arena());
}

/* Forward and backward of micro-batch `micro` of step `step` (the pipeline's
 * schedule with pp; the GPT's --grad-accum N: the loss scaled by 1/N, the
 * gradients summed across ranks only after the last, each micro-batch's
 * tensor data in tr->micro, given back after its backward); *loss_out gets
 * its (scaled) loss, st the time spent waiting for the batch. */
static int micro_step(mg_trainer *tr, int64_t step, int64_t micro, double *loss_out,
                      mg_train_step *st) {
    int64_t n = tr->cfg.grad_accum;
    mg_dtensor *x = NULL, *y = NULL;
    double t_data = mg_clock();
    int64_t comm_ns = mg_flight_wait_ns();
    mg_trace_begin(MG_TRACE_PHASE, "data", 0);
    int rc = load_batch(tr, step, micro, &x, &y);
    mg_trace_end();
    st->data_s += mg_clock() - t_data;
    st->data_comm_ns += mg_flight_wait_ns() - comm_ns; /* the loader's own collectives */
    if (rc != MG_OK) return rc;
    if (tr->pp || tr->gpt_pp) { /* the pipeline's schedule: forward and backward */
        mg_trace_begin(MG_TRACE_PHASE, "pipeline", 0);
        rc = tr->pp ? mg_train_pp_step(tr->pp, x, y, loss_out)
                    : mg_trainer_text_pp_step(tr, x, y, loss_out);
        mg_trace_end();
        return rc;
    }
    if (n > 1 && (rc = micro_arena(tr)) != MG_OK) return rc;
    mg_arena *step_arena = mg_step_arena();
    mg_arena *was = n > 1 ? mg_arena_redirect_data(step_arena, tr->micro) : NULL;
    rc = forward_backward(tr, x, y, micro, loss_out);
    if (n > 1) {
        mg_arena_redirect_data(step_arena, was);
        mg_arena_reset(tr->micro);
    }
    return rc;
}

/* What was not finite, for the message or the skip (agreed values). */
static void nonfinite_what(const mg_trainer *tr, const int64_t *agreed, double loss, char *out,
                           size_t len) {
    const mg_param_table *t = &tr->model.params;
    int pp = tr->pp || tr->gpt_pp;
    int g = agreed[AGREE_BAD_GRAD] && !pp ? t->n - (int)agreed[AGREE_BAD_GRAD] : -1;
    if (agreed[AGREE_BAD_GRAD] && pp)
        snprintf(out, len, "the loss is %g and a gradient of some pipeline stage is not finite",
                 loss);
    else if (g >= 0)
        snprintf(out, len, "the loss is %g and the gradient of %s is not finite (the first such "
                 "parameter)", loss, t->p[g].name);
    else
        snprintf(out, len, "the loss is %g", loss);
}

/* The update: clipping and the optimizer step (the pipeline's, with pp). */
static int update(mg_trainer *tr, double lr, double *norm) {
    const mg_train_config *c = &tr->cfg;
    if (tr->pp) return mg_train_pp_update(tr->pp, &tr->opt, lr, c->clip, norm);
    if (tr->gpt_pp) return mg_gpt_pp_update(tr->gpt_pp, &tr->opt, lr, c->clip, norm);
    int rc = c->clip > 0 ? mg_clip_grad_norm(&tr->model.params, c->clip, norm) : MG_OK;
    return rc == MG_OK ? mg_optimizer_step(&tr->opt, &tr->model.params, (float)lr) : rc;
}

int mg_trainer_step(mg_trainer *tr, mg_train_step *st) {
    if (!tr || !st) return mg_error(MG_EINVAL, "mg_trainer_step: the trainer or step is NULL");
    mg_param_table *params = &tr->model.params;
    int rc = MG_OK, pp = tr->pp || tr->gpt_pp;
    int64_t s = tr->step;
    st->loss = st->grad_norm = st->data_s = 0;
    st->data_comm_ns = 0;
    st->lr = mg_lr_at(&tr->sched, s);
    st->skipped = 0;
    st->nonfinite[0] = '\0';
    mg_ops_state *ctx = mg_ops();
    mg_exact_zero(&ctx->det_loss);
    ctx->det_loss_rows = 0;
    for (int64_t m = 0; rc == MG_OK && m < tr->cfg.grad_accum; m++) {
        double part = 0;
        rc = micro_step(tr, s, m, &part, st);
        st->loss += part;
    }
    /* the deterministic mode: the exact sum of every row's loss over their count,
     * not a sum of micro-batch means (one rounding, whatever the split) */
    if (rc == MG_OK && mg_get_deterministic() && ctx->det_loss_rows > 0)
        st->loss = (float)(mg_exact_value(&ctx->det_loss) / (double)ctx->det_loss_rows);
    if (rc == MG_OK && !pp) mg_params_collect_grads(params);
    int64_t agreed[AGREE_N] = {0};
    if (rc == MG_OK) {
        int bad = first_nonfinite_grad(params);
        memcpy(agreed, st->agree, sizeof st->agree);
        /* MAX: the first bad one (with pp each rank holds its stages' table: a flag) */
        agreed[AGREE_BAD_GRAD] = bad < 0 ? 0 : pp ? 1 : params->n - bad;
        agreed[AGREE_BAD_LOSS] = !isfinite(st->loss);
        rc = mg_comm_all_reduce_i64(tr->mesh->world, agreed, AGREE_N, MG_CONTROL_MAX);
        memcpy(st->agree, agreed, sizeof st->agree);
    }
    int bad = rc == MG_OK && (agreed[AGREE_BAD_GRAD] || agreed[AGREE_BAD_LOSS]);
    mg_trace_begin(MG_TRACE_PHASE, "optimizer", 0);
    if (rc == MG_OK && !bad) rc = update(tr, st->lr, &st->grad_norm);
    if (rc == MG_OK) rc = mg_params_zero_grads(params);
    if (rc == MG_OK) rc = mg_device_synchronize(); /* a device error surfaces here */
    mg_step_end();
    mg_trace_end();
    if (rc != MG_OK) return rc;
    tr->step++;
    if (!bad) return MG_OK;
    nonfinite_what(tr, agreed, st->loss, st->nonfinite, sizeof st->nonfinite);
    if (strcmp(tr->cfg.on_nonfinite, "skip") != 0)
        return mg_error(MG_ESTATE, "step %lld: %s; the run stops before the update, so the "
                        "parameters (and any checkpoint) stay finite: lower --lr, clip the "
                        "gradients (--clip), or give --on-nonfinite skip to skip such steps",
                        (long long)tr->step, st->nonfinite);
    tr->skipped++;
    st->skipped = 1;
    return MG_OK;
}


int mg_trainer_evaluate(mg_trainer *tr, mg_train_eval *ev) {
    if (!tr || !ev) return mg_error(MG_EINVAL, "mg_trainer_evaluate: the trainer or eval is NULL");
    ev->loss = ev->accuracy = 0;
    ev->rows = ev->correct = 0;
    return mg_model_kind_is_lm(tr->cfg.model) ? mg_trainer_text_evaluate(tr, ev)
                                              : mg_trainer_image_evaluate(tr, ev);
}
