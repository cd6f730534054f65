/* bench_step.c: `meshgrad bench step`, the MLP's: a training step (Linear +
 * ReLU, MSE, SGD with momentum) on any mesh and plan. It prints the median
 * step time after warm-up and of its forward, backward and optimizer parts
 * (each the slowest rank's), GFLOP/s and the largest rank's peak RSS
 * (--device cuda: on the GPUs, timed after the device finished each part),
 * and as its last line one JSON object for programs. --trace FILE writes the
 * timeline of the measured steps --trace-steps A:B (observe.h); --flight-dir
 * DIR is where the flight recorder's dumps go. The GPT's step is bench_gpt.c's
 * and a pipeline's bench_pp.c's: bench.c picks.
 * Exports mg_cli_bench_step_mlp (cli.h). */
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "backend/backend.h"
#include "backend/device.h"
#include "cli/bench_util.h"
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

#define MAX_WIDTHS 32 /* --layers: up to 31 linear layers */

static const char usage[] =
    "step [--batch B] [--layers 1024,4096,1024] [--steps S] [--threads T] "
    "[--mesh M] [--parallel P] [--lr LR] [--device cpu|cuda] [--tf32] "
    "[--dtype fp32|bf16] [--deterministic] [--trace FILE] [--trace-steps A:B] [--flight-dir DIR]\n"
    "       the GPT's step: meshgrad bench step --model gpt --help; a pipeline "
    "(pp in --parallel): meshgrad bench step --parallel pp --help";

typedef struct {
    mg_cli_step_flags step;
    int64_t layers[MAX_WIDTHS];
    int nl; /* widths in layers */
    const char *trace, *trace_steps, *flight_dir;
} step_opts;

/* What the step runs on: options, mesh, plan, parameters, optimizer, data,
 * timeline. */
typedef struct {
    const step_opts *o;
    mg_mesh *mesh;
    mg_plan plan;
    mg_param_table params;
    mg_optimizer opt;
    mg_dtensor *x, *target;
    mg_timeline timeline;
} step_job;

/* What it measured: the medians (ms) of the step and its three parts, the
 * largest rank's peak RSS, step arena peak and scratch arena size (MB). */
typedef struct {
    double ms[4], rss, arena, scratch;
} step_result;

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

/* --model, which the GPT's step takes (bench.c sends --model gpt and llama there):
 * refused before any other flag is read. */
static int no_model(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *v = mg_cli_flag_at(argc, argv, i, "--model");
        if (v)
            return mg_error(MG_EINVAL, "bench step: --model '%s' is not gpt or llama (the MLP's "
                                       "step, the default, takes no --model)", v);
    }
    return MG_OK;
}

/* The flags into *o: 0, 1 for --help (the usage printed), or 2 (a usage error). */
static int parse(step_opts *o, int argc, char **argv) {
    static const struct option opts[] = {
        MG_CLI_STEP_OPTIONS, {"layers", 1, 0, 'l'}, {"help", 0, 0, 'h'}, {"trace", 1, 0, 'T'},
        {"trace-steps", 1, 0, 'S'}, {"flight-dir", 1, 0, 'F'}, {0, 0, 0, 0}};
    const char *cmd = "bench step";
    *o = (step_opts){.trace = "", .trace_steps = "", .flight_dir = "meshgrad-flight"};
    mg_cli_step_flags_init(&o->step, 256);
    o->nl = parse_layers("1024,4096,1024", o->layers, MAX_WIDTHS);
    int c, idx = 0, rc = no_model(argc, argv);
    opterr = 0;
    while (rc == MG_OK && (c = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        const char *bad = NULL; /* what the flag takes, when its value is not that */
        switch (c) {
        case 'l':
            o->nl = parse_layers(optarg, o->layers, MAX_WIDTHS);
            bad = o->nl < 2 ? "a list of two widths or more, like 1024,4096,1024" : NULL;
            break;
        case 'T': o->trace = optarg; break;
        case 'S': o->trace_steps = optarg; break;
        case 'F': o->flight_dir = optarg; break;
        case 'h': mg_cli_bench_usage(stdout, usage); return 1;
        default:
            if (!mg_cli_step_flag(c, &o->step, &bad)) rc = mg_cli_bad_flag(cmd, argv);
        }
        if (bad) rc = mg_cli_bench_bad_value(cmd, opts, idx, bad);
    }
    return mg_cli_bench_flags_end(rc, cmd, argc, argv, usage);
}

/* The step is refused before anything is made when what it must hold at
 * once cannot fit this machine's memory, counted low (the need is never
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
    return mg_machine_check_memory(what, 4.0 * (whole > kept ? whole : kept),
                               "use a smaller --batch or --layers (the step holds its whole input "
                               "and target, its layers' outputs, the parameters with their "
                               "gradients and momentum)");
}

/* Linear(l[i], l[i+1]) for each layer, placed by the plan, and the optimizer
 * with its momentum: 0, or 1 on failure. */
static int make_params(step_job *j) {
    const step_opts *o = j->o;
    for (int i = 0; i + 1 < o->nl; i++) {
        mg_placement ws[4], wu[4], bs[4], bu[4];
        mg_plan_linear(&j->plan, i, ws, wu, bs, bu);
        char name[32];
        float bound = 1.0f / sqrtf((float)o->layers[i]);
        snprintf(name, sizeof name, "fc%d.weight", i + 1);
        if (mg_params_add(&j->params, j->mesh, name, 2, (int64_t[]){o->layers[i + 1], o->layers[i]},
                          ws, wu, 1, -bound, bound) < 0)
            return 1;
        snprintf(name, sizeof name, "fc%d.bias", i + 1);
        if (mg_params_add(&j->params, j->mesh, name, 1, (int64_t[]){o->layers[i + 1]}, bs, bu, 1,
                          -bound, bound) < 0)
            return 1;
    }
    mg_optimizer_init(&j->opt, MG_OPTIM_SGD, 0.9f, 0.0f); /* momentum: state like the params */
    mg_optimizer_add_state(&j->opt, &j->params);
    return 0;
}

/* Fixed x (B, l0) and target (B, lN) on the plan's batch placements: 0, or 1. */
static int make_data(step_job *j) {
    const step_opts *o = j->o;
    mg_placement bp[MG_MAX_MESH_DIMS];
    mg_plan_batch(&j->plan, bp);
    mg_tensor *xf = mg_tensor_new(2, (int64_t[]){o->step.batch, o->layers[0]});
    mg_tensor *tf = xf ? mg_tensor_new(2, (int64_t[]){o->step.batch, o->layers[o->nl - 1]}) : NULL;
    if (!tf) { /* out of memory for the batch: said, not "the full tensor is NULL" */
        mg_tensor_free(xf);
        return 1;
    }
    for (int64_t i = 0; i < mg_tensor_numel(xf); i++)
        mg_tensor_data(xf)[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
    for (int64_t i = 0; i < mg_tensor_numel(tf); i++)
        mg_tensor_data(tf)[i] = (float)((i * 3) % 7) / 7.0f;
    j->x = mg_distribute(j->mesh, xf, bp, j->mesh->ndim);
    j->target = mg_distribute(j->mesh, tf, bp, j->mesh->ndim);
    mg_tensor_free(xf);
    mg_tensor_free(tf);
    return j->x && j->target ? 0 : 1;
}

/* The device, mesh, plan, flight recorder, timeline, parameters and data:
 * 0, or the exit code (1, or 2 for a mesh or plan that is not
 * one or does not fit). */
static int setup(step_job *j) {
    const step_opts *o = j->o;
    int code = mg_cli_step_start(&o->step, &j->mesh, &j->plan);
    if (code) return code;
    if (step_fits(o->layers, o->nl, o->step.batch) != MG_OK ||
        mg_observe_flight(o->flight_dir) != MG_OK ||
        mg_timeline_prepare(&j->timeline, o->trace, o->trace_steps, 1, o->step.steps,
                            j->mesh->world) != MG_OK)
        return 1;
    return make_params(j) || make_data(j);
}

/* The forward of the MLP and its loss, or NULL. */
static mg_dtensor *forward(step_job *j) {
    mg_dtensor *h = j->x;
    int nl = j->o->nl;
    for (int i = 0; i + 1 < nl; i++) {
        h = mg_linear(h, mg_params_use(&j->params, 2 * i), mg_params_use(&j->params, 2 * i + 1));
        if (h && i + 2 < nl) h = mg_relu(h);
        if (!h) return NULL;
    }
    return mg_mse_loss(h, j->target);
}

/* Step s (the measured ones from 1, the warm-up's 0 and below): parts[] its
 * seconds, the whole step and its forward, backward and optimizer. 0, or 1
 * on failure. */
static int one_step(step_job *j, int64_t s, double parts[4]) {
    const step_opts *o = j->o;
    if (mg_comm_barrier(j->mesh->world) != MG_OK) return 1;
    mg_trace_begin(MG_TRACE_STEP, "step", s);
    mg_trace_begin(MG_TRACE_PHASE, "forward", 0);
    double t0 = mg_clock();
    mg_dtensor *loss = forward(j);
    if (!loss || mg_device_synchronize() != MG_OK) return 1;
    double t1 = mg_clock();
    mg_trace_end();
    mg_trace_begin(MG_TRACE_PHASE, "backward", 0);
    if (mg_backward(loss) != MG_OK) return 1;
    mg_params_collect_grads(&j->params);
    if (mg_device_synchronize() != MG_OK) return 1;
    double t2 = mg_clock();
    mg_trace_end();
    mg_trace_begin(MG_TRACE_PHASE, "optimizer", 0);
    if (mg_optimizer_step(&j->opt, &j->params, (float)o->step.lr) != MG_OK) return 1;
    mg_params_zero_grads(&j->params);
    mg_step_end();
    if (mg_device_synchronize() != MG_OK) return 1;
    double t3 = mg_clock();
    parts[0] = t3 - t0, parts[1] = t1 - t0, parts[2] = t2 - t1, parts[3] = t3 - t2;
    mg_trace_end();
    mg_trace_end();
    return 0;
}

/* mg_cli_bench_steps' step s (below 0: warm-up), the measured ones on the
 * timeline. */
static int timed_step(void *ctx, int64_t s, double parts[4]) {
    step_job *j = ctx;
    mg_comm *world = j->mesh->world;
    if (s >= 0 && mg_timeline_step_begin(&j->timeline, s + 1, world) != MG_OK) return 1;
    if (one_step(j, s + 1, parts)) return 1;
    return s >= 0 && mg_timeline_step_end(&j->timeline, s + 1, world) != MG_OK;
}

/* The warm-up steps, then the measured ones: 0, or 1 on failure. */
static int run(step_job *j, step_result *r) {
    mg_comm *world = j->mesh->world;
    if (mg_cli_bench_steps(world, j->o->step.steps, timed_step, j, r->ms) ||
        mg_timeline_finish(&j->timeline, world) != MG_OK)
        return 1;
    r->rss = mg_cli_peak_rss_mb(world);
    /* where the memory of a step went (largest rank): the step arena's peak and
     * the size of the scratch arena (one op's gathered weights, or one gradient
     * on its way) */
    double mem[2] = {(double)mg_arena_peak(mg_step_arena()) / 1048576.0,
                     (double)mg_arena_capacity(mg_scratch_arena()) / 1048576.0};
    if (mg_comm_all_reduce_f64(world, mem, 2, MG_CONTROL_MAX) != MG_OK) return 1;
    r->arena = mem[0], r->scratch = mem[1];
    return 0;
}

/* The table and the JSON line (rank 0). */
static void report(const step_job *j, const step_result *r) {
    const step_opts *o = j->o;
    if (mg_rank() != 0) return;
    double flops = 0;
    for (int i = 0; i + 1 < o->nl; i++)
        flops += 3 * 2.0 * (double)o->step.batch * o->layers[i] * o->layers[i + 1];
    double gflops = flops / (r->ms[0] * 1e-3) * 1e-9;
    const char *device = o->step.device == MG_DEVICE_CUDA ? "cuda" : "cpu";
    char mt[32], pt[32];
    mg_mesh_format(mt, sizeof mt, j->mesh);
    mg_plan_format(pt, sizeof pt, &j->plan);
    printf("MLP step  batch=%lld  layers=", (long long)o->step.batch);
    for (int i = 0; i < o->nl; i++) printf("%s%lld", i ? "," : "", (long long)o->layers[i]);
    printf("  ranks=%d mesh=%s plan=%s threads=%d device=%s math=%s openblas=%s  (median of %lld "
           "after %d warm-up)\n", mg_world_size(), mt, pt, mg_backend_cpu_threads(), device,
           mg_cli_gemm_math(o->step.device), mg_blas_core(), (long long)o->step.steps,
           MG_CLI_WARMUP);
    printf("  %.2f ms/step   %.1f GFLOP/s   peak RSS (largest rank) %.0f MB  "
           "(step arena %.0f MB, scratch %.0f MB)\n",
           r->ms[0], gflops, r->rss, r->arena, r->scratch);
    printf("  forward %.2f ms   backward %.2f ms   optimizer %.2f ms  (medians, slowest rank)\n",
           r->ms[1], r->ms[2], r->ms[3]);
    printf("{\"bench\":\"step\",\"ranks\":%d,\"mesh\":\"%s\",\"plan\":\"%s\",\"threads\":%d,"
           "\"ms_per_step\":%.3f,\"gflops\":%.2f,\"peak_rss_mb\":%.1f,\"arena_mb\":%.1f,"
           "\"scratch_mb\":%.1f,\"fwd_ms\":%.3f,\"bwd_ms\":%.3f,\"opt_ms\":%.3f,"
           "\"device\":\"%s\",\"math\":\"%s\",\"openblas\":\"%s\"}\n",
           mg_world_size(), mt, pt, mg_backend_cpu_threads(), r->ms[0], gflops, r->rss, r->arena,
           r->scratch, r->ms[1], r->ms[2], r->ms[3], device, mg_cli_gemm_math(o->step.device),
           mg_blas_core());
}

int mg_cli_bench_step_mlp(int argc, char **argv) {
    step_opts o;
    int code = parse(&o, argc, argv);
    if (code) return code == 1 ? 0 : code;
    step_job j = {.o = &o};
    step_result r;
    if ((code = setup(&j)) != 0) return code;
    /* a failed step leaves what it made: freeing a tensor that its graph
     * still holds would put another error in place of the step's */
    if (run(&j, &r)) return 1;
    report(&j, &r);
    mg_dtensor_free(j.x), mg_dtensor_free(j.target);
    mg_params_free(&j.params);
    mg_mesh_free(j.mesh);
    return 0;
}
