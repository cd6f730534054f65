/* checkpoint_internal.h: what the checkpoint files of src/io share
 * (checkpoint.c saves, checkpoint_load.c loads, checkpoint_files.c finds and
 * prunes, checkpoint_info.c inspects, checkpoint_check.c says what a file
 * must be): attributes, the format check, the chunk shape, dataset checks. */
#ifndef MG_CHECKPOINT_INTERNAL_H
#define MG_CHECKPOINT_INTERNAL_H

#include <hdf5.h>

#include "io/checkpoint.h"

typedef struct {
    mg_ckpt_attr *attrs;
    int max, n;
    int dropped; /* attributes beyond max (counted up to a few thousand) */
} mg_ckpt_attr_list;

/* Checks of mg_checkpoint_save/load's arguments (identical on every rank). */
int mg_ckpt_check_entries(const char *path, const mg_ckpt_entry *entries, int n);
/* The spec with Partial placements replaced by Replicate. */
mg_spec mg_ckpt_replicate_partial(const mg_spec *s);
/* An entry's global shape: its tensor's, or the one it gives (tensor NULL). */
const int64_t *mg_ckpt_entry_shape(const mg_ckpt_entry *e, int *ndim);
/* Selects this rank's block (lshape at off) in fspace, or nothing when !take,
 * and returns the matching memory space. */
hid_t mg_ckpt_select_block(hid_t fspace, int ndim, const int64_t *lshape, const int64_t *off,
                           int take);
/* Host memory for a local tensor: its own data on the CPU, else a staged copy
 * (*tmp, to free) that `to_host` fills when asked. */
float *mg_ckpt_host_data(const mg_tensor *t, float **tmp, int to_host);

/* The root attributes other than format and version, in creation order. */
int mg_ckpt_attrs_collect(hid_t file, mg_ckpt_attr_list *l);
/* MG_OK when the file says format "meshgrad-checkpoint", version 1. */
int mg_ckpt_check_format(hid_t file, const char *path);
/* After a failed H5Fopen: MG_EFORMAT "checkpoint <path> is truncated ..." or
 * "cannot open checkpoint <path>: <HDF5's reason>: the file is damaged". */
int mg_ckpt_open_error(const char *path);
/* Chunk dims of at most 4 MiB for a float32 dataset of this shape (numel > 0). */
void mg_ckpt_chunk_dims(int ndim, const int64_t *shape, hsize_t *chunk);
/* MG_OK when dataset d (named /name in the file `path` of file_bytes bytes) is
 * stored as a checkpoint's data must be (checkpoint_check.c); else MG_EFORMAT
 * naming the file, the dataset and the problem. */
int mg_ckpt_check_layout(hid_t d, const char *path, const char *name, uint64_t file_bytes);
/* Index of the first NaN or infinity in x[0..n), or -1. */
int64_t mg_ckpt_first_nonfinite(const float *x, int64_t n);
/* "[i,j]": flat index i of a block of `shape` placed at `offset` (NULL: 0). */
char *mg_ckpt_format_index(char *buf, size_t len, int ndim, const int64_t *shape,
                           const int64_t *offset, int64_t i);

#endif
