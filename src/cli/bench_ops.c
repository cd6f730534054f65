/* bench_ops.c: compute benchmarks of `meshgrad bench`, each printing a table for
 * people and, as its last line, one JSON object for programs.
 *   linear  mg_linear forward + backward GFLOP/s next to raw cblas_sgemm on the
 *           same three GEMMs (y = x w^T, dx = dy w, dw = dy^T x); with
 *           --device cuda, on the GPU next to raw cuBLAS (--tf32: TF32 math).
 *           --dtype bf16: bf16 GEMM inputs (backend.h); the raw GEMMs are then
 *           the backend's, which round the fp32 inputs first, as mg_linear does.
 *           --det: each of the three GEMMs alone, the deterministic kernel
 *           (cpu_gemm_det.c) next to cblas_sgemm, on the host.
 *   ops     per-op dispatch overhead on tiny tensors (microseconds per op), next
 *           to a 8-byte control all-reduce on the same ranks; then the
 *           network kernels against their references (bench_nn.c).
 * The training step's benchmarks are bench_step.c's, bench_gpt.c's and
 * bench_pp.c's.
 * Exports mg_cli_bench_linear, mg_cli_bench_ops (cli.h). */
#include <cblas.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_kernels.h"
#include "backend/device.h"
#include "cli/bench_util.h"
#include "cli/cli.h"
#include "context.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "status.h"

#define WARMUP 2 /* rounds before the timed ones */

/* ---- linear ------------------------------------------------------------------ */

static const char linear_usage[] = "linear [--m M] [--k K] [--n N] [--iters I] [--threads T] "
                                   "[--device cpu|cuda] [--tf32] [--dtype fp32|bf16] [--det]";

typedef struct {
    int64_t m, k, n, iters, threads;
    int device, tf32, bf16, det;
} linear_opts;

/* What the rounds use: x (m, k) and w (n, k), whole and placed; the raw
 * GEMMs' outputs y, dx, dw on the host; the seconds of each timed round. */
typedef struct {
    mg_mesh *mesh;
    mg_tensor *xf, *wf;
    mg_dtensor *x, *w;
    float *y, *dx, *dw;
    double *t_mg, *t_raw;
} linear_job;

/* The flags into *o: 0, 1 for --help (the usage printed), or 2 (a usage error). */
static int linear_parse(linear_opts *o, int argc, char **argv) {
    static const struct option opts[] = {{"m", 1, 0, 'm'},     {"k", 1, 0, 'k'},
                                         {"n", 1, 0, 'n'},     {"iters", 1, 0, 'i'},
                                         {"threads", 1, 0, 't'}, {"help", 0, 0, 'h'},
                                         {"device", 1, 0, 'd'}, {"tf32", 0, 0, 'f'},
                                         {"dtype", 1, 0, 'y'}, {"det", 0, 0, 'D'},
                                         {0, 0, 0, 0}};
    const char *cmd = "bench linear";
    *o = (linear_opts){.m = 256, .k = 1024, .n = 4096, .iters = 10, .device = MG_DEVICE_CPU};
    int c, idx = 0, rc = MG_OK;
    opterr = 0;
    while (rc == MG_OK && (c = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        int64_t *count = c == 'm' ? &o->m : c == 'k' ? &o->k : c == 'n' ? &o->n
                       : c == 'i' ? &o->iters : c == 't' ? &o->threads : NULL;
        const char *bad = NULL; /* what the flag takes, when its value is not that */
        if (count) bad = mg_cli_parse_count(optarg, count) ? MG_CLI_COUNT : NULL;
        else if (c == 'd') bad = mg_cli_parse_device(optarg, &o->device) ? MG_CLI_DEVICE : NULL;
        else if (c == 'y') bad = mg_cli_parse_dtype(optarg, &o->bf16) ? MG_CLI_DTYPE : NULL;
        else if (c == 'f') o->tf32 = 1;
        else if (c == 'D') o->det = 1;
        else if (c == 'h') {
            mg_cli_bench_usage(stdout, linear_usage);
            return 1;
        } else rc = mg_cli_bad_flag(cmd, argv);
        if (bad) rc = mg_cli_bench_bad_value(cmd, opts, idx, bad);
    }
    return mg_cli_bench_flags_end(rc, cmd, argc, argv, linear_usage);
}

static void linear_free(linear_job *j) {
    free(j->y), free(j->dx), free(j->dw), free(j->t_mg), free(j->t_raw);
    mg_dtensor_free(j->x), mg_dtensor_free(j->w), mg_tensor_free(j->xf), mg_tensor_free(j->wf);
    mg_mesh_free(j->mesh);
}

/* The device, x and w (every rank holds both whole), the raw GEMMs' outputs:
 * 0, or 1 on failure (what was made freed). */
static int linear_setup(linear_job *j, const linear_opts *o) {
    int64_t m = o->m, k = o->k, n = o->n;
    if (o->threads) mg_backend_cpu_set_threads((int)o->threads);
    if (mg_cli_use_device(o->device, o->tf32, o->bf16, 0)) return 1;
    /* x, w, y and the gradients of x and w, every one touched */
    double floats = 2.0 * (double)m * (double)k + 2.0 * (double)n * (double)k + (double)m * (double)n;
    char what[160];
    snprintf(what, sizeof what, "bench linear: m=%lld k=%lld n=%lld", (long long)m, (long long)k,
             (long long)n);
    if (mg_machine_check_memory(what, 4.0 * floats, "give smaller --m, --k or --n") != MG_OK) return 1;
    int world = mg_world_size();
    if (!(j->mesh = mg_mesh_new(1, &world))) return 1;
    j->xf = mg_tensor_new(2, (int64_t[]){m, k}), j->wf = mg_tensor_new(2, (int64_t[]){n, k});
    j->y = malloc(sizeof(float) * (size_t)m * (size_t)n);
    j->dx = malloc(sizeof(float) * (size_t)m * (size_t)k);
    j->dw = malloc(sizeof(float) * (size_t)n * (size_t)k);
    j->t_mg = calloc((size_t)o->iters, sizeof(double)), j->t_raw = calloc((size_t)o->iters, sizeof(double));
    if (!j->xf || !j->wf || !j->y || !j->dx || !j->dw || !j->t_mg || !j->t_raw) {
        mg_error(MG_ENOMEM, "bench linear: out of memory for m=%lld k=%lld n=%lld (%lld iters): "
                 "give smaller --m, --k, --n or --iters", (long long)m, (long long)k, (long long)n,
                 (long long)o->iters);
        linear_free(j);
        return 1;
    }
    for (int64_t i = 0; i < m * k; i++) mg_tensor_data(j->xf)[i] = (float)((i * 7) % 13) / 13.0f;
    for (int64_t i = 0; i < n * k; i++) mg_tensor_data(j->wf)[i] = (float)((i * 5) % 11) / 11.0f;
    mg_placement r = MG_REPLICATE;
    j->x = mg_distribute(j->mesh, j->xf, &r, 1), j->w = mg_distribute(j->mesh, j->wf, &r, 1);
    mg_set_requires_grad(j->x, 1);
    mg_set_requires_grad(j->w, 1);
    return 0;
}

/* mg_linear forward and backward, each round timed to j->t_mg: 0, or 1. */
static int time_mg(linear_job *j, const linear_opts *o) {
    for (int64_t it = -WARMUP; it < o->iters; it++) {
        double t0 = mg_clock();
        mg_dtensor *y = mg_linear(j->x, j->w, NULL);
        mg_dtensor *loss = mg_sum(y);
        if (!loss || mg_backward(loss) != MG_OK || mg_device_synchronize() != MG_OK) return 1;
        double t1 = mg_clock();
        mg_step_end();
        mg_zero_grad(j->x);
        mg_zero_grad(j->w);
        if (it >= 0) j->t_mg[it] = t1 - t0;
    }
    return 0;
}

/* The three GEMMs of mg_linear on the same shapes, y = x w^T, dx = dy w,
 * dw = dy^T x (dy = y), into out[0..3): through the backend `be`, or cblas
 * when be is NULL. 0, or 1. */
static int raw_gemms(mg_backend *be, const linear_opts *o, const float *X, const float *W,
                     float *out[3]) {
    int64_t m = o->m, k = o->k, n = o->n;
    if (!be) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1, X, k, W, k, 0, out[0], n);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, k, n, 1, out[0], n, W, k, 0, out[1], k);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, k, m, 1, out[0], n, X, k, 0, out[2], k);
        return 0;
    }
    const struct mg_backend_iface *f = be->iface;
    f->gemm(be->context, false, true, m, n, k, 1, X, k, W, k, 0, out[0], n);
    f->gemm(be->context, false, false, m, k, n, 1, out[0], n, W, k, 0, out[1], k);
    f->gemm(be->context, true, false, n, k, m, 1, out[0], n, X, k, 0, out[2], k);
    return mg_device_synchronize() != MG_OK;
}

/* The raw GEMMs, each round timed to j->t_raw: cblas on the host, the
 * backend's for bf16, cuBLAS on the GPU (into buffers there). 0, or 1. */
static int time_raw(linear_job *j, const linear_opts *o) {
    int64_t m = o->m, k = o->k, n = o->n;
    const float *X = mg_tensor_data(j->xf), *W = mg_tensor_data(j->wf);
    mg_backend *gpu = o->device == MG_DEVICE_CUDA ? mg_backend_cuda() : NULL;
    mg_backend *be = gpu ? gpu : o->bf16 ? mg_backend_cpu() : NULL;
    float *out[3] = {j->y, j->dx, j->dw};
    if (gpu) {
        X = mg_local(j->x)->data;
        W = mg_local(j->w)->data;
        out[0] = gpu->iface->alloc(gpu->context, sizeof(float) * m * n);
        out[1] = gpu->iface->alloc(gpu->context, sizeof(float) * m * k);
        out[2] = gpu->iface->alloc(gpu->context, sizeof(float) * n * k);
        if (!out[0] || !out[1] || !out[2]) return 1;
    }
    for (int64_t it = -WARMUP; it < o->iters; it++) {
        double t0 = mg_clock();
        if (raw_gemms(be, o, X, W, out)) return 1;
        if (it >= 0) j->t_raw[it] = mg_clock() - t0;
    }
    for (int i = 0; gpu && i < 3; i++) gpu->iface->free(gpu->context, out[i]);
    return 0;
}

/* The table and the JSON line (rank 0) of the median seconds of a round. */
static void linear_report(const linear_opts *o, double mg_s, double raw_s) {
    if (mg_rank() != 0) return;
    int gpu = o->device == MG_DEVICE_CUDA;
    const char *math = mg_cli_gemm_math(o->device);
    const char *raw = gpu ? (o->bf16                 ? "raw cuBLAS (bf16) x3"
                             : mg_backend_cuda_tf32() ? "raw cuBLAS (tf32) x3"
                                                      : "raw cublasSgemm x3")
                          : o->bf16 ? "raw sgemm (bf16 in) x3" : "raw cblas_sgemm x3";
    double flops = 3 * 2.0 * (double)o->m * (double)o->k * (double)o->n;
    double mg_gf = flops / mg_s * 1e-9, raw_gf = flops / raw_s * 1e-9;
    printf("linear fwd+bwd  m=%lld k=%lld n=%lld  threads=%d  device=%s  math=%s  openblas=%s  "
           "(median of %lld)\n", (long long)o->m, (long long)o->k, (long long)o->n,
           mg_backend_cpu_threads(), gpu ? "cuda" : "cpu", math, mg_blas_core(),
           (long long)o->iters);
    printf("  %-22s %10s %10s\n", "", "ms", "GFLOP/s");
    printf("  %-22s %10.2f %10.1f\n", "meshgrad mg_linear", mg_s * 1e3, mg_gf);
    printf("  %-22s %10.2f %10.1f\n", raw, raw_s * 1e3, raw_gf);
    printf("  ratio meshgrad / %s: %.3f\n", gpu ? "cuBLAS" : "cblas", mg_gf / raw_gf);
    printf("{\"bench\":\"linear\",\"m\":%lld,\"k\":%lld,\"n\":%lld,\"threads\":%d,"
           "\"mg_gflops\":%.2f,\"blas_gflops\":%.2f,\"ratio\":%.4f,\"device\":\"%s\","
           "\"tf32\":%d,\"math\":\"%s\",\"openblas\":\"%s\"}\n",
           (long long)o->m, (long long)o->k, (long long)o->n, mg_backend_cpu_threads(), mg_gf,
           raw_gf, mg_gf / raw_gf, gpu ? "cuda" : "cpu", gpu ? mg_backend_cuda_tf32() : 0, math,
           mg_blas_core());
}

/* ---- linear --det: the deterministic GEMM beside sgemm ------------------------------ */

/* Median seconds of o->iters rounds of one GEMM, the deterministic kernel's
 * (det) or sgemm's, after WARMUP rounds; t holds o->iters doubles. */
static double time_gemm(int det, const linear_opts *o, double *t, bool ta, bool tb, int64_t m,
                        int64_t n, int64_t k, const float *a, const float *b, float *c) {
    int64_t lda = ta ? m : k, ldb = tb ? k : n;
    for (int64_t it = -WARMUP; it < o->iters; it++) {
        double t0 = mg_clock();
        if (det) mg_cpu_gemm_det(ta, tb, m, n, k, 1, a, lda, b, ldb, 0, c, n);
        else
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                        m, n, k, 1, a, lda, b, ldb, 0, c, n);
        if (it >= 0) t[it] = mg_clock() - t0;
    }
    return mg_cli_median(t, (int)o->iters);
}

/* The Linear's GEMMs, y = x w^T (NT), dx = dy w (NN), dw = dy^T x (TN), each
 * timed alone through mg_cpu_gemm_det and cblas_sgemm (rank 0 prints). */
static int linear_det(const linear_opts *o) {
    int64_t m = o->m, k = o->k, n = o->n;
    if (o->device != MG_DEVICE_CPU || o->bf16 || o->tf32) {
        mg_error(MG_EINVAL, "bench linear: --det times the fp32 CPU kernel: it takes no "
                 "--device cuda, --tf32 or --dtype bf16");
        return 2;
    }
    if (o->threads) mg_backend_cpu_set_threads((int)o->threads);
    size_t big = (size_t)(m > n ? m : n) * (size_t)(k > n ? k : n);
    float *x = malloc(sizeof(float) * m * k), *w = malloc(sizeof(float) * n * k);
    float *dy = malloc(sizeof(float) * m * n), *out = malloc(sizeof(float) * big);
    double *t = malloc(sizeof(double) * (size_t)o->iters);
    if (!x || !w || !dy || !out || !t) {
        free(x), free(w), free(dy), free(out), free(t);
        mg_error(MG_ENOMEM, "bench linear: out of memory for m=%lld k=%lld n=%lld",
                 (long long)m, (long long)k, (long long)n);
        return 1;
    }
    for (int64_t i = 0; i < m * k; i++) x[i] = (float)((i * 7) % 13) / 13.0f;
    for (int64_t i = 0; i < n * k; i++) w[i] = (float)((i * 5) % 11) / 11.0f;
    for (int64_t i = 0; i < m * n; i++) dy[i] = (float)((i * 3) % 7) / 7.0f;
    struct {
        const char *name;
        bool ta, tb;
        int64_t m, n, k;
        const float *a, *b;
    } g[3] = {{"y = x w^T", false, true, m, n, k, x, w},
              {"dx = dy w", false, false, m, k, n, dy, w},
              {"dw = dy^T x", true, false, n, k, m, dy, x}};
    double det_gf[3], blas_gf[3];
    for (int i = 0; i < 3; i++) {
        double flops = 2.0 * (double)g[i].m * (double)g[i].n * (double)g[i].k;
        det_gf[i] = flops / time_gemm(1, o, t, g[i].ta, g[i].tb, g[i].m, g[i].n, g[i].k, g[i].a,
                                      g[i].b, out) * 1e-9;
        blas_gf[i] = flops / time_gemm(0, o, t, g[i].ta, g[i].tb, g[i].m, g[i].n, g[i].k, g[i].a,
                                       g[i].b, out) * 1e-9;
    }
    if (mg_rank() == 0) {
        printf("linear GEMMs, deterministic kernel vs cblas_sgemm  m=%lld k=%lld n=%lld  "
               "threads=%d  openblas=%s  (median of %lld)\n", (long long)m, (long long)k,
               (long long)n, mg_backend_cpu_threads(), mg_blas_core(), (long long)o->iters);
        printf("  %-12s %-4s %6s %6s %6s %10s %10s %7s\n", "", "op", "M", "N", "K", "det GF/s",
               "sgemm GF/s", "ratio");
        for (int i = 0; i < 3; i++)
            printf("  %-12s %c%c   %6lld %6lld %6lld %10.1f %10.1f %7.3f\n", g[i].name,
                   g[i].ta ? 'T' : 'N', g[i].tb ? 'T' : 'N', (long long)g[i].m, (long long)g[i].n,
                   (long long)g[i].k, det_gf[i], blas_gf[i], det_gf[i] / blas_gf[i]);
        printf("{\"bench\":\"linear_det\",\"m\":%lld,\"k\":%lld,\"n\":%lld,\"threads\":%d,"
               "\"det_gflops\":[%.2f,%.2f,%.2f],\"blas_gflops\":[%.2f,%.2f,%.2f],"
               "\"openblas\":\"%s\"}\n", (long long)m, (long long)k, (long long)n,
               mg_backend_cpu_threads(), det_gf[0], det_gf[1], det_gf[2], blas_gf[0], blas_gf[1],
               blas_gf[2], mg_blas_core());
    }
    free(x), free(w), free(dy), free(out), free(t);
    return 0;
}

int mg_cli_bench_linear(int argc, char **argv) {
    linear_opts o;
    int code = linear_parse(&o, argc, argv);
    if (code) return code == 1 ? 0 : code;
    if (o.det) return linear_det(&o);
    linear_job j = {0};
    if (linear_setup(&j, &o)) return 1;
    /* a failed round leaves what it made: freeing a tensor that its graph
     * still holds would put another error in place of the round's */
    if (time_mg(&j, &o) || time_raw(&j, &o)) return 1;
    linear_report(&o, mg_cli_median(j.t_mg, (int)o.iters), mg_cli_median(j.t_raw, (int)o.iters));
    linear_free(&j);
    return 0;
}

/* ---- ops: dispatch overhead ---------------------------------------------------- */

static const char ops_usage[] = "ops [--iters N]";

/* Microseconds per op: mg_add unrecorded and recorded, a recorded
 * mg_linear; and per 8-byte control all-reduce. */
enum { OPS_ROWS = 3 };
typedef struct {
    double us[OPS_ROWS], mpi_us;
} ops_result;

static const char *const ops_rows[OPS_ROWS] = {"mg_add (4x4), no grad", "mg_add (4x4), recorded",
                                               "mg_linear (4x4), recorded"};

/* --iters into *iters: 0, 1 for --help (the usage printed), or 2 (a usage error). */
static int ops_parse(int argc, char **argv, int64_t *iters) {
    static const struct option opts[] = {{"iters", 1, 0, 'i'}, {0, 0, 0, 0}};
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        mg_cli_bench_usage(stdout, ops_usage);
        return 1;
    }
    int c, idx = 0, rc = MG_OK;
    opterr = 0;
    while (rc == MG_OK && (c = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        if (c != 'i') rc = mg_cli_bad_flag("bench ops", argv);
        else if (mg_cli_parse_count(optarg, iters))
            rc = mg_cli_bench_bad_value("bench ops", opts, idx, MG_CLI_COUNT);
    }
    return mg_cli_bench_flags_end(rc, "bench ops", argc, argv, ops_usage);
}

/* `iters` ops of each row on 4x4 tensors, and a tenth as many all-reduces:
 * 0, or 1 on failure. */
static int time_ops(mg_mesh *mesh, int64_t iters, ops_result *r) {
    mg_placement rep = MG_REPLICATE;
    mg_tensor *t = mg_tensor_new(2, (int64_t[]){4, 4});
    mg_dtensor *a = mg_distribute(mesh, t, &rep, 1), *w = mg_distribute(mesh, t, &rep, 1);
    mg_tensor_free(t);
    mg_set_requires_grad(w, 1);
    for (int mode = 0; mode < OPS_ROWS; mode++) {
        int was = mg_set_grad_enabled(mode != 0);
        double t0 = mg_clock();
        for (int64_t i = 0; i < iters; i++) {
            mg_dtensor *y = mode == 2 ? mg_linear(a, w, NULL) : mg_add(a, w);
            if (!y) return 1;
            if ((i & 255) == 255) mg_step_end();
        }
        r->us[mode] = (mg_clock() - t0) / iters * 1e6;
        mg_step_end();
        mg_set_grad_enabled(was);
    }
    double v = 1, t0 = mg_clock();
    for (int64_t i = 0; i < iters / 10; i++) mg_comm_all_reduce_f64(mesh->world, &v, 1, MG_CONTROL_SUM);
    r->mpi_us = (mg_clock() - t0) / (iters / 10) * 1e6;
    mg_dtensor_free(a), mg_dtensor_free(w);
    return 0;
}

int mg_cli_bench_ops(int argc, char **argv) {
    int64_t iters = 20000;
    int code = ops_parse(argc, argv, &iters);
    if (code) return code == 1 ? 0 : code;
    int world = mg_world_size();
    mg_mesh *mesh = mg_mesh_new(1, &world);
    ops_result r;
    if (!mesh || time_ops(mesh, iters, &r)) return 1;
    if (mg_rank() == 0) {
        printf("per-op dispatch overhead on tiny tensors (%d rank(s), %lld ops each)\n", world,
               (long long)iters);
        for (int i = 0; i < OPS_ROWS; i++) printf("  %-28s %8.2f us/op\n", ops_rows[i], r.us[i]);
        printf("  %-28s %8.2f us\n", "all-reduce of 8 bytes", r.mpi_us);
    }
    char kernels[512] = "";
    if (mg_cli_bench_nn(kernels, sizeof kernels) != MG_OK) return 1;
    if (mg_rank() == 0)
        printf("{\"bench\":\"ops\",\"ranks\":%d,\"add_us\":%.3f,\"add_recorded_us\":%.3f,"
               "\"linear_recorded_us\":%.3f,\"mpi_allreduce_us\":%.3f%s}\n",
               world, r.us[0], r.us[1], r.us[2], r.mpi_us, kernels);
    mg_mesh_free(mesh);
    return 0;
}
