/* train.c: `meshgrad train`: builds the mesh, the plan, the model and the
 * optimizer from a config (cli/train_config.h), then runs the training loop
 *   loader next -> forward -> loss -> backward -> agree -> clip -> optimizer
 *   step -> zero grads -> mg_step_end()
 * printing progress on rank 0, evaluating on the test split (when the data set
 * has one), and writing JSON lines of metrics (DESIGN.md "Metrics"); at step 0
 * a "param_checksum" line (FNV-1a 64 of every initial parameter) proves the
 * initial parameters are bitwise equal on every mesh.
 *
 * After each backward the ranks agree, in one small all-reduce over the mesh,
 * on three things: a stop signal (SIGTERM, SIGINT and SIGUSR1 only set a flag;
 * all ranks then stop after the same step, save and exit 0; a second SIGINT
 * ends the process at once), a non-finite loss or gradient (the run stops
 * before the update, naming the step and the first parameter whose gradient
 * is not finite; with --on-nonfinite skip the step is skipped and counted),
 * and a failed write of the metrics file (the run stops, naming the reason);
 * the same all-reduce carries each rank's previous step time, so every step
 * names its slowest rank (train_report.h).
 * Checkpoints, and where the run may write: train_ckpt.c (train.h); the
 * metrics file: train_metrics.c. The
 * progress line's figures and the end-of-run report: train_report.c. The
 * evaluation: train_eval.c. The flight recorder's directory and --trace:
 * observe.h.
 * Errors are left in mg_last_error() for main.c to print once.
 * Exports: mg_cli_train (cli.h). */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/device.h"
#include "cli/cli.h"
#include "cli/train.h"
#include "cli/train_pp.h"
#include "context.h"
#include "dist/comm.h"
#include "dist/flight.h"
#include "dist/reducer.h"
#include "nn/gpt_pipeline.h"
#include "status.h"
#include "trace.h"

static const int stop_signals[3] = {SIGTERM, SIGINT, SIGUSR1};
static volatile sig_atomic_t stop_requested = 0; /* the signal number */

static void on_stop_signal(int sig) {
    if (sig == SIGINT && stop_requested == SIGINT) { /* a second Ctrl-C: stop now */
        signal(SIGINT, SIG_DFL);
        raise(SIGINT);
        return;
    }
    stop_requested = sig;
}

static const char *signal_name(int sig) {
    return sig == SIGTERM  ? "SIGTERM"
           : sig == SIGINT ? "SIGINT"
           : sig == SIGUSR1 ? "SIGUSR1"
                            : "a signal";
}

/* A signal ignored when the program started stays ignored (as a shell's
 * background job ignores SIGINT). */
static void install_signals(trainer *tr) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* I/O and MPI calls carry on; the loop checks the flag */
    stop_requested = 0;
    for (int i = 0; i < 3; i++) {
        if (sigaction(stop_signals[i], NULL, &tr->old_signals[i]) != 0 ||
            tr->old_signals[i].sa_handler == SIG_IGN)
            continue;
        tr->handled[i] = sigaction(stop_signals[i], &sa, NULL) == 0;
    }
}

static void restore_signals(trainer *tr) {
    for (int i = 0; i < 3; i++)
        if (tr->handled[i]) sigaction(stop_signals[i], &tr->old_signals[i], NULL);
    memset(tr->handled, 0, sizeof tr->handled);
}

/* The data path as given when readable; else, when relative, the same path
 * under the directory of the running program (its build dir; a libtool .libs/
 * dir counts as its parent). Returns 1 when found (out = the path to use).
 * A file that exists but cannot be opened as data is reported by the loader. */
static int resolve_data_path(const char *path, char *out, size_t len) {
    snprintf(out, len, "%s", path);
    if (access(path, F_OK) == 0) return 1;
    if (path[0] == '/') return 0;
    char exe[MG_PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 0;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return 0;
    *slash = '\0';
    slash = strrchr(exe, '/');
    if (slash && strcmp(slash + 1, ".libs") == 0) *slash = '\0';
    char candidate[2 * MG_PATH_MAX];
    int n_cand = snprintf(candidate, sizeof candidate, "%s/%s", exe, path);
    if (n_cand <= 0 || (size_t)n_cand >= len || access(candidate, F_OK) != 0) return 0;
    memcpy(out, candidate, (size_t)n_cand + 1);
    return 1;
}

static void format_duration(char *buf, size_t len, double seconds) {
    long s = seconds > 0 ? (long)(seconds + 0.5) : 0;
    if (s >= 3600)
        snprintf(buf, len, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(buf, len, "%ld:%02ld", s / 60, s % 60);
}

/* A model whose parameters, gradients and optimizer state could not fit this
 * machine's memory even split evenly over every rank is refused before it is
 * made (one label of 16777215 in a data set asks for 16.7M classes: tens of
 * GB, and the kernel would kill the job while it fills them). */
static int check_fits(const mg_model_config *mc, const mg_train_config *c) {
    double params = mg_model_config_params(mc), copies = c->optimizer == MG_OPTIM_ADAMW ? 4 : 3;
    char what[sizeof c->data + 256];
    snprintf(what, sizeof what, "the model of %.0f parameters (hidden %lld, %lld classes from the "
             "labels of %s), with their gradients and optimizer state split over all %d ranks,",
             params, (long long)mc->hidden, (long long)mc->classes, c->data, mg_world_size());
    return mg_cli_check_memory(what, 4.0 * params * copies / mg_world_size(),
                               "make the model smaller (--hidden, --depth), or check the labels");
}

/* Opens the test split when the data set has one (else a warning: nothing
 * is evaluated) and checks its samples have the train split's shape. */
static int open_test_split(trainer *tr) {
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

/* After the model: the optimizer, the schedule, where the run saves, metrics. */
static int setup_training(trainer *tr) {
    mg_train_config *c = &tr->cfg;
    mg_optimizer_init(&tr->opt, c->optimizer, (float)c->momentum, (float)c->weight_decay);
    tr->opt.beta1 = (float)c->betas[0];
    tr->opt.beta2 = (float)c->betas[1];
    int rc = mg_optimizer_add_state(&tr->opt, &tr->model.params);
    if (rc != MG_OK) return rc;
    tr->sched = (mg_lr_schedule){c->schedule, c->lr, c->warmup, c->steps, c->lr_min};
    if ((rc = mg_train_prepare_save(tr)) != MG_OK) return rc;
    return mg_train_metrics_open(tr);
}

static int setup(trainer *tr) {
    mg_train_config *c = &tr->cfg;
    int rc = mg_train_config_check(c);
    if (rc != MG_OK) return rc;
    if (c->threads > 0) mg_backend_cpu_set_threads((int)c->threads);

    int shape[MG_MAX_MESH_DIMS], ndim = 1;
    shape[0] = mg_world_size();
    if (c->mesh[0]) {
        ndim = mg_mesh_parse(c->mesh, shape);
        if (ndim < 0) return ndim;
        int64_t prod = 1;
        for (int d = 0; d < ndim; d++) prod *= shape[d];
        if (prod != mg_world_size())
            return mg_error(MG_EMESH, "mesh %s has %lld ranks but mpirun started %d: run mpirun -np %lld "
                                      "or pass a --mesh whose sizes multiply to %d",
                            c->mesh, (long long)prod, mg_world_size(), (long long)prod, mg_world_size());
    }
    if (c->tf32) mg_backend_cuda_set_tf32(1);
    mg_backend_set_gemm_bf16(strcmp(c->dtype, "bf16") == 0);
    if (strcmp(c->device, "cuda") == 0 && mg_set_device(MG_DEVICE_CUDA) != MG_OK) /* before the mesh */
        return mg_last_code();
    tr->mesh = mg_mesh_new(ndim, shape);
    if (!tr->mesh) return mg_last_code();
    mg_comm *world = tr->mesh->world;
    if ((rc = mg_observe_flight(c->flight_dir)) != MG_OK) return rc;
    if ((rc = mg_window_init(&tr->window, world->size)) != MG_OK) return rc;

    rc = mg_plan_parse(c->parallel, &tr->plan);
    if (rc == MG_OK) rc = mg_plan_check(&tr->plan, tr->mesh, c->batch);
    if (rc != MG_OK) return rc;

    if (!c->data[0])
        snprintf(c->data, sizeof c->data, "%s",
                 c->model == MG_MODEL_GPT ? "data/mobydick.h5" : "data/digits.h5");
    /* rank 0 finds the data file; every rank uses its answer */
    char path[MG_PATH_MAX + 1];
    path[0] = (char)resolve_data_path(c->data, path + 1, sizeof path - 1);
    if ((rc = mg_comm_broadcast_bytes(world, path, sizeof path, 0)) != MG_OK) return rc;
    if (!path[0])
        return mg_error(MG_EIO, "data file '%s' not found (looked in the current directory and in the "
                                "directory of the meshgrad program): run make to build data/digits.h5 "
                                "and data/mobydick.h5, or give --data PATH", c->data);
    snprintf(c->data, sizeof c->data, "%s", path + 1);
    /* nothing is opened for writing before this */
    if ((rc = mg_train_check_paths(tr)) != MG_OK) return rc;
    if (c->model == MG_MODEL_GPT) {
        if ((rc = mg_train_text_setup(tr)) != MG_OK) return rc;
        return setup_training(tr);
    }
    tr->train = mg_dataset_open(c->data, "train", world);
    if (!tr->train) return mg_last_code();
    if (mg_dataset_sample_ndim(tr->train) != 2)
        return mg_error(MG_EFORMAT, "%s: the models take (rows, cols) images but samples are %d-d",
                        c->data, mg_dataset_sample_ndim(tr->train));
    if ((rc = open_test_split(tr)) != MG_OK) return rc;
    const int64_t *sample = mg_dataset_sample_shape(tr->train);
    if (c->batch > mg_dataset_rows(tr->train))
        return mg_error(MG_EINVAL, "batch %lld is larger than the %lld training rows of %s",
                        (long long)c->batch, (long long)mg_dataset_rows(tr->train), c->data);
    int classes = mg_dataset_num_classes(tr->train);
    if (tr->test && mg_dataset_num_classes(tr->test) > classes)
        classes = mg_dataset_num_classes(tr->test);

    int64_t ntest = tr->test ? mg_dataset_rows(tr->test) : 0;
    mg_model_config mc = {.kind = c->model, .rows = sample[0], .cols = sample[1],
                          .hidden = c->hidden, .channels = c->channels, .classes = classes,
                          .depth = (int)c->depth, .seed = (uint64_t)c->seed};
    if ((rc = check_fits(&mc, c)) != MG_OK) return rc;
    rc = mg_plan_pp_dim(&tr->plan) >= 0
             ? mg_train_pp_new(&tr->pp, c, tr->mesh, &tr->plan, &mc, ntest, &tr->model)
             : mg_model_build(&tr->model, &mc, tr->mesh, &tr->plan, NULL);
    if (rc != MG_OK) return rc;
    tr->have_model = 1;
    rc = mg_loader_init(&tr->train_loader, tr->train, c->batch, (uint64_t)c->seed);
    if (rc != MG_OK) return rc;
    tr->have_train_loader = 1;
    if (tr->test) {
        rc = mg_loader_init(&tr->test_loader, tr->test, ntest, (uint64_t)c->seed);
        if (rc != MG_OK) return rc;
        tr->have_test_loader = 1;
    }

    mg_placement bp[MG_MAX_MESH_DIMS];
    mg_plan_batch(&tr->plan, bp);
    for (int d = 0; tr->pp && d < ndim; d++) bp[d] = MG_REPLICATE; /* micro-batches cut later */
    int64_t xs[3] = {c->batch, sample[0], sample[1]}, ys[1] = {c->batch};
    rc = mg_spec_make(&tr->x_spec, tr->mesh, bp, ndim, 3, xs, "train inputs");
    if (rc == MG_OK) rc = mg_spec_make(&tr->y_spec, tr->mesh, bp, ndim, 1, ys, "train labels");
    if (rc != MG_OK) return rc;
    return setup_training(tr);
}

static void teardown(trainer *tr) {
    restore_signals(tr);
    mg_window_free(&tr->window);
    mg_train_metrics_close(tr);
    if (tr->have_model) mg_model_free(&tr->model);
    mg_train_pp_free(tr->pp);
    mg_gpt_pp_free(tr->gpt_pp);
    mg_arena_free(tr->micro);
    free(tr->host);
    if (tr->have_train_loader) mg_loader_free(&tr->train_loader);
    if (tr->have_test_loader) mg_loader_free(&tr->test_loader);
    if (tr->train) mg_dataset_close(tr->train);
    if (tr->test) mg_dataset_close(tr->test);
    mg_tokens_close(tr->tokens);
    mg_tokens_close(tr->val);
    free(tr->starts);
    if (tr->mesh) mg_mesh_free(tr->mesh);
}

/* What the ranks agree on after each backward (one all-reduce MAX). */
enum { AGREE_SIGNAL, AGREE_BAD_GRAD, AGREE_BAD_LOSS, AGREE_METRICS, AGREE_SLOWEST, AGREE_N };

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
static int micro_arena(trainer *tr) {
    if (!tr->micro) tr->micro = mg_micro_arena_new(1 << 20);
    return tr->micro ? MG_OK : mg_last_code();
}

/* The loss of batch (x, y), scaled by 1 / --grad-accum, and its backward. */
static int forward_backward(trainer *tr, const mg_dtensor *x, const mg_dtensor *y, int64_t micro,
                            double *loss_out) {
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

/* Forward and backward of micro-batch `micro` of step `step` (the pipeline's
 * schedule with pp; the GPT's --grad-accum N: the loss scaled by 1/N, the
 * gradients summed across ranks only after the last, each micro-batch's
 * tensor data in tr->micro, given back after its backward); *loss_out gets
 * its (scaled) loss, *data_s adds the time spent waiting for the batch. */
static int micro_step(trainer *tr, int64_t step, int64_t micro, double *loss_out, double *data_s) {
    int64_t n = tr->cfg.grad_accum;
    mg_dtensor *x = NULL, *y = NULL;
    double t_data = mg_cli_clock();
    int64_t comm_ns = mg_flight_wait_ns(); /* the loader's own collectives are data wait */
    mg_trace_begin(MG_TRACE_PHASE, "data", 0);
    int rc = tr->cfg.model == MG_MODEL_GPT
                 ? mg_train_text_batch(tr, step, micro, &x, &y)
                 : mg_loader_next(&tr->train_loader, &tr->x_spec, &tr->y_spec, &x, &y, mg_step_arena());
    mg_trace_end();
    *data_s += mg_cli_clock() - t_data;
    tr->window.comm_ns0 += mg_flight_wait_ns() - comm_ns;
    if (rc != MG_OK) return rc;
    if (tr->pp || tr->gpt_pp) { /* the pipeline's schedule: forward and backward */
        mg_trace_begin(MG_TRACE_PHASE, "pipeline", 0);
        rc = tr->pp ? mg_train_pp_step(tr->pp, x, y, loss_out)
                    : mg_train_text_pp_step(tr, x, y, loss_out);
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

/* One step: its micro-batches (one, but for the GPT's --grad-accum), the
 * agreement (agreed[]), then the update only when the loss and every gradient
 * are finite. *loss_out gets the loss of the batch, *norm_out the gradient norm
 * before clipping (0 when not clipping) and *data_s the time spent waiting for
 * the batch. */
static int train_step(trainer *tr, int64_t step, double lr, double *loss_out, double *norm_out,
                      int64_t agreed[AGREE_N], double *data_s) {
    mg_param_table *params = &tr->model.params;
    int rc = MG_OK, pp = tr->pp || tr->gpt_pp;
    *loss_out = 0;
    *data_s = 0;
    for (int64_t m = 0; rc == MG_OK && m < tr->cfg.grad_accum; m++) {
        double part = 0;
        rc = micro_step(tr, step, m, &part, data_s);
        *loss_out += part;
    }
    if (rc == MG_OK && !pp) mg_params_collect_grads(params);
    if (rc == MG_OK) {
        int bad = first_nonfinite_grad(params);
        agreed[AGREE_SIGNAL] = stop_requested;
        /* MAX: the first bad one (with pp each rank holds its stages' table: a flag) */
        agreed[AGREE_BAD_GRAD] = bad < 0 ? 0 : pp ? 1 : params->n - bad;
        agreed[AGREE_BAD_LOSS] = !isfinite(*loss_out);
        agreed[AGREE_METRICS] = tr->metrics_errno != 0;
        agreed[AGREE_SLOWEST] = mg_window_slowest_pack(&tr->window, tr->rank);
        rc = mg_comm_all_reduce_i64(tr->mesh->world, agreed, AGREE_N, MG_CONTROL_MAX);
        mg_window_slowest_add(&tr->window, agreed[AGREE_SLOWEST]);
    }
    int update = rc == MG_OK && !agreed[AGREE_BAD_GRAD] && !agreed[AGREE_BAD_LOSS];
    mg_trace_begin(MG_TRACE_PHASE, "optimizer", 0);
    if (update && tr->pp) rc = mg_train_pp_update(tr->pp, &tr->opt, lr, tr->cfg.clip, norm_out);
    if (update && tr->gpt_pp)
        rc = mg_gpt_pp_update(tr->gpt_pp, &tr->opt, lr, tr->cfg.clip, norm_out);
    if (update && !pp && tr->cfg.clip > 0)
        rc = mg_clip_grad_norm(params, tr->cfg.clip, norm_out);
    if (update && !pp && rc == MG_OK) rc = mg_optimizer_step(&tr->opt, params, (float)lr);
    if (rc == MG_OK) rc = mg_params_zero_grads(params);
    if (rc == MG_OK) rc = mg_device_synchronize(); /* a device error surfaces here */
    mg_step_end();
    mg_trace_end();
    return rc;
}

/* After a step whose loss or gradient was not finite: MG_OK when skipping
 * (--on-nonfinite skip, counted), else the error that stops the run. */
static int nonfinite_step(trainer *tr, int64_t step, double loss, const int64_t *agreed) {
    const mg_param_table *t = &tr->model.params;
    char what[256];
    int pp = tr->pp || tr->gpt_pp;
    int g = agreed[AGREE_BAD_GRAD] && !pp ? t->n - (int)agreed[AGREE_BAD_GRAD] : -1;
    if (agreed[AGREE_BAD_GRAD] && pp)
        snprintf(what, sizeof what, "the loss is %g and a gradient of some pipeline stage is "
                 "not finite", loss);
    else if (g >= 0)
        snprintf(what, sizeof what, "the loss is %g and the gradient of %s is not finite (the "
                 "first such parameter)", loss, t->p[g].name);
    else
        snprintf(what, sizeof what, "the loss is %g", loss);
    if (strcmp(tr->cfg.on_nonfinite, "skip") != 0)
        return mg_error(MG_ESTATE, "step %lld: %s; the run stops before the update, so the "
                        "parameters (and any checkpoint) stay finite: lower --lr, clip the "
                        "gradients (--clip), or give --on-nonfinite skip to skip such steps",
                        (long long)step, what);
    tr->skipped++;
    if (tr->rank == 0) {
        fprintf(stderr, "warning: step %lld: %s: step skipped (%lld so far)\n", (long long)step,
                what, (long long)tr->skipped);
        fflush(stderr);
    }
    mg_train_metrics_line(tr, "{\"step\":%lld,\"skipped\":\"non-finite\",\"skipped_total\":%lld}\n",
                          (long long)step, (long long)tr->skipped);
    return MG_OK;
}

/* A JSON string body (the path): quotes and backslashes escaped. */
static void json_escape(char *out, size_t len, const char *s) {
    size_t j = 0;
    for (; *s && j + 2 < len; s++) {
        if (*s == '"' || *s == '\\') out[j++] = '\\';
        out[j++] = (unsigned char)*s < 0x20 ? '?' : *s;
    }
    out[j] = '\0';
}

/* Rank 0: the banner, and the first metrics line (the parameter checksum). */
static void print_start(trainer *tr, uint64_t checksum) {
    mg_train_config *c = &tr->cfg;
    if (tr->rank == 0) {
        char mb[64], pb[64];
        mg_mesh_format(mb, sizeof mb, tr->mesh);
        mg_plan_format(pb, sizeof pb, &tr->plan);
        char shape[96];
        if (c->model == MG_MODEL_GPT)
            snprintf(shape, sizeof shape, "layers %lld, heads %lld, embd %lld, ctx %lld",
                     (long long)c->layers, (long long)c->heads, (long long)c->embd, (long long)c->ctx);
        else
            snprintf(shape, sizeof shape, "hidden %lld", (long long)c->hidden);
        printf("meshgrad train: %s (%s, %lld parameters) on mesh %s [%s], %s lr %g (%s), "
               "batch %lld, %lld steps\n",
               mg_model_kind_name(c->model), shape, (long long)mg_model_numel(&tr->model), mb, pb,
               mg_optim_kind_name(c->optimizer), c->lr, mg_schedule_kind_name(c->schedule),
               (long long)c->batch, (long long)c->steps);
        if (c->model == MG_MODEL_GPT)
            printf("data %s: %lld train tokens, %lld val tokens (vocabulary %d); param checksum "
                   "%016llx\n", c->data, (long long)mg_tokens_count(tr->tokens),
                   (long long)mg_tokens_count(tr->val), mg_tokens_vocab(tr->tokens),
                   (unsigned long long)checksum);
        else
            printf("data %s: %lld train rows, %lld test rows; param checksum %016llx\n", c->data,
                   (long long)mg_dataset_rows(tr->train),
                   (long long)(tr->test ? mg_dataset_rows(tr->test) : 0), (unsigned long long)checksum);
        if (tr->resume_note[0]) printf("%s\n", tr->resume_note);
        mg_train_log_flush();
    }
    if (!tr->resumed_from[0]) {
        mg_train_metrics_line(tr, "{\"step\":0,\"param_checksum\":\"%016llx\"}\n",
                              (unsigned long long)checksum);
        return;
    }
    char esc[2 * MG_PATH_MAX];
    json_escape(esc, sizeof esc, tr->resumed_from);
    mg_train_metrics_line(tr,
                          "{\"step\":%lld,\"resumed_from\":\"%s\",\"param_checksum\":\"%016llx\"}\n",
                          (long long)tr->start_step, esc, (unsigned long long)checksum);
}

/* Rank 0: the metrics line of a step, and every log_every steps a progress line. */
static void report_step(trainer *tr, int64_t step, double loss, double lr, double norm, double ms,
                        double now, double start) {
    mg_train_config *c = &tr->cfg;
    if (c->clip > 0)
        mg_train_metrics_line(tr,
                              "{\"step\":%lld,\"loss\":%.9g,\"lr\":%.9g,\"ms\":%.6g,\"samples_per_s\":"
                              "%.6g,\"grad_norm\":%.9g}\n", (long long)step, loss, lr, ms,
                              ms > 0 ? c->batch * 1e3 / ms : 0.0, norm);
    else
        mg_train_metrics_line(tr,
                              "{\"step\":%lld,\"loss\":%.9g,\"lr\":%.9g,\"ms\":%.6g,\"samples_per_s\":"
                              "%.6g}\n", (long long)step, loss, lr, ms,
                              ms > 0 ? c->batch * 1e3 / ms : 0.0);
    if (tr->rank != 0 || c->log_every <= 0 || (step % c->log_every != 0 && step != c->steps))
        return;
    char eta[32], window[256];
    format_duration(eta, sizeof eta,
                    (double)(c->steps - step) * (now - start) / (double)(step - tr->start_step));
    int gpt = c->model == MG_MODEL_GPT; /* a GPT's step reads batch x ctx tokens */
    mg_window_format(&tr->window, window, sizeof window, gpt ? c->batch * c->ctx : c->batch,
                     gpt ? "tokens" : "samples");
    printf("step %lld/%lld | loss %.9f | lr %.3e | %s | ETA %s\n", (long long)step,
           (long long)c->steps, loss, lr, window, eta);
    mg_train_log_flush();
}

/* Collective: the evaluation after `step`, the GPT's val_loss (train_text.c)
 * or the MLP's test loss and accuracy (train_eval.c). */
static int evaluate(trainer *tr, int64_t step) {
    return tr->cfg.model == MG_MODEL_GPT ? mg_train_text_evaluate(tr, step)
                                         : mg_train_evaluate(tr, step);
}

static int run(trainer *tr) {
    mg_train_config *c = &tr->cfg;
    int rc = setup(tr);
    if (rc != MG_OK) return rc;
    if (c->resume[0] && (rc = mg_train_resume(tr)) != MG_OK) return rc;
    mg_comm *world = tr->mesh->world;
    /* --trace's file checked before the run says it starts */
    rc = mg_timeline_prepare(&tr->timeline, c->trace, c->trace_steps, tr->start_step + 1, c->steps,
                             world);
    if (rc != MG_OK) return rc;

    uint64_t checksum = 0;
    rc = tr->pp       ? mg_train_pp_checksum(tr->pp, &checksum)
         : tr->gpt_pp ? mg_gpt_pp_checksum(tr->gpt_pp, &checksum)
                      : mg_params_checksum(&tr->model.params, &checksum);
    if (rc != MG_OK) return rc;
    print_start(tr, checksum);

    install_signals(tr);
    char where[MG_PATH_MAX + 32], json[2048];
    double start = mg_cli_clock();
    for (int64_t s = tr->start_step; s < c->steps; s++) {
        int64_t step = s + 1;
        if ((rc = mg_timeline_step_begin(&tr->timeline, step, world)) != MG_OK) return rc;
        mg_flight_set_step(step);
        mg_window_step_begin(&tr->window);
        mg_trace_begin(MG_TRACE_STEP, "step", step);
        double t0 = mg_cli_clock(), data_s = 0;
        double lr = mg_lr_at(&tr->sched, s), loss = 0, norm = 0;
        int64_t agreed[AGREE_N] = {0};
        rc = train_step(tr, s, lr, &loss, &norm, agreed, &data_s);
        mg_trace_end();
        if (rc != MG_OK) return rc;
        if ((rc = mg_train_metrics_failed(tr, agreed[AGREE_METRICS])) != MG_OK) return rc;
        double t1 = mg_cli_clock();
        mg_window_step_end(&tr->window, step, data_s);
        if (agreed[AGREE_BAD_GRAD] || agreed[AGREE_BAD_LOSS]) {
            if ((rc = nonfinite_step(tr, step, loss, agreed)) != MG_OK) return rc;
        } else {
            report_step(tr, step, loss, lr, norm, (t1 - t0) * 1e3, t1, start);
        }
        if ((rc = mg_timeline_step_end(&tr->timeline, step, world)) != MG_OK) return rc;
        if (agreed[AGREE_SIGNAL]) { /* every rank stops after the same step */
            if ((rc = mg_timeline_finish(&tr->timeline, world)) != MG_OK) return rc;
            rc = mg_train_save(tr, step, where, sizeof where);
            if (rc != MG_OK) return rc;
            if (tr->rank == 0) {
                printf("stopped by %s after step %lld of %lld: resume with --resume %s\n",
                       signal_name((int)agreed[AGREE_SIGNAL]), (long long)step, (long long)c->steps,
                       tr->save_dir ? tr->save_path : where);
                mg_train_log_flush();
            }
            return MG_OK;
        }
        if (c->eval_every > 0 && step % c->eval_every == 0 && step != c->steps) {
            rc = evaluate(tr, step);
            if (rc != MG_OK) return rc;
        }
        if (c->save[0] && c->save_every > 0 && step % c->save_every == 0 && step != c->steps) {
            rc = mg_train_save(tr, step, where, sizeof where);
            if (rc != MG_OK) return rc;
        }
    }
    double seconds = mg_cli_clock() - start;
    int64_t ran = c->steps - tr->start_step;
    if ((rc = mg_timeline_finish(&tr->timeline, world)) != MG_OK ||
        (rc = mg_train_report_end(tr, c->steps, json, sizeof json)) != MG_OK)
        return rc;
    if (json[0]) mg_train_metrics_line(tr, "%s", json);
    if (c->save[0]) { /* also after 0 steps: a resumed checkpoint re-saved on this mesh */
        rc = mg_train_save(tr, c->steps, where, sizeof where);
        if (rc != MG_OK) return rc;
    }
    rc = evaluate(tr, c->steps);
    if (rc == MG_OK)
        rc = mg_train_metrics_failed(tr, mg_status_agree(tr->metrics_errno ? -1 : 0) != 0);
    if (rc != MG_OK) return rc;
    if (tr->rank == 0) {
        if (tr->skipped)
            printf("skipped %lld step%s with a non-finite loss or gradient\n",
                   (long long)tr->skipped, tr->skipped == 1 ? "" : "s");
        printf("done: %lld steps in %.2f s (%.3f ms/step)\n", (long long)ran, seconds,
               ran > 0 ? seconds * 1e3 / (double)ran : 0.0);
        mg_train_log_flush();
    }
    return MG_OK;
}

int mg_cli_train(int argc, char **argv) {
    trainer tr;
    memset(&tr, 0, sizeof tr);
    tr.rank = mg_rank();
    mg_train_config_defaults(&tr.cfg);
    if (mg_train_config_parse_args(&tr.cfg, argc, argv) != MG_OK) return 2;
    if (tr.cfg.help) {
        if (tr.rank == 0) mg_train_config_usage(stdout);
        return 0;
    }
    int rc = run(&tr);
    if (rc == MG_OK) {
        teardown(&tr);
        return 0;
    }
    /* main.c prints the message once; keep it across the teardown */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", mg_last_error());
    teardown(&tr);
    mg_error(rc, "%s", msg);
    return rc == MG_EINVAL || rc == MG_EMESH ? 2 : 1;
}
