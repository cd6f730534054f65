/* checkpoint.c: saving and loading checkpoints with parallel HDF5 (see
 * checkpoint.h). Exports mg_checkpoint_save, mg_checkpoint_load,
 * mg_checkpoint_read_attrs, mg_ckpt_attr_get. (resolve, prune and info are in
 * checkpoint_files.c.)
 *
 * Every HDF5 call that changes metadata is made by every rank with the same
 * arguments; the data of an entry moves in one collective H5Dwrite/H5Dread in
 * which each rank selects its block (mg_spec_local), or nothing: on save, a rank
 * whose coordinate is non-zero on a mesh dim where the entry is Replicate holds
 * a copy that another rank writes. Statuses are agreed after each step that
 * one rank alone could fail, so no rank is left waiting in a collective. */
#include "io/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>
#include <mpi.h>

#include "backend/backend.h"
#include "dist/mesh.h"
#include "dist/redistribute.h"
#include "io/checkpoint_internal.h"
#include "io/h5util.h"
#include "status.h"

#define CHUNK_BYTES (4u << 20) /* at most 4 MiB a chunk */

const char *mg_ckpt_attr_get(const mg_ckpt_attr *attrs, int n, const char *key) {
    for (int i = 0; attrs && key && i < n; i++)
        if (strcmp(attrs[i].key, key) == 0) return attrs[i].value;
    return NULL;
}

/* ---- argument checks (identical on every rank) ------------------------------- */

static int check_name(const char *name) {
    if (!name || !name[0] || name[0] == '/' || name[strlen(name) - 1] == '/' ||
        strstr(name, "//") || strlen(name) >= 512)
        return mg_error(MG_EINVAL,
                        "checkpoint: entry name \"%s\" is not valid: give a path "
                        "such as \"params/fc1.weight\" (no leading or trailing '/', no empty "
                        "parts, under 512 characters)",
                        name ? name : "(null)");
    return MG_OK;
}

static int check_entries(const char *path, const mg_ckpt_entry *entries, int n) {
    if (!path || !path[0] || strlen(path) > 3800)
        return mg_error(MG_EINVAL, "checkpoint: give a file path (under 3800 characters)");
    if (n < 0 || (n > 0 && !entries))
        return mg_error(MG_EINVAL, "checkpoint %s: %d entries given with entries=%p", path, n,
                        (const void *)entries);
    for (int i = 0; i < n; i++) {
        int st = check_name(entries[i].name);
        if (st != MG_OK) return st;
        if (!entries[i].tensor && (entries[i].ndim < 0 || entries[i].ndim > MG_MAX_DIMS ||
                                   (entries[i].ndim > 0 && !entries[i].shape)))
            return mg_error(MG_EINVAL, "checkpoint %s: entry \"%s\" has no tensor and no "
                            "global shape", path, entries[i].name);
        for (int j = 0; j < i; j++)
            if (strcmp(entries[i].name, entries[j].name) == 0)
                return mg_error(MG_EINVAL, "checkpoint %s: entry \"%s\" is given twice", path,
                                entries[i].name);
    }
    return MG_OK;
}

/* ---- blocks ------------------------------------------------------------------ */

/* The spec with Partial placements replaced by Replicate. */
static mg_spec replicate_partial(const mg_spec *s) {
    mg_spec r = *s;
    for (int d = 0; d < s->mesh->ndim; d++)
        if (r.p[d].kind == MG_PLACE_PARTIAL) r.p[d] = MG_REPLICATE;
    return r;
}

/* 1 when this rank is the one that writes its block of an entry of spec s (no
 * Partial): coordinate 0 on every mesh dim where s is Replicate. */
static int is_writer(const mg_spec *s) {
    for (int d = 0; d < s->mesh->ndim; d++)
        if (s->p[d].kind != MG_PLACE_SHARD && s->mesh->coord[d] != 0) return 0;
    return 1;
}

/* Selects this rank's block in fspace (or nothing) and makes the matching
 * memory space. */
static hid_t select_block(hid_t fspace, int ndim, const int64_t *lshape, const int64_t *off,
                          int take) {
    int64_t numel = mg_shape_numel(ndim, lshape);
    if (!take || numel == 0) {
        H5Sselect_none(fspace);
        hid_t m = H5Screate(H5S_SCALAR);
        H5Sselect_none(m);
        return m;
    }
    if (ndim == 0) {
        H5Sselect_all(fspace);
        return H5Screate(H5S_SCALAR);
    }
    hsize_t start[MG_MAX_DIMS], count[MG_MAX_DIMS];
    for (int i = 0; i < ndim; i++) {
        start[i] = (hsize_t)off[i];
        count[i] = (hsize_t)lshape[i];
    }
    H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL);
    return H5Screate_simple(ndim, count, NULL);
}

/* Chunk dims of at most CHUNK_BYTES: whole trailing dims, split along the
 * leading ones. */
void mg_ckpt_chunk_dims(int ndim, const int64_t *shape, hsize_t *chunk) {
    for (int i = 0; i < ndim; i++) chunk[i] = (hsize_t)shape[i];
    for (int d = 0; d < ndim; d++) {
        uint64_t inner = 4; /* bytes of one index of dim d */
        for (int i = d + 1; i < ndim; i++) inner *= (uint64_t)shape[i];
        if (inner * chunk[d] <= CHUNK_BYTES) break;
        if (inner <= CHUNK_BYTES) {
            chunk[d] = CHUNK_BYTES / inner;
            break;
        }
        chunk[d] = 1;
    }
}

/* Host memory for a local tensor: its own data on the CPU, else a staged copy
 * (*tmp, to free) that `to_host` fills when asked. */
static float *host_data(const mg_tensor *t, float **tmp, int to_host) {
    *tmp = NULL;
    if (t->device == MG_DEVICE_CPU) return t->data;
    *tmp = malloc((size_t)(t->numel > 0 ? t->numel : 1) * sizeof(float));
    mg_backend *be = mg_backend_of(t);
    if (*tmp && to_host && be) be->iface->to_host(be->context, *tmp, t->data, t->numel);
    return *tmp;
}

/* ---- save -------------------------------------------------------------------- */

static int write_attrs(hid_t file, const mg_ckpt_attr *attrs, int nattrs) {
    int bad = mg_h5_attr_write_string(file, "format", MG_CHECKPOINT_FORMAT) < 0 ||
              mg_h5_attr_write_int(file, "version", MG_CHECKPOINT_VERSION) < 0;
    for (int i = 0; !bad && i < nattrs; i++)
        bad = mg_h5_attr_write_string(file, attrs[i].key, attrs[i].value) < 0;
    return bad ? -1 : 0;
}

static int check_attrs(const char *path, const mg_ckpt_attr *attrs, int nattrs) {
    if (nattrs < 0 || (nattrs > 0 && !attrs))
        return mg_error(MG_EINVAL, "checkpoint %s: %d attributes given with attrs=%p", path, nattrs,
                        (const void *)attrs);
    for (int i = 0; i < nattrs; i++) {
        const char *k = attrs[i].key;
        if (!k[0] || memchr(k, '\0', sizeof attrs[i].key) == NULL ||
            memchr(attrs[i].value, '\0', sizeof attrs[i].value) == NULL)
            return mg_error(MG_EINVAL,
                            "checkpoint %s: attribute %d has an empty or "
                            "unterminated key or value",
                            path, i);
        if (strcmp(k, "format") == 0 || strcmp(k, "version") == 0)
            return mg_error(MG_EINVAL,
                            "checkpoint %s: attribute \"%s\" is reserved (meshgrad "
                            "writes it)",
                            path, k);
        for (int j = 0; j < i; j++)
            if (strcmp(k, attrs[j].key) == 0)
                return mg_error(MG_EINVAL, "checkpoint %s: attribute \"%s\" is given twice", path,
                                k);
    }
    return MG_OK;
}

/* Creates the dataset of one entry and writes this rank's block (collective). */
static int save_entry(hid_t file, const char *tmp, const mg_ckpt_entry *e, hid_t dxpl) {
    const mg_spec *spec = e->tensor ? &e->tensor->spec : NULL;
    mg_spec wspec = spec ? replicate_partial(spec) : (mg_spec){0};
    mg_tensor *reduced = NULL;
    int st = MG_OK;
    if (spec && mg_spec_has_partial(spec)) {
        st = mg_redistribute_local(spec, e->tensor->local, &wspec, &reduced, NULL);
        if ((st = mg_io_agree(MPI_COMM_WORLD, st)) != MG_OK) return st;
    }
    const mg_tensor *local = reduced ? reduced : spec ? e->tensor->local : NULL;
    int ndim = spec ? spec->ndim : e->ndim;
    const int64_t *shape = spec ? spec->shape : e->shape;
    int64_t numel = mg_shape_numel(ndim, shape);
    hsize_t dims[MG_MAX_DIMS], chunk[MG_MAX_DIMS];
    for (int i = 0; i < ndim; i++) dims[i] = (hsize_t)shape[i];
    hid_t space = ndim == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(ndim, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    if (ndim > 0 && numel > 0) {
        mg_ckpt_chunk_dims(ndim, shape, chunk);
        H5Pset_chunk(dcpl, ndim, chunk);
        H5Pset_fletcher32(dcpl);
    }
    hid_t d = H5Dcreate2(file, e->name, H5T_IEEE_F32LE, space, lcpl, dcpl, H5P_DEFAULT);
    if (d < 0) {
        mg_h5_err he;
        mg_h5_error_get(&he);
        st = mg_error(MG_EIO, "checkpoint %s: cannot create dataset /%s: %s", tmp, e->name,
                      he.innermost);
    } else if (numel > 0) {
        int64_t lshape[MG_MAX_DIMS] = {0}, off[MG_MAX_DIMS] = {0};
        float *staged = NULL, *data = NULL, dummy = 0;
        if (local) { /* a rank that holds the entry writes its block */
            mg_spec_local(&wspec, NULL, lshape, off);
            data = host_data(local, &staged, 1);
        }
        hid_t mspace = select_block(space, ndim, lshape, off, data && is_writer(&wspec));
        if (H5Dwrite(d, H5T_NATIVE_FLOAT, mspace, space, dxpl, data ? data : &dummy) < 0) {
            mg_h5_err he;
            mg_h5_error_get(&he);
            st = mg_error(MG_EIO, "checkpoint %s: writing dataset /%s failed: %s", tmp, e->name,
                          he.innermost);
        }
        if (local && !data) st = mg_error(MG_ENOMEM, "checkpoint: out of memory staging /%s", e->name);
        free(staged);
        H5Sclose(mspace);
    }
    if (d >= 0) H5Dclose(d);
    H5Pclose(lcpl);
    H5Pclose(dcpl);
    H5Sclose(space);
    mg_tensor_free(reduced);
    return mg_io_agree(MPI_COMM_WORLD, st);
}

static int fsync_path(const char *path, int directory) {
    int fd = open(path, directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

static void dir_of(const char *path, char *dir, size_t len) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, len, ".");
    else if (slash == path)
        snprintf(dir, len, "/");
    else
        snprintf(dir, len, "%.*s", (int)(slash - path), path);
}

/* rank 0: the target can be written (its directory exists, it is not a directory) */
static int check_target(const char *path) {
    char dir[4096];
    struct stat st;
    dir_of(path, dir, sizeof dir);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return mg_error(MG_EIO,
                        "cannot write checkpoint %s: directory %s does not exist "
                        "(create it first)",
                        path, dir);
    if (access(dir, W_OK) != 0)
        return mg_error(MG_EIO, "cannot write checkpoint %s: directory %s: %s", path, dir,
                        strerror(errno));
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return mg_error(MG_EINVAL,
                        "cannot write checkpoint %s: it is a directory; give a file "
                        "name such as %s/ckpt-100.h5",
                        path, path);
    return MG_OK;
}

/* MG_CKPT_FAULT=kill-before-rename: the chosen rank dies here (tests). */
static void fault_point(int rank) {
    const char *fault = getenv("MG_CKPT_FAULT");
    if (!fault || strcmp(fault, "kill-before-rename") != 0) return;
    const char *r = getenv("MG_CKPT_FAULT_RANK");
    if (rank != (r ? atoi(r) : 0)) return;
    fflush(NULL);
    raise(SIGKILL);
}

int mg_checkpoint_save(const char *path, const mg_ckpt_entry *entries, int n,
                       const mg_ckpt_attr *attrs, int nattrs) {
    mg_h5_init();
    int st = check_entries(path, entries, n);
    if (st == MG_OK) st = check_attrs(path, attrs, nattrs);
    if (st != MG_OK) return st;
    MPI_Comm comm = MPI_COMM_WORLD;
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    st = rank == 0 ? check_target(path) : MG_OK;
    if ((st = mg_io_agree(comm, st)) != MG_OK) return st;

    // the temporary name carries rank 0's pid, the same on every rank
    int pid = (int)getpid();
    MPI_Bcast(&pid, 1, MPI_INT, 0, comm);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, pid);

    hid_t fapl = mg_h5_fapl_mpio(comm), fcpl = H5Pcreate(H5P_FILE_CREATE);
    H5Pset_attr_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    hid_t file = H5Fcreate(tmp, H5F_ACC_TRUNC, fcpl, fapl);
    if (file < 0) {
        mg_h5_err he;
        mg_h5_error_get(&he);
        st = mg_error(MG_EIO, "cannot create checkpoint file %s: %s", tmp, he.innermost);
    }
    H5Pclose(fcpl);
    H5Pclose(fapl);
    if ((st = mg_io_agree(comm, st)) != MG_OK) {
        if (file >= 0) H5Fclose(file);
        return st;
    }
    if (write_attrs(file, attrs, nattrs) < 0)
        st = mg_error(MG_EIO, "checkpoint %s: writing the attributes failed", tmp);
    st = mg_io_agree(comm, st);

    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
    for (int i = 0; st == MG_OK && i < n; i++) st = save_entry(file, tmp, &entries[i], dxpl);
    H5Pclose(dxpl);
    if (H5Fclose(file) < 0 && st == MG_OK)
        st = mg_error(MG_EIO, "checkpoint %s: closing the file failed (disk full?)", tmp);
    if ((st = mg_io_agree(comm, st)) != MG_OK) {
        if (rank == 0) unlink(tmp);
        return st;
    }

    // every rank has closed the file: make it durable, then give it its name
    fault_point(rank);
    MPI_Barrier(comm);
    if (rank == 0) {
        char dir[4096];
        dir_of(path, dir, sizeof dir);
        if (fsync_path(tmp, 0) != 0)
            st = mg_error(MG_EIO, "checkpoint %s: fsync failed: %s", tmp, strerror(errno));
        else if (rename(tmp, path) != 0)
            st = mg_error(MG_EIO, "checkpoint: renaming %s to %s failed: %s", tmp, path,
                          strerror(errno));
        else
            fsync_path(dir, 1); /* the rename itself; not fatal where unsupported */
        if (st != MG_OK) unlink(tmp);
    }
    return mg_io_agree(comm, st);
}

/* ---- load -------------------------------------------------------------------- */

static herr_t collect_attr(hid_t loc, const char *name, const H5A_info_t *info, void *data) {
    (void)info;
    mg_ckpt_attr_list *l = data;
    if (strcmp(name, "format") == 0 || strcmp(name, "version") == 0) return 0;
    if (l->n >= l->max) {
        l->dropped++;
        return 0;
    }
    mg_ckpt_attr *a = &l->attrs[l->n];
    snprintf(a->key, sizeof a->key, "%s", name);
    if (mg_h5_attr_read_text(loc, name, a->value, sizeof a->value) < 0)
        snprintf(a->value, sizeof a->value, "(unreadable)");
    l->n++;
    return 0;
}

int mg_ckpt_attrs_collect(hid_t file, mg_ckpt_attr_list *l) {
    hsize_t idx = 0;
    l->n = l->dropped = 0;
    if (H5Aiterate2(file, H5_INDEX_CRT_ORDER, H5_ITER_INC, &idx, collect_attr, l) >= 0) return 0;
    idx = 0;
    l->n = l->dropped = 0;
    return H5Aiterate2(file, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attr, l) >= 0 ? 0 : -1;
}

int mg_ckpt_check_format(hid_t file, const char *path) {
    char format[256], version[64];
    if (mg_h5_attr_read_text(file, "format", format, sizeof format) < 0)
        return mg_error(MG_EFORMAT,
                        "%s is an HDF5 file but not a meshgrad checkpoint (it has no "
                        "\"format\" attribute)",
                        path);
    if (strcmp(format, MG_CHECKPOINT_FORMAT) != 0)
        return mg_error(MG_EFORMAT,
                        "%s is not a meshgrad checkpoint: its format is \"%s\", "
                        "expected \"%s\"",
                        path, format, MG_CHECKPOINT_FORMAT);
    if (mg_h5_attr_read_text(file, "version", version, sizeof version) < 0)
        return mg_error(MG_EFORMAT, "%s: the checkpoint has no \"version\" attribute", path);
    char *end;
    long v = strtol(version, &end, 10);
    if (*end || v != MG_CHECKPOINT_VERSION)
        return mg_error(MG_EFORMAT,
                        "%s: wrong checkpoint version: found version %s, expected "
                        "version %d (this build of meshgrad reads version %d only)",
                        path, version, MG_CHECKPOINT_VERSION, MG_CHECKPOINT_VERSION);
    return MG_OK;
}

/* Opens a checkpoint on every rank of comm and checks format and version. */
static int open_checkpoint(const char *path, MPI_Comm comm, hid_t *out) {
    mg_h5_init();
    *out = -1;
    int st = mg_io_agree(comm, mg_file_precheck(path, "checkpoint"));
    if (st != MG_OK) return st;
    hid_t fapl = mg_h5_fapl_mpio(comm);
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (file < 0) {
        mg_h5_err he;
        mg_h5_error_get(&he); /* before any other HDF5 call clears the stack */
        st = he.truncated
                 ? mg_error(MG_EFORMAT,
                            "checkpoint %s is truncated (shorter than its HDF5 "
                            "superblock says): the file is incomplete or corrupt",
                            path)
                 : mg_error(MG_EFORMAT, "cannot open checkpoint %s: %s: the file is damaged", path,
                            he.innermost);
    }
    H5Pclose(fapl);
    if (st == MG_OK) st = mg_ckpt_check_format(file, path);
    if ((st = mg_io_agree(comm, st)) != MG_OK) {
        if (file >= 0) H5Fclose(file);
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

/* The dataset of entry e exists with type float32 and e's global shape. */
static int check_dataset(hid_t file, const char *path, const mg_ckpt_entry *e) {
    int want_ndim = e->tensor ? e->tensor->spec.ndim : e->ndim;
    const int64_t *want_shape = e->tensor ? e->tensor->spec.shape : e->shape;
    char want[160], have[160], tname[32];
    mg_shape_format(want, sizeof want, want_ndim, want_shape);
    if (!mg_h5_exists(file, e->name))
        return mg_error(MG_EFORMAT, "checkpoint %s has no dataset /%s (expected shape %s)", path,
                        e->name, want);
    hid_t d = H5Dopen2(file, e->name, H5P_DEFAULT);
    if (d < 0) return mg_error(MG_EFORMAT, "checkpoint %s: /%s is not a dataset", path, e->name);
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
    H5Tclose(type);
    H5Sclose(space);
    H5Dclose(d);
    return st;
}

/* Reads this rank's block of one entry (collective). */
/* An entry other ranks hold: its part of the collective read, selecting nothing. */
static int load_nothing(hid_t file, const char *path, const mg_ckpt_entry *e, hid_t dxpl) {
    if (mg_shape_numel(e->ndim, e->shape) == 0) return MG_OK;
    float dummy = 0;
    int64_t none[MG_MAX_DIMS] = {0};
    hid_t d = H5Dopen2(file, e->name, H5P_DEFAULT), space = H5Dget_space(d);
    hid_t mspace = select_block(space, e->ndim, none, none, 0);
    int st = H5Dread(d, H5T_NATIVE_FLOAT, mspace, space, dxpl, &dummy) < 0
                 ? mg_error(MG_EIO, "checkpoint %s: reading dataset /%s failed", path, e->name)
                 : MG_OK;
    H5Sclose(mspace);
    H5Sclose(space);
    H5Dclose(d);
    return st;
}

static int load_entry(hid_t file, const char *path, mg_ckpt_entry *e, hid_t dxpl) {
    if (!e->tensor) return load_nothing(file, path, e, dxpl);
    const mg_spec *spec = &e->tensor->spec;
    mg_tensor *local = e->tensor->local;
    mg_spec rspec = replicate_partial(spec);
    int64_t lshape[MG_MAX_DIMS], off[MG_MAX_DIMS];
    mg_spec_local(&rspec, NULL, lshape, off);
    int take = 1; /* Partial: the value on coordinate 0, zeros elsewhere */
    for (int d = 0; d < spec->mesh->ndim; d++)
        if (spec->p[d].kind == MG_PLACE_PARTIAL && spec->mesh->coord[d] != 0) take = 0;
    if (mg_shape_numel(spec->ndim, spec->shape) == 0) return MG_OK;

    int st = MG_OK;
    float *staged, *data = host_data(local, &staged, 0), dummy = 0;
    if (!data) st = mg_error(MG_ENOMEM, "checkpoint: out of memory staging /%s", e->name);
    hid_t d = H5Dopen2(file, e->name, H5P_DEFAULT);
    hid_t space = H5Dget_space(d);
    hid_t mspace = select_block(space, spec->ndim, lshape, off, take && data);
    if (H5Dread(d, H5T_NATIVE_FLOAT, mspace, space, dxpl, data ? data : &dummy) < 0) {
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
    int st = check_entries(path, entries, n);
    if (st != MG_OK) return st;
    MPI_Comm comm = MPI_COMM_WORLD;
    hid_t file;
    if ((st = open_checkpoint(path, comm, &file)) != MG_OK) return st;
    for (int i = 0; st == MG_OK && i < n; i++) st = check_dataset(file, path, &entries[i]);
    st = mg_io_agree(comm, st);
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
    for (int i = 0; st == MG_OK && i < n; i++)
        st = mg_io_agree(comm, load_entry(file, path, &entries[i], dxpl));
    H5Pclose(dxpl);
    if (st == MG_OK) st = read_attrs_open(file, path, attrs_out, max_attrs, nattrs_out);
    H5Fclose(file);
    return mg_io_agree(comm, st);
}

int mg_checkpoint_read_attrs(const char *path, mg_ckpt_attr *attrs_out, int max_attrs,
                             int *nattrs_out) {
    if (!path) return mg_error(MG_EINVAL, "checkpoint: give a file path");
    MPI_Comm comm = MPI_COMM_WORLD;
    hid_t file;
    int st = open_checkpoint(path, comm, &file);
    if (st != MG_OK) return st;
    st = read_attrs_open(file, path, attrs_out, max_attrs, nattrs_out);
    H5Fclose(file);
    return mg_io_agree(comm, st);
}
