/* train_ckpt_tool.c: a small serial program driven by test_train_ckpt.sh (a
 * helper, not a test by itself). It reads checkpoint files with plain HDF5.
 *   compare A B [RTOL]   every float32 dataset under /params and /optim of A
 *                        exists in B with the same global shape; without RTOL
 *                        the values must be bitwise equal, with it each
 *                        element within RTOL relative (of max(|a|, 1e-3)).
 *                        Prints "N datasets ..., max relative difference X".
 *   corrupt PATH DSET    flips 8 bytes in the middle of the first chunk of
 *                        dataset DSET (its Fletcher32 checksum then fails).
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
    if (strncmp(name, "params/", 7) != 0 && strncmp(name, "optim/", 6) != 0) return 0;
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
    if (bad) fprintf(stderr, "train_ckpt_tool: %s has no /params or /optim datasets\n", a_path);
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

int main(int argc, char **argv) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if ((argc == 4 || argc == 5) && strcmp(argv[1], "compare") == 0)
        return compare(argv[2], argv[3], argc == 5 ? atof(argv[4]) : -1);
    if (argc == 4 && strcmp(argv[1], "corrupt") == 0) return corrupt(argv[2], argv[3]);
    fprintf(stderr, "usage: train_ckpt_tool compare A B [RTOL] | corrupt PATH DATASET\n");
    return 2;
}
