/* checkpoint.h: HDF5 checkpoints (docs/DESIGN.md "Checkpoints",
 * docs/CHECKPOINTS.md).
 *
 * One file; each entry is a distributed tensor saved as a float32 dataset of its
 * GLOBAL shape at "/<name>" (names like "params/fc1.weight" or
 * "optim/fc1.weight/exp_avg"), chunked with the Fletcher32 filter, written
 * collectively with each block written by exactly one rank (replicas write
 * nothing twice); root attributes hold the format name ("meshgrad-checkpoint"),
 * version, and the caller's key/value strings (step, seed, data position, RNG
 * counters, model/optimizer/schedule configuration, mesh and placements...).
 *
 * A save never destroys anything: it writes a temporary file created
 * exclusively under an unpredictable name beside the target
 * ("<path>.tmp.<host>.<pid>.<random>", files.h) with the space it needs
 * reserved first, and, after every rank has closed it and it is flushed to
 * disk, renames it to <path>, which it replaces only when that is absent or a
 * meshgrad checkpoint. A crash never leaves a half file under the final name;
 * any failure on any rank ends the save on every rank with one message and the
 * temporary file removed; temporary files of killed saves are removed by the
 * next save into the directory.
 * Loading reads each rank's block (hyperslab) under whatever mesh the entries'
 * specs use now: any checkpoint resumes on any mesh. Files are opened on the
 * world communicator (every mesh spans all ranks); collective HDF5 calls run
 * under the collective watchdog. */
#ifndef MG_CHECKPOINT_H
#define MG_CHECKPOINT_H

#include <stdint.h>
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
 * dataset and both shapes). A group that holds an entry ("params/",
 * "optim/") must hold nothing but entries: a dataset beside them (another
 * model's, or a layer more than the caller built) is refused with
 * MG_EFORMAT naming it; groups without an entry are not looked at. attrs_out (may be NULL) receives up to max_attrs of
 * the caller's attributes (not format/version), in the order they were saved;
 * *nattrs_out their number. Checksums are verified by HDF5 on read (a mismatch:
 * MG_EFORMAT "checksum mismatch in <file> dataset /<name>: the file is corrupt"),
 * datasets without the checksum, with unwritten chunks or sizes the file cannot
 * hold are refused before any read, and a non-finite value is refused naming
 * the dataset and the element.
 * A Partial entry receives the value on coordinate 0 and zeros elsewhere.
 * Every failure is agreed across ranks and names the file and the problem. */
int mg_checkpoint_load(const char *path, mg_ckpt_entry *entries, int n, mg_ckpt_attr *attrs_out,
                       int max_attrs, int *nattrs_out);

/* Collective. Calls each(ctx, name) for every dataset of the checkpoint at
 * path, named by its path without the leading '/' ("params/fc1.weight"), in
 * name order; a status other than MG_OK from `each` stops the walk and is
 * returned (agreed: every rank walks the same file). A file of more than
 * 65536 links is refused (MG_EFORMAT). */
int mg_checkpoint_list(const char *path, int (*each)(void *ctx, const char *name), void *ctx);

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

/* Collective (rank 0 deletes). After the save of DIR/ckpt-<newest>.h5: deletes
 * the checkpoints of `dir` named ckpt-<step>.h5 with a step below `newest`,
 * all but the newest keep - 1 of them, so that `keep` (>= 1) remain counting
 * the one just written. Never touches a file of another name, one so named
 * that is not a meshgrad checkpoint, or one with a later step (another run's). */
int mg_checkpoint_prune(const char *dir, int keep, int64_t newest);

/* 1 when `path` is an HDF5 file whose attributes say it is a meshgrad
 * checkpoint (format and version); local, serial. */
int mg_checkpoint_is_one(const char *path);
/* The text of attribute `key` ("model", "step") of the meshgrad checkpoint at
 * `path`, its control bytes escaped (text.h), into buf; local, serial. 0, or
 * -1 (buf "") when the file is not a checkpoint or has no such attribute. */
int mg_checkpoint_peek_attr(const char *path, const char *key, char *buf, size_t len);

/* `meshgrad ckpt info`: step, parameters with global shapes, optimizer, mesh and
 * placements at save time, and whether every checksum verifies and every value
 * is finite (reads every dataset, after checking it can be read in bounded
 * time). Serial (one process). Returns MG_OK or the failure. */
int mg_checkpoint_info(const char *path, FILE *out);

#endif
