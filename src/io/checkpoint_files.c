/* checkpoint_files.c: checkpoints as files in a directory (see
 * checkpoint.h). Exports mg_checkpoint_resolve, mg_checkpoint_prune.
 *
 * A complete checkpoint is a file under its final name: saving writes
 * "<path>.tmp.<host>.<pid>.<random>" and renames it only when it is whole, so
 * names containing ".tmp." are leftovers of a crash and are never taken. A
 * checkpoint's step is read from its name "ckpt-<step>.h5", or else from its
 * "step" attribute. Pruning deletes only files named ckpt-<step>.h5 (the names
 * a directory save gives) that are meshgrad checkpoints older than the one
 * just written. */
#include "io/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "dist/comm.h"
#include "io/checkpoint_internal.h"
#include "io/files.h"
#include "io/h5util.h"
#include "status.h"

typedef struct {
    int64_t step;
    char name[256];
} found_ckpt;

static int found_push(found_ckpt **list, int *count, int *cap, int64_t step, const char *name) {
    if (*count == *cap) {
        int c = *cap ? 2 * *cap : 16;
        found_ckpt *l = realloc(*list, (size_t)c * sizeof *l);
        if (!l) return mg_error(MG_ENOMEM, "checkpoint directory: out of memory");
        *list = l;
        *cap = c;
    }
    (*list)[*count].step = step;
    snprintf((*list)[*count].name, sizeof (*list)[*count].name, "%s", name);
    (*count)++;
    return MG_OK;
}

/* step of a file named ckpt-<digits>.h5, or -1 */
static int64_t step_from_name(const char *name) {
    if (strncmp(name, "ckpt-", 5) != 0) return -1;
    const char *p = name + 5, *q = p;
    while (*q >= '0' && *q <= '9') q++;
    if (q == p || q - p > 18 || strcmp(q, ".h5") != 0) return -1;
    return strtoll(p, NULL, 10);
}

/* step attribute of an HDF5 checkpoint, -1 when absent; -2 when not a checkpoint */
static int64_t step_from_file(const char *path) {
    if (H5Fis_hdf5(path) <= 0) return -2;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return -2;
    int64_t step = -2;
    char text[64];
    if (mg_ckpt_check_format(f, path) == MG_OK) {
        step = -1;
        if (mg_h5_attr_read_text(f, "step", text, sizeof text) == 0) {
            char *end;
            long long v = strtoll(text, &end, 10);
            if (!*end && v >= 0) step = v;
        }
    }
    H5Fclose(f);
    mg_clear_error();
    return step;
}

static int found_cmp(const void *a, const void *b) { /* newest first */
    const found_ckpt *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? 1 : -1;
    return -strcmp(x->name, y->name);
}

/* The complete checkpoints in dir, newest first. */
static int scan_dir(const char *dir, found_ckpt **out, int *n) {
    *out = NULL;
    *n = 0;
    DIR *dh = opendir(dir);
    if (!dh)
        return mg_error(MG_EIO, "cannot read checkpoint directory %s: %s", dir, strerror(errno));
    found_ckpt *list = NULL;
    int count = 0, cap = 0, st = MG_OK;
    struct dirent *de;
    char full[MG_PATH_MAX];
    while (st == MG_OK && (de = readdir(dh))) {
        const char *name = de->d_name;
        size_t len = strlen(name);
        if (name[0] == '.' || strstr(name, ".tmp.") || len < 4 || len >= 256 ||
            strcmp(name + len - 3, ".h5") != 0)
            continue;
        if ((size_t)snprintf(full, sizeof full, "%s/%s", dir, name) >= sizeof full) continue;
        struct stat sb;
        if (stat(full, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        int64_t step = step_from_name(name);
        if (step < 0) step = step_from_file(full);
        if (step != -2) st = found_push(&list, &count, &cap, step, name);
    }
    if (st != MG_OK) {
        free(list);
        closedir(dh);
        return st;
    }
    closedir(dh);
    if (count > 1) qsort(list, (size_t)count, sizeof *list, found_cmp);
    *out = list;
    *n = count;
    return MG_OK;
}

int mg_checkpoint_resolve(const char *path, char *out, size_t len) {
    mg_h5_init();
    struct stat st;
    if (!path || !out || len == 0) return mg_error(MG_EINVAL, "checkpoint: resolve needs a path");
    if (stat(path, &st) != 0)
        return mg_error(MG_EIO, "no checkpoint at %s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
        if ((size_t)snprintf(out, len, "%s", path) >= len)
            return mg_error(MG_EINVAL, "checkpoint path %s is too long", path);
        return MG_OK;
    }
    found_ckpt *list;
    int n, rc = scan_dir(path, &list, &n);
    if (rc != MG_OK) return rc;
    if (n == 0)
        rc = mg_error(MG_EIO,
                      "no complete checkpoint in directory %s (looked for ckpt-<step>.h5 "
                      "and *.h5 checkpoints; *.tmp.* files are ignored)",
                      path);
    else {
        const char *sep = path[strlen(path) - 1] == '/' ? "" : "/"; // "ckpts/" as "ckpts"
        if ((size_t)snprintf(out, len, "%s%s%s", path, sep, list[0].name) >= len)
            rc = mg_error(MG_EINVAL, "checkpoint path %s%s%s is too long", path, sep, list[0].name);
    }
    free(list);
    return rc;
}

int mg_checkpoint_prune(const char *dir, int keep, int64_t newest) {
    mg_h5_init();
    if (!dir || keep < 1)
        return mg_error(MG_EINVAL, "checkpoint prune: keep must be >= 1 (got %d)", keep);
    mg_comm *comm = mg_comm_world();
    if (!comm) return mg_last_code();
    int st = MG_OK;
    if (comm->rank == 0) {
        DIR *dh = opendir(dir);
        if (!dh)
            st = mg_error(MG_EIO, "checkpoint prune: cannot read %s: %s", dir, strerror(errno));
        found_ckpt *list = NULL;
        int count = 0, cap = 0;
        struct dirent *de;
        char full[MG_PATH_MAX];
        while (st == MG_OK && (de = readdir(dh))) { /* ours by name, older than the newest */
            int64_t step = step_from_name(de->d_name);
            struct stat sb;
            if (step < 0 || step >= newest ||
                (size_t)snprintf(full, sizeof full, "%s/%s", dir, de->d_name) >= sizeof full ||
                lstat(full, &sb) != 0 || !S_ISREG(sb.st_mode))
                continue;
            st = found_push(&list, &count, &cap, step, de->d_name);
        }
        if (dh) closedir(dh);
        if (count > 1) qsort(list, (size_t)count, sizeof *list, found_cmp);
        for (int i = keep - 1; st == MG_OK && i < count; i++) { /* the newest is one of keep */
            snprintf(full, sizeof full, "%s/%s", dir, list[i].name);
            if (!mg_checkpoint_is_one(full)) continue; /* named like ours, but not ours */
            if (unlink(full) != 0 && errno != ENOENT)
                st = mg_error(MG_EIO, "checkpoint prune: cannot delete %s: %s", full,
                              strerror(errno));
        }
        free(list);
    }
    return mg_io_agree(comm, st);
}
