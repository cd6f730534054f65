/* safetensors.h: safetensors files, Hugging Face's format for tensors: an
 * 8-byte little-endian header length N, N bytes of JSON naming each tensor's
 * dtype, shape and data_offsets [begin, end) (bytes, from the end of the
 * header), an optional "__metadata__" object of strings, then the data,
 * row-major and little-endian.
 *
 * The reader trusts nothing in the file: before any data is read, the header
 * must lie inside the file, parse as JSON, and give every tensor a known
 * dtype, a shape whose bytes are exactly end - begin, offsets inside the
 * data, and no two tensors may overlap; a read gives float32 (from F32 or
 * BF16) and refuses a value that is not finite. Each refusal is one line
 * naming the file and what is wrong (MG_EFORMAT; MG_EIO when the file
 * cannot be read).
 *
 * The writer writes F32 tensors through a temporary file of files.h (space
 * reserved first), with the metadata "format": "pt" and "producer":
 * "meshgrad" first, so that mg_st_is_ours tells the files meshgrad wrote
 * (which an export may replace) from any other.
 *
 * All of it is serial and local. Exports mg_st_dtype, mg_st_tensor,
 * mg_st_file, mg_st_open, mg_st_find, mg_st_read, mg_st_close, mg_st_entry,
 * mg_st_write, mg_st_is_ours. */
#ifndef MG_IO_SAFETENSORS_H
#define MG_IO_SAFETENSORS_H

#include <stdint.h>

#include "io/files.h"
#include "io/json.h"

#define MG_ST_MAX_DIMS 8
#define MG_ST_HEADER_MAX 100000000 /* bytes: the safetensors library's own limit */

typedef enum { MG_ST_F32 = 0, MG_ST_BF16 } mg_st_dtype;

typedef struct {
    const char *name; /* in the header's tree */
    mg_st_dtype dtype;
    int ndim;
    int64_t shape[MG_ST_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end; /* bytes from the start of the data */
} mg_st_tensor;

typedef struct {
    char path[MG_PATH_MAX];
    int fd;
    uint64_t size, data_at; /* the file's bytes; where the data starts (8 + N) */
    mg_json *header;        /* the parsed header */
    const mg_json *meta;    /* its "__metadata__", or NULL */
    mg_st_tensor *t;
    int n;
} mg_st_file;

/* Opens `path` and checks its header as above. MG_OK, or an error with
 * nothing left open. */
int mg_st_open(mg_st_file *f, const char *path);
/* The tensor named `name`, or NULL. */
const mg_st_tensor *mg_st_find(const mg_st_file *f, const char *name);
/* Its numel values as float32 into out: MG_OK, MG_EIO (a short read) or
 * MG_EFORMAT naming the first element that is not finite. */
int mg_st_read(const mg_st_file *f, const mg_st_tensor *t, float *out);
void mg_st_close(mg_st_file *f);

/* A tensor to write: float32 values of `shape`. */
typedef struct {
    const char *name;
    int ndim;
    const int64_t *shape;
    const float *data;
} mg_st_entry;

/* Writes the n tensors (F32, in this order) and the metadata pairs meta[0..2
 * nmeta) (key, value, ...) to `target` as a save does (files.h): a temporary
 * file, its space reserved, committed over `target` only when that is absent
 * or a file mg_st_is_ours accepts. */
int mg_st_write(const char *target, const mg_st_entry *e, int n, const char *const *meta,
                int nmeta);
/* 1 when `path` is a safetensors file written by mg_st_write. */
int mg_st_is_ours(const char *path);

#endif
