/* data_text.c: `meshgrad data text2h5 IN.txt[.gz] OUT.h5` and the info of a
 * token data set. Exports mg_cli_text2h5, mg_cli_text_info (cli.h) and what
 * the other data commands share with text2h5 and its info (data.h): writing
 * a data set (mg_cli_data_write), printing its attributes
 * (mg_cli_data_print_attrs), and a token writer's flags, splits and
 * attributes (mg_cli_token_*).
 *
 * text2h5 reads the bytes of a text file (gzip-compressed or not: zlib reads
 * both; a regular file, and a gzip stream only when whole) and writes the token data set of io/tokens.h: the first
 * (1 - val-fraction) of the bytes as /train/tokens, the rest as /val/tokens,
 * uint8, with the attributes vocab_size 256, vocab "bytes", source, license
 * and split. As csv2h5 it runs on rank 0 and never replaces a file it could
 * not have written: OUT must differ from IN and be absent or a meshgrad data
 * set; it is written to an exclusively created temporary name and renamed
 * when complete. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hdf5.h>
#include <zlib.h>

#include "cli/cli.h"
#include "cli/data.h"
#include "dist/comm.h"
#include "io/files.h"
#include "io/h5util.h"
#include "io/tokens.h"
#include "meshgrad.h"
#include "status.h"
#include "text.h"

#define MAX_TEXT_BYTES ((int64_t)1 << 34) /* 16 GiB: held in memory while written */

/* The most bytes read_text takes: MAX_TEXT_BYTES, or half this machine's
 * memory where that is less (an endless input such as /dev/zero is refused
 * before it fills the memory). */
static int64_t text_limit(void) {
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    int64_t half = pages > 0 && size > 0 ? (int64_t)pages * size / 2 : MAX_TEXT_BYTES;
    return half < MAX_TEXT_BYTES ? half : MAX_TEXT_BYTES;
}

/* Why gzread gave up on f, as a message naming path. */
static int read_failed(gzFile f, const char *path, int64_t n) {
    int err;
    const char *msg = gzerror(f, &err);
    if (err == Z_BUF_ERROR) /* the stream ended before its trailer */
        return mg_error(MG_EFORMAT, "text2h5: %s is truncated: its gzip stream stops before its "
                        "end (after %lld bytes of text): the file is damaged or still being "
                        "written; give the whole file", path, (long long)n);
    return mg_error(MG_EIO, "text2h5: reading %s failed: %s", path,
                    err == Z_ERRNO ? strerror(errno) : msg);
}

/* All bytes of `path` (plain or gzip, a regular file) into *data (*n of them).
 * A gzip stream must be whole: one cut short (no trailer) is refused, as is
 * one whose checksum or length does not match (zlib checks the trailer). */
static int read_text(const char *path, unsigned char **data, int64_t *n) {
    *data = NULL;
    *n = 0;
    int fd;
    if (mg_file_open_read(path, "the input", &fd) != MG_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", mg_last_error());
        return mg_error(MG_EIO, "text2h5: %s", msg);
    }
    gzFile f = gzdopen(fd, "rb");
    if (!f) {
        close(fd);
        return mg_error(MG_ENOMEM, "text2h5: out of memory opening %s", path);
    }
    int64_t cap = 1 << 20, limit = text_limit();
    unsigned char *buf = malloc((size_t)cap);
    int st = buf ? MG_OK : mg_error(MG_ENOMEM, "text2h5: out of memory");
    while (st == MG_OK) {
        if (*n == cap) {
            unsigned char more; /* a file of exactly `limit` bytes is taken */
            int past = cap >= limit ? gzread(f, &more, 1) : 0;
            if (cap >= limit && past < 0) {
                st = read_failed(f, path, *n);
                break;
            }
            if (cap >= limit && past == 0) break;
            if (cap >= limit) {
                st = mg_error(MG_EINVAL, "text2h5: %s is larger than %lld bytes, which is as much "
                              "as text2h5 holds in memory here (at most half the machine's): "
                              "convert a part of it", path, (long long)limit);
                break;
            }
            int64_t grow = 2 * cap < limit ? 2 * cap : limit;
            unsigned char *p = realloc(buf, (size_t)grow);
            if (!p) {
                st = mg_error(MG_ENOMEM, "text2h5: out of memory at %lld bytes", (long long)*n);
                break;
            }
            buf = p;
            cap = grow;
        }
        int want = cap - *n < (1 << 30) ? (int)(cap - *n) : (1 << 30);
        int got = gzread(f, buf + *n, (unsigned)want);
        if (got < 0)
            st = read_failed(f, path, *n);
        else if (got == 0)
            break;
        else
            *n += got;
    }
    int err = Z_OK;
    if (st == MG_OK) gzerror(f, &err);
    if (st == MG_OK && err != Z_OK) st = read_failed(f, path, *n);
    gzclose(f);
    if (st != MG_OK) {
        free(buf);
        *n = 0;
        return st;
    }
    *data = buf;
    return MG_OK;
}

static int write_tokens(hid_t file, const char *split, const unsigned char *data, int64_t n) {
    hsize_t dims = (hsize_t)n;
    hid_t g = H5Gcreate2(file, split, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t sp = H5Screate_simple(1, &dims, NULL);
    hid_t d = g >= 0 && sp >= 0
                  ? H5Dcreate2(g, "tokens", H5T_STD_U8LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)
                  : -1;
    int bad = d < 0 || H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0;
    if (d >= 0) H5Dclose(d);
    if (sp >= 0) H5Sclose(sp);
    if (g >= 0) H5Gclose(g);
    return bad ? -1 : 0;
}

/* A file csv2h5 and text2h5 may replace: a meshgrad data set (tokens or samples). */
static int accept_data_set(const char *path) {
    if (H5Fis_hdf5(path) <= 0) return 0;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    int ok = f >= 0 && (mg_h5_exists(f, "train/tokens") || mg_h5_exists(f, "train/inputs"));
    if (f >= 0) H5Fclose(f);
    return ok;
}

int mg_cli_data_write(const char *cmd, const char *out, int (*fill)(hid_t file, const void *arg),
                      const void *arg) {
    int exists;
    int st = mg_file_replaceable(out, "meshgrad data set", accept_data_set, &exists);
    mg_tmp_file tmp;
    if (st == MG_OK) st = mg_tmp_create(&tmp, out);
    if (st != MG_OK) return st;
    hid_t file = H5Fcreate(tmp.path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    int bad = file < 0 || fill(file, arg) < 0;
    if (file >= 0 && H5Fclose(file) < 0) bad = 1;
    if (bad) {
        mg_h5_err he;
        mg_h5_error_at(&he, tmp.path);
        mg_tmp_discard(&tmp);
        return mg_error(MG_EIO, "%s: writing %s failed: %s", cmd, out,
                        he.cause[0] ? he.cause : he.innermost);
    }
    return mg_tmp_commit(&tmp, out, "meshgrad data set", accept_data_set);
}

void mg_cli_data_print_attrs(const char *path, const char *const *keys, int n) {
    if (mg_rank() != 0) return;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    char text[1024];
    for (int i = 0; f >= 0 && i < n; i++)
        if (mg_h5_attr_read_text(f, keys[i], text, sizeof text) == 0) {
            printf("%s: ", keys[i]);
            mg_text_fputs(text, stdout); /* from the file: escaped (text.h) */
            putchar('\n');
        }
    if (f >= 0) H5Fclose(f);
}

int mg_cli_token_flag(const char *cmd, int c, const char *other, mg_cli_token_args *a, int *rc) {
    char *end;
    switch (c) {
    case 'v':
        errno = 0;
        a->val_fraction = strtod(optarg, &end);
        if (end == optarg || errno || *end || !(a->val_fraction > 0 && a->val_fraction < 1))
            *rc = mg_error(MG_EINVAL, "%s: --val-fraction '%s' is not a number in (0, 1): the "
                           "val split is what `meshgrad train` evaluates, so it cannot be "
                           "empty%s", cmd, optarg, other);
        a->val_fraction_given = 1;
        return 1;
    case 's': a->source = optarg; return 1;
    case 'l': a->license = optarg; return 1;
    default: return 0;
    }
}

int mg_cli_token_bad_flag(const char *cmd, char **argv) {
    return mg_error(MG_EINVAL, "%s: unknown or incomplete option '%s' (see --help)", cmd,
                    argv[optind - 1]);
}

int mg_cli_token_paths(const char *cmd, const char *in_form, int argc, char **argv,
                       mg_cli_token_args *a) {
    if (argc - optind != 2)
        return mg_error(MG_EINVAL, "%s needs IN and OUT (got %d path%s): meshgrad data %s %s "
                        "OUT.h5", cmd, argc - optind, argc - optind == 1 ? "" : "s", cmd, in_form);
    a->in = argv[optind];
    a->out = argv[optind + 1];
    return MG_OK;
}

int mg_cli_token_split(const char *cmd, const mg_cli_token_args *a, int64_t n, const char *unit,
                       int64_t *n_train) {
    *n_train = (int64_t)((1.0 - a->val_fraction) * (double)n);
    if (*n_train < 2 || n - *n_train < 2)
        return mg_error(MG_EFORMAT, "%s: %s has %lld %s: too few for a train and a val split of "
                        "at least 2 %s each at --val-fraction %g", cmd, a->in, (long long)n,
                        unit, unit, a->val_fraction);
    return MG_OK;
}

int mg_cli_token_attrs(hid_t file, const mg_cli_token_args *a, int vocab_size, const char *vocab,
                       const char *rule) {
    int bad = mg_h5_attr_write_int(file, "vocab_size", vocab_size) < 0 ||
              mg_h5_attr_write_string(file, "vocab", vocab) < 0 ||
              mg_h5_attr_write_string(file, "source", a->source ? a->source : a->in) < 0 ||
              mg_h5_attr_write_string(file, "license", a->license ? a->license : "unknown") < 0 ||
              mg_h5_attr_write_string(file, "split", rule) < 0;
    return bad ? -1 : 0;
}

/* What text2h5 writes: its arguments and the bytes, the first n_train of them
 * the train split. */
typedef struct {
    const mg_cli_token_args *a;
    const unsigned char *data;
    int64_t n, n_train;
} text_out;

/* The content of the data set (mg_cli_data_write's fill); negative on failure. */
static int write_content(hid_t file, const void *arg) {
    const text_out *o = arg;
    const mg_cli_token_args *a = o->a;
    int64_t n = o->n, n_train = o->n_train;
    char rule[160];
    snprintf(rule, sizeof rule, "train: the first %lld bytes; val: the last %lld bytes",
             (long long)n_train, (long long)(n - n_train));
    int bad = mg_cli_token_attrs(file, a, 256, "bytes", rule) < 0 ||
              write_tokens(file, "train", o->data, n_train) < 0 ||
              (n > n_train && write_tokens(file, "val", o->data + n_train, n - n_train) < 0);
    return bad ? -1 : 0;
}

static int text2h5_run(const mg_cli_token_args *a) {
    if (mg_path_same_file(a->in, a->out))
        return mg_error(MG_EINVAL, "text2h5: OUT %s is the input file: give another path", a->out);
    int st = mg_path_check(a->out, "text2h5 OUT", MG_TMP_SUFFIX_MAX);
    if (st != MG_OK) return st;
    unsigned char *data;
    int64_t n;
    if ((st = read_text(a->in, &data, &n)) != MG_OK) return st;
    int64_t n_train = 0;
    if (n == 0)
        st = mg_error(MG_EFORMAT, "text2h5: %s is empty: there is no text to train on", a->in);
    else
        st = mg_cli_token_split("text2h5", a, n, "bytes", &n_train);
    if (st == MG_OK) {
        text_out o = {a, data, n, n_train};
        st = mg_cli_data_write("text2h5", a->out, write_content, &o);
    }
    if (st == MG_OK)
        printf("%s: train %lld tokens, val %lld tokens, vocabulary 256 (bytes)\n", a->out,
               (long long)n_train, (long long)(n - n_train));
    free(data);
    return st;
}

static void usage(FILE *out) {
    fprintf(out, "usage: meshgrad data text2h5 IN.txt[.gz] OUT.h5 [--val-fraction F] [--source S]\n"
                 "                             [--license L]\n"
                 "  Writes the bytes of IN (plain or gzip) as a token data set: vocabulary 256,\n"
                 "  /train/tokens the first (1 - F) of them, /val/tokens the rest (F: 0.1).\n");
}

int mg_cli_text2h5(int argc, char **argv) {
    static const struct option opts[] = {MG_CLI_TOKEN_OPTIONS,
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    mg_cli_token_args a = {.val_fraction = 0.1};
    optind = 0; /* parse this argv from scratch (GNU getopt) */
    opterr = 0;
    int c, rc = MG_OK;
    while (rc == MG_OK && (c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'h') {
            if (mg_rank() == 0) usage(stdout);
            return 0;
        }
        if (!mg_cli_token_flag("text2h5", c, "", &a, &rc))
            rc = mg_cli_token_bad_flag("text2h5", argv);
    }
    if (rc != MG_OK || mg_cli_token_paths("text2h5", "IN.txt[.gz]", argc, argv, &a) != MG_OK)
        return 2;
    int st = mg_rank() == 0 ? text2h5_run(&a) : MG_OK;
    return st == MG_OK ? 0 : 1;
}

/* The file has /<split>/tokens (every rank reads the same file: no agreement). */
static int has_split(const char *path, const char *split) {
    char rel[32];
    snprintf(rel, sizeof rel, "%s/tokens", split);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    int has = f >= 0 && mg_h5_exists(f, rel);
    if (f >= 0) H5Fclose(f);
    return has;
}

int mg_cli_text_info(const char *path) {
    mg_comm *world = mg_comm_world();
    if (!world) return 1;
    const char *splits[2] = {"train", "val"};
    for (int s = 0; s < 2; s++) {
        if (s > 0 && !has_split(path, splits[s])) break; /* trained on everything */
        mg_tokens *t = mg_tokens_open(path, splits[s], world);
        if (!t) return 1;
        if (mg_rank() == 0)
            printf("/%s: %lld tokens, vocabulary %d\n", splits[s], (long long)mg_tokens_count(t),
                   mg_tokens_vocab(t));
        mg_tokens_close(t);
    }
    const char *keys[4] = {"vocab", "source", "license", "split"};
    mg_cli_data_print_attrs(path, keys, 4);
    return 0;
}
