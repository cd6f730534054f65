/* checkpoint.c: saving checkpoints with parallel HDF5 (see checkpoint.h).
 * Exports mg_checkpoint_save and mg_ckpt_attr_get. (Loading is in
 * checkpoint_load.c; resolve and prune in checkpoint_files.c; info in
 * checkpoint_info.c.)
 *
 * Every HDF5 call that changes metadata is made by every rank with the same
 * arguments; the data of an entry moves in one collective H5Dwrite in which
 * each rank selects its block (mg_spec_local), or nothing: a rank whose
 * coordinate is non-zero on a mesh dim where the entry is Replicate holds a
 * copy that another rank writes. Statuses are agreed after each step that one
 * rank alone could fail, so no rank is left waiting in a collective; every
 * collective HDF5 call runs under the collective watchdog.
 *
 * Nothing is destroyed (docs/CHECKPOINTS.md "What a save never does"): rank 0
 * checks that the target is absent or a meshgrad checkpoint, removes the
 * temporary files of earlier saves whose process is gone, creates the
 * temporary file exclusively under an unpredictable name (files.h) and
 * reserves the space the file needs, so a full disk stops the save before
 * any data is written, with one message, on every rank. Only after every rank
 * has closed the file does rank 0 flush it and rename it over the target
 * (checked again just before). On any failure the temporary file is removed
 * and the previous checkpoint is untouched.
 * (Tests: MG_CKPT_FAULT=kill-before-rename makes rank MG_CKPT_FAULT_RANK,
 * default 0, raise SIGKILL just before the rename; MG_CKPT_FAULT=no-reserve
 * skips the reservation, so a full disk fails in the middle of the writes.) */
#include "io/checkpoint.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "backend/backend.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "dist/redistribute.h"
#include "dist/watchdog.h"
#include "io/checkpoint_internal.h"
#include "io/files.h"
#include "io/h5util.h"
#include "status.h"

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

int mg_ckpt_check_entries(const char *path, const mg_ckpt_entry *entries, int n) {
    int st = mg_path_check(path, "checkpoint", MG_TMP_SUFFIX_MAX);
    if (st != MG_OK) return st;
    if (n < 0 || (n > 0 && !entries))
        return mg_error(MG_EINVAL, "checkpoint %s: %d entries given with entries=%p", path, n,
                        (const void *)entries);
    for (int i = 0; i < n; i++) {
        st = check_name(entries[i].name);
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
const int64_t *mg_ckpt_entry_shape(const mg_ckpt_entry *e, int *ndim) {
    *ndim = e->tensor ? e->tensor->spec.ndim : e->ndim;
    return e->tensor ? e->tensor->spec.shape : e->shape;
}

mg_spec mg_ckpt_replicate_partial(const mg_spec *s) {
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
hid_t mg_ckpt_select_block(hid_t fspace, int ndim, const int64_t *lshape, const int64_t *off,
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

/* Host memory for a local tensor: its own data on the CPU, else a staged copy
 * (*tmp, to free) that `to_host` fills when asked. */
float *mg_ckpt_host_data(const mg_tensor *t, float **tmp, int to_host) {
    *tmp = NULL;
    if (t->device == MG_DEVICE_CPU) return t->data;
    *tmp = malloc((size_t)(t->numel > 0 ? t->numel : 1) * sizeof(float));
    mg_backend *be = mg_backend_of(t);
    if (*tmp && to_host && be) be->iface->to_host(be->context, *tmp, t->data, t->numel);
    return *tmp;
}

/* ---- save -------------------------------------------------------------------- */

/* Right after a failed HDF5 call on the checkpoint at path: MG_EIO with the
 * message "checkpoint PATH: WHAT: <where HDF5 saw the error>" (WHAT printf-style). */
static int h5_failed(const char *path, const char *what, ...)
    __attribute__((format(printf, 2, 3)));
static int h5_failed(const char *path, const char *what, ...) {
    mg_h5_err he;
    mg_h5_error_at(&he, path);
    char text[256];
    va_list ap;
    va_start(ap, what);
    vsnprintf(text, sizeof text, what, ap);
    va_end(ap);
    return mg_error(MG_EIO, "checkpoint %s: %s: %s", path, text, he.innermost);
}

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
static int save_entry(mg_comm *comm, hid_t file, const char *path, const mg_ckpt_entry *e,
                      hid_t dxpl) {
    const mg_spec *spec = e->tensor ? &e->tensor->spec : NULL; /* NULL: other ranks hold it */
    mg_spec wspec = spec ? mg_ckpt_replicate_partial(spec) : (mg_spec){0};
    mg_tensor *reduced = NULL;
    int st = MG_OK;
    if (spec && mg_spec_has_partial(spec)) {
        st = mg_redistribute_local(spec, e->tensor->local, &wspec, &reduced, NULL);
        if ((st = mg_io_agree(comm, st)) != MG_OK) return st;
    }
    const mg_tensor *local = reduced ? reduced : spec ? e->tensor->local : NULL;
    int ndim;
    const int64_t *shape = mg_ckpt_entry_shape(e, &ndim);
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
    mg_watchdog_begin_comm("checkpoint dataset create", comm->mpi);
    hid_t d = H5Dcreate2(file, e->name, H5T_IEEE_F32LE, space, lcpl, dcpl, H5P_DEFAULT);
    mg_watchdog_end();
    if (d < 0) st = h5_failed(path, "cannot create dataset /%s", e->name);
    if ((st = mg_io_agree(comm, st)) == MG_OK && numel > 0) {
        int64_t lshape[MG_MAX_DIMS] = {0}, off[MG_MAX_DIMS] = {0};
        float *staged = NULL, *data = NULL, dummy = 0;
        if (local) { /* a rank that holds the entry writes its block */
            mg_spec_local(&wspec, NULL, lshape, off);
            data = mg_ckpt_host_data(local, &staged, 1);
        }
        hid_t mspace = mg_ckpt_select_block(space, ndim, lshape, off, data && is_writer(&wspec));
        mg_watchdog_begin_comm("checkpoint write", comm->mpi);
        herr_t w = H5Dwrite(d, H5T_NATIVE_FLOAT, mspace, space, dxpl, data ? data : &dummy);
        mg_watchdog_end();
        if (w < 0) st = h5_failed(path, "writing dataset /%s failed", e->name);
        if (local && !data)
            st = mg_error(MG_ENOMEM, "checkpoint: out of memory staging /%s", e->name);
        free(staged);
        H5Sclose(mspace);
        st = mg_io_agree(comm, st);
    }
    if (d >= 0) H5Dclose(d);
    H5Pclose(lcpl);
    H5Pclose(dcpl);
    H5Sclose(space);
    mg_tensor_free(reduced);
    return st;
}

/* Bytes the file takes, about: the data with a checksum per chunk, and the
 * metadata (object headers and chunk indexes, attributes, the superblock).
 * Reserved before anything is written; what the file does not use is given
 * back when it is complete. */
static int64_t estimate_bytes(const mg_ckpt_entry *entries, int n, const mg_ckpt_attr *attrs,
                              int nattrs) {
    int64_t total = 16 << 10;
    for (int i = 0; i < n; i++) {
        int ndim;
        const int64_t *shape = mg_ckpt_entry_shape(&entries[i], &ndim);
        int64_t numel = mg_shape_numel(ndim, shape), nchunks = 1;
        total += 2048 + 4 * numel;
        if (ndim == 0 || numel == 0) continue;
        hsize_t chunk[MG_MAX_DIMS];
        mg_ckpt_chunk_dims(ndim, shape, chunk);
        for (int d = 0; d < ndim; d++)
            nchunks *= (shape[d] + (int64_t)chunk[d] - 1) / (int64_t)chunk[d];
        total += 48 * nchunks; /* checksum and index entry */
    }
    for (int i = 0; i < nattrs; i++)
        total += 64 + (int64_t)strlen(attrs[i].key) + (int64_t)strlen(attrs[i].value);
    return total;
}

static int accept_checkpoint(const char *path) { return mg_checkpoint_is_one(path); }

/* 1 when MG_CKPT_FAULT asks for this fault (tests; see the top of the file). */
static int fault_is(const char *what) {
    const char *fault = getenv("MG_CKPT_FAULT");
    return fault && strcmp(fault, what) == 0;
}

/* Rank 0, before anything is written: the directory exists and is writable,
 * the target is absent or a checkpoint, leftovers of killed saves are
 * removed, and the temporary file is made with room for `bytes`. */
static int prepare_target(const char *path, mg_tmp_file *tmp, int64_t bytes) {
    char dir[MG_PATH_MAX];
    struct stat st;
    mg_path_dir(path, dir, sizeof dir);
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
    int exists, rc = mg_file_replaceable(path, "meshgrad checkpoint", accept_checkpoint, &exists);
    if (rc != MG_OK) return rc;
    mg_tmp_clean_stale(dir);
    if ((rc = mg_tmp_create(tmp, path)) != MG_OK) return rc;
    if (!fault_is("no-reserve")) rc = mg_tmp_reserve(tmp, path, bytes);
    if (rc != MG_OK) mg_tmp_discard(tmp);
    return rc;
}

/* MG_CKPT_FAULT=kill-before-rename: the chosen rank dies here (tests). */
static void fault_point(int rank) {
    if (!fault_is("kill-before-rename")) return;
    const char *r = getenv("MG_CKPT_FAULT_RANK");
    if (rank != (r ? atoi(r) : 0)) return;
    fflush(NULL);
    raise(SIGKILL);
}

/* Collective: creates the file `tmp` (truncating rank 0's empty temporary
 * file) for the checkpoint `path`. */
static int create_file(mg_comm *comm, const char *path, const char *tmp, hid_t *out) {
    hid_t fapl = mg_h5_fapl_mpio(comm), fcpl = H5Pcreate(H5P_FILE_CREATE);
    H5Pset_attr_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    mg_watchdog_begin_comm("checkpoint file create", comm->mpi);
    hid_t file = H5Fcreate(tmp, H5F_ACC_TRUNC, fcpl, fapl);
    mg_watchdog_end();
    int st = MG_OK;
    if (file < 0) {
        mg_h5_err he;
        mg_h5_error_at(&he, path);
        st = mg_error(MG_EIO, "cannot create checkpoint %s (as %s): %s", path, tmp, he.innermost);
    }
    H5Pclose(fcpl);
    H5Pclose(fapl);
    *out = file;
    return st;
}

/* Collective: writes the attributes and every entry into the open file, then
 * closes it; the first failure (agreed) stops the writes. */
static int write_file(mg_comm *comm, hid_t file, const char *path, const mg_ckpt_entry *entries,
                      int n, const mg_ckpt_attr *attrs, int nattrs) {
    int st = MG_OK;
    if (write_attrs(file, attrs, nattrs) < 0) st = h5_failed(path, "writing the attributes failed");
    st = mg_io_agree(comm, st);
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
    for (int i = 0; st == MG_OK && i < n; i++) st = save_entry(comm, file, path, &entries[i], dxpl);
    H5Pclose(dxpl);
    mg_watchdog_begin_comm("checkpoint file close", comm->mpi);
    herr_t closed = H5Fclose(file);
    mg_watchdog_end();
    if (closed < 0 && st == MG_OK) st = h5_failed(path, "closing the file failed");
    return mg_io_agree(comm, st);
}

int mg_checkpoint_save(const char *path, const mg_ckpt_entry *entries, int n,
                       const mg_ckpt_attr *attrs, int nattrs) {
    mg_h5_init();
    int st = mg_ckpt_check_entries(path, entries, n);
    if (st == MG_OK) st = check_attrs(path, attrs, nattrs);
    if (st != MG_OK) return st;
    mg_comm *comm = mg_comm_world();
    if (!comm) return mg_last_code();
    mg_tmp_file tmp = {.fd = -1};
    int64_t bytes = estimate_bytes(entries, n, attrs, nattrs);
    if (comm->rank == 0) st = prepare_target(path, &tmp, bytes);
    if ((st = mg_io_agree(comm, st)) != MG_OK) return st;
    // the temporary name is rank 0's (random): every rank opens that file
    if ((st = mg_comm_broadcast_bytes(comm, tmp.path, sizeof tmp.path, 0)) != MG_OK) {
        mg_tmp_discard(&tmp);
        return st;
    }
    hid_t file;
    st = mg_io_agree(comm, create_file(comm, path, tmp.path, &file));
    if (st == MG_OK) { /* H5Fcreate truncated the file, and its reservation: reserve again */
        if (comm->rank == 0 && !fault_is("no-reserve")) st = mg_tmp_reserve(&tmp, path, bytes);
        st = mg_io_agree(comm, st);
    }
    if (st != MG_OK && file >= 0) {
        mg_watchdog_begin_comm("checkpoint file close", comm->mpi);
        H5Fclose(file);
        mg_watchdog_end();
    }
    if (st == MG_OK) st = write_file(comm, file, path, entries, n, attrs, nattrs);
    if (st != MG_OK) {
        mg_tmp_discard(&tmp);
        return st;
    }
    // every rank has closed the file: rank 0 makes it durable and gives it its name
    fault_point(comm->rank);
    if ((st = mg_comm_barrier(comm)) != MG_OK) {
        mg_tmp_discard(&tmp);
        return st;
    }
    if (comm->rank == 0) st = mg_tmp_commit(&tmp, path, "meshgrad checkpoint", accept_checkpoint);
    return mg_io_agree(comm, st);
}
