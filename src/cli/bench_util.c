/* bench_util.c: what the benchmarks of `meshgrad bench` share: flags, device,
 * mesh and plan, step timings, medians, peak RSS. Exports the functions of
 * bench_util.h. */
#include "cli/bench_util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "backend/backend.h"
#include "backend/device.h"
#include "cli/cli.h"
#include "status.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void mg_cli_sort(double *v, int n) { qsort(v, (size_t)n, sizeof *v, cmp_double); }

double mg_cli_median(double *v, int n) {
    mg_cli_sort(v, n);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mg_cli_peak_rss_mb(mg_comm *world) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double all = ru.ru_maxrss / 1024.0;
    mg_comm_all_reduce_f64(world, &all, 1, MG_CONTROL_MAX);
    return all;
}

int mg_cli_parse_count(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    /* sizes meet in products (m x k, batch x width) and int code: at most 2^31 - 1 */
    if (!isdigit((unsigned char)*s) || *end != '\0' || errno == ERANGE || v <= 0 || v > INT32_MAX)
        return -1;
    *out = v;
    return 0;
}

int mg_cli_parse_positive(const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (!*s || isspace((unsigned char)*s) || *end != '\0' || !(v > 0) || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

int mg_cli_parse_device(const char *s, int *device) {
    if (strcmp(s, "cpu") == 0) *device = MG_DEVICE_CPU;
    else if (strcmp(s, "cuda") == 0) *device = MG_DEVICE_CUDA;
    else return -1;
    return 0;
}

int mg_cli_parse_dtype(const char *s, int *bf16) {
    if (strcmp(s, "fp32") == 0) *bf16 = 0;
    else if (strcmp(s, "bf16") == 0) *bf16 = 1;
    else return -1;
    return 0;
}

int mg_cli_use_device(int device, int tf32, int bf16, int det) {
    if (tf32) mg_backend_cuda_set_tf32(1);
    mg_backend_set_gemm_bf16(bf16);
    if (device != MG_DEVICE_CPU && mg_set_device(device) != MG_OK) return 1;
    return det && mg_set_deterministic(1) != MG_OK;
}

const char *mg_cli_gemm_math(int device) {
    if (mg_backend_gemm_bf16()) return "bf16";
    return device == MG_DEVICE_CUDA && mg_backend_cuda_tf32() ? "tf32" : "fp32";
}

void mg_cli_bench_usage(FILE *out, const char *usage) {
    if (mg_rank() == 0) fprintf(out, "usage: meshgrad bench %s\n", usage);
}

int mg_cli_bench_bad_value(const char *cmd, const struct option *opts, int idx, const char *takes) {
    return mg_error(MG_EINVAL, "%s: --%s '%s' is not %s", cmd, opts[idx].name, optarg, takes);
}

int mg_cli_bench_flags_end(int rc, const char *cmd, int argc, char **argv, const char *usage) {
    if (rc == MG_OK) rc = mg_cli_no_arguments_left(cmd, argc, argv);
    if (rc == MG_OK) return 0;
    mg_cli_bench_usage(stderr, usage);
    return 2;
}

int mg_cli_bench_mesh_new(const char *mesh_text, const char *plan_text, int64_t batch,
                          mg_mesh **mesh, mg_plan *plan) {
    int shape[MG_MAX_MESH_DIMS] = {mg_world_size()}, nd = 1;
    if (mesh_text[0] && (nd = mg_mesh_parse(mesh_text, shape)) < 0) return 2;
    if (!(*mesh = mg_mesh_new(nd, shape))) return 1;
    /* a plan that is not one, or does not fit the mesh: a usage error */
    if (mg_plan_parse(plan_text, plan) != MG_OK || mg_plan_check(plan, *mesh, batch) != MG_OK) {
        mg_mesh_free(*mesh);
        *mesh = NULL;
        return 2;
    }
    return 0;
}

void mg_cli_step_flags_init(mg_cli_step_flags *f, int64_t batch) {
    *f = (mg_cli_step_flags){.batch = batch, .steps = 10, .plan = "dp", .lr = 1e-3,
                             .device = MG_DEVICE_CPU};
}

int mg_cli_step_flag(int c, mg_cli_step_flags *f, const char **bad) {
    *bad = NULL;
    switch (c) {
    case 'b': *bad = mg_cli_parse_count(optarg, &f->batch) ? MG_CLI_COUNT : NULL; break;
    case 's': *bad = mg_cli_parse_count(optarg, &f->steps) ? MG_CLI_COUNT : NULL; break;
    case 't': *bad = mg_cli_parse_count(optarg, &f->threads) ? MG_CLI_COUNT : NULL; break;
    case 'm': snprintf(f->mesh, sizeof f->mesh, "%s", optarg); break;
    case 'p': snprintf(f->plan, sizeof f->plan, "%s", optarg); break;
    case 'r':
        *bad = mg_cli_parse_positive(optarg, &f->lr) ? "a finite number above 0" : NULL;
        break;
    case 'd': *bad = mg_cli_parse_device(optarg, &f->device) ? MG_CLI_DEVICE : NULL; break;
    case 'f': f->tf32 = 1; break;
    case 'y': *bad = mg_cli_parse_dtype(optarg, &f->bf16) ? MG_CLI_DTYPE : NULL; break;
    case 'D': f->det = 1; break;
    default: return 0;
    }
    return 1;
}

int mg_cli_step_start(const mg_cli_step_flags *f, mg_mesh **mesh, mg_plan *plan) {
    if (f->threads) mg_backend_cpu_set_threads((int)f->threads);
    if (mg_cli_use_device(f->device, f->tf32, f->bf16, f->det)) return 1;
    return mg_cli_bench_mesh_new(f->mesh, f->plan, f->batch, mesh, plan);
}

int mg_cli_bench_steps(mg_comm *world, int64_t steps,
                       int (*step)(void *ctx, int64_t s, double parts[4]), void *ctx,
                       double ms[4]) {
    double *times = calloc((size_t)(4 * steps), sizeof *times); /* part k of step s: k * steps + s */
    if (!times) {
        mg_error(MG_ENOMEM, "bench step: out of memory for the times of %lld steps",
                 (long long)steps);
        return 1;
    }
    int rc = 0;
    for (int64_t s = -MG_CLI_WARMUP; !rc && s < steps; s++) {
        double parts[4];
        rc = step(ctx, s, parts) ||
             mg_comm_all_reduce_f64(world, parts, 4, MG_CONTROL_MAX) != MG_OK;
        for (int k = 0; !rc && s >= 0 && k < 4; k++) times[k * steps + s] = parts[k];
    }
    for (int k = 0; !rc && k < 4; k++) ms[k] = mg_cli_median(times + k * steps, (int)steps) * 1e3;
    free(times);
    return rc;
}
