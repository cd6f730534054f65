/* data.c: `meshgrad data csv2h5 ...` and `meshgrad data info PATH`.
 * Exports mg_cli_data (cli.h).
 *
 * csv2h5 turns a CSV of samples (one a line: the sample's values, row-major,
 * then an integer class label as the last column; --in a regular file, or -
 * for stdin) into the HDF5 data set layout of data.h: /train/inputs float32
 * (N, ...shape) = value / scale, /train/labels int32 (N), the same under
 * /test/ for the rows whose 0-based index is a multiple of --test-every; root
 * attributes source and license. It runs on rank 0 with serial HDF5 calls. It
 * never replaces a file it could not have written: --out must differ from
 * --in and be absent or an HDF5 data set; the file is written to an
 * exclusively created temporary name (io/files.h) and renamed when complete.
 * Sizes are checked for overflow; labels are 0..2^24-1
 * (they travel as floats).
 * info opens the splits with the loader's reader and prints what it found (of
 * a token data set: cli/data_text.c). text2h5 is in cli/data_text.c, bin2h5 in
 * cli/data_bin.c. */
#include <errno.h>
#include <stdint.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hdf5.h>

#include "cli/cli.h"
#include "cli/data.h"
#include "dist/comm.h"
#include "io/data.h"
#include "io/files.h"
#include "io/h5util.h"
#include "meshgrad.h"
#include "status.h"

#define MAX_LABEL 16777215 /* labels travel as floats: exact up to 2^24 */
#define MAX_SAMPLE_NUMEL ((int64_t)1 << 32) /* values in one sample */

typedef struct {
    float *inputs;   /* rows x numel */
    int32_t *labels; /* rows */
    int64_t rows, cap;
} split_rows;

static int split_push(split_rows *s, const float *x, int64_t numel, int32_t label) {
    if (s->rows == s->cap) {
        int64_t cap = s->cap ? 2 * s->cap : 1024;
        if ((double)cap * (double)numel * sizeof(float) > (double)SIZE_MAX / 2)
            return mg_error(MG_ENOMEM, "csv2h5: %lld rows of %lld values do not fit in memory",
                            (long long)cap, (long long)numel);
        float *in = realloc(s->inputs, (size_t)(cap * numel) * sizeof *in);
        if (in) s->inputs = in;
        int32_t *lab = realloc(s->labels, (size_t)cap * sizeof *lab);
        if (lab) s->labels = lab;
        if (!in || !lab)
            return mg_error(MG_ENOMEM, "csv2h5: out of memory at %lld rows", (long long)s->rows);
        s->cap = cap;
    }
    memcpy(s->inputs + s->rows * numel, x, (size_t)numel * sizeof *x);
    s->labels[s->rows++] = label;
    return MG_OK;
}

/* Parses one CSV line of numel values and a label into x (scaled) and *label. */
static int parse_line(char *line, const char *name, long lineno, int64_t numel, double scale,
                      float *x, int32_t *label) {
    int64_t field = 0;
    char *p = line;
    for (;;) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        char *q = end;
        while (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n') q++;
        if (end == p || (*q != ',' && *q != '\0') || !isfinite(v)) {
            char *stop = p;
            while (*stop && *stop != ',' && *stop != '\n' && *stop != '\r') stop++;
            return mg_error(MG_EFORMAT, "%s:%ld: field %lld \"%.*s\" is not a number", name, lineno,
                            (long long)field + 1, (int)(stop - p > 40 ? 40 : stop - p), p);
        }
        if (field < numel) {
            x[field] = (float)(v / scale);
            if (!isfinite(x[field]))
                return mg_error(MG_EFORMAT, "%s:%ld: field %lld is %g, which divided by --scale %g "
                                "is past the range of a float: give a larger --scale", name,
                                lineno, (long long)field + 1, v, scale);
        } else if (field == numel) {
            if (v != floor(v) || v < 0 || v > MAX_LABEL)
                return mg_error(MG_EFORMAT,
                                "%s:%ld: the label (field %lld) is %g; labels must "
                                "be integers 0..%d",
                                name, lineno, (long long)field + 1, v, MAX_LABEL);
            *label = (int32_t)v;
        }
        field++;
        if (*q == '\0') break;
        p = q + 1;
    }
    if (field != numel + 1)
        return mg_error(MG_EFORMAT,
                        "%s:%ld: %lld fields, expected %lld (%lld values of the "
                        "sample shape, then the label)",
                        name, lineno, (long long)field, (long long)numel + 1, (long long)numel);
    return MG_OK;
}

static int write_split(hid_t file, const char *split, const split_rows *s, int ndim,
                       const int64_t *shape) {
    hsize_t dims[MG_MAX_DIMS];
    dims[0] = (hsize_t)s->rows;
    for (int i = 0; i < ndim; i++) dims[i + 1] = (hsize_t)shape[i];
    hid_t g = H5Gcreate2(file, split, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t sp_in = H5Screate_simple(ndim + 1, dims, NULL), sp_lab = H5Screate_simple(1, dims, NULL);
    hid_t din =
        H5Dcreate2(g, "inputs", H5T_IEEE_F32LE, sp_in, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t dlab =
        H5Dcreate2(g, "labels", H5T_STD_I32LE, sp_lab, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int bad = g < 0 || din < 0 || dlab < 0 ||
              H5Dwrite(din, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, s->inputs) < 0 ||
              H5Dwrite(dlab, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, s->labels) < 0;
    if (dlab >= 0) H5Dclose(dlab);
    if (din >= 0) H5Dclose(din);
    H5Sclose(sp_lab);
    H5Sclose(sp_in);
    if (g >= 0) H5Gclose(g);
    return bad ? -1 : 0;
}

typedef struct {
    const char *in, *out, *source, *license;
    int ndim;
    int64_t shape[MG_MAX_DIMS - 1];
    double scale;
    long test_every;
} csv2h5_args;

/* What csv2h5 writes: its arguments and the two splits. */
typedef struct {
    const csv2h5_args *a;
    const split_rows *train, *test;
} csv2h5_out;

/* The content of the data set (mg_cli_data_write's fill); negative on failure. */
static int write_content(hid_t file, const void *arg) {
    const csv2h5_out *o = arg;
    const csv2h5_args *a = o->a;
    const split_rows *train = o->train, *test = o->test;
    char rule[200];
    if (a->test_every > 0)
        snprintf(rule, sizeof rule,
                 "test: rows whose 0-based index is a multiple of %ld "
                 "(%lld rows); train: the others (%lld rows)",
                 a->test_every, (long long)test->rows, (long long)train->rows);
    else
        snprintf(rule, sizeof rule, "train: all %lld rows", (long long)train->rows);
    char scale[64];
    snprintf(scale, sizeof scale, "inputs are the CSV values divided by %g", a->scale);
    int bad = mg_h5_attr_write_string(file, "source", a->source) < 0 ||
              mg_h5_attr_write_string(file, "license", a->license) < 0 ||
              mg_h5_attr_write_string(file, "split", rule) < 0 ||
              mg_h5_attr_write_string(file, "scale", scale) < 0 ||
              write_split(file, "train", train, a->ndim, a->shape) < 0 ||
              (a->test_every > 0 && write_split(file, "test", test, a->ndim, a->shape) < 0);
    return bad ? -1 : 0;
}

/* --in for reading into *f: stdin for "-", else a regular file (a device or
 * FIFO is not read). */
static int open_input(const char *in, FILE **f) {
    *f = stdin;
    if (strcmp(in, "-") == 0) return MG_OK;
    int fd;
    if (mg_file_open_read(in, "--in", &fd) != MG_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", mg_last_error());
        return mg_error(MG_EIO, "csv2h5: %s", msg);
    }
    if (!(*f = fdopen(fd, "r"))) {
        close(fd);
        return mg_error(MG_EIO, "csv2h5: cannot open %s: %s", in, strerror(errno));
    }
    return MG_OK;
}

/* The samples of the CSV lines of f (`name` in messages; blank lines skipped)
 * into the splits; *rows counts them, *max_label their largest label. */
static int read_rows(FILE *f, const char *name, const csv2h5_args *a, int64_t numel,
                     split_rows *train, split_rows *test, int64_t *rows, int32_t *max_label) {
    float *x = malloc((size_t)numel * sizeof *x);
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0;
    int64_t row = 0;
    int st = x ? MG_OK : mg_error(MG_ENOMEM, "csv2h5: out of memory");
    while (st == MG_OK && getline(&line, &cap, f) >= 0) {
        lineno++;
        if (strspn(line, " \t\r\n") == strlen(line)) continue; /* blank */
        int32_t label = 0;
        st = parse_line(line, name, lineno, numel, a->scale, x, &label);
        if (st != MG_OK) break;
        if (label > *max_label) *max_label = label;
        int is_test = a->test_every > 0 && row % a->test_every == 0;
        st = split_push(is_test ? test : train, x, numel, label);
        row++;
    }
    if (st == MG_OK && ferror(f)) st = mg_error(MG_EIO, "csv2h5: reading %s failed", name);
    free(line);
    free(x);
    *rows = row;
    return st;
}

static int csv2h5_run(const csv2h5_args *a) {
    int64_t numel = 1;
    for (int i = 0; i < a->ndim; i++) numel *= a->shape[i];
    const char *name = strcmp(a->in, "-") == 0 ? "<stdin>" : a->in;
    if (mg_path_same_file(a->in, a->out))
        return mg_error(MG_EINVAL, "csv2h5: --out %s is the --in file: give another --out path",
                        a->out);
    int st = mg_path_check(a->out, "csv2h5 --out", MG_TMP_SUFFIX_MAX);
    FILE *f;
    if (st == MG_OK) st = open_input(a->in, &f);
    if (st != MG_OK) return st;
    split_rows train = {0}, test = {0};
    int64_t row = 0;
    int32_t max_label = 0;
    st = read_rows(f, name, a, numel, &train, &test, &row, &max_label);
    if (f != stdin) fclose(f);
    if (st == MG_OK && (train.rows == 0 || (a->test_every > 0 && test.rows == 0)))
        st = mg_error(MG_EFORMAT, "csv2h5: %s has %lld data rows: too few to make %s", name,
                      (long long)row,
                      a->test_every > 0 ? "a train and a test split" : "a train split");
    if (st == MG_OK) {
        csv2h5_out o = {a, &train, &test};
        st = mg_cli_data_write("csv2h5", a->out, write_content, &o);
    }
    if (st == MG_OK) {
        char sb[128];
        mg_shape_format(sb, sizeof sb, a->ndim, a->shape);
        printf("%s: train %lld x %s, test %lld x %s, %d classes\n", a->out, (long long)train.rows,
               sb, (long long)test.rows, sb, (int)max_label + 1);
    }
    free(train.inputs);
    free(train.labels);
    free(test.inputs);
    free(test.labels);
    return st;
}

static void csv2h5_usage(FILE *out) {
    fprintf(out, "usage: meshgrad data csv2h5 --in FILE|- --out PATH --shape DxD... [--scale S]\n"
                 "           [--test-every K] [--source TEXT] [--license TEXT]\n"
                 "  CSV lines: the sample's values (row-major), then an integer label.\n"
                 "  --scale S        inputs are value / S (default 1)\n"
                 "  --test-every K   rows whose 0-based index is a multiple of K go to /test\n"
                 "                   (default 0: no test split)\n");
}

/* --shape's sizes joined by 'x' into a->shape and a->ndim; a usage error
 * names the flag. */
static int parse_shape(const char *shape, csv2h5_args *a) {
    int64_t numel = 1;
    char *end;
    for (const char *p = shape;; p = end + 1) {
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 1 || errno || a->ndim == MG_MAX_DIMS - 1 || (*end && *end != 'x'))
            return mg_error(MG_EINVAL, "csv2h5: --shape %s: give sizes >= 1 joined by 'x', e.g. "
                            "8x8 (at most %d dims)", shape, MG_MAX_DIMS - 1);
        if (v > MAX_SAMPLE_NUMEL / numel)
            return mg_error(MG_EINVAL, "csv2h5: --shape %s: a sample of more than %lld values is "
                            "not supported", shape, (long long)MAX_SAMPLE_NUMEL);
        numel *= v;
        a->shape[a->ndim++] = v;
        if (!*end) return MG_OK;
    }
}

/* The flags into *a: 0, 1 for --help (the usage printed), or 2 (a usage
 * error). */
static int csv2h5_parse(int argc, char **argv, csv2h5_args *a) {
    static const struct option options[] = {
        {"in", required_argument, NULL, 'i'},
        {"out", required_argument, NULL, 'o'},
        {"shape", required_argument, NULL, 's'},
        {"scale", required_argument, NULL, 'c'},
        {"test-every", required_argument, NULL, 't'},
        {"source", required_argument, NULL, 'S'},
        {"license", required_argument, NULL, 'L'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *a = (csv2h5_args){.source = "", .license = "", .scale = 1.0};
    const char *shape = NULL;
    int opt;
    char *end;
    optind = 0;
    while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (opt) {
        case 'i': a->in = optarg; break;
        case 'o': a->out = optarg; break;
        case 's': shape = optarg; break;
        case 'c':
            a->scale = strtod(optarg, &end);
            if (end == optarg || *end || !(a->scale > 0) || !isfinite(a->scale)) {
                mg_error(MG_EINVAL, "csv2h5: --scale %s: give a number > 0", optarg);
                return 2;
            }
            break;
        case 't':
            errno = 0;
            a->test_every = strtol(optarg, &end, 10);
            if (end == optarg || *end || errno || a->test_every < 0 || a->test_every > INT32_MAX) {
                mg_error(MG_EINVAL, "csv2h5: --test-every '%s': give an integer from 0 to %d",
                         optarg, INT32_MAX);
                return 2;
            }
            break;
        case 'S': a->source = optarg; break;
        case 'L': a->license = optarg; break;
        case 'h':
            csv2h5_usage(stdout);
            return 1;
        default:
            csv2h5_usage(stderr);
            mg_cli_bad_flag("csv2h5", argv);
            return 2;
        }
    }
    if (!a->in || !a->out || !shape || optind < argc) {
        csv2h5_usage(stderr);
        mg_error(MG_EINVAL, "csv2h5 needs --in, --out and --shape%s%s",
                 optind < argc ? "; unexpected argument " : "", optind < argc ? argv[optind] : "");
        return 2;
    }
    return parse_shape(shape, a) == MG_OK ? 0 : 2;
}

static int csv2h5(int argc, char **argv) {
    csv2h5_args a;
    int code = csv2h5_parse(argc, argv, &a);
    if (code) return code == 1 ? 0 : code;
    int st = MG_OK;
    if (mg_rank() == 0) { /* one rank converts; the others wait for the verdict */
        mg_h5_init();
        st = csv2h5_run(&a);
    }
    return st == MG_OK ? 0 : 1;
}

/* The file holds /train/tokens (a token data set, cli/data_text.c). */
static int is_token_data_set(const char *path) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    int yes = f >= 0 && mg_h5_exists(f, "train/tokens");
    if (f >= 0) H5Fclose(f);
    return yes;
}

static int info(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        if (mg_rank() == 0) printf("usage: meshgrad data info PATH\n");
        return 0;
    }
    if (mg_cli_one_path("data info", argc, argv, "usage: meshgrad data info PATH") != MG_OK)
        return 2;
    if (mg_file_precheck(argv[1], "data set") == MG_OK && is_token_data_set(argv[1]))
        return mg_cli_text_info(argv[1]);
    const char *splits[2] = {"train", "test"};
    mg_comm *world = mg_comm_world();
    if (!world) return 1;
    for (int s = 0; s < 2; s++) {
        int has = s == 0 ? 1 : mg_dataset_has_split(argv[1], splits[s], world);
        if (has < 0) return 1;
        if (!has) break; /* no test split */
        mg_dataset *ds = mg_dataset_open(argv[1], splits[s], world);
        if (!ds) return 1;
        char sb[128];
        if (mg_rank() == 0)
            printf("/%s: %lld samples of shape %s, %d classes\n", splits[s],
                   (long long)mg_dataset_rows(ds),
                   mg_shape_format(sb, sizeof sb, mg_dataset_sample_ndim(ds),
                                   mg_dataset_sample_shape(ds)),
                   mg_dataset_num_classes(ds));
        mg_dataset_close(ds);
    }
    const char *keys[4] = {"source", "license", "split", "scale"};
    mg_cli_data_print_attrs(argv[1], keys, 4);
    return 0;
}

int mg_cli_data(int argc, char **argv) {
    static const mg_cli_command subs[] = {
        {"csv2h5", csv2h5, "convert a CSV of samples and labels into an HDF5 data set"},
        {"text2h5", mg_cli_text2h5, "convert a text file (or .gz) into a byte-level token data set"},
        {"bin2h5", mg_cli_bin2h5, "convert a nanoGPT or llm.c token file into a token data set"},
        {"info", info, "print the splits, shapes, classes and attributes of a data set"},
    };
    return mg_cli_dispatch("data",
                           "usage: meshgrad data csv2h5 ... | text2h5 ... | bin2h5 ... | info PATH",
                           subs, 4, 8, argc, argv);
}
