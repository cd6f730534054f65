/* checkpoint_load.c: loading checkpoints with parallel HDF5 (see
 * checkpoint.h). Exports mg_checkpoint_load, mg_checkpoint_read_attrs,
 * mg_checkpoint_list.
 *
 * Every rank opens the file, checks the format, and checks each dataset
 * before any data moves (type, global shape, layout and checksum filter,
 * every chunk written: checkpoint_check.c), and that the groups the entries
 * are in hold nothing else (the one rule of what a load takes, for every
 * caller: train --resume, generate, mg_ckpt_load, ckpt bench); then each entry is read in one
 * collective H5Dread in which each rank selects its block under the entry's
 * current spec, and its values are checked to be finite. Every failure is
 * agreed, so all ranks return the same message; every collective HDF5 call
 * runs under the collective watchdog. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>

#include "backend/backend.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "dist/watchdog.h"
#include "io/checkpoint_internal.h"
#include "io/files.h"
#include "io/h5util.h"
#include "status.h"

static void close_checkpoint(mg_comm *comm, hid_t file) {
    mg_watchdog_begin_comm("checkpoint file close", comm->mpi);
    H5Fclose(file);
    mg_watchdog_end();
}

/* Opens a checkpoint on every rank of comm and checks format and version. */
static int open_checkpoint(const char *path, mg_comm *comm, hid_t *out) {
    mg_h5_init();
    *out = -1;
    int st = mg_io_agree(comm, mg_file_precheck(path, "checkpoint"));
    if (st != MG_OK) return st;
    hid_t fapl = mg_h5_fapl_mpio(comm);
    mg_watchdog_begin_comm("checkpoint file open", comm->mpi);
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    mg_watchdog_end();
    if (file < 0) st = mg_ckpt_open_error(path); /* before another HDF5 call clears the stack */
    H5Pclose(fapl);
    if (st == MG_OK) st = mg_ckpt_check_format(file, path);
    if ((st = mg_io_agree(comm, st)) != MG_OK) {
        if (file >= 0) close_checkpoint(comm, file);
        return st;
    }
    *out = file;
    return MG_OK;
}

static int read_attrs_open(hid_t file, const char *path, mg_ckpt_attr *attrs_out, int max_attrs,
                           int *nattrs_out) {
    if (nattrs_out) *nattrs_out = 0;
    if (!attrs_out || max_attrs <= 0) return MG_OK;
    mg_ckpt_attr_list l = {attrs_out, max_attrs, 0, 0};
    if (mg_ckpt_attrs_collect(file, &l) < 0)
        return mg_error(MG_EFORMAT, "checkpoint %s: reading its attributes failed", path);
    if (nattrs_out) *nattrs_out = l.n;
    return MG_OK;
}

/* "checkpoint <the last message>" (copied first: the message buffer is reused) */
static int prefix_checkpoint(void) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", mg_last_error());
    return mg_error(MG_EFORMAT, "checkpoint %s", msg);
}

/* The dataset of entry e exists with type float32 and e's global shape. */
static int check_dataset(hid_t file, const char *path, const mg_ckpt_entry *e) {
    int want_ndim;
    const int64_t *want_shape = mg_ckpt_entry_shape(e, &want_ndim);
    char want[160], have[160], tname[32];
    mg_shape_format(want, sizeof want, want_ndim, want_shape);
    if (!mg_h5_exists(file, e->name))
        return mg_error(MG_EFORMAT, "checkpoint %s has no dataset /%s (expected shape %s)", path,
                        e->name, want);
    hid_t d;
    if (mg_h5_open_dataset(file, e->name, path, &d) != MG_OK)
        return prefix_checkpoint();
    hid_t type = H5Dget_type(d), space = H5Dget_space(d);
    int ndim = H5Sget_simple_extent_ndims(space), st = MG_OK;
    hsize_t dims[MG_MAX_DIMS] = {0};
    int64_t shape[MG_MAX_DIMS] = {0};
    if (ndim >= 0 && ndim <= MG_MAX_DIMS) H5Sget_simple_extent_dims(space, dims, NULL);
    for (int i = 0; i < ndim && i < MG_MAX_DIMS; i++) shape[i] = (int64_t)dims[i];
    if (!mg_h5_is_float32(type))
        st = mg_error(MG_EFORMAT, "checkpoint %s: dataset /%s is %s, expected float32", path,
                      e->name, mg_h5_type_name(type, tname, sizeof tname));
    else if (ndim < 0 || ndim > MG_MAX_DIMS || !mg_shape_equal(ndim, shape, want_ndim, want_shape))
        st = mg_error(MG_EFORMAT,
                      "checkpoint %s: dataset /%s has shape %s but the tensor "
                      "loaded into it has global shape %s",
                      path, e->name, mg_shape_format(have, sizeof have, ndim < 0 ? 0 : ndim, shape),
                      want);
    hsize_t file_bytes = 0;
    H5Fget_filesize(file, &file_bytes);
    if (st == MG_OK) st = mg_ckpt_check_layout(d, path, e->name, file_bytes);
    H5Tclose(type);
    H5Sclose(space);
    H5Dclose(d);
    return st;
}

/* ---- the file holds the entries and nothing else in their groups ---------------- */

#define LIST_MAX_LINKS 65536

static int by_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

typedef struct {
    const char *path;
    const char **names; /* the entries' names, sorted */
    int n, links, st;
    char prefix[MG_PATH_MAX]; /* of the group walked: "" or "params/" */
} complete_walk;

/* 1 when some name of the sorted names[0..n) begins with prefix. */
static int any_under(const char *const *names, int n, const char *prefix) {
    size_t len = strlen(prefix);
    int lo = 0, hi = n; /* the first name >= prefix */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (strcmp(names[mid], prefix) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && strncmp(names[lo], prefix, len) == 0;
}

static herr_t complete_link(hid_t group, const char *name, const H5L_info_t *info, void *data) {
    complete_walk *w = data;
    (void)info;
    if (++w->links > LIST_MAX_LINKS) {
        w->st = mg_error(MG_EFORMAT, "checkpoint %s holds more than %d links: it is not a "
                         "meshgrad checkpoint", w->path, LIST_MAX_LINKS);
        return 1;
    }
    size_t had = strlen(w->prefix);
    if ((size_t)snprintf(w->prefix + had, sizeof w->prefix - had, "%s", name) >=
        sizeof w->prefix - had - 1) {
        w->st = mg_error(MG_EFORMAT, "checkpoint %s holds an object whose name is longer than "
                         "%zu characters: it is not a meshgrad checkpoint", w->path,
                         sizeof w->prefix - 2);
        return 1;
    }
    const char *full = w->prefix;
    herr_t rc = 0;
    if (bsearch(&full, w->names, (size_t)w->n, sizeof *w->names, by_name)) {
        /* an entry: checked by check_dataset */
    } else if (strcat(w->prefix, "/"), any_under(w->names, w->n, w->prefix)) {
        hsize_t idx = 0; /* a group that holds entries: every object in it is one */
        H5O_info_t oi;
        if (H5Oget_info_by_name(group, name, &oi, H5P_DEFAULT) >= 0 && oi.type == H5O_TYPE_GROUP)
            rc = H5Literate_by_name(group, name, H5_INDEX_NAME, H5_ITER_INC, &idx, complete_link,
                                    w, H5P_DEFAULT);
    } else if (had > 0) { /* inside a group of entries: another object is not loaded */
        w->prefix[strlen(w->prefix) - 1] = '\0';
        w->st = mg_error(MG_EFORMAT, "cannot load %s: it holds /%s, which is not among the %d "
                         "tensors given: it is a checkpoint of another model (or of this one "
                         "with other settings)", w->path, w->prefix, w->n);
        rc = 1;
    }
    if (w->st != MG_OK) rc = 1;
    if (rc == 0) w->prefix[had] = '\0';
    return rc;
}

/* Every object in a group where an entry is (params/, optim/ when an
 * optimizer's state is loaded) is an entry: a checkpoint with a dataset
 * beside them (one of another model, or of a layer the attributes do not
 * count) is refused, not loaded in part. Groups no entry is in are not
 * read (a training checkpoint's optim/ when only the parameters load). */
static int check_complete(hid_t file, const char *path, const mg_ckpt_entry *entries, int n) {
    complete_walk w = {.path = path, .n = n, .st = MG_OK};
    w.names = malloc((size_t)(n + 1) * sizeof *w.names);
    if (!w.names) return mg_error(MG_ENOMEM, "checkpoint: out of memory");
    for (int i = 0; i < n; i++) w.names[i] = entries[i].name;
    qsort(w.names, (size_t)n, sizeof *w.names, by_name);
    hsize_t idx = 0;
    herr_t r = H5Literate(file, H5_INDEX_NAME, H5_ITER_INC, &idx, complete_link, &w);
    if (w.st == MG_OK && r < 0)
        w.st = mg_error(MG_EFORMAT, "checkpoint %s: listing its datasets failed: the file is "
                        "damaged", path);
    free(w.names);
    return w.st;
}

/* An entry other ranks hold: this rank's part of the collective read, selecting nothing. */
static int load_nothing(mg_comm *comm, hid_t file, const char *path, const mg_ckpt_entry *e,
                        hid_t dxpl) {
    if (mg_shape_numel(e->ndim, e->shape) == 0) return MG_OK;
    float dummy = 0;
    int64_t none[MG_MAX_DIMS] = {0};
    hid_t d = H5Dopen2(file, e->name, H5P_DEFAULT), space = H5Dget_space(d);
    hid_t mspace = mg_ckpt_select_block(space, e->ndim, none, none, 0);
    mg_watchdog_begin_comm("checkpoint read", comm->mpi);
    herr_t r = H5Dread(d, H5T_NATIVE_FLOAT, mspace, space, dxpl, &dummy);
    mg_watchdog_end();
    int st = r < 0 ? mg_error(MG_EIO, "checkpoint %s: reading dataset /%s failed", path, e->name)
                   : MG_OK;
    H5Sclose(mspace);
    H5Sclose(space);
    H5Dclose(d);
    return st;
}

/* Reads this rank's block of one entry (collective). */
static int load_entry(mg_comm *comm, hid_t file, const char *path, mg_ckpt_entry *e,
                      hid_t dxpl) {
    if (!e->tensor) return load_nothing(comm, file, path, e, dxpl);
    const mg_spec *spec = &e->tensor->spec;
    mg_tensor *local = e->tensor->local;
    mg_spec rspec = mg_ckpt_replicate_partial(spec);
    int64_t lshape[MG_MAX_DIMS], off[MG_MAX_DIMS];
    mg_spec_local(&rspec, NULL, lshape, off);
    int take = 1; /* Partial: the value on coordinate 0, zeros elsewhere */
    for (int d = 0; d < spec->mesh->ndim; d++)
        if (spec->p[d].kind == MG_PLACE_PARTIAL && spec->mesh->coord[d] != 0) take = 0;
    if (mg_shape_numel(spec->ndim, spec->shape) == 0) return MG_OK;

    int st = MG_OK;
    float *staged, *data = mg_ckpt_host_data(local, &staged, 0), dummy = 0;
    if (!data) st = mg_error(MG_ENOMEM, "checkpoint: out of memory staging /%s", e->name);
    hid_t d = H5Dopen2(file, e->name, H5P_DEFAULT);
    hid_t space = H5Dget_space(d);
    hid_t mspace = mg_ckpt_select_block(space, spec->ndim, lshape, off, take && data);
    mg_watchdog_begin_comm("checkpoint read", comm->mpi);
    herr_t r = H5Dread(d, H5T_NATIVE_FLOAT, mspace, space, dxpl, data ? data : &dummy);
    mg_watchdog_end();
    if (r < 0) {
        mg_h5_err he;
        mg_h5_error_get(&he);
        st = he.checksum ? mg_error(MG_EFORMAT,
                                    "checksum mismatch in %s dataset /%s: the file "
                                    "is corrupt",
                                    path, e->name)
                         : mg_error(MG_EIO, "checkpoint %s: reading dataset /%s failed: %s", path,
                                    e->name, he.innermost);
    }
    H5Sclose(mspace);
    H5Sclose(space);
    H5Dclose(d);
    int64_t bad = st == MG_OK && data && take ? mg_ckpt_first_nonfinite(data, local->numel) : -1;
    if (bad >= 0) {
        char where[160];
        mg_ckpt_format_index(where, sizeof where, spec->ndim, lshape, off, bad);
        st = mg_error(MG_EFORMAT, "checkpoint %s: dataset /%s holds a non-finite value (%g at "
                      "%s): the run had diverged when it was saved, or the file was altered; "
                      "resume from an earlier checkpoint", path, e->name, (double)data[bad],
                      where);
    }
    if (st == MG_OK && data) {
        if (!take) memset(data, 0, (size_t)local->numel * sizeof(float));
        if (staged) {
            mg_backend *be = mg_backend_of(local);
            be->iface->from_host(be->context, local->data, staged, local->numel);
        }
    }
    free(staged);
    return st;
}

int mg_checkpoint_load(const char *path, mg_ckpt_entry *entries, int n, mg_ckpt_attr *attrs_out,
                       int max_attrs, int *nattrs_out) {
    int st = mg_ckpt_check_entries(path, entries, n);
    if (st != MG_OK) return st;
    mg_comm *comm = mg_comm_world();
    if (!comm) return mg_last_code();
    hid_t file;
    if ((st = open_checkpoint(path, comm, &file)) != MG_OK) return st;
    for (int i = 0; st == MG_OK && i < n; i++) st = check_dataset(file, path, &entries[i]);
    if (st == MG_OK) st = check_complete(file, path, entries, n);
    st = mg_io_agree(comm, st);
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
    for (int i = 0; st == MG_OK && i < n; i++)
        st = mg_io_agree(comm, load_entry(comm, file, path, &entries[i], dxpl));
    H5Pclose(dxpl);
    if (st == MG_OK) st = read_attrs_open(file, path, attrs_out, max_attrs, nattrs_out);
    close_checkpoint(comm, file);
    return mg_io_agree(comm, st);
}

int mg_checkpoint_read_attrs(const char *path, mg_ckpt_attr *attrs_out, int max_attrs,
                             int *nattrs_out) {
    int st = mg_path_check(path, "checkpoint", 0);
    if (st != MG_OK) return st;
    mg_comm *comm = mg_comm_world();
    if (!comm) return mg_last_code();
    hid_t file;
    if ((st = open_checkpoint(path, comm, &file)) != MG_OK) return st;
    st = read_attrs_open(file, path, attrs_out, max_attrs, nattrs_out);
    close_checkpoint(comm, file);
    return mg_io_agree(comm, st);
}

/* ---- the datasets of a checkpoint -------------------------------------------- */

typedef struct {
    int (*each)(void *ctx, const char *name);
    void *ctx;
    int links, st;
} list_walk;

static herr_t list_link(hid_t group, const char *name, const H5L_info_t *info, void *data) {
    list_walk *w = data;
    if (++w->links > LIST_MAX_LINKS) return 1;
    if (info->type != H5L_TYPE_HARD) return 0; /* soft and external links are not followed */
    hid_t obj = H5Oopen(group, name, H5P_DEFAULT);
    if (obj < 0) return 0;
    int dataset = H5Iget_type(obj) == H5I_DATASET;
    H5Oclose(obj);
    if (dataset) w->st = w->each(w->ctx, name);
    return w->st != MG_OK;
}

int mg_checkpoint_list(const char *path, int (*each)(void *ctx, const char *name), void *ctx) {
    int st = mg_path_check(path, "checkpoint", 0);
    if (st == MG_OK && !each) st = mg_error(MG_EINVAL, "checkpoint %s: no function to call", path);
    if (st != MG_OK) return st;
    mg_comm *comm = mg_comm_world();
    if (!comm) return mg_last_code();
    hid_t file;
    if ((st = open_checkpoint(path, comm, &file)) != MG_OK) return st;
    list_walk w = {each, ctx, 0, MG_OK};
    herr_t r = H5Lvisit(file, H5_INDEX_NAME, H5_ITER_INC, list_link, &w);
    if (w.st != MG_OK)
        st = w.st;
    else if (w.links > LIST_MAX_LINKS)
        st = mg_error(MG_EFORMAT, "checkpoint %s holds more than %d links: it is not a meshgrad "
                      "checkpoint", path, LIST_MAX_LINKS);
    else if (r < 0)
        st = mg_error(MG_EFORMAT, "checkpoint %s: listing its datasets failed: the file is "
                      "damaged", path);
    close_checkpoint(comm, file);
    return mg_io_agree(comm, st);
}
