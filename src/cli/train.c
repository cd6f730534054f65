/* train.c: `meshgrad train`: builds the mesh, the plan, the model and the
 * optimizer from a config (nn/train_config.h), then runs the training loop
 *   loader next -> forward -> loss -> backward -> clip -> optimizer step
 *   -> zero grads -> mg_step_end()
 * printing progress on rank 0, evaluating on the test split, and writing JSON
 * lines of metrics (DESIGN.md "Metrics"); at step 0 a "param_checksum" line
 * (FNV-1a 64 of every initial parameter) proves the initial parameters are
 * bitwise equal on every mesh.
 *
 * With pp in the plan, the model, the step, evaluation and the checksum are
 * train_pp.c's (a pipeline of stages); the rest is the same.
 *
 * Checkpoints (nn/train_state.h, docs/CHECKPOINTS.md): --save FILE or DIR/ at
 * every --save-every steps and at the end; --resume PATH loads a checkpoint into
 * the current mesh and plan, seeks the loader and continues at the next step
 * (a resumed run appends to --metrics, starting with a "param_checksum" line of
 * the loaded parameters). SIGTERM, SIGINT and SIGUSR1 only set a flag; at the
 * end of every step the ranks agree on it (all-reduce MAX), so all of them
 * stop after the same step, save and exit 0. A second SIGINT ends the process
 * at once.
 * Errors are left in mg_last_error() for main.c to print once.
 * Exports: mg_cli_train (cli.h). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/device.h"
#include "cli/cli.h"
#include "cli/train_pp.h"
#include "context.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "io/checkpoint.h"
#include "io/data.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "nn/plan.h"
#include "nn/train_config.h"
#include "nn/train_state.h"
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
    mg_train_pp *pp; /* pp in the plan: the pipeline (train_pp.h) */
    mg_optimizer opt;
    mg_lr_schedule sched;
    mg_spec x_spec, y_spec, test_x_spec, test_y_spec;
    FILE *metrics;
    int rank;
    char save_path[MG_PATH_MAX]; /* the --save file, or directory without a trailing '/' */
    int save_dir;                /* 1: save_path is a directory of ckpt-<step>.h5 */
    int64_t start_step;          /* steps done before this run (a resume) */
    char resumed_from[MG_PATH_MAX];
    char resume_note[MG_PATH_MAX + 256]; /* printed under the banner */
    int handled[3];              /* stop_signals[i] has our handler */
    struct sigaction old_signals[3];
} trainer;

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

/* The directory part of a file path ("." when none). */
static void parent_dir(const char *path, char *dir, size_t len) {
    snprintf(dir, len, "%s", path);
    char *last = strrchr(dir, '/');
    if (!last) snprintf(dir, len, ".");
    else if (last == dir) dir[1] = '\0';
    else *last = '\0';
}

/* Rank 0 checks where --save goes, before any step is spent: a directory (an
 * existing one, or a name ending in '/': created), or a file in an existing,
 * writable directory. Agreed; the message is rank 0's. */
static int prepare_save(trainer *tr) {
    mg_train_config *c = &tr->cfg;
    int st = MG_OK, is_dir = 0;
    if (!c->save[0]) {
        snprintf(tr->save_path, sizeof tr->save_path, "%s", MG_TRAIN_PREEMPT_PATH);
        return MG_OK;
    }
    snprintf(tr->save_path, sizeof tr->save_path, "%s", c->save);
    size_t len = strlen(tr->save_path);
    int slash = tr->save_path[len - 1] == '/';
    while (len > 1 && tr->save_path[len - 1] == '/') tr->save_path[--len] = '\0';
    if (tr->rank == 0) {
        struct stat sb;
        char dir[MG_PATH_MAX];
        is_dir = slash || (stat(tr->save_path, &sb) == 0 && S_ISDIR(sb.st_mode));
        if (is_dir) {
            snprintf(dir, sizeof dir, "%s", tr->save_path);
            if (mkdir(dir, 0777) != 0 && errno != EEXIST)
                st = mg_error(MG_EIO, "--save %s: cannot create the checkpoint directory: %s (create "
                              "its parent first)", c->save, strerror(errno));
        } else {
            parent_dir(tr->save_path, dir, sizeof dir);
        }
        if (st == MG_OK && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)))
            st = mg_error(MG_EIO, "--save %s: %s is not a directory (create it, or give --save DIR/ to "
                          "have a checkpoint directory created)", c->save, dir);
        if (st == MG_OK && access(dir, W_OK) != 0)
            st = mg_error(MG_EIO, "--save %s: cannot write in %s: %s", c->save, dir, strerror(errno));
        if (st == MG_OK && c->keep > 0 && !is_dir)
            st = mg_error(MG_EINVAL, "--keep %lld applies to a checkpoint directory, but --save %s is a "
                          "file (give --save DIR/ to keep the newest %lld of DIR/ckpt-<step>.h5)",
                          (long long)c->keep, c->save, (long long)c->keep);
    }
    MPI_Bcast(&is_dir, 1, MPI_INT, 0, MPI_COMM_WORLD);
    tr->save_dir = is_dir;
    return mg_status_agree(st);
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
    if (strcmp(c->device, "cuda") == 0 && mg_set_device(MG_DEVICE_CUDA) != MG_OK) /* before the mesh */
        return mg_last_code();
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

    mg_model_config mc = {.kind = c->model, .rows = sample[0], .cols = sample[1],
                          .hidden = c->hidden, .channels = c->channels, .classes = classes,
                          .depth = (int)c->depth, .seed = (uint64_t)c->seed};
    rc = mg_plan_pp_dim(&tr->plan) >= 0
             ? mg_train_pp_new(&tr->pp, c, tr->mesh, &tr->plan, &mc, ntest, &tr->model)
             : mg_model_build(&tr->model, &mc, tr->mesh, &tr->plan, NULL);
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
    for (int d = 0; tr->pp && d < ndim; d++) bp[d] = MG_REPLICATE; /* micro-batches cut later */
    int64_t xs[3] = {c->batch, sample[0], sample[1]}, ys[1] = {c->batch};
    rc = mg_spec_make(&tr->x_spec, tr->mesh, bp, ndim, 3, xs, "train inputs");
    if (rc == MG_OK) rc = mg_spec_make(&tr->y_spec, tr->mesh, bp, ndim, 1, ys, "train labels");
    xs[0] = ys[0] = ntest;
    if (rc == MG_OK) rc = mg_spec_make(&tr->test_x_spec, tr->mesh, bp, ndim, 3, xs, "test inputs");
    if (rc == MG_OK) rc = mg_spec_make(&tr->test_y_spec, tr->mesh, bp, ndim, 1, ys, "test labels");
    if (rc != MG_OK) return rc;

    rc = prepare_save(tr);
    if (rc != MG_OK) return rc;

    int open_rc = MG_OK;
    if (c->metrics[0] && tr->rank == 0) {
        tr->metrics = fopen(c->metrics, c->resume[0] ? "a" : "w");
        if (!tr->metrics) open_rc = mg_error(MG_EIO, "cannot write metrics file '%s'", c->metrics);
    }
    rc = mg_status_agree(open_rc);
    if (rc != MG_OK && open_rc == MG_OK)
        mg_error(rc, "cannot write metrics file '%s' (on rank 0)", c->metrics);
    return rc;
}

static void teardown(trainer *tr) {
    restore_signals(tr);
    if (tr->metrics) fclose(tr->metrics);
    if (tr->have_model) mg_model_free(&tr->model);
    mg_train_pp_free(tr->pp);
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
    double test_loss = 0;
    int64_t correct = 0, n = 0;
    if (rc == MG_OK && tr->pp) {
        rc = mg_train_pp_evaluate(tr->pp, x, y, &test_loss, &correct);
        n = mg_dtensor_shape(y)[0];
    }
    if (rc == MG_OK && !tr->pp) logits = mg_model_forward(&tr->model, x);
    if (logits) loss = mg_cross_entropy(logits, y);
    if (rc == MG_OK && !tr->pp && !loss) rc = mg_last_code();
    if (rc == MG_OK && !tr->pp) rc = mg_dtensor_item(loss, &test_loss);
    mg_tensor *lf = NULL, *yf = NULL;
    if (rc == MG_OK && !tr->pp && !(lf = mg_full_tensor(logits))) rc = mg_last_code();
    if (rc == MG_OK && !tr->pp && !(yf = mg_full_tensor(y))) rc = mg_last_code();
    if (rc == MG_OK && !tr->pp) {
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
    if (rc == MG_OK && tr->pp) {
        rc = mg_train_pp_step(tr->pp, x, y, &tr->opt, lr, tr->cfg.clip, loss_out, norm_out);
        if (rc == MG_OK) rc = mg_device_synchronize();
        mg_step_end();
        return rc;
    }
    if (rc == MG_OK) logits = mg_model_forward(&tr->model, x); // logits: (B, K)
    if (logits) loss = mg_cross_entropy(logits, y);
    if (rc == MG_OK && !loss) rc = mg_last_code();
    if (rc == MG_OK) rc = mg_backward(loss);
    if (rc == MG_OK) rc = mg_dtensor_item(loss, loss_out);
    if (rc == MG_OK) {
        mg_params_collect_grads(params);
        if (tr->cfg.clip > 0) rc = mg_clip_grad_norm(params, tr->cfg.clip, norm_out);
    }
    if (rc == MG_OK) rc = mg_optimizer_step(&tr->opt, params, (float)lr);
    if (rc == MG_OK) rc = mg_params_zero_grads(params);
    if (rc == MG_OK) rc = mg_device_synchronize(); /* a device error surfaces here */
    mg_step_end();
    return rc;
}

/* Collective. Saves the run after `step` steps: to the --save file, to
 * DIR/ckpt-<step>.h5 (then keeps the newest --keep), or, on preemption
 * without --save, to ./meshgrad-preempt.h5. *where gets the path. */
static int save(trainer *tr, int64_t step, char *where, size_t len) {
    mg_train_config *c = &tr->cfg;
    if (tr->save_dir)
        snprintf(where, len, "%s/ckpt-%08lld.h5", tr->save_path, (long long)step);
    else
        snprintf(where, len, "%s", tr->save_path);
    double t0 = MPI_Wtime();
    mg_train_state st = {
        .step = step, .seed = c->seed, .data_epoch = tr->train_loader.epoch,
        .data_cursor = tr->train_loader.cursor, .batch = c->batch, .data_file = c->data,
        .schedule = tr->sched, .clip = c->clip,
    };
    int rc = mg_train_state_save(where, &tr->model, &tr->opt, &tr->plan, &st);
    if (rc == MG_OK && tr->save_dir && c->keep > 0)
        rc = mg_checkpoint_prune(tr->save_path, (int)c->keep);
    if (rc == MG_OK && tr->rank == 0) {
        printf("checkpoint %lld: saved %s (%.0f ms)\n", (long long)step, where,
               (MPI_Wtime() - t0) * 1e3);
        fflush(stdout);
    }
    return rc;
}

/* Collective. --resume: rank 0 finds the checkpoint (a file, or the newest in
 * a directory), every rank loads its blocks into the current mesh and plan,
 * and the loader moves to where the saved run stood. */
static int resume(trainer *tr) {
    mg_train_config *c = &tr->cfg;
    char path[MG_PATH_MAX];
    int st = MG_OK;
    if (tr->rank == 0) st = mg_checkpoint_resolve(c->resume, path, sizeof path);
    if ((st = mg_status_agree(st)) != MG_OK) return st;
    MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
    mg_train_state cur = {
        .step = 0, .seed = c->seed, .batch = c->batch, .data_file = c->data,
        .schedule = tr->sched, .clip = c->clip,
    };
    mg_train_state saved;
    st = mg_train_state_load(path, &tr->model, &tr->opt, &tr->plan, &cur, &saved,
                             tr->rank == 0 ? stderr : NULL);
    if (st != MG_OK) return st;
    if (saved.step > c->steps)
        return mg_error(MG_EINVAL, "checkpoint %s is at step %lld, past --steps %lld (the total "
                        "length of the run): give --steps %lld or more", path,
                        (long long)saved.step, (long long)c->steps, (long long)saved.step);
    st = mg_loader_seek(&tr->train_loader, saved.data_epoch, saved.data_cursor);
    if (st != MG_OK) return st;
    tr->start_step = saved.step;
    snprintf(tr->resumed_from, sizeof tr->resumed_from, "%s", path);
    snprintf(tr->resume_note, sizeof tr->resume_note,
             "resumed from %s: step %lld of %lld (saved on mesh %s [%s]), data epoch %lld batch %lld",
             path, (long long)saved.step, (long long)c->steps, saved.mesh, saved.parallel,
             (long long)saved.data_epoch, (long long)saved.data_cursor);
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

static int run(trainer *tr) {
    mg_train_config *c = &tr->cfg;
    int rc = setup(tr);
    if (rc != MG_OK) return rc;
    if (c->resume[0] && (rc = resume(tr)) != MG_OK) return rc;

    uint64_t checksum = 0;
    rc = tr->pp ? mg_train_pp_checksum(tr->pp, &checksum)
                : mg_params_checksum(&tr->model.params, &checksum);
    if (rc != MG_OK) return rc;
    if (tr->rank == 0) {
        char mb[64], pb[64];
        mg_mesh_format(mb, sizeof mb, tr->mesh);
        mg_plan_format(pb, sizeof pb, &tr->plan);
        printf("meshgrad train: %s (hidden %lld, %lld parameters) on mesh %s [%s], %s lr %g (%s), "
               "batch %lld, %lld steps\n",
               mg_model_kind_name(c->model), (long long)c->hidden,
               (long long)mg_model_numel(&tr->model), mb, pb,
               mg_optim_kind_name(c->optimizer), c->lr, mg_schedule_kind_name(c->schedule),
               (long long)c->batch, (long long)c->steps);
        printf("data %s: %lld train rows, %lld test rows; param checksum %016llx\n", c->data,
               (long long)mg_dataset_rows(tr->train), (long long)mg_dataset_rows(tr->test),
               (unsigned long long)checksum);
        if (tr->resume_note[0]) printf("%s\n", tr->resume_note);
        fflush(stdout);
        if (tr->metrics && tr->start_step == 0 && !tr->resumed_from[0])
            fprintf(tr->metrics, "{\"step\":0,\"param_checksum\":\"%016llx\"}\n",
                    (unsigned long long)checksum);
        if (tr->metrics && tr->resumed_from[0]) {
            char esc[2 * MG_PATH_MAX];
            json_escape(esc, sizeof esc, tr->resumed_from);
            fprintf(tr->metrics,
                    "{\"step\":%lld,\"resumed_from\":\"%s\",\"param_checksum\":\"%016llx\"}\n",
                    (long long)tr->start_step, esc, (unsigned long long)checksum);
        }
    }

    install_signals(tr);
    char where[MG_PATH_MAX + 32];
    double start = MPI_Wtime(), window_start = start;
    int64_t window_steps = 0;
    for (int64_t s = tr->start_step; s < c->steps; s++) {
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
            format_duration(eta, sizeof eta,
                            (double)(c->steps - step) * (t1 - start) / (double)(step - tr->start_step));
            printf("step %lld/%lld | loss %.9f | lr %.3e | %.2f ms/step | %.0f samples/s | ETA %s\n",
                   (long long)step, (long long)c->steps, loss, lr, wms,
                   wms > 0 ? c->batch * 1e3 / wms : 0.0, eta);
            fflush(stdout);
            window_start = t1;
            window_steps = 0;
        }
        /* every rank stops after the same step, whichever ranks got the signal */
        int mine = (int)stop_requested, any = 0;
        MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (any) {
            if (tr->metrics) fflush(tr->metrics);
            rc = save(tr, step, where, sizeof where);
            if (rc != MG_OK) return rc;
            if (tr->rank == 0) {
                printf("stopped by %s after step %lld of %lld: resume with --resume %s\n",
                       signal_name(any), (long long)step, (long long)c->steps,
                       tr->save_dir ? tr->save_path : where);
                fflush(stdout);
            }
            return MG_OK;
        }
        if (c->eval_every > 0 && step % c->eval_every == 0 && step != c->steps) {
            rc = evaluate(tr, step);
            if (rc != MG_OK) return rc;
        }
        if (c->save[0] && c->save_every > 0 && step % c->save_every == 0 && step != c->steps) {
            rc = save(tr, step, where, sizeof where);
            if (rc != MG_OK) return rc;
        }
    }
    double seconds = MPI_Wtime() - start;
    int64_t ran = c->steps - tr->start_step;
    if (c->save[0]) { /* also after 0 steps: a resumed checkpoint re-saved on this mesh */
        rc = save(tr, c->steps, where, sizeof where);
        if (rc != MG_OK) return rc;
    }
    rc = evaluate(tr, c->steps);
    if (rc != MG_OK) return rc;
    if (tr->rank == 0) {
        printf("done: %lld steps in %.2f s (%.3f ms/step)\n", (long long)ran, seconds,
               ran > 0 ? seconds * 1e3 / (double)ran : 0.0);
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
