/* data.h: what the data set writers of `meshgrad data` (csv2h5 in data.c,
 * text2h5 in data_text.c) share. Exports mg_cli_data_write and
 * mg_cli_data_print_attrs (data_text.c). */
#ifndef MG_CLI_DATA_H
#define MG_CLI_DATA_H

#include <hdf5.h>

/* Writes a data set in place of `out` without ever replacing a file it could
 * not have written: out must be absent or a meshgrad data set (samples or
 * tokens), before and after the writing. fill(file, arg) writes the content
 * into a new HDF5 file made under an exclusively created temporary name beside
 * out (negative on failure); the file is then renamed to out. `cmd` names the
 * command in the messages. Returns MG_OK, or an error with nothing left behind. */
int mg_cli_data_write(const char *cmd, const char *out, int (*fill)(hid_t file, const void *arg),
                      const void *arg);

/* Rank 0 prints "KEY: VALUE" for each of the text attributes keys[0..n) that
 * the file at path has (the info of a data set), VALUE with its control bytes
 * escaped (text.h). */
void mg_cli_data_print_attrs(const char *path, const char *const *keys, int n);

#endif
