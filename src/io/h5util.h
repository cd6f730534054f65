/* h5util.h: helpers shared by the HDF5 readers and writers of src/io.
 * - mg_h5_init: HDF5 opened once with its own error printing silenced (meshgrad
 *   reports errors through mg_error messages instead), and glibc told to keep
 *   freed chunk-sized buffers (see h5util.c; MG_MALLOC_TUNE=0 turns this off).
 * - mg_h5_fapl_mpio: a file-access list for parallel HDF5 on a communicator.
 * - mg_io_agree: agrees a status across a communicator; on failure every rank
 *   returns the same code with the message of the lowest failing rank. A rank
 *   that failed waits only so long (half the collective timeout, or 60 s)
 *   for the others: one left inside a collective HDF5 call that the failed
 *   rank quit cannot answer, so the failed rank prints its own message and
 *   ends the job (rather than a hang, or a watchdog line blaming that rank).
 * - collective HDF5 calls (create, open, close, dataset create, collective
 *   read and write) are bracketed with mg_watchdog_begin_comm / end by their
 *   callers, so a rank that never joins ends the job with a message.
 * - mg_h5_error_get: what HDF5's error stack says about the last failed call.
 * - mg_file_precheck: a file exists, is a regular file (files.h
 *   mg_file_open_read: a device or FIFO is never opened) and is HDF5 (clear
 *   messages before HDF5 is asked to open it).
 * - mg_h5_open_dataset: a dataset reached through hard links only, whose data
 *   lies in the file itself (no soft or external link, virtual dataset or
 *   external raw storage: those read what the user did not name), and
 *   mg_h5_check_stored: the file holds the bytes a dataset declares.
 * - small dataset/attribute helpers (path exists, type names, string attributes). */
#ifndef MG_H5UTIL_H
#define MG_H5UTIL_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "dist/comm.h"

void mg_h5_init(void);
hid_t mg_h5_fapl_mpio(const mg_comm *comm); /* H5Pclose it; negative on failure */

int mg_io_agree(mg_comm *comm, int status);

typedef struct {
    char innermost[256]; /* where HDF5 detected the error */
    char cause[128];     /* the system's reason when the stack gives one ("No space left
                          * on device"), else "" */
    int checksum;        /* a filter (Fletcher32) refused the data */
    int truncated;       /* the file is shorter than its superblock says */
} mg_h5_err;
/* Reads (does not clear) the default error stack: call right after a failure. */
void mg_h5_error_get(mg_h5_err *e);
/* The same after a failed write of the file at `path`: when HDF5 gives no
 * reason and the file system has less than 1 MiB free, the cause is "No space
 * left on device" (a short write tells HDF5 nothing more). */
void mg_h5_error_at(mg_h5_err *e, const char *path);

/* MG_OK, or MG_EIO ("cannot open <what> <path>: <strerror>") or MG_EFORMAT
 * ("<what> <path> is not an HDF5 file"). */
int mg_file_precheck(const char *path, const char *what);

/* 1 when every component of the relative path `path` exists under loc; a
 * soft or external link is not followed (it counts as existing: the path
 * exists as far as meshgrad looks). */
int mg_h5_exists(hid_t loc, const char *path);
/* Opens the dataset at the relative path `path` (which exists: mg_h5_exists)
 * of the file named `file`: MG_OK and *out (H5Dclose it), or MG_EFORMAT with
 * a message naming the file, the object and the fix when a component is a
 * soft or external link, the object is not a dataset, or its data lies
 * outside the file (a virtual dataset, external raw storage). */
int mg_h5_open_dataset(hid_t loc, const char *path, const char *file, hid_t *out);
/* MG_OK when the file holds the data dataset d (`name` in `file`) declares,
 * each element `elem` bytes: unfiltered, all its bytes; filtered, at least
 * 1/1024 of them. Else MG_EFORMAT: a dataset declared and never written
 * would be read as 2^40 fill values. Metadata only: no data is read. */
int mg_h5_check_stored(hid_t d, const char *file, const char *name, size_t elem);
/* "float32", "int32", "float64", "uint8", "string", "compound"... */
char *mg_h5_type_name(hid_t type, char *buf, size_t len);
/* 1 when the type is a 32-bit IEEE float / a signed 32-bit integer. */
int mg_h5_is_float32(hid_t type);
int mg_h5_is_int32(hid_t type);

int mg_h5_attr_write_string(hid_t loc, const char *name, const char *value);
int mg_h5_attr_write_int(hid_t loc, const char *name, int64_t value);
/* Any scalar string, integer or float attribute as text; negative on failure. */
int mg_h5_attr_read_text(hid_t loc, const char *name, char *buf, size_t len);

#endif
