/* checkpoint.h: HDF5 checkpoints (DESIGN.md "Formats").
 *
 * One file; each entry is a distributed tensor saved as a float32 dataset of its
 * GLOBAL shape at "/<name>" (names like "params/fc1.weight" or
 * "optim/fc1.weight/exp_avg"), chunked with the Fletcher32 filter, written
 * collectively with each block written by exactly one rank (replicas write
 * nothing twice); root attributes hold the format name ("meshgrad-checkpoint"),
 * version, and the caller's key/value strings (step, seed, data position, RNG
 * counters, model/optimizer/schedule configuration, mesh and placements...).
 *
 * Saving writes "<path>.tmp.<pid of rank 0>" then, after every rank has closed it
 * and it is flushed to disk (fsync), renames it to <path>, so a crash never leaves
 * a half file under the final name. (Tests: MG_CKPT_FAULT=kill-before-rename makes
 * rank MG_CKPT_FAULT_RANK, default 0, raise SIGKILL just before the rename.)
 * Loading reads each rank's block (hyperslab) under whatever mesh the entries'
 * specs use now: any checkpoint resumes on any mesh. The file is opened on
 * MPI_COMM_WORLD (every mesh spans all ranks). */
#ifndef MG_CHECKPOINT_H
#define MG_CHECKPOINT_H

#include <stdio.h>

#include "dist/dtensor.h"

#define MG_CHECKPOINT_FORMAT "meshgrad-checkpoint"
#define MG_CHECKPOINT_VERSION 1

typedef struct {
    const char *name; /* dataset path inside the file, without the leading '/' */
    mg_dtensor *tensor; /* NULL: other ranks hold it (a pipeline stage's parameter) */
    /* tensor NULL: its global shape; this rank makes its dataset with the
     * others and writes or reads none of it */
    int ndim;
    const int64_t *shape;
} mg_ckpt_entry;

typedef struct {
    char key[64];
    char value[1024];
} mg_ckpt_attr;

/* Collective. Entries may be Shard or Replicate (Partial is reduced first;
 * an entry held only by some ranks must not be Partial where it is held).
 * Attribute keys "format" and "version" are reserved; names and keys must be
 * unique. Returns MG_OK once the file is complete under its final name. */
int mg_checkpoint_save(const char *path, const mg_ckpt_entry *entries, int n,
                       const mg_ckpt_attr *attrs, int nattrs);

/* Collective. Fills each entry's local shard from the file (the dataset must
 * exist with the entry's global shape, else MG_EFORMAT naming the file, the
 * dataset and both shapes). attrs_out (may be NULL) receives up to max_attrs of
 * the caller's attributes (not format/version), in the order they were saved;
 * *nattrs_out their number. Checksums are verified by HDF5 on read (a mismatch:
 * MG_EFORMAT "checksum mismatch in <file> dataset /<name>: the file is corrupt").
 * A Partial entry receives the value on coordinate 0 and zeros elsewhere.
 * Every failure is agreed across ranks and names the file and the problem. */
int mg_checkpoint_load(const char *path, mg_ckpt_entry *entries, int n, mg_ckpt_attr *attrs_out,
                       int max_attrs, int *nattrs_out);

/* Reads only the attributes (collective). */
int mg_checkpoint_read_attrs(const char *path, mg_ckpt_attr *attrs_out, int max_attrs,
                             int *nattrs_out);

/* Looks up a key in an attribute list; NULL when absent. */
const char *mg_ckpt_attr_get(const mg_ckpt_attr *attrs, int n, const char *key);

/* `path` is a file: copies it; a directory: the newest complete checkpoint in it
 * (by step: from the name ckpt-<step>.h5, else the "step" attribute of a *.h5
 * checkpoint; *.tmp.* files are ignored), or MG_EIO when there is none. Local
 * (not collective): every rank may call it. */
int mg_checkpoint_resolve(const char *path, char *out, size_t len);

/* Removes all but the newest `keep` (>= 1) complete checkpoints in `dir` (rank 0
 * only deletes; collective). Call it after a save returned MG_OK. */
int mg_checkpoint_prune(const char *dir, int keep);

/* `meshgrad ckpt info`: step, parameters with global shapes, optimizer, mesh and
 * placements at save time, and whether every checksum verifies (reads every
 * dataset). Serial (one process). Returns MG_OK or the failure. */
int mg_checkpoint_info(const char *path, FILE *out);

#endif
