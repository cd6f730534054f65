/* train_ckpt.c: where `meshgrad train` may write, its checkpoints, and
 * resuming (see train.h, docs/CHECKPOINTS.md).
 * - Before step 1: --save and --metrics must not name the data set, the
 *   config file or each other; --save is a directory (created when the name
 *   ends in '/') or a file that is absent or a meshgrad checkpoint; a new run
 *   (no --resume) does not save into a directory that already holds
 *   checkpoints unless --overwrite is given.
 * - A save writes the run (nn/train_state.h) atomically; with --keep it then
 *   deletes the older ckpt-<step>.h5 of the directory (never another file).
 *   A failed save stops the run (exit 1): the previous checkpoint is intact.
 * - A resume compares the checkpoint's settings with the flags (the model and
 *   optimizer must match; other settings warn, and the flag wins), loads it,
 *   and checks its data position against the data set.
 * Exports mg_train_check_paths, mg_train_prepare_save, mg_train_save,
 * mg_train_resume (train.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/train.h"
#include "io/checkpoint.h"
#include "nn/train_state.h"
#include "status.h"

int mg_train_check_paths(trainer *tr) {
    const mg_train_config *c = &tr->cfg;
    const struct {
        const char *flag, *path;
    } inputs[] = {{"--data", c->data}, {"--config", c->config}, {"--save", c->save}},
      outputs[] = {{"--save", c->save}, {"--metrics", c->metrics}};
    int st = MG_OK;
    for (int o = 0; tr->rank == 0 && st == MG_OK && o < 2; o++)
        for (int i = 0; st == MG_OK && i < 3; i++) {
            if (strcmp(inputs[i].flag, outputs[o].flag) == 0) continue;
            if (mg_path_same_file(outputs[o].path, inputs[i].path))
                st = mg_error(MG_EINVAL, "%s %s is the file given as %s: a run never writes over "
                              "its data, its config or its checkpoints; give %s another path",
                              outputs[o].flag, outputs[o].path, inputs[i].flag, outputs[o].flag);
        }
    return mg_status_agree(st);
}

/* The directory of the --save path (the path itself for a directory). */
static int check_save_dir(trainer *tr, const char *dir) {
    const mg_train_config *c = &tr->cfg;
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return mg_error(MG_EIO, "--save %s: %s is not a directory (create it, or give --save DIR/ "
                        "to have a checkpoint directory created)", c->save, dir);
    if (access(dir, W_OK) != 0)
        return mg_error(MG_EIO, "--save %s: cannot write in %s: %s", c->save, dir,
                        strerror(errno));
    return MG_OK;
}

/* Rank 0: what --save names may be written, before any step is spent. */
static int check_save(trainer *tr, int *is_dir) {
    const mg_train_config *c = &tr->cfg;
    struct stat sb;
    char dir[MG_PATH_MAX];
    size_t len = strlen(c->save);
    *is_dir = c->save[len - 1] == '/' || (stat(tr->save_path, &sb) == 0 && S_ISDIR(sb.st_mode));
    if (!*is_dir) {
        mg_path_dir(tr->save_path, dir, sizeof dir);
        int st = check_save_dir(tr, dir), exists;
        if (st == MG_OK)
            st = mg_file_replaceable(tr->save_path, "meshgrad checkpoint", mg_checkpoint_is_one,
                                     &exists);
        if (st == MG_OK && c->keep > 0)
            st = mg_error(MG_EINVAL, "--keep %lld applies to a checkpoint directory, but --save "
                          "%s is a file (give --save DIR/ to keep the newest %lld of "
                          "DIR/ckpt-<step>.h5)", (long long)c->keep, c->save, (long long)c->keep);
        return st;
    }
    if (mkdir(tr->save_path, 0777) != 0 && errno != EEXIST)
        return mg_error(MG_EIO, "--save %s: cannot create the checkpoint directory: %s (create "
                        "its parent first)", c->save, strerror(errno));
    int st = check_save_dir(tr, tr->save_path);
    char newest[MG_PATH_MAX];
    if (st != MG_OK || c->resume[0] || c->overwrite) return st;
    if (mg_checkpoint_resolve(tr->save_path, newest, sizeof newest) != MG_OK) {
        mg_clear_error(); /* no checkpoint there: a new run may start */
        return MG_OK;
    }
    return mg_error(MG_EINVAL, "--save %s: the directory already holds checkpoints (the newest: "
                    "%s); a new run would mix its checkpoints with them: resume that run "
                    "(--resume %s), save to another directory, or give --overwrite",
                    c->save, newest, tr->save_path);
}

int mg_train_prepare_save(trainer *tr) {
    mg_train_config *c = &tr->cfg;
    if (!c->save[0]) {
        snprintf(tr->save_path, sizeof tr->save_path, "%s", MG_TRAIN_PREEMPT_PATH);
        return MG_OK;
    }
    /* room for "/ckpt-<step>.h5" and the temporary name's suffix */
    int st = mg_path_check(c->save, "--save", MG_TMP_SUFFIX_MAX + 32);
    if (st != MG_OK) return st;
    snprintf(tr->save_path, sizeof tr->save_path, "%s", c->save);
    size_t len = strlen(tr->save_path);
    while (len > 1 && tr->save_path[len - 1] == '/') tr->save_path[--len] = '\0';
    int is_dir = 0;
    if (tr->rank == 0) st = check_save(tr, &is_dir);
    if ((st = mg_status_agree(st)) != MG_OK) return st;
    if ((st = mg_comm_broadcast_bytes(tr->mesh->world, &is_dir, sizeof is_dir, 0)) != MG_OK)
        return st;
    tr->save_dir = is_dir;
    return MG_OK;
}

int mg_train_save(trainer *tr, int64_t step, char *where, size_t len) {
    mg_train_config *c = &tr->cfg;
    if (tr->save_dir)
        snprintf(where, len, "%s/ckpt-%08lld.h5", tr->save_path, (long long)step);
    else
        snprintf(where, len, "%s", tr->save_path);
    double t0 = mg_cli_clock();
    mg_train_state st = {
        .step = step, .seed = c->seed, .data_epoch = tr->train_loader.epoch,
        .data_cursor = tr->train_loader.cursor, .batch = c->batch, .data_file = c->data,
        .schedule = tr->sched, .clip = c->clip,
    };
    int rc = mg_train_state_save(where, &tr->model, &tr->opt, &tr->plan, &st);
    if (rc == MG_OK && tr->save_dir && c->keep > 0)
        rc = mg_checkpoint_prune(tr->save_path, (int)c->keep, step);
    if (rc == MG_OK && tr->rank == 0) {
        printf("checkpoint %lld: saved %s (%.0f ms)\n", (long long)step, where,
               (mg_cli_clock() - t0) * 1e3);
        fflush(stdout);
    }
    return rc;
}

/* A setting of the checkpoint that differs from the flags (nn/train_state.h). */
static int resume_diff(void *ctx, const mg_train_state_diff *d) {
    const trainer *tr = ctx;
    const char *by = mg_train_config_flag_of(d->key);
    if (d->must_match && by[0] == '-' && !strchr(by, ' '))
        return mg_error(MG_EINVAL, "cannot resume from %s: it was saved with %s = %s but %s is "
                        "%s (the model and optimizer must match: run with %s %s, or start a new "
                        "run without --resume)", d->path, d->key, d->saved, by, d->current, by,
                        d->saved);
    if (d->must_match)
        return mg_error(MG_EINVAL, "cannot resume from %s: it was saved with %s = %s but %s %s "
                        "(the model and optimizer must match)", d->path, d->key, d->saved, by,
                        d->current);
    if (tr->rank == 0)
        fprintf(stderr, "warning: resuming %s with %s %s, but it was saved with %s = %s; using "
                "%s\n", d->path, by, d->current, d->key, d->saved, d->current);
    return MG_OK;
}

int mg_train_resume(trainer *tr) {
    mg_train_config *c = &tr->cfg;
    char path[MG_PATH_MAX];
    int st = MG_OK;
    if (tr->rank == 0) st = mg_checkpoint_resolve(c->resume, path, sizeof path);
    if ((st = mg_status_agree(st)) != MG_OK) return st;
    if ((st = mg_comm_broadcast_bytes(tr->mesh->world, path, sizeof path, 0)) != MG_OK) return st;
    mg_train_state cur = {
        .step = 0, .seed = c->seed, .batch = c->batch, .data_file = c->data,
        .schedule = tr->sched, .clip = c->clip,
    };
    mg_train_state saved;
    st = mg_train_state_load(path, &tr->model, &tr->opt, &tr->plan, &cur, &saved, resume_diff,
                             tr);
    if (st != MG_OK) return st;
    if (saved.step > c->steps)
        return mg_error(MG_EINVAL, "checkpoint %s is at step %lld, past --steps %lld (the total "
                        "length of the run): give --steps %lld or more", path,
                        (long long)saved.step, (long long)c->steps, (long long)saved.step);
    tr->start_step = saved.step;
    snprintf(tr->resumed_from, sizeof tr->resumed_from, "%s", path);
    if (c->model == MG_MODEL_GPT) { /* windows come from (seed, step): nothing to seek */
        snprintf(tr->resume_note, sizeof tr->resume_note,
                 "resumed from %s: step %lld of %lld (saved on mesh %s [%s])", path,
                 (long long)saved.step, (long long)c->steps, saved.mesh, saved.parallel);
        return MG_OK;
    }
    /* the loader stood at batch `cursor` of its epoch: at most the epoch's batches */
    int64_t rows = mg_dataset_rows(tr->train);
    int64_t per_epoch = saved.batch >= 1 && saved.batch <= rows ? rows / saved.batch : 0;
    if (saved.data_cursor > per_epoch)
        return mg_error(MG_EFORMAT, "checkpoint %s: data.cursor %lld is past the %lld batches of "
                        "an epoch of %s (data.batch %lld): the file is damaged, or was saved "
                        "with another data set", path, (long long)saved.data_cursor,
                        (long long)per_epoch, c->data, (long long)saved.batch);
    st = mg_loader_seek(&tr->train_loader, saved.data_epoch, saved.data_cursor);
    if (st != MG_OK) return st;
    snprintf(tr->resume_note, sizeof tr->resume_note,
             "resumed from %s: step %lld of %lld (saved on mesh %s [%s]), data epoch %lld batch %lld",
             path, (long long)saved.step, (long long)c->steps, saved.mesh, saved.parallel,
             (long long)saved.data_epoch, (long long)saved.data_cursor);
    return MG_OK;
}
