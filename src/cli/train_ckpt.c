/* train_ckpt.c: where `meshgrad train` may write, its checkpoints, and
 * resuming (see train.h, docs/CHECKPOINTS.md).
 * - Before step 1: --save and --metrics must not name the data set, the
 *   config file or each other; --save is a directory (created when the name
 *   ends in '/') or a file that is absent or a meshgrad checkpoint; a new run
 *   (no --resume) does not save into a directory that already holds
 *   checkpoints, nor over a file that is one, unless --overwrite is given.
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
#include "dist/mesh.h"
#include "io/checkpoint.h"
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

/* Rank 0: a new run's --save FILE that is a checkpoint already (of an
 * earlier run, of this model or another): refused as the directory form
 * refuses a directory of checkpoints, naming what the file holds. */
static int refuse_replace(trainer *tr) {
    const mg_train_config *c = &tr->cfg;
    char model[64], step[32], what[128] = "";
    if (mg_checkpoint_peek_attr(tr->save_path, "model", model, sizeof model) == 0 &&
        mg_checkpoint_peek_attr(tr->save_path, "step", step, sizeof step) == 0)
        snprintf(what, sizeof what, " (model %s, step %s)", model, step);
    return mg_error(MG_EINVAL, "--save %s already holds a checkpoint%s; a new run would replace "
                    "it: resume that run (--resume %s), save to another path, or give "
                    "--overwrite", c->save, what, c->save);
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
        int st = check_save_dir(tr, dir), exists = 0;
        if (st == MG_OK)
            st = mg_file_replaceable(tr->save_path, "meshgrad checkpoint", mg_checkpoint_is_one,
                                     &exists);
        if (st == MG_OK && exists && !c->resume[0] && !c->overwrite)
            st = refuse_replace(tr);
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
    double t0 = mg_clock();
    int rc = mg_trainer_save(tr->run, where);
    if (rc == MG_OK && tr->save_dir && c->keep > 0)
        rc = mg_checkpoint_prune(tr->save_path, (int)c->keep, step);
    if (rc == MG_OK && tr->rank == 0) {
        printf("checkpoint %lld: saved %s (%.0f ms)\n", (long long)step, where,
               (mg_clock() - t0) * 1e3);
        fflush(stdout);
    }
    return rc;
}

