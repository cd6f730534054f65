/* trainer_ckpt.c: a training run's checkpoints (see meshgrad_train.h,
 * docs/CHECKPOINTS.md): a save writes the run (nn/train_state.h)
 * atomically; a resume compares the checkpoint's settings with the run's
 * (the model and optimizer must match; other settings warn, and the run's
 * win), loads it, and checks its data position against the data set.
 * Exports mg_trainer_save, mg_trainer_resume (meshgrad_train.h),
 * mg_trainer_load_params (trainer.h). */
#include <stdio.h>
#include <string.h>

#include "io/checkpoint.h"
#include "nn/train_state.h"
#include "status.h"
#include "train/trainer.h"

/* The run as a checkpoint says where it stands. */
static mg_train_state state_of(const mg_trainer *tr) {
    const mg_train_config *c = &tr->cfg;
    return (mg_train_state){
        .step = tr->step, .seed = c->seed, .data_epoch = tr->train_loader.epoch,
        .data_cursor = tr->train_loader.cursor, .batch = c->batch, .data_file = c->data,
        .schedule = tr->sched, .clip = c->clip,
    };
}

int mg_trainer_save(mg_trainer *tr, const char *path) {
    if (!tr || !path) return mg_error(MG_EINVAL, "mg_trainer_save: the trainer or path is NULL");
    mg_train_state st = state_of(tr);
    return mg_train_state_save(path, &tr->model, &tr->opt, &tr->plan, &st);
}

/* A setting of the checkpoint that differs from the flags (nn/train_state.h). */
static int resume_diff(void *ctx, const mg_train_state_diff *d) {
    mg_trainer *tr = ctx;
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
    size_t n = strlen(tr->resume_changes); /* "key: saved -> now; ..." for the caller */
    snprintf(tr->resume_changes + n, sizeof tr->resume_changes - n, "%s%s: %s -> %s",
             n ? "; " : "", d->key, d->saved, d->current);
    return MG_OK;
}

int mg_trainer_resume(mg_trainer *tr, const char *from, char *note, size_t len) {
    if (!tr || !from) return mg_error(MG_EINVAL, "mg_trainer_resume: the trainer or path is NULL");
    mg_train_config *c = &tr->cfg;
    char path[MG_PATH_MAX], unused[8];
    if (!note) note = unused, len = sizeof unused;
    int st = MG_OK;
    tr->resume_changes[0] = '\0';
    if (tr->rank == 0) st = mg_checkpoint_resolve(from, path, sizeof path);
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
    tr->step = saved.step;
    snprintf(tr->resumed_from, sizeof tr->resumed_from, "%s", path);
    if (mg_model_kind_is_lm(c->model)) { /* windows come from (seed, step): nothing to seek */
        snprintf(note, len, "resumed from %s: step %lld of %lld (saved on mesh %s [%s])", path,
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
    snprintf(note, len,
             "resumed from %s: step %lld of %lld (saved on mesh %s [%s]), data epoch %lld batch %lld",
             path, (long long)saved.step, (long long)c->steps, saved.mesh, saved.parallel,
             (long long)saved.data_epoch, (long long)saved.data_cursor);
    return MG_OK;
}

int mg_trainer_load_params(mg_trainer *tr, const char *path) {
    if (!tr || !path) return mg_error(MG_EINVAL, "mg_trainer_load_params: the trainer or path is NULL");
    return mg_train_state_load_params(path, &tr->model);
}
