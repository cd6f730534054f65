/* data_bin.c: `meshgrad data bin2h5 IN.bin OUT.h5`: the token files of
 * nanoGPT and llm.c as a token data set (io/tokens.h, docs/DATA.md).
 * Exports mg_cli_bin2h5 (cli.h).
 *
 * The input is little-endian uint16 tokens, in one of two layouts:
 * - llm.c's: a header of 256 int32 (magic 20240520, version 1, the token
 *   count), then exactly that many tokens;
 * - nanoGPT's: the tokens alone (its train.bin and val.bin).
 * --format llmc or raw says which; auto (the default) takes llm.c's when the
 * file starts with one of its magics (that of uint32 tokens is refused). Every header field is checked against the file
 * (the magic, the version, the count against the file's size, both ways), and
 * every token against --vocab-size, before anything is written.
 *
 * OUT gets /train/tokens and /val/tokens as uint16: the first (1 - F) of IN's
 * tokens and the rest (--val-fraction F, default 0.1, as text2h5 splits), or
 * all of IN and all of --val VAL.bin; the attributes vocab_size, vocab,
 * source, license and split. It runs on rank 0 and, like text2h5, never
 * replaces a file it could not have written (cli/data.h). The tokens are
 * streamed: neither file is held in memory. */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "cli/cli.h"
#include "cli/data.h"
#include "io/files.h"
#include "io/h5util.h"
#include "meshgrad.h"
#include "status.h"

#define LLMC_MAGIC 20240520
#define LLMC_MAGIC_U32 20240801 /* llm.c's Llama 3 files: uint32 tokens */
#define LLMC_VERSION 1
#define LLMC_HEADER 1024 /* bytes: 256 int32 */
#define MAX_VOCAB 65536  /* uint16 tokens */
#define BLOCK ((int64_t)1 << 20) /* tokens read at a time */

enum { FORMAT_AUTO, FORMAT_LLMC, FORMAT_RAW };

/* One input file: where its tokens start and how many there are. */
typedef struct {
    const char *path;
    const char *kind; /* "llm.c" or "raw" */
    int64_t offset, count;
} bin_file;

typedef struct {
    mg_cli_token_args t;
    const char *val, *vocab;
    int format, vocab_size;
} bin_args;

static int32_t le32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

/* `path` open for reading when it is a regular file (io/files.h: a FIFO or a
 * device is refused, never opened to block or to read for ever): NULL with
 * the message "bin2h5: cannot open ..." otherwise. */
static FILE *bin_fopen(const char *path) {
    int fd;
    if (mg_file_open_read(path, "token file", &fd) != MG_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", mg_last_error());
        return mg_error_null(MG_EIO, "bin2h5: %s", msg);
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return mg_error_null(MG_ENOMEM, "bin2h5: out of memory opening %s", path);
    }
    return f;
}

/* The layout of `path`: its header checked, *b filled. */
static int bin_open(const char *path, int format, bin_file *b) {
    *b = (bin_file){path, "raw", 0, 0};
    FILE *f = bin_fopen(path);
    if (!f) return mg_last_code();
    struct stat st;
    unsigned char h[LLMC_HEADER];
    int rc = MG_OK;
    if (fstat(fileno(f), &st) != 0) {
        rc = mg_error(MG_EIO, "bin2h5: cannot open %s: %s", path, strerror(errno));
        fclose(f);
        return rc;
    }
    int64_t size = (int64_t)st.st_size;
    size_t got = fread(h, 1, size < LLMC_HEADER ? (size_t)size : LLMC_HEADER, f);
    int read_failed = ferror(f);
    fclose(f);
    if (read_failed || (int64_t)got != (size < LLMC_HEADER ? size : LLMC_HEADER))
        return mg_error(MG_EIO, "bin2h5: reading %s failed", path);
    if (format == FORMAT_AUTO) /* either of llm.c's magics: its other kind is refused below */
        format = size >= 4 && (le32(h) == LLMC_MAGIC || le32(h) == LLMC_MAGIC_U32) ? FORMAT_LLMC
                                                                                   : FORMAT_RAW;
    if (format == FORMAT_LLMC) {
        b->kind = "llm.c";
        b->offset = LLMC_HEADER;
        int32_t magic = size >= 4 ? le32(h) : 0, version = le32(h + 4), count = le32(h + 8);
        int64_t after = size - LLMC_HEADER;
        if (size < LLMC_HEADER)
            rc = mg_error(MG_EFORMAT, "bin2h5: %s has %lld bytes, fewer than llm.c's header of %d: "
                          "it is not an llm.c token file (--format raw for nanoGPT's)", path,
                          (long long)size, LLMC_HEADER);
        else if (magic == LLMC_MAGIC_U32)
            rc = mg_error(MG_EFORMAT, "bin2h5: %s has llm.c's magic %d, of uint32 tokens (Llama "
                          "3): only its uint16 files (magic %d) are read", path, magic, LLMC_MAGIC);
        else if (magic != LLMC_MAGIC)
            rc = mg_error(MG_EFORMAT, "bin2h5: %s starts with %d, not llm.c's magic %d: it is not "
                          "an llm.c token file (--format raw for nanoGPT's)", path, magic,
                          LLMC_MAGIC);
        else if (version != LLMC_VERSION)
            rc = mg_error(MG_EFORMAT, "bin2h5: %s: llm.c header version %d; only version %d "
                          "(uint16 tokens) is read", path, version, LLMC_VERSION);
        else if (count < 0)
            rc = mg_error(MG_EFORMAT, "bin2h5: %s: its header declares %d tokens: the header is "
                          "wrong", path, count);
        else if ((int64_t)count * 2 > after)
            rc = mg_error(MG_EFORMAT, "bin2h5: %s: its header declares %d tokens (%lld bytes), but "
                          "the file holds %lld bytes after the header: it is cut short or the "
                          "header is wrong", path, count, (long long)count * 2, (long long)after);
        else if ((int64_t)count * 2 < after)
            rc = mg_error(MG_EFORMAT, "bin2h5: %s: its header declares %d tokens (%lld bytes), but "
                          "the file holds %lld bytes after the header: the rest is not tokens",
                          path, count, (long long)count * 2, (long long)after);
        b->count = count;
    } else {
        if (size % 2 != 0)
            rc = mg_error(MG_EFORMAT, "bin2h5: %s has an odd number of bytes (%lld): it is not "
                          "uint16 tokens", path, (long long)size);
        b->count = size / 2;
    }
    if (rc == MG_OK && b->count < 2)
        rc = mg_error(MG_EFORMAT, "bin2h5: %s holds %lld token%s; a split needs at least 2", path,
                      (long long)b->count, b->count == 1 ? "" : "s");
    return rc;
}

/* Tokens [first, first + n) of b, in blocks of BLOCK: each(ctx, tokens, k,
 * index of the first) for every block; a status other than MG_OK stops. */
static int bin_each(const bin_file *b, int64_t first, int64_t n,
                    int (*each)(void *ctx, const uint16_t *tokens, int64_t k, int64_t at),
                    void *ctx) {
    FILE *f = bin_fopen(b->path);
    unsigned char *raw = malloc((size_t)BLOCK * 2);
    uint16_t *tokens = malloc((size_t)BLOCK * sizeof *tokens);
    int rc = f && raw && tokens ? MG_OK
                                : f ? mg_error(MG_ENOMEM, "bin2h5: out of memory") : mg_last_code();
    if (rc == MG_OK && fseeko(f, (off_t)(b->offset + 2 * first), SEEK_SET) != 0)
        rc = mg_error(MG_EIO, "bin2h5: reading %s failed: %s", b->path, strerror(errno));
    for (int64_t done = 0; rc == MG_OK && done < n; done += BLOCK) {
        int64_t k = n - done < BLOCK ? n - done : BLOCK;
        if (fread(raw, 2, (size_t)k, f) != (size_t)k) {
            rc = mg_error(MG_EIO, "bin2h5: reading %s failed at token %lld: %s", b->path,
                          (long long)(first + done),
                          ferror(f) ? strerror(errno) : "the file got shorter");
            break;
        }
        for (int64_t i = 0; i < k; i++)
            tokens[i] = (uint16_t)(raw[2 * i] | raw[2 * i + 1] << 8); /* little-endian */
        rc = each(ctx, tokens, k, first + done);
    }
    if (f) fclose(f);
    free(raw);
    free(tokens);
    return rc;
}

typedef struct {
    const bin_file *b;
    int vocab_size;
    int max; /* the largest token seen */
} scan_ctx;

static int scan_block(void *ctx, const uint16_t *tokens, int64_t k, int64_t at) {
    scan_ctx *s = ctx;
    for (int64_t i = 0; i < k; i++) {
        if (tokens[i] >= s->vocab_size)
            return mg_error(MG_EFORMAT, "bin2h5: %s: token %lld is %d, outside the vocabulary of "
                            "%d: give the tokenizer's size with --vocab-size", s->b->path,
                            (long long)(at + i), tokens[i], s->vocab_size);
        if (tokens[i] > s->max) s->max = tokens[i];
    }
    return MG_OK;
}

/* One split to write: tokens [first, first + n) of b as /<name>/tokens. */
typedef struct {
    const char *name;
    const bin_file *b;
    int64_t first, n;
} split_part;

/* A read that failed while the file was written: its message is bin2h5's own,
 * not the HDF5 error mg_cli_data_write reports. */
typedef struct {
    int failed;
    char message[1024];
} read_failure;

typedef struct {
    const bin_args *a;
    split_part parts[2];
    int nparts;
    char rule[256];
    read_failure *read;
} bin_out;

typedef struct {
    hid_t d;
    int64_t first; /* of the split in its file */
    int h5_failed;
} write_ctx;

static int write_block(void *ctx, const uint16_t *tokens, int64_t k, int64_t at) {
    write_ctx *w = ctx;
    hsize_t start = (hsize_t)(at - w->first), count = (hsize_t)k;
    hid_t fs = H5Dget_space(w->d), ms = H5Screate_simple(1, &count, NULL);
    w->h5_failed = fs < 0 || ms < 0 ||
                   H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL) < 0 ||
                   H5Dwrite(w->d, H5T_NATIVE_UINT16, ms, fs, H5P_DEFAULT, tokens) < 0;
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    return w->h5_failed ? MG_EIO : MG_OK;
}

static int write_split(hid_t file, const bin_out *o, const split_part *p) {
    hsize_t dims = (hsize_t)p->n;
    hid_t g = H5Gcreate2(file, p->name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t sp = H5Screate_simple(1, &dims, NULL);
    hid_t d = g >= 0 && sp >= 0 ? H5Dcreate2(g, "tokens", H5T_STD_U16LE, sp, H5P_DEFAULT,
                                             H5P_DEFAULT, H5P_DEFAULT)
                                : -1;
    int rc = d >= 0 ? MG_OK : MG_EIO;
    if (rc == MG_OK) {
        write_ctx w = {d, p->first, 0};
        rc = bin_each(p->b, p->first, p->n, write_block, &w);
        if (rc != MG_OK && !w.h5_failed) {
            o->read->failed = 1;
            snprintf(o->read->message, sizeof o->read->message, "%s", mg_last_error());
        }
    }
    if (d >= 0) H5Dclose(d);
    if (sp >= 0) H5Sclose(sp);
    if (g >= 0) H5Gclose(g);
    return rc == MG_OK ? 0 : -1;
}

/* The content of the data set (mg_cli_data_write's fill); negative on failure. */
static int write_content(hid_t file, const void *arg) {
    const bin_out *o = arg;
    const bin_args *a = o->a;
    int bad = mg_cli_token_attrs(file, &a->t, a->vocab_size, a->vocab, o->rule) < 0;
    for (int i = 0; !bad && i < o->nparts; i++) bad = write_split(file, o, &o->parts[i]) < 0;
    return bad ? -1 : 0;
}

static int bin2h5_run(const bin_args *a) {
    if (mg_path_same_file(a->t.in, a->t.out) || (a->val && mg_path_same_file(a->val, a->t.out)))
        return mg_error(MG_EINVAL, "bin2h5: OUT %s is an input file: give another path", a->t.out);
    int st = mg_path_check(a->t.out, "bin2h5 OUT", MG_TMP_SUFFIX_MAX);
    bin_file in, val;
    if (st == MG_OK) st = bin_open(a->t.in, a->format, &in);
    if (st == MG_OK && a->val) st = bin_open(a->val, a->format, &val);
    if (st != MG_OK) return st;
    read_failure read = {0, ""};
    bin_out o = {.a = a, .read = &read};
    if (a->val) {
        o.parts[0] = (split_part){"train", &in, 0, in.count};
        o.parts[1] = (split_part){"val", &val, 0, val.count};
        o.nparts = 2;
        snprintf(o.rule, sizeof o.rule, "train: all %lld tokens of %s; val: all %lld tokens of %s",
                 (long long)in.count, a->t.in, (long long)val.count, a->val);
    } else {
        int64_t n = in.count, n_train;
        if ((st = mg_cli_token_split("bin2h5", &a->t, n, "tokens", &n_train)) != MG_OK) return st;
        o.parts[0] = (split_part){"train", &in, 0, n_train};
        o.parts[1] = (split_part){"val", &in, n_train, n - n_train};
        o.nparts = 2;
        snprintf(o.rule, sizeof o.rule, "train: the first %lld tokens; val: the last %lld tokens",
                 (long long)n_train, (long long)(n - n_train));
    }
    scan_ctx s[2] = {{&in, a->vocab_size, 0}, {a->val ? &val : &in, a->vocab_size, 0}};
    for (int i = 0; st == MG_OK && i < o.nparts; i++)
        st = bin_each(o.parts[i].b, o.parts[i].first, o.parts[i].n, scan_block, &s[i]);
    if (st != MG_OK) return st;
    st = mg_cli_data_write("bin2h5", a->t.out, write_content, &o);
    if (st != MG_OK && read.failed) st = mg_error(MG_EIO, "%s", read.message);
    int largest = s[0].max > s[1].max ? s[0].max : s[1].max;
    if (st == MG_OK)
        printf("%s: train %lld tokens, val %lld tokens (uint16, from %s file%s), vocabulary %d, "
               "largest token %d\n", a->t.out, (long long)o.parts[0].n,
               (long long)(o.nparts > 1 ? o.parts[1].n : 0), in.kind, a->val ? "s" : "",
               a->vocab_size, largest);
    return st;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: meshgrad data bin2h5 IN.bin OUT.h5 [--format auto|llmc|raw] [--val VAL.bin]\n"
            "                            [--val-fraction F] [--vocab-size N] [--vocab NAME]\n"
            "                            [--source S] [--license L]\n"
            "  Writes the uint16 tokens of a nanoGPT or llm.c token file as a token data set\n"
            "  (docs/DATA.md): /train/tokens the first (1 - F) of them, /val/tokens the rest\n"
            "  (F: 0.1); with --val, all of IN as /train and all of VAL.bin as /val.\n"
            "  --format       llmc: llm.c's (a header of 256 int32: magic 20240520, version 1,\n"
            "                 the token count; then the tokens); raw: nanoGPT's (the tokens\n"
            "                 alone); auto (default): llmc when the file starts with its magic\n"
            "  --vocab-size   the tokenizer's vocabulary, 1..65536 (default 50257, GPT-2's);\n"
            "                 every token must be below it\n"
            "  --vocab        the tokenizer's name, for the file (default gpt2 with the default\n"
            "                 vocabulary size, else unknown)\n");
}

/* A whole number from lo to hi in *out, or a usage error naming the flag. */
static int parse_int(const char *flag, const char *text, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < lo || v > hi)
        return mg_error(MG_EINVAL, "bin2h5: %s '%s': give a whole number from %ld to %ld", flag,
                        text, lo, hi);
    *out = (int)v;
    return MG_OK;
}

int mg_cli_bin2h5(int argc, char **argv) {
    static const struct option opts[] = {{"format", required_argument, NULL, 'f'},
                                         {"val", required_argument, NULL, 'V'},
                                         {"vocab-size", required_argument, NULL, 'n'},
                                         {"vocab", required_argument, NULL, 'k'},
                                         MG_CLI_TOKEN_OPTIONS,
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    bin_args a = {.t.val_fraction = 0.1, .format = FORMAT_AUTO, .vocab_size = 50257};
    int vocab_size_given = 0;
    optind = 0; /* parse this argv from scratch (GNU getopt) */
    opterr = 0;
    int c, rc = MG_OK;
    while (rc == MG_OK && (c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'f':
            if (strcmp(optarg, "auto") == 0) a.format = FORMAT_AUTO;
            else if (strcmp(optarg, "llmc") == 0) a.format = FORMAT_LLMC;
            else if (strcmp(optarg, "raw") == 0) a.format = FORMAT_RAW;
            else rc = mg_error(MG_EINVAL, "bin2h5: --format '%s' is not auto, llmc or raw", optarg);
            break;
        case 'V': a.val = optarg; break;
        case 'n':
            rc = parse_int("--vocab-size", optarg, 1, MAX_VOCAB, &a.vocab_size);
            vocab_size_given = 1;
            break;
        case 'k': a.vocab = optarg; break;
        case 'h':
            if (mg_rank() == 0) usage(stdout);
            return 0;
        default:
            if (!mg_cli_token_flag("bin2h5", c, " (or give its tokens as --val VAL.bin)", &a.t,
                                   &rc))
                rc = mg_cli_token_bad_flag("bin2h5", argv);
        }
    }
    if (rc != MG_OK || mg_cli_token_paths("bin2h5", "IN.bin", argc, argv, &a.t) != MG_OK) return 2;
    if (a.val && a.t.val_fraction_given) {
        mg_error(MG_EINVAL, "bin2h5: --val and --val-fraction both say where /val comes from: "
                            "give one");
        return 2;
    }
    if (!a.vocab) a.vocab = vocab_size_given ? "unknown" : "gpt2";
    int st = MG_OK;
    if (mg_rank() == 0) { /* one rank converts; the others wait for the verdict */
        mg_h5_init();
        st = bin2h5_run(&a);
    }
    return st == MG_OK ? 0 : 1;
}
