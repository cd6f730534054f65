/* train_ckpt_tool.c: a small serial program driven by test_train_ckpt.sh (a
 * helper, not a test by itself). It reads checkpoint files with plain HDF5.
 *   compare A B [RTOL]   every float32 dataset under /params and /optim of A
 *                        (and /logits, of `meshgrad eval --logits`)
 *                        exists in B with the same global shape; without RTOL
 *                        the values must be bitwise equal, with it each
 *                        element within RTOL relative (of max(|a|, 1e-3)).
 *                        Prints "N datasets ..., max relative difference X".
 *   corrupt PATH DSET    flips 8 bytes in the middle of the first chunk of
 *                        dataset DSET (its Fletcher32 checksum then fails).
 *   get PATH DSET        prints the shape of DSET, then its values, one a
 *                        line ("%.9g": a float read back exactly).
 * And edits that make damaged or hostile files (tests/test_hostile_ckpt.sh,
 * tests/test_nonfinite.sh, scripts/fuzz-checkpoint.sh), all through HDF5:
 *   set PATH DSET I VALUE    element I (flat) of DSET = VALUE ("nan", "inf", a
 *                            number; converted to the dataset's type)
 *   set-attr PATH NAME TEXT  the root attribute NAME becomes the string TEXT
 *   strip PATH DSET          DSET rewritten, same values, without filters
 *   unwritten PATH DSET      DSET made again, same shape and filters, its chunks
 *                            never written
 *   huge PATH                adds /params/huge: 2^62 float32 in chunks of 1024,
 *                            never written
 *   nest PATH N              adds N groups nested in one another under /params
 *   elink PATH DSET FILE     DSET becomes an external link to DSET in FILE
 *   make-data PATH N RxC M RxC|- [LABEL]
 *                            a data set: N train rows of RxC images and M test
 *                            rows of another shape (or no /test); labels
 *                            row % 10, the first LABEL when given
 * Exit 0 on success, 1 on a difference or failure (message on stderr). */
#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char **names;
    int n, cap;
} name_list;

static herr_t collect(hid_t obj, const char *name, const H5O_info_t *info, void *data) {
    (void)obj;
    name_list *l = data;
    if (info->type != H5O_TYPE_DATASET) return 0;
    if (strncmp(name, "params/", 7) != 0 && strncmp(name, "optim/", 6) != 0 &&
        strcmp(name, "logits") != 0)
        return 0;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 32;
        l->names = realloc(l->names, (size_t)l->cap * sizeof *l->names);
        if (!l->names) return -1;
    }
    l->names[l->n++] = strdup(name);
    return 0;
}

/* The whole dataset as floats (*n elements, shape in dims/ndim); NULL on failure. */
static float *read_all(hid_t file, const char *name, int *ndim, hsize_t *dims, size_t *n) {
    hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    if (d < 0) return NULL;
    hid_t sp = H5Dget_space(d);
    *ndim = H5Sget_simple_extent_ndims(sp);
    H5Sget_simple_extent_dims(sp, dims, NULL);
    *n = (size_t)H5Sget_simple_extent_npoints(sp);
    float *buf = malloc((*n ? *n : 1) * sizeof *buf);
    if (buf && H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
        free(buf);
        buf = NULL;
    }
    H5Sclose(sp);
    H5Dclose(d);
    return buf;
}

static int compare(const char *a_path, const char *b_path, double rtol) {
    hid_t a = H5Fopen(a_path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t b = H5Fopen(b_path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (a < 0 || b < 0) {
        fprintf(stderr, "train_ckpt_tool: cannot open %s\n", a < 0 ? a_path : b_path);
        return 1;
    }
    name_list l = {0};
    H5Ovisit(a, H5_INDEX_NAME, H5_ITER_INC, collect, &l);
    int bad = l.n == 0;
    if (bad) fprintf(stderr, "train_ckpt_tool: %s has no /params, /optim or /logits datasets\n", a_path);
    double worst = 0;
    const char *worst_at = "";
    int differ = 0; /* a bitwise difference was seen */
    for (int i = 0; i < l.n && !bad; i++) {
        int na, nb;
        hsize_t da[32], db[32];
        size_t ca, cb;
        float *x = read_all(a, l.names[i], &na, da, &ca), *y = NULL;
        if (H5Lexists(b, l.names[i], H5P_DEFAULT) > 0) y = read_all(b, l.names[i], &nb, db, &cb);
        if (!x || !y) {
            fprintf(stderr, "train_ckpt_tool: /%s cannot be read from %s\n", l.names[i],
                    x ? b_path : a_path);
            bad = 1;
        } else if (na != nb || memcmp(da, db, (size_t)na * sizeof da[0]) != 0) {
            fprintf(stderr, "train_ckpt_tool: /%s has another shape in %s\n", l.names[i], b_path);
            bad = 1;
        } else {
            for (size_t k = 0; k < ca; k++) {
                double ref = fabs((double)x[k]) > 1e-3 ? fabs((double)x[k]) : 1e-3;
                double rel = fabs((double)x[k] - (double)y[k]) / ref;
                if (rel > worst) {
                    worst = rel;
                    worst_at = l.names[i];
                }
                if (rtol < 0 && !differ && memcmp(&x[k], &y[k], sizeof(float)) != 0) {
                    fprintf(stderr, "train_ckpt_tool: /%s element %zu: %.9g in %s, %.9g in %s\n",
                            l.names[i], k, (double)x[k], a_path, (double)y[k], b_path);
                    differ = 1;
                }
            }
        }
        free(x);
        free(y);
    }
    if (differ || (rtol >= 0 && worst > rtol)) bad = 1;
    printf("%d datasets %s, max relative difference %.2e%s%s\n", l.n,
           rtol < 0 ? (bad ? "NOT bitwise equal" : "bitwise equal")
                    : (bad ? "NOT within tolerance" : "within tolerance"),
           worst, worst > 0 ? " at /" : "", worst > 0 ? worst_at : "");
    for (int i = 0; i < l.n; i++) free(l.names[i]);
    free(l.names);
    H5Fclose(a);
    H5Fclose(b);
    return bad;
}

static int corrupt(const char *path, const char *name) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = f >= 0 ? H5Dopen2(f, name, H5P_DEFAULT) : -1;
    if (d < 0) {
        fprintf(stderr, "train_ckpt_tool: cannot open %s in %s\n", name, path);
        return 1;
    }
    hsize_t offset[32], size = 0;
    unsigned mask;
    haddr_t addr = 0;
    hid_t sp = H5Dget_space(d);
    int rc = H5Dget_chunk_info(d, sp, 0, offset, &mask, &addr, &size) < 0 || size < 16;
    H5Sclose(sp);
    H5Dclose(d);
    H5Fclose(f);
    FILE *fp = rc ? NULL : fopen(path, "r+b");
    if (!fp) {
        fprintf(stderr, "train_ckpt_tool: cannot find or write the first chunk of %s\n", name);
        return 1;
    }
    unsigned char b[8];
    fseek(fp, (long)(addr + size / 2), SEEK_SET);
    rc = fread(b, 1, sizeof b, fp) != sizeof b;
    for (int i = 0; i < 8; i++) b[i] ^= 0xA5;
    fseek(fp, (long)(addr + size / 2), SEEK_SET);
    rc |= fwrite(b, 1, sizeof b, fp) != sizeof b;
    rc |= fclose(fp) != 0;
    return rc;
}

/* ---- edits ------------------------------------------------------------------ */

static hid_t open_rw(const char *path) {
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) fprintf(stderr, "train_ckpt_tool: cannot open %s for writing\n", path);
    return f;
}

static int set_value(const char *path, const char *name, long long index, double value) {
    hid_t f = open_rw(path), d = f >= 0 ? H5Dopen2(f, name, H5P_DEFAULT) : -1;
    if (d < 0) return 1;
    hid_t fs = H5Dget_space(d);
    int ndim = H5Sget_simple_extent_ndims(fs);
    hsize_t dims[32], coord[32], one = 1;
    H5Sget_simple_extent_dims(fs, dims, NULL);
    for (int i = ndim - 1; i >= 0; i--) {
        coord[i] = (hsize_t)index % dims[i];
        index /= (long long)dims[i];
    }
    hid_t ms = H5Screate_simple(1, &one, NULL);
    int rc = H5Sselect_elements(fs, H5S_SELECT_SET, 1, coord) < 0 ||
             H5Dwrite(d, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, &value) < 0;
    H5Sclose(ms);
    H5Sclose(fs);
    H5Dclose(d);
    rc |= H5Fclose(f) < 0;
    if (rc) fprintf(stderr, "train_ckpt_tool: cannot set an element of %s in %s\n", name, path);
    return rc;
}

static int set_attr(const char *path, const char *name, const char *text) {
    hid_t f = open_rw(path);
    if (f < 0) return 1;
    if (H5Aexists(f, name) > 0) H5Adelete(f, name);
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, strlen(text) ? strlen(text) : 1);
    hid_t sp = H5Screate(H5S_SCALAR), a = H5Acreate2(f, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 || H5Awrite(a, type, text) < 0;
    if (a >= 0) H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(type);
    rc |= H5Fclose(f) < 0;
    return rc;
}

/* DSET made again: without filters (strip), or with its own layout and
 * filters but never written (unwritten). */
static int remake(const char *path, const char *name, int strip) {
    hid_t f = open_rw(path), d = f >= 0 ? H5Dopen2(f, name, H5P_DEFAULT) : -1;
    if (d < 0) return 1;
    int ndim;
    hsize_t dims[32];
    size_t n;
    float *x = read_all(f, name, &ndim, dims, &n);
    hid_t dcpl = strip ? H5Pcreate(H5P_DATASET_CREATE) : H5Dget_create_plist(d);
    if (!strip) H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_INCR);
    H5Dclose(d);
    H5Ldelete(f, name, H5P_DEFAULT);
    hid_t sp = H5Screate_simple(ndim, dims, NULL);
    d = H5Dcreate2(f, name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    int rc = !x || d < 0 || (strip && H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL,
                                                H5P_DEFAULT, x) < 0);
    if (d >= 0) H5Dclose(d);
    H5Sclose(sp);
    H5Pclose(dcpl);
    free(x);
    rc |= H5Fclose(f) < 0;
    if (rc) fprintf(stderr, "train_ckpt_tool: cannot rewrite %s in %s\n", name, path);
    return rc;
}

static int huge(const char *path) {
    hid_t f = open_rw(path);
    if (f < 0) return 1;
    hsize_t dims = (hsize_t)1 << 62, chunk = 1024;
    hid_t sp = H5Screate_simple(1, &dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &chunk);
    H5Pset_fletcher32(dcpl);
    hid_t d = H5Dcreate2(f, "params/huge", H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    int rc = d < 0;
    if (d >= 0) H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(sp);
    rc |= H5Fclose(f) < 0;
    return rc;
}

static int nest(const char *path, int n) {
    hid_t f = open_rw(path);
    if (f < 0) return 1;
    hid_t g = H5Gopen2(f, "params", H5P_DEFAULT);
    int rc = g < 0;
    for (int i = 0; i < n && !rc; i++) {
        hid_t inner = H5Gcreate2(g, "deep", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5Gclose(g);
        g = inner;
        rc = g < 0;
    }
    if (g >= 0) H5Gclose(g);
    rc |= H5Fclose(f) < 0;
    return rc;
}

static int elink(const char *path, const char *name, const char *target) {
    hid_t f = open_rw(path);
    if (f < 0) return 1;
    int rc = H5Ldelete(f, name, H5P_DEFAULT) < 0 ||
             H5Lcreate_external(target, name, f, name, H5P_DEFAULT, H5P_DEFAULT) < 0;
    rc |= H5Fclose(f) < 0;
    if (rc) fprintf(stderr, "train_ckpt_tool: cannot link %s in %s\n", name, path);
    return rc;
}

static int write_split(hid_t f, const char *split, int rows, const char *shape, int label0) {
    hsize_t dims[3] = {(hsize_t)rows, 0, 0};
    if (sscanf(shape, "%llux%llu", &dims[1], &dims[2]) != 2) return 1;
    size_t numel = (size_t)(dims[0] * dims[1] * dims[2]);
    float *x = malloc(numel * sizeof *x);
    int32_t *y = malloc((size_t)rows * sizeof *y);
    for (size_t i = 0; i < numel; i++) x[i] = (float)((i * 7) % 13) / 13.0f;
    for (int r = 0; r < rows; r++) y[r] = r == 0 && label0 >= 0 ? label0 : r % 10;
    hid_t g = H5Gcreate2(f, split, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t si = H5Screate_simple(3, dims, NULL), sl = H5Screate_simple(1, dims, NULL);
    hid_t di = H5Dcreate2(g, "inputs", H5T_IEEE_F32LE, si, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t dl = H5Dcreate2(g, "labels", H5T_STD_I32LE, sl, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = H5Dwrite(di, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) < 0 ||
             H5Dwrite(dl, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, y) < 0;
    H5Dclose(di), H5Dclose(dl), H5Sclose(si), H5Sclose(sl), H5Gclose(g);
    free(x), free(y);
    return rc;
}

static int make_data(char **argv, int argc) {
    hid_t f = H5Fcreate(argv[0], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) return 1;
    int label0 = argc > 5 ? atoi(argv[5]) : -1;
    int rc = write_split(f, "train", atoi(argv[1]), argv[2], label0);
    if (strcmp(argv[4], "-") != 0) rc |= write_split(f, "test", atoi(argv[3]), argv[4], -1);
    rc |= H5Fclose(f) < 0;
    return rc;
}

static int get(const char *path, const char *name) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    int ndim = 0;
    hsize_t dims[8] = {0};
    size_t n = 0;
    float *v = f >= 0 ? read_all(f, name, &ndim, dims, &n) : NULL;
    if (f >= 0) H5Fclose(f);
    if (!v || ndim > 8) {
        fprintf(stderr, "train_ckpt_tool: cannot read %s in %s\n", name, path);
        free(v);
        return 1;
    }
    printf("shape");
    for (int i = 0; i < ndim; i++) printf(" %llu", (unsigned long long)dims[i]);
    printf("\n");
    for (size_t i = 0; i < n; i++) printf("%.9g\n", (double)v[i]);
    free(v);
    return 0;
}

int main(int argc, char **argv) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (argc == 4 && strcmp(argv[1], "get") == 0) return get(argv[2], argv[3]);
    if ((argc == 4 || argc == 5) && strcmp(argv[1], "compare") == 0)
        return compare(argv[2], argv[3], argc == 5 ? atof(argv[4]) : -1);
    if (argc == 4 && strcmp(argv[1], "corrupt") == 0) return corrupt(argv[2], argv[3]);
    if (argc == 6 && strcmp(argv[1], "set") == 0)
        return set_value(argv[2], argv[3], atoll(argv[4]), strtod(argv[5], NULL));
    if (argc == 5 && strcmp(argv[1], "set-attr") == 0) return set_attr(argv[2], argv[3], argv[4]);
    if (argc == 4 && strcmp(argv[1], "strip") == 0) return remake(argv[2], argv[3], 1);
    if (argc == 4 && strcmp(argv[1], "unwritten") == 0) return remake(argv[2], argv[3], 0);
    if (argc == 3 && strcmp(argv[1], "huge") == 0) return huge(argv[2]);
    if (argc == 5 && strcmp(argv[1], "elink") == 0) return elink(argv[2], argv[3], argv[4]);
    if (argc == 4 && strcmp(argv[1], "nest") == 0) return nest(argv[2], atoi(argv[3]));
    if ((argc == 7 || argc == 8) && strcmp(argv[1], "make-data") == 0)
        return make_data(argv + 2, argc - 2);
    fprintf(stderr, "usage: train_ckpt_tool compare A B [RTOL] | corrupt PATH DATASET | get PATH "
                    "DATASET | set PATH "
                    "DATASET INDEX VALUE | set-attr PATH NAME TEXT | strip|unwritten PATH DATASET "
                    "| huge PATH | nest PATH N | elink PATH DATASET FILE | make-data PATH N RxC M RxC|- [LABEL]\n");
    return 2;
}
