/* bench_util.h: what the benchmarks of `meshgrad bench` share, below all of
 * them (bench_util.c): reading their flags, the device and the GEMM math, the
 * mesh and plan of a step, the timings of the measured steps, medians and the
 * peak RSS.
 * Exports: MG_CLI_COUNT, MG_CLI_DEVICE, MG_CLI_DTYPE, mg_cli_sort, mg_cli_median,
 * mg_cli_peak_rss_mb, mg_cli_parse_count, mg_cli_parse_positive,
 * mg_cli_parse_device, mg_cli_parse_dtype, mg_cli_use_device, mg_cli_gemm_math,
 * mg_cli_bench_usage, mg_cli_bench_bad_value, mg_cli_bench_flags_end,
 * mg_cli_bench_mesh_new, mg_cli_step_flags, MG_CLI_STEP_OPTIONS,
 * mg_cli_step_flags_init, mg_cli_step_flag, mg_cli_step_start, MG_CLI_WARMUP,
 * mg_cli_bench_steps. */
#ifndef MG_CLI_BENCH_UTIL_H
#define MG_CLI_BENCH_UTIL_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

#include "dist/mesh.h"
#include "nn/plan.h"

/* What a flag takes, for the message of a value that is not that. */
#define MG_CLI_COUNT "a count from 1 to 2147483647"
#define MG_CLI_DEVICE "cpu or cuda"
#define MG_CLI_DTYPE "fp32 or bf16"

/* v[0..n) in ascending order; the median of v (sorts v). */
void mg_cli_sort(double *v, int n);
double mg_cli_median(double *v, int n);
/* The largest peak RSS of the ranks of `world` in MB (collective). */
double mg_cli_peak_rss_mb(mg_comm *world);

/* A flag's value into *out: 0, or -1 when s is not one. A count from 1 to
 * 2^31 - 1; a finite number > 0 (--lr); --device cpu|cuda; --dtype fp32|bf16
 * (*bf16: 1 for bf16 GEMM inputs). */
int mg_cli_parse_count(const char *s, int64_t *out);
int mg_cli_parse_positive(const char *s, double *out);
int mg_cli_parse_device(const char *s, int *device);
int mg_cli_parse_dtype(const char *s, int *bf16);
/* The device, the GEMM math and the deterministic mode (det) before any mesh:
 * 0, or 1 with the error set. */
int mg_cli_use_device(int device, int tf32, int bf16, int det);
/* "fp32", "tf32" or "bf16": the math the GEMMs use on `device`. */
const char *mg_cli_gemm_math(int device);

/* "usage: meshgrad bench USAGE" on out (rank 0). */
void mg_cli_bench_usage(FILE *out, const char *usage);
/* The error for a value of opts[idx] (optarg) that is not what `takes` says:
 * MG_EINVAL with "CMD: --NAME 'VALUE' is not TAKES". */
int mg_cli_bench_bad_value(const char *cmd, const struct option *opts, int idx, const char *takes);
/* The end of a benchmark's getopt loop, rc being MG_OK or a flag's error: 0
 * when rc is MG_OK and no argument is left over; else the usage on stderr
 * (rank 0) and 2, the error set. */
int mg_cli_bench_flags_end(int rc, const char *cmd, int argc, char **argv, const char *usage);

/* The mesh of mesh_text ("" = one dim of every rank) and the plan of
 * plan_text, checked for a batch of `batch` rows: 0, or the exit code with the
 * error set: 2 for a mesh or plan that is not one or a plan that does not fit
 * the mesh, 1 when the mesh cannot be made. */
int mg_cli_bench_mesh_new(const char *mesh_text, const char *plan_text, int64_t batch,
                          mg_mesh **mesh, mg_plan *plan);

/* The flags of the step benchmarks of one model (the MLP's, bench_step.c;
 * the language models', bench_gpt.c): where the step runs and how long. */
typedef struct {
    int64_t batch, steps, threads; /* threads 0: the default */
    char mesh[64], plan[64];       /* mesh "": one dim of every rank */
    double lr;
    int device, tf32, bf16; /* --device cpu|cuda, --tf32, --dtype bf16 */
    int det;                /* --deterministic */
} mg_cli_step_flags;
/* Their entries of a getopt_long table, the letters b s t m p r d f y D. */
#define MG_CLI_STEP_OPTIONS                                                                     \
    {"batch", 1, 0, 'b'}, {"steps", 1, 0, 's'}, {"threads", 1, 0, 't'}, {"mesh", 1, 0, 'm'},   \
        {"parallel", 1, 0, 'p'}, {"lr", 1, 0, 'r'}, {"device", 1, 0, 'd'}, {"tf32", 0, 0, 'f'}, \
        {"dtype", 1, 0, 'y'}, {"deterministic", 0, 0, 'D'}
/* The defaults: a batch of `batch` rows, 10 steps, dp on the CPU, lr 1e-3. */
void mg_cli_step_flags_init(mg_cli_step_flags *f, int64_t batch);
/* getopt_long's `c` (its value optarg) into *f: 1 when it is one of those
 * flags, with *bad what its value should be when it is not that (else NULL);
 * 0 for another flag. */
int mg_cli_step_flag(int c, mg_cli_step_flags *f, const char **bad);
/* The threads, the device and the GEMM math, then the mesh and plan (checked
 * for the batch) of *f: 0, or the exit code of mg_cli_use_device (1) or
 * mg_cli_bench_mesh_new, the error set. */
int mg_cli_step_start(const mg_cli_step_flags *f, mg_mesh **mesh, mg_plan *plan);

#define MG_CLI_WARMUP 2 /* a step benchmark's steps before the measured ones */

/* A step benchmark's steps: step(ctx, s, parts) runs step s, from
 * -MG_CLI_WARMUP (below 0 the warm-up) to steps - 1, and gives its seconds in
 * parts[]: the whole step, its forward, backward and optimizer (0, or 1 on
 * failure). Collective over world: per step the slowest rank's parts; ms[]
 * the median of each over the measured steps, in milliseconds. 0, or 1 on
 * failure (the error set). */
int mg_cli_bench_steps(mg_comm *world, int64_t steps,
                       int (*step)(void *ctx, int64_t s, double parts[4]), void *ctx,
                       double ms[4]);

#endif
