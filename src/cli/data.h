/* data.h: what the data set writers of `meshgrad data` (csv2h5 in data.c,
 * text2h5 in data_text.c, bin2h5 in data_bin.c) share: writing a data set,
 * printing its attributes, and the flags, splits and attributes of the two
 * token writers. Exports mg_cli_data_write, mg_cli_data_print_attrs,
 * mg_cli_token_args, MG_CLI_TOKEN_OPTIONS, mg_cli_token_flag,
 * mg_cli_token_bad_flag, mg_cli_token_paths, mg_cli_token_split,
 * mg_cli_token_attrs (all in data_text.c). */
#ifndef MG_CLI_DATA_H
#define MG_CLI_DATA_H

#include <stdint.h>

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

/* What both token writers (text2h5, bin2h5) take: the paths IN and OUT, the
 * data set's attributes source (NULL: IN) and license (NULL: "unknown"), and
 * the share of IN the val split gets (--val-fraction; 0.1 unless given). */
typedef struct {
    const char *in, *out, *source, *license;
    double val_fraction;
    int val_fraction_given;
} mg_cli_token_args;

/* Their flags' entries of a getopt_long table, the letters v s l. */
#define MG_CLI_TOKEN_OPTIONS                                                                    \
    {"val-fraction", required_argument, NULL, 'v'}, {"source", required_argument, NULL, 's'},  \
        {"license", required_argument, NULL, 'l'}

/* A token writer's flags, `cmd` naming it in the messages (each MG_EINVAL).
 * getopt_long's `c` (its value optarg) into *a: 1 when it is one of those
 * flags, *rc the error of a --val-fraction that is not a number in (0, 1)
 * (`other`: "", or the writer's other way to give /val, which the message
 * names); 0 for another flag. */
int mg_cli_token_flag(const char *cmd, int c, const char *other, mg_cli_token_args *a, int *rc);
/* The error of a flag getopt_long did not know or that lacks its value. */
int mg_cli_token_bad_flag(const char *cmd, char **argv);
/* The two paths left after the flags, IN and OUT, into a->in and a->out;
 * `in_form` is how IN looks in the message of any other count ("IN.bin"). */
int mg_cli_token_paths(const char *cmd, const char *in_form, int argc, char **argv,
                       mg_cli_token_args *a);
/* The first (1 - val_fraction) of the n tokens of a->in (`unit` in the
 * message: "bytes", "tokens") for the train split into *n_train; MG_EFORMAT
 * unless both splits get 2 at least. */
int mg_cli_token_split(const char *cmd, const mg_cli_token_args *a, int64_t n, const char *unit,
                       int64_t *n_train);
/* The root attributes of a token data set: vocab_size, vocab, source,
 * license and split (`rule`); negative on failure (in mg_cli_data_write's fill). */
int mg_cli_token_attrs(hid_t file, const mg_cli_token_args *a, int vocab_size, const char *vocab,
                       const char *rule);

#endif
