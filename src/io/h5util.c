/* h5util.c: helpers shared by the HDF5 code of src/io (see h5util.h). */
#include "io/h5util.h"

#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "dist/watchdog.h"
#include "io/files.h"
#include "io/io_state.h"
#include "status.h"
#include "text.h"

/* HDF5 allocates and frees a buffer per chunk (up to 4 MiB), ROMIO a 16 MiB
 * collective buffer per call; with glibc's defaults these come from fresh mmaps
 * and are unmapped or trimmed again, so every chunk pays first-touch page
 * faults: filtered collective reads and writes run several times faster
 * once freed buffers stay in the heap. MG_MALLOC_TUNE=0 keeps
 * glibc's defaults. */
static void tune_malloc(void) {
    const char *env = getenv("MG_MALLOC_TUNE");
    if (env && strcmp(env, "0") == 0) return;
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 128 << 20);
}

void mg_h5_init(void) {
    mg_io_state *c = mg_io();
    if (c->h5_started) return;
    H5open();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    tune_malloc();
    c->h5_started = 1;
}

hid_t mg_h5_fapl_mpio(const mg_comm *comm) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0) return fapl;
    if (H5Pset_fapl_mpio(fapl, comm->mpi, MPI_INFO_NULL) < 0) {
        H5Pclose(fapl);
        return -1;
    }
    return fapl;
}

int mg_io_agree(mg_comm *comm, int status) {
    /* the lowest failing rank r, as the largest (size - r); 0: none failed */
    int64_t first = status < 0 ? comm->size - comm->rank : 0;
    double timeout = mg_watchdog_timeout(), wait = -1;
    char mine[1024] = "";
    if (status < 0) {
        wait = timeout > 0 ? timeout / 2 : 60;
        snprintf(mine, sizeof mine, "%s", mg_last_error());
    }
    int st = mg_comm_agree_max(comm, &first, 1, wait);
    if (st != MG_OK && status < 0) {
        char safe[1100];
        fprintf(stderr, "meshgrad: error: rank %d: %s (the other ranks did not answer within "
                "%g s: they are stuck in a call this rank left; ending the job)\n", comm->rank,
                mg_text_safe(mine[0] ? mine : "failed", safe, sizeof safe), wait);
        mg_comm_abort(comm, 1);
    }
    if (st != MG_OK) return st;
    if (first == 0) return MG_OK;
    int root = comm->size - (int)first;
    struct {
        int32_t code;
        char msg[1024];
    } m = {status, ""};
    if (comm->rank == root) snprintf(m.msg, sizeof m.msg, "%s", mg_last_error());
    if ((st = mg_comm_broadcast_bytes(comm, &m, sizeof m, root)) != MG_OK) return st;
    m.msg[sizeof m.msg - 1] = '\0';
    if (comm->rank != root) mg_error(m.code, "%s", m.msg);
    return m.code;
}

/* The system's reason for a failed read or write, when a message says it. */
static const char *cause_of(const char *desc) {
    static const char *const known[] = {"No space left on device", "Disk quota exceeded",
                                        "Input/output error", "Read-only file system",
                                        "Permission denied", "File too large"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strstr(desc, known[i])) return known[i];
    if (strstr(desc, "MPI_ERR_NO_SPACE")) return "No space left on device";
    if (strstr(desc, "MPI_ERR_QUOTA")) return "Disk quota exceeded";
    return NULL;
}

static herr_t error_walk(unsigned n, const H5E_error2_t *err, void *data) {
    mg_h5_err *e = data;
    const char *desc = err->desc ? err->desc : "", *cause = cause_of(desc);
    if (n == 0) snprintf(e->innermost, sizeof e->innermost, "%s", desc);
    if (!e->cause[0] && cause) snprintf(e->cause, sizeof e->cause, "%s", cause);
    if (err->maj_num == H5E_PLINE || strstr(desc, "Fletcher32") || strstr(desc, "checksum"))
        e->checksum = 1;
    if (strstr(desc, "truncated")) e->truncated = 1;
    return 0;
}

/* "<cause> (<innermost>)" */
static void put_cause_first(mg_h5_err *e) {
    char inner[sizeof e->innermost];
    snprintf(inner, sizeof inner, "%s", e->innermost);
    size_t n = (size_t)snprintf(e->innermost, sizeof e->innermost, "%s", e->cause);
    if (n + 4 < sizeof e->innermost)
        snprintf(e->innermost + n, sizeof e->innermost - n, " (%.*s)",
                 (int)(sizeof e->innermost - n - 4), inner);
}

void mg_h5_error_get(mg_h5_err *e) {
    memset(e, 0, sizeof *e);
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, error_walk, e);
    if (!e->innermost[0]) snprintf(e->innermost, sizeof e->innermost, "unknown HDF5 error");
    if (e->cause[0]) put_cause_first(e); /* "No space left on device (file write failed)" */
}

void mg_h5_error_at(mg_h5_err *e, const char *path) {
    mg_h5_error_get(e);
    struct statvfs vf;
    char dir[MG_PATH_MAX];
    mg_path_dir(path, dir, sizeof dir);
    if (e->cause[0] || statvfs(dir, &vf) != 0) return;
    /* a short write says no more than "file write failed": a full disk is the usual cause */
    if ((double)vf.f_bavail * (double)vf.f_frsize < (double)(1 << 20)) {
        snprintf(e->cause, sizeof e->cause, "No space left on device");
        put_cause_first(e);
    }
}

int mg_file_precheck(const char *path, const char *what) {
    struct stat st;
    int fd, rc = mg_file_open_read(path, what, &fd); /* a regular file, readable */
    if (rc != MG_OK) return rc;
    if (fstat(fd, &st) != 0) st.st_size = 0;
    close(fd);
    if (H5Fis_hdf5(path) <= 0)
        return mg_error(MG_EFORMAT, "%s %s is not an HDF5 file (%lld bytes, no HDF5 signature)",
                        what, path, (long long)st.st_size);
    return MG_OK;
}

int mg_h5_exists(hid_t loc, const char *path) {
    char buf[1024];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return 0;
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char saved = buf[i];
        buf[i] = '\0';
        htri_t ok = H5Lexists(loc, buf, H5P_DEFAULT);
        H5L_info_t info;
        int hard = ok > 0 && H5Lget_info(loc, buf, &info, H5P_DEFAULT) >= 0 &&
                   info.type == H5L_TYPE_HARD;
        buf[i] = saved;
        if (ok <= 0) return 0;
        if (!hard) return 1; /* not followed: mg_h5_open_dataset says what it is */
    }
    return 1;
}

int mg_h5_open_dataset(hid_t loc, const char *path, const char *file, hid_t *out) {
    *out = -1;
    char buf[1024], target[1024] = "";
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return mg_error(MG_EINVAL, "%s: the object path '%s' is empty or too long", file, path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) { /* each component a hard link, from the root down */
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char saved = buf[i];
        buf[i] = '\0';
        H5L_info_t info;
        if (H5Lget_info(loc, buf, &info, H5P_DEFAULT) < 0)
            return mg_error(MG_EFORMAT, "%s: /%s is missing", file, buf);
        if (info.type != H5L_TYPE_HARD) {
            const char *f = NULL, *o = NULL;
            if (info.u.val_size < sizeof target &&
                H5Lget_val(loc, buf, target, sizeof target, H5P_DEFAULT) >= 0 &&
                info.type == H5L_TYPE_EXTERNAL)
                H5Lunpack_elink_val(target, info.u.val_size, NULL, &f, &o);
            target[sizeof target - 1] = '\0';
            if (info.type == H5L_TYPE_EXTERNAL)
                return mg_error(MG_EFORMAT, "%s: /%s is an external link (to %s in file %s), not "
                                "data stored in this file: meshgrad follows no links (copy the "
                                "data into the file, e.g. with h5copy)", file, buf,
                                o ? o : "?", f ? f : "?");
            return mg_error(MG_EFORMAT, "%s: /%s is a %s link%s%s, not data stored under that "
                            "name: meshgrad follows no links (copy the data there, e.g. with "
                            "h5copy)", file, buf, info.type == H5L_TYPE_SOFT ? "soft" : "user-defined",
                            info.type == H5L_TYPE_SOFT ? " to " : "",
                            info.type == H5L_TYPE_SOFT ? target : "");
        }
        buf[i] = saved;
    }
    hid_t obj = H5Oopen(loc, path, H5P_DEFAULT);
    H5I_type_t kind = obj >= 0 ? H5Iget_type(obj) : H5I_BADID;
    if (kind != H5I_DATASET) {
        if (obj >= 0) H5Oclose(obj);
        return mg_error(MG_EFORMAT, "%s: /%s is %s, not a dataset", file, path,
                        kind == H5I_GROUP ? "a group" : "an object HDF5 cannot open");
    }
    hid_t dcpl = H5Dget_create_plist(obj);
    int virt = dcpl >= 0 && H5Pget_layout(dcpl) == H5D_VIRTUAL;
    int ext = dcpl >= 0 ? H5Pget_external_count(dcpl) : 0;
    if (dcpl >= 0) H5Pclose(dcpl);
    if (dcpl < 0 || virt || ext != 0) {
        H5Oclose(obj);
        return mg_error(MG_EFORMAT, "%s: dataset /%s %s: meshgrad reads only data stored in the "
                        "file it is given (rewrite the dataset as a plain one, e.g. with h5repack "
                        "or h5copy)", file, path,
                        dcpl < 0 ? "cannot be examined"
                        : virt   ? "is a virtual dataset (its data lies in other files)"
                                 : "keeps its data in external raw files");
    }
    *out = obj;
    return MG_OK;
}

int mg_h5_check_stored(hid_t d, const char *file, const char *name, size_t elem) {
    hid_t space = H5Dget_space(d), dcpl = H5Dget_create_plist(d);
    double bytes = (double)elem; /* in double: a hostile shape may overflow 64 bits */
    hsize_t dims[H5S_MAX_RANK];
    int ndim = space >= 0 ? H5Sget_simple_extent_dims(space, dims, NULL) : -1;
    for (int i = 0; i < ndim; i++) bytes *= (double)dims[i];
    int filtered = dcpl >= 0 && H5Pget_nfilters(dcpl) > 0;
    double stored = (double)H5Dget_storage_size(d);
    if (space >= 0) H5Sclose(space);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (ndim < 0 || (filtered ? bytes > 1024 * stored : stored < bytes))
        return mg_error(MG_EFORMAT, "%s: dataset /%s declares %.0f bytes but the file holds %.0f "
                        "for it: the file is incomplete or damaged (make it again)", file, name,
                        bytes, stored);
    return MG_OK;
}

char *mg_h5_type_name(hid_t type, char *buf, size_t len) {
    size_t size = H5Tget_size(type);
    H5T_class_t cls = H5Tget_class(type);
    if (cls == H5T_FLOAT)
        snprintf(buf, len, "float%zu", size * 8);
    else if (cls == H5T_INTEGER)
        snprintf(buf, len, "%sint%zu", H5Tget_sign(type) == H5T_SGN_NONE ? "u" : "", size * 8);
    else
        snprintf(buf, len, "%s",
                 cls == H5T_STRING     ? "string"
                 : cls == H5T_COMPOUND ? "compound"
                 : cls == H5T_ENUM     ? "enum"
                 : cls == H5T_ARRAY    ? "array"
                                       : "an unsupported type");
    return buf;
}

int mg_h5_is_float32(hid_t type) {
    return H5Tget_class(type) == H5T_FLOAT && H5Tget_size(type) == 4;
}

int mg_h5_is_int32(hid_t type) {
    return H5Tget_class(type) == H5T_INTEGER && H5Tget_size(type) == 4 &&
           H5Tget_sign(type) == H5T_SGN_2;
}

int mg_h5_attr_write_string(hid_t loc, const char *name, const char *value) {
    size_t n = strlen(value);
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, n > 0 ? n : 1);
    H5Tset_strpad(type, H5T_STR_NULLPAD);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    char one = '\0';
    herr_t w = attr >= 0 ? H5Awrite(attr, type, n > 0 ? value : &one) : -1;
    if (attr >= 0) H5Aclose(attr);
    H5Sclose(space);
    H5Tclose(type);
    return w < 0 ? -1 : 0;
}

int mg_h5_attr_write_int(hid_t loc, const char *name, int64_t value) {
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(loc, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    long long v = value;
    herr_t w = attr >= 0 ? H5Awrite(attr, H5T_NATIVE_LLONG, &v) : -1;
    if (attr >= 0) H5Aclose(attr);
    H5Sclose(space);
    return w < 0 ? -1 : 0;
}

static int read_string(hid_t attr, hid_t ftype, char *buf, size_t len) {
    int rc = -1;
    hid_t mtype = H5Tcopy(H5T_C_S1);
    H5Tset_cset(mtype, H5Tget_cset(ftype));
    if (H5Tis_variable_str(ftype) > 0) {
        char *s = NULL;
        H5Tset_size(mtype, H5T_VARIABLE);
        if (H5Aread(attr, mtype, &s) >= 0) {
            snprintf(buf, len, "%s", s ? s : "");
            H5free_memory(s);
            rc = 0;
        }
    } else {
        size_t size = H5Tget_size(ftype);
        char tmp[4096];
        if (size + 1 < sizeof tmp) {
            H5Tset_size(mtype, size + 1); /* room for the NUL a NULLPAD string lacks */
            H5Tset_strpad(mtype, H5T_STR_NULLTERM);
            memset(tmp, 0, sizeof tmp);
            if (H5Aread(attr, mtype, tmp) >= 0) {
                snprintf(buf, len, "%s", tmp);
                rc = 0;
            }
        }
    }
    H5Tclose(mtype);
    return rc;
}

int mg_h5_attr_read_text(hid_t loc, const char *name, char *buf, size_t len) {
    hid_t attr = H5Aopen(loc, name, H5P_DEFAULT);
    if (attr < 0) return -1;
    hid_t ftype = H5Aget_type(attr), space = H5Aget_space(attr);
    int rc = -1;
    if (H5Sget_simple_extent_npoints(space) == 1) {
        H5T_class_t cls = H5Tget_class(ftype);
        if (cls == H5T_STRING) {
            rc = read_string(attr, ftype, buf, len);
        } else if (cls == H5T_INTEGER) {
            long long v;
            if (H5Aread(attr, H5T_NATIVE_LLONG, &v) >= 0) {
                snprintf(buf, len, "%lld", v);
                rc = 0;
            }
        } else if (cls == H5T_FLOAT) {
            double v;
            if (H5Aread(attr, H5T_NATIVE_DOUBLE, &v) >= 0) {
                snprintf(buf, len, "%.17g", v);
                rc = 0;
            }
        }
    }
    H5Sclose(space);
    H5Tclose(ftype);
    H5Aclose(attr);
    return rc;
}
