/* ckpt.c: `meshgrad ckpt info PATH` and `meshgrad ckpt bench [--params N]`.
 * Exports mg_cli_ckpt (cli.h).
 *
 * info (rank 0, serial HDF5) prints the format, every attribute and every
 * dataset with its global shape, and verifies every checksum by reading all
 * data: exit 0 when the file verifies, 1 otherwise.
 * bench saves and loads N parameters plus two AdamW states (3N floats) as
 * tensors of at most 4096 x 4096, Shard(0) over a 1-D mesh of all ranks, and
 * prints the throughput (MB/s of file size, wall time including fsync). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "dist/comm.h"
#include "dist/dtensor.h"
#include "dist/mesh.h"
#include "io/checkpoint.h"
#include "io/files.h"
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

/* What `dd if=/dev/zero of=PATH bs=1M count=MB conv=fsync` measures: MB/s of
 * 1 MiB writes and an fsync, or a negative value when the file cannot be made
 * (it must not exist: it is removed afterwards). */
static double disk_mbps(const char *path, int64_t mb) {
    char *block = calloc(1, (size_t)1 << 20);
    if (!block) return -1;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0644);
    if (fd < 0) {
        free(block);
        return -1;
    }
    double t0 = mg_cli_clock();
    int bad = 0;
    for (int64_t i = 0; i < mb && !bad; i++) bad = write(fd, block, (size_t)1 << 20) != (1 << 20);
    bad |= fsync(fd) != 0;
    double t = mg_cli_clock() - t0;
    close(fd);
    unlink(path);
    free(block);
    return bad ? -1 : (double)mb * (1 << 20) / 1e6 / t;
}

static int bench(int argc, char **argv) {
    static const struct option options[] = {
        {"params", required_argument, NULL, 'p'},
        {"dir", required_argument, NULL, 'd'},
        {"keep", no_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int64_t params = 100000000;
    const char *dir = ".";
    int keep = 0, opt;
    optind = 0;
    while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (opt) {
        case 'p':
            if ((params = parse_count(optarg)) < 0) {
                mg_error(MG_EINVAL, "ckpt bench: --params %s: give a count such as 100M", optarg);
                return 2;
            }
            break;
        case 'd':
            dir = optarg;
            break;
        case 'k':
            keep = 1;
            break;
        case 'h':
            if (mg_rank() == 0)
                printf("usage: meshgrad ckpt bench [--params N (default 100M)] [--dir DIR "
                       "(default .)] [--keep]\n  saves and loads N parameters + 2 AdamW states "
                       "(3N floats), Shard(0) over all ranks\n");
            return 0;
        default:
            mg_cli_bad_flag("ckpt bench", argv);
            return 2;
        }
    }
    if (mg_cli_no_arguments_left("ckpt bench", argc, argv) != MG_OK) return 2;
    int size = mg_world_size(), rank = mg_rank();
    mg_mesh *mesh = mg_mesh_new(1, &size);
    if (!mesh) return 1;
    const int64_t cols = 4096, max_rows = 4096;
    int64_t rows_total = (params + cols - 1) / cols;
    int ntensors = (int)((rows_total + max_rows - 1) / max_rows);
    int n = 3 * ntensors;
    mg_ckpt_entry *entries = calloc((size_t)n, sizeof *entries);
    char(*names)[64] = calloc((size_t)n, sizeof *names);
    uint64_t *sums = calloc((size_t)n, sizeof *sums);
    int st = entries && names && sums ? MG_OK : mg_error(MG_ENOMEM, "ckpt bench: out of memory");
    const char *kinds[3] = {"", "/exp_avg", "/exp_avg_sq"};
    for (int t = 0; st == MG_OK && t < ntensors; t++) {
        int64_t rows = rows_total - t * max_rows < max_rows ? rows_total - t * max_rows : max_rows;
        int64_t shape[2] = {rows, cols};
        for (int k = 0; k < 3; k++) {
            int i = 3 * t + k;
            snprintf(names[i], sizeof names[i], "%s/w%d%s", k ? "optim" : "params", t, kinds[k]);
            mg_spec spec;
            mg_placement p = MG_SHARD(0);
            st = mg_spec_make(&spec, mesh, &p, 1, 2, shape, "ckpt bench");
            mg_dtensor *dt = st == MG_OK ? mg_dtensor_zeros(&spec, NULL) : NULL;
            if (!dt) {
                st = mg_last_code();
                break;
            }
            float *x = dt->local->data;
            uint64_t sum = 0;
            for (int64_t j = 0; j < dt->local->numel; j++) {
                x[j] = (float)((j * 2654435761u + (uint64_t)i) % 1000003) * 1e-3f;
                sum += (uint64_t)(x[j] * 1e3f);
            }
            sums[i] = sum;
            entries[i].name = names[i];
            entries[i].tensor = dt;
        }
    }
    if ((st = mg_status_agree(st)) != MG_OK) goto done;
    char path[MG_PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/ckpt-bench.h5", dir) >= sizeof path - MG_TMP_SUFFIX_MAX) {
        st = mg_error(MG_EINVAL, "ckpt bench: --dir %s is too long a path", dir);
        goto done;
    }
    mg_ckpt_attr attr = {"step", "0"};
    mg_comm *world = mesh->world;
    double t0 = 0, t_save = 0, t_load = 0;
    if ((st = mg_comm_barrier(world)) != MG_OK) goto done;
    t0 = mg_cli_clock();
    st = mg_checkpoint_save(path, entries, n, &attr, 1);
    if (st == MG_OK) st = mg_comm_barrier(world);
    t_save = mg_cli_clock() - t0;
    if (st != MG_OK) goto done;
    for (int i = 0; i < n; i++)
        memset(entries[i].tensor->local->data, 0,
               (size_t)entries[i].tensor->local->numel * sizeof(float));
    if ((st = mg_comm_barrier(world)) != MG_OK) goto done;
    t0 = mg_cli_clock();
    st = mg_checkpoint_load(path, entries, n, NULL, 0, NULL);
    if (st == MG_OK) st = mg_comm_barrier(world);
    t_load = mg_cli_clock() - t0;
    if (st != MG_OK) goto done;
    int64_t ok = 1;
    for (int i = 0; i < n; i++) {
        const mg_tensor *l = entries[i].tensor->local;
        uint64_t sum = 0;
        for (int64_t j = 0; j < l->numel; j++) sum += (uint64_t)(l->data[j] * 1e3f);
        if (sum != sums[i]) ok = 0;
    }
    if ((st = mg_comm_all_reduce_i64(world, &ok, 1, MG_CONTROL_MIN)) != MG_OK) goto done;
    if (!ok) {
        st = mg_error(MG_EFORMAT, "ckpt bench: the loaded values differ from the saved ones");
        goto done;
    }
    if (rank == 0) {
        struct stat sb;
        double mb = stat(path, &sb) == 0 ? (double)sb.st_size / 1e6 : 0;
        printf("ckpt bench: %d rank(s), %lld parameters + 2 AdamW states = %d tensors, "
               "file %.1f MB (%s)\n",
               size, (long long)params, n, mb, path);
        printf("  save %7.2f s  %8.1f MB/s   (collective write, fletcher32, fsync, rename)\n",
               t_save, mb / t_save);
        printf("  load %7.2f s  %8.1f MB/s   (collective read, checksums verified)\n", t_load,
               mb / t_load);
        if (!keep) unlink(path);
        char dd[MG_PATH_MAX];
        snprintf(dd, sizeof dd, "%s/ckpt-bench.dd", dir);
        double disk = disk_mbps(dd, (int64_t)(mb * 1e6 / (1 << 20)));
        printf("  disk %8s  %8.1f MB/s   (1 MiB writes + fsync, as dd conv=fsync, same size)\n", "",
               disk);
    }
done:
    for (int i = 0; entries && i < n; i++) mg_dtensor_free(entries[i].tensor);
    free(entries);
    free(names);
    free(sums);
    mg_mesh_free(mesh);
    return st == MG_OK ? 0 : 1;
}

int mg_cli_ckpt(int argc, char **argv) {
    static const mg_cli_command subs[] = {
        {"info", info, "print a checkpoint's attributes and datasets; verify every checksum"},
        {"bench", bench, "save and load N parameters + 2 AdamW states; print MB/s"},
    };
    return mg_cli_dispatch("ckpt", "usage: meshgrad ckpt info PATH | meshgrad ckpt bench [--params N]",
                           subs, 2, 6, argc, argv);
}
