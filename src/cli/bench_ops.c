/* bench_ops.c: compute benchmarks of `meshgrad bench`, each printing a table for
 * people and, as its last line, one JSON object for programs.
 *   linear  mg_linear forward + backward GFLOP/s next to raw cblas_sgemm on the
 *           same three GEMMs (y = x w^T, dx = dy w, dw = dy^T x); with
 *           --device cuda, on the GPU next to raw cuBLAS (--tf32: TF32 math).
 *           --dtype bf16: bf16 GEMM inputs (backend.h); the raw GEMMs are then
 *           the backend's, which round the fp32 inputs first, as mg_linear does.
 *   step    an MLP training step (ReLU, MSE, SGD with momentum) on any mesh and plan
 *           (--model gpt: the GPT's step, bench_gpt.c): the
 *           median step time after warm-up, and of its forward, backward and
 *           optimizer parts (each the slowest rank's), GFLOP/s and the largest
 *           rank's peak RSS (--device cuda: on the GPUs, timed after the device
 *           finished each part). --trace FILE writes the timeline of the
 *           measured steps --trace-steps A:B (observe.h); --flight-dir DIR
 *           is where the flight recorder's dumps go. With pp in --parallel: bench_pp.c.
 *   ops     per-op dispatch overhead on tiny tensors (microseconds per op), next
 *           to a 8-byte control all-reduce on the same ranks; then the
 *           network kernels against their references (bench_nn.c).
 * Exports mg_cli_bench_linear, mg_cli_bench_step, mg_cli_bench_ops (cli.h). */
#include <cblas.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "arena.h"
#include "backend/backend.h"
#include "backend/device.h"
#include "cli/cli.h"
#include "cli/observe.h"
#include "context.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "nn/optim.h"
#include "nn/param.h"
#include "nn/plan.h"
#include "status.h"
#include "trace.h"

static double now(void) { return mg_cli_clock(); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double mg_cli_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mg_cli_peak_rss_mb(mg_comm *world) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double all = ru.ru_maxrss / 1024.0;
    mg_comm_all_reduce_f64(world, &all, 1, MG_CONTROL_MAX);
    return all;
}

/* After a bench's flag error (rc, its message set): the usage on stderr, exit code 2. */
static int usage_error(int rc, const char *usage) {
    (void)rc;
    if (mg_rank() == 0) fprintf(stderr, "usage: meshgrad bench %s\n", usage);
    return 2;
}

/* The error for a value of opts[idx] (optarg) that is not what `takes` says. */
static int bad_value(const char *cmd, const struct option *opts, int idx, const char *takes) {
    return mg_error(MG_EINVAL, "%s: --%s '%s' is not %s", cmd, opts[idx].name, optarg, takes);
}

#define COUNT "a count from 1 to 2147483647"
#define DEVICE "cpu or cuda"
#define DTYPE "fp32 or bf16"

int mg_cli_parse_device(const char *s, int *device) {
    if (strcmp(s, "cpu") == 0) *device = MG_DEVICE_CPU;
    else if (strcmp(s, "cuda") == 0) *device = MG_DEVICE_CUDA;
    else return -1;
    return 0;
}

/* --dtype fp32|bf16: 1 for bf16 GEMM inputs */
static int parse_dtype(const char *s, int *bf16) {
    if (strcmp(s, "fp32") == 0) *bf16 = 0;
    else if (strcmp(s, "bf16") == 0) *bf16 = 1;
    else return -1;
    return 0;
}

int mg_cli_use_device(int device, int tf32, int bf16) {
    if (tf32) mg_backend_cuda_set_tf32(1);
    mg_backend_set_gemm_bf16(bf16);
    return device != MG_DEVICE_CPU && mg_set_device(device) != MG_OK;
}

const char *mg_cli_gemm_math(int device) {
    if (mg_backend_gemm_bf16()) return "bf16";
    return device == MG_DEVICE_CUDA && mg_backend_cuda_tf32() ? "tf32" : "fp32";
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

/* ---- linear ------------------------------------------------------------------ */

int mg_cli_bench_linear(int argc, char **argv) {
    const char *usage = "linear [--m M] [--k K] [--n N] [--iters I] [--threads T] "
                        "[--device cpu|cuda] [--tf32] [--dtype fp32|bf16]";
    int64_t m = 256, k = 1024, n = 4096, iters = 10, threads = 0;
    int device = MG_DEVICE_CPU, tf32 = 0, bf16 = 0;
    static const struct option opts[] = {{"m", 1, 0, 'm'},     {"k", 1, 0, 'k'},
                                         {"n", 1, 0, 'n'},     {"iters", 1, 0, 'i'},
                                         {"threads", 1, 0, 't'}, {"help", 0, 0, 'h'},
                                         {"device", 1, 0, 'd'}, {"tf32", 0, 0, 'f'},
                                         {"dtype", 1, 0, 'y'}, {0, 0, 0, 0}};
    int c, idx = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        if (c == 'h') {
            if (mg_rank() == 0) printf("usage: meshgrad bench %s\n", usage);
            return 0;
        }
        if (c == 'f') {
            tf32 = 1;
            continue;
        }
        if (c == 'd' || c == 'y') {
            if (c == 'd' ? mg_cli_parse_device(optarg, &device) : parse_dtype(optarg, &bf16))
                return usage_error(
                    bad_value("bench linear", opts, idx, c == 'd' ? DEVICE : DTYPE), usage);
            continue;
        }
        int64_t *dst = c == 'm' ? &m : c == 'k' ? &k : c == 'n' ? &n : c == 'i' ? &iters
                                                                       : c == 't' ? &threads : NULL;
        if (!dst) return usage_error(mg_cli_bad_flag("bench linear", argv), usage);
        if (mg_cli_parse_count(optarg, dst))
            return usage_error(bad_value("bench linear", opts, idx, COUNT), usage);
    }
    if (optind < argc)
        return usage_error(mg_cli_no_arguments_left("bench linear", argc, argv), usage);
    if (threads) mg_backend_cpu_set_threads((int)threads);
    if (mg_cli_use_device(device, tf32, bf16)) return 1;
    /* x, w, y and the gradients of x and w, every one touched */
    double floats = 2.0 * (double)m * (double)k + 2.0 * (double)n * (double)k + (double)m * (double)n;
    char what[160];
    snprintf(what, sizeof what, "bench linear: m=%lld k=%lld n=%lld", (long long)m, (long long)k,
             (long long)n);
    if (mg_cli_check_memory(what, 4.0 * floats, "give smaller --m, --k or --n") != MG_OK) return 1;
    int world = mg_world_size();
    mg_mesh *mesh = mg_mesh_new(1, &world);
    if (!mesh) return 1;
    mg_placement r = MG_REPLICATE;
    mg_tensor *xf = mg_tensor_new(2, (int64_t[]){m, k}), *wf = mg_tensor_new(2, (int64_t[]){n, k});
    float *Y = malloc(sizeof(float) * (size_t)m * (size_t)n), *DX = malloc(sizeof(float) * (size_t)m * (size_t)k),
          *DW = malloc(sizeof(float) * (size_t)n * (size_t)k);
    double *t_mg = calloc((size_t)iters, sizeof(double)), *t_blas = calloc((size_t)iters, sizeof(double));
    if (!xf || !wf || !Y || !DX || !DW || !t_mg || !t_blas) {
        mg_error(MG_ENOMEM, "bench linear: out of memory for m=%lld k=%lld n=%lld (%lld iters): "
                 "give smaller --m, --k, --n or --iters", (long long)m, (long long)k, (long long)n,
                 (long long)iters);
        free(Y), free(DX), free(DW), free(t_mg), free(t_blas);
        mg_tensor_free(xf), mg_tensor_free(wf), mg_mesh_free(mesh);
        return 1;
    }
    for (int64_t i = 0; i < m * k; i++) mg_tensor_data(xf)[i] = (float)((i * 7) % 13) / 13.0f;
    for (int64_t i = 0; i < n * k; i++) mg_tensor_data(wf)[i] = (float)((i * 5) % 11) / 11.0f;
    mg_dtensor *x = mg_distribute(mesh, xf, &r, 1), *w = mg_distribute(mesh, wf, &r, 1);
    mg_set_requires_grad(x, 1);
    mg_set_requires_grad(w, 1);
    double flops = 3 * 2.0 * (double)m * (double)k * (double)n;
    for (int64_t it = -2; it < iters; it++) { /* two warm-up rounds */
        double t0 = now();
        mg_dtensor *y = mg_linear(x, w, NULL);
        mg_dtensor *loss = mg_sum(y);
        if (!loss || mg_backward(loss) != MG_OK || mg_device_synchronize() != MG_OK) return 1;
        double t1 = now();
        mg_step_end();
        mg_zero_grad(x);
        mg_zero_grad(w);
        if (it >= 0) t_mg[it] = t1 - t0;
    }
    /* raw cblas on the same shapes: y = x w^T, dx = dy w, dw = dy^T x */
    float *X = mg_tensor_data(xf), *W = mg_tensor_data(wf);
    mg_backend *gpu = device == MG_DEVICE_CUDA ? mg_backend_cuda() : NULL;
    /* through the backend: cuBLAS on the GPU, and the CPU's bf16 GEMM */
    mg_backend *be = gpu ? gpu : bf16 ? mg_backend_cpu() : NULL;
    float *dev[3] = {Y, DX, DW};
    if (gpu) {
        X = mg_local(x)->data;
        W = mg_local(w)->data;
        dev[0] = gpu->iface->alloc(gpu->context, sizeof(float) * m * n);
        dev[1] = gpu->iface->alloc(gpu->context, sizeof(float) * m * k);
        dev[2] = gpu->iface->alloc(gpu->context, sizeof(float) * n * k);
        if (!dev[0] || !dev[1] || !dev[2]) return 1;
    }
    for (int64_t it = -2; it < iters; it++) {
        double t0 = now();
        if (be) {
            const struct mg_backend_iface *f = be->iface;
            f->gemm(be->context, false, true, m, n, k, 1, X, k, W, k, 0, dev[0], n);
            f->gemm(be->context, false, false, m, k, n, 1, dev[0], n, W, k, 0, dev[1], k);
            f->gemm(be->context, true, false, n, k, m, 1, dev[0], n, X, k, 0, dev[2], k);
            if (mg_device_synchronize() != MG_OK) return 1;
        } else {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1, X, k, W, k, 0, Y, n);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, k, n, 1, Y, n, W, k, 0, DX, k);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, k, m, 1, Y, n, X, k, 0, DW, k);
        }
        if (it >= 0) t_blas[it] = now() - t0;
    }
    for (int i = 0; gpu && i < 3; i++) gpu->iface->free(gpu->context, dev[i]);
    const char *math = mg_cli_gemm_math(device);
    const char *raw = gpu ? (bf16                   ? "raw cuBLAS (bf16) x3"
                             : mg_backend_cuda_tf32() ? "raw cuBLAS (tf32) x3"
                                                      : "raw cublasSgemm x3")
                          : bf16 ? "raw sgemm (bf16 in) x3" : "raw cblas_sgemm x3";
    double mg_s = mg_cli_median(t_mg, (int)iters), blas_s = mg_cli_median(t_blas, (int)iters);
    double mg_gf = flops / mg_s * 1e-9, blas_gf = flops / blas_s * 1e-9;
    if (mg_rank() == 0) {
        printf("linear fwd+bwd  m=%lld k=%lld n=%lld  threads=%d  device=%s  math=%s  openblas=%s  "
               "(median of %lld)\n", (long long)m, (long long)k, (long long)n,
               mg_backend_cpu_threads(), gpu ? "cuda" : "cpu", math, mg_blas_core(),
               (long long)iters);
        printf("  %-22s %10s %10s\n", "", "ms", "GFLOP/s");
        printf("  %-22s %10.2f %10.1f\n", "meshgrad mg_linear", mg_s * 1e3, mg_gf);
        printf("  %-22s %10.2f %10.1f\n", raw, blas_s * 1e3, blas_gf);
        printf("  ratio meshgrad / %s: %.3f\n", gpu ? "cuBLAS" : "cblas", mg_gf / blas_gf);
        printf("{\"bench\":\"linear\",\"m\":%lld,\"k\":%lld,\"n\":%lld,\"threads\":%d,"
               "\"mg_gflops\":%.2f,\"blas_gflops\":%.2f,\"ratio\":%.4f,\"device\":\"%s\","
               "\"tf32\":%d,\"math\":\"%s\",\"openblas\":\"%s\"}\n",
               (long long)m, (long long)k, (long long)n, mg_backend_cpu_threads(), mg_gf, blas_gf,
               mg_gf / blas_gf, gpu ? "cuda" : "cpu", gpu ? mg_backend_cuda_tf32() : 0, math,
               mg_blas_core());
    }
    free(Y), free(DX), free(DW), free(t_mg), free(t_blas);
    mg_dtensor_free(x), mg_dtensor_free(w), mg_tensor_free(xf), mg_tensor_free(wf);
    mg_mesh_free(mesh);
    return 0;
}

/* ---- step -------------------------------------------------------------------- */

#define MAX_WIDTHS 32 /* --layers: up to 31 linear layers */

static int parse_layers(const char *s, int64_t *out, int max) {
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (n == max || mg_cli_parse_count(tok, &out[n])) return -1;
        n++;
    }
    return n >= 2 ? n : -1;
}

/* --parallel names pp: the pipeline's benchmark (bench_pp.c) takes the flags. */
static int wants_pipeline(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *v = strncmp(argv[i], "--parallel=", 11) == 0 ? argv[i] + 11
                        : strcmp(argv[i], "--parallel") == 0 && i + 1 < argc ? argv[i + 1]
                                                                           : NULL;
        mg_plan plan;
        if (v && mg_plan_parse(v, &plan) == MG_OK && mg_plan_pp_dim(&plan) >= 0) return 1;
    }
    return 0;
}

/* The MLP's step is refused before anything is made when what it must hold
 * at once cannot fit this machine's memory, counted low (the need is never
 * over-stated): every rank builds the whole (batch, w0) input and (batch, wN)
 * target before sharding them, beside its share of the parameters with their
 * gradients and momentum; later each layer keeps its output, shared at best
 * by all the ranks. (--batch 3000000 made 24 GB of inputs a rank, and the
 * kernel killed the job.) */
static int step_fits(const int64_t *w, int nl, int64_t batch) {
    int world = mg_world_size();
    double params = 0, outputs = 0, ends = (double)w[0] + (double)w[nl - 1];
    for (int i = 0; i + 1 < nl; i++) {
        params += (double)w[i + 1] * ((double)w[i] + 1);
        outputs += (double)w[i + 1];
    }
    double state = 3 * params / world, whole = (double)batch * ends + state,
           kept = (double)batch * (ends + outputs) / world + state;
    char what[96];
    snprintf(what, sizeof what, "bench step: a step of batch %lld", (long long)batch);
    return mg_cli_check_memory(what, 4.0 * (whole > kept ? whole : kept),
                               "use a smaller --batch or --layers (the step holds its whole input "
                               "and target, its layers' outputs, the parameters with their "
                               "gradients and momentum)");
}

int mg_cli_bench_step(int argc, char **argv) {
    const char *usage = "step [--batch B] [--layers 1024,4096,1024] [--steps S] [--threads T] "
                        "[--mesh M] [--parallel P] [--lr LR] [--device cpu|cuda] [--tf32] "
                        "[--dtype fp32|bf16] [--trace FILE] [--trace-steps A:B] [--flight-dir DIR]\n"
                        "       the GPT's step: meshgrad bench step --model gpt --help; a pipeline "
                        "(pp in --parallel): meshgrad bench step --parallel pp --help";
    for (int i = 1; i < argc; i++) { /* the GPT's step, with pp or not: bench_gpt.c */
        const char *v = strncmp(argv[i], "--model=", 8) == 0 ? argv[i] + 8
                        : strcmp(argv[i], "--model") == 0 && i + 1 < argc ? argv[i + 1]
                                                                          : NULL;
        if (!v) continue;
        if (strcmp(v, "gpt") == 0) return mg_cli_bench_step_gpt(argc, argv);
        return usage_error(mg_error(MG_EINVAL, "bench step: --model '%s' is not gpt (the MLP's "
                                    "step, the default, takes no --model)", v), usage);
    }
    if (wants_pipeline(argc, argv)) return mg_cli_bench_step_pp(argc, argv);
    const char *trace = "", *trace_steps = "", *flight_dir = "meshgrad-flight";
    int device = MG_DEVICE_CPU, tf32 = 0, bf16 = 0;
    int64_t batch = 256, steps = 10, threads = 0, layers[MAX_WIDTHS];
    int nl = parse_layers("1024,4096,1024", layers, MAX_WIDTHS);
    char mesh_text[64] = "", plan_text[64] = "dp";
    double lr = 1e-3;
    static const struct option opts[] = {
        {"batch", 1, 0, 'b'}, {"layers", 1, 0, 'l'},   {"steps", 1, 0, 's'}, {"threads", 1, 0, 't'},
        {"mesh", 1, 0, 'm'},  {"parallel", 1, 0, 'p'}, {"lr", 1, 0, 'r'},    {"help", 0, 0, 'h'},
        {"device", 1, 0, 'd'}, {"tf32", 0, 0, 'f'}, {"dtype", 1, 0, 'y'}, {"trace", 1, 0, 'T'},
        {"trace-steps", 1, 0, 'S'}, {"flight-dir", 1, 0, 'F'}, {0, 0, 0, 0}};
    int c, idx = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        const char *bad = NULL; /* what the flag takes, when its value is not that */
        switch (c) {
        case 'b': bad = mg_cli_parse_count(optarg, &batch) ? COUNT : NULL; break;
        case 's': bad = mg_cli_parse_count(optarg, &steps) ? COUNT : NULL; break;
        case 't': bad = mg_cli_parse_count(optarg, &threads) ? COUNT : NULL; break;
        case 'l':
            nl = parse_layers(optarg, layers, MAX_WIDTHS);
            bad = nl < 2 ? "a list of two widths or more, like 1024,4096,1024" : NULL;
            break;
        case 'm': snprintf(mesh_text, sizeof mesh_text, "%s", optarg); break;
        case 'p': snprintf(plan_text, sizeof plan_text, "%s", optarg); break;
        case 'r': bad = mg_cli_parse_positive(optarg, &lr) ? "a finite number above 0" : NULL; break;
        case 'd': bad = mg_cli_parse_device(optarg, &device) ? DEVICE : NULL; break;
        case 'f': tf32 = 1; break;
        case 'y': bad = parse_dtype(optarg, &bf16) ? DTYPE : NULL; break;
        case 'T': trace = optarg; break;
        case 'S': trace_steps = optarg; break;
        case 'F': flight_dir = optarg; break;
        case 'h':
            if (mg_rank() == 0) printf("usage: meshgrad bench %s\n", usage);
            return 0;
        default: return usage_error(mg_cli_bad_flag("bench step", argv), usage);
        }
        if (bad) return usage_error(bad_value("bench step", opts, idx, bad), usage);
    }
    if (optind < argc)
        return usage_error(mg_cli_no_arguments_left("bench step", argc, argv), usage);
    if (threads) mg_backend_cpu_set_threads((int)threads);
    if (mg_cli_use_device(device, tf32, bf16)) return 1;
    int world = mg_world_size(), shape[MG_MAX_MESH_DIMS] = {world}, nd = 1;
    if (mesh_text[0] && (nd = mg_mesh_parse(mesh_text, shape)) < 0) return 2;
    mg_mesh *mesh = mg_mesh_new(nd, shape);
    mg_plan plan;
    mg_timeline timeline;
    if (!mesh) return 1;
    /* a plan that is not one, or does not fit the mesh: a usage error */
    if (mg_plan_parse(plan_text, &plan) != MG_OK || mg_plan_check(&plan, mesh, batch) != MG_OK) {
        mg_mesh_free(mesh);
        return 2;
    }
    if (step_fits(layers, nl, batch) != MG_OK ||
        mg_observe_flight(flight_dir) != MG_OK ||
        mg_timeline_prepare(&timeline, trace, trace_steps, 1, steps, mesh->world) != MG_OK)
        return 1;
    /* parameters: Linear(l[i], l[i+1]) for each layer, placed by the plan */
    mg_param_table params = {0};
    for (int i = 0; i + 1 < nl; i++) {
        mg_placement ws[4], wu[4], bs[4], bu[4];
        mg_plan_linear(&plan, i, ws, wu, bs, bu);
        char name[32];
        float bound = 1.0f / sqrtf((float)layers[i]);
        snprintf(name, sizeof name, "fc%d.weight", i + 1);
        if (mg_params_add(&params, mesh, name, 2, (int64_t[]){layers[i + 1], layers[i]}, ws, wu, 1,
                          -bound, bound) < 0)
            return 1;
        snprintf(name, sizeof name, "fc%d.bias", i + 1);
        if (mg_params_add(&params, mesh, name, 1, (int64_t[]){layers[i + 1]}, bs, bu, 1, -bound,
                          bound) < 0)
            return 1;
    }
    mg_optimizer opt;
    mg_optimizer_init(&opt, MG_OPTIM_SGD, 0.9f, 0.0f); /* momentum: state like the params */
    mg_optimizer_add_state(&opt, &params);
    /* data: fixed x (B, l0) and target (B, lN) on the plan's batch placements */
    mg_placement bp[MG_MAX_MESH_DIMS];
    mg_plan_batch(&plan, bp);
    mg_tensor *xf = mg_tensor_new(2, (int64_t[]){batch, layers[0]});
    mg_tensor *tf = xf ? mg_tensor_new(2, (int64_t[]){batch, layers[nl - 1]}) : NULL;
    if (!tf) return 1; /* out of memory for the batch: said, not "the full tensor is NULL" */
    for (int64_t i = 0; i < mg_tensor_numel(xf); i++) mg_tensor_data(xf)[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
    for (int64_t i = 0; i < mg_tensor_numel(tf); i++) mg_tensor_data(tf)[i] = (float)((i * 3) % 7) / 7.0f;
    mg_dtensor *x = mg_distribute(mesh, xf, bp, nd), *target = mg_distribute(mesh, tf, bp, nd);
    mg_tensor_free(xf);
    mg_tensor_free(tf);
    if (!x || !target) return 1;
    int warmup = 2;
    /* per step, the slowest rank's: whole step, forward, backward, optimizer */
    double *times = calloc((size_t)(4 * steps), sizeof(double));
    double *fwd = times + steps, *bwd = times + 2 * steps, *upd = times + 3 * steps;
    for (int64_t s = -warmup; s < steps; s++) {
        if (s >= 0 && mg_timeline_step_begin(&timeline, s + 1, mesh->world) != MG_OK) return 1;
        if (mg_comm_barrier(mesh->world) != MG_OK) return 1;
        mg_trace_begin(MG_TRACE_STEP, "step", s + 1);
        mg_trace_begin(MG_TRACE_PHASE, "forward", 0);
        double t0 = now();
        mg_dtensor *h = x;
        for (int i = 0; i + 1 < nl; i++) {
            h = mg_linear(h, mg_params_use(&params, 2 * i), mg_params_use(&params, 2 * i + 1));
            if (h && i + 2 < nl) h = mg_relu(h);
            if (!h) return 1;
        }
        mg_dtensor *loss = mg_mse_loss(h, target);
        if (mg_device_synchronize() != MG_OK) return 1;
        double t1 = now();
        mg_trace_end();
        mg_trace_begin(MG_TRACE_PHASE, "backward", 0);
        if (!loss || mg_backward(loss) != MG_OK) return 1;
        mg_params_collect_grads(&params);
        if (mg_device_synchronize() != MG_OK) return 1;
        double t2 = now();
        mg_trace_end();
        mg_trace_begin(MG_TRACE_PHASE, "optimizer", 0);
        if (mg_optimizer_step(&opt, &params, (float)lr) != MG_OK) return 1;
        mg_params_zero_grads(&params);
        mg_step_end();
        if (mg_device_synchronize() != MG_OK) return 1;
        double t3 = now(), slowest[4] = {t3 - t0, t1 - t0, t2 - t1, t3 - t2};
        mg_trace_end();
        mg_trace_end();
        if (s >= 0 && mg_timeline_step_end(&timeline, s + 1, mesh->world) != MG_OK) return 1;
        if (mg_comm_all_reduce_f64(mesh->world, slowest, 4, MG_CONTROL_MAX) != MG_OK) return 1;
        if (s >= 0)
            for (int k = 0; k < 4; k++) times[k * steps + s] = slowest[k];
    }
    if (mg_timeline_finish(&timeline, mesh->world) != MG_OK) return 1;
    double flops = 0;
    for (int i = 0; i + 1 < nl; i++) flops += 3 * 2.0 * (double)batch * layers[i] * layers[i + 1];
    double ms = mg_cli_median(times, (int)steps) * 1e3, rss = mg_cli_peak_rss_mb(mesh->world);
    double fwd_ms = mg_cli_median(fwd, (int)steps) * 1e3, bwd_ms = mg_cli_median(bwd, (int)steps) * 1e3,
           opt_ms = mg_cli_median(upd, (int)steps) * 1e3;
    /* where the memory of a step went (largest rank): the step arena's peak and
     * the size of the scratch arena (one op's gathered weights, or one gradient
     * on its way) */
    double mem[2] = {(double)mg_arena_peak(mg_step_arena()) / 1048576.0,
                     (double)mg_arena_capacity(mg_scratch_arena()) / 1048576.0};
    if (mg_comm_all_reduce_f64(mesh->world, mem, 2, MG_CONTROL_MAX) != MG_OK) return 1;
    if (mg_rank() == 0) {
        char mt[32], pt[32];
        mg_mesh_format(mt, sizeof mt, mesh);
        mg_plan_format(pt, sizeof pt, &plan);
        printf("MLP step  batch=%lld  layers=", (long long)batch);
        for (int i = 0; i < nl; i++) printf("%s%lld", i ? "," : "", (long long)layers[i]);
        printf("  ranks=%d mesh=%s plan=%s threads=%d device=%s math=%s openblas=%s  (median of "
               "%lld after %d warm-up)\n", world, mt, pt, mg_backend_cpu_threads(),
               device == MG_DEVICE_CUDA ? "cuda" : "cpu", mg_cli_gemm_math(device), mg_blas_core(),
               (long long)steps, warmup);
        printf("  %.2f ms/step   %.1f GFLOP/s   peak RSS (largest rank) %.0f MB  "
               "(step arena %.0f MB, scratch %.0f MB)\n",
               ms, flops / (ms * 1e-3) * 1e-9, rss, mem[0], mem[1]);
        printf("  forward %.2f ms   backward %.2f ms   optimizer %.2f ms  (medians, slowest rank)\n",
               fwd_ms, bwd_ms, opt_ms);
        printf("{\"bench\":\"step\",\"ranks\":%d,\"mesh\":\"%s\",\"plan\":\"%s\",\"threads\":%d,"
               "\"ms_per_step\":%.3f,\"gflops\":%.2f,\"peak_rss_mb\":%.1f,\"arena_mb\":%.1f,"
               "\"scratch_mb\":%.1f,\"fwd_ms\":%.3f,\"bwd_ms\":%.3f,\"opt_ms\":%.3f,"
               "\"device\":\"%s\",\"math\":\"%s\",\"openblas\":\"%s\"}\n",
               world, mt, pt, mg_backend_cpu_threads(), ms, flops / (ms * 1e-3) * 1e-9, rss, mem[0],
               mem[1], fwd_ms, bwd_ms, opt_ms, device == MG_DEVICE_CUDA ? "cuda" : "cpu",
               mg_cli_gemm_math(device), mg_blas_core());
    }
    free(times);
    mg_dtensor_free(x), mg_dtensor_free(target);
    mg_params_free(&params);
    mg_mesh_free(mesh);
    return 0;
}

/* ---- ops: dispatch overhead ---------------------------------------------------- */

int mg_cli_bench_ops(int argc, char **argv) {
    int64_t iters = 20000;
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        if (mg_rank() == 0) printf("usage: meshgrad bench ops [--iters N]\n");
        return 0;
    }
    static const struct option opts[] = {{"iters", 1, 0, 'i'}, {0, 0, 0, 0}};
    int c, idx = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        if (c != 'i') return usage_error(mg_cli_bad_flag("bench ops", argv), "ops [--iters N]");
        if (mg_cli_parse_count(optarg, &iters))
            return usage_error(bad_value("bench ops", opts, idx, COUNT), "ops [--iters N]");
    }
    if (optind < argc)
        return usage_error(mg_cli_no_arguments_left("bench ops", argc, argv), "ops [--iters N]");
    int world = mg_world_size();
    mg_mesh *mesh = mg_mesh_new(1, &world);
    if (!mesh) return 1;
    mg_placement r = MG_REPLICATE;
    mg_tensor *t = mg_tensor_new(2, (int64_t[]){4, 4});
    mg_dtensor *a = mg_distribute(mesh, t, &r, 1), *w = mg_distribute(mesh, t, &r, 1);
    mg_tensor_free(t);
    mg_set_requires_grad(w, 1);
    struct {
        const char *name;
        double us;
    } rows[4];
    int nrows = 0;
    for (int mode = 0; mode < 3; mode++) {
        int was = mg_set_grad_enabled(mode != 0);
        double t0 = now();
        for (int64_t i = 0; i < iters; i++) {
            mg_dtensor *y = mode == 2 ? mg_linear(a, w, NULL) : mg_add(a, w);
            if (!y) return 1;
            if ((i & 255) == 255) mg_step_end();
        }
        double us = (now() - t0) / iters * 1e6;
        mg_step_end();
        mg_set_grad_enabled(was);
        rows[nrows].name = mode == 0 ? "mg_add (4x4), no grad" : mode == 1 ? "mg_add (4x4), recorded"
                                                                           : "mg_linear (4x4), recorded";
        rows[nrows++].us = us;
    }
    double v = 1, t0 = now();
    for (int64_t i = 0; i < iters / 10; i++) mg_comm_all_reduce_f64(mesh->world, &v, 1, MG_CONTROL_SUM);
    double mpi_us = (now() - t0) / (iters / 10) * 1e6;
    if (mg_rank() == 0) {
        printf("per-op dispatch overhead on tiny tensors (%d rank(s), %lld ops each)\n", world,
               (long long)iters);
        for (int i = 0; i < nrows; i++) printf("  %-28s %8.2f us/op\n", rows[i].name, rows[i].us);
        printf("  %-28s %8.2f us\n", "all-reduce of 8 bytes", mpi_us);
    }
    char kernels[512] = "";
    if (mg_cli_bench_nn(kernels, sizeof kernels) != MG_OK) return 1;
    if (mg_rank() == 0)
        printf("{\"bench\":\"ops\",\"ranks\":%d,\"add_us\":%.3f,\"add_recorded_us\":%.3f,"
               "\"linear_recorded_us\":%.3f,\"mpi_allreduce_us\":%.3f%s}\n",
               world, rows[0].us, rows[1].us, rows[2].us, mpi_us, kernels);
    mg_dtensor_free(a), mg_dtensor_free(w);
    mg_mesh_free(mesh);
    return 0;
}
