/* checkpoint_check.c: what a checkpoint file must be before anything is read
 * from it, shared by loading (checkpoint_load.c) and `ckpt info`
 * (checkpoint_info.c); checked so that a hostile or damaged file is judged in
 * bounded time and never loaded unverified.
 * - the format and version attributes; the other root attributes, in order;
 * - a dataset of one or more elements (the only kind a checkpoint holds with
 *   data) is chunked as the writer chunks (mg_ckpt_chunk_dims: whole trailing
 *   dims, at most 4 MiB a chunk; any chunking with chunks of at least 1024
 *   elements is accepted), carries the Fletcher32 checksum, has every chunk
 *   written, and its declared size fits the bytes the file holds (so no read
 *   ever scans a huge unwritten dataset for its fill value);
 * - the values are finite.
 * Exports mg_ckpt_attrs_collect, mg_ckpt_check_format, mg_ckpt_chunk_dims,
 * mg_ckpt_open_error, mg_ckpt_check_layout, mg_ckpt_first_nonfinite,
 * mg_ckpt_format_index, mg_checkpoint_is_one, mg_checkpoint_peek_attr. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint_internal.h"
#include "io/h5util.h"
#include "status.h"
#include "text.h"

#define CHUNK_BYTES (4u << 20) /* the writer's chunks: at most 4 MiB */
#define MIN_CHUNK_NUMEL 1024   /* smaller chunks (unless the dataset is) are refused */
#define MAX_ATTRS_SEEN 4096    /* attributes counted at most (the rest: "and more") */

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

/* ---- attributes -------------------------------------------------------------- */

static herr_t collect_attr(hid_t loc, const char *name, const H5A_info_t *info, void *data) {
    (void)info;
    mg_ckpt_attr_list *l = data;
    if (strcmp(name, "format") == 0 || strcmp(name, "version") == 0) return 0;
    if (l->n >= l->max) {
        l->dropped++;
        return l->n + l->dropped >= MAX_ATTRS_SEEN ? 1 : 0; /* 1 stops the iteration */
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

int mg_ckpt_open_error(const char *path) {
    mg_h5_err he;
    mg_h5_error_get(&he);
    if (he.truncated)
        return mg_error(MG_EFORMAT, "checkpoint %s is truncated (shorter than its HDF5 superblock "
                        "says): the file is incomplete or corrupt", path);
    return mg_error(MG_EFORMAT, "cannot open checkpoint %s: %s: the file is damaged", path,
                    he.innermost);
}

int mg_checkpoint_is_one(const char *path) {
    mg_h5_init();
    if (H5Fis_hdf5(path) <= 0) return 0;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return 0;
    int ok = mg_ckpt_check_format(f, path) == MG_OK;
    H5Fclose(f);
    mg_clear_error();
    return ok;
}

int mg_checkpoint_peek_attr(const char *path, const char *key, char *buf, size_t len) {
    char raw[256];
    mg_h5_init();
    if (len) buf[0] = '\0';
    if (H5Fis_hdf5(path) <= 0) return -1;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return -1;
    int ok = mg_ckpt_check_format(f, path) == MG_OK &&
             mg_h5_attr_read_text(f, key, raw, sizeof raw) == 0;
    H5Fclose(f);
    mg_clear_error();
    if (ok) mg_text_safe(raw, buf, len); /* the file's text, printed: escaped */
    return ok ? 0 : -1;
}

/* ---- datasets ------------------------------------------------------------------ */

int mg_ckpt_check_layout(hid_t d, const char *path, const char *name, uint64_t file_bytes) {
    hid_t space = H5Dget_space(d), dcpl = H5Dget_create_plist(d);
    int ndim = H5Sget_simple_extent_ndims(space), st = MG_OK;
    hsize_t dims[MG_MAX_DIMS] = {0}, chunk[MG_MAX_DIMS] = {0};
    if (ndim < 0 || ndim > MG_MAX_DIMS) {
        st = mg_error(MG_EFORMAT, "checkpoint %s: dataset /%s has %d dims (at most %d): the file "
                      "is damaged", path, name, ndim, MG_MAX_DIMS);
        goto done;
    }
    H5Sget_simple_extent_dims(space, dims, NULL);
    double numel = 1; /* in double: a hostile shape may overflow 64 bits */
    for (int i = 0; i < ndim; i++) numel *= (double)dims[i];
    if (ndim == 0 || numel == 0) goto done; /* a scalar or empty dataset: no chunks */
    if (numel * 4 > (double)file_bytes * 1024) {
        st = mg_error(MG_EFORMAT, "checkpoint %s: dataset /%s declares %.3g elements, more than "
                      "a file of %llu bytes can hold: the file is damaged", path, name, numel,
                      (unsigned long long)file_bytes);
        goto done;
    }
    unsigned flags, cd[4];
    size_t ncd = 4;
    if (H5Pget_layout(dcpl) != H5D_CHUNKED || H5Pget_chunk(dcpl, ndim, chunk) != ndim ||
        H5Pget_filter_by_id2(dcpl, H5Z_FILTER_FLETCHER32, &flags, &ncd, cd, 0, NULL, NULL) < 0) {
        st = mg_error(MG_EFORMAT, "checkpoint %s: dataset /%s has no Fletcher32 checksum (the "
                      "file was rewritten by another tool?): its values cannot be verified",
                      path, name);
        goto done;
    }
    double nchunks = 1, chunk_numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (chunk[i] == 0) chunk[i] = 1;
        nchunks *= (double)((dims[i] + chunk[i] - 1) / chunk[i]);
        chunk_numel *= (double)chunk[i];
    }
    if (chunk_numel < (numel < MIN_CHUNK_NUMEL ? numel : MIN_CHUNK_NUMEL)) {
        st = mg_error(MG_EFORMAT, "checkpoint %s: dataset /%s is stored in chunks of %.0f "
                      "elements (%.0f chunks); meshgrad reads chunks of at least %d", path, name,
                      chunk_numel, nchunks, MIN_CHUNK_NUMEL);
        goto done;
    }
    hsize_t have = 0, storage = H5Dget_storage_size(d);
    H5Sselect_all(space);
    int nfilters = H5Pget_nfilters(dcpl);
    if (H5Dget_num_chunks(d, space, &have) < 0 || (double)have != nchunks)
        st = mg_error(MG_EFORMAT, "checkpoint %s: dataset /%s has %llu of its %.0f chunks "
                      "written: the file is incomplete or damaged", path, name,
                      (unsigned long long)have, nchunks);
    else if (nfilters == 1 && ((double)storage < numel * 4 || storage > file_bytes))
        st = mg_error(MG_EFORMAT, "checkpoint %s: dataset /%s declares %.0f bytes but the file "
                      "holds %llu for it: the file is damaged", path, name, numel * 4,
                      (unsigned long long)storage);
    else if (nfilters > 1 && numel * 4 > 1024.0 * (double)storage)
        st = mg_error(MG_EFORMAT, "checkpoint %s: dataset /%s would inflate %llu stored bytes "
                      "to %.0f (more than 1024 times): refused", path, name,
                      (unsigned long long)storage, numel * 4);
done:
    H5Pclose(dcpl);
    H5Sclose(space);
    return st;
}

int64_t mg_ckpt_first_nonfinite(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

char *mg_ckpt_format_index(char *buf, size_t len, int ndim, const int64_t *shape,
                           const int64_t *offset, int64_t i) {
    int64_t idx[MG_MAX_DIMS];
    for (int d = ndim - 1; d >= 0; d--) {
        idx[d] = (shape[d] > 0 ? i % shape[d] : 0) + (offset ? offset[d] : 0);
        i = shape[d] > 0 ? i / shape[d] : 0;
    }
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && used < len; d++)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld", d ? "," : "", (long long)idx[d]);
    if (used < len) snprintf(buf + used, len - used, "]");
    return buf;
}
