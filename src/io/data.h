/* data.h: HDF5 data sets (docs/DESIGN.md "Data sets") and the batch loader.
 *
 * File layout: /train/inputs float32 (N, ...), /train/labels int32 (N), the same
 * under /test/; root attributes "source" and "license".
 *
 * The loader walks the rows of one split in an epoch order given by
 * Philox(seed, stream = epoch) (mg_rng_permutation), identical on every mesh.
 * Global batch b of an epoch is rows perm[b*B .. b*B+B); an epoch has
 * floor(N / B) batches (the remainder is dropped), then the next epoch starts.
 * mg_loader_next() reads, with parallel HDF5, only the block of the global batch
 * that the given spec assigns to this rank (mg_spec_local on dim 0; a Replicate
 * batch dim reads all B rows), so data-parallel coordinate c of D takes the c-th
 * chunk of each global batch. Labels are returned as floats holding class indices. */
#ifndef MG_DATA_H
#define MG_DATA_H

#include <stdint.h>

#include "dist/comm.h"
#include "dist/dtensor.h"

typedef struct mg_dataset mg_dataset;

/* Collective over `comm`. Opens `split` ("train" or "test") of the file and
 * validates it (datasets present, dtypes float32/int32, row counts equal, N > 0,
 * labels 0..2^24-1). Inputs are checked to be finite as they are read: a NaN
 * or infinity is refused naming the file, the split and the row.
 * Any rank's failure is agreed on, so every rank returns NULL with a message
 * naming the file, the dataset and the problem. */
mg_dataset *mg_dataset_open(const char *path, const char *split, mg_comm *comm);
/* Collective. 1 when the file has a group /<split>, 0 when not; a negative
 * status (agreed) when the file cannot be read. */
int mg_dataset_has_split(const char *path, const char *split, mg_comm *comm);
void mg_dataset_close(mg_dataset *);
int64_t mg_dataset_rows(const mg_dataset *);
int mg_dataset_sample_ndim(const mg_dataset *);           /* e.g. 2 for (N, 8, 8) */
const int64_t *mg_dataset_sample_shape(const mg_dataset *); /* e.g. {8, 8} */
int mg_dataset_num_classes(const mg_dataset *);            /* max label + 1 */

/* Reads the given rows (global indices, any order) into inputs (n * sample numel)
 * and labels (n). Collective over the dataset's comm (every rank calls, n may
 * differ, 0 allowed). */
int mg_dataset_read_rows(mg_dataset *, const int64_t *rows, int64_t n, float *inputs,
                         float *labels);

typedef struct {
    mg_dataset *data;
    int64_t batch; /* global batch size B */
    uint64_t seed;
    int64_t epoch;  /* current epoch, from 0 */
    int64_t cursor; /* index of the next batch within the epoch */
    int64_t *perm;  /* the current epoch's order (N entries) */
} mg_loader;

/* B must be in 1..N. */
int mg_loader_init(mg_loader *, mg_dataset *, int64_t batch, uint64_t seed);
/* Positions the loader (used on resume): epoch and batch index within it. */
int mg_loader_seek(mg_loader *, int64_t epoch, int64_t cursor);
void mg_loader_free(mg_loader *);
/* The next global batch: x with spec x_spec (global shape (B, ...sample)) and y
 * with spec y_spec (global shape (B)), both from `arena` (NULL = heap).
 * Collective. */
int mg_loader_next(mg_loader *, const mg_spec *x_spec, const mg_spec *y_spec, mg_dtensor **x,
                   mg_dtensor **y, mg_arena *arena);
/* Rows first .. first + n - 1 of the current epoch's order, as
 * mg_loader_next gives a batch (specs of global shape (n, ...) and (n)); the
 * cursor does not move. An evaluation walks a split in such chunks. */
int mg_loader_rows(mg_loader *, int64_t first, int64_t n, const mg_spec *x_spec,
                   const mg_spec *y_spec, mg_dtensor **x, mg_dtensor **y, mg_arena *arena);

#endif
