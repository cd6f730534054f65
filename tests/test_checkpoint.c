/* test_checkpoint.c: HDF5 checkpoints (MPI, run at 1, 2 and 4 ranks).
 * - tensors saved on a 2-D mesh under Shard/Replicate/Partial placements (uneven
 *   and empty shards, 0-d and empty tensors) load under other meshes and
 *   placements with mg_full_tensor equal bit for bit;
 * - the file holds plain global arrays (read back serially with H5Dread),
 *   chunked (<= 4 MiB a chunk) with the Fletcher32 filter, and the attributes;
 * - corrupt, truncated, non-HDF5, wrong-version, non-checkpoint files and
 *   missing or mis-shaped datasets are refused on every rank with a clear
 *   message; mg_checkpoint_info verifies or names the corrupt dataset;
 * - resolve (newest complete checkpoint, .tmp. files ignored) and prune (only
 *   older checkpoints named ckpt-<step>.h5). */
#include <dirent.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dist/dtensor.h"
#include "dist/mesh.h"
#include "io/checkpoint.h"
#include "meshgrad.h"
#include "status.h"
#include "testutil.h"

static int rank, world;
static mg_mesh *m1; /* 1-D, every rank: the mesh of most cases, made once */

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[3];
} tdef;

static const tdef SMALL[] = {
    {"params/fc1.weight", 2, {7, 5}},           {"params/fc1.bias", 1, {3}}, /* 4 ranks: shards of
                                                                                1, 1, 1 and 0 */
    {"optim/fc1.weight/exp_avg", 3, {2, 3, 5}}, {"step_scale", 0, {0}},      {"empty", 2, {0, 4}},
};
enum { NSMALL = sizeof SMALL / sizeof SMALL[0] };
static const tdef BIG = {"params/big", 2, {1100, 1000}}; /* 4.4 MB: two chunks */

/* integer-valued data: Partial addends sum exactly */
static mg_tensor *full_of(const tdef *t, uint64_t seed) {
    mg_tensor *f = mg_tensor_new(t->ndim, t->shape);
    mg_test_fill_int(f->data, f->numel, seed);
    return f;
}

/* placements for a tensor of ndim dims: shards of dims it lacks become R */
static void fit(const mg_placement *p, int n, int ndim, mg_placement *out) {
    for (int i = 0; i < n; i++)
        out[i] = (p[i].kind == MG_PLACE_SHARD && p[i].dim >= ndim) ? MG_REPLICATE : p[i];
}

/* A dtensor of `full` under placements p on mesh (at most one Partial dim, of
 * size k: coordinate 0 holds value - (k-1), the others 1). */
static mg_dtensor *make(const mg_mesh *mesh, const mg_tensor *full, const mg_placement *p0) {
    mg_placement p[4];
    fit(p0, mesh->ndim, full->ndim, p);
    mg_spec spec;
    if (mg_spec_make(&spec, mesh, p, mesh->ndim, full->ndim, full->shape, "test") != MG_OK)
        return NULL;
    mg_dtensor *t = mg_dtensor_zeros(&spec, NULL);
    int64_t lshape[8], off[8], strides[8], lstr[8];
    mg_spec_local(&spec, NULL, lshape, off);
    mg_shape_strides(full->ndim, full->shape, strides);
    mg_shape_strides(full->ndim, lshape, lstr);
    float addend = 0;
    int first = 1;
    for (int d = 0; d < mesh->ndim; d++)
        if (p[d].kind == MG_PLACE_PARTIAL) {
            if (mesh->coord[d] != 0) first = 0;
            addend += (float)(mesh->shape[d] - 1);
        }
    for (int64_t i = 0; i < t->local->numel; i++) {
        int64_t g = 0, rem = i;
        for (int d = 0; d < full->ndim; d++) {
            int64_t c = rem / lstr[d];
            rem %= lstr[d];
            g += (off[d] + c) * strides[d];
        }
        t->local->data[i] = first ? full->data[g] - addend : 1.0f;
    }
    return t;
}

static mg_dtensor *zeros_like(const mg_mesh *mesh, const tdef *t, const mg_placement *p0) {
    mg_placement p[4];
    fit(p0, mesh->ndim, t->ndim, p);
    mg_spec spec;
    if (mg_spec_make(&spec, mesh, p, mesh->ndim, t->ndim, t->shape, "test") != MG_OK) return NULL;
    return mg_dtensor_zeros(&spec, NULL);
}

static int equal_full(const mg_dtensor *t, const mg_tensor *want) {
    mg_tensor *f = mg_full_tensor(t);
    int ok = f && f->numel == want->numel &&
             memcmp(f->data, want->data, (size_t)want->numel * sizeof(float)) == 0;
    mg_tensor_free(f);
    return ok;
}

static mg_mesh *mesh2d(int transposed) {
    int s[2] = {world >= 2 ? world / 2 : 1, world >= 2 ? 2 : 1};
    if (transposed) {
        int t = s[0];
        s[0] = s[1];
        s[1] = t;
    }
    return mg_mesh_new(2, s);
}

static const mg_ckpt_attr ATTRS[3] = {{"step", "42"}, {"seed", "7"}, {"mesh", "2x2 [S(0), R]"}};

/* Saves SMALL (and BIG when with_big) under placements p on mesh. */
static int save_set(const char *path, const mg_mesh *mesh, const mg_placement *p, int with_big) {
    mg_ckpt_entry e[NSMALL + 1];
    mg_tensor *full[NSMALL + 1];
    int n = NSMALL + (with_big ? 1 : 0);
    for (int i = 0; i < n; i++) {
        const tdef *t = i < NSMALL ? &SMALL[i] : &BIG;
        full[i] = full_of(t, (uint64_t)i + 1);
        e[i].name = t->name;
        e[i].tensor = make(mesh, full[i], p);
    }
    int st = mg_checkpoint_save(path, e, n, ATTRS, 3);
    for (int i = 0; i < n; i++) {
        mg_dtensor_free(e[i].tensor);
        mg_tensor_free(full[i]);
    }
    return st;
}

/* Loads SMALL (and BIG) under placements p on mesh; 1 when all equal the originals. */
static int load_set(const char *path, const mg_mesh *mesh, const mg_placement *p, int with_big,
                    int *st_out) {
    mg_ckpt_entry e[NSMALL + 1];
    int n = NSMALL + (with_big ? 1 : 0);
    for (int i = 0; i < n; i++) {
        const tdef *t = i < NSMALL ? &SMALL[i] : &BIG;
        e[i].name = t->name;
        e[i].tensor = zeros_like(mesh, t, p);
    }
    mg_ckpt_attr attrs[8];
    int nattrs = 0;
    int st = mg_checkpoint_load(path, e, n, attrs, 8, &nattrs);
    if (st_out) *st_out = st;
    int ok =
        st == MG_OK && nattrs == 3 && strcmp(mg_ckpt_attr_get(attrs, nattrs, "step"), "42") == 0;
    for (int i = 0; i < n; i++) {
        const tdef *t = i < NSMALL ? &SMALL[i] : &BIG;
        mg_tensor *want = full_of(t, (uint64_t)i + 1);
        if (st == MG_OK && !equal_full(e[i].tensor, want)) {
            fprintf(stderr, "rank %d: %s differs after load\n", rank, t->name);
            ok = 0;
        }
        mg_tensor_free(want);
        mg_dtensor_free(e[i].tensor);
    }
    return ok;
}

/* On rank 0: mg_checkpoint_info(path) returns want_st, with `err` in its
 * error when not NULL, and prints every line of `says` (NULL-ended); else 0,
 * after printing what it said. 1 on the other ranks. */
static int info_says(const char *path, int want_st, const char *err, const char *const *says) {
    if (rank != 0) return 1;
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    int st = mg_checkpoint_info(path, out);
    fclose(out);
    int ok = st == want_st && (!err || strstr(mg_last_error(), err));
    for (int i = 0; ok && says[i]; i++) ok = strstr(text, says[i]) != NULL;
    if (!ok) fprintf(stderr, "info said (%d: %s):\n%s", st, mg_last_error(), text);
    free(text);
    return ok;
}

/* The set (with the big tensor or not) saved to path at Shard(0) over m1,
 * asserted. */
static void save_1d(const char *path, int with_big) {
    const mg_placement p[1] = {MG_SHARD(0)};
    mg_assert_all(save_set(path, m1, p, with_big) == MG_OK, "save: %s", mg_last_error());
}

START_TEST(test_roundtrip_across_meshes) {
    const mg_placement saves[][2] = {
        {MG_SHARD(0), MG_REPLICATE},   {MG_REPLICATE, MG_SHARD(1)},   {MG_SHARD(0), MG_SHARD(1)},
        {MG_PARTIAL_SUM, MG_SHARD(0)}, {MG_SHARD(1), MG_PARTIAL_SUM}, {MG_SHARD(0), MG_SHARD(0)},
    };
    const mg_placement loads1[][1] = {
        {MG_SHARD(0)}, {MG_SHARD(1)}, {MG_REPLICATE}, {MG_PARTIAL_SUM}};
    const mg_placement loads2[][2] = {{MG_SHARD(1), MG_SHARD(0)}, {MG_REPLICATE, MG_REPLICATE}};
    mg_mesh *m2 = mesh2d(0), *m2t = mesh2d(1);
    mg_assert_all(m2 && m2t && m1, "meshes: %s", mg_last_error());
    const char *path = mg_test_path("ckpt-42.h5");
    for (size_t s = 0; s < sizeof saves / sizeof saves[0]; s++) {
        int st = save_set(path, m2, saves[s], 0);
        mg_assert_all(st == MG_OK, "save %zu: %s", s, mg_last_error());
        for (size_t l = 0; l < sizeof loads1 / sizeof loads1[0]; l++) {
            int lst;
            int ok = load_set(path, m1, loads1[l], 0, &lst);
            mg_assert_all(ok, "save pattern %zu, 1-D load pattern %zu: %s", s, l,
                          lst ? mg_last_error() : "values differ");
        }
        for (size_t l = 0; l < sizeof loads2 / sizeof loads2[0]; l++) {
            int lst;
            int ok = load_set(path, l ? m2 : m2t, loads2[l], 0, &lst);
            mg_assert_all(ok, "save pattern %zu, 2-D load pattern %zu: %s", s, l,
                          lst ? mg_last_error() : "values differ");
        }
    }
    mg_mesh_free(m2t);
    mg_mesh_free(m2);
}
END_TEST

/* The file holds plain global arrays: read serially and compare. */
START_TEST(test_file_layout) {
    mg_mesh *m2 = mesh2d(0);
    const mg_placement p[2] = {MG_SHARD(0), MG_REPLICATE};
    const char *path = mg_test_path("layout.h5");
    mg_assert_all(save_set(path, m2, p, 1) == MG_OK, "save: %s", mg_last_error());
    int ok = 1;
    char why[256] = "";
    if (rank == 0) {
        hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        char fmt[64] = "";
        long long version = 0;
        hid_t a = H5Aopen(f, "format", H5P_DEFAULT), at = H5Aget_type(a);
        H5Aread(a, at, fmt);
        H5Tclose(at);
        H5Aclose(a);
        a = H5Aopen(f, "version", H5P_DEFAULT);
        H5Aread(a, H5T_NATIVE_LLONG, &version);
        H5Aclose(a);
        if (strcmp(fmt, "meshgrad-checkpoint") != 0 || version != 1) {
            ok = 0;
            snprintf(why, sizeof why, "format \"%s\" version %lld", fmt, version);
        }
        for (int i = 0; ok && i <= NSMALL; i++) {
            const tdef *t = i < NSMALL ? &SMALL[i] : &BIG;
            mg_tensor *want = full_of(t, (uint64_t)i + 1);
            hid_t d = H5Dopen2(f, t->name, H5P_DEFAULT);
            hid_t sp = H5Dget_space(d), dcpl = H5Dget_create_plist(d);
            hsize_t dims[8] = {0}, chunk[8] = {0};
            int nd = H5Sget_simple_extent_ndims(sp);
            H5Sget_simple_extent_dims(sp, dims, NULL);
            float *got = malloc((size_t)(want->numel + 1) * sizeof(float));
            if (want->numel > 0) H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got);
            int same =
                nd == t->ndim && memcmp(got, want->data, (size_t)want->numel * sizeof(float)) == 0;
            for (int k = 0; k < nd; k++) same &= (int64_t)dims[k] == t->shape[k];
            if (t->ndim > 0 && want->numel > 0) {
                unsigned flags;
                size_t ne = 0;
                unsigned cd[4];
                same &= H5Pget_layout(dcpl) == H5D_CHUNKED;
                H5Pget_chunk(dcpl, nd, chunk);
                hsize_t bytes = 4;
                for (int k = 0; k < nd; k++) bytes *= chunk[k];
                same &= bytes <= (4u << 20);
                same &= H5Pget_filter_by_id2(dcpl, H5Z_FILTER_FLETCHER32, &flags, &ne, cd, 0, NULL,
                                             NULL) >= 0;
            }
            if (!same) {
                ok = 0;
                snprintf(why, sizeof why, "dataset /%s", t->name);
            }
            free(got);
            H5Pclose(dcpl);
            H5Sclose(sp);
            H5Dclose(d);
            mg_tensor_free(want);
        }
        H5Fclose(f);
    }
    mg_assert_all(ok, "serial read of the file: %s", why);
    // uneven 1-D shards and replicas: the big tensor loads on both meshes
    const mg_placement s1[1] = {MG_SHARD(1)}, r1[1] = {MG_REPLICATE};
    mg_assert_all(load_set(path, m1, s1, 1, NULL), "1-D [S(1)] load: %s", mg_last_error());
    mg_assert_all(load_set(path, m1, r1, 1, NULL), "1-D [R] load: %s", mg_last_error());
    // info verifies every checksum
    ok = info_says(path, MG_OK, NULL,
                   (const char *[]){"checksums: all 6 datasets verify", "step = 42",
                                    "/params/big  (1100, 1000)  float32", NULL});
    mg_assert_all(ok, "mg_checkpoint_info on a good file");
    mg_mesh_free(m2);
}
END_TEST

START_TEST(test_attrs) {
    const mg_placement p[1] = {MG_SHARD(0)};
    const char *path = mg_test_path("attrs.h5");
    save_1d(path, 0);
    mg_ckpt_attr got[2];
    int n = 0;
    mg_assert_all(mg_checkpoint_read_attrs(path, got, 2, &n) == MG_OK && n == 2 &&
                      strcmp(got[0].key, "step") == 0 && strcmp(got[1].value, "7") == 0,
                  "read_attrs: n %d: %s", n, mg_last_error());
    mg_assert_all(mg_ckpt_attr_get(got, n, "mesh") == NULL && mg_ckpt_attr_get(got, n, "seed"),
                  "attr_get");
    // many long attributes (a training job's whole configuration), kept in order
    enum { MANY = 40 };
    mg_ckpt_attr *many = calloc(MANY, sizeof *many), *back = calloc(MANY + 1, sizeof *back);
    for (int i = 0; i < MANY; i++) {
        snprintf(many[i].key, sizeof many[i].key, "key%02d", MANY - i);
        memset(many[i].value, 'a' + i % 26, 1000);
    }
    mg_ckpt_entry e = {.name = "params/x", .tensor = zeros_like(m1, &SMALL[0], p)};
    mg_assert_all(mg_checkpoint_save(path, &e, 1, many, MANY) == MG_OK, "save: %s",
                  mg_last_error());
    mg_assert_all(mg_checkpoint_load(path, &e, 1, back, MANY + 1, &n) == MG_OK && n == MANY,
                  "load: n %d: %s", n, mg_last_error());
    int ok = 1;
    for (int i = 0; i < MANY; i++)
        ok &= strcmp(back[i].key, many[i].key) == 0 && strcmp(back[i].value, many[i].value) == 0;
    mg_assert_all(ok, "40 attributes did not come back in order");
    mg_dtensor_free(e.tensor);
    free(many);
    free(back);
}
END_TEST

static void expect_load_fails(const char *path, const char *want1, const char *want2) {
    const mg_placement p[1] = {MG_SHARD(0)};
    int st = 0;
    double t0 = MPI_Wtime();
    int ok = load_set(path, m1, p, 1, &st);
    double secs = MPI_Wtime() - t0;
    const char *msg = mg_last_error();
    mg_assert_all(!ok && st != MG_OK, "%s loaded", path);
    mg_assert_all(strstr(msg, want1) && (!want2 || strstr(msg, want2)),
                  "message \"%s\" lacks \"%s\" / \"%s\"", msg, want1, want2 ? want2 : "");
    mg_assert_all(secs < 10, "refusing %s took %.1f s", path, secs);
}

/* flips bytes in the middle of chunk `idx` of a dataset (rank 0, serial) */
static void corrupt_chunk(const char *path, const char *name, hsize_t idx) {
    if (rank == 0) {
        hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
        hsize_t offset[8];
        unsigned mask;
        haddr_t addr = 0;
        hsize_t size = 0;
        hid_t sp = H5Dget_space(d);
        H5Dget_chunk_info(d, sp, idx, offset, &mask, &addr, &size);
        H5Sclose(sp);
        H5Dclose(d);
        H5Fclose(f);
        FILE *fp = fopen(path, "r+b");
        unsigned char b[16];
        if (!fp || fseek(fp, (long)(addr + size / 2), SEEK_SET) != 0 ||
            fread(b, 1, sizeof b, fp) != sizeof b) {
            fprintf(stderr, "corrupt_chunk: cannot read %s\n", path);
            if (fp) fclose(fp);
            return; // the load that follows then succeeds and the test fails
        }
        for (int i = 0; i < 16; i++) b[i] ^= 0x5A;
        fseek(fp, (long)(addr + size / 2), SEEK_SET);
        fwrite(b, 1, sizeof b, fp);
        fclose(fp);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

START_TEST(test_corrupt) {
    const char *path = mg_test_path("corrupt.h5");
    save_1d(path, 1);
    // chunk 1 (rows 1048..1099) is read only by the last rank under S(0)
    corrupt_chunk(path, "params/big", 1);
    char want[600];
    snprintf(want, sizeof want, "checksum mismatch in %s dataset /params/big: the file is corrupt",
             path);
    expect_load_fails(path, want, NULL);
    int ok = info_says(path, MG_EFORMAT, want,
                       (const char *[]){"checksums: 1 of 6 datasets FAIL: /params/big",
                                        "/params/fc1.weight  (7, 5)  float32  chunks (7, 5)  "
                                        "fletcher32  ok",
                                        NULL});
    mg_assert_all(ok, "mg_checkpoint_info on a corrupt file");
}
END_TEST

START_TEST(test_bad_files) {
    const mg_placement p[1] = {MG_SHARD(0)};
    // truncated
    const char *path = mg_test_path("truncated.h5");
    save_1d(path, 1);
    if (rank == 0) {
        struct stat sb;
        stat(path, &sb);
        if (truncate(path, sb.st_size / 2) != 0) perror(path);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    expect_load_fails(path, "truncated.h5 is truncated", NULL);
    // not HDF5, missing, a directory
    path = mg_test_path("text.h5");
    mg_test_write_text(path, "not a checkpoint\n");
    expect_load_fails(path, "text.h5 is not an HDF5 file", NULL);
    expect_load_fails(mg_test_path("missing.h5"), "cannot open checkpoint",
                      "No such file or directory");
    expect_load_fails(mg_test_dir(), "is a directory", NULL);
    // wrong version, and an HDF5 file that is not a checkpoint
    path = mg_test_path("version.h5");
    save_1d(path, 0);
    if (rank == 0) {
        hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
        hid_t a = H5Aopen(f, "version", H5P_DEFAULT);
        long long two = 2;
        H5Awrite(a, H5T_NATIVE_LLONG, &two);
        H5Aclose(a);
        H5Fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    expect_load_fails(path, "wrong checkpoint version: found version 2, expected version 1", NULL);
    if (rank == 0) {
        hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
        H5Adelete(f, "format");
        H5Fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    expect_load_fails(path, "version.h5 is an HDF5 file but not a meshgrad checkpoint", NULL);
    // a dataset of another shape, and a missing one
    path = mg_test_path("shape.h5");
    save_1d(path, 1);
    tdef other = {"params/fc1.weight", 2, {7, 6}};
    mg_ckpt_entry e = {.name = other.name, .tensor = zeros_like(m1, &other, p)};
    int st = mg_checkpoint_load(path, &e, 1, NULL, 0, NULL);
    mg_assert_all(st == MG_EFORMAT &&
                      strstr(mg_last_error(), "shape.h5: dataset /params/fc1.weight "
                                              "has shape (7, 5) but the tensor loaded into it has "
                                              "global shape (7, 6)"),
                  "%s", mg_last_error());
    mg_dtensor_free(e.tensor);
    tdef absent = {"params/fc2.weight", 1, {4}};
    e.name = absent.name;
    e.tensor = zeros_like(m1, &absent, p);
    st = mg_checkpoint_load(path, &e, 1, NULL, 0, NULL);
    mg_assert_all(st == MG_EFORMAT && strstr(mg_last_error(), "has no dataset /params/fc2.weight"),
                  "%s", mg_last_error());
    // save refusals
    mg_assert_all(mg_checkpoint_save(mg_test_path("nodir/x.h5"), &e, 1, NULL, 0) == MG_EIO &&
                      strstr(mg_last_error(), "nodir does not exist"),
                  "%s", mg_last_error());
    mg_ckpt_attr reserved = {"format", "mine"};
    mg_assert_all(mg_checkpoint_save(mg_test_path("x.h5"), &e, 1, &reserved, 1) == MG_EINVAL &&
                      strstr(mg_last_error(), "\"format\" is reserved"),
                  "%s", mg_last_error());
    mg_ckpt_entry twice[2] = {e, e};
    mg_assert_all(mg_checkpoint_save(mg_test_path("x.h5"), twice, 2, NULL, 0) == MG_EINVAL &&
                      strstr(mg_last_error(), "given twice"),
                  "%s", mg_last_error());
    e.name = "/abs";
    mg_assert_all(mg_checkpoint_save(mg_test_path("x.h5"), &e, 1, NULL, 0) == MG_EINVAL, "bad name");
    mg_dtensor_free(e.tensor);
}
END_TEST

/* 1 (on every rank) when each of keep[] is in dir and none of gone[] is. */
static int files_are(const char *dir_, const char *const *keep, int nkeep, const char *const *gone,
                     int ngone) {
    int ok = 1;
    char path[700];
    if (rank == 0) {
        for (int i = 0; i < nkeep; i++) {
            snprintf(path, sizeof path, "%s/%s", dir_, keep[i]);
            if (access(path, F_OK) != 0) fprintf(stderr, "missing: %s\n", path), ok = 0;
        }
        for (int i = 0; i < ngone; i++) {
            snprintf(path, sizeof path, "%s/%s", dir_, gone[i]);
            if (access(path, F_OK) == 0) fprintf(stderr, "still there: %s\n", path), ok = 0;
        }
    }
    return mg_test_agree(ok);
}

START_TEST(test_resolve_prune) {
    char sub[300];
    snprintf(sub, sizeof sub, "%.250s/run", mg_test_dir());
    if (rank == 0) mkdir(sub, 0755);
    MPI_Barrier(MPI_COMM_WORLD);
    char out[700], path[600];
    int st = mg_checkpoint_resolve(sub, out, sizeof out);
    mg_assert_all(st == MG_EIO && strstr(mg_last_error(), "no complete checkpoint"), "empty dir");
    const int steps[3] = {5, 12, 9};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/ckpt-%d.h5", sub, steps[i]);
        save_1d(path, 0);
    }
    // a crash leftover with a higher step, and a checkpoint named otherwise (step 42)
    snprintf(path, sizeof path, "%s/ckpt-99.h5.tmp.1234", sub);
    mg_test_write_text(path, "half");
    snprintf(path, sizeof path, "%s/latest.h5", sub);
    save_1d(path, 0);
    st = mg_checkpoint_resolve(sub, out, sizeof out);
    mg_assert_all(st == MG_OK && strcmp(out, path) == 0, "resolve gave %.200s: %.200s", out,
                  mg_last_error());
    st = mg_checkpoint_resolve(path, out, sizeof out);
    mg_assert_all(st == MG_OK && strcmp(out, path) == 0, "resolve of a file");
    // pruning after ckpt-12.h5 was written: only older ckpt-<step>.h5 checkpoints go;
    // another name, a later step and a file so named that is no checkpoint stay
    snprintf(path, sizeof path, "%s/ckpt-20.h5", sub);
    save_1d(path, 0);
    snprintf(path, sizeof path, "%s/ckpt-3.h5", sub);
    mg_test_write_text(path, "not a checkpoint");
    mg_assert_all(mg_checkpoint_prune(sub, 2, 12) == MG_OK, "prune: %s", mg_last_error());
    const char *keep[] = {"latest.h5", "ckpt-12.h5", "ckpt-9.h5", "ckpt-20.h5", "ckpt-3.h5",
                          "ckpt-99.h5.tmp.1234"};
    const char *gone[] = {"ckpt-5.h5"};
    mg_assert_all(files_are(sub, keep, 6, gone, 1), "prune 2 kept the wrong files");
    mg_assert_all(mg_checkpoint_prune(sub, 1, 12) == MG_OK, "prune: %s", mg_last_error());
    const char *gone1[] = {"ckpt-5.h5", "ckpt-9.h5"};
    mg_assert_all(files_are(sub, keep, 2, gone1, 2) && files_are(sub, keep + 3, 3, NULL, 0),
                  "prune 1 kept the wrong files");
    mg_assert_all(mg_checkpoint_prune(sub, 0, 12) == MG_EINVAL, "prune 0 accepted");
    if (rank == 0) mg_test_remove_tree(sub, 0);
}
END_TEST

static Suite *make_suite(void) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    m1 = mg_mesh_new(1, &world);
    mg_test_dir_make("ckpt");
    const TTest *tests[] = {test_roundtrip_across_meshes, test_file_layout, test_attrs,
                            test_corrupt, test_bad_files, test_resolve_prune, NULL};
    return mg_test_suite("checkpoint", tests);
}

static void teardown(void) {
    mg_mesh_free(m1);
    mg_test_dir_remove();
}

int main(int argc, char **argv) { return mg_test_main_mpi(&argc, &argv, make_suite, teardown); }
