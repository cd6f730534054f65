/* checkpoint_info.c: `meshgrad ckpt info`: what a checkpoint holds, and
 * whether all of it verifies (see checkpoint.h). Exports mg_checkpoint_info.
 *
 * Serial (one process, serial HDF5). The walk over the file is bounded (at
 * most MAX_OBJECTS links, groups nested at most MAX_DEPTH deep: a checkpoint
 * has /params/<name> and /optim/<name>/<state>, or /optim/<optimizer>/<name>/
 * <state> with named optimizers), every dataset is checked
 * before it is read (checkpoint_check.c: layout, checksum filter, every chunk
 * written, a size the file can hold), then read in slabs with its checksums
 * verified and its values checked to be finite. So any file, however made,
 * is judged in time proportional to its size. What it prints from the file
 * (attributes, dataset names, messages) has its control bytes escaped
 * (text.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <hdf5.h>

#include "io/checkpoint_internal.h"
#include "io/h5util.h"
#include "status.h"
#include "text.h"

#define MAX_OBJECTS 4096
#define MAX_DEPTH 4

typedef struct {
    char **names;
    int n, cap;
    int objects;       /* links seen */
    char problem[320]; /* why the walk stopped, "" when it did not */
} walk_state;

typedef struct {
    walk_state *w;
    const char *prefix; /* "" or "params/" */
    int depth;
} walk_at;

static herr_t walk_link(hid_t group, const char *name, const H5L_info_t *info, void *data) {
    walk_at *at = data;
    walk_state *w = at->w;
    char path[640];
    if (++w->objects > MAX_OBJECTS) {
        snprintf(w->problem, sizeof w->problem, "it holds more than %d objects", MAX_OBJECTS);
        return 1;
    }
    if ((size_t)snprintf(path, sizeof path, "%s%s", at->prefix, name) >= sizeof path) {
        snprintf(w->problem, sizeof w->problem, "an object name is longer than %zu characters",
                 sizeof path - 1);
        return 1;
    }
    if (info->type != H5L_TYPE_HARD) { /* not followed: they may lead into another file */
        snprintf(w->problem, sizeof w->problem, "/%.200s is %s link, which meshgrad never "
                 "writes and does not follow", path,
                 info->type == H5L_TYPE_EXTERNAL ? "an external" : "a soft");
        return 1;
    }
    hid_t obj = H5Oopen(group, name, H5P_DEFAULT);
    if (obj < 0) return 0;
    H5I_type_t type = H5Iget_type(obj);
    herr_t rc = 0;
    if (type == H5I_GROUP) {
        if (at->depth + 1 >= MAX_DEPTH) {
            snprintf(w->problem, sizeof w->problem,
                     "group /%.200s is nested deeper than a checkpoint's groups", path);
            rc = 1;
        } else {
            char prefix[sizeof path + 1];
            snprintf(prefix, sizeof prefix, "%s/", path);
            walk_at inner = {w, prefix, at->depth + 1};
            hsize_t idx = 0;
            rc = H5Literate(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, walk_link, &inner);
        }
    } else if (type == H5I_DATASET) {
        if (w->n == w->cap) {
            int cap = w->cap ? 2 * w->cap : 32;
            char **p = realloc(w->names, (size_t)cap * sizeof *p);
            if (!p) rc = -1;
            else {
                w->names = p;
                w->cap = cap;
            }
        }
        if (rc == 0 && !(w->names[w->n] = strdup(path))) rc = -1;
        if (rc == 0) w->n++;
    }
    H5Oclose(obj);
    return rc;
}

/* Reads a whole dataset in slabs of <= 64 MiB along dim 0: 0 ok, 1 checksum
 * failure, 2 refused before reading, 3 non-finite values, -1 other failure
 * (the reason in err). Describes the dataset into desc. */
static int verify_dataset(hid_t file, const char *path, const char *name, uint64_t file_bytes,
                          char *desc, size_t dlen, char *err, size_t elen) {
    hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    if (d < 0) {
        snprintf(desc, dlen, "?");
        snprintf(err, elen, "cannot open it");
        return -1;
    }
    hid_t type = H5Dget_type(d), space = H5Dget_space(d), dcpl = H5Dget_create_plist(d);
    int ndim = H5Sget_simple_extent_ndims(space), rc = 0;
    hsize_t dims[MG_MAX_DIMS] = {0}, chunk[MG_MAX_DIMS] = {0};
    int64_t shape[MG_MAX_DIMS] = {0}, cshape[MG_MAX_DIMS] = {0};
    char sbuf[200], cbuf[200], tname[32];
    if (mg_ckpt_check_layout(d, path, name, file_bytes) != MG_OK) {
        snprintf(desc, dlen, "%s", mg_h5_type_name(type, tname, sizeof tname));
        snprintf(err, elen, "%s", mg_last_error());
        rc = 2;
        goto done;
    }
    H5Sget_simple_extent_dims(space, dims, NULL);
    for (int i = 0; i < ndim; i++) shape[i] = (int64_t)dims[i];
    int chunked = H5Pget_layout(dcpl) == H5D_CHUNKED;
    if (chunked) H5Pget_chunk(dcpl, ndim, chunk);
    for (int i = 0; i < ndim; i++) cshape[i] = (int64_t)chunk[i];
    unsigned flags, cd[4];
    size_t nelem = 4;
    int fletcher = chunked && H5Pget_filter_by_id2(dcpl, H5Z_FILTER_FLETCHER32, &flags, &nelem, cd,
                                                   0, NULL, NULL) >= 0;
    snprintf(desc, dlen, "%s  %s  %s%s  %s", mg_shape_format(sbuf, sizeof sbuf, ndim, shape),
             mg_h5_type_name(type, tname, sizeof tname), chunked ? "chunks " : "contiguous",
             chunked ? mg_shape_format(cbuf, sizeof cbuf, ndim, cshape) : "",
             fletcher ? "fletcher32" : "no checksum");
    if (!mg_h5_is_float32(type)) {
        snprintf(err, elen, "it is %s, not float32", tname);
        rc = 2;
        goto done;
    }

    int64_t inner = 1, rows = ndim > 0 ? shape[0] : 1, nonfinite = 0, first = -1;
    for (int i = 1; i < ndim; i++) inner *= shape[i];
    int64_t per = ndim > 0 && inner > 0 ? (int64_t)(16 << 20) / inner : 1;
    if (per < 1) per = 1;
    if (chunked && ndim > 0 && per > (int64_t)chunk[0]) per -= per % (int64_t)chunk[0];
    if (per > rows) per = rows;
    float *buf = (rows * inner > 0) ? malloc((size_t)(per * inner) * sizeof *buf) : NULL, bad = 0;
    if (rows * inner > 0 && !buf) {
        snprintf(err, elen, "out of memory");
        rc = -1;
    }
    for (int64_t r = 0; rc == 0 && buf && r < rows; r += per) {
        hsize_t start[MG_MAX_DIMS] = {0}, count[MG_MAX_DIMS];
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
        int64_t n = ndim > 0 ? (int64_t)count[0] * inner : 1;
        for (int64_t i = 0; rc == 0 && i < n; i++) {
            if (mg_ckpt_first_nonfinite(buf + i, 1) < 0) continue;
            if (first < 0) {
                first = r * inner + i;
                bad = buf[i];
            }
            nonfinite++;
        }
        H5Sclose(ms);
        H5Sclose(fs);
    }
    free(buf);
    if (rc == 0 && nonfinite > 0) {
        char where[160];
        mg_ckpt_format_index(where, sizeof where, ndim, shape, NULL, first);
        snprintf(err, elen, "%lld value%s (the first, %g, at %s)", (long long)nonfinite,
                 nonfinite == 1 ? "" : "s", (double)bad, where);
        rc = 3;
    }
done:
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Tclose(type);
    H5Dclose(d);
    return rc;
}

static const char *verdict(int rc) {
    switch (rc) {
    case 0: return "ok";
    case 1: return "CHECKSUM MISMATCH";
    case 2: return "REFUSED: ";
    case 3: return "NON-FINITE: ";
    default: return "UNREADABLE: ";
    }
}

/* The datasets: listed, verified, summed up; MG_OK or the first failure. */
static int verify_all(hid_t file, const char *path, uint64_t file_bytes, FILE *out) {
    walk_state w = {0};
    walk_at top = {&w, "", 0};
    hsize_t idx = 0;
    H5Literate(file, H5_INDEX_NAME, H5_ITER_INC, &idx, walk_link, &top);
    fprintf(out, "datasets (%d%s):\n", w.n, w.problem[0] ? ", the walk stopped" : "");
    int bad = 0, first_rc = 0;
    char first_bad[640] = "", first_err[1100] = "", desc[600], err[1100], bad_list[1024] = "";
    for (int i = 0; i < w.n; i++) {
        err[0] = '\0';
        int rc = verify_dataset(file, path, w.names[i], file_bytes, desc, sizeof desc, err,
                                sizeof err);
        fputs("  /", out); /* names and messages from the file: escaped (text.h) */
        mg_text_fputs(w.names[i], out);
        fprintf(out, "  %s  %s", desc, verdict(rc));
        mg_text_fputs(rc > 1 || rc < 0 ? err : "", out);
        fputc('\n', out);
        if (rc == 0) continue;
        if (!bad) {
            snprintf(first_bad, sizeof first_bad, "%s", w.names[i]);
            snprintf(first_err, sizeof first_err, "%s", err);
            first_rc = rc;
        }
        size_t used = strlen(bad_list);
        char safe[200];
        snprintf(bad_list + used, sizeof bad_list - used, "%s/%s", bad ? ", " : "",
                 mg_text_safe(w.names[i], safe, sizeof safe));
        bad++;
    }
    if (bad == 0 && !w.problem[0])
        fprintf(out, "checksums: all %d datasets verify\n", w.n);
    else if (bad)
        fprintf(out, "checksums: %d of %d datasets FAIL: %s\n", bad, w.n, bad_list);
    int n = w.n;
    for (int i = 0; i < w.n; i++) free(w.names[i]);
    free(w.names);
    if (w.problem[0])
        return mg_error(MG_EFORMAT, "checkpoint %s is not a meshgrad checkpoint: %s", path,
                        w.problem);
    switch (first_rc) {
    case 0: return MG_OK;
    case 1:
        return mg_error(MG_EFORMAT, "checksum mismatch in %s dataset /%s: the file is corrupt "
                        "(%d of %d datasets fail)", path, first_bad, bad, n);
    case 2: return mg_error(MG_EFORMAT, "%s", first_err);
    case 3:
        return mg_error(MG_EFORMAT, "checkpoint %s: dataset /%s holds non-finite values: %s "
                        "(%d of %d datasets fail)", path, first_bad, first_err, bad, n);
    default:
        return mg_error(MG_EFORMAT, "checkpoint %s: dataset /%s cannot be read: the file is "
                        "damaged (%d of %d datasets fail)", path, first_bad, bad, n);
    }
}

int mg_checkpoint_info(const char *path, FILE *out) {
    mg_h5_init();
    if (!path || !out) return mg_error(MG_EINVAL, "checkpoint info: give a path");
    int st = mg_file_precheck(path, "checkpoint");
    if (st != MG_OK) return st;
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) return mg_ckpt_open_error(path);
    struct stat sb;
    stat(path, &sb);
    char format[256] = "?", version[64] = "?";
    mg_h5_attr_read_text(file, "format", format, sizeof format);
    mg_h5_attr_read_text(file, "version", version, sizeof version);
    double size = (double)sb.st_size;
    /* what comes from the file (and the path, which may be a name found in a
     * directory) is printed with its control bytes escaped (text.h): a file
     * must not rewrite the lines that say whether it verifies */
    fputs("checkpoint: ", out);
    mg_text_fputs(path, out);
    fprintf(out, " (%.1f %s)\nformat: ", size >= 1e6 ? size / 1e6 : size / 1e3,
            size >= 1e6 ? "MB" : "kB");
    mg_text_fputs(format, out);
    fputs(", version ", out);
    mg_text_fputs(version, out);
    fputc('\n', out);
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
    fprintf(out, "attributes (%d%s):\n", al.n + al.dropped, al.n + al.dropped >= 4096 ? "+" : "");
    for (int i = 0; i < al.n; i++) {
        fputs("  ", out);
        mg_text_fputs(attrs[i].key, out);
        fputs(" = ", out);
        mg_text_fputs(attrs[i].value, out);
        fputc('\n', out);
    }
    if (al.dropped) fprintf(out, "  ... and %d more\n", al.dropped);
    free(attrs);

    st = verify_all(file, path, (uint64_t)sb.st_size, out);
    H5Fclose(file);
    if (st != MG_OK) return st;
    if (format_st != MG_OK) return mg_error(format_st, "%s", format_msg);
    return MG_OK;
}
