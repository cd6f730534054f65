/* train.c: `meshgrad train`: parses the flags into a config
 * (train/config.h), builds the run (meshgrad_train.h's mg_trainer: mesh,
 * plan, data, model, optimizer), then drives its steps
 *   mg_trainer_step -> report -> evaluate / save when due
 * printing progress on rank 0, evaluating on the test split (when the data
 * set has one), and writing JSON lines of metrics (docs/DESIGN.md
 * "Metrics"); at step 0 a "param_checksum" line (FNV-1a 64 of every initial
 * parameter) proves the initial parameters are bitwise equal on every mesh.
 *
 * Each step's agreement (one small all-reduce over the mesh after the
 * backward, mg_train_step's agree[]) carries this program's own values: a
 * stop signal (SIGTERM, SIGINT and SIGUSR1 only set a flag; all ranks then
 * stop after the same step, save and exit 0; a second SIGINT ends the
 * process at once), a failed write of the metrics file (the run stops,
 * naming the reason), and each rank's previous step time, so every step
 * names its slowest rank (train_report.h). A non-finite loss or gradient
 * stops the run before the update (the trainer's error), or with
 * --on-nonfinite skip is skipped and counted here.
 * Checkpoints, and where the run may write: train_ckpt.c (train.h); the
 * metrics file: train_metrics.c. The progress line's figures and the
 * end-of-run report: train_report.c. The flight recorder's directory and
 * --trace: observe.h.
 * Errors are left in mg_last_error() for main.c to print once.
 * Exports: mg_cli_train (cli.h). */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/train.h"
#include "dist/comm.h"
#include "dist/flight.h"
#include "dist/mesh.h"
#include "nn/plan.h"
#include "status.h"
#include "trace.h"
#include "train/trainer.h"

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

/* The run: its config checked, the data set found, where it may write
 * checked, then the trainer (mesh, plan, data, model, optimizer), the
 * flight recorder, the progress line, where it saves and the metrics file. */
static int setup(trainer *tr) {
    mg_train_config *c = &tr->cfg;
    int rc = mg_train_config_check(c);
    if (rc != MG_OK) return rc;
    if ((rc = mg_observe_flight(c->flight_dir)) != MG_OK) return rc;
    if (!c->data[0])
        snprintf(c->data, sizeof c->data, "%s",
                 mg_model_kind_is_lm(c->model) ? "data/mobydick.h5" : "data/digits.h5");
    /* rank 0 finds the data file; every rank uses its answer */
    char path[MG_PATH_MAX + 1];
    path[0] = (char)resolve_data_path(c->data, path + 1, sizeof path - 1);
    if ((rc = mg_comm_broadcast_bytes(mg_comm_world(), path, sizeof path, 0)) != MG_OK) return rc;
    if (!path[0])
        return mg_error(MG_EIO, "data file '%s' not found (looked in the current directory and in the "
                                "directory of the meshgrad program): run make to build data/digits.h5 "
                                "and data/mobydick.h5, or give --data PATH", c->data);
    snprintf(c->data, sizeof c->data, "%s", path + 1);
    /* nothing is opened for writing before this */
    if ((rc = mg_train_check_paths(tr)) != MG_OK) return rc;
    if (!(tr->run = mg_trainer_new(c, NULL))) return mg_last_code();
    tr->mesh = mg_trainer_mesh(tr->run);
    if ((rc = mg_window_init(&tr->window, tr->mesh->world->size)) != MG_OK) return rc;
    if ((rc = mg_train_prepare_save(tr)) != MG_OK) return rc;
    return mg_train_metrics_open(tr);
}

static void teardown(trainer *tr) {
    restore_signals(tr);
    mg_window_free(&tr->window);
    mg_train_metrics_close(tr);
    mg_trainer_free(tr->run);
    tr->run = NULL;
}

/* The caller's values in each step's agreement (mg_train_step's agree[]). */
enum { AGREE_SIGNAL, AGREE_METRICS, AGREE_SLOWEST };

/* One step of the run, its agreement carrying the stop signal, a failed
 * metrics write and this rank's previous step time. */
static int train_step(trainer *tr, mg_train_step *st) {
    memset(st, 0, sizeof *st);
    st->agree[AGREE_SIGNAL] = stop_requested;
    st->agree[AGREE_METRICS] = tr->metrics_errno != 0;
    st->agree[AGREE_SLOWEST] = mg_window_slowest_pack(&tr->window, tr->rank);
    int rc = mg_trainer_step(tr->run, st);
    tr->window.comm_ns0 += st->data_comm_ns; /* the loader's collectives are data wait */
    if (rc == MG_OK) mg_window_slowest_add(&tr->window, st->agree[AGREE_SLOWEST]);
    return rc;
}

/* A step skipped for a non-finite loss or gradient (--on-nonfinite skip):
 * counted, warned, in the metrics. */
static void skipped_step(trainer *tr, int64_t step, const mg_train_step *st) {
    tr->skipped++;
    if (tr->rank == 0) {
        fprintf(stderr, "warning: step %lld: %s: step skipped (%lld so far)\n", (long long)step,
                st->nonfinite, (long long)tr->skipped);
        fflush(stderr);
    }
    mg_train_metrics_line(tr, "{\"step\":%lld,\"skipped\":\"non-finite\",\"skipped_total\":%lld}\n",
                          (long long)step, (long long)tr->skipped);
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
        const mg_trainer *run = tr->run;
        char mb[64], pb[64];
        mg_mesh_format(mb, sizeof mb, tr->mesh);
        mg_plan_format(pb, sizeof pb, &run->plan);
        char shape[160];
        if (c->model == MG_MODEL_GPT)
            snprintf(shape, sizeof shape, "layers %lld, heads %lld, embd %lld, ctx %lld",
                     (long long)c->layers, (long long)c->heads, (long long)c->embd, (long long)c->ctx);
        else if (c->model == MG_MODEL_LLAMA)
            snprintf(shape, sizeof shape, "layers %lld, heads %lld, kv-heads %lld, embd %lld, "
                     "hidden %lld, ctx %lld%s", (long long)c->layers, (long long)c->heads,
                     (long long)(c->kv_heads ? c->kv_heads : c->heads), (long long)c->embd,
                     (long long)mg_train_config_hidden(c), (long long)c->ctx,
                     c->untied_head ? ", untied head" : "");
        else
            snprintf(shape, sizeof shape, "hidden %lld", (long long)mg_train_config_hidden(c));
        printf("meshgrad train: %s (%s, %lld parameters) on mesh %s [%s], %s lr %g (%s), "
               "batch %lld, %lld steps\n",
               mg_model_kind_name(c->model), shape, (long long)mg_trainer_numel(run), mb, pb,
               mg_optim_kind_name(c->optimizer), c->lr, mg_schedule_kind_name(c->schedule),
               (long long)c->batch, (long long)c->steps);
        if (mg_model_kind_is_lm(c->model))
            printf("data %s: %lld train tokens, %lld val tokens (vocabulary %d); param checksum "
                   "%016llx\n", c->data, (long long)mg_tokens_count(run->tokens),
                   (long long)mg_tokens_count(run->val), mg_tokens_vocab(run->tokens),
                   (unsigned long long)checksum);
        else
            printf("data %s: %lld train rows, %lld test rows; param checksum %016llx\n", c->data,
                   (long long)mg_dataset_rows(run->train),
                   (long long)(run->test ? mg_dataset_rows(run->test) : 0),
                   (unsigned long long)checksum);
        if (tr->resume_note[0]) printf("%s\n", tr->resume_note);
        mg_train_log_flush();
    }
    if (!tr->resumed_from[0]) {
        mg_train_metrics_line(tr, "{\"step\":0,\"param_checksum\":\"%016llx\"}\n",
                              (unsigned long long)checksum);
        return;
    }
    char esc[2 * MG_PATH_MAX], changes[4096];
    json_escape(esc, sizeof esc, tr->resumed_from);
    json_escape(changes, sizeof changes, mg_trainer_resume_changes(tr->run));
    mg_train_metrics_line(tr,
                          "{\"step\":%lld,\"resumed_from\":\"%s\",\"param_checksum\":\"%016llx\"%s%s%s}\n",
                          (long long)tr->start_step, esc, (unsigned long long)checksum,
                          changes[0] ? ",\"changed\":\"" : "", changes, changes[0] ? "\"" : "");
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
    int gpt = mg_model_kind_is_lm(c->model); /* a language model's step reads batch x ctx tokens */
    mg_window_format(&tr->window, window, sizeof window, gpt ? c->batch * c->ctx : c->batch,
                     gpt ? "tokens" : "samples");
    printf("step %lld/%lld | loss %.9f | lr %.3e | %s | ETA %s\n", (long long)step,
           (long long)c->steps, loss, lr, window, eta);
    mg_train_log_flush();
}

/* A long evaluation says how far it got, on rank 0, every `every` seconds
 * (MG_EVAL_PROGRESS_S, 10 by default: a test makes it 0). */
typedef struct {
    const trainer *tr;
    int64_t step;
    double t0, last, every;
    const char *unit;
} eval_progress;

static void on_eval_progress(void *ctx, int64_t done, int64_t total) {
    eval_progress *p = ctx;
    double now = mg_clock();
    if (p->tr->rank != 0 || done >= total || now - p->last < p->every) return;
    p->last = now;
    printf("eval %lld: %lld/%lld %s (%.1f s)\n", (long long)p->step, (long long)done,
           (long long)total, p->unit, now - p->t0);
    mg_train_log_flush();
}

/* Collective: the evaluation after `step` (the run's), printed on rank 0
 * with what it read and the time it took, and in the metrics. */
static int evaluate(trainer *tr, int64_t step) {
    int gpt = mg_model_kind_is_lm(tr->cfg.model);
    const char *every = getenv("MG_EVAL_PROGRESS_S");
    eval_progress p = {tr, step, mg_clock(), mg_clock(), every ? atof(every) : 10.0,
                       gpt ? "windows" : "rows"};
    mg_train_eval ev = {.progress = on_eval_progress, .ctx = &p};
    int rc = mg_trainer_evaluate(tr->run, &ev);
    if (rc != MG_OK) return rc;
    double s = mg_clock() - p.t0;
    if (!gpt && ev.rows == 0) return MG_OK; /* no test split */
    char loss[32];
    if (isfinite(ev.loss)) snprintf(loss, sizeof loss, "%.9g", ev.loss);
    else snprintf(loss, sizeof loss, "null"); /* JSON has no NaN: a diverged model's loss */
    if (gpt) {
        if (tr->rank == 0) {
            printf("eval %lld | val_loss %.6f | %lld windows in %.2f s\n", (long long)step, ev.loss,
                   (long long)ev.rows, s);
            mg_train_log_flush();
        }
        mg_train_metrics_line(tr, "{\"step\":%lld,\"val_loss\":%s,\"eval_windows\":%lld,"
                              "\"eval_s\":%.6g}\n", (long long)step, loss, (long long)ev.rows, s);
        return MG_OK;
    }
    if (tr->rank == 0) {
        printf("eval %lld | test loss %.6f | accuracy %.2f%% (%lld/%lld) | %.2f s\n",
               (long long)step, ev.loss, 100 * ev.accuracy, (long long)ev.correct,
               (long long)ev.rows, s);
        mg_train_log_flush();
    }
    mg_train_metrics_line(tr, "{\"step\":%lld,\"eval_loss\":%s,\"eval_accuracy\":%.9g,"
                          "\"eval_s\":%.6g}\n", (long long)step, loss, ev.accuracy, s);
    return MG_OK;
}

/* --resume: the run loads the checkpoint and says where it stands. */
static int resume(trainer *tr) {
    int rc = mg_trainer_resume(tr->run, tr->cfg.resume, tr->resume_note, sizeof tr->resume_note);
    if (rc != MG_OK) return rc;
    tr->start_step = mg_trainer_steps(tr->run);
    snprintf(tr->resumed_from, sizeof tr->resumed_from, "%s", mg_trainer_resumed_from(tr->run));
    return MG_OK;
}

/* After step `step`: stopped by a signal (every rank after the same step):
 * the run saved, and how to resume it said. */
static int stop(trainer *tr, int64_t step, int sig) {
    char where[MG_PATH_MAX + 32];
    int rc = mg_timeline_finish(&tr->timeline, tr->mesh->world);
    if (rc == MG_OK) rc = mg_train_save(tr, step, where, sizeof where);
    if (rc != MG_OK || tr->rank != 0) return rc;
    printf("stopped by %s after step %lld of %lld: resume with --resume %s\n", signal_name(sig),
           (long long)step, (long long)tr->cfg.steps, tr->save_dir ? tr->save_path : where);
    mg_train_log_flush();
    return MG_OK;
}

/* The end of the run: the report, the last save, the evaluation. */
static int finish(trainer *tr, double seconds) {
    mg_train_config *c = &tr->cfg;
    char where[MG_PATH_MAX + 32], json[2048];
    int64_t ran = c->steps - tr->start_step;
    int rc = mg_timeline_finish(&tr->timeline, tr->mesh->world);
    if (rc == MG_OK) rc = mg_train_report_end(tr, c->steps, json, sizeof json);
    if (rc != MG_OK) return rc;
    if (json[0]) mg_train_metrics_line(tr, "%s", json);
    if (c->save[0]) { /* also after 0 steps: a resumed checkpoint re-saved on this mesh */
        rc = mg_train_save(tr, c->steps, where, sizeof where);
        if (rc != MG_OK) return rc;
    }
    if (c->eval_every >= 0) rc = evaluate(tr, c->steps); /* -1: never */
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

static int run(trainer *tr) {
    mg_train_config *c = &tr->cfg;
    int rc = setup(tr);
    if (rc != MG_OK) return rc;
    if (c->resume[0] && (rc = resume(tr)) != MG_OK) return rc;
    mg_comm *world = tr->mesh->world;
    /* --trace's file checked before the run says it starts */
    rc = mg_timeline_prepare(&tr->timeline, c->trace, c->trace_steps, tr->start_step + 1, c->steps,
                             world);
    if (rc != MG_OK) return rc;
    uint64_t checksum = 0;
    if ((rc = mg_trainer_checksum(tr->run, &checksum)) != MG_OK) return rc;
    print_start(tr, checksum);

    install_signals(tr);
    char where[MG_PATH_MAX + 32];
    double start = mg_clock();
    for (int64_t step = tr->start_step + 1; step <= c->steps; step++) {
        if ((rc = mg_timeline_step_begin(&tr->timeline, step, world)) != MG_OK) return rc;
        mg_flight_set_step(step);
        mg_window_step_begin(&tr->window);
        mg_trace_begin(MG_TRACE_STEP, "step", step);
        double t0 = mg_clock();
        mg_train_step st;
        rc = train_step(tr, &st);
        mg_trace_end();
        if (rc != MG_OK) return rc;
        if ((rc = mg_train_metrics_failed(tr, st.agree[AGREE_METRICS])) != MG_OK) return rc;
        double t1 = mg_clock();
        mg_window_step_end(&tr->window, step, st.data_s);
        if (st.skipped) skipped_step(tr, step, &st);
        else report_step(tr, step, st.loss, st.lr, st.grad_norm, (t1 - t0) * 1e3, t1, start);
        if ((rc = mg_timeline_step_end(&tr->timeline, step, world)) != MG_OK) return rc;
        if (st.agree[AGREE_SIGNAL]) return stop(tr, step, (int)st.agree[AGREE_SIGNAL]);
        if (c->eval_every > 0 && step % c->eval_every == 0 && step != c->steps) {
            rc = evaluate(tr, step);
            if (rc != MG_OK) return rc;
        }
        if (c->save[0] && c->save_every > 0 && step % c->save_every == 0 && step != c->steps) {
            rc = mg_train_save(tr, step, where, sizeof where);
            if (rc != MG_OK) return rc;
        }
    }
    return finish(tr, mg_clock() - start);
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
