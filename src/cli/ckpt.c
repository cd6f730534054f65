/* ckpt.c: `meshgrad ckpt info PATH` and `meshgrad ckpt bench [--params N]`,
 * and the table of `meshgrad ckpt` (export and import: ckpt_convert.c).
 * Exports mg_cli_ckpt (cli.h).
 *
 * info (rank 0, serial HDF5) prints the format, every attribute and every
 * dataset with its global shape, and verifies every checksum by reading all
 * data: exit 0 when the file verifies, 1 otherwise.
 * bench saves and loads N parameters plus two AdamW states (3N floats) as
 * tensors of at most 4096 x 4096, Shard(0) over a 1-D mesh of all ranks, and
 * prints the throughput (MB/s of file size, wall time including fsync). It
 * first checks that the disk of --dir and the memory hold what it makes, and
 * that DIR/ckpt-bench.h5, when there, is a file an earlier bench wrote (its
 * "ckpt.bench" attribute): another is never replaced. Its files do not
 * outlive the run: the checkpoint is removed at the end (unless --keep), the
 * file of the disk's rate is unlinked as soon as it is open, and SIGTERM,
 * SIGINT or SIGHUP remove the temporary and the checkpoint before the
 * process ends (io/files.h mg_cleanup_install); after a SIGKILL, the next
 * save into DIR removes the temporary file. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <hdf5.h>

#include "cli/cli.h"
#include "dist/comm.h"
#include "dist/dtensor.h"
#include "dist/mesh.h"
#include "io/checkpoint.h"
#include "io/files.h"
#include "io/h5util.h"
#include "meshgrad.h"
#include "status.h"

static int info(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        if (mg_rank() == 0)
            printf("usage: meshgrad ckpt info PATH (a checkpoint file, or a directory: its "
                   "newest checkpoint)\n");
        return 0;
    }
    if (mg_cli_one_path("ckpt info", argc, argv, "usage: meshgrad ckpt info PATH (a checkpoint "
                        "file, or a directory: its newest checkpoint)") != MG_OK)
        return 2;
    if (mg_rank() != 0) return 0; /* serial: rank 0 reads the file */
    char path[MG_PATH_MAX];
    if (mg_checkpoint_resolve(argv[1], path, sizeof path) != MG_OK) return 1;
    int st = mg_checkpoint_info(path, stdout);
    fflush(stdout);
    return st == MG_OK ? 0 : 1;
}

/* "100M", "1.5G", "4096" -> a count */
static int64_t parse_count(const char *s) {
    char *end;
    double v = strtod(s, &end);
    if (end == s) return -1;
    if (*end == 'k' || *end == 'K')
        v *= 1e3, end++;
    else if (*end == 'M' || *end == 'm')
        v *= 1e6, end++;
    else if (*end == 'G' || *end == 'g')
        v *= 1e9, end++;
    return *end || v < 1 || v > 4e10 ? -1 : (int64_t)v;
}

/* The attribute that marks a checkpoint as one ckpt bench wrote. */
#define BENCH_KEY "ckpt.bench"

/* A file ckpt bench may replace: a checkpoint that it wrote. */
static int is_bench_file(const char *path) {
    if (!mg_checkpoint_is_one(path)) return 0;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    char v[16];
    int ok = f >= 0 && mg_h5_attr_read_text(f, BENCH_KEY, v, sizeof v) == 0;
    if (f >= 0) H5Fclose(f);
    return ok;
}

/* What `dd if=/dev/zero of=FILE bs=1M count=MB conv=fsync` measures in dir:
 * MB/s of 1 MiB writes and an fsync, or a negative value when the file
 * cannot be made. The file is unlinked as soon as it is open: its space
 * goes back when it is closed, however the process ends. */
static double disk_mbps(const char *dir, int64_t mb) {
    char path[MG_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/.ckpt-bench.dd.%ld", dir, (long)getpid());
    char *block = calloc(1, (size_t)1 << 20);
    if (!block) return -1;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        free(block);
        return -1;
    }
    unlink(path);
    double t0 = mg_clock();
    int bad = 0;
    for (int64_t i = 0; i < mb && !bad; i++) bad = write(fd, block, (size_t)1 << 20) != (1 << 20);
    bad |= fsync(fd) != 0;
    double t = mg_clock() - t0;
    close(fd);
    free(block);
    return bad ? -1 : (double)mb * (1 << 20) / 1e6 / t;
}

typedef struct {
    int64_t params;
    const char *dir;
    int keep;
} bench_opts;

/* The tensors saved and loaded, with their names and the sums of their
 * values (to check what comes back), and the file. */
typedef struct {
    mg_mesh *mesh;
    int n; /* 3 tensors (a parameter and its two AdamW states) a block of rows */
    mg_ckpt_entry *entries;
    char (*names)[64];
    uint64_t *sums;
    char path[MG_PATH_MAX];
    int saved; /* rank 0: path is the checkpoint this run wrote */
} bench_job;

/* What it measured: seconds to save and to load, the file's MB, the disk's
 * MB/s (rank 0). */
typedef struct {
    double save_s, load_s, mb, disk_mbps;
} bench_result;

/* The flags into *o: 0, 1 for --help (the usage printed), or 2 (a usage error). */
static int bench_parse(bench_opts *o, int argc, char **argv) {
    static const struct option options[] = {{"params", 1, 0, 'p'}, {"dir", 1, 0, 'd'},
                                            {"keep", 0, 0, 'k'},   {"help", 0, 0, 'h'},
                                            {0, 0, 0, 0}};
    *o = (bench_opts){.params = 100000000, .dir = "."};
    int opt;
    optind = 0;
    while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (opt) {
        case 'p':
            if ((o->params = parse_count(optarg)) < 0) {
                mg_error(MG_EINVAL, "ckpt bench: --params %s: give a count such as 100M", optarg);
                return 2;
            }
            break;
        case 'd':
            o->dir = optarg;
            break;
        case 'k':
            o->keep = 1;
            break;
        case 'h':
            if (mg_rank() == 0)
                printf("usage: meshgrad ckpt bench [--params N (default 100M)] [--dir DIR "
                       "(default .)] [--keep]\n  saves and loads N parameters + 2 AdamW states "
                       "(3N floats), Shard(0) over all ranks\n");
            return 1;
        default:
            mg_cli_bad_flag("ckpt bench", argv);
            return 2;
        }
    }
    return mg_cli_no_arguments_left("ckpt bench", argc, argv) != MG_OK ? 2 : 0;
}

/* The sum that tells saved values from others. */
static uint64_t sum_of(const mg_tensor *l) {
    uint64_t sum = 0;
    for (int64_t j = 0; j < l->numel; j++) sum += (uint64_t)(l->data[j] * 1e3f);
    return sum;
}

/* Entry i: a tensor of `shape` at Shard(0) over j->mesh, block t's parameter
 * (k 0) or one of its two AdamW states, filled and summed. MG_OK or an error. */
static int make_entry(bench_job *j, int i, int t, int k, const int64_t *shape) {
    static const char *const kinds[3] = {"", "/exp_avg", "/exp_avg_sq"};
    snprintf(j->names[i], sizeof j->names[i], "%s/w%d%s", k ? "optim" : "params", t, kinds[k]);
    mg_spec spec;
    mg_placement p = MG_SHARD(0);
    int st = mg_spec_make(&spec, j->mesh, &p, 1, 2, shape, "ckpt bench");
    mg_dtensor *dt = st == MG_OK ? mg_dtensor_zeros(&spec, NULL) : NULL;
    if (!dt) return mg_last_code();
    float *x = dt->local->data;
    for (int64_t e = 0; e < dt->local->numel; e++)
        x[e] = (float)((e * 2654435761u + (uint64_t)i) % 1000003) * 1e-3f;
    j->sums[i] = sum_of(dt->local);
    j->entries[i].name = j->names[i];
    j->entries[i].tensor = dt;
    return MG_OK;
}

static void format_bytes(char *buf, size_t len, double bytes) {
    if (bytes >= 1e9) snprintf(buf, len, "%.1f GB", bytes / 1e9);
    else snprintf(buf, len, "%.1f MB", bytes / 1e6);
}

/* Collective, before anything is made: the memory and the disk hold what
 * the run makes (`file` bytes of checkpoint, twice on the disk with --keep,
 * when the file of the disk's rate is written beside it), --dir is a
 * directory, and its ckpt-bench.h5 (when there) is one a bench wrote. */
static int bench_check(const bench_opts *o, const char *path, double file) {
    int st = MG_OK, what = MG_OUTPUT_NEW;
    struct stat sb;
    struct statvfs vf;
    char what_text[96];
    snprintf(what_text, sizeof what_text, "ckpt bench --params %lld", (long long)o->params);
    st = mg_status_agree(mg_machine_check_memory(what_text, file / mg_world_size(),
                                                 "give a smaller --params"));
    if (st != MG_OK) return st;
    if (mg_rank() == 0) {
        if (stat(o->dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
            st = mg_error(MG_EIO, "ckpt bench: --dir %s is not a directory: create it, or give "
                          "another", o->dir);
        else
            st = mg_output_check(path, "checkpoint that ckpt bench wrote", is_bench_file, 0,
                                 &what);
        double need = file * (o->keep ? 2 : 1) * 1.02 + 16e6;
        double have = statvfs(o->dir, &vf) == 0 ? (double)vf.f_bavail * (double)vf.f_frsize : -1;
        if (st == MG_OK && have >= 0 && what == MG_OUTPUT_FILE && stat(path, &sb) == 0)
            have += (double)sb.st_size; /* the earlier bench's file goes */
        if (st == MG_OK && have >= 0 && have < need) {
            char n[32], h[32];
            format_bytes(n, sizeof n, need);
            format_bytes(h, sizeof h, have);
            st = mg_error(MG_EIO, "ckpt bench: --params %lld needs about %s of disk in %s (the "
                          "checkpoint%s), and %s are free there: give a smaller --params or "
                          "another --dir", (long long)o->params, n, o->dir,
                          o->keep ? " kept, and a file of its size" : "", h);
        }
    }
    return mg_status_agree(st);
}

/* The parameters in blocks of at most 4096 x 4096, each with its two AdamW
 * states (make_entry); the file's path. MG_OK or an error. */
static int bench_setup(bench_job *j, const bench_opts *o) {
    const int64_t cols = 4096, max_rows = 4096;
    int64_t rows_total = (o->params + cols - 1) / cols;
    int ntensors = (int)((rows_total + max_rows - 1) / max_rows);
    if ((size_t)snprintf(j->path, sizeof j->path, "%s/ckpt-bench.h5", o->dir) >=
        sizeof j->path - MG_TMP_SUFFIX_MAX)
        return mg_error(MG_EINVAL, "ckpt bench: --dir %s is too long a path", o->dir);
    int st = bench_check(o, j->path, 3.0 * 4.0 * (double)rows_total * (double)cols);
    if (st != MG_OK) return st;
    j->n = 3 * ntensors;
    j->entries = calloc((size_t)j->n, sizeof *j->entries);
    j->names = calloc((size_t)j->n, sizeof *j->names);
    j->sums = calloc((size_t)j->n, sizeof *j->sums);
    st = j->entries && j->names && j->sums ? MG_OK
                                           : mg_error(MG_ENOMEM, "ckpt bench: out of memory");
    for (int t = 0; st == MG_OK && t < ntensors; t++) {
        int64_t rows = rows_total - t * max_rows < max_rows ? rows_total - t * max_rows : max_rows;
        int64_t shape[2] = {rows, cols};
        for (int k = 0; st == MG_OK && k < 3; k++) st = make_entry(j, 3 * t + k, t, k, shape);
    }
    return mg_status_agree(st);
}

/* Between barriers: a save, then (the tensors zeroed) a load, each timed;
 * the loaded values must be the saved ones. */
static int save_and_load(bench_job *j, const bench_opts *o, bench_result *r) {
    mg_ckpt_attr attrs[2] = {{"step", "0"}, {BENCH_KEY, "1"}};
    mg_comm *world = j->mesh->world;
    int st = mg_comm_barrier(world);
    if (st != MG_OK) return st;
    double t0 = mg_clock();
    st = mg_checkpoint_save(j->path, j->entries, j->n, attrs, 2);
    if (st == MG_OK && mg_rank() == 0) {
        j->saved = 1;
        if (!o->keep) mg_cleanup_add(j->path); /* a stop signal removes it too */
    }
    if (st == MG_OK) st = mg_comm_barrier(world);
    r->save_s = mg_clock() - t0;
    if (st != MG_OK) return st;
    for (int i = 0; i < j->n; i++)
        memset(j->entries[i].tensor->local->data, 0,
               (size_t)j->entries[i].tensor->local->numel * sizeof(float));
    if ((st = mg_comm_barrier(world)) != MG_OK) return st;
    t0 = mg_clock();
    st = mg_checkpoint_load(j->path, j->entries, j->n, NULL, 0, NULL);
    if (st == MG_OK) st = mg_comm_barrier(world);
    r->load_s = mg_clock() - t0;
    if (st != MG_OK) return st;
    int64_t ok = 1;
    for (int i = 0; i < j->n; i++)
        if (sum_of(j->entries[i].tensor->local) != j->sums[i]) ok = 0;
    if ((st = mg_comm_all_reduce_i64(world, &ok, 1, MG_CONTROL_MIN)) != MG_OK) return st;
    return ok ? MG_OK
              : mg_error(MG_EFORMAT, "ckpt bench: the loaded values differ from the saved ones");
}

/* Rank 0: the checkpoint this run wrote removed (unless --keep). */
static void remove_checkpoint(bench_job *j, const bench_opts *o) {
    if (!j->saved || o->keep) return;
    mg_cleanup_drop(j->path);
    unlink(j->path);
    j->saved = 0;
}

/* Rank 0: the file's size, then (the file removed unless --keep) the disk's
 * rate on a file of that size. */
static void measure_disk(bench_job *j, const bench_opts *o, bench_result *r) {
    struct stat sb;
    r->mb = stat(j->path, &sb) == 0 ? (double)sb.st_size / 1e6 : 0;
    remove_checkpoint(j, o);
    r->disk_mbps = disk_mbps(o->dir, (int64_t)(r->mb * 1e6 / (1 << 20)));
}

/* Rank 0's lines. */
static void bench_report(const bench_job *j, const bench_opts *o, const bench_result *r) {
    printf("ckpt bench: %d rank(s), %lld parameters + 2 AdamW states = %d tensors, "
           "file %.1f MB (%s)\n",
           mg_world_size(), (long long)o->params, j->n, r->mb, j->path);
    printf("  save %7.2f s  %8.1f MB/s   (collective write, fletcher32, fsync, rename)\n",
           r->save_s, r->mb / r->save_s);
    printf("  load %7.2f s  %8.1f MB/s   (collective read, checksums verified)\n", r->load_s,
           r->mb / r->load_s);
    printf("  disk %8s  %8.1f MB/s   (1 MiB writes + fsync, as dd conv=fsync, same size)\n", "",
           r->disk_mbps);
}

static int bench(int argc, char **argv) {
    bench_opts o;
    int code = bench_parse(&o, argc, argv);
    if (code) return code == 1 ? 0 : code;
    int size = mg_world_size();
    bench_job j = {.mesh = mg_mesh_new(1, &size)}; /* a 1-D mesh of all ranks */
    bench_result r = {0};
    if (!j.mesh) return 1;
    int st = mg_cleanup_install();
    if (st == MG_OK) st = bench_setup(&j, &o);
    if (st == MG_OK) st = save_and_load(&j, &o, &r);
    if (st == MG_OK && mg_rank() == 0) {
        measure_disk(&j, &o, &r);
        bench_report(&j, &o, &r);
    }
    if (mg_rank() == 0) remove_checkpoint(&j, &o); /* also when the load failed */
    for (int i = 0; j.entries && i < j.n; i++) mg_dtensor_free(j.entries[i].tensor);
    free(j.entries);
    free(j.names);
    free(j.sums);
    mg_mesh_free(j.mesh);
    return st == MG_OK ? 0 : 1;
}

int mg_cli_ckpt(int argc, char **argv) {
    static const mg_cli_command subs[] = {
        {"info", info, "print a checkpoint's attributes and datasets; verify every checksum"},
        {"bench", bench, "save and load N parameters + 2 AdamW states; print MB/s"},
        {"export", mg_cli_ckpt_export, "write a model for llama2.c or Hugging Face (safetensors)"},
        {"import", mg_cli_ckpt_import, "make a checkpoint of a llama2.c or safetensors model"},
    };
    return mg_cli_dispatch("ckpt", "usage: meshgrad ckpt info PATH | bench [--params N] | "
                           "export|import --format F IN OUT", subs, 4, 6, argc, argv);
}
