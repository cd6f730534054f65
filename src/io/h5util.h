/* h5util.h: helpers shared by the HDF5 readers and writers of src/io.
 * - mg_h5_init: HDF5 opened once with its own error printing silenced (meshgrad
 *   reports errors through mg_error messages instead), and glibc told to keep
 *   freed chunk-sized buffers (see h5util.c; MG_MALLOC_TUNE=0 turns this off).
 * - mg_h5_fapl_mpio: a file-access list for parallel HDF5 on a communicator.
 * - mg_io_agree: agrees a status across a communicator; on failure every rank
 *   returns the same code with the message of the lowest failing rank.
 * - mg_h5_error_get: what HDF5's error stack says about the last failed call.
 * - mg_file_precheck: a file exists, is a regular file and is HDF5 (clear
 *   messages before HDF5 is asked to open it).
 * - small dataset/attribute helpers (path exists, type names, string attributes). */
#ifndef MG_H5UTIL_H
#define MG_H5UTIL_H

#include <hdf5.h>
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

void mg_h5_init(void);
hid_t mg_h5_fapl_mpio(MPI_Comm comm); /* H5Pclose it; negative on failure */

int mg_io_agree(MPI_Comm comm, int status);

typedef struct {
    char innermost[256]; /* where HDF5 detected the error */
    int checksum;        /* a filter (Fletcher32) refused the data */
    int truncated;       /* the file is shorter than its superblock says */
} mg_h5_err;
/* Reads (does not clear) the default error stack: call right after a failure. */
void mg_h5_error_get(mg_h5_err *e);

/* MG_OK, or MG_EIO ("cannot open <what> <path>: <strerror>") or MG_EFORMAT
 * ("<what> <path> is not an HDF5 file"). */
int mg_file_precheck(const char *path, const char *what);

/* 1 when every component of the relative path `path` exists under loc. */
int mg_h5_exists(hid_t loc, const char *path);
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
