/* checkpoint_files.c: checkpoints as files in a directory, and their
 * inspection (see checkpoint.h). Exports mg_checkpoint_resolve,
 * mg_checkpoint_prune, mg_checkpoint_info.
 *
 * A complete checkpoint is a file under its final name: saving writes
 * "<path>.tmp.<pid>" and renames it only when it is whole, so names containing
 * ".tmp." are leftovers of a crash and are never taken. A checkpoint's step is
 * read from its name "ckpt-<step>.h5", or else from its "step" attribute. */
#include "io/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "io/checkpoint_internal.h"
#include "io/h5util.h"
#include "status.h"

typedef struct {
    int64_t step;
    char name[256];
} found_ckpt;

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
    int count = 0, cap = 0;
    struct dirent *de;
    char full[4096];
    while ((de = readdir(dh))) {
        const char *name = de->d_name;
        size_t len = strlen(name);
        if (name[0] == '.' || strstr(name, ".tmp.") || len < 4 || len >= 256 ||
            strcmp(name + len - 3, ".h5") != 0)
            continue;
        snprintf(full, sizeof full, "%s/%s", dir, name);
        struct stat st;
        if (stat(full, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        int64_t step = step_from_name(name);
        if (step < 0) step = step_from_file(full);
        if (step == -2) continue;
        if (count == cap) {
            cap = cap ? 2 * cap : 16;
            found_ckpt *l = realloc(list, (size_t)cap * sizeof *l);
            if (!l) {
                free(list);
                closedir(dh);
                return mg_error(MG_ENOMEM, "checkpoint directory %s: out of memory", dir);
            }
            list = l;
        }
        list[count].step = step;
        snprintf(list[count].name, sizeof list[count].name, "%s", name);
        count++;
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
    else if ((size_t)snprintf(out, len, "%s/%s", path, list[0].name) >= len)
        rc = mg_error(MG_EINVAL, "checkpoint path %s/%s is too long", path, list[0].name);
    free(list);
    return rc;
}

int mg_checkpoint_prune(const char *dir, int keep) {
    mg_h5_init();
    if (!dir || keep < 1)
        return mg_error(MG_EINVAL, "checkpoint prune: keep must be >= 1 (got %d)", keep);
    int rank = 0, st = MG_OK;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        found_ckpt *list;
        int n;
        st = scan_dir(dir, &list, &n);
        char full[4096];
        for (int i = keep; st == MG_OK && i < n; i++) {
            snprintf(full, sizeof full, "%s/%s", dir, list[i].name);
            if (unlink(full) != 0 && errno != ENOENT)
                st = mg_error(MG_EIO, "checkpoint prune: cannot delete %s: %s", full,
                              strerror(errno));
        }
        if (st == MG_OK) free(list);
    }
    return mg_io_agree(MPI_COMM_WORLD, st);
}

/* ---- info -------------------------------------------------------------------- */

typedef struct {
    char **names;
    int n, cap;
} name_list;

static herr_t visit_link(hid_t group, const char *name, const H5L_info_t *info, void *data) {
    name_list *l = data;
    if (info->type != H5L_TYPE_HARD) return 0;
    hid_t obj = H5Oopen(group, name, H5P_DEFAULT);
    if (obj < 0) return 0;
    int is_dataset = H5Iget_type(obj) == H5I_DATASET;
    H5Oclose(obj);
    if (!is_dataset) return 0;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 32;
        char **p = realloc(l->names, (size_t)cap * sizeof *p);
        if (!p) return -1;
        l->names = p;
        l->cap = cap;
    }
    l->names[l->n] = strdup(name);
    if (!l->names[l->n]) return -1;
    l->n++;
    return 0;
}

/* Reads a whole dataset in slabs of <= 64 MiB along dim 0: 0 ok, 1 checksum
 * failure, -1 other failure (message in err). Describes it into desc. */
static int verify_dataset(hid_t file, const char *name, char *desc, size_t dlen, char *err,
                          size_t elen) {
    hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    if (d < 0) {
        snprintf(err, elen, "cannot open it");
        return -1;
    }
    hid_t type = H5Dget_type(d), space = H5Dget_space(d), dcpl = H5Dget_create_plist(d);
    int ndim = H5Sget_simple_extent_ndims(space), rc = 0;
    hsize_t dims[32] = {0}, chunk[32] = {0};
    int64_t shape[32] = {0};
    if (ndim > 32) ndim = 32;
    if (ndim > 0) H5Sget_simple_extent_dims(space, dims, NULL);
    for (int i = 0; i < ndim; i++) shape[i] = (int64_t)dims[i];
    int chunked = H5Pget_layout(dcpl) == H5D_CHUNKED;
    if (chunked) H5Pget_chunk(dcpl, ndim, chunk);
    unsigned flags;
    size_t nelem = 0;
    unsigned cd[4];
    int fletcher = chunked && H5Pget_filter_by_id2(dcpl, H5Z_FILTER_FLETCHER32, &flags, &nelem, cd,
                                                   0, NULL, NULL) >= 0;
    char sbuf[200], cbuf[200], tname[32];
    int64_t cshape[32];
    for (int i = 0; i < ndim; i++) cshape[i] = (int64_t)chunk[i];
    snprintf(desc, dlen, "%s  %s  %s%s  %s", mg_shape_format(sbuf, sizeof sbuf, ndim, shape),
             mg_h5_type_name(type, tname, sizeof tname), chunked ? "chunks " : "contiguous",
             chunked ? mg_shape_format(cbuf, sizeof cbuf, ndim, cshape) : "",
             fletcher ? "fletcher32" : "no checksum");

    int64_t inner = 1, rows = ndim > 0 ? shape[0] : 1;
    for (int i = 1; i < ndim; i++) inner *= shape[i];
    int64_t per = ndim > 0 && inner > 0 ? (int64_t)(16 << 20) / inner : 1;
    if (per < 1) per = 1;
    if (chunked && ndim > 0 && per > (int64_t)chunk[0]) per -= per % (int64_t)chunk[0];
    if (per > rows) per = rows;
    float *buf = (rows * inner > 0) ? malloc((size_t)(per * inner) * sizeof *buf) : NULL;
    if (rows * inner > 0 && !buf) {
        snprintf(err, elen, "out of memory");
        rc = -1;
    }
    for (int64_t r = 0; rc == 0 && buf && r < rows; r += per) {
        hsize_t start[32] = {0}, count[32];
        for (int i = 0; i < ndim; i++) count[i] = dims[i];
        hid_t fs = H5Scopy(space), ms;
        if (ndim > 0) {
            start[0] = (hsize_t)r;
            count[0] = (hsize_t)(r + per <= rows ? per : rows - r);
            H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
            ms = H5Screate_simple(ndim, count, NULL);
        } else {
            ms = H5Screate(H5S_SCALAR);
        }
        if (H5Dread(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf) < 0) {
            mg_h5_err he;
            mg_h5_error_get(&he);
            snprintf(err, elen, "%s", he.innermost);
            rc = he.checksum ? 1 : -1;
        }
        H5Sclose(ms);
        H5Sclose(fs);
    }
    free(buf);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Tclose(type);
    H5Dclose(d);
    return rc;
}

int mg_checkpoint_info(const char *path, FILE *out) {
    mg_h5_init();
    if (!path || !out) return mg_error(MG_EINVAL, "checkpoint info: give a path");
    int st = mg_file_precheck(path, "checkpoint");
    if (st != MG_OK) return st;
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) {
        mg_h5_err he;
        mg_h5_error_get(&he);
        return he.truncated ? mg_error(MG_EFORMAT,
                                       "checkpoint %s is truncated (shorter than its "
                                       "HDF5 superblock says): the file is incomplete or "
                                       "corrupt",
                                       path)
                            : mg_error(MG_EFORMAT,
                                       "cannot open checkpoint %s: %s: the file is "
                                       "damaged",
                                       path, he.innermost);
    }
    struct stat sb;
    stat(path, &sb);
    char format[256] = "?", version[64] = "?";
    mg_h5_attr_read_text(file, "format", format, sizeof format);
    mg_h5_attr_read_text(file, "version", version, sizeof version);
    double size = (double)sb.st_size;
    fprintf(out, "checkpoint: %s (%.1f %s)\n", path, size >= 1e6 ? size / 1e6 : size / 1e3,
            size >= 1e6 ? "MB" : "kB");
    fprintf(out, "format: %s, version %s\n", format, version);
    int format_st = mg_ckpt_check_format(file, path);
    char format_msg[1024];
    snprintf(format_msg, sizeof format_msg, "%s", mg_last_error());
    if (format_st != MG_OK && strcmp(format, "?") == 0) {
        H5Fclose(file);
        return mg_error(format_st, "%s", format_msg);
    }

    mg_ckpt_attr *attrs = calloc(256, sizeof *attrs);
    mg_ckpt_attr_list al = {attrs, attrs ? 256 : 0, 0, 0};
    if (attrs) mg_ckpt_attrs_collect(file, &al);
    fprintf(out, "attributes (%d):\n", al.n + al.dropped);
    for (int i = 0; i < al.n; i++) fprintf(out, "  %s = %s\n", attrs[i].key, attrs[i].value);
    if (al.dropped) fprintf(out, "  ... and %d more\n", al.dropped);
    free(attrs);

    name_list names = {0};
    H5Lvisit(file, H5_INDEX_NAME, H5_ITER_INC, visit_link, &names);
    fprintf(out, "datasets (%d):\n", names.n);
    int bad = 0;
    char first_bad[512] = "", desc[600], err[300], bad_list[1024] = "";
    int bad_checksum = 0;
    for (int i = 0; i < names.n; i++) {
        err[0] = '\0';
        int rc = verify_dataset(file, names.names[i], desc, sizeof desc, err, sizeof err);
        fprintf(out, "  /%s  %s  %s%s%s\n", names.names[i], desc,
                rc == 0   ? "ok"
                : rc == 1 ? "CHECKSUM MISMATCH"
                          : "UNREADABLE",
                rc < 0 ? ": " : "", rc < 0 ? err : "");
        if (rc != 0) {
            if (!bad) {
                snprintf(first_bad, sizeof first_bad, "%s", names.names[i]);
                bad_checksum = rc == 1;
            }
            size_t used = strlen(bad_list);
            snprintf(bad_list + used, sizeof bad_list - used, "%s/%s", bad ? ", " : "",
                     names.names[i]);
            bad++;
        }
    }
    if (bad == 0)
        fprintf(out, "checksums: all %d datasets verify\n", names.n);
    else
        fprintf(out, "checksums: %d of %d datasets FAIL: %s\n", bad, names.n, bad_list);
    for (int i = 0; i < names.n; i++) free(names.names[i]);
    free(names.names);
    H5Fclose(file);
    if (bad)
        return bad_checksum ? mg_error(MG_EFORMAT,
                                       "checksum mismatch in %s dataset /%s: the file is "
                                       "corrupt (%d of %d datasets fail)",
                                       path, first_bad, bad, names.n)
                            : mg_error(MG_EFORMAT,
                                       "checkpoint %s: dataset /%s cannot be read: the file "
                                       "is damaged (%d of %d datasets fail)",
                                       path, first_bad, bad, names.n);
    if (format_st != MG_OK) return mg_error(format_st, "%s", format_msg);
    return MG_OK;
}
