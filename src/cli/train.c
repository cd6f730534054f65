/* train.c: `meshgrad train`: builds the mesh, the plan, the model and the
 * optimizer from a config (nn/train_config.h), then runs the training loop
 *   loader next -> forward -> loss -> backward -> clip -> optimizer step
 *   -> zero grads -> mg_step_end()
 * printing progress on rank 0, evaluating on the test split, and writing JSON
 * lines of metrics (DESIGN.md "Metrics"); at step 0 a "param_checksum" line
 * (FNV-1a 64 of every initial parameter) proves the initial parameters are
 * bitwise equal on every mesh.
 * Errors are left in mg_last_error() for main.c to print once.
 * Exports: mg_cli_train (cli.h). */
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "cli/cli.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "io/data.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "nn/plan.h"
#include "nn/train_config.h"
#include "status.h"

typedef struct {
    mg_train_config cfg;
    mg_mesh *mesh;
    mg_plan plan;
    mg_dataset *train, *test;
    mg_loader train_loader, test_loader;
    int have_train_loader, have_test_loader;
    mg_model model;
    int have_model;
    mg_optimizer opt;
    mg_lr_schedule sched;
    mg_spec x_spec, y_spec, test_x_spec, test_y_spec;
    FILE *metrics;
    int rank;
} trainer;

/* The data path as given when readable; else, when relative, the same path
 * under the directory of the running program (its build dir; a libtool .libs/
 * dir counts as its parent). Returns 1 when found (out = the path to use).
 * A file that exists but cannot be opened as data is reported by the loader. */
static int resolve_data_path(const char *path, char *out, size_t len) {
    snprintf(out, len, "%s", path);
    if (access(path, F_OK) == 0) return 1;
    if (path[0] == '/') return 0;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 0;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return 0;
    *slash = '\0';
    slash = strrchr(exe, '/');
    if (slash && strcmp(slash + 1, ".libs") == 0) *slash = '\0';
    char candidate[PATH_MAX + MG_PATH_MAX];
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

/* Collective. The value of a 0-d dtensor: read in place when it is
 * replicated (no allocation in the steady-state step), else mg_full_tensor. */
static int scalar_value(const mg_dtensor *t, double *out) {
    if (mg_spec_is_replicate(&t->spec) && t->local->numel == 1) {
        float v;
        mg_backend *be = mg_backend_of(t->local);
        be->iface->to_host(be->context, &v, t->local->data, 1);
        *out = v;
        return MG_OK;
    }
    mg_tensor *full = mg_full_tensor(t);
    if (!full) return mg_last_code() ? mg_last_code() : MG_ENOMEM;
    *out = full->data[0];
    mg_tensor_free(full);
    return MG_OK;
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
    tr->mesh = mg_mesh_new(ndim, shape);
    if (!tr->mesh) return mg_last_code();

    rc = mg_plan_parse(c->parallel, &tr->plan);
    if (rc == MG_OK) rc = mg_plan_check(&tr->plan, tr->mesh, c->batch);
    if (rc != MG_OK) return rc;

    /* rank 0 finds the data file; every rank uses its answer */
    char path[MG_PATH_MAX + 1];
    path[0] = (char)resolve_data_path(c->data, path + 1, sizeof path - 1);
    MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (!path[0])
        return mg_error(MG_EIO, "data file '%s' not found (looked in the current directory and in the "
                                "directory of the meshgrad program): run make to build data/digits.h5, "
                                "or give --data PATH", c->data);
    snprintf(c->data, sizeof c->data, "%s", path + 1);
    tr->train = mg_dataset_open(c->data, "train", MPI_COMM_WORLD);
    if (!tr->train) return mg_last_code();
    tr->test = mg_dataset_open(c->data, "test", MPI_COMM_WORLD);
    if (!tr->test) return mg_last_code();
    if (mg_dataset_sample_ndim(tr->train) != 2)
        return mg_error(MG_EFORMAT, "%s: the models take (rows, cols) images but samples are %d-d",
                        c->data, mg_dataset_sample_ndim(tr->train));
    const int64_t *sample = mg_dataset_sample_shape(tr->train);
    if (c->batch > mg_dataset_rows(tr->train))
        return mg_error(MG_EINVAL, "batch %lld is larger than the %lld training rows of %s",
                        (long long)c->batch, (long long)mg_dataset_rows(tr->train), c->data);
    int64_t ntest = mg_dataset_rows(tr->test);
    if (ntest < mg_plan_data_degree(&tr->plan, tr->mesh))
        return mg_error(MG_EINVAL, "the test split of %s has %lld rows, fewer than the data-parallel "
                                   "degree %d", c->data, (long long)ntest,
                        mg_plan_data_degree(&tr->plan, tr->mesh));
    int classes = mg_dataset_num_classes(tr->train);
    if (mg_dataset_num_classes(tr->test) > classes) classes = mg_dataset_num_classes(tr->test);

    rc = mg_model_init(&tr->model, c->model, tr->mesh, &tr->plan, sample[0], sample[1], c->hidden,
                       c->channels, classes, (uint64_t)c->seed);
    if (rc != MG_OK) return rc;
    tr->have_model = 1;
    mg_optimizer_init(&tr->opt, c->optimizer, (float)c->momentum, (float)c->weight_decay);
    rc = mg_optimizer_add_state(&tr->opt, &tr->model.params);
    if (rc != MG_OK) return rc;
    tr->sched = (mg_lr_schedule){c->schedule, c->lr, c->warmup, c->steps};

    rc = mg_loader_init(&tr->train_loader, tr->train, c->batch, (uint64_t)c->seed);
    if (rc != MG_OK) return rc;
    tr->have_train_loader = 1;
    rc = mg_loader_init(&tr->test_loader, tr->test, ntest, (uint64_t)c->seed);
    if (rc != MG_OK) return rc;
    tr->have_test_loader = 1;

    mg_placement bp[MG_MAX_MESH_DIMS];
    mg_plan_batch(&tr->plan, bp);
    int64_t xs[3] = {c->batch, sample[0], sample[1]}, ys[1] = {c->batch};
    rc = mg_spec_make(&tr->x_spec, tr->mesh, bp, ndim, 3, xs, "train inputs");
    if (rc == MG_OK) rc = mg_spec_make(&tr->y_spec, tr->mesh, bp, ndim, 1, ys, "train labels");
    xs[0] = ys[0] = ntest;
    if (rc == MG_OK) rc = mg_spec_make(&tr->test_x_spec, tr->mesh, bp, ndim, 3, xs, "test inputs");
    if (rc == MG_OK) rc = mg_spec_make(&tr->test_y_spec, tr->mesh, bp, ndim, 1, ys, "test labels");
    if (rc != MG_OK) return rc;

    int open_rc = MG_OK;
    if (c->metrics[0] && tr->rank == 0) {
        tr->metrics = fopen(c->metrics, "w");
        if (!tr->metrics) open_rc = mg_error(MG_EIO, "cannot write metrics file '%s'", c->metrics);
    }
    rc = mg_status_agree(open_rc);
    if (rc != MG_OK && open_rc == MG_OK)
        mg_error(rc, "cannot write metrics file '%s' (on rank 0)", c->metrics);
    return rc;
}

static void teardown(trainer *tr) {
    if (tr->metrics) fclose(tr->metrics);
    if (tr->have_model) mg_model_free(&tr->model);
    if (tr->have_train_loader) mg_loader_free(&tr->train_loader);
    if (tr->have_test_loader) mg_loader_free(&tr->test_loader);
    if (tr->train) mg_dataset_close(tr->train);
    if (tr->test) mg_dataset_close(tr->test);
    if (tr->mesh) mg_mesh_free(tr->mesh);
}

/* Collective. Loss and accuracy on the whole test split, without autograd. */
static int evaluate(trainer *tr, int64_t step) {
    int prev = mg_set_grad_enabled(0);
    int rc = mg_loader_seek(&tr->test_loader, 0, 0);
    mg_dtensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
    if (rc == MG_OK)
        rc = mg_loader_next(&tr->test_loader, &tr->test_x_spec, &tr->test_y_spec, &x, &y,
                            mg_step_arena());
    if (rc == MG_OK) logits = mg_model_forward(&tr->model, x);
    if (logits) loss = mg_cross_entropy(logits, y);
    if (rc == MG_OK && !loss) rc = mg_last_code();
    double test_loss = 0;
    int64_t correct = 0, n = 0;
    if (rc == MG_OK) rc = scalar_value(loss, &test_loss);
    mg_tensor *lf = NULL, *yf = NULL;
    if (rc == MG_OK && !(lf = mg_full_tensor(logits))) rc = mg_last_code();
    if (rc == MG_OK && !(yf = mg_full_tensor(y))) rc = mg_last_code();
    if (rc == MG_OK) {
        // lf: (N, K) logits, yf: (N) labels
        n = lf->shape[0];
        int64_t K = lf->shape[1];
        for (int64_t i = 0; i < n; i++) {
            const float *row = lf->data + i * K;
            int64_t best = 0;
            for (int64_t k = 1; k < K; k++)
                if (row[k] > row[best]) best = k;
            correct += (float)best == yf->data[i];
        }
    }
    mg_tensor_free(lf);
    mg_tensor_free(yf);
    mg_step_end();
    mg_set_grad_enabled(prev);
    if (rc != MG_OK) return rc;
    double acc = n ? (double)correct / (double)n : 0;
    if (tr->rank == 0) {
        printf("eval %lld | test loss %.6f | accuracy %.2f%% (%lld/%lld)\n", (long long)step,
               test_loss, 100 * acc, (long long)correct, (long long)n);
        fflush(stdout);
        if (tr->metrics)
            fprintf(tr->metrics, "{\"step\":%lld,\"eval_loss\":%.9g,\"eval_accuracy\":%.9g}\n",
                    (long long)step, test_loss, acc);
    }
    return MG_OK;
}

/* One optimizer step; *loss_out gets the loss of the batch and *norm_out the
 * gradient norm before clipping (0 when not clipping). */
static int train_step(trainer *tr, double lr, double *loss_out, double *norm_out) {
    mg_param_table *params = &tr->model.params;
    mg_dtensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
    int rc = mg_loader_next(&tr->train_loader, &tr->x_spec, &tr->y_spec, &x, &y, mg_step_arena());
    if (rc == MG_OK) logits = mg_model_forward(&tr->model, x); // logits: (B, K)
    if (logits) loss = mg_cross_entropy(logits, y);
    if (rc == MG_OK && !loss) rc = mg_last_code();
    if (rc == MG_OK) rc = mg_backward(loss);
    if (rc == MG_OK) rc = scalar_value(loss, loss_out);
    if (rc == MG_OK) {
        mg_params_collect_grads(params);
        if (tr->cfg.clip > 0) rc = mg_clip_grad_norm(params, tr->cfg.clip, norm_out);
    }
    if (rc == MG_OK) rc = mg_optimizer_step(&tr->opt, params, (float)lr);
    if (rc == MG_OK) rc = mg_params_zero_grads(params);
    mg_step_end();
    return rc;
}

static int run(trainer *tr) {
    mg_train_config *c = &tr->cfg;
    int rc = setup(tr);
    if (rc != MG_OK) return rc;

    uint64_t checksum = 0;
    rc = mg_params_checksum(&tr->model.params, &checksum);
    if (rc != MG_OK) return rc;
    if (tr->rank == 0) {
        char mb[64], pb[64];
        mg_mesh_format(mb, sizeof mb, tr->mesh);
        mg_plan_format(pb, sizeof pb, &tr->plan);
        printf("meshgrad train: %s (hidden %lld, %lld parameters) on mesh %s [%s], %s lr %g (%s), "
               "batch %lld, %lld steps\n",
               mg_model_kind_name(c->model), (long long)c->hidden,
               (long long)mg_params_numel(&tr->model.params), mb, pb,
               mg_optim_kind_name(c->optimizer), c->lr, mg_schedule_kind_name(c->schedule),
               (long long)c->batch, (long long)c->steps);
        printf("data %s: %lld train rows, %lld test rows; param checksum %016llx\n", c->data,
               (long long)mg_dataset_rows(tr->train), (long long)mg_dataset_rows(tr->test),
               (unsigned long long)checksum);
        fflush(stdout);
        if (tr->metrics)
            fprintf(tr->metrics, "{\"step\":0,\"param_checksum\":\"%016llx\"}\n",
                    (unsigned long long)checksum);
    }

    double start = MPI_Wtime(), window_start = start;
    int64_t window_steps = 0;
    for (int64_t s = 0; s < c->steps; s++) {
        double t0 = MPI_Wtime();
        double lr = mg_lr_at(&tr->sched, s), loss = 0, norm = 0;
        rc = train_step(tr, lr, &loss, &norm);
        if (rc != MG_OK) return rc;
        double t1 = MPI_Wtime(), ms = (t1 - t0) * 1e3;
        int64_t step = s + 1;
        window_steps++;
        if (tr->rank == 0 && tr->metrics) {
            fprintf(tr->metrics,
                    "{\"step\":%lld,\"loss\":%.9g,\"lr\":%.9g,\"ms\":%.6g,\"samples_per_s\":%.6g",
                    (long long)step, loss, lr, ms, ms > 0 ? c->batch * 1e3 / ms : 0.0);
            if (c->clip > 0) fprintf(tr->metrics, ",\"grad_norm\":%.9g", norm);
            fprintf(tr->metrics, "}\n");
        }
        if (tr->rank == 0 && c->log_every > 0 && (step % c->log_every == 0 || step == c->steps)) {
            double wms = (t1 - window_start) * 1e3 / (double)window_steps;
            char eta[32];
            format_duration(eta, sizeof eta, (double)(c->steps - step) * (t1 - start) / (double)step);
            printf("step %lld/%lld | loss %.9f | lr %.3e | %.2f ms/step | %.0f samples/s | ETA %s\n",
                   (long long)step, (long long)c->steps, loss, lr, wms,
                   wms > 0 ? c->batch * 1e3 / wms : 0.0, eta);
            fflush(stdout);
            window_start = t1;
            window_steps = 0;
        }
        if (c->eval_every > 0 && step % c->eval_every == 0 && step != c->steps) {
            rc = evaluate(tr, step);
            if (rc != MG_OK) return rc;
        }
    }
    double seconds = MPI_Wtime() - start;
    rc = evaluate(tr, c->steps);
    if (rc != MG_OK) return rc;
    if (tr->rank == 0) {
        printf("done: %lld steps in %.2f s (%.3f ms/step)\n", (long long)c->steps, seconds,
               seconds * 1e3 / (double)c->steps);
        fflush(stdout);
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
