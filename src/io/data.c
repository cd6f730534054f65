/* data.c: HDF5 data sets and the batch loader (see data.h).
 * Exports mg_dataset_open/close/rows/sample_ndim/sample_shape/num_classes,
 * mg_dataset_read_rows, mg_loader_init/seek/free/next.
 *
 * Every collective HDF5 call (open, close, the reads) runs under the
 * collective watchdog, so a rank that stops answering ends the job with a
 * message naming it instead of leaving the others waiting in the read. Inputs
 * are checked to be finite as they are read (a NaN is refused naming its row),
 * labels once when the split is opened.
 *
 * A read of rows in any order: the rows are sorted and made unique, runs of
 * consecutive rows become one hyperslab each (a union on dim 0), the union is
 * read collectively into a scratch buffer in file order, and each requested
 * position is copied from there. Ranks with no rows take part with an empty
 * selection. Scratch buffers live in the data set and only grow, so the steady
 * state allocates nothing. */
#include "io/data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>

#include "backend/device.h"
#include "dist/watchdog.h"
#include "io/files.h"
#include "io/h5util.h"
#include "rng.h"
#include "status.h"

/* the largest label: labels travel as floats, exact up to 2^24 */
#define MAX_LABEL 16777215

struct mg_dataset {
    char path[MG_PATH_MAX];
    char split[64];
    mg_comm *comm;
    hid_t file, inputs, labels, dxpl;
    int64_t rows;
    int sample_ndim;
    int64_t sample_shape[MG_MAX_DIMS];
    int64_t sample_numel;
    int num_classes;
    /* scratch (grown, never shrunk) */
    int64_t *pairs, *uniq, *slot; /* pairs: (row, position) x n; uniq: u rows; slot: n */
    int64_t index_cap;
    void *buf;
    size_t buf_cap;
    int32_t *lab; /* labels as read */
    int64_t lab_cap;
};

static void dataset_release(mg_dataset *ds) {
    if (ds->dxpl > 0) H5Pclose(ds->dxpl);
    if (ds->labels > 0) H5Dclose(ds->labels);
    if (ds->inputs > 0) H5Dclose(ds->inputs);
    if (ds->file > 0) {
        mg_watchdog_begin_comm("data set close", ds->comm->mpi);
        H5Fclose(ds->file);
        mg_watchdog_end();
    }
    free(ds->pairs);
    free(ds->uniq);
    free(ds->slot);
    free(ds->buf);
    free(ds->lab);
    free(ds);
}

/* Opens /<split>/<name> and checks its type and rank; fills dims. */
static int open_member(mg_dataset *ds, const char *name, int want_float, hid_t *out, int *ndim,
                       hsize_t *dims) {
    char rel[160], tname[32];
    snprintf(rel, sizeof rel, "%s/%s", ds->split, name);
    if (!mg_h5_exists(ds->file, rel))
        return mg_error(MG_EFORMAT,
                        "%s: dataset /%s is missing (a data set needs /%s/inputs "
                        "float32 (N, ...) and /%s/labels int32 (N))",
                        ds->path, rel, ds->split, ds->split);
    hid_t d;
    int st = mg_h5_open_dataset(ds->file, rel, ds->path, &d);
    if (st != MG_OK) return st;
    *out = d;
    hid_t type = H5Dget_type(d), space = H5Dget_space(d);
    int ok_type = want_float ? mg_h5_is_float32(type) : mg_h5_is_int32(type);
    mg_h5_type_name(type, tname, sizeof tname);
    *ndim = H5Sget_simple_extent_ndims(space);
    if (*ndim > 0 && *ndim < MG_MAX_DIMS) H5Sget_simple_extent_dims(space, dims, NULL);
    H5Tclose(type);
    H5Sclose(space);
    if (!ok_type)
        return mg_error(MG_EFORMAT, "%s: dataset /%s is %s, expected %s", ds->path, rel, tname,
                        want_float ? "float32" : "int32");
    if (*ndim < 1 || *ndim >= MG_MAX_DIMS || (!want_float && *ndim != 1))
        return mg_error(MG_EFORMAT, "%s: dataset /%s has %d dims, expected %s", ds->path, rel,
                        *ndim, want_float ? "1 to 7 (N, ...)" : "1 (N)");
    return mg_h5_check_stored(d, ds->path, rel, 4);
}

/* Reads every label once: checks they are >= 0 and finds the class count. */
static int scan_labels(mg_dataset *ds) {
    int32_t *all = malloc((size_t)ds->rows * sizeof *all);
    if (!all)
        return mg_error(MG_ENOMEM, "%s: out of memory reading %lld labels", ds->path,
                        (long long)ds->rows);
    mg_watchdog_begin_comm("data set read", ds->comm->mpi);
    herr_t r = H5Dread(ds->labels, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, ds->dxpl, all);
    mg_watchdog_end();
    if (r < 0) {
        mg_h5_err e;
        mg_h5_error_get(&e);
        free(all);
        return mg_error(MG_EIO, "%s: reading /%s/labels failed: %s", ds->path, ds->split,
                        e.innermost);
    }
    int32_t max = 0;
    for (int64_t i = 0; i < ds->rows; i++) {
        if (all[i] < 0 || all[i] > MAX_LABEL) {
            int32_t bad = all[i];
            free(all);
            return mg_error(MG_EFORMAT,
                            "%s: /%s/labels row %lld holds %d; labels must be "
                            "class indices 0..%d",
                            ds->path, ds->split, (long long)i, bad, MAX_LABEL);
        }
        if (all[i] > max) max = all[i];
    }
    free(all);
    ds->num_classes = max + 1;
    return MG_OK;
}

mg_dataset *mg_dataset_open(const char *path, const char *split, mg_comm *comm) {
    mg_h5_init();
    if (!comm || !split || !split[0] || strlen(split) >= 64 || strchr(split, '/'))
        return mg_error_null(MG_EINVAL, "data set: give a communicator, a file path and a split "
                                        "name such as \"train\" or \"test\"");
    if (mg_path_check(path, "data set", 0) != MG_OK) return NULL;
    mg_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) return mg_error_null(MG_ENOMEM, "data set: out of memory");
    snprintf(ds->path, sizeof ds->path, "%s", path);
    snprintf(ds->split, sizeof ds->split, "%s", split);
    ds->comm = comm;

    int st = mg_io_agree(comm, mg_file_precheck(path, "data set"));
    if (st != MG_OK) goto fail;

    hid_t fapl = mg_h5_fapl_mpio(comm);
    mg_watchdog_begin_comm("data set open", comm->mpi);
    ds->file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    mg_watchdog_end();
    st = MG_OK;
    if (ds->file < 0) {
        mg_h5_err e;
        mg_h5_error_get(&e); /* before any other HDF5 call clears the stack */
        st = mg_error(MG_EFORMAT, "cannot open data set %s: %s", path,
                      e.truncated ? "the file is truncated" : e.innermost);
    }
    H5Pclose(fapl);
    if ((st = mg_io_agree(comm, st)) != MG_OK) goto fail;

    int in_ndim = 0, lab_ndim = 0;
    hsize_t in_dims[MG_MAX_DIMS] = {0}, lab_dims[MG_MAX_DIMS] = {0};
    if (!mg_h5_exists(ds->file, split))
        st = mg_error(MG_EFORMAT,
                      "%s: there is no group /%s (a data set needs /%s/inputs "
                      "float32 (N, ...) and /%s/labels int32 (N))",
                      path, split, split, split);
    if (st == MG_OK) st = open_member(ds, "inputs", 1, &ds->inputs, &in_ndim, in_dims);
    if (st == MG_OK) st = open_member(ds, "labels", 0, &ds->labels, &lab_ndim, lab_dims);
    if (st == MG_OK && in_dims[0] != lab_dims[0])
        st =
            mg_error(MG_EFORMAT, "%s: /%s/labels has %llu rows but /%s/inputs has %llu", path,
                     split, (unsigned long long)lab_dims[0], split, (unsigned long long)in_dims[0]);
    if (st == MG_OK && in_dims[0] == 0)
        st = mg_error(MG_EFORMAT, "%s: /%s/inputs has no rows", path, split);
    if ((st = mg_io_agree(comm, st)) != MG_OK) goto fail;

    ds->rows = (int64_t)in_dims[0];
    ds->sample_ndim = in_ndim - 1;
    ds->sample_numel = 1;
    for (int i = 1; i < in_ndim; i++) {
        ds->sample_shape[i - 1] = (int64_t)in_dims[i];
        ds->sample_numel *= (int64_t)in_dims[i];
    }
    ds->dxpl = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_dxpl_mpio(ds->dxpl, H5FD_MPIO_COLLECTIVE);
    if ((st = mg_io_agree(comm, scan_labels(ds))) != MG_OK) goto fail;
    return ds;
fail:
    dataset_release(ds);
    return NULL;
}

int mg_dataset_has_split(const char *path, const char *split, mg_comm *comm) {
    mg_h5_init();
    int has = 0, st = MG_OK;
    if (comm->rank == 0) {
        st = mg_file_precheck(path, "data set");
        hid_t f = st == MG_OK ? H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT) : -1;
        if (st == MG_OK && f < 0) {
            mg_h5_err e;
            mg_h5_error_get(&e);
            st = mg_error(MG_EFORMAT, "cannot open data set %s: %s", path,
                          e.truncated ? "the file is truncated" : e.innermost);
        }
        if (f >= 0) {
            has = mg_h5_exists(f, split);
            H5Fclose(f);
        }
    }
    if ((st = mg_io_agree(comm, st)) != MG_OK) return st;
    if ((st = mg_comm_broadcast_bytes(comm, &has, sizeof has, 0)) != MG_OK) return st;
    return has;
}

void mg_dataset_close(mg_dataset *ds) {
    if (ds) dataset_release(ds);
}

int64_t mg_dataset_rows(const mg_dataset *ds) { return ds->rows; }
int mg_dataset_sample_ndim(const mg_dataset *ds) { return ds->sample_ndim; }
const int64_t *mg_dataset_sample_shape(const mg_dataset *ds) { return ds->sample_shape; }
int mg_dataset_num_classes(const mg_dataset *ds) { return ds->num_classes; }

static int grow(mg_dataset *ds, int64_t n, size_t bytes) {
    if (n > ds->index_cap) {
        int64_t cap = n > 2 * ds->index_cap ? n : 2 * ds->index_cap;
        int64_t *p = realloc(ds->pairs, (size_t)cap * 2 * sizeof *p);
        if (p) ds->pairs = p;
        int64_t *u = realloc(ds->uniq, (size_t)cap * sizeof *u);
        if (u) ds->uniq = u;
        int64_t *s = realloc(ds->slot, (size_t)cap * sizeof *s);
        if (s) ds->slot = s;
        if (!p || !u || !s)
            return mg_error(MG_ENOMEM, "data set: out of memory for %lld rows", (long long)n);
        ds->index_cap = cap;
    }
    if (bytes > ds->buf_cap) {
        void *b = realloc(ds->buf, bytes);
        if (!b) return mg_error(MG_ENOMEM, "data set: out of memory for a %zu-byte batch", bytes);
        ds->buf = b;
        ds->buf_cap = bytes;
    }
    return MG_OK;
}

static int pair_cmp(const void *a, const void *b) {
    int64_t x = ((const int64_t *)a)[0], y = ((const int64_t *)b)[0];
    return (x > y) - (x < y);
}

/* Sorts and dedups rows into ds->uniq (returns their count), ds->slot[p] = index
 * into uniq of position p. */
static int64_t plan_rows(mg_dataset *ds, const int64_t *rows, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        ds->pairs[2 * i] = rows[i];
        ds->pairs[2 * i + 1] = i;
    }
    qsort(ds->pairs, (size_t)n, 2 * sizeof(int64_t), pair_cmp);
    int64_t u = 0;
    for (int64_t i = 0; i < n; i++) {
        if (u == 0 || ds->uniq[u - 1] != ds->pairs[2 * i]) ds->uniq[u++] = ds->pairs[2 * i];
        ds->slot[ds->pairs[2 * i + 1]] = u - 1;
    }
    return u;
}

/* MG_OK when every value of the n rows read (each a box of count at off) is
 * finite; else MG_EFORMAT naming the first bad row of the file and where in it. */
static int check_finite(const mg_dataset *ds, const float *x, const int64_t *rows, int64_t n,
                        int box_ndim, const int64_t *off, const int64_t *count) {
    int64_t box = 1;
    for (int i = 0; i < box_ndim; i++) box *= count[i];
    for (int64_t p = 0; p < n; p++) {
        const float *row = x + p * box;
        for (int64_t i = 0; i < box; i++) {
            if (isfinite(row[i])) continue;
            char at[160] = "";
            size_t used = 0;
            int64_t idx[MG_MAX_DIMS], rem = i;
            for (int d = box_ndim - 1; d >= 0; d--) {
                idx[d] = rem % count[d] + off[d];
                rem /= count[d];
            }
            for (int d = 0; d < box_ndim && used < sizeof at; d++)
                used += (size_t)snprintf(at + used, sizeof at - used, "%s%lld", d ? "," : "",
                                         (long long)idx[d]);
            return mg_error(MG_EFORMAT, "%s: /%s/inputs row %lld holds a non-finite value (%g at "
                            "[%s]): fix or remove that row", ds->path, ds->split,
                            (long long)rows[p], (double)row[i], at);
        }
    }
    return MG_OK;
}

/* Collective read of the block (rows x box [off, off+count) of the sample dims)
 * of dataset d into out (n x box elements of elem bytes, in the order of rows).
 * Returns a local status (not agreed). `ok` = 0 makes this rank select nothing. */
static int read_block(mg_dataset *ds, hid_t d, hid_t memtype, size_t elem, const int64_t *rows,
                      int64_t n, int box_ndim, const int64_t *off, const int64_t *count, void *out,
                      int ok) {
    int64_t box = 1;
    for (int i = 0; i < box_ndim; i++) box *= count[i];
    if (box == 0) n = 0;
    int st = MG_OK;
    if (ok && n > 0) st = grow(ds, n, (size_t)n * (size_t)box * elem);
    int64_t u = (ok && n > 0 && st == MG_OK) ? plan_rows(ds, rows, n) : 0;

    hid_t fspace = H5Dget_space(d), mspace;
    hsize_t start[MG_MAX_DIMS], cnt[MG_MAX_DIMS], mdims[MG_MAX_DIMS];
    if (u == 0) {
        H5Sselect_none(fspace);
        mspace = H5Screate(H5S_SCALAR);
        H5Sselect_none(mspace);
    } else {
        for (int i = 0; i < box_ndim; i++) {
            start[i + 1] = (hsize_t)off[i];
            cnt[i + 1] = mdims[i + 1] = (hsize_t)count[i];
        }
        for (int64_t i = 0; i < u;) {
            int64_t j = i + 1;
            while (j < u && ds->uniq[j] == ds->uniq[j - 1] + 1) j++;
            start[0] = (hsize_t)ds->uniq[i];
            cnt[0] = (hsize_t)(j - i);
            H5Sselect_hyperslab(fspace, i == 0 ? H5S_SELECT_SET : H5S_SELECT_OR, start, NULL, cnt,
                                NULL);
            i = j;
        }
        mdims[0] = (hsize_t)u;
        mspace = H5Screate_simple(box_ndim + 1, mdims, NULL);
    }
    int direct = (u == n); /* sorted and unique already: read straight into out */
    for (int64_t i = 0; direct && i < n; i++) direct = ds->slot[i] == i;
    void *dst = u == 0 ? (void *)&box : direct ? out : ds->buf;
    mg_watchdog_begin_comm("data set read", ds->comm->mpi);
    herr_t r = H5Dread(d, memtype, mspace, fspace, ds->dxpl, dst);
    mg_watchdog_end();
    if (r < 0) {
        mg_h5_err e;
        mg_h5_error_get(&e);
        st = mg_error(MG_EIO, "%s: reading %lld rows of a dataset under /%s failed: %s", ds->path,
                      (long long)n, ds->split, e.innermost);
    }
    H5Sclose(mspace);
    H5Sclose(fspace);
    if (st == MG_OK && u > 0 && !direct) {
        size_t row_bytes = (size_t)box * elem;
        for (int64_t p = 0; p < n; p++)
            memcpy((char *)out + (size_t)p * row_bytes,
                   (char *)ds->buf + (size_t)ds->slot[p] * row_bytes, row_bytes);
    }
    if (st == MG_OK && u > 0 && memtype == H5T_NATIVE_FLOAT)
        st = check_finite(ds, out, rows, n, box_ndim, off, count);
    return st;
}

/* Labels of the given rows as floats (read as int32 into ds->lab first). */
static int read_labels(mg_dataset *ds, const int64_t *rows, int64_t n, float *labels, int ok) {
    if (ok && n > ds->lab_cap) {
        int32_t *p = realloc(ds->lab, (size_t)n * sizeof *p);
        if (p) {
            ds->lab = p;
            ds->lab_cap = n;
        }
    }
    int st = MG_OK;
    if (ok && n > ds->lab_cap) {
        st = mg_error(MG_ENOMEM, "data set: out of memory for %lld labels", (long long)n);
        ok = 0;
    }
    int64_t one = 1, zero = 0;
    int32_t dummy;
    int s2 = read_block(ds, ds->labels, H5T_NATIVE_INT32, sizeof(int32_t), rows, n, 0, &zero, &one,
                        ok ? ds->lab : &dummy, ok);
    if (st == MG_OK) st = s2;
    if (st == MG_OK && ok)
        for (int64_t i = 0; i < n; i++) labels[i] = (float)ds->lab[i];
    return st;
}

int mg_dataset_read_rows(mg_dataset *ds, const int64_t *rows, int64_t n, float *inputs,
                         float *labels) {
    int st = MG_OK;
    if (n < 0 || (n > 0 && (!rows || !inputs || !labels)))
        st = mg_error(MG_EINVAL,
                      "data set %s: read_rows needs n >= 0 and non-NULL rows, "
                      "inputs and labels",
                      ds->path);
    for (int64_t i = 0; st == MG_OK && i < n; i++)
        if (rows[i] < 0 || rows[i] >= ds->rows)
            st = mg_error(MG_EINVAL, "data set %s: row %lld is out of range: /%s has %lld rows",
                          ds->path, (long long)rows[i], ds->split, (long long)ds->rows);
    int ok = st == MG_OK;
    int64_t zero[MG_MAX_DIMS] = {0};
    int s1 = read_block(ds, ds->inputs, H5T_NATIVE_FLOAT, sizeof(float), rows, n, ds->sample_ndim,
                        zero, ds->sample_shape, inputs, ok);
    int s2 = read_labels(ds, rows, n, labels, ok);
    if (st == MG_OK) st = s1 != MG_OK ? s1 : s2;
    return mg_io_agree(ds->comm, st);
}

/* ---- loader ------------------------------------------------------------- */

static int64_t batches_per_epoch(const mg_loader *L) { return L->data->rows / L->batch; }

int mg_loader_init(mg_loader *L, mg_dataset *ds, int64_t batch, uint64_t seed) {
    if (!L || !ds) return mg_error(MG_EINVAL, "loader: NULL loader or data set");
    memset(L, 0, sizeof *L);
    if (batch < 1 || batch > ds->rows)
        return mg_error(MG_EINVAL,
                        "loader: batch size %lld does not fit the %lld rows of %s "
                        "/%s; use a batch of 1..%lld",
                        (long long)batch, (long long)ds->rows, ds->path, ds->split,
                        (long long)ds->rows);
    L->perm = malloc((size_t)ds->rows * sizeof *L->perm);
    if (!L->perm)
        return mg_error(MG_ENOMEM, "loader: out of memory for %lld rows", (long long)ds->rows);
    L->data = ds;
    L->batch = batch;
    L->seed = seed;
    mg_rng_permutation(seed, 0, ds->rows, L->perm);
    return MG_OK;
}

int mg_loader_seek(mg_loader *L, int64_t epoch, int64_t cursor) {
    if (!L || !L->perm) return mg_error(MG_ESTATE, "loader: seek on a loader not initialized");
    if (epoch < 0 || cursor < 0)
        return mg_error(MG_EINVAL,
                        "loader: cannot seek to epoch %lld batch %lld; both must be "
                        ">= 0",
                        (long long)epoch, (long long)cursor);
    int64_t nb = batches_per_epoch(L);
    epoch += cursor / nb;
    cursor %= nb;
    if (epoch != L->epoch) mg_rng_permutation(L->seed, (uint64_t)epoch, L->data->rows, L->perm);
    L->epoch = epoch;
    L->cursor = cursor;
    return MG_OK;
}

void mg_loader_free(mg_loader *L) {
    if (!L) return;
    free(L->perm);
    L->perm = NULL;
}

static int check_spec(const mg_spec *s, int ndim, const int64_t *shape, const char *what) {
    char have[128], want[128];
    if (!s) return mg_error(MG_EINVAL, "loader: the %s spec is NULL", what);
    if (!mg_shape_equal(s->ndim, s->shape, ndim, shape))
        return mg_error(MG_ESHAPE, "loader: the %s spec has global shape %s but the batch is %s",
                        what, mg_shape_format(have, sizeof have, s->ndim, s->shape),
                        mg_shape_format(want, sizeof want, ndim, shape));
    if (mg_spec_has_partial(s))
        return mg_error(MG_EPLACEMENT,
                        "loader: the %s spec has a Partial placement; a batch "
                        "can be Shard or Replicate only",
                        what);
    return MG_OK;
}

/* The specs of a batch of n rows, checked before the loader changes. */
static int check_specs(const mg_dataset *ds, int64_t n, const mg_spec *x_spec,
                       const mg_spec *y_spec) {
    int64_t xshape[MG_MAX_DIMS];
    xshape[0] = n;
    for (int i = 0; i < ds->sample_ndim; i++) xshape[i + 1] = ds->sample_shape[i];
    int st = check_spec(x_spec, ds->sample_ndim + 1, xshape, "x");
    return st == MG_OK ? check_spec(y_spec, 1, &n, "y") : st;
}

/* The global rows `rows` as x and y with the given specs (check_specs). */
static int read_rows(mg_loader *L, const int64_t *rows, const mg_spec *x_spec,
                     const mg_spec *y_spec, mg_dtensor **x, mg_dtensor **y, mg_arena *arena) {
    mg_dataset *ds = L->data;
    int st = MG_OK;

    // x local block: rows [xoff[0], +xl[0]) of the batch, box xoff[1..] x xl[1..]
    int64_t xl[MG_MAX_DIMS], xoff[MG_MAX_DIMS], yl[1], yoff[1];
    mg_spec_local(x_spec, NULL, xl, xoff);
    mg_spec_local(y_spec, NULL, yl, yoff);
    mg_tensor *xt =
        mg_tensor_alloc_on(arena, MG_DEVICE_CPU, x_spec->ndim, xl); /* read on the host */
    mg_tensor *yt = mg_tensor_alloc_on(arena, MG_DEVICE_CPU, 1, yl);
    int ok = xt && yt;
    if (!ok) st = MG_ENOMEM; /* message set by mg_tensor_alloc */
    float dummy;
    int s1 = read_block(ds, ds->inputs, H5T_NATIVE_FLOAT, sizeof(float), rows + xoff[0], xl[0],
                        ds->sample_ndim, xoff + 1, xl + 1, ok ? xt->data : &dummy, ok);
    int s2 = read_labels(ds, rows + yoff[0], yl[0], ok ? yt->data : &dummy, ok);
    if (st == MG_OK) st = s1 != MG_OK ? s1 : s2;
    if (st == MG_OK && mg_get_device() != MG_DEVICE_CPU) { /* then uploaded (takes xt, yt) */
        xt = mg_tensor_to_device(arena, xt, mg_get_device());
        yt = mg_tensor_to_device(arena, yt, mg_get_device());
        if (!xt || !yt) st = mg_last_code() ? mg_last_code() : MG_ENOMEM;
    }
    st = mg_io_agree(ds->comm, st);
    if (st != MG_OK) {
        mg_tensor_free(xt);
        mg_tensor_free(yt);
        return st;
    }
    *x = mg_dtensor_make(x_spec, xt, arena); /* takes xt, even on failure */
    if (!*x) {
        mg_tensor_free(yt);
        return mg_last_code();
    }
    *y = mg_dtensor_make(y_spec, yt, arena);
    if (!*y) {
        mg_dtensor_free(*x);
        *x = NULL;
        return mg_last_code();
    }
    return MG_OK;
}

int mg_loader_next(mg_loader *L, const mg_spec *x_spec, const mg_spec *y_spec, mg_dtensor **x,
                   mg_dtensor **y, mg_arena *arena) {
    if (!L || !L->perm || !x || !y)
        return mg_error(MG_ESTATE, "loader: next on a loader not initialized");
    int st = check_specs(L->data, L->batch, x_spec, y_spec);
    if (st != MG_OK) return st;
    if (L->cursor >= batches_per_epoch(L)) {
        L->epoch++;
        L->cursor = 0;
        mg_rng_permutation(L->seed, (uint64_t)L->epoch, L->data->rows, L->perm);
    }
    /* the global batch: B rows */
    st = read_rows(L, L->perm + L->cursor * L->batch, x_spec, y_spec, x, y, arena);
    if (st != MG_OK) return st;
    L->cursor++;
    return MG_OK;
}

int mg_loader_rows(mg_loader *L, int64_t first, int64_t n, const mg_spec *x_spec,
                   const mg_spec *y_spec, mg_dtensor **x, mg_dtensor **y, mg_arena *arena) {
    if (!L || !L->perm || !x || !y)
        return mg_error(MG_ESTATE, "loader: rows from a loader not initialized");
    if (first < 0 || n < 1 || first > L->data->rows - n)
        return mg_error(MG_EINVAL, "loader: rows %lld..%lld are not in the %lld of %s /%s",
                        (long long)first, (long long)(first + n - 1), (long long)L->data->rows,
                        L->data->path, L->data->split);
    int st = check_specs(L->data, n, x_spec, y_spec);
    return st == MG_OK ? read_rows(L, L->perm + first, x_spec, y_spec, x, y, arena) : st;
}
