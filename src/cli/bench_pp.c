/* bench_pp.c: `meshgrad bench step` with pp in --parallel: the MLP of bench
 * step (Linear + ReLU, MSE, SGD with momentum) run as a pipeline by the
 * executor (nn/pipeline_exec.h), measured beside what `meshgrad plan`
 * predicts for the same cut, schedule and machine:
 *   - the step time (median after warm-up; the pipeline's part, from the
 *     first action to the last send, and the whole step with the optimizer);
 *   - the bubble: 1 - busy / (ranks x pipeline time), busy being each pipeline
 *     rank's time in F, B, Bi and W (the verifier's definition), next to the
 *     plan's with these costs and the verifier's at unit time;
 *   - per stage, the most micro-batches held at once and the high-water of
 *     their activation memory (the micro-batch arenas), next to the plan's.
 * The plan is calibrated as `meshgrad plan` does (a FLOP rate and a link
 * measured here, or --flops/--bandwidth/--latency).
 * Exports mg_cli_bench_step_pp (cli.h). */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/device.h"
#include "cli/bench_util.h"
#include "cli/cli.h"
#include "train/trainer_pp.h"
#include "cli/plan_show.h"
#include "context.h"
#include "dist/mesh.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "nn/pipeline.h"
#include "nn/pipeline_exec.h"
#include "status.h"

#define MAX_WIDTHS 33
#define MIB (1024.0 * 1024.0)

typedef struct {
    int64_t batch, steps, threads, widths[MAX_WIDTHS];
    int nwidths;
    char mesh[64], parallel[64];
    double lr, gflops, gbps, latency_us;
    mg_pp_options pp;
} opts;

static const char usage_text[] =
    "step --parallel pp[,dp|,tp|,fsdp...] [--mesh M] [--batch B] [--layers W0,W1,...]\n"
    "       [--steps S] [--threads T] [--lr LR] [--microbatches M | --microbatch-rows R1,R2,...]\n"
    "       [--pp-schedule gpipe|1f1b|interleaved-1f1b|zb-h1] [--virtual-stages V]\n"
    "       [--pp-layers N1,N2,...] [--flops GFLOPS] [--bandwidth GB/s] [--latency us]";

static int number(const char *flag, const char *text, double lo, double *out) {
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end || !(v >= lo) || !isfinite(v))
        return mg_error(MG_EINVAL, "bench step: %s '%s' is not a finite number >= %g", flag, text,
                        lo);
    *out = v;
    return MG_OK;
}

/* One count >= 1 (a list of one). */
static int count(const char *flag, const char *text, int64_t *out) {
    int n = mg_pp_int_list(flag, text, out, 1, 1);
    return n == 1 ? MG_OK : n;
}

/* MG_OK, 1 for --help, or an error. */
static int parse(opts *o, int argc, char **argv) {
    static const struct option table[] = {
        {"batch", 1, 0, 'b'},        {"layers", 1, 0, 'l'},         {"steps", 1, 0, 's'},
        {"threads", 1, 0, 't'},      {"mesh", 1, 0, 'm'},           {"parallel", 1, 0, 'p'},
        {"lr", 1, 0, 'r'},           {"microbatches", 1, 0, 'M'},   {"microbatch-rows", 1, 0, 'R'},
        {"pp-schedule", 1, 0, 'S'},  {"virtual-stages", 1, 0, 'v'}, {"pp-layers", 1, 0, 'L'},
        {"flops", 1, 0, 'F'},        {"bandwidth", 1, 0, 'W'},      {"latency", 1, 0, 'a'},
        {"help", 0, 0, 'h'},         {0, 0, 0, 0}};
    int c, rc = MG_OK, n;
    int64_t one[1] = {1}, list[MG_PP_LIST_MAX];
    opterr = 0;
    optind = 0;
    while (rc == MG_OK && (c = getopt_long(argc, argv, "", table, NULL)) != -1) {
        switch (c) {
        case 'b': rc = count("--batch", optarg, &o->batch); break;
        case 's': rc = count("--steps", optarg, &o->steps); break;
        case 't': rc = count("--threads", optarg, &o->threads); break;
        case 'l':
            n = mg_pp_int_list("--layers", optarg, o->widths, MAX_WIDTHS, 1);
            if (n >= 0 && n < 2)
                n = mg_error(MG_EINVAL, "bench step: --layers needs two widths or more");
            if (n < 0) rc = n;
            else o->nwidths = n;
            break;
        case 'm': snprintf(o->mesh, sizeof o->mesh, "%s", optarg); break;
        case 'p': snprintf(o->parallel, sizeof o->parallel, "%s", optarg); break;
        case 'r': rc = number("--lr", optarg, 0, &o->lr); break;
        case 'M':
            rc = count("--microbatches", optarg, one);
            o->pp.microbatches = (int)one[0];
            break;
        case 'R':
            n = mg_pp_int_list("--microbatch-rows", optarg, o->pp.rows, MG_PP_LIST_MAX, 1);
            if (n < 0) rc = n;
            else o->pp.nrows = n;
            break;
        case 'S': rc = mg_pp_kind_parse(optarg, &o->pp.kind); break;
        case 'v':
            rc = count("--virtual-stages", optarg, one);
            o->pp.virtual_stages = (int)one[0];
            break;
        case 'L':
            if ((n = mg_pp_int_list("--pp-layers", optarg, list, MG_PP_LIST_MAX, 0)) < 0) rc = n;
            for (int i = 0; i < n; i++) o->pp.layers[i] = (int)list[i];
            o->pp.nlayers = n > 0 ? n : 0;
            break;
        case 'F': rc = number("--flops", optarg, 1e-9, &o->gflops); break;
        case 'W': rc = number("--bandwidth", optarg, 1e-9, &o->gbps); break;
        case 'a': rc = number("--latency", optarg, 1e-9, &o->latency_us); break;
        case 'h': return 1;
        default: rc = mg_cli_bad_flag("bench step", argv);
        }
    }
    return rc == MG_OK ? mg_cli_no_arguments_left("bench step", argc, argv) : rc;
}

typedef struct {
    mg_model *model;
    const mg_pipeline *p;
    const float *x, *target; /* (B, w0), (B, wN) */
    int64_t w0, wn, batch, starts[MG_PP_MAX_MICROBATCHES];
} job;

static mg_dtensor *stage_forward(void *ctx, int stage, int mb, mg_dtensor *x) {
    job *j = ctx;
    const mg_pipeline *p = j->p;
    int64_t r = p->rows[mb];
    if (stage == 0 && !(x = mg_pipeline_rows(p, j->x, j->starts[mb], 2, (int64_t[]){r, j->w0})))
        return NULL;
    mg_dtensor *out = mg_model_forward_layers(j->model, mg_pipeline_stage_first(p, stage),
                                              mg_pipeline_stage_first(p, stage + 1), x);
    if (!out || stage + 1 < p->split.stages) return out;
    mg_dtensor *t = mg_pipeline_rows(p, j->target, j->starts[mb], 2, (int64_t[]){r, j->wn});
    mg_dtensor *loss = t ? mg_mse_loss(out, t) : NULL; /* its share of the batch's mean */
    return loss ? mg_scale(loss, (float)((double)r / (double)j->batch)) : NULL;
}

static int stage_reduce(void *ctx, int stage) {
    job *j = ctx;
    for (int k = 2 * mg_pipeline_stage_first(j->p, stage);
         k < 2 * mg_pipeline_stage_first(j->p, stage + 1); k++) {
        mg_param *pr = mg_model_param(j->model, k, NULL);
        pr->grad = mg_param_grad_in_parts(pr) ? pr->value->grad : mg_grad(pr->value);
    }
    return MG_OK;
}

/* Everything the benchmark holds (large: on the heap). */
typedef struct {
    opts o;
    mg_mesh *mesh;
    mg_plan plan;
    mg_pipeline p;
    mg_model model;
    int have_model;
    mg_layer_cost layers[MAX_WIDTHS];
    float *x, *target;
    double *times; /* per step: whole, pipeline, bubble */
    /* per stage (summed over the pipeline ranks): peak live, peak bytes, and
     * the most one micro-batch held */
    double stage_live[MG_PP_MAX_STAGES], stage_bytes[MG_PP_MAX_STAGES], mb_bytes[MG_PP_MAX_STAGES];
} bench;

static int setup(bench *b) {
    opts *o = &b->o;
    if (o->threads) mg_backend_cpu_set_threads((int)o->threads);
    int shape[MG_MAX_MESH_DIMS] = {mg_world_size()}, nd = 1;
    if (o->mesh[0] && (nd = mg_mesh_parse(o->mesh, shape)) < 0) return nd;
    int rc = mg_plan_parse(o->parallel, &b->plan);
    if (rc != MG_OK) return rc;
    if (!(b->mesh = mg_mesh_new(nd, shape))) return mg_last_code();
    if ((rc = mg_plan_check(&b->plan, b->mesh, o->batch)) != MG_OK) return rc;
    if ((rc = mg_layer_costs_mlp(o->widths, o->nwidths, b->layers)) != MG_OK) return rc;
    rc = mg_pipeline_make(&b->p, b->mesh, &b->plan, &o->pp, b->layers, o->nwidths - 1, o->batch);
    if (rc != MG_OK) return rc;
    unsigned char held[MAX_WIDTHS] = {0};
    for (int i = 0; i + 1 < o->nwidths; i++) held[i] = mg_pipeline_holds(&b->p, i);
    /* the parameters of `bench step` (seed 1): the same initial values */
    mg_model_config mc = {.kind = MG_MODEL_MLP, .rows = 1, .cols = o->widths[0], .hidden = 1,
                          .channels = 1, .classes = o->widths[o->nwidths - 1],
                          .depth = o->nwidths - 1, .widths = o->widths, .seed = 1};
    if ((rc = mg_model_build(&b->model, &mc, b->p.stage_mesh, &b->p.stage_plan, held)) != MG_OK)
        return rc;
    b->have_model = 1;
    int64_t nx = o->batch * o->widths[0], nt = o->batch * o->widths[o->nwidths - 1];
    b->x = malloc((size_t)nx * sizeof(float));
    b->target = malloc((size_t)nt * sizeof(float));
    b->times = calloc((size_t)(3 * o->steps), sizeof(double));
    if (!b->x || !b->target || !b->times) return mg_error(MG_ENOMEM, "bench step: out of memory");
    for (int64_t i = 0; i < nx; i++) b->x[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
    for (int64_t i = 0; i < nt; i++) b->target[i] = (float)((i * 3) % 7) / 7.0f;
    return MG_OK;
}

static int gather_stages(bench *b, const mg_pp_exec_stats *st);

/* Runs the steps; per step the slowest rank's times and the bubble. */
static int measure(bench *b, mg_pp_exec_stats *last) {
    opts *o = &b->o;
    mg_pipeline *p = &b->p;
    job j = {&b->model, p, b->x, b->target, o->widths[0], o->widths[o->nwidths - 1], o->batch, {0}};
    for (int i = 0, a = 0; i < p->microbatches; a += (int)p->rows[i], i++) j.starts[i] = a;
    mg_pp_exec *e = mg_pp_exec_new(&p->schedule, p->rank, p->comm, p->stage_mesh);
    if (!e) return mg_last_code();
    mg_optimizer opt;
    mg_optimizer_init(&opt, MG_OPTIM_SGD, 0.9f, 0.0f);
    int rc = mg_optimizer_add_state(&opt, &b->model.params), warmup = 2;
    mg_pp_stage_fns fns = {&j, stage_forward, stage_reduce};
    for (int64_t s = -warmup; s < o->steps && rc == MG_OK; s++) {
        rc = mg_comm_barrier(b->mesh->world);
        double t0 = MPI_Wtime();
        if (rc == MG_OK) rc = mg_pp_exec_step(e, &fns, last);
        if (rc == MG_OK) rc = mg_optimizer_step(&opt, &b->model.params, (float)o->lr);
        if (rc == MG_OK) rc = mg_params_zero_grads(&b->model.params);
        if (rc == MG_OK) rc = mg_device_synchronize();
        mg_step_end();
        /* the slowest rank's step and pipeline time; every rank's busy time */
        float f[3] = {(float)(MPI_Wtime() - t0), (float)last->step_s, (float)last->busy_s};
        if (rc == MG_OK) rc = mg_comm_all_reduce(b->mesh->world, f, 2, MG_REDUCE_MAX);
        if (rc == MG_OK) rc = mg_comm_all_reduce(b->mesh->world, f + 2, 1, MG_REDUCE_SUM);
        if (rc == MG_OK && s >= 0) {
            b->times[s] = f[0];
            b->times[o->steps + s] = f[1];
            /* every rank of the mesh counted its busy time: a rank's share */
            b->times[2 * o->steps + s] = 1.0 - f[2] / (double)b->mesh->size / f[1];
        }
    }
    if (rc == MG_OK) rc = gather_stages(b, last); /* while the executor's stats live */
    mg_pp_exec_free(e);
    return rc;
}

/* Per stage: the most micro-batches held and their bytes (every stage's
 * ranks report theirs; the pipeline sums put them together). */
static int gather_stages(bench *b, const mg_pp_exec_stats *st) {
    mg_pipeline *p = &b->p;
    int S = p->split.stages;
    for (int s = 0; s < S; s++) b->stage_live[s] = b->stage_bytes[s] = b->mb_bytes[s] = 0;
    for (int c = 0; c < p->schedule.virtual_stages; c++) {
        int s = p->rank + c * p->ranks;
        b->stage_live[s] = st->stage_peak_live[c];
        b->stage_bytes[s] = (double)st->stage_peak_bytes[c];
        b->mb_bytes[s] = (double)st->stage_mb_bytes[c];
    }
    int rc = mg_pipeline_sum(p, b->stage_live, S);
    if (rc == MG_OK) rc = mg_pipeline_sum(p, b->stage_bytes, S);
    return rc == MG_OK ? mg_pipeline_sum(p, b->mb_bytes, S) : rc;
}

static int report(bench *b) {
    opts *o = &b->o;
    mg_pipeline *p = &b->p;
    int64_t most = 0;
    for (int i = 0; i < p->microbatches; i++) most = p->rows[i] > most ? p->rows[i] : most;
    mg_pp_machine machine = {.dp = p->data_degree};
    char how[320];
    mg_pp_stage_costs costs = {0};
    mg_pp_sim unit = {0}, sim = {0};
    int rc = mg_plan_calibrate(o->gflops, o->gbps, o->latency_us, b->layers, o->nwidths - 1,
                               (most + p->data_degree - 1) / p->data_degree, &machine, how,
                               sizeof how);
    if (rc == MG_OK)
        rc = mg_pp_stage_costs_make(&costs, b->layers, &p->split, &machine, p->rows, p->microbatches);
    if (rc == MG_OK) rc = mg_pp_simulate(&p->schedule, NULL, MG_PP_P2P_ASYNC, &unit);
    if (rc == MG_OK) rc = mg_pp_simulate(&p->schedule, &costs.cost, MG_PP_P2P_ASYNC, &sim);
    int n = (int)o->steps;
    double ms = mg_cli_median(b->times, n) * 1e3, pipe_ms = mg_cli_median(b->times + n, n) * 1e3;
    double bubble = mg_cli_median(b->times + 2 * n, n), pred_ms = sim.step_time * 1e3;
    if (rc == MG_OK && mg_rank() == 0) {
        char mt[32], pt[64];
        mg_mesh_format(mt, sizeof mt, b->mesh);
        mg_plan_format(pt, sizeof pt, &b->plan);
        printf("MLP step  batch=%lld  layers=", (long long)o->batch);
        for (int i = 0; i < o->nwidths; i++) printf("%s%lld", i ? "," : "", (long long)o->widths[i]);
        printf("  ranks=%d mesh=%s plan=%s  %s", b->mesh->size, mt, pt,
               mg_pp_kind_name(p->schedule.kind));
        if (p->schedule.virtual_stages > 1) printf(" v=%d", p->schedule.virtual_stages);
        printf(" M=%d (rows", p->microbatches);
        for (int i = 0; i < p->microbatches && i < 8; i++) printf(" %lld", (long long)p->rows[i]);
        printf("%s)  threads=%d  (median of %lld after 2 warm-up)\n", p->microbatches > 8 ? " ..." : "",
               mg_backend_cpu_threads(), (long long)o->steps);
        printf("  machine: %s\n", how);
        printf("  measured   %8.2f ms/step: pipeline %.2f ms + optimizer %.2f ms; bubble %.3f\n", ms,
               pipe_ms, ms - pipe_ms, bubble);
        printf("  predicted  %8.2f ms pipeline (measured/predicted %.2f); bubble %.3f with these "
               "costs, %.3f at unit time (the verifier's)\n",
               pred_ms, pipe_ms / pred_ms, sim.bubble, unit.bubble);
        printf("  stage  layers      peak live mbs (verifier)  peak activations MiB (plan)  "
               "= forwards' worth\n");
        for (int s = 0; s < p->split.stages; s++) {
            char names[48];
            int a = p->split.first[s], z = p->split.first[s + 1] - 1;
            if (a == z) snprintf(names, sizeof names, "%s", b->layers[a].name);
            else snprintf(names, sizeof names, "%s-%s", b->layers[a].name, b->layers[z].name);
            printf("  %5d  %-11s %10.0f (%d)%21.2f (%.2f)%16.2f\n", s, names, b->stage_live[s],
                   unit.peak_live[s], b->stage_bytes[s] / MIB, sim.peak_stage_bytes[s] / MIB,
                   b->mb_bytes[s] > 0 ? b->stage_bytes[s] / b->mb_bytes[s] : 0.0);
        }
        printf("{\"bench\":\"step\",\"ranks\":%d,\"mesh\":\"%s\",\"plan\":\"%s\",\"threads\":%d,"
               "\"schedule\":\"%s\",\"virtual_stages\":%d,\"microbatches\":%d,\"ms_per_step\":%.3f,"
               "\"pipeline_ms\":%.3f,\"predicted_ms\":%.3f,\"bubble\":%.4f,\"predicted_bubble\":%.4f,"
               "\"unit_bubble\":%.4f,\"peak_act_mib\":[",
               b->mesh->size, mt, pt, mg_backend_cpu_threads(), mg_pp_kind_name(p->schedule.kind),
               p->schedule.virtual_stages, p->microbatches, ms, pipe_ms, pred_ms, bubble,
               sim.bubble, unit.bubble);
        for (int s = 0; s < p->split.stages; s++) printf("%s%.3f", s ? "," : "", b->stage_bytes[s] / MIB);
        printf("],\"peak_live\":[");
        for (int s = 0; s < p->split.stages; s++) printf("%s%.0f", s ? "," : "", b->stage_live[s]);
        printf("]}\n");
        fflush(stdout);
    }
    mg_pp_sim_free(&unit);
    mg_pp_sim_free(&sim);
    mg_pp_stage_costs_free(&costs);
    return rc;
}

int mg_cli_bench_step_pp(int argc, char **argv) {
    bench *b = calloc(1, sizeof *b);
    if (!b) {
        mg_error(MG_ENOMEM, "bench step: out of memory");
        return 1;
    }
    opts *o = &b->o;
    o->batch = 256;
    o->steps = 10;
    o->lr = 1e-3;
    o->nwidths = 3;
    o->widths[0] = 1024, o->widths[1] = 4096, o->widths[2] = 1024;
    mg_pp_options_defaults(&o->pp);
    mg_train_pp_memory(&o->pp, 1); /* SGD with momentum */
    int rc = parse(o, argc, argv), code = 0;
    if (rc == 1) {
        if (mg_rank() == 0) printf("usage: meshgrad bench %s\n", usage_text);
    } else if (rc != MG_OK) {
        code = 2;
    } else {
        mg_pp_exec_stats last;
        rc = setup(b);
        if (rc == MG_OK) rc = measure(b, &last);
        if (rc == MG_OK) rc = report(b);
        code = rc == MG_OK ? 0 : rc == MG_EINVAL ? 2 : 1;
    }
    if (b->have_model) mg_model_free(&b->model);
    mg_pipeline_free(&b->p);
    mg_mesh_free(b->mesh);
    free(b->x);
    free(b->target);
    free(b->times);
    free(b);
    return code;
}
