/* tokens.c: token data sets and the window loader (see tokens.h). */
#include "io/tokens.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>

#include "backend/device.h"
#include "io/files.h"
#include "io/h5util.h"
#include "rng.h"
#include "status.h"

#define MAX_VOCAB (1 << 24) /* ids travel as floats: exact up to 2^24 */
#define SCAN_TOKENS ((int64_t)1 << 20) /* tokens checked per read at open */
/* Philox streams of the batches: step s draws from stream DATA_STREAM + s, apart
 * from the streams that initialize parameters (their index in the table). */
#define DATA_STREAM ((uint64_t)1 << 62)

struct mg_tokens {
    char path[MG_PATH_MAX];
    char split[16];
    mg_comm *comm;
    hid_t file, dset;
    hid_t mem_type; /* H5T_NATIVE_UINT8, H5T_NATIVE_UINT16 or H5T_NATIVE_INT32 */
    size_t elem;    /* 1, 2 or 4 bytes */
    int64_t n;
    int vocab;
    void *buf; /* read buffer, grows */
    size_t buf_bytes;
};

int64_t mg_tokens_count(const mg_tokens *t) { return t->n; }
int mg_tokens_vocab(const mg_tokens *t) { return t->vocab; }

void mg_tokens_close(mg_tokens *t) {
    if (!t) return;
    if (t->dset >= 0) H5Dclose(t->dset);
    if (t->file >= 0) H5Fclose(t->file);
    free(t->buf);
    free(t);
}

static int h5_failed(const mg_tokens *t, const char *what) {
    mg_h5_err e;
    mg_h5_error_get(&e);
    return mg_error(MG_EIO, "token data set %s /%s: %s failed: %s", t->path, t->split, what,
                    e.innermost);
}

/* The raw tokens [first, first + n) into t->buf. */
static int read_raw(mg_tokens *t, int64_t first, int64_t n) {
    size_t bytes = (size_t)(n > 0 ? n : 1) * t->elem;
    if (bytes > t->buf_bytes) {
        void *p = realloc(t->buf, bytes);
        if (!p) return mg_error(MG_ENOMEM, "token data set: out of memory for %lld tokens", (long long)n);
        t->buf = p;
        t->buf_bytes = bytes;
    }
    if (n == 0) return MG_OK;
    hsize_t start = (hsize_t)first, count = (hsize_t)n;
    hid_t fs = H5Dget_space(t->dset), ms = H5Screate_simple(1, &count, NULL);
    int bad = fs < 0 || ms < 0 ||
              H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL) < 0 ||
              H5Dread(t->dset, t->mem_type, ms, fs, H5P_DEFAULT, t->buf) < 0;
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    return bad ? h5_failed(t, "reading tokens") : MG_OK;
}

static int64_t raw_at(const mg_tokens *t, int64_t i) {
    if (t->elem == 1) return ((const uint8_t *)t->buf)[i];
    if (t->elem == 2) return ((const uint16_t *)t->buf)[i];
    return ((const int32_t *)t->buf)[i];
}

int mg_tokens_read(mg_tokens *t, int64_t first, int64_t n, float *out) {
    if (first < 0 || n < 0 || first > t->n - n)
        return mg_error(MG_EINVAL, "token data set %s /%s: tokens [%lld, %lld) are out of its %lld",
                        t->path, t->split, (long long)first, (long long)(first + n), (long long)t->n);
    int st = read_raw(t, first, n);
    for (int64_t i = 0; st == MG_OK && i < n; i++) out[i] = (float)raw_at(t, i);
    return st;
}

/* This rank's share of the split, every token below vocab_size. */
static int scan(mg_tokens *t) {
    int64_t lo = t->n * t->comm->rank / t->comm->size, hi = t->n * (t->comm->rank + 1) / t->comm->size;
    for (int64_t first = lo; first < hi; first += SCAN_TOKENS) {
        int64_t n = hi - first < SCAN_TOKENS ? hi - first : SCAN_TOKENS;
        int st = read_raw(t, first, n);
        if (st != MG_OK) return st;
        for (int64_t i = 0; i < n; i++) {
            int64_t v = raw_at(t, i);
            if (v < 0 || v >= t->vocab)
                return mg_error(MG_EFORMAT,
                                "token data set %s /%s: token %lld is %lld, outside the vocabulary "
                                "of %d (vocab_size)",
                                t->path, t->split, (long long)(first + i), (long long)v, t->vocab);
        }
    }
    return MG_OK;
}

/* Opens the file, checks the dataset and the vocabulary. */
static int open_split(mg_tokens *t) {
    int st = mg_file_precheck(t->path, "token data set");
    if (st != MG_OK) return st;
    t->file = H5Fopen(t->path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (t->file < 0) return h5_failed(t, "opening the file");
    char rel[32], text[64];
    snprintf(rel, sizeof rel, "%s/tokens", t->split);
    if (!mg_h5_exists(t->file, rel))
        return mg_error(MG_EFORMAT,
                        "token data set %s has no /%s: make one with `meshgrad data text2h5 IN.txt "
                        "OUT.h5` or `meshgrad data bin2h5 IN.bin OUT.h5` (docs/DATA.md)",
                        t->path, rel);
    if (mg_h5_attr_read_text(t->file, "vocab_size", text, sizeof text) < 0)
        return mg_error(MG_EFORMAT, "token data set %s has no vocab_size attribute: give its root "
                        "the number of token ids (docs/DATA.md)", t->path);
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || *end || v < 1 || v > MAX_VOCAB)
        return mg_error(MG_EFORMAT, "token data set %s: vocab_size '%s' is not 1..%d", t->path,
                        text, MAX_VOCAB);
    t->vocab = (int)v;
    if ((st = mg_h5_open_dataset(t->file, rel, t->path, &t->dset)) != MG_OK) return st;
    hid_t type = H5Dget_type(t->dset), space = H5Dget_space(t->dset);
    int ndim = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
    hsize_t n = 0;
    if (ndim == 1) H5Sget_simple_extent_dims(space, &n, NULL);
    int cls = H5Tget_class(type);
    size_t size = H5Tget_size(type);
    int sign = H5Tget_sign(type);
    char tname[32];
    mg_h5_type_name(type, tname, sizeof tname);
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    if (ndim != 1)
        return mg_error(MG_EFORMAT, "token data set %s: /%s has %d dims; it must be 1-D", t->path,
                        rel, ndim);
    if (cls == H5T_INTEGER && size == 1 && sign == H5T_SGN_NONE) {
        t->mem_type = H5T_NATIVE_UINT8;
        t->elem = 1;
    } else if (cls == H5T_INTEGER && size == 2 && sign == H5T_SGN_NONE) { /* nanoGPT's, llm.c's */
        t->mem_type = H5T_NATIVE_UINT16;
        t->elem = 2;
    } else if (cls == H5T_INTEGER && size == 4 && sign == H5T_SGN_2) {
        t->mem_type = H5T_NATIVE_INT32;
        t->elem = 4;
    } else {
        return mg_error(MG_EFORMAT, "token data set %s: /%s holds %s; it must be uint8, uint16 or "
                        "int32 (docs/DATA.md)", t->path, rel, tname);
    }
    if ((st = mg_h5_check_stored(t->dset, t->path, rel, t->elem)) != MG_OK) return st;
    t->n = (int64_t)n;
    if (t->n < 2)
        return mg_error(MG_EFORMAT, "token data set %s: /%s holds %lld token%s; it needs at least 2",
                        t->path, rel, (long long)t->n, t->n == 1 ? "" : "s");
    return scan(t);
}

mg_tokens *mg_tokens_open(const char *path, const char *split, mg_comm *comm) {
    mg_h5_init();
    int st = MG_OK;
    if (!path || !split || !comm)
        st = mg_error(MG_EINVAL, "token data set: NULL path, split or comm");
    else if (strcmp(split, "train") != 0 && strcmp(split, "val") != 0)
        st = mg_error(MG_EINVAL, "token data set: split '%s' is not train or val", split);
    else if ((st = mg_path_check(path, "token data set", 0)) != MG_OK) {
    }
    mg_tokens *t = st == MG_OK ? calloc(1, sizeof *t) : NULL;
    if (st == MG_OK && !t) st = mg_error(MG_ENOMEM, "token data set: out of memory");
    if (t) {
        snprintf(t->path, sizeof t->path, "%s", path);
        snprintf(t->split, sizeof t->split, "%s", split);
        t->comm = comm;
        t->file = t->dset = -1;
        st = open_split(t);
    }
    if (comm) st = mg_io_agree(comm, st);
    if (st != MG_OK) {
        mg_tokens_close(t);
        return NULL;
    }
    return t;
}

void mg_tokens_train_starts(const mg_tokens *t, uint64_t seed, int64_t step, int64_t B, int64_t T,
                            int64_t *starts) {
    /* starts 0 .. N - T - 1 (-1, refused by mg_tokens_batch, when no window fits) */
    uint64_t span = t->n > T ? (uint64_t)(t->n - T) : 0;
    for (int64_t r = 0; r < B; r++) {
        uint64_t bits = mg_rng_bits_at(seed, DATA_STREAM + (uint64_t)step, (uint64_t)r);
        starts[r] = span ? (int64_t)((bits * span) >> 32) : -1;
    }
}

int64_t mg_tokens_eval_windows(const mg_tokens *t, int64_t T) { return T > 0 ? (t->n - 1) / T : 0; }

void mg_tokens_eval_starts(int64_t first, int64_t n, int64_t T, int64_t *starts) {
    for (int64_t i = 0; i < n; i++) starts[i] = (first + i) * T;
}

static int check_spec(const mg_tokens *t, const mg_spec *s, int64_t B, int64_t T, const char *what) {
    int64_t shape[2] = {B, T};
    char have[64];
    if (!s) return mg_error(MG_EINVAL, "token loader: the %s spec is NULL", what);
    if (!mg_shape_equal(s->ndim, s->shape, 2, shape))
        return mg_error(MG_ESHAPE, "token loader: the %s spec has global shape %s, the batch is (%lld, %lld)",
                        what, mg_shape_format(have, sizeof have, s->ndim, s->shape), (long long)B,
                        (long long)T);
    if (mg_spec_has_partial(s))
        return mg_error(MG_EPLACEMENT, "token loader: the %s spec has a Partial placement; a batch "
                                       "can be Shard or Replicate only", what);
    (void)t;
    return MG_OK;
}

/* This rank's block of x (shift 0) or y (shift 1) on the host. */
static int read_block(mg_tokens *t, const int64_t *starts, int64_t T, const mg_spec *s, int shift,
                      mg_tensor **out, mg_arena *arena) {
    int64_t local[MG_MAX_DIMS], off[MG_MAX_DIMS];
    mg_spec_local(s, NULL, local, off);
    *out = mg_tensor_alloc_on(arena, MG_DEVICE_CPU, 2, local);
    if (!*out) return mg_last_code();
    for (int64_t i = 0; i < local[0]; i++) {
        int64_t first = starts[off[0] + i] + off[1] + shift;
        if (starts[off[0] + i] < 0 || starts[off[0] + i] + T + 1 > t->n)
            return mg_error(MG_EINVAL, "token loader: window %lld starts at %lld; the %s split holds "
                                       "%lld tokens, too few for a window of %lld",
                            (long long)(off[0] + i), (long long)starts[off[0] + i], t->split,
                            (long long)t->n, (long long)(T + 1));
        int st = mg_tokens_read(t, first, local[1], (*out)->data + i * local[1]);
        if (st != MG_OK) return st;
    }
    return MG_OK;
}

int mg_tokens_batch(mg_tokens *t, const int64_t *starts, int64_t B, int64_t T,
                    const mg_spec *x_spec, const mg_spec *y_spec, mg_dtensor **x, mg_dtensor **y,
                    mg_arena *arena) {
    mg_tensor *xt = NULL, *yt = NULL;
    if (x) *x = NULL;
    if (y) *y = NULL;
    int st = !x || !y ? mg_error(MG_EINVAL, "token loader: NULL x or y") : T >= 1 && B >= 0 ? MG_OK
                              : mg_error(MG_EINVAL, "token loader: a batch of %lld windows of %lld "
                                                    "tokens", (long long)B, (long long)T);
    if (st == MG_OK) st = check_spec(t, x_spec, B, T, "x");
    if (st == MG_OK) st = check_spec(t, y_spec, B, T, "y");
    if (st == MG_OK) st = read_block(t, starts, T, x_spec, 0, &xt, arena);
    if (st == MG_OK) st = read_block(t, starts, T, y_spec, 1, &yt, arena);
    int device = mg_get_device();
    if (st == MG_OK && device != MG_DEVICE_CPU) { /* then uploaded (takes xt, yt) */
        xt = mg_tensor_to_device(arena, xt, device);
        yt = mg_tensor_to_device(arena, yt, device);
        if (!xt || !yt) st = mg_last_code() ? mg_last_code() : MG_ENOMEM;
    }
    st = mg_io_agree(t->comm, st);
    if (st == MG_OK) {
        *x = mg_dtensor_make(x_spec, xt, arena); /* takes xt, even on failure */
        xt = NULL;
        if (*x) *y = mg_dtensor_make(y_spec, yt, arena);
        yt = NULL;
        if (!*x || !*y) {
            mg_dtensor_free(*x);
            st = mg_last_code() ? mg_last_code() : MG_ENOMEM;
        }
    }
    mg_tensor_free(xt);
    mg_tensor_free(yt);
    return st;
}
