/* bench_comm.c: `meshgrad bench comm [--sizes 1M,16M] [--iters N] [--mesh 2x2]`.
 * Times all-reduce, all-gather and reduce-scatter through meshgrad's comm layer
 * (mg_comm_*) and through raw MPI on the same buffers and communicator, on every
 * mesh dimension of more than one rank, and prints algorithm bandwidth (size /
 * time, where size is the full buffer: the all-reduced buffer, the gathered
 * output, the reduce-scattered input), the ratio meshgrad / MPI, and as its last
 * line one JSON object {"bench":"comm",...,"results":[...]}.
 * The raw MPI calls of run_op are the ones measured against; everything else
 * (barriers, gathering the times) goes through the comm layer.
 * Each iteration is timed between barriers, meshgrad and MPI alternating (and
 * alternating which goes first); the time of an iteration is the slowest
 * rank's; the median iteration is reported.
 * Exports mg_cli_bench_comm (cli.h). */
#include <errno.h>
#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_util.h"
#include "cli/cli.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "meshgrad.h"
#include "status.h"

#define MAX_SIZES 16
#define WARMUP 3

typedef enum { OP_ALL_REDUCE, OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_COUNT } bench_op;
static const char *const op_names[OP_COUNT] = {"all_reduce", "all_gather", "reduce_scatter"};

typedef struct {
    int64_t sizes[MAX_SIZES]; /* bytes */
    int nsizes, iters;
    int shape[MG_MAX_MESH_DIMS], ndim;
} comm_opts;

/* The JSON object, written as the rows come (rank 0 prints it at the end). */
typedef struct {
    FILE *f;
    char *text;
    size_t len;
    int rows;
} comm_json;

static void usage(FILE *out) {
    if (mg_rank() != 0) return;
    fprintf(out,
            "usage: meshgrad bench comm [--sizes LIST] [--iters N] [--mesh SHAPE]\n\n"
            "  --sizes LIST   buffer sizes in bytes, K/M/G suffixes (powers of 2), e.g. 1M,16M\n"
            "                 (default 1M,16M)\n"
            "  --iters N      timed iterations per size, after %d warm-up ones (default 20)\n"
            "  --mesh SHAPE   e.g. 2x2: each mesh dim of more than one rank is measured\n"
            "                 (default: one dim of all ranks)\n",
            WARMUP);
}

/* "1M,16M" -> bytes */
static int parse_sizes(const char *text, int64_t *sizes) {
    int n = 0;
    const char *p = text;
    while (*p) {
        errno = 0;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v <= 0)
            return mg_error(MG_EINVAL, "bench comm: --sizes '%s': expected sizes like 1M,16M",
                            text);
        int64_t mul = 1;
        switch (*end) {
        case 'K':
        case 'k':
            mul = 1 << 10;
            end++;
            break;
        case 'M':
        case 'm':
            mul = 1 << 20;
            end++;
            break;
        case 'G':
        case 'g':
            mul = 1 << 30;
            end++;
            break;
        default: break;
        }
        if (*end && *end != ',')
            return mg_error(MG_EINVAL, "bench comm: --sizes '%s': expected sizes like 1M,16M",
                            text);
        if (n == MAX_SIZES)
            return mg_error(MG_EINVAL, "bench comm: --sizes: at most %d sizes", MAX_SIZES);
        if (v > ((int64_t)1 << 40) / mul)
            return mg_error(MG_EINVAL, "bench comm: --sizes '%s': a size is at most 1024G",
                            text);
        sizes[n++] = (int64_t)v * mul;
        p = *end ? end + 1 : end;
    }
    if (n == 0) return mg_error(MG_EINVAL, "bench comm: --sizes is empty");
    return n;
}

/* One collective on buffers of `n` floats (all-reduce buffer, gathered output,
 * scattered input), meshgrad's when `raw` is 0, MPI's otherwise. */
static int run_op(mg_comm *c, bench_op op, int raw, float *big, float *small, int *counts,
                  int64_t n) {
    int64_t per = n / c->size;
    if (!raw) {
        switch (op) {
        case OP_ALL_REDUCE: return mg_comm_all_reduce(c, big, n, MG_REDUCE_SUM);
        case OP_ALL_GATHER: return mg_comm_all_gather(c, small, per, big);
        default: return mg_comm_reduce_scatter(c, big, small, per);
        }
    }
    int err;
    switch (op) {
    case OP_ALL_REDUCE:
        err = MPI_Allreduce(MPI_IN_PLACE, big, (int)n, MPI_FLOAT, MPI_SUM, c->mpi);
        break;
    case OP_ALL_GATHER:
        err = MPI_Allgather(small, (int)per, MPI_FLOAT, big, (int)per, MPI_FLOAT, c->mpi);
        break;
    default: /* MPI_Reduce_scatter: Open MPI 4.1's _block variant is far slower */
        err = MPI_Reduce_scatter(big, small, counts, MPI_FLOAT, MPI_SUM, c->mpi);
    }
    return err == MPI_SUCCESS ? MG_OK : mg_error(MG_ECOMM, "bench comm: MPI call failed (%d)", err);
}

/* Median over iterations of the slowest rank's time, meshgrad (t[0]) and MPI (t[1]). */
static int time_op(mg_comm *c, bench_op op, int64_t n, int iters, double t[2]) {
    float *big = calloc((size_t)n, sizeof(float)),
          *small = calloc((size_t)(n / c->size + 1), sizeof(float));
    double *times = malloc((size_t)(2 * iters) * sizeof(double));
    int *counts = malloc((size_t)c->size * sizeof(int));
    if (!big || !small || !times || !counts) {
        free(big), free(small), free(times), free(counts);
        return mg_error(MG_ENOMEM, "bench comm: out of memory for %lld floats", (long long)n);
    }
    for (int r = 0; r < c->size; r++) counts[r] = (int)(n / c->size);
    int rc = MG_OK;
    for (int it = -WARMUP; it < iters && rc == MG_OK; it++)
        for (int j = 0; j < 2 && rc == MG_OK; j++) {
            int raw = (it & 1) ? 1 - j : j; /* alternate which goes first */
            if ((rc = mg_comm_barrier(c)) != MG_OK) break;
            double t0 = mg_clock();
            rc = run_op(c, op, raw, big, small, counts, n);
            double dt = mg_clock() - t0;
            if (it >= 0) times[raw * iters + it] = dt;
        }
    if (rc == MG_OK) {
        for (int o = 0; rc == MG_OK && o < 2 * iters; o += 64) /* the slowest rank's */
            rc = mg_comm_all_reduce_f64(c, times + o, 2 * iters - o < 64 ? 2 * iters - o : 64,
                                        MG_CONTROL_MAX);
    }
    if (rc == MG_OK) {
        for (int raw = 0; raw < 2; raw++) {
            mg_cli_sort(times + raw * iters, iters);
            t[raw] = times[raw * iters + iters / 2];
        }
    }
    free(big), free(small), free(times), free(counts);
    return rc;
}

static void size_text(char *buf, size_t len, int64_t bytes) {
    if (bytes >= (1 << 30) && bytes % (1 << 30) == 0)
        snprintf(buf, len, "%lld GiB", (long long)(bytes >> 30));
    else if (bytes >= (1 << 20) && bytes % (1 << 20) == 0)
        snprintf(buf, len, "%lld MiB", (long long)(bytes >> 20));
    else if (bytes >= (1 << 10) && bytes % (1 << 10) == 0)
        snprintf(buf, len, "%lld KiB", (long long)(bytes >> 10));
    else snprintf(buf, len, "%lld B", (long long)bytes);
}

/* The flags into *o: 0, 1 for --help (the usage printed), or 2 (a usage error). */
static int parse(comm_opts *o, int argc, char **argv) {
    static const struct option options[] = {{"sizes", 1, 0, 's'}, {"iters", 1, 0, 'i'},
                                            {"mesh", 1, 0, 'm'},  {"help", 0, 0, 'h'},
                                            {0, 0, 0, 0}};
    *o = (comm_opts){.sizes = {1 << 20, 16 << 20}, .nsizes = 2, .iters = 20,
                     .shape = {mg_world_size()}, .ndim = 1};
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (opt) {
        case 's':
            if ((o->nsizes = parse_sizes(optarg, o->sizes)) < 0) return 2;
            break;
        case 'i': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || v < 1 || v > 1000000) {
                mg_error(MG_EINVAL, "bench comm: --iters '%s': give a count from 1 to 1000000",
                         optarg);
                return 2;
            }
            o->iters = (int)v;
            break;
        }
        case 'm':
            if ((o->ndim = mg_mesh_parse(optarg, o->shape)) < 0) return 2;
            break;
        case 'h': usage(stdout); return 1;
        default:
            usage(stderr);
            mg_error(MG_EINVAL, "bench comm: unknown option '%s'", argv[optind - 1]);
            return 2;
        }
    }
    if (optind >= argc) return 0;
    usage(stderr);
    mg_error(MG_EINVAL, "bench comm: unexpected argument '%s'", argv[optind]);
    return 2;
}

/* The largest size's buffer and its block, touched: a size the memory cannot
 * take is refused, not left for the kernel to kill. */
static int fits_memory(const comm_opts *o) {
    double most = 0;
    for (int s = 0; s < o->nsizes; s++)
        most = (double)o->sizes[s] > most ? (double)o->sizes[s] : most;
    return mg_machine_check_memory("bench comm: the largest of --sizes",
                               most * (1.0 + 1.0 / mg_world_size()), "give smaller --sizes");
}

/* The floats of a buffer of `bytes` on c, in equal blocks for gather and
 * scatter: MG_OK, or MG_EINVAL when a block would hold none or past 2^31. */
static int floats_of(const mg_comm *c, int64_t bytes, int64_t *n) {
    *n = bytes / (int64_t)sizeof(float);
    *n -= *n % c->size;
    if (*n / c->size > 0x7fffffff || *n < c->size)
        return mg_error(MG_EINVAL,
                        "bench comm: size %lld bytes does not fit %d ranks (1 float "
                        "per rank at least, 2^31 at most)",
                        (long long)bytes, c->size);
    return MG_OK;
}

/* The table's head (rank 0) and the start of the JSON object. */
static void report_head(const comm_opts *o, const char *mesh, comm_json *js) {
    int world = mg_world_size();
    if (mg_rank() == 0) {
        printf(
            "meshgrad bench comm: %d rank%s, mesh %s, %d iterations (median of the slowest rank)\n",
            world, world == 1 ? "" : "s", mesh, o->iters);
        printf("algorithm bandwidth = buffer size / time; ratio = meshgrad / raw MPI\n\n");
        printf("%-4s %-15s %10s %15s %12s %7s\n", "dim", "collective", "size", "meshgrad GB/s",
               "MPI GB/s", "ratio");
    }
    fprintf(js->f, "{\"bench\":\"comm\",\"ranks\":%d,\"mesh\":\"%s\",\"iters\":%d,\"results\":[",
            world, mesh, o->iters);
}

/* One row: collective op on n floats over the `ranks` ranks of mesh dim d,
 * t[0] and t[1] the median seconds of meshgrad's and MPI's. */
static void report_row(int d, int ranks, bench_op op, int64_t n, const double t[2], comm_json *js) {
    double bytes = (double)n * sizeof(float);
    double gm = bytes / t[0] / 1e9, gr = bytes / t[1] / 1e9, ratio = gm / gr;
    if (mg_rank() == 0) {
        char st[32];
        size_text(st, sizeof st, (int64_t)bytes);
        printf("%-4d %-15s %10s %15.2f %12.2f %7.3f\n", d, op_names[op], st, gm, gr, ratio);
        fflush(stdout);
    }
    fprintf(js->f,
            "%s{\"dim\":%d,\"ranks\":%d,\"op\":\"%s\",\"bytes\":%lld,\"meshgrad_gbps\":"
            "%.4f,"
            "\"mpi_gbps\":%.4f,\"ratio\":%.4f}",
            js->rows++ ? "," : "", d, ranks, op_names[op], (long long)bytes, gm, gr, ratio);
}

/* Every collective at every size on each mesh dim of more than one rank (the
 * one dim of a single rank too), a row each as it is measured. */
static int run(const mg_mesh *mesh, const comm_opts *o, comm_json *js) {
    int rc = MG_OK;
    for (int d = 0; d < mesh->ndim && rc == MG_OK; d++) {
        mg_comm *c = mesh->dim_comm[d];
        if (c->size < 2 && mesh->size > 1) continue;
        for (int s = 0; s < o->nsizes && rc == MG_OK; s++) {
            int64_t n;
            rc = floats_of(c, o->sizes[s], &n);
            for (int op = 0; op < OP_COUNT && rc == MG_OK; op++) {
                double t[2] = {0, 0};
                rc = time_op(c, (bench_op)op, n, o->iters, t);
                if (rc == MG_OK) report_row(d, c->size, (bench_op)op, n, t, js);
            }
        }
    }
    return rc;
}

int mg_cli_bench_comm(int argc, char **argv) {
    comm_opts o;
    int code = parse(&o, argc, argv);
    if (code) return code == 1 ? 0 : code;
    mg_mesh *mesh = mg_mesh_new(o.ndim, o.shape);
    if (!mesh) return 1;
    if (fits_memory(&o) != MG_OK) {
        mg_mesh_free(mesh);
        return 1;
    }
    char ms[64];
    mg_mesh_format(ms, sizeof ms, mesh);
    comm_json js = {0};
    js.f = open_memstream(&js.text, &js.len);
    report_head(&o, ms, &js);
    int rc = run(mesh, &o, &js);
    fprintf(js.f, "]}");
    fclose(js.f);
    if (rc == MG_OK && mg_rank() == 0) printf("%s\n", js.text);
    free(js.text);
    mg_mesh_free(mesh);
    return rc == MG_OK ? 0 : 1;
}
