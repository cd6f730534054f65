/* checkpoint_internal.h: what checkpoint.c shares with checkpoint_files.c:
 * the format/version check, the attribute listing and the chunk shape. */
#ifndef MG_CHECKPOINT_INTERNAL_H
#define MG_CHECKPOINT_INTERNAL_H

#include <hdf5.h>

#include "io/checkpoint.h"

typedef struct {
    mg_ckpt_attr *attrs;
    int max, n;
    int dropped; /* attributes beyond max */
} mg_ckpt_attr_list;

/* The root attributes other than format and version, in creation order. */
int mg_ckpt_attrs_collect(hid_t file, mg_ckpt_attr_list *l);
/* MG_OK when the file says format "meshgrad-checkpoint", version 1. */
int mg_ckpt_check_format(hid_t file, const char *path);
/* Chunk dims of at most 4 MiB for a float32 dataset of this shape (numel > 0). */
void mg_ckpt_chunk_dims(int ndim, const int64_t *shape, hsize_t *chunk);

#endif
